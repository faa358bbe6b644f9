/* shard_pop: hinted pops, with a count of every shard when hints run dry
 * (see shard_pop.h). */
#include "fcgi/shard_pop.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    dq_store *s;
    shard_hints *hints;
    store_pop_req q; /* without ids to finish: they went first */
    store_jobs *out;
    store_error *err;
    unsigned char *down; /* per shard: did not answer */
    int counted;         /* the hints come from a count of every shard, kept
                            whole by the messages since, or this run's own */
    int answered;
    int unknown; /* a shard's pop had an unknown outcome (504): asked no more */
    dq_status failure;
} pop_round;

/* Pops from shard k what is still wanted, of the first nfirst topics only,
 * and corrects the hints: the jobs taken, and zero for each of those
 * topics when the shard had fewer. */
static void pop_from(pop_round *p, int k, size_t nfirst)
{
    size_t before = p->out->n;
    store_pop_req q = p->q;
    q.count = p->q.count - (int)before;
    q.ntopics = nfirst;
    uint64_t seen = hints_seen(p->hints);
    int64_t token_wait = p->out->token_wait_ms;
    p->out->token_wait_ms = 0;
    dq_status st = store_pop(p->s, k, &q, p->out, p->err);
    int throttled = p->out->token_wait_ms > 0;
    if (token_wait > 0 && (!throttled || token_wait < p->out->token_wait_ms))
        p->out->token_wait_ms = token_wait;
    if (st != DQ_OK) {
        p->down[k] = 1;
        p->failure = st;
        p->unknown |= st == DQ_TIMEOUT;
        return;
    }
    p->answered = 1;
    for (size_t i = before; i < p->out->n; i++)
        hints_take(p->hints, p->out->jobs[i].topic, p->out->jobs[i].topic_len, k, 1);
    if (throttled) {
        /* A topic's `rate` held back jobs the shard has: the hints stay (a
         * pop goes there again when its token is due, and learns when that
         * is), and the shard is not asked again this round. */
        p->down[k] = 1;
        return;
    }
    if ((int)(p->out->n - before) < q.count) {
        for (size_t t = 0; t < nfirst; t++)
            hints_set(p->hints, q.topics[t], strlen(q.topics[t]), k, 0, seen);
    }
}

/* Pops from the shards the hints name until count jobs are in, a topic's
 * jobs in every shard before the next topic's: a shard is asked only for
 * the topics up to the first the hints know jobs of. Before a later topic's
 * jobs are taken on the hints' word that the earlier topics have none, a
 * count must have said so (a ready message of an earlier topic may not be
 * read yet). Each pop either fills the count or zeroes the hints it
 * followed, so this ends. */
static void pop_hinted(pop_round *p)
{
    while ((int)p->out->n < p->q.count) {
        size_t nfirst;
        int k = hints_pick(p->hints, p->q.topics, p->q.ntopics, p->down, &nfirst);
        if (k < 0 || (nfirst > 1 && !p->counted))
            return;
        pop_from(p, k, nfirst);
    }
}

/* Sets the hints from an exact count of every shard that answers. */
static void count_shards(pop_round *p)
{
    int shards = store_shards(p->s);
    size_t ntopics = p->q.ntopics;
    int64_t *counts = util_xcalloc((size_t)shards * ntopics, sizeof *counts);
    p->counted = 1;
    uint64_t seen = hints_seen(p->hints);
    dq_status st = store_ready_counts(p->s, p->q.topics, ntopics, counts, p->err);
    if (st != DQ_OK)
        p->failure = st;
    int every_shard = 1;
    for (int k = 0; k < shards; k++) {
        for (size_t t = 0; t < ntopics; t++) {
            int64_t n = counts[(size_t)k * ntopics + t];
            if (n < 0) {
                p->down[k] = 1;
                every_shard = 0;
                if (p->failure == DQ_OK)
                    p->failure = DQ_UNAVAILABLE;
                continue;
            }
            p->answered = 1;
            hints_set(p->hints, p->q.topics[t], strlen(p->q.topics[t]), k, n, seen);
        }
    }
    for (size_t t = 0; t < ntopics && every_shard; t++)
        hints_mark_counted(p->hints, p->q.topics[t], strlen(p->q.topics[t]), seen);
    free(counts);
}

/* The finishes of a finish-and-pop over several shards. DQ_OK when some
 * shard's call worked (the outcomes say which), else the failure. */
static dq_status finish_first(dq_store *s, const store_pop_req *q, store_error *err)
{
    dq_status st = store_remove(s, q->allow, 1, q->finish, q->nfinish, q->finished, err);
    return st != DQ_OK && store_items_partly_done(q->finished, q->nfinish) ? DQ_OK : st;
}

dq_status shard_pop(dq_store *s, shard_hints *hints, const store_pop_req *q, int may_wait,
                    store_jobs *out, store_error *err)
{
    int shards = store_shards(s);
    if (shards == 1 || !hints)
        return store_pop(s, 0, q, out, err);
    if (q->nfinish > 0) {
        dq_status st = finish_first(s, q, err);
        if (st != DQ_OK)
            return st;
    }
    pop_round p = {s, hints, *q, out, err, util_xcalloc((size_t)shards, 1), 0, 0, 0, DQ_OK};
    p.q.nfinish = 0;
    /* A pop that will wait is woken by the next message: counted hints
     * are as good as a count for it. */
    p.counted = may_wait && hints_counted(hints, q->topics, q->ntopics);
    pop_hinted(&p);
    if ((int)out->n < q->count && !p.counted) {
        /* Fewer than asked: the hints may have missed some (a message not
         * read yet, or one from before the subscription); one count of
         * every shard tells. */
        count_shards(&p);
        pop_hinted(&p);
    }
    free(p.down);
    /* The healthy shards' jobs are answered whatever another shard did: a
     * shard whose pop had an unknown outcome may have reserved jobs, which
     * come back after their TTR (at-least-once), rather than hold every
     * other shard's deliveries hostage. Nothing from any shard: its
     * failure (504 when an outcome is unknown). */
    if (out->n > 0)
        return DQ_OK;
    if (p.unknown)
        return DQ_TIMEOUT;
    /* No failure and no answer: the counted hints said none, so no shard
     * was asked. */
    return p.answered || p.failure == DQ_OK ? DQ_OK : p.failure;
}

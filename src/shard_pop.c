/* shard_pop: hinted pops, with a count of every shard when hints run dry
 * (see shard_pop.h). */
#include "shard_pop.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    dq_store *s;
    shard_hints *hints;
    const char *const *topics;
    size_t ntopics;
    int count;
    store_jobs *out;
    store_error *err;
    unsigned char *tried; /* per shard: popped from (or failed) this round */
    unsigned char *down;  /* per shard: did not answer */
    int answered;
    dq_status failure;
} pop_round;

/* Pops from shard k what is still wanted, and corrects the hints: the
 * jobs taken, and zero for every topic when the shard had fewer. */
static void pop_from(pop_round *p, int k)
{
    p->tried[k] = 1;
    size_t before = p->out->n;
    int want = p->count - (int)before;
    dq_status st = store_pop(p->s, k, p->topics, p->ntopics, want, p->out, p->err);
    if (st != DQ_OK) {
        p->down[k] = 1;
        p->failure = st;
        return;
    }
    p->answered = 1;
    for (size_t i = before; i < p->out->n; i++)
        hints_take(p->hints, p->out->jobs[i].topic, p->out->jobs[i].topic_len, k, 1);
    if ((int)(p->out->n - before) < want) {
        for (size_t t = 0; t < p->ntopics; t++)
            hints_set(p->hints, p->topics[t], strlen(p->topics[t]), k, 0);
    }
}

/* Pops from the shards the hints name until count jobs are in. */
static void pop_hinted(pop_round *p)
{
    while ((int)p->out->n < p->count) {
        int k = hints_pick(p->hints, p->topics, p->ntopics, p->tried);
        if (k < 0)
            return;
        pop_from(p, k);
    }
}

/* Sets the hints from an exact count of every shard that answers. */
static void count_shards(pop_round *p)
{
    int shards = store_shards(p->s);
    int64_t *counts = calloc((size_t)shards * p->ntopics, sizeof *counts);
    if (!counts)
        abort();
    dq_status st = store_ready_counts(p->s, p->topics, p->ntopics, counts, p->err);
    if (st != DQ_OK)
        p->failure = st;
    for (int k = 0; k < shards; k++) {
        for (size_t t = 0; t < p->ntopics; t++) {
            int64_t n = counts[(size_t)k * p->ntopics + t];
            if (n < 0) {
                p->down[k] = 1;
                continue;
            }
            p->answered = 1;
            hints_set(p->hints, p->topics[t], strlen(p->topics[t]), k, n);
        }
    }
    free(counts);
}

dq_status shard_pop(dq_store *s, shard_hints *hints, const char *const *topics, size_t ntopics,
                    int count, store_jobs *out, store_error *err)
{
    int shards = store_shards(s);
    if (shards == 1 || !hints)
        return store_pop(s, 0, topics, ntopics, count, out, err);
    pop_round p = {s, hints, topics, ntopics, count, out, err,
                   calloc((size_t)shards, 1), calloc((size_t)shards, 1), 0, DQ_OK};
    if (!p.tried || !p.down)
        abort();
    pop_hinted(&p);
    if ((int)out->n < count) {
        /* Fewer than asked: the hints may have missed some (a message not
         * read yet); one count of every shard tells. */
        count_shards(&p);
        for (int k = 0; k < shards; k++)
            p.tried[k] |= p.down[k]; /* the shards popped gave all they had */
        pop_hinted(&p);
    }
    free(p.tried);
    free(p.down);
    if (out->n > 0 || p.answered)
        return DQ_OK;
    return p.failure != DQ_OK ? p.failure : DQ_UNAVAILABLE;
}

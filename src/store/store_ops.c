/* store_ops: the argument layout and reply of each function (see the
 * header comment of each src/store/lua/<name>.lua for the other side). */
#include "store/store_ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/store_errors.h"

const char *const store_stat_names[STORE_NSTATS] = {
    "delay",  "ready",   "reserved",    "buried", "added",  "popped",
    "finished", "deleted", "redelivered", "buries", "kicked"};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        abort();
    return p;
}

static void clear_error(store_error *err)
{
    err->detail[0] = '\0';
}

static dq_status run_one(dq_store *s, store_reply **r, store_error *err)
{
    clear_error(err);
    return store_run(s, r, err->detail, sizeof err->detail);
}

/* Keeps a reply that results point into. */
static void keep_reply(store_reply ***list, size_t *n, store_reply *r)
{
    *list = realloc(*list, (*n + 1) * sizeof **list);
    if (!*list)
        abort();
    (*list)[(*n)++] = r;
}

/* The worse of two outcomes of a split call: a misconfiguration beats a
 * failure, an unknown outcome beats "not done". */
static dq_status worse(dq_status a, dq_status b)
{
    static const dq_status order[] = {DQ_OK, DQ_UNAVAILABLE, DQ_TIMEOUT, DQ_INTERNAL,
                                      DQ_MISCONFIGURED};
    int ra = 0, rb = 0;
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++) {
        if (order[i] == a)
            ra = i;
        if (order[i] == b)
            rb = i;
    }
    return ra >= rb ? a : b;
}

/* ------------------------------------------------------------------------ */
/* Calls split by shard                                                      */
/* ------------------------------------------------------------------------ */

/* Items (jobs, ids) grouped by shard: order[] lists item indexes shard by
 * shard, first[shard]..first[shard + 1] being that shard's. */
typedef struct {
    size_t *order;
    size_t *first; /* shards + 1 entries */
} by_shard;

static by_shard group_by_shard(dq_store *s, const char *const *ids, size_t n)
{
    int shards = store_shards(s);
    by_shard g = {xcalloc(n, sizeof *g.order), xcalloc((size_t)shards + 1, sizeof *g.first)};
    int *of = xcalloc(n, sizeof *of);
    for (size_t i = 0; i < n; i++) {
        of[i] = store_shard_of(s, ids[i], strlen(ids[i]));
        g.first[of[i] + 1]++;
    }
    for (int k = 0; k < shards; k++)
        g.first[k + 1] += g.first[k];
    size_t *next = xcalloc((size_t)shards, sizeof *next);
    for (size_t i = 0; i < n; i++)
        g.order[g.first[of[i]] + next[of[i]]++] = i;
    free(next);
    free(of);
    return g;
}

static void by_shard_free(by_shard *g)
{
    free(g->order);
    free(g->first);
}

int store_item_call_failed(dq_status st)
{
    return st == DQ_UNAVAILABLE || st == DQ_TIMEOUT || st == DQ_INTERNAL || st == DQ_MISCONFIGURED;
}

int store_items_partly_done(const store_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!store_item_call_failed(items[i].status))
            return 1;
    }
    return 0;
}

/* One item's outcome: 'ok' or 'DQ_<CODE> <state>'. */
static void read_item(const store_reply *e, store_item *it)
{
    size_t len;
    const char *v = reply_str(e, &len);
    it->status = v ? store_error_status(v, len, it->state, sizeof it->state) : DQ_INTERNAL;
}

/* Reads the batch replies of a split call ('ok' / 'DQ_<CODE> <state>' per
 * item) into items; the items of a shard whose call failed get its status.
 * Returns DQ_OK, or the worst failure. */
static dq_status read_split_items(dq_store *s, const by_shard *g, store_item *items,
                                  store_error *err)
{
    dq_status result = DQ_OK;
    size_t call = 0;
    for (int k = 0; k < store_shards(s); k++) {
        size_t from = g->first[k], to = g->first[k + 1];
        if (from == to)
            continue;
        store_reply *r = NULL;
        char detail[sizeof err->detail];
        dq_status st = store_batch_result(s, call++, &r, detail, sizeof detail);
        for (size_t j = from; j < to; j++) {
            store_item *it = &items[g->order[j]];
            it->state[0] = '\0';
            it->status = st;
            if (st != DQ_OK)
                continue;
            read_item(reply_at(r, j - from), it);
        }
        store_reply_free(r);
        if (worse(st, result) != result) {
            result = st;
            snprintf(err->detail, sizeof err->detail, "%s", detail);
        }
    }
    return result;
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                    */
/* ------------------------------------------------------------------------ */

/* The layout one store's shard 0 records: 1 with *buckets and *shards, 0
 * for none, -1 when Redis did not answer. */
static int read_layout(dq_store *s, long *buckets, long *shards)
{
    store_begin(s, SCRIPT_LAYOUT, 0);
    store_reply *r = NULL;
    if (store_run(s, &r, NULL, 0) != DQ_OK)
        return -1;
    int known = !reply_is_nil(reply_at(r, 0));
    if (known) {
        *buckets = (long)reply_int(reply_at(r, 0));
        *shards = reply_is_nil(reply_at(r, 1)) ? 1 : (long)reply_int(reply_at(r, 1));
    }
    store_reply_free(r);
    return known;
}

/* Shards a new deployment on a Cluster gets per master: room for the
 * cluster to grow to about twice its masters with every master busy. */
#define SHARDS_PER_MASTER 4

/* The shard count recorded by the deployment whose shard-0 tag is that of
 * a store with `shards` shards: 1 with *recorded, 0 for none, -1 when
 * Redis did not answer. */
/* A store of cfg's deployment laid out with `shards` shards, whose shard 0
 * is "{prefix}" (1) or "{prefix:0}" (more). It keeps a pointer to the
 * config: *probe must outlive it. */
static dq_store *probe_store(const dq_config *cfg, int shards, dq_config *probe)
{
    *probe = *cfg;
    probe->shards = shards;
    dq_store *s = store_new(probe);
    if (!s)
        abort();
    return s;
}

static int recorded_shards(const dq_config *cfg, int shards, long *recorded)
{
    dq_config probe;
    dq_store *s = probe_store(cfg, shards, &probe);
    long buckets = 0;
    int known = read_layout(s, &buckets, recorded);
    store_free(s);
    return known;
}

/* Records the chosen counts in the new deployment's shard 0, or reads
 * those another process recorded first. Returns the shard count, or -1. */
static long claim_shards(const dq_config *cfg, int shards)
{
    dq_config probe;
    dq_store *s = probe_store(cfg, shards, &probe);
    store_begin(s, SCRIPT_LAYOUT_CLAIM, 0);
    store_arg_int(s, cfg->buckets);
    store_arg_int(s, shards);
    store_reply *r = NULL;
    long recorded = -1;
    if (store_run(s, &r, NULL, 0) == DQ_OK && !reply_is_nil(reply_at(r, 1)))
        recorded = (long)reply_int(reply_at(r, 1));
    store_reply_free(r);
    store_free(s);
    return recorded;
}

dq_status store_layout_choose_shards(dq_config *cfg, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s", "");
    long recorded = 0;
    int known = recorded_shards(cfg, 2, &recorded); /* "{prefix:0}" */
    if (known == 0) {
        known = recorded_shards(cfg, 1, &recorded); /* "{prefix}" */
        recorded = 1;
    }
    if (known > 0) {
        cfg->shards = (int)recorded;
        snprintf(why, whylen, "recorded by this deployment's Redis");
        return DQ_OK;
    }
    if (known < 0 && !cfg->redis_cluster[0]) {
        /* One Redis, or behind Sentinel: 1 unless Redis records another
         * count, which the functions then refuse on use (as with a count
         * set by hand); a process does not wait for Redis to start. */
        cfg->shards = 1;
        snprintf(why, whylen, "one Redis; it did not answer yet");
        return DQ_OK;
    }
    if (known < 0) {
        snprintf(why, whylen, "no Redis Cluster node answered");
        return DQ_UNAVAILABLE;
    }
    dq_store *probe = store_new(cfg);
    if (!probe)
        abort();
    int pick = store_pick_shards(probe, SHARDS_PER_MASTER);
    store_free(probe);
    if (pick == 0) {
        snprintf(why, whylen, "no Redis Cluster node answered with its slot map");
        return DQ_UNAVAILABLE;
    }
    if (pick == 1) { /* one Redis: the first add records it */
        cfg->shards = 1;
        snprintf(why, whylen, "one Redis");
        return DQ_OK;
    }
    long claimed = claim_shards(cfg, pick);
    if (claimed < 1 || claimed > DQ_SHARDS_MAX) {
        snprintf(why, whylen, "could not record the shard count in Redis");
        return DQ_UNAVAILABLE;
    }
    cfg->shards = (int)claimed;
    snprintf(why, whylen, claimed == pick ? "chosen for the Redis Cluster's masters"
                                          : "chosen by another process of this deployment");
    return DQ_OK;
}

dq_status store_layout_check(const dq_config *cfg, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s", "");
    dq_store *own = store_new(cfg);
    /* One shard keys "{prefix}", several "{prefix:i}": the other layout
     * would not see this one's jobs. */
    dq_config other_cfg = *cfg;
    other_cfg.shards = cfg->shards == 1 ? 2 : 1;
    dq_store *other = store_new(&other_cfg);
    if (!own || !other)
        abort();
    long buckets = 0, shards = 0;
    dq_status st = DQ_OK;
    int known = read_layout(own, &buckets, &shards);
    if (known < 0) {
        st = DQ_UNAVAILABLE;
    } else if (known && (buckets != cfg->buckets || shards != cfg->shards)) {
        snprintf(why, whylen, "this deployment's Redis records buckets = %ld and shards = %ld "
                              "(key %s:buckets); the configuration says buckets = %d and "
                              "shards = %d: they cannot change once jobs were added",
                 buckets, shards, store_tag(own, 0), cfg->buckets, cfg->shards);
        st = DQ_MISCONFIGURED;
    } else if (read_layout(other, &buckets, &shards) > 0) {
        snprintf(why, whylen, "Redis holds a deployment of prefix '%s' with shards = %ld (key "
                              "%s:buckets); the configuration says shards = %d: use that count "
                              "or another prefix",
                 cfg->prefix, shards, store_tag(other, 0), cfg->shards);
        st = DQ_MISCONFIGURED;
    }
    store_free(own);
    store_free(other);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */
/* ------------------------------------------------------------------------ */

static void free_kept_replies(store_reply **replies, size_t n)
{
    for (size_t i = 0; i < n; i++)
        store_reply_free(replies[i]);
    free(replies);
}

void store_jobs_free(store_jobs *j)
{
    free(j->jobs);
    free_kept_replies(j->replies, j->nreplies);
    for (size_t i = 0; i < j->ncopies; i++)
        free(j->copies[i]);
    free(j->copies);
    memset(j, 0, sizeof *j);
}

static store_job *next_job(store_jobs *j)
{
    if (j->n == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 4;
        j->jobs = realloc(j->jobs, j->cap * sizeof *j->jobs);
        if (!j->jobs)
            abort();
    }
    store_job *job = &j->jobs[j->n++];
    memset(job, 0, sizeof *job);
    return job;
}

void store_jobs_copy(store_jobs *j, const store_job *job)
{
    char *p = malloc(job->id_len + job->topic_len + job->body_len + 3);
    j->copies = realloc(j->copies, (j->ncopies + 1) * sizeof *j->copies);
    if (!p || !j->copies)
        abort();
    j->copies[j->ncopies++] = p;
    store_job *to = next_job(j);
    *to = *job;
    const char **field[] = {&to->id, &to->topic, &to->body};
    const size_t len[] = {job->id_len, job->topic_len, job->body_len};
    for (int f = 0; f < 3; f++) {
        if (!*field[f])
            continue;
        memcpy(p, *field[f], len[f]);
        p[len[f]] = '\0';
        *field[f] = p;
        p += len[f] + 1;
    }
}

void store_give_back(dq_store *s, const store_jobs *jobs, const char *why)
{
    if (!jobs->n)
        return;
    int shards = store_shards(s);
    size_t calls = 0;
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        int mine = 0;
        for (size_t i = 0; i < jobs->n; i++) {
            const store_job *j = &jobs->jobs[i];
            if (j->shard != k)
                continue;
            if (!mine++) {
                store_batch_call(s, SCRIPT_GIVE_BACK, k);
                calls++;
            }
            store_arg(s, j->id, j->id_len);
            store_arg_int(s, j->attempts);
        }
    }
    store_batch_run(s);
    int64_t back = 0;
    for (size_t c = 0; c < calls; c++) {
        store_reply *r = NULL;
        if (store_batch_result(s, c, &r, NULL, 0) == DQ_OK)
            back += reply_int(r);
        else if ((r = store_batch_unconfirmed(s, c)) != NULL)
            back += reply_int(r); /* done on the master all the same */
        store_reply_free(r);
    }
    log_warn("%" PRId64 " of %zu reserved jobs ready again at once, uncounted, as %s; any other "
             "comes back after its TTR or callback deadline", back, jobs->n, why);
}

/* Gives back the jobs of call 0 of the batch just run when Redis ran it
 * but replicas did not confirm it (read_one: how to read each job of its
 * reply, from index `first` on). */
static void give_back_unconfirmed(dq_store *s, int shard, size_t first,
                                  void (*read_one)(const store_reply *, store_job *))
{
    store_reply *r = store_batch_unconfirmed(s, 0);
    if (!r)
        return;
    store_jobs taken = {0};
    keep_reply(&taken.replies, &taken.nreplies, r);
    for (size_t i = first; i < reply_len(r); i++) {
        store_job *j = next_job(&taken);
        read_one(reply_at(r, i), j);
        j->shard = shard;
    }
    store_give_back(s, &taken, "their reservations lack the replicas' confirmation");
    store_jobs_free(&taken);
}

dq_status store_add(dq_store *s, const char *allow, const dq_job_spec *jobs,
                    const char *const *ids, size_t n, store_item *items, store_error *err)
{
    clear_error(err);
    by_shard g = group_by_shard(s, ids, n);
    store_batch_begin(s);
    for (int k = 0; k < store_shards(s); k++) {
        size_t from = g.first[k], to = g.first[k + 1];
        if (from == to)
            continue;
        store_batch_call(s, SCRIPT_ADD, k);
        store_arg_str(s, allow);
        store_arg_int(s, store_buckets(s));
        store_arg_int(s, store_shards(s));
        store_arg_int(s, (int64_t)(to - from));
        for (size_t j = from; j < to; j++) {
            size_t i = g.order[j];
            const dq_job_spec *job = &jobs[i];
            size_t idlen = strlen(ids[i]);
            store_arg(s, ids[i], idlen);
            store_arg_str(s, job->topic);
            store_arg(s, job->body, job->body_len);
            store_arg_int(s, job->ttr_ms);
            store_arg_int(s, job->retries);
            store_arg_int(s, job->delay_ms);
            store_arg_int(s, job->at_ms);
            store_arg_int(s, store_bucket_of(s, ids[i], idlen));
            store_arg(s, job->backoff ? job->backoff : "", job->backoff ? job->backoff_len : 0);
            store_arg_str(s, job->url ? job->url : "");
            store_arg_int(s, job->cb_timeout_ms);
        }
    }
    store_batch_run(s);
    dq_status st = read_split_items(s, &g, items, err);
    by_shard_free(&g);
    return st;
}

/* {id, topic, body, attempts, ttr_ms} */
static void read_popped(const store_reply *e, store_job *j)
{
    j->id = reply_str(reply_at(e, 0), &j->id_len);
    j->topic = reply_str(reply_at(e, 1), &j->topic_len);
    j->body = reply_str(reply_at(e, 2), &j->body_len);
    j->attempts = reply_int(reply_at(e, 3));
    j->ttr_ms = reply_int(reply_at(e, 4));
    j->state = "reserved";
}

dq_status store_pop(dq_store *s, int shard, const store_pop_req *q, store_jobs *out,
                    store_error *err)
{
    store_begin(s, SCRIPT_POP, shard);
    store_arg_str(s, q->allow);
    store_arg_int(s, q->count);
    store_arg_int(s, (int64_t)q->nfinish);
    for (size_t i = 0; i < q->nfinish; i++)
        store_arg_str(s, q->finish[i]);
    for (size_t i = 0; i < q->ntopics; i++)
        store_arg_str(s, q->topics[i]);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_TIMEOUT) /* reply: {finish items, job, job, ...} */
        give_back_unconfirmed(s, shard, 1, read_popped);
    for (size_t i = 0; i < q->nfinish; i++) {
        store_item *it = &q->finished[i];
        it->state[0] = '\0';
        it->status = st;
        if (st != DQ_OK)
            continue;
        read_item(reply_at(reply_at(r, 0), i), it);
    }
    if (st != DQ_OK)
        return st;
    for (size_t i = 1; i < reply_len(r); i++) {
        store_job *j = next_job(out);
        read_popped(reply_at(r, i), j);
        j->shard = shard;
    }
    keep_reply(&out->replies, &out->nreplies, r);
    return DQ_OK;
}

dq_status store_ready_counts(dq_store *s, const char *const *topics, size_t ntopics,
                             int64_t *counts, store_error *err)
{
    clear_error(err);
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        store_batch_call(s, SCRIPT_READY, k);
        for (size_t t = 0; t < ntopics; t++)
            store_arg_str(s, topics[t]);
    }
    store_batch_run(s);
    dq_status result = DQ_UNAVAILABLE;
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        for (size_t t = 0; t < ntopics; t++)
            counts[(size_t)k * ntopics + t] = st == DQ_OK ? reply_int(reply_at(r, t)) : -1;
        if (st == DQ_OK)
            result = DQ_OK;
        else if (result != DQ_OK)
            result = st;
        store_reply_free(r);
    }
    if (result == DQ_OK)
        clear_error(err);
    return result;
}

/* A function that takes allow, an optional word (NULL: none), then ids,
 * and answers one item per id: one call per shard, sent together. */
static dq_status split_ids_call(dq_store *s, dq_script fn, const char *allow, const char *word,
                                const char *const *ids, size_t n, store_item *items,
                                store_error *err)
{
    clear_error(err);
    by_shard g = group_by_shard(s, ids, n);
    store_batch_begin(s);
    for (int k = 0; k < store_shards(s); k++) {
        size_t from = g.first[k], to = g.first[k + 1];
        if (from == to)
            continue;
        store_batch_call(s, fn, k);
        store_arg_str(s, allow);
        if (word)
            store_arg_str(s, word);
        for (size_t j = from; j < to; j++)
            store_arg_str(s, ids[g.order[j]]);
    }
    store_batch_run(s);
    dq_status st = read_split_items(s, &g, items, err);
    by_shard_free(&g);
    return st;
}

dq_status store_remove(dq_store *s, const char *allow, int finished, const char *const *ids,
                       size_t n, store_item *items, store_error *err)
{
    return split_ids_call(s, SCRIPT_REMOVE, allow, finished ? "finished" : "deleted", ids, n,
                          items, err);
}

dq_status store_kick_ids(dq_store *s, const char *allow, const char *const *ids, size_t n,
                         store_item *items, store_error *err)
{
    return split_ids_call(s, SCRIPT_KICK_IDS, allow, NULL, ids, n, items, err);
}

/* One-id functions: allow, id, then extra arguments, in the id's shard. */
static void one_id_call(dq_store *s, dq_script fn, const char *allow, const char *id)
{
    store_begin(s, fn, store_shard_of(s, id, strlen(id)));
    store_arg_str(s, allow);
    store_arg_str(s, id);
}

static void read_job_view(const store_reply *r, store_job *j);
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen);

dq_status store_get(dq_store *s, const char *allow, const char *id, store_jobs *out,
                    store_error *err)
{
    memset(out, 0, sizeof *out);
    one_id_call(s, SCRIPT_GET, allow, id);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st != DQ_OK)
        return st;
    keep_reply(&out->replies, &out->nreplies, r);
    store_job *j = next_job(out);
    j->id = id;
    j->id_len = strlen(id);
    j->shard = store_shard_of(s, id, j->id_len);
    read_job_view(r, j);
    return DQ_OK;
}

/* A job as common.lua's job_view answers it: {state, topic, body, due,
 * ttr_ms, attempts, retries, created, backoff, url, timeout_ms, last
 * attempt, its status, its error}. */
static void read_job_view(const store_reply *r, store_job *j)
{
    j->state = reply_str(reply_at(r, 0), NULL);
    j->topic = reply_str(reply_at(r, 1), &j->topic_len);
    j->body = reply_str(reply_at(r, 2), &j->body_len);
    j->due = reply_int(reply_at(r, 3));
    j->ttr_ms = reply_int(reply_at(r, 4));
    j->attempts = reply_int(reply_at(r, 5));
    j->retries = reply_int(reply_at(r, 6));
    j->created = reply_int(reply_at(r, 7));
    j->backoff = reply_str(reply_at(r, 8), &j->backoff_len);
    j->url = reply_str(reply_at(r, 9), &j->url_len);
    j->cb_timeout_ms = reply_int(reply_at(r, 10));
    j->last_at = reply_int(reply_at(r, 11));
    j->last_status = reply_int(reply_at(r, 12));
    j->last_error = reply_str(reply_at(r, 13), &j->last_error_len);
}

/* Listing order: by score, then by id in byte order (as a sorted set
 * orders members of equal score). */
static int job_pos_cmp(const void *a, const void *b)
{
    const store_job *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return name_cmp(x->id, x->id_len, y->id, y->id_len);
}

/* Each shard answers its first `limit` jobs after the cursor (and whether
 * more follow); the first `limit` of their union are the page. A job a
 * shard did not return comes after that shard's last one, and so after
 * the page's last one whenever the shard filled its `limit`. */
dq_status store_jobs_page(dq_store *s, const char *topic, const char *state, const char *cursor,
                          int limit, store_jobs *out, char *next, size_t nextlen,
                          store_error *err)
{
    memset(out, 0, sizeof *out);
    clear_error(err);
    next[0] = '\0';
    char score[24] = "";
    const char *after_id = "";
    if (cursor) {
        const char *colon = strchr(cursor, ':');
        if (!colon || (size_t)(colon - cursor) >= sizeof score)
            return DQ_BAD_REQUEST; /* request.c checked the shape */
        memcpy(score, cursor, (size_t)(colon - cursor));
        score[colon - cursor] = '\0';
        after_id = colon + 1;
    }
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        store_batch_call(s, SCRIPT_JOBS, k);
        store_arg_str(s, topic);
        store_arg_str(s, state);
        store_arg_int(s, limit);
        store_arg_str(s, score);
        store_arg_str(s, after_id);
    }
    store_batch_run(s);
    int more = 0;
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        if (st != DQ_OK) {
            store_jobs_free(out);
            return st; /* a page missing a shard would skip its jobs */
        }
        keep_reply(&out->replies, &out->nreplies, r);
        /* {more, id, score, job_view, ...} */
        more |= reply_int(reply_at(r, 0)) == 1;
        for (size_t i = 1; i + 2 < reply_len(r); i += 3) {
            store_job *j = next_job(out);
            j->id = reply_str(reply_at(r, i), &j->id_len);
            j->pos = reply_int(reply_at(r, i + 1));
            j->shard = k;
            read_job_view(reply_at(r, i + 2), j);
            if (!j->id)
                out->n--;
        }
    }
    if (out->n > 1)
        qsort(out->jobs, out->n, sizeof *out->jobs, job_pos_cmp);
    if (out->n > (size_t)limit) {
        out->n = (size_t)limit;
        more = 1;
    }
    if (more && out->n > 0) {
        const store_job *last = &out->jobs[out->n - 1];
        snprintf(next, nextlen, "%lld:%.*s", (long long)last->pos, (int)last->id_len, last->id);
    }
    return DQ_OK;
}

dq_status store_reschedule(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                           int64_t at_ms, char state[STORE_STATE_MAX], int64_t *due,
                           store_error *err)
{
    one_id_call(s, SCRIPT_RESCHEDULE, allow, id);
    store_arg_int(s, delay_ms);
    store_arg_int(s, at_ms);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = reply_str(reply_at(r, 0), NULL);
        snprintf(state, STORE_STATE_MAX, "%s", v ? v : "");
        *due = reply_int(reply_at(r, 1));
    }
    store_reply_free(r);
    return st;
}

/* {id, topic, body, url, attempt, timeout_ms} */
static void read_taken(const store_reply *e, store_job *j)
{
    j->id = reply_str(reply_at(e, 0), &j->id_len);
    j->topic = reply_str(reply_at(e, 1), &j->topic_len);
    j->body = reply_str(reply_at(e, 2), &j->body_len);
    j->url = reply_str(reply_at(e, 3), &j->url_len);
    j->attempts = reply_int(reply_at(e, 4));
    j->cb_timeout_ms = reply_int(reply_at(e, 5));
    j->state = "reserved";
}

void store_push_take(dq_store *s, const int *limits, int grace_ms, store_jobs *out,
                     dq_status *status)
{
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        if (limits[k] <= 0)
            continue;
        store_batch_call(s, SCRIPT_PUSH_TAKE, k);
        store_arg_int(s, limits[k]);
        store_arg_int(s, grace_ms);
    }
    store_batch_run(s);
    store_jobs unconfirmed = {0};
    size_t call = 0;
    for (int k = 0; k < shards; k++) {
        if (limits[k] <= 0)
            continue;
        store_reply *r = NULL;
        status[k] = store_batch_result(s, call, &r, NULL, 0);
        store_jobs *to = out;
        if (status[k] != DQ_OK) {
            r = store_batch_unconfirmed(s, call);
            to = &unconfirmed;
        }
        call++;
        if (!r)
            continue;
        keep_reply(&to->replies, &to->nreplies, r);
        for (size_t i = 0; i < reply_len(r); i++) {
            store_job *j = next_job(to);
            read_taken(reply_at(r, i), j);
            j->shard = k;
        }
    }
    store_give_back(s, &unconfirmed, "their reservations lack the replicas' confirmation");
    store_jobs_free(&unconfirmed);
}

void store_push_done(dq_store *s, store_push_outcome *o, size_t n)
{
    store_batch_begin(s);
    for (size_t i = 0; i < n; i++) {
        store_batch_call(s, SCRIPT_PUSH_DONE, store_shard_of(s, o[i].id, strlen(o[i].id)));
        store_arg_str(s, o[i].id);
        store_arg_int(s, o[i].attempt);
        store_arg_str(s, o[i].outcome);
        store_arg_int(s, o[i].wait_ms);
        store_arg_int(s, o[i].status);
        store_arg_str(s, o[i].error);
    }
    store_batch_run(s);
    for (size_t i = 0; i < n; i++) {
        store_reply *r = NULL;
        o[i].result = store_batch_result(s, i, &r, NULL, 0);
        const char *st = reply_str(r, NULL);
        snprintf(o[i].state, sizeof o[i].state, "%s", o[i].result == DQ_OK && st ? st : "");
        store_reply_free(r);
    }
}

dq_status store_touch(dq_store *s, const char *allow, const char *id, int64_t *deadline,
                      store_error *err)
{
    one_id_call(s, SCRIPT_TOUCH, allow, id);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK)
        *deadline = reply_int(r);
    store_reply_free(r);
    return st;
}

dq_status store_release(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                        char state[STORE_STATE_MAX], store_error *err)
{
    one_id_call(s, SCRIPT_RELEASE, allow, id);
    store_arg_int(s, delay_ms);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = reply_str(r, NULL);
        snprintf(state, STORE_STATE_MAX, "%s", v ? v : "");
    }
    store_reply_free(r);
    return st;
}

dq_status store_bury(dq_store *s, const char *allow, const char *id, store_error *err)
{
    one_id_call(s, SCRIPT_BURY, allow, id);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    store_reply_free(r);
    return st;
}

dq_status store_kick(dq_store *s, const char *topic, int count, int64_t *kicked,
                     store_error *err)
{
    *kicked = 0;
    dq_status result = DQ_OK;
    for (int k = 0; k < store_shards(s) && *kicked < count; k++) {
        store_begin(s, SCRIPT_KICK, k);
        store_arg_str(s, topic);
        store_arg_int(s, count - *kicked);
        store_reply *r = NULL;
        dq_status st = run_one(s, &r, err);
        if (st == DQ_OK)
            *kicked += reply_int(r);
        else
            result = worse(result, st);
        store_reply_free(r);
    }
    /* Jobs kicked in the shards that answered are kicked: say so. */
    return *kicked > 0 ? DQ_OK : result;
}

/* ------------------------------------------------------------------------ */
/* Stats                                                                     */
/* ------------------------------------------------------------------------ */

/* Adds a flat {field, value, ...} reply into v. */
static void add_fields(int64_t v[STORE_NSTATS], const store_reply *fields)
{
    for (size_t i = 0; i + 1 < reply_len(fields); i += 2) {
        const char *f = reply_str(reply_at(fields, i), NULL);
        if (f && f[0] == 'p' && strcmp(f, "paused") == 0)
            continue; /* topic_extras() */
        for (int k = 0; f && k < STORE_NSTATS; k++) {
            if (strcmp(f, store_stat_names[k]) == 0) {
                v[k] += reply_int(reply_at(fields, i + 1));
                break;
            }
        }
    }
}

/* The per-topic figures stats.lua appends: paused (any shard), and the
 * oldest ready age (the largest of the shards'). */
static void topic_extras(store_topic_stats *t, const store_reply *fields)
{
    for (size_t i = 0; i + 1 < reply_len(fields); i += 2) {
        const char *f = reply_str(reply_at(fields, i), NULL);
        int64_t v = reply_int(reply_at(fields, i + 1));
        if (f && strcmp(f, "paused") == 0)
            t->paused |= v == 1;
        else if (f && strcmp(f, "ready_age") == 0 && v > t->ready_age_ms)
            t->ready_age_ms = v;
    }
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static int topic_cmp(const void *a, const void *b)
{
    const store_topic_stats *x = a, *y = b;
    return name_cmp(x->name, x->name_len, y->name, y->name_len);
}

/* Sorts the topics by name and sums the entries of one name (a topic has
 * one per shard that knows it) into one. */
static void merge_topics(store_stats *out)
{
    qsort(out->topics, out->n, sizeof *out->topics, topic_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < out->n; i++) {
        store_topic_stats *t = &out->topics[i];
        if (kept && topic_cmp(&out->topics[kept - 1], t) == 0) {
            for (int k = 0; k < STORE_NSTATS; k++)
                out->topics[kept - 1].v[k] += t->v[k];
            out->topics[kept - 1].paused |= t->paused;
            if (t->ready_age_ms > out->topics[kept - 1].ready_age_ms)
                out->topics[kept - 1].ready_age_ms = t->ready_age_ms;
        } else {
            out->topics[kept++] = *t;
        }
    }
    out->n = kept;
}

/* Each shard answers with its first `limit` topics after the cursor; the
 * first `limit` names of their union are the page, and every shard that
 * knows a topic of the page returned it (it would have had `limit` smaller
 * names otherwise, all of them in the union before it). */
dq_status store_stats_read(dq_store *s, const char *topic, const char *cursor, int limit,
                           store_stats *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    clear_error(err);
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        store_batch_call(s, SCRIPT_STATS, k);
        store_arg_str(s, topic ? topic : "");
        store_arg_str(s, cursor ? cursor : "");
        store_arg_int(s, limit);
    }
    store_batch_run(s);
    /* {totals, next cursor or nil, topics known, topic, fields, ...} */
    size_t cap = (size_t)shards * (size_t)(limit > 0 ? limit : 1);
    if (topic)
        cap = (size_t)shards;
    out->topics = xcalloc(cap, sizeof *out->topics);
    int more = 0;
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        if (st != DQ_OK) {
            store_stats_free(out);
            return st; /* figures missing a shard would be wrong, not partial */
        }
        keep_reply(&out->replies, &out->nreplies, r);
        add_fields(out->totals, reply_at(r, 0));
        more |= !reply_is_nil(reply_at(r, 1));
        int64_t known = reply_int(reply_at(r, 2));
        if (known > out->topics_known)
            out->topics_known = known;
        for (size_t i = 3; i + 1 < reply_len(r) && out->n < cap; i += 2) {
            store_topic_stats *t = &out->topics[out->n];
            t->name = reply_str(reply_at(r, i), &t->name_len);
            if (t->name) {
                add_fields(t->v, reply_at(r, i + 1));
                t->ready_age_ms = -1;
                topic_extras(t, reply_at(r, i + 1));
                out->n++;
            }
        }
    }
    merge_topics(out);
    if (!topic && limit > 0 && out->n > (size_t)limit) {
        out->n = (size_t)limit;
        more = 1;
    }
    if (more && out->n > 0)
        out->next_cursor = out->topics[out->n - 1].name; /* NUL-terminated by hiredis */
    return DQ_OK;
}

void store_stats_free(store_stats *st)
{
    free(st->topics);
    free_kept_replies(st->replies, st->nreplies);
    memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------------ */
/* Pause / resume, lag                                                       */
/* ------------------------------------------------------------------------ */

#define RESUME_CHUNK 1000 /* held push jobs moved back per call */

static void pause_call(dq_store *s, int shard, const char *topic, int pause)
{
    store_batch_call(s, SCRIPT_PAUSE, shard);
    store_arg_str(s, pause ? "pause" : "resume");
    store_arg_str(s, topic);
    store_arg_int(s, RESUME_CHUNK);
}

dq_status store_pause(dq_store *s, const char *topic, int pause, store_error *err)
{
    clear_error(err);
    int shards = store_shards(s);
    int *todo = xcalloc((size_t)shards, sizeof *todo);
    for (int k = 0; k < shards; k++)
        todo[k] = 1;
    dq_status result = DQ_OK;
    for (int left = shards; left > 0 && result == DQ_OK;) {
        store_batch_begin(s);
        int *shard_of = xcalloc((size_t)left, sizeof *shard_of);
        size_t n = 0;
        for (int k = 0; k < shards; k++) {
            if (todo[k]) {
                pause_call(s, k, topic, pause);
                shard_of[n++] = k;
            }
        }
        store_batch_run(s);
        left = 0;
        for (size_t i = 0; i < n; i++) {
            store_reply *r = NULL;
            char detail[sizeof err->detail];
            dq_status st = store_batch_result(s, i, &r, detail, sizeof detail);
            if (st != DQ_OK && result == DQ_OK) {
                result = st;
                snprintf(err->detail, sizeof err->detail, "%s", detail);
            }
            /* A resume calls again while the shard still holds jobs back. */
            todo[shard_of[i]] = st == DQ_OK && reply_int(r) > 0;
            left += todo[shard_of[i]];
            store_reply_free(r);
        }
        free(shard_of);
    }
    free(todo);
    return result;
}

dq_status store_lag_read(dq_store *s, store_lag *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    out->push_age_ms = -1;
    clear_error(err);
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++)
        store_batch_call(s, SCRIPT_LAG, k);
    store_batch_run(s);
    /* {now, overdue due or -1, push since or -1, paused, {timer, late, at, ...}} */
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        if (st != DQ_OK) {
            store_reply_free(r);
            store_lag_free(out);
            return st;
        }
        keep_reply(&out->replies, &out->nreplies, r);
        int64_t now = reply_int(reply_at(r, 0)), due = reply_int(reply_at(r, 1));
        int64_t since = reply_int(reply_at(r, 2)), paused = reply_int(reply_at(r, 3));
        if (due >= 0 && now - due > out->overdue_ms)
            out->overdue_ms = now - due;
        if (since >= 0 && now - since > out->push_age_ms)
            out->push_age_ms = now - since > 0 ? now - since : 0;
        if (paused > out->paused_topics)
            out->paused_topics = paused;
        const store_reply *t = reply_at(r, 4);
        size_t nt = reply_len(t) / 3;
        out->timers = realloc(out->timers, (out->ntimers + nt + 1) * sizeof *out->timers);
        if (!out->timers)
            abort();
        for (size_t i = 0; i < nt; i++) {
            store_timer_lag *l = &out->timers[out->ntimers];
            l->timer = reply_str(reply_at(t, 3 * i), NULL);
            if (!l->timer)
                continue;
            l->shard = k;
            l->late_ms = reply_int(reply_at(t, 3 * i + 1));
            l->age_ms = now - reply_int(reply_at(t, 3 * i + 2));
            out->ntimers++;
        }
    }
    return DQ_OK;
}

void store_lag_free(store_lag *l)
{
    free(l->timers);
    free_kept_replies(l->replies, l->nreplies);
    memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------------------ */
/* Schedules                                                                 */
/* ------------------------------------------------------------------------ */

void store_schedules_free(store_schedules *l)
{
    free(l->list);
    for (size_t i = 0; i < l->nreplies; i++)
        store_reply_free(l->replies[i]);
    free(l->replies);
    memset(l, 0, sizeof *l);
}

static store_schedule *next_schedule(store_schedules *l)
{
    l->list = realloc(l->list, (l->n + 1) * sizeof *l->list);
    if (!l->list)
        abort();
    store_schedule *sc = &l->list[l->n++];
    memset(sc, 0, sizeof *sc);
    return sc;
}

/* A cron field of '' means the schedule counts seconds (every). */
static const char *cron_or_null(const store_reply *r)
{
    size_t n = 0;
    const char *v = reply_str(r, &n);
    return v && n ? v : NULL;
}

dq_status store_schedule_put(dq_store *s, const char *allow, const dq_schedule_spec *sc,
                             int64_t anchor_s, int64_t next_ms, int *replaced, store_error *err)
{
    one_id_call(s, SCRIPT_SCHEDULE, allow, sc->id);
    store_arg_str(s, sc->topic);
    store_arg(s, sc->body, sc->body_len);
    store_arg_int(s, sc->ttr_ms);
    store_arg_int(s, sc->retries);
    store_arg_str(s, sc->cron ? sc->cron : "");
    store_arg_int(s, sc->cron ? 0 : sc->every_s);
    store_arg_str(s, sc->tz);
    store_arg_int(s, sc->start_s);
    store_arg_int(s, sc->end_s);
    store_arg_int(s, anchor_s);
    store_arg_int(s, next_ms);
    store_arg(s, sc->backoff ? sc->backoff : "", sc->backoff ? sc->backoff_len : 0);
    store_arg_str(s, sc->url ? sc->url : "");
    store_arg_int(s, sc->cb_timeout_ms);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = reply_str(reply_at(r, 0), NULL);
        *replaced = v && strcmp(v, "replaced") == 0;
    }
    store_reply_free(r);
    return st;
}

dq_status store_unschedule(dq_store *s, const char *allow, const char *id, store_error *err)
{
    one_id_call(s, SCRIPT_UNSCHEDULE, allow, id);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    store_reply_free(r);
    return st;
}

/* {id, {topic, cron, every, tz, start, end, anchor, next, last, missed,
 * ttr, retries, created, body}, ...} */
static void read_schedules(const store_reply *r, store_schedules *out)
{
    for (size_t i = 0; i + 1 < reply_len(r); i += 2) {
        const store_reply *f = reply_at(r, i + 1);
        store_schedule *sc = next_schedule(out);
        sc->id = reply_str(reply_at(r, i), &sc->id_len);
        sc->topic = reply_str(reply_at(f, 0), &sc->topic_len);
        sc->cron = cron_or_null(reply_at(f, 1));
        sc->every_s = reply_int(reply_at(f, 2));
        sc->tz = reply_str(reply_at(f, 3), NULL);
        sc->start_s = reply_int(reply_at(f, 4));
        sc->end_s = reply_int(reply_at(f, 5));
        sc->anchor_s = reply_int(reply_at(f, 6));
        sc->next_ms = reply_int(reply_at(f, 7));
        sc->last_ms = reply_int(reply_at(f, 8));
        sc->missed = reply_int(reply_at(f, 9));
        sc->ttr_ms = reply_int(reply_at(f, 10));
        sc->retries = reply_int(reply_at(f, 11));
        sc->created_ms = reply_int(reply_at(f, 12));
        sc->body = reply_str(reply_at(f, 13), &sc->body_len);
    }
}

static int schedule_cmp(const void *a, const void *b)
{
    const store_schedule *x = a, *y = b;
    return name_cmp(x->id, x->id_len, y->id, y->id_len);
}

dq_status store_schedules_read(dq_store *s, const char *allow, const char *id,
                               store_schedules *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    clear_error(err);
    if (id) {
        one_id_call(s, SCRIPT_SCHEDULES, allow, id);
        store_reply *r = NULL;
        dq_status st = run_one(s, &r, err);
        if (st != DQ_OK)
            return st;
        keep_reply(&out->replies, &out->nreplies, r);
        read_schedules(r, out);
        return DQ_OK;
    }
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        store_batch_call(s, SCRIPT_SCHEDULES, k);
        store_arg_str(s, allow);
        store_arg_str(s, "");
    }
    store_batch_run(s);
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        if (st != DQ_OK) {
            store_schedules_free(out);
            return st; /* a list missing a shard would look complete */
        }
        keep_reply(&out->replies, &out->nreplies, r);
        read_schedules(r, out);
    }
    if (out->n > 1)
        qsort(out->list, out->n, sizeof *out->list, schedule_cmp);
    return DQ_OK;
}

dq_status store_sched_due(dq_store *s, int shard, int limit, int64_t *redis_now,
                          int64_t *earliest, store_schedules *out)
{
    memset(out, 0, sizeof *out);
    store_error err;
    store_begin(s, SCRIPT_SCHED_DUE, shard);
    store_arg_int(s, limit);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, &err);
    if (st != DQ_OK)
        return st;
    keep_reply(&out->replies, &out->nreplies, r);
    *redis_now = reply_int(reply_at(r, 0));
    *earliest = reply_int(reply_at(r, 1));
    /* ..., id, {cron, every, tz, start, end, anchor, next}, ... */
    for (size_t i = 2; i + 1 < reply_len(r); i += 2) {
        const store_reply *f = reply_at(r, i + 1);
        store_schedule *sc = next_schedule(out);
        sc->id = reply_str(reply_at(r, i), &sc->id_len);
        sc->cron = cron_or_null(reply_at(f, 0));
        sc->every_s = reply_int(reply_at(f, 1));
        sc->tz = reply_str(reply_at(f, 2), NULL);
        sc->start_s = reply_int(reply_at(f, 3));
        sc->end_s = reply_int(reply_at(f, 4));
        sc->anchor_s = reply_int(reply_at(f, 5));
        sc->next_ms = reply_int(reply_at(f, 6));
        sc->last_ms = -1;
        if (!sc->id || !sc->tz) /* removed between the two reads: none */
            out->n--;
    }
    return DQ_OK;
}

void store_fire_many(dq_store *s, int shard, store_fire_call *calls, size_t n)
{
    store_batch_begin(s);
    for (size_t i = 0; i < n; i++) {
        store_fire_call *c = &calls[i];
        /* The fire's job id, for its bucket. */
        char job_id[DQ_ID_MAX + 32];
        int len = snprintf(job_id, sizeof job_id, "%s@%lld", c->id,
                           (long long)(c->fire_ms >= 0 ? c->fire_ms / 1000 : 0));
        if (len < 0 || (size_t)len >= sizeof job_id)
            len = 0;
        store_batch_call(s, SCRIPT_FIRE, shard);
        store_arg_str(s, c->id);
        store_arg_int(s, c->expected_ms);
        store_arg_int(s, c->fire_ms);
        store_arg_int(s, c->next_ms);
        store_arg_int(s, c->missed);
        store_arg_int(s, store_bucket_of(s, job_id, (size_t)len));
    }
    store_batch_run(s);
    for (size_t i = 0; i < n; i++) {
        store_reply *r = NULL;
        calls[i].status = store_batch_result(s, i, &r, NULL, 0);
        const char *v = calls[i].status == DQ_OK ? reply_str(r, NULL) : NULL;
        calls[i].fired = v && strcmp(v, "fired") == 0;
        store_reply_free(r);
    }
}

/* ------------------------------------------------------------------------ */
/* Timer                                                                     */
/* ------------------------------------------------------------------------ */

void store_move_many(dq_store *s, store_move_call *calls, size_t n, int limit,
                     store_error *first_err)
{
    clear_error(first_err);
    store_batch_begin(s);
    for (size_t i = 0; i < n; i++) {
        store_batch_call(s, SCRIPT_MOVE, calls[i].shard);
        store_arg_int(s, calls[i].bucket);
        store_arg_int(s, limit);
        store_arg_str(s, calls[i].timer ? calls[i].timer : "");
    }
    store_batch_run(s);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        store_reply *r = NULL;
        store_move_call *c = &calls[i];
        c->status = store_batch_result(s, i, &r, NULL, 0);
        if (c->status != DQ_OK && !failed++)
            store_batch_result(s, i, NULL, first_err->detail, sizeof first_err->detail);
        if (c->status == DQ_OK) {
            c->moved = reply_int(reply_at(r, 0));
            c->earliest = reply_int(reply_at(r, 1));
            c->redis_now = reply_int(reply_at(r, 2));
        }
        store_reply_free(r);
    }
}

static void lock_calls(dq_store *s, const char *op, const char *token, int lease_ms, int buckets,
                       int start)
{
    store_batch_begin(s);
    for (int k = 0; k < store_shards(s); k++) {
        store_batch_call(s, SCRIPT_LOCK, k);
        store_arg_str(s, op);
        store_arg_str(s, token);
        store_arg_int(s, lease_ms);
        store_arg_int(s, buckets);
        store_arg_int(s, start);
        store_arg_int(s, store_shards(s));
    }
    store_batch_run(s);
}

dq_status store_lock_maintain(dq_store *s, const char *token, int lease_ms, int buckets,
                              int start, unsigned char *held, unsigned char *ok,
                              store_error *err)
{
    clear_error(err);
    lock_calls(s, "maintain", token, lease_ms, buckets, start);
    dq_status result = DQ_UNAVAILABLE;
    for (int k = 0; k < store_shards(s); k++) {
        unsigned char *mine = held + (size_t)k * (size_t)buckets;
        memset(mine, 0, (size_t)buckets);
        store_reply *r = NULL;
        char detail[sizeof err->detail];
        dq_status st = store_batch_result(s, (size_t)k, &r, detail, sizeof detail);
        ok[k] = st == DQ_OK;
        for (size_t i = 0; i < reply_len(r); i++) {
            int64_t b = reply_int(reply_at(r, i));
            if (b >= 0 && b < buckets)
                mine[b] = 1;
        }
        store_reply_free(r);
        if (st == DQ_OK && result != DQ_MISCONFIGURED) {
            result = DQ_OK;
        } else if (st == DQ_MISCONFIGURED) {
            result = st;
            snprintf(err->detail, sizeof err->detail, "%s", detail);
        }
    }
    return result;
}

dq_status store_lock_release(dq_store *s, const char *token, int lease_ms, int buckets,
                             int64_t *released)
{
    lock_calls(s, "release", token, lease_ms, buckets, 0);
    *released = 0;
    dq_status result = DQ_OK;
    for (int k = 0; k < store_shards(s); k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, NULL, 0);
        if (st == DQ_OK)
            *released += reply_int(r);
        else
            result = st;
        store_reply_free(r);
    }
    return result;
}

dq_status store_sweep(dq_store *s, int shard, int64_t retention_ms, int limit,
                      int64_t *forgotten)
{
    store_error err;
    store_begin(s, SCRIPT_SWEEP, shard);
    store_arg_int(s, retention_ms);
    store_arg_int(s, limit);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, &err);
    if (st == DQ_OK)
        *forgotten = reply_int(r);
    store_reply_free(r);
    return st;
}

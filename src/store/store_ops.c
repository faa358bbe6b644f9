/* store_ops: the C caller of each function. Its arguments and reply
 * fields are declared in the header of src/store/lua/<name>.lua; the names
 * used here (ADD_ARG_ALLOW, POP_JOB_BODY, ...) are generated from that
 * declaration into lua_scripts.h, so no position is written twice. */
#include "store/store_ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/lua_calls.h"
#include "store/store_errors.h"

const char *const store_stat_names[STORE_NSTATS] = {
    "delay",  "ready",   "reserved",    "buried", "added",  "popped",
    "finished", "deleted", "redelivered", "buries", "kicked", "push_failed"};

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
    *list = util_xrealloc(*list, (*n + 1) * sizeof **list);
    (*list)[(*n)++] = r;
}

/* Shard k's reply of a round over every shard (store_batch_every_shard),
 * kept in list for the results that point into it; or NULL when the
 * shard's call failed, with *st and err saying how. */
static const store_reply *kept_shard_reply(dq_store *s, int k, store_reply ***list, size_t *n,
                                           dq_status *st, store_error *err)
{
    store_reply *r = NULL;
    *st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
    if (*st != DQ_OK)
        return NULL;
    keep_reply(list, n, r);
    return r;
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

/* Shard k's call answered (st DQ_OK) or failed; a failure is kept in err
 * when it is the worst so far, which *result becomes. */
static void spread_note(store_spread *sp, int k, dq_status st, const char *detail,
                        dq_status *result, store_error *err)
{
    if (st == DQ_OK) {
        sp->calls_answered++;
        if (sp->fate[k] == STORE_SHARD_UNTOUCHED)
            sp->fate[k] = STORE_SHARD_ANSWERED;
        return;
    }
    sp->fate[k] = STORE_SHARD_FAILED;
    if (worse(*result, st) != *result || *result == DQ_OK) {
        *result = st;
        snprintf(err->detail, sizeof err->detail, "%s", detail ? detail : "");
    }
}

int store_spread_answered(const store_spread *sp, int shards)
{
    int n = 0;
    for (int k = 0; k < shards; k++)
        n += sp->fate[k] == STORE_SHARD_ANSWERED;
    return n;
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
    by_shard g = {util_xcalloc(n, sizeof *g.order),
                  util_xcalloc((size_t)shards + 1, sizeof *g.first)};
    int *of = util_xcalloc(n, sizeof *of);
    for (size_t i = 0; i < n; i++) {
        of[i] = store_shard_of(s, ids[i], strlen(ids[i]));
        g.first[of[i] + 1]++;
    }
    for (int k = 0; k < shards; k++)
        g.first[k + 1] += g.first[k];
    size_t *next = util_xcalloc((size_t)shards, sizeof *next);
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

/* Copies reply string r (nil: "") into out[0..n). */
static void copy_reply_str(const store_reply *r, char *out, size_t n)
{
    size_t len;
    const char *v = store_reply_str(r, &len);
    snprintf(out, n, "%.*s", v ? (int)len : 0, v ? v : "");
}

/* An add's conflict record (add.lua's `conflict`): its fields by name. */
static void read_conflict(const store_reply *e, store_item *it)
{
    static const char *const reasons[ADD_REASON_NVALUES] = ADD_REASON_WORDS;
    char reason[16];
    copy_reply_str(store_reply_at(e, ADD_CONFLICT_REASON), reason, sizeof reason);
    it->status = DQ_INTERNAL;
    for (int i = 0; i < ADD_REASON_NVALUES; i++) {
        if (strcmp(reason, reasons[i]) == 0) {
            it->status = DQ_CONFLICT;
            it->reason = (enum add_reason_value)i;
        }
    }
    copy_reply_str(store_reply_at(e, ADD_CONFLICT_STATE), it->state, sizeof it->state);
    it->ended_ms = store_reply_int(store_reply_at(e, ADD_CONFLICT_ENDED_MS));
    copy_reply_str(store_reply_at(e, ADD_CONFLICT_TOPIC), it->topic, sizeof it->topic);
}

/* One item's outcome: 'ok', 'DQ_<CODE> <state>', or (add) 'replaced' or
 * a conflict record. */
static void read_item(const store_reply *e, store_item *it)
{
    if (store_reply_len(e) > 0) {
        it->replaced = 0;
        read_conflict(e, it);
        return;
    }
    size_t len;
    const char *v = store_reply_str(e, &len);
    /* add's upserts answer "replaced" for a job replaced, "ok" created */
    it->replaced = v && len == 8 && memcmp(v, "replaced", 8) == 0;
    if (it->replaced) {
        it->status = DQ_OK;
        it->state[0] = '\0';
        return;
    }
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
            it->state[0] = it->topic[0] = '\0';
            it->ended_ms = -1;
            it->replaced = 0;
            it->status = st;
            if (st != DQ_OK)
                continue;
            read_item(store_reply_at(r, j - from), it);
        }
        store_reply_free(r);
        if (worse(st, result) != result) {
            result = st;
            snprintf(err->detail, sizeof err->detail, "%s", detail);
        }
    }
    return result;
}

/* Pushes the arguments of fn's call in one shard, for the items
 * g->order[from..to) (op: what the caller's calls are made of). */
typedef void shard_args_fn(dq_store *s, const by_shard *g, size_t from, size_t to, const void *op);

/* One call of fn per shard that holds any of the n ids, sent together, each
 * answering one item per id of its shard: the items' outcomes, in items.
 * Returns DQ_OK, or the worst failure (read_split_items). */
static dq_status split_call(dq_store *s, dq_script fn, const char *const *ids, size_t n,
                            shard_args_fn *shard_args, const void *op, store_item *items,
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
        shard_args(s, &g, from, to, op);
    }
    store_batch_run(s);
    dq_status st = read_split_items(s, &g, items, err);
    by_shard_free(&g);
    return st;
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
    const store_reply *b = store_reply_at(r, LAYOUT_REPLY_BUCKETS),
                      *n = store_reply_at(r, LAYOUT_REPLY_SHARDS);
    int known = !store_reply_nil(b);
    if (known) {
        *buckets = (long)store_reply_int(b);
        *shards = store_reply_nil(n) ? 1 : (long)store_reply_int(n);
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
    args_layout_claim(s, cfg->buckets, shards);
    store_reply *r = NULL;
    long recorded = -1;
    const store_reply *n = NULL;
    if (store_run(s, &r, NULL, 0) == DQ_OK)
        n = store_reply_at(r, LAYOUT_CLAIM_REPLY_SHARDS);
    if (n && !store_reply_nil(n))
        recorded = (long)store_reply_int(n);
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

/* Keeps the soonest of a call's token waits (-1 or 0 from Lua: none). */
static void note_token_wait(store_jobs *j, int64_t ms)
{
    if (ms > 0 && (j->token_wait_ms == 0 || ms < j->token_wait_ms))
        j->token_wait_ms = ms;
}

static store_job *next_job(store_jobs *j)
{
    if (j->n == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 4;
        j->jobs = util_xrealloc(j->jobs, j->cap * sizeof *j->jobs);
    }
    store_job *job = &j->jobs[j->n++];
    memset(job, 0, sizeof *job);
    job->ended = job->first_delivered = -1;
    return job;
}

void store_jobs_copy(store_jobs *j, const store_job *job)
{
    store_job *to = next_job(j);
    *to = *job;
    const char **field[] = {&to->id, &to->topic, &to->body, &to->key, &to->traceparent,
                            &to->tracestate};
    const size_t len[] = {job->id_len,  job->topic_len,       job->body_len,
                          job->key_len, job->traceparent_len, job->tracestate_len};
    enum { NSTRINGS = sizeof len / sizeof len[0] };
    size_t total = NSTRINGS;
    for (int f = 0; f < NSTRINGS; f++)
        total += len[f];
    char *p = util_xmalloc(total);
    j->copies = util_xrealloc(j->copies, (j->ncopies + 1) * sizeof *j->copies);
    j->copies[j->ncopies++] = p;
    for (int f = 0; f < NSTRINGS; f++) {
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
            args_give_back_job(s, store_txt_n(j->id, j->id_len), j->attempts);
        }
    }
    store_batch_run(s);
    int64_t back = 0;
    for (size_t c = 0; c < calls; c++) {
        store_reply *r = NULL;
        if (store_batch_result(s, c, &r, NULL, 0) == DQ_OK)
            back += store_reply_int(r);
        store_reply_free(r);
    }
    log_warn("%" PRId64 " of %zu reserved jobs ready again at once, uncounted, as %s; any other "
             "comes back after its TTR or callback deadline", back, jobs->n, why);
}

/* One job's group of add's arguments (args_add_job: add.lua's typed
 * declaration). */
static void add_job_args(dq_store *s, const dq_job_spec *job, const char *id)
{
    size_t idlen = strlen(id);
    args_add_job(s, store_txt_n(id, idlen), store_txt_s(job->topic),
                 store_txt_n(job->body, job->body_len), job->ttr_ms, job->retries, job->delay_ms,
                 store_maybe_int(job->at_ms, job->at_ms >= 0), store_bucket_of(s, id, idlen),
                 store_maybe_n(job->backoff, job->backoff_len), store_maybe_s(job->url),
                 job->cb_timeout_ms, store_maybe_s(job->key), store_maybe_s(job->traceparent),
                 store_maybe_s(job->tracestate), job->replace ? 1 : 0);
}

/* What add's call in one shard is made of: its arguments, then one group
 * per job of the shard. */
typedef struct {
    const char *allow;
    const dq_job_spec *jobs;
    const char *const *ids;
} add_op;

static void add_shard_args(dq_store *s, const by_shard *g, size_t from, size_t to, const void *op)
{
    const add_op *o = op;
    args_add(s, store_txt_s(o->allow), store_buckets(s), store_shards(s), (int64_t)(to - from));
    for (size_t j = from; j < to; j++)
        add_job_args(s, &o->jobs[g->order[j]], o->ids[g->order[j]]);
}

dq_status store_add(dq_store *s, const char *allow, const dq_job_spec *jobs,
                    const char *const *ids, size_t n, store_item *items, store_error *err)
{
    add_op op = {allow, jobs, ids};
    dq_status st = split_call(s, SCRIPT_ADD, ids, n, add_shard_args, &op, items, err);
    for (size_t i = 0; i < n; i++) /* read_item set 1 where one was replaced */
        items[i].replaced = !jobs[i].replace ? -1 : items[i].replaced == 1;
    return st;
}

static void read_popped(const store_reply *e, store_job *j)
{
    j->id = store_reply_str(store_reply_at(e, POP_JOB_ID), &j->id_len);
    j->topic = store_reply_str(store_reply_at(e, POP_JOB_TOPIC), &j->topic_len);
    j->body = store_reply_str(store_reply_at(e, POP_JOB_BODY), &j->body_len);
    j->attempts = store_reply_int(store_reply_at(e, POP_JOB_ATTEMPTS));
    j->ttr_ms = store_reply_int(store_reply_at(e, POP_JOB_TTR_MS));
    j->key = store_reply_str(store_reply_at(e, POP_JOB_KEY), &j->key_len);
    j->traceparent = store_reply_str(store_reply_at(e, POP_JOB_TRACEPARENT), &j->traceparent_len);
    j->tracestate = store_reply_str(store_reply_at(e, POP_JOB_TRACESTATE), &j->tracestate_len);
    j->state = "reserved";
}

dq_status store_pop(dq_store *s, int shard, const store_pop_req *q, store_jobs *out,
                    store_error *err)
{
    store_begin(s, SCRIPT_POP, shard);
    args_pop(s, store_txt_s(q->allow), q->count, store_list_of(q->finish, q->nfinish),
             store_list_of(q->topics, q->ntopics));
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    for (size_t i = 0; i < q->nfinish; i++) {
        store_item *it = &q->finished[i];
        it->state[0] = '\0';
        it->status = st;
        if (st != DQ_OK)
            continue;
        read_item(store_reply_at(store_reply_at(r, POP_REPLY_FINISHED), i), it);
    }
    if (st != DQ_OK)
        return st;
    note_token_wait(out, store_reply_int(store_reply_at(r, POP_REPLY_TOKEN_WAIT_MS)));
    for (size_t i = POP_REPLY_NFIELDS; i < store_reply_len(r); i++) {
        store_job *j = next_job(out);
        read_popped(store_reply_at(r, i), j);
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
    for (int k = 0; store_every_shard_call(s, SCRIPT_READY, k); k++)
        args_ready(s, store_list_of(topics, ntopics));
    dq_status result = DQ_UNAVAILABLE;
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, err->detail, sizeof err->detail);
        for (size_t t = 0; t < ntopics; t++)
            counts[(size_t)k * ntopics + t] = st == DQ_OK ? store_reply_int(store_reply_at(r, t))
                                                          : -1;
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

/* One shard's share of a call's ids: g->order[from..to). */
static store_list shard_ids(const char *const *ids, const by_shard *g, size_t from, size_t to)
{
    return (store_list){ids, g->order + from, to - from};
}

typedef struct {
    const char *allow;
    int finished;
    const char *const *ids;
} remove_op;

static void remove_shard_args(dq_store *s, const by_shard *g, size_t from, size_t to,
                              const void *op)
{
    const remove_op *o = op;
    args_remove(s, store_txt_s(o->allow), store_txt_s(o->finished ? "finished" : "deleted"),
                shard_ids(o->ids, g, from, to));
}

dq_status store_remove(dq_store *s, const char *allow, int finished, const char *const *ids,
                       size_t n, store_item *items, store_error *err)
{
    remove_op op = {allow, finished, ids};
    store_batch_must_confirm(s, !finished); /* a finish is a delivery, a delete is not */
    dq_status st = split_call(s, SCRIPT_REMOVE, ids, n, remove_shard_args, &op, items, err);
    store_batch_must_confirm(s, 0);
    return st;
}

typedef struct {
    const char *allow;
    const char *const *ids;
} kick_ids_op;

static void kick_ids_shard_args(dq_store *s, const by_shard *g, size_t from, size_t to,
                                const void *op)
{
    const kick_ids_op *o = op;
    args_kick_ids(s, store_txt_s(o->allow), shard_ids(o->ids, g, from, to));
}

dq_status store_kick_ids(dq_store *s, const char *allow, const char *const *ids, size_t n,
                         store_item *items, store_error *err)
{
    kick_ids_op op = {allow, ids};
    return split_call(s, SCRIPT_KICK_IDS, ids, n, kick_ids_shard_args, &op, items, err);
}

/* Begins a call of fn in the shard of id (a job's or a schedule's). */
static void begin_for_id(dq_store *s, dq_script fn, const char *id)
{
    store_begin(s, fn, store_shard_of(s, id, strlen(id)));
}

static void read_job_view(const store_reply *r, store_job *j);
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen);

dq_status store_get(dq_store *s, const char *allow, const char *id, store_jobs *out,
                    store_error *err)
{
    memset(out, 0, sizeof *out);
    begin_for_id(s, SCRIPT_GET, id);
    args_get(s, store_txt_s(allow), store_txt_s(id));
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

/* A job as lib/70-history.lua's job_view answers it. */
static void read_job_view(const store_reply *r, store_job *j)
{
    j->state = store_reply_str(store_reply_at(r, JOB_VIEW_STATE), NULL);
    j->topic = store_reply_str(store_reply_at(r, JOB_VIEW_TOPIC), &j->topic_len);
    j->body = store_reply_str(store_reply_at(r, JOB_VIEW_BODY), &j->body_len);
    j->due = store_reply_int(store_reply_at(r, JOB_VIEW_DUE));
    j->ttr_ms = store_reply_int(store_reply_at(r, JOB_VIEW_TTR_MS));
    j->attempts = store_reply_int(store_reply_at(r, JOB_VIEW_ATTEMPTS));
    j->retries = store_reply_int(store_reply_at(r, JOB_VIEW_RETRIES));
    j->created = store_reply_int(store_reply_at(r, JOB_VIEW_CREATED));
    j->backoff = store_reply_str(store_reply_at(r, JOB_VIEW_BACKOFF), &j->backoff_len);
    j->url = store_reply_str(store_reply_at(r, JOB_VIEW_URL), &j->url_len);
    j->cb_timeout_ms = store_reply_int(store_reply_at(r, JOB_VIEW_TIMEOUT_MS));
    j->last_at = store_reply_int(store_reply_at(r, JOB_VIEW_LAST_AT));
    j->last_status = store_reply_int(store_reply_at(r, JOB_VIEW_LAST_STATUS));
    j->last_error = store_reply_str(store_reply_at(r, JOB_VIEW_LAST_ERROR), &j->last_error_len);
    j->key = store_reply_str(store_reply_at(r, JOB_VIEW_KEY), &j->key_len);
    j->traceparent = store_reply_str(store_reply_at(r, JOB_VIEW_TRACEPARENT), &j->traceparent_len);
    j->tracestate = store_reply_str(store_reply_at(r, JOB_VIEW_TRACESTATE), &j->tracestate_len);
    j->ended = store_reply_int(store_reply_at(r, JOB_VIEW_ENDED));
    j->first_delivered = store_reply_int(store_reply_at(r, JOB_VIEW_FIRST_DELIVERED));
    const store_reply *log = store_reply_at(r, JOB_VIEW_DELIVERIES);
    j->deliveries = store_reply_len(log) > 0 ? log : NULL;
}

size_t store_job_ndeliveries(const store_job *j)
{
    return store_reply_len(j->deliveries);
}

void store_job_delivery(const store_job *j, size_t i, store_delivery *out)
{
    const store_reply *e = store_reply_at(j->deliveries, i);
    out->at = store_reply_int(store_reply_at(e, DELIVERY_AT));
    out->status = store_reply_int(store_reply_at(e, DELIVERY_STATUS));
    out->ms = store_reply_int(store_reply_at(e, DELIVERY_MS));
    out->error = store_reply_str(store_reply_at(e, DELIVERY_ERROR), &out->error_len);
    out->response = store_reply_str(store_reply_at(e, DELIVERY_RESPONSE), &out->response_len);
    out->decision = store_reply_str(store_reply_at(e, DELIVERY_DECISION), NULL);
    out->retry_at = store_reply_int(store_reply_at(e, DELIVERY_RETRY_AT));
}

int store_job_is_record(const store_job *j)
{
    return j->ended > 0;
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

/* A shard's reply says where its walk ended: the last entry it looked at
 * (last_score, last_id), beyond which it saw nothing. */
static int shard_walk_end(const store_reply *r, store_job *end)
{
    end->id = store_reply_str(store_reply_at(r, JOBS_REPLY_LAST_ID), &end->id_len);
    end->pos = store_reply_int(store_reply_at(r, JOBS_REPLY_LAST_SCORE));
    return end->id != NULL;
}

/* Each shard looks at its first `limit` entries after the cursor (and
 * says whether more follow) and answers the jobs among them: an entry
 * whose kept record expired is left out. The page is the jobs up to the
 * earliest walk end of the shards that have more (every shard saw all of
 * its entries up to there), at most `limit` of them; the next page starts
 * after its last job when it was cut at `limit`, else after that walk end,
 * so a page of stale entries alone still moves the cursor on. */
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
    for (int k = 0; store_every_shard_call(s, SCRIPT_JOBS, k); k++)
        args_jobs(s, store_txt_s(topic), store_txt_s(state), limit, store_txt_s(score),
                  store_txt_s(after_id));
    store_job bound = {0}; /* the earliest walk end of a shard with more */
    int bounded = 0;
    for (int k = 0; k < store_shards(s); k++) {
        dq_status st;
        const store_reply *r = kept_shard_reply(s, k, &out->replies, &out->nreplies, &st, err);
        if (!r) {
            store_jobs_free(out);
            return st; /* a page missing a shard would skip its jobs */
        }
        store_job end;
        if (store_reply_int(store_reply_at(r, JOBS_REPLY_MORE)) == 1 && shard_walk_end(r, &end) &&
            (!bounded++ || job_pos_cmp(&end, &bound) < 0))
            bound = end;
        for (size_t i = JOBS_REPLY_NFIELDS; i + JOBS_ENTRY_NFIELDS <= store_reply_len(r);
             i += JOBS_ENTRY_NFIELDS) {
            store_job *j = next_job(out);
            j->id = store_reply_str(store_reply_at(r, i + JOBS_ENTRY_ID), &j->id_len);
            j->pos = store_reply_int(store_reply_at(r, i + JOBS_ENTRY_SCORE));
            j->shard = k;
            read_job_view(store_reply_at(r, i + JOBS_ENTRY_VIEW), j);
            if (!j->id)
                out->n--;
        }
    }
    if (out->n > 1)
        qsort(out->jobs, out->n, sizeof *out->jobs, job_pos_cmp);
    while (bounded && out->n > 0 && job_pos_cmp(&out->jobs[out->n - 1], &bound) > 0)
        out->n--; /* a shard with more may hold jobs before it */
    const store_job *last = bounded ? &bound : NULL;
    if (out->n > (size_t)limit) {
        out->n = (size_t)limit;
        last = &out->jobs[out->n - 1];
    }
    if (last)
        snprintf(next, nextlen, "%lld:%.*s", (long long)last->pos, (int)last->id_len, last->id);
    return DQ_OK;
}

dq_status store_reschedule(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                           int64_t at_ms, char state[STORE_STATE_MAX], int64_t *due,
                           store_error *err)
{
    begin_for_id(s, SCRIPT_RESCHEDULE, id);
    args_reschedule(s, store_txt_s(allow), store_txt_s(id), delay_ms,
                    store_maybe_int(at_ms, at_ms >= 0));
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = store_reply_str(store_reply_at(r, RESCHEDULE_REPLY_STATE), NULL);
        snprintf(state, STORE_STATE_MAX, "%s", v ? v : "");
        *due = store_reply_int(store_reply_at(r, RESCHEDULE_REPLY_DUE));
    }
    store_reply_free(r);
    return st;
}

/* One job of push_take's reply. */
static void read_taken(const store_reply *e, store_job *j)
{
    j->id = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_ID), &j->id_len);
    j->topic = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_TOPIC), &j->topic_len);
    j->body = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_BODY), &j->body_len);
    j->url = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_URL), &j->url_len);
    j->key = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_KEY), &j->key_len);
    j->traceparent = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_TRACEPARENT),
                                     &j->traceparent_len);
    j->tracestate = store_reply_str(store_reply_at(e, PUSH_TAKE_JOB_TRACESTATE),
                                    &j->tracestate_len);
    j->attempts = store_reply_int(store_reply_at(e, PUSH_TAKE_JOB_ATTEMPT));
    j->cb_timeout_ms = store_reply_int(store_reply_at(e, PUSH_TAKE_JOB_TIMEOUT_MS));
    j->state = "reserved";
}

void store_push_take(dq_store *s, const int *limits, int grace_ms, store_jobs *out,
                     dq_status *status, int64_t *token_wait)
{
    int shards = store_shards(s);
    store_batch_begin(s);
    for (int k = 0; k < shards; k++) {
        if (limits[k] <= 0)
            continue;
        store_batch_call(s, SCRIPT_PUSH_TAKE, k);
        args_push_take(s, limits[k], grace_ms);
    }
    store_batch_run(s);
    size_t call = 0;
    for (int k = 0; k < shards; k++) {
        if (limits[k] <= 0)
            continue;
        store_reply *r = NULL;
        status[k] = store_batch_result(s, call, &r, NULL, 0);
        call++;
        token_wait[k] = 0;
        if (!r)
            continue;
        keep_reply(&out->replies, &out->nreplies, r);
        int64_t w = store_reply_int(store_reply_at(r, PUSH_TAKE_REPLY_TOKEN_WAIT_MS));
        token_wait[k] = w > 0 ? w : 0;
        note_token_wait(out, w);
        for (size_t i = PUSH_TAKE_REPLY_NFIELDS; i < store_reply_len(r); i++) {
            store_job *j = next_job(out);
            read_taken(store_reply_at(r, i), j);
            j->shard = k;
        }
    }
}

void store_push_done(dq_store *s, store_push_outcome *o, size_t n)
{
    store_batch_begin(s);
    for (size_t i = 0; i < n; i++) {
        store_batch_call(s, SCRIPT_PUSH_DONE, store_shard_of(s, o[i].id, strlen(o[i].id)));
        store_val a[PUSH_DONE_NARGS] = {[PUSH_DONE_ARG_ID] = store_str(o[i].id),
                                        [PUSH_DONE_ARG_ATTEMPT] = store_int(o[i].attempt),
                                        [PUSH_DONE_ARG_OUTCOME] = store_str(o[i].outcome),
                                        [PUSH_DONE_ARG_WAIT_MS] = store_int(o[i].wait_ms),
                                        [PUSH_DONE_ARG_STATUS] = store_int(o[i].status),
                                        [PUSH_DONE_ARG_ERROR] = store_str(o[i].error),
                                        [PUSH_DONE_ARG_MS] = store_int(o[i].ms),
                                        [PUSH_DONE_ARG_RESPONSE] = store_str(o[i].response)};
        store_args(s, a, PUSH_DONE_NARGS);
    }
    store_batch_run(s);
    for (size_t i = 0; i < n; i++) {
        store_reply *r = NULL;
        o[i].result = store_batch_result(s, i, &r, NULL, 0);
        const char *st = store_reply_str(r, NULL);
        snprintf(o[i].state, sizeof o[i].state, "%s", o[i].result == DQ_OK && st ? st : "");
        store_reply_free(r);
    }
}

dq_status store_touch(dq_store *s, const char *allow, const char *id, int64_t *deadline,
                      store_error *err)
{
    begin_for_id(s, SCRIPT_TOUCH, id);
    args_touch(s, store_txt_s(allow), store_txt_s(id));
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK)
        *deadline = store_reply_int(r);
    store_reply_free(r);
    return st;
}

dq_status store_release(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                        char state[STORE_STATE_MAX], store_error *err)
{
    begin_for_id(s, SCRIPT_RELEASE, id);
    args_release(s, store_txt_s(allow), store_txt_s(id), delay_ms);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = store_reply_str(r, NULL);
        snprintf(state, STORE_STATE_MAX, "%s", v ? v : "");
    }
    store_reply_free(r);
    return st;
}

dq_status store_bury(dq_store *s, const char *allow, const char *id, store_error *err)
{
    begin_for_id(s, SCRIPT_BURY, id);
    args_bury(s, store_txt_s(allow), store_txt_s(id));
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    store_reply_free(r);
    return st;
}

dq_status store_kick(dq_store *s, const char *topic, int count, int64_t *kicked, store_spread *sp,
                     store_error *err)
{
    *kicked = 0;
    memset(sp, 0, sizeof *sp);
    clear_error(err);
    dq_status result = DQ_OK;
    for (int k = 0; k < store_shards(s) && *kicked < count; k++) {
        store_begin(s, SCRIPT_KICK, k);
        args_kick(s, store_txt_s(topic), count - *kicked);
        store_reply *r = NULL;
        char detail[sizeof err->detail];
        dq_status st = store_run(s, &r, detail, sizeof detail);
        if (st == DQ_OK)
            *kicked += store_reply_int(r);
        spread_note(sp, k, st, detail, &result, err);
        store_reply_free(r);
    }
    /* All that was asked is done, and the failed shards did nothing: the
     * answer is exact. */
    return *kicked >= count && result == DQ_UNAVAILABLE ? DQ_OK : result;
}

/* ------------------------------------------------------------------------ */
/* Stats                                                                     */
/* ------------------------------------------------------------------------ */

/* Adds a flat {field, value, ...} reply into v. */
static void add_fields(int64_t v[STORE_NSTATS], const store_reply *fields)
{
    for (size_t i = 0; i + 1 < store_reply_len(fields); i += 2) {
        const char *f = store_reply_str(store_reply_at(fields, i), NULL);
        if (f && f[0] == 'p' && strcmp(f, "paused") == 0)
            continue; /* topic_extras() */
        for (int k = 0; f && k < STORE_NSTATS; k++) {
            if (strcmp(f, store_stat_names[k]) == 0) {
                v[k] += store_reply_int(store_reply_at(fields, i + 1));
                break;
            }
        }
    }
}

/* The per-topic figures stats.lua appends: paused (any shard), what its
 * limits hold back (the sum of the shards') and the oldest ready age (the
 * largest of the shards'). */
static void topic_extras(store_topic_stats *t, const store_reply *fields)
{
    for (size_t i = 0; i + 1 < store_reply_len(fields); i += 2) {
        const char *f = store_reply_str(store_reply_at(fields, i), NULL);
        int64_t v = store_reply_int(store_reply_at(fields, i + 1));
        if (!f)
            continue;
        if (strcmp(f, "paused") == 0) {
            t->paused |= v == 1;
        } else if (strcmp(f, "throttled") == 0) {
            t->limited = 1;
            t->throttled += v;
        } else if (strcmp(f, "keys_waiting") == 0) {
            t->keys_waiting += v;
        } else if (strcmp(f, "ready_age") == 0 && v > t->ready_age_ms) {
            t->ready_age_ms = v;
        }
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
            out->topics[kept - 1].limited |= t->limited;
            out->topics[kept - 1].throttled += t->throttled;
            out->topics[kept - 1].keys_waiting += t->keys_waiting;
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
    for (int k = 0; store_every_shard_call(s, SCRIPT_STATS, k); k++)
        args_stats(s, store_maybe_s(topic), store_maybe_s(cursor), limit);
    size_t cap = (size_t)shards * (size_t)(limit > 0 ? limit : 1);
    if (topic)
        cap = (size_t)shards;
    out->topics = util_xcalloc(cap, sizeof *out->topics);
    int more = 0;
    for (int k = 0; k < shards; k++) {
        dq_status st;
        const store_reply *r = kept_shard_reply(s, k, &out->replies, &out->nreplies, &st, err);
        if (!r) {
            store_stats_free(out);
            return st; /* figures missing a shard would be wrong, not partial */
        }
        add_fields(out->totals, store_reply_at(r, STATS_REPLY_TOTALS));
        more |= !store_reply_nil(store_reply_at(r, STATS_REPLY_NEXT_CURSOR));
        int64_t known = store_reply_int(store_reply_at(r, STATS_REPLY_TOPICS));
        if (known > out->topics_known)
            out->topics_known = known;
        for (size_t i = STATS_REPLY_NFIELDS;
             i + STATS_ENTRY_NFIELDS <= store_reply_len(r) && out->n < cap;
             i += STATS_ENTRY_NFIELDS) {
            store_topic_stats *t = &out->topics[out->n];
            const store_reply *fields = store_reply_at(r, i + STATS_ENTRY_FIELDS);
            t->name = store_reply_str(store_reply_at(r, i + STATS_ENTRY_TOPIC), &t->name_len);
            if (t->name) {
                add_fields(t->v, fields);
                t->ready_age_ms = -1;
                topic_extras(t, fields);
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
/* Policies                                                                  */
/* ------------------------------------------------------------------------ */

/* policy.lua's arguments, its reply and policies.lua's entries declare
 * the list [policy] (job.h's DQ_POLICY_FIELDS, in its order): field f is
 * at <...>_POLICY_FIRST + f. */

dq_status store_policy_set(dq_store *s, const char *topic, const dq_policy_spec *spec,
                           store_policy *out, store_spread *sp, store_error *err)
{
    memset(out, 0, sizeof *out);
    out->topic = topic;
    out->topic_len = strlen(topic);
    clear_error(err);
    store_val a[POLICY_NARGS] = {[POLICY_ARG_TOPIC] = store_str(topic)};
    for (int i = 0; i < DQ_POLICY_NFIELDS; i++) {
        a[POLICY_ARG_POLICY_FIRST + i] = spec->op[i] == DQ_POLICY_SET ? store_int(spec->value[i])
                                         : spec->op[i] == DQ_POLICY_REMOVE ? store_str("null")
                                                                           : store_str("");
    }
    store_batch_every_shard(s, SCRIPT_POLICY, a, POLICY_NARGS, NULL, 0);
    memset(sp, 0, sizeof *sp);
    dq_status result = DQ_OK;
    int read = 0;
    for (int k = 0; k < store_shards(s); k++) {
        store_reply *r = NULL;
        char detail[sizeof err->detail];
        dq_status st = store_batch_result(s, (size_t)k, &r, detail, sizeof detail);
        spread_note(sp, k, st, detail, &result, err);
        if (st == DQ_OK && !read++) {
            for (int i = 0; i < DQ_POLICY_NFIELDS; i++)
                out->value[i] = store_reply_int(
                    store_reply_at(r, (size_t)(POLICY_REPLY_POLICY_FIRST + i)));
        }
        store_reply_free(r);
    }
    return result;
}

static int policy_cmp(const void *a, const void *b)
{
    const store_policy *x = a, *y = b;
    return name_cmp(x->topic, x->topic_len, y->topic, y->topic_len);
}

/* Each shard answers its first `limit` topics after the cursor, as for
 * stats; a topic's policy is the first shard's (every shard has a copy),
 * its use the sum of the shards'. */
dq_status store_policies_read(dq_store *s, const char *topic, const char *cursor, int limit,
                              store_policies *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    clear_error(err);
    int shards = store_shards(s);
    for (int k = 0; store_every_shard_call(s, SCRIPT_POLICIES, k); k++)
        args_policies(s, store_maybe_s(topic), store_maybe_s(cursor), limit);
    size_t cap = (size_t)shards * (size_t)(limit > 0 ? limit : 1);
    out->policies = util_xcalloc(cap, sizeof *out->policies);
    int more = 0;
    for (int k = 0; k < shards; k++) {
        dq_status st;
        const store_reply *r = kept_shard_reply(s, k, &out->replies, &out->nreplies, &st, err);
        if (!r) {
            store_policies_free(out);
            return st; /* a use missing a shard would be wrong, not partial */
        }
        more |= !store_reply_nil(store_reply_at(r, POLICIES_REPLY_NEXT_CURSOR));
        for (size_t i = POLICIES_REPLY_NFIELDS;
             i + POLICIES_ENTRY_NFIELDS <= store_reply_len(r) && out->n < cap;
             i += POLICIES_ENTRY_NFIELDS) {
            store_policy *p = &out->policies[out->n];
            p->topic = store_reply_str(store_reply_at(r, i + POLICIES_ENTRY_TOPIC), &p->topic_len);
            if (!p->topic)
                continue;
            for (int f = 0; f < DQ_POLICY_NFIELDS; f++)
                p->value[f] = store_reply_int(
                    store_reply_at(r, i + (size_t)(POLICIES_ENTRY_POLICY_FIRST + f)));
            p->reserved = store_reply_int(store_reply_at(r, i + POLICIES_ENTRY_RESERVED));
            p->throttled = store_reply_int(store_reply_at(r, i + POLICIES_ENTRY_THROTTLED));
            p->keys_waiting = store_reply_int(store_reply_at(r, i + POLICIES_ENTRY_KEYS_WAITING));
            p->tokens = store_reply_int(store_reply_at(r, i + POLICIES_ENTRY_TOKENS));
            out->n++;
        }
    }
    qsort(out->policies, out->n, sizeof *out->policies, policy_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < out->n; i++) {
        store_policy *p = &out->policies[i];
        if (kept && policy_cmp(&out->policies[kept - 1], p) == 0) {
            out->policies[kept - 1].reserved += p->reserved;
            out->policies[kept - 1].throttled += p->throttled;
            out->policies[kept - 1].keys_waiting += p->keys_waiting; /* a key lives in one shard */
            int64_t *tokens = &out->policies[kept - 1].tokens;
            if (p->tokens >= 0) /* -1: no rate in that shard's copy */
                *tokens = (*tokens < 0 ? 0 : *tokens) + p->tokens;
        } else {
            out->policies[kept++] = *p;
        }
    }
    out->n = kept;
    if (!topic && limit > 0 && out->n > (size_t)limit) {
        out->n = (size_t)limit;
        more = 1;
    }
    if (more && out->n > 0)
        out->next_cursor = out->policies[out->n - 1].topic; /* NUL-terminated by hiredis */
    return DQ_OK;
}

void store_policies_free(store_policies *p)
{
    free(p->policies);
    free_kept_replies(p->replies, p->nreplies);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------------ */
/* Pause / resume, lag                                                       */
/* ------------------------------------------------------------------------ */

/* An operation done in steps in every shard (a resume, a purge): each
 * round sends the next step of every shard still going, together, and
 * reads them; `call` adds shard k's step to the batch, `done` reads its
 * reply and says whether the shard goes on. A shard whose step fails drops
 * out (sp) and the others go on to their end; the worst failure is
 * kept in *result (and err). going[k]: which shards take part, cleared as they
 * finish. */
typedef struct {
    void (*call)(dq_store *s, int shard, void *op);
    int (*done)(int shard, const store_reply *r, void *op);
    void *op;
} shard_steps;

static void step_every_shard(dq_store *s, unsigned char *going, const shard_steps *steps,
                             store_spread *sp, dq_status *result, store_error *err)
{
    int shards = store_shards(s), left = 0;
    for (int k = 0; k < shards; k++)
        left += going[k] != 0;
    int *shard_of = util_xcalloc((size_t)shards, sizeof *shard_of);
    while (left > 0) {
        store_batch_begin(s);
        size_t n = 0;
        for (int k = 0; k < shards; k++) {
            if (going[k]) {
                steps->call(s, k, steps->op);
                shard_of[n++] = k;
            }
        }
        store_batch_run(s);
        left = 0;
        for (size_t i = 0; i < n; i++) {
            store_reply *r = NULL;
            char detail[sizeof err->detail];
            dq_status st = store_batch_result(s, i, &r, detail, sizeof detail);
            int k = shard_of[i];
            spread_note(sp, k, st, detail, result, err);
            going[k] = st == DQ_OK && steps->done(k, r, steps->op);
            left += going[k];
            store_reply_free(r);
        }
    }
    free(shard_of);
}

#define RESUME_CHUNK 1000 /* held push jobs moved back per call */

typedef struct {
    const char *topic;
    int pause;
} pause_op;

static void pause_call(dq_store *s, int shard, void *op)
{
    const pause_op *p = op;
    store_batch_call(s, SCRIPT_PAUSE, shard);
    args_pause(s, store_txt_s(p->pause ? "pause" : "resume"), store_txt_s(p->topic), RESUME_CHUNK);
}

/* A resume calls again while the shard still holds jobs back. */
static int pause_done(int shard, const store_reply *r, void *op)
{
    (void)shard;
    (void)op;
    return store_reply_int(r) > 0;
}

dq_status store_pause(dq_store *s, const char *topic, int pause, store_spread *sp,
                      store_error *err)
{
    clear_error(err);
    memset(sp, 0, sizeof *sp);
    int shards = store_shards(s);
    unsigned char *going = util_xmalloc((size_t)shards);
    memset(going, 1, (size_t)shards);
    pause_op op = {topic, pause};
    shard_steps steps = {pause_call, pause_done, &op};
    dq_status result = DQ_OK;
    step_every_shard(s, going, &steps, sp, &result, err);
    free(going);
    return result;
}

/* ------------------------------------------------------------------------ */
/* Purge                                                                     */
/* ------------------------------------------------------------------------ */

/* Where one shard's walk over a state stands (purge.lua's position). */
typedef struct {
    int64_t since;  /* the shard's time at the purge's first step; -1 before it */
    char score[24]; /* "" at the head of the state */
    char id[DQ_ID_MAX + 1];
} purge_walk;

/* One walk over a state in every shard: the shards' positions, and what
 * the walk deleted. */
typedef struct {
    const char *topic, *state;
    purge_walk *w;
    int64_t *purged;
} purge_op;

static void purge_call(dq_store *s, int shard, void *op)
{
    const purge_op *p = op;
    const purge_walk *w = &p->w[shard];
    store_batch_call(s, SCRIPT_PURGE, shard);
    args_purge(s, store_txt_s(p->topic), store_txt_s(p->state), STORE_PURGE_STEP,
               store_maybe_int(w->since, w->since >= 0), store_txt_s(w->score), store_txt_s(w->id));
}

/* Reads a step's reply into its shard's walk and counts what it deleted;
 * the shard goes on while its walk has jobs after its position. */
static int purge_done(int shard, const store_reply *r, void *op)
{
    const purge_op *p = op;
    purge_walk *w = &p->w[shard];
    int more = store_reply_int(store_reply_at(r, PURGE_REPLY_MORE)) == 1;
    w->since = store_reply_int(store_reply_at(r, PURGE_REPLY_SINCE));
    const char *score = store_reply_str(store_reply_at(r, PURGE_REPLY_AFTER_SCORE), NULL);
    const char *id = store_reply_str(store_reply_at(r, PURGE_REPLY_AFTER_ID), NULL);
    snprintf(w->score, sizeof w->score, "%s", score ? score : "");
    snprintf(w->id, sizeof w->id, "%s", id ? id : "");
    *p->purged += store_reply_int(store_reply_at(r, PURGE_REPLY_PURGED));
    return more;
}

/* One walk over a state in every shard that has not failed, from its
 * head. Adds what it deleted to *purged; a shard that fails drops out
 * (sp), the worst failure is kept in *result. */
static void purge_state(dq_store *s, const char *topic, const char *state, purge_walk *w,
                        int64_t *purged, store_spread *sp, dq_status *result, store_error *err)
{
    int shards = store_shards(s);
    unsigned char *going = util_xmalloc((size_t)shards);
    for (int k = 0; k < shards; k++) {
        going[k] = sp->fate[k] != STORE_SHARD_FAILED;
        w[k].score[0] = w[k].id[0] = '\0';
    }
    purge_op op = {topic, state, w, purged};
    shard_steps steps = {purge_call, purge_done, &op};
    step_every_shard(s, going, &steps, sp, result, err);
    free(going);
}

dq_status store_purge(dq_store *s, const char *topic, const char *state, int64_t *purged,
                      store_spread *sp, store_error *err)
{
    static const char *const every[] = {"delay", "ready", "reserved", "buried"};
    const char *const *states = state ? &state : every;
    size_t nstates = state ? 1 : sizeof every / sizeof every[0];
    clear_error(err);
    memset(sp, 0, sizeof *sp);
    *purged = 0;
    int shards = store_shards(s);
    purge_walk *w = util_xcalloc((size_t)shards, sizeof *w);
    for (int k = 0; k < shards; k++)
        w[k].since = -1;
    dq_status result = DQ_OK;
    /* Walks again while a walk deleted something: a job that moved (a pop,
     * a due job, a kick) behind a walk's position is met by the next one.
     * Each such walk deletes a job that existed at the start, so it ends.
     * The shards that answer are purged to the end whatever the others do. */
    for (int64_t before = -1; *purged != before;) {
        before = *purged;
        for (size_t i = 0; i < nstates; i++)
            purge_state(s, topic, states[i], w, purged, sp, &result, err);
    }
    free(w);
    /* Jobs that went are gone: the request took effect in part. */
    return result != DQ_OK && *purged > 0 ? DQ_TIMEOUT : result;
}

dq_status store_lag_read(dq_store *s, store_lag *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    out->push_age_ms = -1;
    clear_error(err);
    store_batch_every_shard(s, SCRIPT_LAG, NULL, 0, NULL, 0);
    for (int k = 0; k < store_shards(s); k++) {
        dq_status st;
        const store_reply *r = kept_shard_reply(s, k, &out->replies, &out->nreplies, &st, err);
        if (!r) {
            store_lag_free(out);
            return st;
        }
        int64_t now = store_reply_int(store_reply_at(r, LAG_REPLY_NOW));
        int64_t due = store_reply_int(store_reply_at(r, LAG_REPLY_OVERDUE));
        int64_t since = store_reply_int(store_reply_at(r, LAG_REPLY_PUSH_SINCE));
        int64_t paused = store_reply_int(store_reply_at(r, LAG_REPLY_PAUSED));
        if (due >= 0 && now - due > out->overdue_ms)
            out->overdue_ms = now - due;
        if (since >= 0 && now - since > out->push_age_ms)
            out->push_age_ms = now - since > 0 ? now - since : 0;
        if (paused > out->paused_topics)
            out->paused_topics = paused;
        const store_reply *t = store_reply_at(r, LAG_REPLY_TIMERS);
        size_t nt = store_reply_len(t) / LAG_TIMER_NFIELDS;
        out->timers = util_xrealloc(out->timers, (out->ntimers + nt + 1) * sizeof *out->timers);
        for (size_t i = 0; i < nt; i++) {
            store_timer_lag *l = &out->timers[out->ntimers];
            size_t at = LAG_TIMER_NFIELDS * i;
            l->timer = store_reply_str(store_reply_at(t, at + LAG_TIMER_TOKEN), NULL);
            if (!l->timer)
                continue;
            l->shard = k;
            l->late_ms = store_reply_int(store_reply_at(t, at + LAG_TIMER_LATE_MS));
            l->age_ms = now - store_reply_int(store_reply_at(t, at + LAG_TIMER_AT_MS));
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
    l->list = util_xrealloc(l->list, (l->n + 1) * sizeof *l->list);
    store_schedule *sc = &l->list[l->n++];
    memset(sc, 0, sizeof *sc);
    return sc;
}

/* A cron field of '' means the schedule counts seconds (every). */
static const char *cron_or_null(const store_reply *r)
{
    size_t n = 0;
    const char *v = store_reply_str(r, &n);
    return v && n ? v : NULL;
}

dq_status store_schedule_put(dq_store *s, const char *allow, const dq_schedule_spec *sc,
                             int64_t anchor_s, int64_t next_ms, int64_t now_ms,
                             store_schedule_put_result *out, store_error *err)
{
    begin_for_id(s, SCRIPT_SCHEDULE, sc->id);
    args_schedule(s, store_txt_s(allow), store_txt_s(sc->id), store_txt_s(sc->topic),
                  store_txt_n(sc->body, sc->body_len), sc->ttr_ms, sc->retries,
                  store_maybe_s(sc->cron), sc->cron ? 0 : sc->every_s, store_txt_s(sc->tz),
                  sc->start_s, sc->end_s, anchor_s, next_ms,
                  store_maybe_n(sc->backoff, sc->backoff_len), store_maybe_s(sc->url),
                  sc->cb_timeout_ms, now_ms);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    if (st == DQ_OK) {
        const char *v = store_reply_str(store_reply_at(r, SCHEDULE_REPLY_RESULT), NULL);
        out->replaced = v && strcmp(v, "replaced") == 0;
        out->retry = v && strcmp(v, "retry") == 0;
        out->now_ms = store_reply_int(store_reply_at(r, SCHEDULE_REPLY_NOW_MS));
        out->last_ms = store_reply_int(store_reply_at(r, SCHEDULE_REPLY_LAST_MS));
    }
    store_reply_free(r);
    return st;
}

dq_status store_unschedule(dq_store *s, const char *allow, const char *id, store_error *err)
{
    begin_for_id(s, SCRIPT_UNSCHEDULE, id);
    args_unschedule(s, store_txt_s(allow), store_txt_s(id));
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, err);
    store_reply_free(r);
    return st;
}

/* Where a reply's schedule record holds each field of the definition:
 * schedules.lua's and sched_due.lua's records hold them at places of
 * their own. */
typedef struct {
    int cron, every_s, tz, start_s, end_s, anchor_s, next_ms;
} schedule_def_at;

static const schedule_def_at schedules_def_at = {
    SCHEDULES_SCHEDULE_CRON,    SCHEDULES_SCHEDULE_EVERY_S, SCHEDULES_SCHEDULE_TZ,
    SCHEDULES_SCHEDULE_START_S, SCHEDULES_SCHEDULE_END_S,   SCHEDULES_SCHEDULE_ANCHOR_S,
    SCHEDULES_SCHEDULE_NEXT_MS};
static const schedule_def_at sched_due_def_at = {
    SCHED_DUE_SCHEDULE_CRON,    SCHED_DUE_SCHEDULE_EVERY_S, SCHED_DUE_SCHEDULE_TZ,
    SCHED_DUE_SCHEDULE_START_S, SCHED_DUE_SCHEDULE_END_S,   SCHED_DUE_SCHEDULE_ANCHOR_S,
    SCHED_DUE_SCHEDULE_NEXT_MS};

static void read_schedule_def(const store_reply *f, const schedule_def_at *at, store_schedule *sc)
{
    sc->cron = cron_or_null(store_reply_at(f, (size_t)at->cron));
    sc->every_s = store_reply_int(store_reply_at(f, (size_t)at->every_s));
    sc->tz = store_reply_str(store_reply_at(f, (size_t)at->tz), NULL);
    sc->start_s = store_reply_int(store_reply_at(f, (size_t)at->start_s));
    sc->end_s = store_reply_int(store_reply_at(f, (size_t)at->end_s));
    sc->anchor_s = store_reply_int(store_reply_at(f, (size_t)at->anchor_s));
    sc->next_ms = store_reply_int(store_reply_at(f, (size_t)at->next_ms));
}

/* schedules.lua's entries. */
static void read_schedules(const store_reply *r, store_schedules *out)
{
    for (size_t i = 0; i + SCHEDULES_ENTRY_NFIELDS <= store_reply_len(r);
         i += SCHEDULES_ENTRY_NFIELDS) {
        const store_reply *f = store_reply_at(r, i + SCHEDULES_ENTRY_SCHEDULE);
        store_schedule *sc = next_schedule(out);
        sc->id = store_reply_str(store_reply_at(r, i + SCHEDULES_ENTRY_ID), &sc->id_len);
        sc->topic = store_reply_str(store_reply_at(f, SCHEDULES_SCHEDULE_TOPIC), &sc->topic_len);
        read_schedule_def(f, &schedules_def_at, sc);
        sc->last_ms = store_reply_int(store_reply_at(f, SCHEDULES_SCHEDULE_LAST_MS));
        sc->missed = store_reply_int(store_reply_at(f, SCHEDULES_SCHEDULE_MISSED));
        sc->ttr_ms = store_reply_int(store_reply_at(f, SCHEDULES_SCHEDULE_TTR_MS));
        sc->retries = store_reply_int(store_reply_at(f, SCHEDULES_SCHEDULE_RETRIES));
        sc->created_ms = store_reply_int(store_reply_at(f, SCHEDULES_SCHEDULE_CREATED_MS));
        sc->body = store_reply_str(store_reply_at(f, SCHEDULES_SCHEDULE_BODY), &sc->body_len);
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
        begin_for_id(s, SCRIPT_SCHEDULES, id);
        args_schedules(s, store_txt_s(allow), store_maybe_s(id));
        store_reply *r = NULL;
        dq_status st = run_one(s, &r, err);
        if (st != DQ_OK)
            return st;
        keep_reply(&out->replies, &out->nreplies, r);
        read_schedules(r, out);
        return DQ_OK;
    }
    for (int k = 0; store_every_shard_call(s, SCRIPT_SCHEDULES, k); k++)
        args_schedules(s, store_txt_s(allow), store_maybe_s(NULL));
    for (int k = 0; k < store_shards(s); k++) {
        dq_status st;
        const store_reply *r = kept_shard_reply(s, k, &out->replies, &out->nreplies, &st, err);
        if (!r) {
            store_schedules_free(out);
            return st; /* a list missing a shard would look complete */
        }
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
    args_sched_due(s, limit);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, &err);
    if (st != DQ_OK)
        return st;
    keep_reply(&out->replies, &out->nreplies, r);
    *redis_now = store_reply_int(store_reply_at(r, SCHED_DUE_REPLY_NOW));
    *earliest = store_reply_int(store_reply_at(r, SCHED_DUE_REPLY_EARLIEST));
    for (size_t i = SCHED_DUE_REPLY_NFIELDS; i + SCHED_DUE_DUE_NFIELDS <= store_reply_len(r);
         i += SCHED_DUE_DUE_NFIELDS) {
        const store_reply *f = store_reply_at(r, i + SCHED_DUE_DUE_SCHEDULE);
        store_schedule *sc = next_schedule(out);
        sc->id = store_reply_str(store_reply_at(r, i + SCHED_DUE_DUE_ID), &sc->id_len);
        read_schedule_def(f, &sched_due_def_at, sc);
        sc->version = store_reply_int(store_reply_at(f, SCHED_DUE_SCHEDULE_VERSION));
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
        size_t len = store_fire_id(job_id, sizeof job_id, c->id, c->fire_ms);
        store_batch_call(s, SCRIPT_FIRE, shard);
        args_fire(s, store_txt_s(c->id), c->version, c->expected_ms, c->fire_ms, c->next_ms,
                  c->missed, store_bucket_of(s, job_id, len));
    }
    store_batch_run(s);
    for (size_t i = 0; i < n; i++) {
        store_reply *r = NULL;
        calls[i].status = store_batch_result(s, i, &r, NULL, 0);
        const char *v = calls[i].status == DQ_OK ? store_reply_str(r, NULL) : NULL;
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
        args_move(s, calls[i].bucket, limit, store_maybe_s(calls[i].timer));
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
            c->moved = store_reply_int(store_reply_at(r, MOVE_REPLY_MOVED));
            c->earliest = store_reply_int(store_reply_at(r, MOVE_REPLY_EARLIEST));
            c->redis_now = store_reply_int(store_reply_at(r, MOVE_REPLY_NOW));
        }
        store_reply_free(r);
    }
}

static void lock_calls(dq_store *s, const char *op, const char *token, int lease_ms, int buckets,
                       int start)
{
    for (int k = 0; store_every_shard_call(s, SCRIPT_LOCK, k); k++)
        args_lock(s, store_txt_s(op), store_txt_s(token), lease_ms, buckets, start,
                  store_shards(s));
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
        for (size_t i = 0; i < store_reply_len(r); i++) {
            int64_t b = store_reply_int(store_reply_at(r, i));
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
            *released += store_reply_int(r);
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
    args_sweep(s, retention_ms, limit);
    store_reply *r = NULL;
    dq_status st = run_one(s, &r, &err);
    if (st == DQ_OK)
        *forgotten = store_reply_int(r);
    store_reply_free(r);
    return st;
}

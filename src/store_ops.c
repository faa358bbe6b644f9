/* store_ops: the argument layout and reply of each function (see the
 * header comment of each src/lua/<name>.lua for the other side). */
#include "store_ops.h"

#include <stdlib.h>
#include <string.h>

#include "store_errors.h"
#include "util.h"

static void clear_error(store_error *err)
{
    err->detail[0] = '\0';
    err->index = -1;
}

static dq_status call(dq_store *s, dq_script fn, store_reply **r, store_error *err)
{
    clear_error(err);
    return store_call(s, fn, r, err->detail, sizeof err->detail);
}

/* Reads a batch reply of 'ok' / 'DQ_<CODE> <state>' items. */
static void read_items(const store_reply *r, store_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = reply_str(reply_at(r, i), &len);
        items[i].status = s ? store_error_status(s, len, items[i].state, sizeof items[i].state)
                            : DQ_INTERNAL;
    }
}

void store_jobs_free(store_jobs *j)
{
    free(j->jobs);
    store_reply_free(j->reply);
    memset(j, 0, sizeof *j);
}

static store_job *alloc_jobs(size_t n)
{
    store_job *j = calloc(n ? n : 1, sizeof *j);
    if (!j)
        abort();
    return j;
}

dq_status store_add(dq_store *s, const char *allow, int buckets, const dq_job_spec *jobs,
                    const char *const *ids, size_t n, store_item *items, store_error *err)
{
    store_args_begin(s);
    store_arg_str(s, allow);
    store_arg_int(s, buckets);
    store_arg_int(s, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        const dq_job_spec *j = &jobs[i];
        size_t idlen = strlen(ids[i]);
        store_arg(s, ids[i], idlen);
        store_arg_str(s, j->topic);
        store_arg(s, j->body, j->body_len);
        store_arg_int(s, j->ttr_ms);
        store_arg_int(s, j->retries);
        store_arg_int(s, j->delay_ms);
        store_arg_int(s, j->at_ms);
        store_arg_int(s, (int64_t)(util_crc32(ids[i], idlen) % (uint32_t)buckets));
    }
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_ADD, &r, err);
    if (st == DQ_BAD_REQUEST)
        err->index = strtol(err->detail, NULL, 10); /* DQ_AT_RANGE <index> */
    if (st == DQ_OK)
        read_items(r, items, n);
    store_reply_free(r);
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

dq_status store_pop(dq_store *s, const char *const *topics, size_t ntopics, int count,
                    store_jobs *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    store_args_begin(s);
    store_arg_int(s, count);
    for (size_t i = 0; i < ntopics; i++)
        store_arg_str(s, topics[i]);
    dq_status st = call(s, SCRIPT_POP, &out->reply, err);
    if (st != DQ_OK)
        return st;
    out->n = reply_len(out->reply);
    out->jobs = alloc_jobs(out->n);
    for (size_t i = 0; i < out->n; i++)
        read_popped(reply_at(out->reply, i), &out->jobs[i]);
    return DQ_OK;
}

dq_status store_remove(dq_store *s, const char *allow, int finished, const char *const *ids,
                       size_t n, store_item *items, store_error *err)
{
    store_args_begin(s);
    store_arg_str(s, allow);
    store_arg_str(s, finished ? "finished" : "deleted");
    for (size_t i = 0; i < n; i++)
        store_arg_str(s, ids[i]);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_REMOVE, &r, err);
    if (st == DQ_OK)
        read_items(r, items, n);
    store_reply_free(r);
    return st;
}

/* One-id functions: allow, id, then extra arguments. */
static void one_id_args(dq_store *s, const char *allow, const char *id)
{
    store_args_begin(s);
    store_arg_str(s, allow);
    store_arg_str(s, id);
}

dq_status store_get(dq_store *s, const char *allow, const char *id, store_jobs *out,
                    store_error *err)
{
    memset(out, 0, sizeof *out);
    one_id_args(s, allow, id);
    dq_status st = call(s, SCRIPT_GET, &out->reply, err);
    if (st != DQ_OK)
        return st;
    /* {state, topic, body, due, ttr_ms, attempts, retries, created} */
    const store_reply *r = out->reply;
    out->n = 1;
    out->jobs = alloc_jobs(1);
    store_job *j = out->jobs;
    j->id = id;
    j->id_len = strlen(id);
    j->state = reply_str(reply_at(r, 0), NULL);
    j->topic = reply_str(reply_at(r, 1), &j->topic_len);
    j->body = reply_str(reply_at(r, 2), &j->body_len);
    j->due = reply_int(reply_at(r, 3));
    j->ttr_ms = reply_int(reply_at(r, 4));
    j->attempts = reply_int(reply_at(r, 5));
    j->retries = reply_int(reply_at(r, 6));
    j->created = reply_int(reply_at(r, 7));
    return DQ_OK;
}

dq_status store_touch(dq_store *s, const char *allow, const char *id, int64_t *deadline,
                      store_error *err)
{
    one_id_args(s, allow, id);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_TOUCH, &r, err);
    if (st == DQ_OK)
        *deadline = reply_int(r);
    store_reply_free(r);
    return st;
}

dq_status store_release(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                        char state[STORE_STATE_MAX], store_error *err)
{
    one_id_args(s, allow, id);
    store_arg_int(s, delay_ms);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_RELEASE, &r, err);
    if (st == DQ_OK) {
        const char *v = reply_str(r, NULL);
        strncpy(state, v ? v : "", STORE_STATE_MAX - 1);
        state[STORE_STATE_MAX - 1] = '\0';
    }
    store_reply_free(r);
    return st;
}

dq_status store_bury(dq_store *s, const char *allow, const char *id, store_error *err)
{
    one_id_args(s, allow, id);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_BURY, &r, err);
    store_reply_free(r);
    return st;
}

dq_status store_kick(dq_store *s, const char *topic, int count, int64_t *kicked,
                     store_error *err)
{
    store_args_begin(s);
    store_arg_str(s, topic);
    store_arg_int(s, count);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_KICK, &r, err);
    if (st == DQ_OK)
        *kicked = reply_int(r);
    store_reply_free(r);
    return st;
}

dq_status store_stats_read(dq_store *s, const char *topic, const char *cursor, int limit,
                           store_stats *out, store_error *err)
{
    memset(out, 0, sizeof *out);
    store_args_begin(s);
    store_arg_str(s, topic ? topic : "");
    store_arg_str(s, cursor ? cursor : "");
    store_arg_int(s, limit);
    dq_status st = call(s, SCRIPT_STATS, &out->reply, err);
    if (st != DQ_OK)
        return st;
    /* {totals, next cursor or nil, topics known, topic, fields, ...} */
    const store_reply *r = out->reply;
    out->totals = reply_at(r, 0);
    out->next_cursor = reply_str(reply_at(r, 1), NULL);
    out->topics_known = reply_int(reply_at(r, 2));
    size_t n = reply_len(r) >= 3 ? (reply_len(r) - 3) / 2 : 0;
    out->topics = calloc(n ? n : 1, sizeof *out->topics);
    if (!out->topics)
        abort();
    for (size_t i = 0; i < n; i++) {
        store_topic_stats *t = &out->topics[i];
        t->name = reply_str(reply_at(r, 3 + 2 * i), &t->name_len);
        t->fields = reply_at(r, 4 + 2 * i);
    }
    out->n = n;
    return DQ_OK;
}

int64_t store_stats_value(const store_reply *fields, const char *name)
{
    for (size_t i = 0; i + 1 < reply_len(fields); i += 2) {
        const char *f = reply_str(reply_at(fields, i), NULL);
        if (f && strcmp(f, name) == 0)
            return reply_int(reply_at(fields, i + 1));
    }
    return 0;
}

void store_stats_free(store_stats *st)
{
    free(st->topics);
    store_reply_free(st->reply);
    memset(st, 0, sizeof *st);
}

dq_status store_move(dq_store *s, int bucket, int limit, int64_t *moved, int64_t *earliest,
                     int64_t *redis_now)
{
    store_error err;
    store_args_begin(s);
    store_arg_int(s, bucket);
    store_arg_int(s, limit);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_MOVE, &r, &err);
    if (st == DQ_OK) {
        *moved = reply_int(reply_at(r, 0));
        *earliest = reply_int(reply_at(r, 1));
        *redis_now = reply_int(reply_at(r, 2));
    }
    store_reply_free(r);
    return st;
}

static void lock_args(dq_store *s, const char *op, const char *token, int lease_ms, int buckets,
                      int start)
{
    store_args_begin(s);
    store_arg_str(s, op);
    store_arg_str(s, token);
    store_arg_int(s, lease_ms);
    store_arg_int(s, buckets);
    store_arg_int(s, start);
}

dq_status store_lock_maintain(dq_store *s, const char *token, int lease_ms, int buckets,
                              int start, int *held, int *nheld, store_error *err)
{
    lock_args(s, "maintain", token, lease_ms, buckets, start);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_LOCK, &r, err);
    *nheld = 0;
    if (st == DQ_OK) {
        for (size_t i = 0; i < reply_len(r) && *nheld < buckets; i++) {
            int64_t k = reply_int(reply_at(r, i));
            if (k >= 0 && k < buckets)
                held[(*nheld)++] = (int)k;
        }
    }
    store_reply_free(r);
    return st;
}

dq_status store_lock_release(dq_store *s, const char *token, int lease_ms, int buckets,
                             int64_t *released)
{
    store_error err;
    lock_args(s, "release", token, lease_ms, buckets, 0);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_LOCK, &r, &err);
    if (st == DQ_OK)
        *released = reply_int(r);
    store_reply_free(r);
    return st;
}

dq_status store_sweep(dq_store *s, int64_t retention_ms, int limit, int64_t *forgotten)
{
    store_error err;
    store_args_begin(s);
    store_arg_int(s, retention_ms);
    store_arg_int(s, limit);
    store_reply *r = NULL;
    dq_status st = call(s, SCRIPT_SWEEP, &r, &err);
    if (st == DQ_OK)
        *forgotten = reply_int(r);
    store_reply_free(r);
    return st;
}

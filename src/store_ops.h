/* store_ops: one typed operation per Redis function of src/lua. Each owns
 * its function's argument layout and reads its reply, so callers speak in
 * jobs, ids and topics, never in ARGV slots or reply positions.
 *
 * `allow` is the caller's topic limit, checked by the function in the same
 * atomic step as the action: the token's topic prefixes joined by commas,
 * or "" for no limit. A job outside it answers exactly like a missing one.
 *
 * Results that hold strings from Redis (bodies, topics) point into a reply
 * that the result owns: release it with its _free function. */
#ifndef DQ_STORE_OPS_H
#define DQ_STORE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "request.h"
#include "status.h"
#include "store.h"

#define STORE_STATE_MAX 16

/* The outcome of one item of a batch (an added job, a removed id). */
typedef struct {
    dq_status status;             /* DQ_OK, DQ_CONFLICT or DQ_NOT_FOUND */
    char state[STORE_STATE_MAX];  /* conflict: the live job's state ("" if hidden) */
} store_item;

/* An error of a whole call, beyond its status. */
typedef struct {
    char detail[128]; /* e.g. the state of a conflicting job */
    long index;       /* add: the job whose `at` is out of range, else -1 */
} store_error;

typedef struct {
    const char *id, *topic, *state, *body;
    size_t id_len, topic_len, body_len;
    int64_t due;      /* Unix ms, -1 for none */
    int64_t ttr_ms;
    int64_t attempts; /* deliveries so far */
    int64_t retries;  /* -1: unlimited */
    int64_t created;  /* Unix ms */
} store_job;

typedef struct {
    store_job *jobs;
    size_t n;
    store_reply *reply;
} store_jobs;

void store_jobs_free(store_jobs *j);

/* Adds jobs; ids[i] is jobs[i]'s id (generated where the job had none). */
dq_status store_add(dq_store *s, const char *allow, int buckets, const dq_job_spec *jobs,
                    const char *const *ids, size_t n, store_item *items, store_error *err);
/* Reserves up to count ready jobs from the topics, in order. */
dq_status store_pop(dq_store *s, const char *const *topics, size_t ntopics, int count,
                    store_jobs *out, store_error *err);
/* finish (finished = 1) or delete (0) each id. */
dq_status store_remove(dq_store *s, const char *allow, int finished, const char *const *ids,
                       size_t n, store_item *items, store_error *err);
/* One job (store_jobs with n = 1). */
dq_status store_get(dq_store *s, const char *allow, const char *id, store_jobs *out,
                    store_error *err);
/* A reserved job's new TTR deadline (Unix ms) in *deadline. */
dq_status store_touch(dq_store *s, const char *allow, const char *id, int64_t *deadline,
                      store_error *err);
/* A reserved job back to delay/ready (or buried); its new state in state. */
dq_status store_release(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                        char state[STORE_STATE_MAX], store_error *err);
dq_status store_bury(dq_store *s, const char *allow, const char *id, store_error *err);
dq_status store_kick(dq_store *s, const char *topic, int count, int64_t *kicked,
                     store_error *err);

/* Counters: the deployment's totals, the number of topics, and one topic
 * or one page of topics by name. Field values are read by name with
 * store_stats_value. */
typedef struct {
    const char *name;
    size_t name_len;
    const store_reply *fields; /* flat field, value, ... */
} store_topic_stats;

typedef struct {
    const store_reply *totals;
    const char *next_cursor; /* NULL: the last page */
    int64_t topics_known;
    store_topic_stats *topics;
    size_t n;
    store_reply *reply;
} store_stats;

dq_status store_stats_read(dq_store *s, const char *topic, const char *cursor, int limit,
                           store_stats *out, store_error *err);
int64_t store_stats_value(const store_reply *fields, const char *name);
void store_stats_free(store_stats *st);

/* delayq-timer's operations. */
dq_status store_move(dq_store *s, int bucket, int limit, int64_t *moved, int64_t *earliest,
                     int64_t *redis_now);
/* Heartbeat and bucket locks: held[] (capacity buckets) gets the held
 * buckets, *nheld their number. */
dq_status store_lock_maintain(dq_store *s, const char *token, int lease_ms, int buckets,
                              int start, int *held, int *nheld, store_error *err);
dq_status store_lock_release(dq_store *s, const char *token, int lease_ms, int buckets,
                             int64_t *released);
dq_status store_sweep(dq_store *s, int64_t retention_ms, int limit, int64_t *forgotten);

#endif

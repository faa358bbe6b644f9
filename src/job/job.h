/* job: the job model, as data types only: one job of an add, one schedule,
 * and the limits on them that the store relies on too (name lengths, the
 * batch size). Shared by the protocol (request.h fills them) and the store
 * (store_ops.h writes them), so the store includes none of the protocol's
 * headers. */
#ifndef DQ_JOB_H
#define DQ_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "sched/cron.h"

/* A DQ_<NAME> defined on a line that ends in the comment "lua" is shared
 * with the Redis functions: src/store/lua/embed.sh puts it first in their
 * library as "local <NAME> = <value>", so it is defined here only. */
#define DQ_TOPIC_MAX 128 /* lua */
#define DQ_ID_MAX 256
/* A job's grouping key (flow control): the name rules of ids, shorter. */
#define DQ_KEY_MAX 128
/* W3C Trace Context carried with a job: a traceparent of version 00 is
 * exactly "00-<32 hex>-<16 hex>-<2 hex>"; a tracestate at most 512 bytes
 * (the size the W3C asks every vendor to propagate). */
#define DQ_TRACEPARENT_LEN 55
#define DQ_TRACESTATE_MAX 512
#define DQ_BATCH_MAX 1000
/* A schedule's fires are jobs named "<schedule id>@<Unix seconds>"
 * (store_fire_id; fire_job_id in src/store/lua/lib/90-schedules.lua), so a schedule
 * id holds no DQ_FIRE_SEP, and leaves room for it and 15 digits within
 * DQ_ID_MAX. */
#define DQ_FIRE_SEP '@' /* lua */
#define DQ_SCHEDULE_ID_MAX 240
/* Kept history (a topic's policy `keep`): at most this many records per
 * topic in each shard; a record written beyond it evicts the oldest. */
#define DQ_HISTORY_CAP 100000 /* lua */
/* A push job's delivery log (get's `deliveries`): the first bytes of each
 * response kept, and the most entries a job keeps (the oldest go). */
#define DQ_DELIVERY_RESPONSE_MAX 1024
#define DQ_DELIVERY_LOG_MAX 32 /* lua */
/* The longest `keep` (30 days, in ms): no record outlives it. */
#define DQ_KEEP_MAX_MS 2592000000 /* lua */

/* delayq-timer maintains its bucket locks every lease / 3 and reads the
 * head of every bucket it holds within DQ_HEAD_RECHECK_MS of each maintain
 * (src/timer/timer.c), so it reads each held bucket's head within
 * lease / 3 + DQ_HEAD_RECHECK_MS + DQ_HEAD_READ_SPARE_MS of any instant
 * (a second to spare for the maintain call itself): its wake-up horizon. A
 * job due that far ahead or more is found by that read, so a function that
 * schedules one neither reads its bucket's head nor publishes a wake-up
 * for it (wake_if_earliest in src/store/lua/lib/50-placement.lua). Each timer's
 * maintain records its lease (P:leases) and the largest horizon of the
 * shard's live timers (P:horizon, lock.lua); DQ_WAKE_HORIZON_MS, the
 * horizon of the longest lease allowed, stands in while none is recorded
 * or a live timer has recorded no lease (one of a release before them). */
#define DQ_HEAD_RECHECK_MS 2000 /* lua */
#define DQ_HEAD_READ_SPARE_MS 1000 /* lua */
#define DQ_WAKE_HORIZON_MS 203000 /* lua */

/* One job of an add. Strings point into the request body. */
typedef struct {
    const char *id; /* NULL: the server makes one */
    const char *topic;
    const char *body; /* the body's JSON text as sent, whitespace outside strings dropped */
    size_t body_len;
    int64_t delay_ms; /* relative delay; used when at_ms < 0 */
    int64_t at_ms;    /* absolute due time in Unix ms, or -1 */
    int64_t ttr_ms;
    int64_t retries; /* -1: unlimited */
    /* backoff: the steps in seconds as a compact JSON array ("[15,180]"),
     * NULL for none. A callback job without one gets DQ_BACKOFF_STEPPED. */
    const char *backoff;
    size_t backoff_len;
    const char *url;     /* callback URL, NULL for a pull job */
    int64_t cb_timeout_ms;
    const char *key; /* grouping key, NULL for none; picks the job's shard */
    /* trace context, NULL for none; from the job's fields or, for a single
     * add, the request's headers */
    const char *traceparent;
    const char *tracestate;
    /* upsert ("replace": true): a delayed, ready or buried job of this id
     * and topic is replaced, else the job is created; needs an id */
    int replace;
} dq_job_spec;

/* A topic's flow-control policy (the `policy` command), field by field in
 * this order: DQ_POLICY_FIELDS(X) calls X(enum, wire name, stored name,
 * min, max, unit) once per field, unit 1 for a count, 1000 for seconds
 * (kept in ms). The stored name is the field's in the policy hash and in
 * the Redis functions: the list is shared with them ("lua list": embed.sh
 * writes it out where a declaration says [policy], and as POLICY_FIELDS),
 * so a field is added here only. */
#define DQ_POLICY_FIELDS(X) /* lua list */                                                         \
    X(CONCURRENCY, "concurrency", "concurrency", 1, 1000000, 1)                                    \
    X(RATE, "rate", "rate", 1, 1000000, 1)                                                         \
    X(PERIOD, "period", "period_ms", 1, 86400000, 1000)                                            \
    X(KEY_CONCURRENCY, "key_concurrency", "key_concurrency", 1, 1000000, 1)                        \
    X(KEY_RATE, "key_rate", "key_rate", 1, 1000000, 1)                                             \
    X(KEY_PERIOD, "key_period", "key_period_ms", 1, 86400000, 1000)                                \
    X(KEEP, "keep", "keep_ms", 0, DQ_KEEP_MAX_MS, 1000)

typedef enum {
#define DQ_POLICY_ENUM(e, name, stored, min, max, unit) DQ_POLICY_##e,
    DQ_POLICY_FIELDS(DQ_POLICY_ENUM)
#undef DQ_POLICY_ENUM
    DQ_POLICY_NFIELDS
} dq_policy_field;

/* What a `policy` command does to each field. */
typedef enum {
    DQ_POLICY_KEEP_VALUE = 0, /* omitted: keeps its current value */
    DQ_POLICY_REMOVE,         /* null: removes that limit */
    DQ_POLICY_SET,            /* a value (counts as they are, seconds in ms) */
} dq_policy_op;

typedef struct {
    dq_policy_op op[DQ_POLICY_NFIELDS];
    int64_t value[DQ_POLICY_NFIELDS];
} dq_policy_spec;

/* A schedule (periodic job). Strings point into the request body. */
typedef struct {
    const char *id, *topic;
    const char *body; /* as dq_job_spec's */
    size_t body_len;
    const char *cron; /* the expression as sent, or NULL for `every` */
    dq_cron cron_parsed;
    int64_t every_s;  /* when cron is NULL */
    const char *tz;   /* zone name as sent; "UTC" when omitted (checked by the handler) */
    int64_t ttr_ms;
    int64_t retries;  /* -1: unlimited */
    int64_t start_s;  /* Unix seconds, -1: none */
    int64_t end_s;    /* Unix seconds, -1: none */
    const char *backoff; /* each fire's backoff and callback, as add's */
    size_t backoff_len;
    const char *url;
    int64_t cb_timeout_ms;
} dq_schedule_spec;

#endif

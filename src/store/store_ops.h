/* store_ops: one typed operation per Redis function of src/store/lua. Each owns
 * its function's argument layout and reads its reply, so callers speak in
 * jobs, ids, topics and shards, never in ARGV slots or reply positions.
 *
 * A job lives in the shard its id names (store_shard_of): operations on ids
 * go there, batches are split into one call per shard (sent together), and
 * per-topic figures are summed over every shard.
 *
 * `allow` is the caller's topic limit, checked by the function in the same
 * atomic step as the action: the token's topic prefixes joined by commas,
 * or "" for no limit. A job outside it answers exactly like a missing one.
 *
 * Results that hold strings from Redis (bodies, topics) point into replies
 * that the result owns: release it with its _free function. */
#ifndef DQ_STORE_OPS_H
#define DQ_STORE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "job/job.h"
#include "store/store.h"

/* Room for a conflict's state word ("reserved", a record's "finished") */
#define STORE_STATE_MAX 32

/* The outcome of one item of a batch (an added job, a removed id): DQ_OK,
 * DQ_CONFLICT or DQ_NOT_FOUND, or the failure of its shard's call
 * (DQ_UNAVAILABLE: not done; DQ_TIMEOUT: unknown) when other shards' calls
 * worked. */
typedef struct {
    dq_status status;
    /* conflict: the live job's state, or "finished"/"deleted" while its
     * record is kept; "" when the caller may not see it */
    char state[STORE_STATE_MAX];
    /* add's conflict: why (add.lua's declared reasons: a live job, a kept
     * record that ended at ended_ms, a hidden one, or an upsert that met a
     * reserved job or one of another topic, `topic`) */
    enum add_reason_value reason;
    int64_t ended_ms;
    char topic[DQ_TOPIC_MAX + 1];
    /* add: 1 when an upsert replaced a job, 0 when it created one, -1 for
     * an add without replace */
    int replaced;
} store_item;

/* An error of a whole call, beyond its status. */
typedef struct {
    char detail[128]; /* e.g. the state of a conflicting job */
} store_error;

/* What a write to every shard (pause, resume, policy, purge, kick of a
 * topic) did in each: a shard whose call fails drops out while the others
 * go on, so the caller can say where it took effect. err and the status
 * returned are the worst failure's. */
typedef enum {
    STORE_SHARD_UNTOUCHED = 0,
    STORE_SHARD_ANSWERED,
    STORE_SHARD_FAILED
} store_shard_fate;
typedef struct {
    unsigned char fate[DQ_SHARDS_MAX]; /* store_shard_fate; a failure sticks */
    int64_t calls_answered;            /* in every shard: some of it took effect */
} store_spread;

/* How many shards answered every call sent to them (none failed). */
int store_spread_answered(const store_spread *sp, int shards);

typedef struct {
    const char *id, *topic, *state, *body;
    size_t id_len, topic_len, body_len;
    int64_t due;      /* Unix ms, -1 for none */
    int64_t ttr_ms;
    int64_t attempts; /* deliveries so far */
    int64_t retries;  /* -1: unlimited */
    int64_t created;  /* Unix ms */
    const char *key;  /* grouping key, NULL for none (pop, push_take, get, jobs) */
    size_t key_len;
    /* W3C trace context, NULL for none (pop, push_take, get, jobs) */
    const char *traceparent, *tracestate;
    size_t traceparent_len, tracestate_len;
    int shard;
    int64_t pos; /* jobs: its score in the set it is listed from */
    /* get only; NULL / -1 where the job has none */
    const char *backoff; /* steps in ms, comma-separated */
    const char *url;     /* callback URL (push_take too) */
    size_t backoff_len, url_len;
    int64_t cb_timeout_ms;         /* push_take too */
    int64_t last_at, last_status;  /* the last failed callback: Unix ms, HTTP status */
    const char *last_error;
    size_t last_error_len;
    /* get and jobs: a kept record (state "finished" or "deleted") has
     * ended, its Unix ms, and no body, ttr or retries; first_delivered is
     * the first delivery's Unix ms where known (a topic that keeps
     * history), else -1 */
    int64_t ended, first_delivered;
    /* get and jobs: a push job's delivery log (store_job_delivery), in the
     * reply the result owns; NULL for none */
    const store_reply *deliveries;
} store_job;

/* Is this job a kept record of a finished or deleted one? */
int store_job_is_record(const store_job *j);

/* One callback attempt of a push job's delivery log. Strings point into
 * the job's reply; NULL / -1 where the attempt had none. */
typedef struct {
    int64_t at;       /* when its outcome was recorded, Unix ms */
    int64_t status;   /* HTTP status */
    int64_t ms;       /* how long it took */
    const char *error, *response, *decision; /* decision: finished, deleted, retry, buried */
    size_t error_len, response_len;
    int64_t retry_at; /* a retry's due time, Unix ms */
} store_delivery;

/* How many attempts j's delivery log holds (0 for none), and attempt i
 * (oldest first). */
size_t store_job_ndeliveries(const store_job *j);
void store_job_delivery(const store_job *j, size_t i, store_delivery *out);

typedef struct {
    store_job *jobs;
    size_t n, cap;
    store_reply **replies;
    size_t nreplies;
    char **copies; /* strings of jobs copied in by store_jobs_copy */
    size_t ncopies;
    /* pop, push_take: 0, or the ms until the next token of a topic whose
     * `rate` held back jobs the call could have taken (the soonest) */
    int64_t token_wait_ms;
} store_jobs;

void store_jobs_free(store_jobs *j);
/* Appends a popped job (id, topic, body, key, trace context, attempts, ttr) with its own copy
 * of its strings, so that it outlives the reply it came from. */
void store_jobs_copy(store_jobs *j, const store_job *job);

/* The recorded layout of a deployment, checked when a process starts: the
 * bucket and shard counts its Redis records must be the configured ones,
 * and no deployment of the same prefix may be laid out the other way
 * (one shard vs several). DQ_OK, DQ_MISCONFIGURED with a sentence in why,
 * or a failure (Redis unreachable: the functions check again on use). */
dq_status store_layout_check(const dq_config *cfg, char *why, size_t whylen);
/* shards = 0 (unset): sets cfg->shards to the count this deployment's
 * Redis records or, for a new deployment, to the one chosen now: 1 on one
 * Redis or behind Sentinel; on a Cluster, enough to spread over every
 * master with room to grow, recorded in Redis so that every later process
 * reads the same. DQ_OK with where it came from in why, or DQ_UNAVAILABLE
 * with why (try again). */
dq_status store_layout_choose_shards(dq_config *cfg, char *why, size_t whylen);

/* Adds jobs; ids[i] is jobs[i]'s id (generated where the job had none).
 * Returns DQ_OK when every shard's call worked; else the failure (items
 * tell which jobs it concerns when other shards' calls worked). */
dq_status store_add(dq_store *s, const char *allow, const dq_job_spec *jobs,
                    const char *const *ids, size_t n, store_item *items, store_error *err);
/* A pop: what to take, and (finish-and-pop) the jobs to finish first. */
typedef struct {
    const char *const *topics;
    size_t ntopics;
    int count;
    const char *allow;          /* topic limit for the ids finished */
    const char *const *finish;  /* ids to finish before taking jobs */
    size_t nfinish;
    store_item *finished;       /* nfinish outcomes, as store_remove's */
} store_pop_req;

/* Finishes q's ids, then reserves up to q->count ready jobs of one shard,
 * from the topics in order, in one atomic call, and appends them to out
 * (zeroed by the caller before its first use). When the call fails, every
 * finish outcome has its status. A pop the replicas did not confirm is
 * answered all the same (store.c, is_delivery). */
dq_status store_pop(dq_store *s, int shard, const store_pop_req *q, store_jobs *out,
                    store_error *err);
/* Ready jobs per shard and topic: counts[shard * ntopics + t], -1 where the
 * shard did not answer. DQ_OK if at least one shard answered. */
dq_status store_ready_counts(dq_store *s, const char *const *topics, size_t ntopics,
                             int64_t *counts, store_error *err);
/* Whether an item's status is its shard's call failing (unavailable,
 * timeout, internal, misconfigured) rather than an outcome of its own. */
int store_item_call_failed(dq_status st);
/* Whether some item's shard call worked, so a split call answers per item
 * rather than failing as a whole. */
int store_items_partly_done(const store_item *items, size_t n);
/* finish (finished = 1) or delete (0) each id; results as store_add. */
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
/* Named buried jobs back to ready; results as store_add (DQ_CONFLICT with
 * the job's state when it is not buried). */
dq_status store_kick_ids(dq_store *s, const char *allow, const char *const *ids, size_t n,
                         store_item *items, store_error *err);
/* A job in delay, ready or buried gets a new due time (at_ms, or now +
 * delay_ms when at_ms is -1): its new state ("delay" or "ready") and due
 * (Unix ms, -1 when ready). DQ_CONFLICT: it is reserved. */
dq_status store_reschedule(dq_store *s, const char *allow, const char *id, int64_t delay_ms,
                           int64_t at_ms, char state[STORE_STATE_MAX], int64_t *due,
                           store_error *err);
/* One page of a topic's jobs in one state ("delay", "ready", "reserved" or
 * "buried"), every shard asked in one pipelined round: at most limit jobs
 * after cursor ("<score>:<id>", NULL from the start), in listing order;
 * next gets the cursor of the page after ("" when this is the last). */
dq_status store_jobs_page(dq_store *s, const char *topic, const char *state, const char *cursor,
                          int limit, store_jobs *out, char *next, size_t nextlen,
                          store_error *err);
/* Up to count buried jobs of a topic back to ready, shard by shard; a
 * shard that fails is passed over (sp says which), *kicked counts the
 * jobs kicked in the others. DQ_OK when every shard asked answered, or
 * when count jobs were kicked and no failure may have kicked more. */
dq_status store_kick(dq_store *s, const char *topic, int count, int64_t *kicked, store_spread *sp,
                     store_error *err);

/* Counters, summed over the shards: the deployment's totals, the number of
 * topics, and one topic or one page of topics by name. */
typedef enum {
    STAT_DELAY,
    STAT_READY,
    STAT_RESERVED,
    STAT_BURIED,
    STAT_ADDED,
    STAT_POPPED,
    STAT_FINISHED,
    STAT_DELETED,
    STAT_REDELIVERED,
    STAT_BURIES,
    STAT_KICKED,
    STAT_PUSH_FAILED, /* failed callback attempts: an error answer, a Retry-After,
                       * or a reservation that ran out */
    STORE_NSTATS
} store_stat;
#define STORE_NGAUGES 4 /* the first four are states */
/* Their names in the stats hashes and in /stats. */
extern const char *const store_stat_names[STORE_NSTATS];

typedef struct {
    const char *name;
    size_t name_len;
    int64_t v[STORE_NSTATS];
    int paused;           /* paused in some shard (pause writes every shard) */
    int64_t ready_age_ms; /* the oldest ready job pop could take (or held push
                           * job): ms since it became ready; -1 for none */
    int limited;          /* has a policy: the two below are known */
    int64_t throttled;    /* ready jobs its limits hold back now */
    int64_t keys_waiting; /* keys with jobs held back by a per-key limit */
} store_topic_stats;

typedef struct {
    int64_t totals[STORE_NSTATS];
    const char *next_cursor; /* NULL: the last page */
    int64_t topics_known;    /* the most any shard knows (each has most topics) */
    store_topic_stats *topics;
    size_t n;
    store_reply **replies;
    size_t nreplies;
} store_stats;

dq_status store_stats_read(dq_store *s, const char *topic, const char *cursor, int limit,
                           store_stats *out, store_error *err);
void store_stats_free(store_stats *st);

/* Pauses (pause = 1) or resumes a topic in every shard, in one pipelined
 * round (a resume goes on with the shards that still hold push jobs back,
 * 1000 a call). DQ_OK only if every shard answered; pausing and resuming
 * are idempotent, so a call that failed in some shards (sp says which) is
 * sent again as a whole. */
dq_status store_pause(dq_store *s, const char *topic, int pause, store_spread *sp,
                      store_error *err);

/* Deletes a topic's jobs in one state ("delay", "ready", "reserved",
 * "buried"; NULL: every state) as delete would, in bounded steps
 * (src/store/lua/purge.lua): each round is one step per shard still
 * walking, pipelined, each looking at no more than STORE_PURGE_STEP jobs.
 * The jobs created in a shard up to the purge's first step there go; jobs
 * added while it runs stay. The states are walked until a walk over all of
 * them deletes nothing, so a job that moved to a state already walked is
 * met again. A shard that fails drops out and the others are purged to
 * the end (sp says which failed). *purged counts what went, also on
 * failure: a failure once jobs went answers DQ_TIMEOUT (done in part; a
 * purge again finishes it). */
#define STORE_PURGE_STEP 100
dq_status store_purge(dq_store *s, const char *topic, const char *state, int64_t *purged,
                      store_spread *sp, store_error *err);

/* A topic's flow-control policy and its use. */
typedef struct {
    const char *topic; /* NUL-terminated */
    size_t topic_len;
    int64_t value[DQ_POLICY_NFIELDS]; /* counts, periods and keep in ms; -1: unset */
    int64_t reserved;  /* jobs reserved by pops plus callbacks in flight, every shard */
    int64_t throttled; /* ready jobs held back by a limit, every shard */
    int64_t keys_waiting; /* keys with jobs held back by key_concurrency, every shard */
    int64_t tokens;    /* whole tokens of its `rate` left now, every shard; -1: no rate */
} store_policy;

typedef struct {
    store_policy *policies;
    size_t n;
    const char *next_cursor; /* NULL: the last page */
    store_reply **replies;
    size_t nreplies;
} store_policies;

/* Applies a `policy` command to the topic's policy in every shard, in one
 * pipelined round (each shard keeps a copy, which its pops read in their
 * own atomic call), and reads back the policy as it stands (the first
 * shard's that answered). DQ_OK only if every shard answered, else the
 * worst failure (sp says which shards failed); the command is idempotent,
 * so a failed one is repeated as a whole. out->topic is the caller's
 * topic. */
dq_status store_policy_set(dq_store *s, const char *topic, const dq_policy_spec *spec,
                           store_policy *out, store_spread *sp, store_error *err);
/* The policies of one topic (topic != NULL), or a page of the topics that
 * have one, after cursor (NULL: from the start), by name. */
dq_status store_policies_read(dq_store *s, const char *topic, const char *cursor, int limit,
                              store_policies *out, store_error *err);
void store_policies_free(store_policies *p);

/* How far behind the timers are, per shard (see src/store/lua/lag.lua). */
typedef struct {
    const char *timer; /* a live timer's token, NUL-terminated */
    int shard;
    int64_t late_ms;   /* its largest lateness within a second of moves */
    int64_t age_ms;    /* how long ago that was recorded */
} store_timer_lag;

typedef struct {
    int64_t overdue_ms;    /* the oldest bucket entry past due, over shards; 0 none */
    int64_t push_age_ms;   /* the oldest ready push job in P:push; -1 none */
    int64_t paused_topics; /* the most any shard records */
    store_timer_lag *timers;
    size_t ntimers;
    store_reply **replies;
    size_t nreplies;
} store_lag;

/* One pipelined round over the shards; fails if any shard does not answer. */
dq_status store_lag_read(dq_store *s, store_lag *out, store_error *err);
void store_lag_free(store_lag *l);

/* Makes the jobs (each with its shard and attempts) ready again at once,
 * at the head of their queues, their deliveries uncounted, where each is
 * still reserved for that delivery: reservations no client will use. `why`
 * is logged. */
void store_give_back(dq_store *s, const store_jobs *jobs, const char *why);

/* delayq-push's operations. push_take reserves up to limits[k] ready push
 * jobs of each shard k whose limit is above 0 (id, topic, body, url,
 * attempts, cb_timeout_ms), each until its timeout plus grace_ms, in one
 * pipelined round: a slow shard delays the others by one wait, not by
 * theirs added up. status[k] tells how shard k's take went (a take the
 * replicas did not confirm is DQ_OK: store.c, is_delivery). token_wait[k]: 0, or the ms until the
 * next token of a topic of shard k whose jobs wait for their `rate` (call
 * shard k again then: its take puts them back). */
void store_push_take(dq_store *s, const int *limits, int grace_ms, store_jobs *out,
                     dq_status *status, int64_t *token_wait);
/* The outcome of one delivery, for push_done. */
typedef struct {
    const char *id;      /* in: the job and its delivery number */
    int64_t attempt;
    const char *outcome; /* in: "ok", "gone", "wait" or "fail" */
    int64_t wait_ms;     /* in: for "wait" */
    int64_t status;      /* in: HTTP status, -1 for none */
    const char *error;   /* in: short text, "" for none */
    int64_t ms;          /* in: how long the attempt took */
    const char *response; /* in: the response body's first bytes, valid UTF-8, "" for none */
    dq_status result;    /* out */
    char state[STORE_STATE_MAX]; /* out: the job's new state, or "stale" */
} store_push_outcome;
/* Applies outcomes, one pipelined round per node. */
void store_push_done(dq_store *s, store_push_outcome *o, size_t n);
/* Schedules (periodic jobs). A schedule lives in the shard its id names.
 * Strings point into the replies the list owns. */
typedef struct {
    const char *id, *topic, *cron, *tz, *body; /* cron NULL for every; body NULL unless one id */
    size_t id_len, topic_len, body_len;
    int64_t every_s;
    int64_t start_s, end_s; /* -1: none */
    int64_t anchor_s;
    int64_t next_ms, last_ms; /* -1: none */
    int64_t version;          /* of the definition; sched_due only */
    int64_t missed;
    int64_t ttr_ms, retries, created_ms;
} store_schedule;

typedef struct {
    store_schedule *list;
    size_t n;
    store_reply **replies;
    size_t nreplies;
} store_schedules;

void store_schedules_free(store_schedules *l);
/* What store_schedule_put did: replaced tells a replacement from a new
 * schedule; retry that it wrote nothing, because the first fire must be
 * computed again, strictly after now_ms (Redis' time) and last_ms (the
 * schedule's last fire, -1: none). */
typedef struct {
    int replaced, retry;
    int64_t now_ms, last_ms;
} store_schedule_put_result;
/* Creates or replaces a schedule whose first fire (next_ms, -1: none) and
 * anchor (every: fires are anchor + k * every) the caller computed from
 * now_ms, its reading of the time. DQ_CONFLICT: the id is a schedule of a
 * topic outside allow. */
dq_status store_schedule_put(dq_store *s, const char *allow, const dq_schedule_spec *sc,
                             int64_t anchor_s, int64_t next_ms, int64_t now_ms,
                             store_schedule_put_result *out, store_error *err);
/* DQ_NOT_FOUND: no such schedule (or one of a topic outside allow). */
dq_status store_unschedule(dq_store *s, const char *allow, const char *id, store_error *err);
/* One schedule (id, with its body; DQ_NOT_FOUND when unknown), or every
 * schedule of every shard that allow lets the caller see, by id (one
 * pipelined round). */
dq_status store_schedules_read(dq_store *s, const char *allow, const char *id,
                               store_schedules *out, store_error *err);

/* delayq-timer: the due schedules of one shard (at most limit; with their
 * definition and next_ms), the shard's Redis time and its earliest next
 * fire (-1: none). */
dq_status store_sched_due(dq_store *s, int shard, int limit, int64_t *redis_now,
                          int64_t *earliest, store_schedules *out);
/* One fire of a schedule (see src/store/lua/fire.lua): in, and the result out. */
typedef struct {
    const char *id;                           /* in */
    int64_t version;                          /* in: the definition's, as read */
    int64_t expected_ms, fire_ms, next_ms;    /* in; fire_ms -1: move on only */
    int64_t missed;                           /* in */
    dq_status status;                         /* out */
    int fired;                                /* out: a job was added */
} store_fire_call;
/* The fires of one shard in one pipelined round. */
void store_fire_many(dq_store *s, int shard, store_fire_call *calls, size_t n);

/* delayq-timer's operations. A move makes up to limit due jobs of one
 * bucket of one shard ready (or redelivers them) and tells when the bucket
 * is next due: earliest, -1 for empty, in Redis' clock (redis_now). */
typedef struct {
    const char *timer;                  /* in: the timer's token, for P:timerlag */
    int shard, bucket;                  /* in */
    dq_status status;                   /* out */
    int64_t moved, earliest, redis_now; /* out, when status is DQ_OK */
} store_move_call;
/* The moves of many buckets in one pipelined round per node (at most
 * STORE_MOVES_PER_ROUND; the caller splits longer lists). first_err gets
 * the error of the first call that failed, if any did. */
#define STORE_MOVES_PER_ROUND 1024
void store_move_many(dq_store *s, store_move_call *calls, size_t n, int limit,
                     store_error *first_err);
/* Heartbeat and bucket locks in every shard at once (one pipelined round):
 * held[shard * buckets + k] is set for each bucket k held, ok[shard] says
 * whether the shard answered. Returns DQ_OK if any did, DQ_MISCONFIGURED
 * (fatal) if a shard records another layout. */
dq_status store_lock_maintain(dq_store *s, const char *token, int lease_ms, int buckets,
                              int start, unsigned char *held, unsigned char *ok,
                              store_error *err);
/* Drops the token's locks in every shard; *released counts them. */
dq_status store_lock_release(dq_store *s, const char *token, int lease_ms, int buckets,
                             int64_t *released);
dq_status store_sweep(dq_store *s, int shard, int64_t retention_ms, int limit,
                      int64_t *forgotten);

#endif

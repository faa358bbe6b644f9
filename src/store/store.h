/* store: the Redis connections of one thread. With store_ops.c,
 * store_conn.c, store_sentinel.c, store_slots.c and store_errors.c, the
 * only code that includes hiredis.
 *
 * A deployment's keys are split into `shards` hash-tag groups (shard i's
 * keys start with store_tag(i): "{prefix}" for one shard, "{prefix:i}" for
 * several). Every call of a delayq function is for one shard. The store
 * sends it to the Redis that holds that shard:
 * - one Redis (redis_host/redis_port or redis_socket);
 * - the primary the sentinels name (redis_sentinels), found again after a
 *   failover (+switch-master, a READONLY reply, a lost connection);
 * - the master of the shard's slot in a Redis Cluster (redis_cluster seeds):
 *   a slot map from CLUSTER SHARDS, a connection per node, MOVED (update the
 *   map) and ASK (ASKING) followed, CLUSTERDOWN/TRYAGAIN retried a few times.
 * Calls are built in batches: the calls for one node go out in one write
 * (pipelined), all nodes at once, and each reply is read back in turn. It
 * connects lazily with bounded timeouts, backs off while Redis is down, loads
 * the function library where Redis lacks it, follows writes with WAIT when
 * redis_wait_replicas asks, and classifies every failure as "no effect"
 * (503) or "unknown outcome" (504). Handlers use store_ops.h. */
#ifndef DQ_STORE_H
#define DQ_STORE_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/config.h"
#include "common/status.h"
#include "store/lua_scripts.h"

typedef struct dq_store dq_store;
typedef struct redisReply store_reply;

dq_store *store_new(const dq_config *cfg);
void store_free(dq_store *s);

/* This store's writes are not followed by WAIT, whatever
 * redis_wait_replicas says: for a caller whose writes a failover may undo
 * harmlessly (the timer: a lost move leaves the job where it was, to be
 * moved again; a lost lock renewal is taken again). */
void store_skip_wait(dq_store *s);

int store_shards(const dq_store *s);
int store_buckets(const dq_store *s); /* per shard */
/* "{prefix}" or "{prefix:i}": the hash-tagged key prefix of shard i. */
const char *store_tag(const dq_store *s, int shard);
/* A job's shard and its bucket within the shard follow from its id. */
int store_shard_of(const dq_store *s, const char *id, size_t n);
int store_bucket_of(const dq_store *s, const char *id, size_t n);
/* The shard of a grouping key: a job with a key lives there, so that one
 * atomic call sees every job of the key (per-key flow limits). Its id must
 * name that shard (store_shard_of), since finish, get and the rest find a
 * job by its id alone: store_key_id makes such an id; a client's id names
 * it when it is "<key>@<digits>" (the rule of a schedule's fires), or by
 * chance. */
int store_key_shard(const dq_store *s, const char *key, size_t n);
int store_id_fits_key(const dq_store *s, const char *id, const char *key);
/* Writes a random id of 2 * nbytes hex digits (NUL-ended) into out, one
 * in the shard of key when key is not NULL; -1 when none was found. */
int store_key_id(const dq_store *s, const char *key, char *out, size_t nbytes);
/* The id of a schedule's fire: "<schedule id>@<fire in Unix seconds>"
 * (DQ_FIRE_SEP), which lives in the schedule's shard. Writes it to out
 * (NUL-ended) and returns its length, or 0 when it does not fit. */
size_t store_fire_id(char *out, size_t outlen, const char *schedule_id, int64_t fire_ms);

/* Building a batch: store_batch_begin, then per call store_batch_call and
 * its arguments (strings are not copied: they must live until the batch
 * ran), then store_batch_run. Each call's status, detail and reply are read
 * with store_batch_result; a reply taken stays the caller's (free it with
 * store_reply_free), the others are freed by the next batch. */
void store_batch_begin(dq_store *s);
void store_batch_call(dq_store *s, dq_script fn, int shard);
/* Calls begun while on are answered only once the replicas confirmed
 * them (redis_wait_replicas), whatever their function: a delete, which a
 * failover must not undo (the job, cancelled, would be delivered). */
void store_batch_must_confirm(dq_store *s, int on);
void store_arg(dq_store *s, const char *str, size_t n);
void store_arg_str(dq_store *s, const char *str);
void store_arg_int(dq_store *s, int64_t v);
/* One argument of a call, for store_args: text (not copied) or an integer. */
typedef struct {
    const char *str; /* NULL for an integer */
    size_t len;
    int64_t num;
    int set;
} store_val;
static inline store_val store_text(const char *str, size_t n)
{
    return (store_val){str, n, 0, 1};
}
static inline store_val store_str(const char *str)
{
    return store_text(str, strlen(str));
}
static inline store_val store_int(int64_t v)
{
    return (store_val){NULL, 0, v, 1};
}
/* Typed arguments, for the calls lua_calls.h generates from a declaration
 * that gives types (args_add(s, ...)): a missing argument or one of the
 * wrong kind does not compile. Text (store_txt) is not copied and must be
 * there; optional text (store_opt_txt, NULL for none) and optional
 * integers (store_opt_int) are sent as "" when absent, which the
 * function's generated args() reads back as nil. */
typedef struct {
    const char *str;
    size_t len;
} store_txt;
typedef struct {
    const char *str; /* NULL: none */
    size_t len;
} store_opt_txt;
typedef struct {
    int64_t num;
    int set;
} store_opt_int;
static inline store_txt store_txt_n(const char *str, size_t n)
{
    return (store_txt){str, n};
}
static inline store_txt store_txt_s(const char *str)
{
    return (store_txt){str, str ? strlen(str) : 0};
}
static inline store_opt_txt store_maybe_n(const char *str, size_t n)
{
    return (store_opt_txt){str, str ? n : 0};
}
static inline store_opt_txt store_maybe_s(const char *str)
{
    return (store_opt_txt){str, str ? strlen(str) : 0};
}
/* v when set is true, else none */
static inline store_opt_int store_maybe_int(int64_t v, int set)
{
    return (store_opt_int){v, set};
}
/* A declared list of text ("ids:text..."): str[order[i]] for i in [0, n),
 * or str[i] when order is NULL (a caller sending one shard's share of its
 * ids gives that share's order). */
typedef struct {
    const char *const *str;
    const size_t *order;
    size_t n;
} store_list;
static inline store_list store_list_of(const char *const *str, size_t n)
{
    return (store_list){str, NULL, n};
}
void store_arg_txt(dq_store *s, store_txt v);
void store_arg_opt_txt(dq_store *s, store_opt_txt v);
void store_arg_opt_int(dq_store *s, store_opt_int v);
/* counted: its count goes first (a list that is not the last) */
void store_arg_list(dq_store *s, store_list v, int counted);
/* A call's declared arguments (or one group of them) in one step: v[0..n),
 * filled by the names lua_scripts.h generates from the function's
 * declaration (v[ADD_ARG_ALLOW] = ...). A slot left unset is a caller that
 * drifted from the declaration: it aborts. */
void store_args(dq_store *s, const store_val *v, size_t n);
void store_batch_run(dq_store *s);
/* Call i's status (DQ_OK, a function's error such as DQ_NOT_FOUND with its
 * detail, or a failure: DQ_UNAVAILABLE, DQ_TIMEOUT, DQ_INTERNAL). With
 * reply set, call i's reply is handed over (NULL unless DQ_OK). */
dq_status store_batch_result(dq_store *s, size_t i, store_reply **reply, char *detail,
                             size_t detail_len);

/* The same call to every shard in one batch, run: fn with its declared
 * arguments (args, nargs), then the strings rest[0..nrest). Call k of the
 * batch is shard k's. */
void store_batch_every_shard(dq_store *s, dq_script fn, const store_val *args, size_t nargs,
                             const char *const *rest, size_t nrest);
/* The same, with a typed call's arguments (lua_calls.h):
 *   for (int k = 0; store_every_shard_call(s, fn, k); k++)
 *       args_<fn>(s, ...);
 * begins the batch at k 0, begins shard k's call and answers 1 while k is
 * a shard, and runs the batch and answers 0 after the last. */
int store_every_shard_call(dq_store *s, dq_script fn, int k);

/* One call: store_begin(fn, shard), arguments, store_run. */
void store_begin(dq_store *s, dq_script fn, int shard);
dq_status store_run(dq_store *s, store_reply **reply, char *detail, size_t detail_len);

/* PING of every Redis the deployment uses (every master of a cluster), for
 * /health. */
dq_status store_ping(dq_store *s);
/* With redis_wait_replicas: each shard's master's replicas online in
 * replicas[0..shards) (-1: its master did not answer), counted at most once
 * a second; returns how many shards have fewer than redis_wait_replicas.
 * Without it, 0 and replicas untouched. */
int store_replica_counts(dq_store *s, int *replicas);
/* A Cluster: how many masters serve at least one of this deployment's
 * shards, with the number of masters in *masters (from the map this store
 * has, read again when it is stale). 0 and 0 elsewhere. */
int store_cluster_spread(dq_store *s, int *masters);
/* The shard count a new deployment spreads over the cluster's masters
 * with (slots_pick_shards, per_master shards per master): 1 on one Redis
 * or behind Sentinel, 0 when no cluster node answered. */
int store_pick_shards(dq_store *s, int per_master);
/* Why Redis cannot be used right now, as a sentence for clients and logs
 * ("Redis at h:p refused delayq's credentials: AUTH failed (...)"), or ""
 * when the last command worked. Process-wide: every thread's stores share
 * it. */
void store_last_cause(char *out, size_t outlen);

/* Subscriber side (a store used for nothing else): subscribes to the
 * sharded channel "<tag><suffix>" of every shard (":ready", ":wake"), on
 * the node that holds each. store_sub_fds fills what to poll (at most max;
 * returns how many); store_sub_read returns the next message (0, with the
 * shard it came from, and its length when len is not NULL: the payload is
 * copied byte for byte, NULs included, cut to plen - 1 and NUL-ended),
 * nothing yet (1), or -1 when the subscription must be made again (a
 * connection dropped, a slot moved, the primary changed): messages may
 * have been missed then. */
dq_status store_sub_open(dq_store *s, const char *suffix);
int store_sub_fds(dq_store *s, struct pollfd *fds, int max);
int store_sub_read(dq_store *s, int *shard, char *payload, size_t plen, size_t *len);
int store_sub_open_now(const dq_store *s);
/* The longest a subscriber may wait before calling store_sub_read again:
 * it PINGs silent subscriptions and gives up one whose PING goes
 * unanswered, so a node that froze or was cut off is noticed. */
int store_sub_wait_ms(const dq_store *s);

/* Reading a Redis reply (store_ops.c). The reply_* functions of
 * src/fcgi/reply.c are another thing: they write the JSON answers. */
void store_reply_free(store_reply *r);
int store_reply_nil(const store_reply *r);
size_t store_reply_len(const store_reply *r);
const store_reply *store_reply_at(const store_reply *r, size_t i);
/* String value (also for status replies); *n gets its length. NULL if not a string. */
const char *store_reply_str(const store_reply *r, size_t *n);
/* Integer value; strings holding integers are parsed; -1 for nil. */
int64_t store_reply_int(const store_reply *r);

#endif

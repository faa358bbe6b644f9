/* store: one thread's Redis connections: one Redis, a Sentinel-watched
 * primary, or a Redis Cluster (see store.h). */
#include "store/store.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "job/job.h"
#include "store/lua_library.inc"
#include "store/store_conn.h"
#include "store/store_errors.h"
#include "store/store_replicas.h"
#include "store/store_sentinel.h"
#include "store/store_slots.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 250
/* FCALL, function, numkeys, KEYS[1]: the slots before each call's arguments. */
#define HEAD_ARGS 4
/* Redirections and "try again" answers followed before giving up (503). */
#define MAX_ROUNDS 6
#define RETRY_PAUSE_MS 100
/* At most this often a thread asks the cluster for its slot map. */
#define MAP_REFRESH_MIN_MS 100
#define MAX_NODES 64
#define TAG_MAX 80
/* A subscription silent this long is sent a PING; one whose PING is not
 * answered within redis_timeout_ms is given up and made again (a node that
 * froze or was cut off by a partition sends no EOF). */
#define SUB_PING_MS 1000
/* Read buffer a connection keeps between calls (hiredis' own default). */
#define READER_KEEP (16 * 1024)
#define NUM_CHUNK 1024
/* A master's replicas are counted again (INFO replication) at most this
 * often per connection: a failover shows within a second, and no request
 * pays a round trip for it. */
#define REPLICAS_REFRESH_MS 1000

typedef char num_text[24]; /* an int64 in decimal, NUL-ended */

typedef enum { MODE_SINGLE, MODE_SENTINEL, MODE_CLUSTER } store_mode;

/* A Redis this thread talks to, and its connection. */
typedef struct {
    char host[SLOTS_HOST_MAX + 1]; /* or a unix socket path when port is 0 */
    int port;
    redisContext *ctx;
    uint64_t gen;      /* sentinel generation it was connected at */
    int64_t retry_at;  /* monotonic ms before which we do not reconnect */
    int64_t failed_at; /* monotonic ms of the last failed connect */
    int backoff_ms;
    /* Its last connect or call failed, and no reply came since: the slot
     * map is asked of it only when no other node answers (a frozen or cut
     * off node costs a timeout). */
    int down;
    redisContext *sub; /* subscriber connection to this node */
    int64_t sub_heard;  /* monotonic ms of the last reply on sub */
    int64_t sub_pinged; /* monotonic ms of the PING sent on sub; 0: none owed */
    /* Found while reading a round's replies, done once all are read (the
     * connection may still owe replies of other calls until then): */
    int drop;   /* close the connection (a READONLY: no primary any more) */
    int reload; /* load the function library (Redis lacks it) */
    long wait_after; /* the round's call after which WAIT goes here; -1: none */
    int replicas;         /* online, as last counted; -1: not known */
    int64_t replicas_at;  /* monotonic ms of that count; 0: count again */
} store_node;

/* One call of a batch. */
typedef struct {
    dq_script fn;
    int shard;
    size_t first;     /* its FCALL in the argument arrays */
    size_t argc;      /* head and arguments */
    int node;         /* where it goes this round */
    int asking;       /* send ASKING first (an ASK redirection) */
    int pause;        /* a "try again": wait before the next round */
    int rerouted; /* routed again once after its node was unreachable */
    int must_confirm; /* answered only once confirmed, whatever its function */
    int done;
    dq_status status;
    char detail[128];
    redisReply *reply;
} store_pending;

struct dq_store {
    const dq_config *cfg;
    int confirm_calls; /* the calls begun now are answered only once confirmed */
    store_mode mode;
    int shards;
    char (*tags)[TAG_MAX];
    unsigned *slots; /* each shard's hash slot */
    store_node nodes[MAX_NODES];
    int nnodes;
    slots_map *map;       /* cluster: slot -> master */
    int64_t map_fetched;  /* monotonic ms of the last refresh */
    /* A node failed or answered that it is not the slot's master: the map
     * may be stale. The next routing reads it again (rate-limited). */
    int map_suspect;
    dq_addr seeds[CONFIG_MAX_ADDRS];
    int nseeds;
    /* The batch being built or run. */
    store_pending *calls;
    size_t ncalls, callcap;
    const char **argv;
    size_t *len;
    size_t nargv, argvcap;
    /* Integer arguments as text, in chunks that never move (argv points
     * into them), kept for the store's life: as many as the largest batch
     * needed. The request limits bound that (DQ_BATCH_MAX jobs, 1,024
     * shards); no cap here to drift from them. */
    num_text **num_chunks;
    size_t nchunks;
    size_t nnums;
    int wait_replicas; /* WAIT after each write: redis_wait_replicas, or 0 */
    /* Subscriber: the channel suffix, and which shards each node carries. */
    char sub_suffix[32];
    int subscribed;
    uint64_t sub_gen; /* sentinel: the generation of the primary subscribed to */
    uint64_t failover_mark; /* sentinel: taken before a round's writes went out */
};

/* Monotonic ms of the latest successful connect by any thread. */
static int64_t last_connect_ok;

/* ------------------------------------------------------------------------ */
/* Why Redis cannot be used: logged once per change, shown to clients        */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t cause_lock = PTHREAD_MUTEX_INITIALIZER;
static char cause[300];      /* "" while Redis works */
static char cause_node[300]; /* host:port the cause is about; "" for all */

/* Records the current cause ("" = working) about node at (NULL: Redis as a
 * whole, e.g. no sentinel answered) and logs it when it changed, so a
 * Redis that stays down for an hour logs one line, not one per retry. */
static void set_cause(const store_node *at, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_cause(const store_node *at, const char *fmt, ...)
{
    char now[sizeof cause];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(now, sizeof now, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&cause_lock);
    int changed = strcmp(now, cause) != 0;
    if (changed) {
        if (now[0])
            log_error("%s", now);
        else
            log_info("Redis is reachable again");
        snprintf(cause, sizeof cause, "%s", now);
    }
    if (at)
        snprintf(cause_node, sizeof cause_node, "%s:%d", at->host, at->port);
    else
        cause_node[0] = '\0';
    pthread_mutex_unlock(&cause_lock);
}

/* Node at answered (NULL: every node did): the cause is gone if it was
 * about that node, or about Redis as a whole. Another node of a cluster
 * answering says nothing about a node that is down. */
static void clear_cause(const store_node *at)
{
    /* Cheap check first: the common case is "nothing to clear". */
    if (!__atomic_load_n(&cause[0], __ATOMIC_RELAXED))
        return;
    char where[sizeof cause_node] = "";
    if (at)
        snprintf(where, sizeof where, "%s:%d", at->host, at->port);
    pthread_mutex_lock(&cause_lock);
    int clear = !at || !cause_node[0] || strcmp(where, cause_node) == 0;
    pthread_mutex_unlock(&cause_lock);
    if (clear)
        set_cause(NULL, "%s", "");
}

void store_last_cause(char *out, size_t outlen)
{
    pthread_mutex_lock(&cause_lock);
    snprintf(out, outlen, "%s", cause);
    pthread_mutex_unlock(&cause_lock);
}

/* ------------------------------------------------------------------------ */
/* Shards                                                                    */
/* ------------------------------------------------------------------------ */

void store_skip_wait(dq_store *s)
{
    s->wait_replicas = 0;
}

int store_shards(const dq_store *s)
{
    return s->shards;
}

int store_buckets(const dq_store *s)
{
    return s->cfg->buckets;
}

const char *store_tag(const dq_store *s, int shard)
{
    return s->tags[shard];
}

size_t store_fire_id(char *out, size_t outlen, const char *schedule_id, int64_t fire_ms)
{
    int n = snprintf(out, outlen, "%s%c%lld", schedule_id, DQ_FIRE_SEP,
                     (long long)(fire_ms >= 0 ? fire_ms / 1000 : 0));
    return n < 0 || (size_t)n >= outlen ? 0 : (size_t)n;
}

/* The length of the schedule id that starts a fire's id (store_fire_id),
 * or n for any other id. */
static size_t fire_schedule_len(const char *id, size_t n)
{
    size_t d = n;
    while (d > 0 && id[d - 1] >= '0' && id[d - 1] <= '9')
        d--;
    return d > 1 && d < n && id[d - 1] == DQ_FIRE_SEP ? d - 1 : n;
}

/* A schedule's fires are made by one atomic call in the schedule's shard:
 * so a fire's id lives in the shard of its schedule id (like a Redis
 * Cluster hash tag). Its bucket still follows from the whole id. */
int store_shard_of(const dq_store *s, const char *id, size_t n)
{
    return (int)(util_crc32(id, fire_schedule_len(id, n)) % (uint32_t)s->shards);
}

int store_bucket_of(const dq_store *s, const char *id, size_t n)
{
    return (int)(util_crc32(id, n) / (uint32_t)s->shards % (uint32_t)s->cfg->buckets);
}

int store_key_shard(const dq_store *s, const char *key, size_t n)
{
    return (int)(util_crc32(key, n) % (uint32_t)s->shards);
}

int store_id_fits_key(const dq_store *s, const char *id, const char *key)
{
    return !key || store_shard_of(s, id, strlen(id)) == store_key_shard(s, key, strlen(key));
}

/* A random id falls into a given shard once in `shards` tries: drawing
 * until one does costs a few crc32s and keeps every id-based operation
 * as it is. */
/* Some shard is not known to be short of replicas. */
static int any_shard_whole(const dq_store *s)
{
    for (int k = 0; k < s->shards; k++) {
        if (!replicas_short(k))
            return 1;
    }
    return 0;
}

/* An id of no key may go to any shard: one whose adds can be confirmed,
 * while there is one (see store_replicas.h). */
int store_key_id(const dq_store *s, const char *key, char *out, size_t nbytes)
{
    int avoid_short = !key && any_shard_whole(s);
    for (int tries = 0; tries < 1 << 16; tries++) {
        util_random_hex(out, nbytes);
        if (!store_id_fits_key(s, out, key))
            continue;
        if (avoid_short && replicas_short(store_shard_of(s, out, strlen(out))))
            continue;
        return 0;
    }
    return -1; /* only with a random source that repeats itself */
}

/* ------------------------------------------------------------------------ */
/* Building a batch                                                          */
/* ------------------------------------------------------------------------ */

static void grow_argv(dq_store *s, size_t extra)
{
    if (s->nargv + extra <= s->argvcap)
        return;
    size_t cap = s->argvcap ? s->argvcap : 64;
    while (cap < s->nargv + extra)
        cap *= 2;
    s->argv = util_xrealloc(s->argv, cap * sizeof *s->argv);
    s->len = util_xrealloc(s->len, cap * sizeof *s->len);
    s->argvcap = cap;
}

static void free_replies(dq_store *s)
{
    for (size_t i = 0; i < s->ncalls; i++) {
        if (s->calls[i].reply)
            freeReplyObject(s->calls[i].reply);
        s->calls[i].reply = NULL;
    }
}

void store_batch_begin(dq_store *s)
{
    free_replies(s);
    s->ncalls = 0;
    s->nargv = 0;
    s->nnums = 0;
}

void store_batch_must_confirm(dq_store *s, int on)
{
    s->confirm_calls = on;
}

void store_batch_call(dq_store *s, dq_script fn, int shard)
{
    if (s->ncalls == s->callcap) {
        s->callcap = s->callcap ? s->callcap * 2 : 8;
        s->calls = util_xrealloc(s->calls, s->callcap * sizeof *s->calls);
    }
    store_pending *c = &s->calls[s->ncalls++];
    memset(c, 0, sizeof *c);
    c->fn = fn;
    c->shard = shard;
    c->node = -1;
    c->must_confirm = s->confirm_calls;
    grow_argv(s, HEAD_ARGS);
    c->first = s->nargv;
    int ro = lua_functions[fn].read_only;
    const char *head[HEAD_ARGS] = {ro ? "FCALL_RO" : "FCALL", lua_functions[fn].name, "1",
                                   s->tags[shard]};
    for (int i = 0; i < HEAD_ARGS; i++) {
        s->argv[s->nargv] = head[i];
        s->len[s->nargv++] = strlen(head[i]);
    }
    c->argc = HEAD_ARGS;
}

void store_arg(dq_store *s, const char *str, size_t n)
{
    grow_argv(s, 1);
    s->argv[s->nargv] = str;
    s->len[s->nargv++] = n;
    s->calls[s->ncalls - 1].argc++;
}

void store_arg_str(dq_store *s, const char *str)
{
    store_arg(s, str, strlen(str));
}

void store_arg_int(dq_store *s, int64_t v)
{
    size_t chunk = s->nnums / NUM_CHUNK;
    if (chunk == s->nchunks) {
        s->num_chunks = util_xrealloc(s->num_chunks, (chunk + 1) * sizeof *s->num_chunks);
        s->num_chunks[chunk] = util_xmalloc(NUM_CHUNK * sizeof(num_text));
        s->nchunks++;
    }
    char *p = s->num_chunks[chunk][s->nnums++ % NUM_CHUNK];
    int n = snprintf(p, sizeof(num_text), "%" PRId64, v);
    store_arg(s, p, (size_t)n);
}

void store_arg_txt(dq_store *s, store_txt v)
{
    if (!v.str)
        abort(); /* required text: a caller's bug, as an unset store_val */
    store_arg(s, v.str, v.len);
}

void store_arg_opt_txt(dq_store *s, store_opt_txt v)
{
    store_arg(s, v.str ? v.str : "", v.str ? v.len : 0);
}

void store_arg_opt_int(dq_store *s, store_opt_int v)
{
    if (v.set)
        store_arg_int(s, v.num);
    else
        store_arg(s, "", 0);
}

void store_arg_list(dq_store *s, store_list v, int counted)
{
    if (counted)
        store_arg_int(s, (int64_t)v.n);
    for (size_t i = 0; i < v.n; i++)
        store_arg_str(s, v.str[v.order ? v.order[i] : i]);
}

void store_args(dq_store *s, const store_val *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!v[i].set)
            abort();
        if (v[i].str)
            store_arg(s, v[i].str, v[i].len);
        else
            store_arg_int(s, v[i].num);
    }
}

void store_batch_every_shard(dq_store *s, dq_script fn, const store_val *args, size_t nargs,
                             const char *const *rest, size_t nrest)
{
    store_batch_begin(s);
    for (int k = 0; k < s->shards; k++) {
        store_batch_call(s, fn, k);
        store_args(s, args, nargs);
        for (size_t i = 0; i < nrest; i++)
            store_arg_str(s, rest[i]);
    }
    store_batch_run(s);
}

int store_every_shard_call(dq_store *s, dq_script fn, int k)
{
    if (k == 0)
        store_batch_begin(s);
    if (k < s->shards) {
        store_batch_call(s, fn, k);
        return 1;
    }
    store_batch_run(s);
    return 0;
}

void store_begin(dq_store *s, dq_script fn, int shard)
{
    store_batch_begin(s);
    store_batch_call(s, fn, shard);
}

dq_status store_batch_result(dq_store *s, size_t i, store_reply **reply, char *detail,
                             size_t detail_len)
{
    store_pending *c = &s->calls[i];
    if (detail_len)
        snprintf(detail, detail_len, "%s", c->detail);
    if (reply) {
        *reply = c->status == DQ_OK ? c->reply : NULL;
        if (c->status == DQ_OK)
            c->reply = NULL;
    }
    return c->status;
}


dq_status store_run(dq_store *s, store_reply **reply, char *detail, size_t detail_len)
{
    store_batch_run(s);
    return store_batch_result(s, 0, reply, detail, detail_len);
}

/* ------------------------------------------------------------------------ */
/* Nodes and connections                                                     */
/* ------------------------------------------------------------------------ */

static void node_disconnect(store_node *n)
{
    conn_abandon(n->ctx);
    n->ctx = NULL;
    n->replicas_at = 0; /* another server may answer there next */
}

/* Something failed on the way to a node of a cluster: a failover or a
 * moved slot may have made the map stale. Nothing else would re-read it
 * while it still names a node that is gone (a dead node sends no MOVED). */
static void suspect_map(dq_store *s)
{
    if (s->mode == MODE_CLUSTER)
        s->map_suspect = 1;
}

/* The node at host:port, or -1 (never adds one). */
static int find_node(const dq_store *s, const char *host, int port)
{
    for (int i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].port == port && strcasecmp(s->nodes[i].host, host) == 0)
            return i;
    }
    return -1;
}

/* The node at host:port, added if new (reusing a slot no map names when
 * the table is full). */
static int node_index(dq_store *s, const char *host, int port)
{
    int found = find_node(s, host, port);
    if (found >= 0)
        return found;
    int i = s->nnodes < MAX_NODES ? s->nnodes++ : (int)(util_crc32(host, strlen(host)) % MAX_NODES);
    store_node *n = &s->nodes[i];
    node_disconnect(n);
    if (n->sub)
        conn_abandon(n->sub);
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    n->backoff_ms = BACKOFF_MIN_MS;
    n->replicas = -1;
    return i;
}

static conn_spec node_spec(const dq_store *s, const store_node *n, int timeout_ms)
{
    const dq_config *c = s->cfg;
    conn_spec spec = {n->host,
                      n->port,
                      c->redis_connect_timeout_ms,
                      timeout_ms,
                      c->redis_username,
                      c->redis_password,
                      s->mode == MODE_CLUSTER ? -1 : c->redis_db};
    return spec;
}

/* Opens a connection to node n; records why not. */
static redisContext *open_node(dq_store *s, const store_node *n, int timeout_ms)
{
    conn_spec spec = node_spec(s, n, timeout_ms);
    char err[300];
    int refused;
    redisContext *c = conn_open(&spec, err, sizeof err, &refused);
    if (!c) {
        if (refused)
            set_cause(n, "%s; check redis_username and redis_password", err);
        else
            set_cause(n, "%s", err);
    }
    return c;
}

/* Sentinel mode: node 0 is the primary the sentinels name now. */
static int locate_primary(dq_store *s)
{
    char host[256], err[300];
    int port;
    uint64_t gen;
    if (sentinel_primary(s->cfg, host, sizeof host, &port, &gen, err, sizeof err) < 0) {
        set_cause(NULL, "%s", err);
        return -1;
    }
    store_node *n = &s->nodes[0];
    if (n->port != port || strcmp(n->host, host) != 0) {
        node_disconnect(n);
        snprintf(n->host, sizeof n->host, "%s", host);
        n->port = port;
    }
    n->gen = gen;
    return 0;
}

/* Sentinel mode: is the node we reached really the primary? */
static int is_primary(store_node *n)
{
    redisReply *r = redisCommand(n->ctx, "ROLE");
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    freeReplyObject(r);
    return ok;
}

/* Makes sure node i has a connection; -1 while it is unreachable (backing
 * off between attempts, so a down Redis costs a request microseconds). */
static int ensure_connected(dq_store *s, int i)
{
    store_node *n = &s->nodes[i];
    if (s->mode == MODE_SENTINEL && n->ctx && n->gen != sentinel_generation()) {
        log_info("the primary changed; reconnecting");
        node_disconnect(n); /* a failover: the primary is elsewhere now */
    }
    if (n->ctx && !n->ctx->err) {
        /* A connection Redis has closed (stop, restart, client timeout)
         * shows a pending EOF: find out before sending, so the command gets
         * a clean 503 on a new connection rather than an unknown outcome. */
        struct pollfd p = {n->ctx->fd, POLLIN, 0};
        if (poll(&p, 1, 0) == 0)
            return 0;
        log_info("redis connection to %s closed by the server; reconnecting", n->host);
    }
    node_disconnect(n);
    int64_t now = util_mono_ms();
    /* Back off, unless another thread of this process has connected since
     * our last failure: then Redis is back and waiting helps nobody. */
    if (now < n->retry_at && __atomic_load_n(&last_connect_ok, __ATOMIC_RELAXED) <= n->failed_at)
        return -1;
    if (s->mode == MODE_SENTINEL && locate_primary(s) < 0)
        goto failed;
    n->ctx = open_node(s, n, s->cfg->redis_timeout_ms);
    if (!n->ctx)
        goto failed;
    if (s->mode == MODE_SENTINEL && !is_primary(n)) {
        set_cause(n, "Redis at %s:%d, named primary by the sentinels, is not a primary (yet)",
                  n->host, n->port);
        sentinel_forget(n->gen);
        node_disconnect(n);
        goto failed;
    }
    if (s->mode == MODE_SENTINEL && n->gen != sentinel_generation()) {
        /* A failover was announced while we connected: this node, frozen
         * until now, says it is the primary but is stale (its replica may
         * even confirm writes that the new primary never sees). */
        log_info("the primary changed while connecting to %s:%d; asking again", n->host,
                 n->port);
        node_disconnect(n);
        goto failed;
    }
    n->backoff_ms = BACKOFF_MIN_MS;
    __atomic_store_n(&last_connect_ok, util_mono_ms(), __ATOMIC_RELAXED);
    return 0;
failed:
    n->down = 1;
    suspect_map(s);
    /* The sentinels' answer may be a primary that is gone: ask them again
     * (they name the new one once they have promoted it). */
    if (s->mode == MODE_SENTINEL)
        sentinel_doubt(n->gen);
    n->failed_at = now;
    n->retry_at = now + n->backoff_ms;
    n->backoff_ms = n->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : n->backoff_ms * 2;
    return -1;
}

/* A reply lost (timeout, dropped connection): forget the connection, and
 * in sentinel mode the primary it reached, which may have failed over. */
static void node_lost(dq_store *s, int i)
{
    store_node *n = &s->nodes[i];
    log_warn("redis %s:%d %s: %s", n->host, n->port,
             n->ctx && n->ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)
                 ? "timed out" : "connection lost",
             n->ctx ? n->ctx->errstr : "");
    node_disconnect(n);
    n->down = 1;
    if (s->mode == MODE_SENTINEL)
        sentinel_forget(n->gen);
    suspect_map(s); /* a failover may be under way */
}

/* ------------------------------------------------------------------------ */
/* Cluster: the slot map                                                     */
/* ------------------------------------------------------------------------ */

/* Asks one node for the slot map. Returns 0 when the map was replaced. */
static int fetch_map_from(dq_store *s, const char *host, int port)
{
    store_node probe;
    memset(&probe, 0, sizeof probe);
    snprintf(probe.host, sizeof probe.host, "%s", host);
    probe.port = port;
    redisContext *c = open_node(s, &probe, s->cfg->redis_timeout_ms);
    if (!c)
        return -1;
    char err[200];
    int rc = -1;
    redisReply *r = redisCommand(c, "CLUSTER SHARDS");
    if (r && r->type != REDIS_REPLY_ERROR) {
        rc = slots_map_from_shards(s->map, r, err, sizeof err);
    } else if (r) { /* before Redis 7 */
        freeReplyObject(r);
        r = redisCommand(c, "CLUSTER SLOTS");
        if (r && r->type != REDIS_REPLY_ERROR)
            rc = slots_map_from_slots(s->map, r, err, sizeof err);
    }
    if (rc < 0)
        log_warn("slot map from %s:%d: %s", host, port,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : r ? err : c->errstr);
    freeReplyObject(r);
    conn_abandon(c);
    return rc;
}

/* Is host:port a node that failed and has not answered since? */
static int known_down(const dq_store *s, const char *host, int port)
{
    int i = find_node(s, host, port);
    return i >= 0 && s->nodes[i].down;
}

/* Asks host:port for the map, unless it is known down and this pass skips
 * those. Returns 0 when the map was replaced. */
static int fetch_map_if(dq_store *s, const char *host, int port, int with_down)
{
    if (!host[0] || (!with_down && known_down(s, host, port)))
        return -1;
    char h[SLOTS_HOST_MAX + 1];
    snprintf(h, sizeof h, "%s", host); /* the map it points into changes */
    return fetch_map_from(s, h, port);
}

/* Refreshes the slot map from any node that answers: the masters, then
 * the replicas the map knows, then the seeds; nodes that failed last are
 * asked only when no other node answers (a frozen or cut-off node costs a
 * timeout). At most once per MAP_REFRESH_MIN_MS. A node whose host the map
 * leaves empty is the one that answered. */
static int refresh_map(dq_store *s)
{
    int64_t now = util_mono_ms();
    if (s->map_fetched && now - s->map_fetched < MAP_REFRESH_MIN_MS)
        return slots_map_covers_all(s->map) ? 0 : -1;
    s->map_fetched = now;
    for (int with_down = 0; with_down < 2; with_down++) {
        for (int masters = 1; masters >= 0; masters--) {
            for (size_t i = 0; i < slots_map_nodes(s->map); i++) {
                const slots_node *n = slots_map_node(s->map, i);
                if (n->is_master == masters && fetch_map_if(s, n->host, n->port, with_down) == 0)
                    goto fetched;
            }
        }
        for (int i = 0; i < s->nseeds; i++) {
            if (fetch_map_if(s, s->seeds[i].host, s->seeds[i].port, with_down) == 0)
                goto fetched;
        }
    }
    return -1;
fetched:
    s->map_suspect = 0;
    return 0;
}

/* The node that serves shard's slot now, or -1. */
static int route(dq_store *s, int shard)
{
    if (s->mode != MODE_CLUSTER)
        return 0;
    int m = slots_map_node_of(s->map, s->slots[shard]);
    if (m < 0 || s->map_suspect) {
        refresh_map(s);
        m = slots_map_node_of(s->map, s->slots[shard]);
    }
    if (m < 0)
        return -1;
    const slots_node *n = slots_map_node(s->map, (size_t)m);
    return node_index(s, n->host, n->port);
}

/* ------------------------------------------------------------------------ */
/* Running a batch                                                           */
/* ------------------------------------------------------------------------ */

static void finish_call(store_pending *c, dq_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void finish_call(store_pending *c, dq_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    c->status = st;
    c->done = 1;
}

/* FUNCTION LOAD of this build's library on node i. Another process may load
 * it at the same moment: "already exists" is success. Returns 0 or -1. */
static int load_library(dq_store *s, int i)
{
    store_node *n = &s->nodes[i];
    redisReply *r = redisCommand(n->ctx, "FUNCTION LOAD %s", lua_library);
    if (!r)
        return -1;
    int ok = r->type != REDIS_REPLY_ERROR || strstr(r->str, "already exists");
    if (!ok)
        log_error("redis FUNCTION LOAD %s on %s:%d failed: %s", LUA_LIBRARY_NAME, n->host, n->port,
                  r->str);
    else
        log_info("loaded the Redis function library %s on %s:%d", LUA_LIBRARY_NAME, n->host,
                 n->port);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int is_write(const store_pending *c)
{
    return !lua_functions[c->fn].read_only;
}

/* Writes that take, extend or end a reservation. A failover that undoes
 * one repeats a delivery but loses nothing acknowledged, so they go on
 * without the replicas' confirmation (counted) rather than hold delivery
 * hostage to a lost replica. Every other write (an add, a delete, a
 * schedule, a policy) is answered only once confirmed. */
static int is_delivery(const store_pending *c)
{
    if (c->must_confirm)
        return 0;
    switch (c->fn) {
    case SCRIPT_POP:
    case SCRIPT_REMOVE:
    case SCRIPT_TOUCH:
    case SCRIPT_RELEASE:
    case SCRIPT_BURY:
    case SCRIPT_PUSH_TAKE:
    case SCRIPT_PUSH_DONE:
    case SCRIPT_GIVE_BACK:
        return 1;
    default:
        return 0;
    }
}

/* The replicas online in an INFO replication text; -1 (not known) from a
 * node that is no longer a master: this process's map is stale (a master
 * that woke up demoted), and a write sent there gets the MOVED that
 * corrects it, where a refusal for want of replicas would keep it. */
static int replicas_online(const char *info)
{
    if (!strstr(info, "role:master"))
        return -1;
    int n = 0;
    for (const char *p = info; (p = strstr(p, "state=online")) != NULL; p++)
        n++;
    return n;
}

/* Counts node i's replicas again when the count is older than
 * REPLICAS_REFRESH_MS (only when writes WAIT). -1 when the connection
 * failed. */
static int count_replicas(dq_store *s, int i)
{
    store_node *n = &s->nodes[i];
    int64_t now = util_mono_ms();
    if (!s->wait_replicas || now - n->replicas_at < REPLICAS_REFRESH_MS)
        return 0;
    redisReply *r = redisCommand(n->ctx, "INFO replication");
    if (!r) {
        node_lost(s, i);
        return -1;
    }
    n->replicas = r->type == REDIS_REPLY_STRING ? replicas_online(r->str) : -1;
    n->replicas_at = now;
    freeReplyObject(r);
    return 0;
}

/* Node i's master is known to have fewer replicas than WAIT asks for. */
static int node_short(const dq_store *s, int i)
{
    const store_node *n = &s->nodes[i];
    return s->wait_replicas && n->replicas >= 0 && n->replicas < s->wait_replicas;
}

/* Tells the shared table what shard's node counted. */
static void note_replicas(const dq_store *s, int shard, int i)
{
    const store_node *n = &s->nodes[i];
    if (!s->wait_replicas || n->replicas < 0)
        return;
    char where[SLOTS_HOST_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", n->host, n->port);
    replicas_note(shard, n->replicas, s->wait_replicas, where);
}

/* On a node short of replicas, a write that must be confirmed is refused
 * before it is sent (it would only wait out the WAIT timeout and answer
 * 504); a delivery goes out without WAIT. */
static void refuse_unconfirmable(dq_store *s)
{
    for (size_t k = 0; k < s->ncalls; k++) {
        store_pending *c = &s->calls[k];
        if (c->done || c->node < 0 || !is_write(c) || is_delivery(c) || !node_short(s, c->node))
            continue;
        const store_node *n = &s->nodes[c->node];
        char where[SLOTS_HOST_MAX + 16], why[sizeof c->detail];
        snprintf(where, sizeof where, "%s:%d", n->host, n->port);
        replicas_refusal(why, sizeof why, c->shard, n->replicas, s->wait_replicas, where);
        finish_call(c, DQ_UNAVAILABLE, "%s", why);
    }
}

/* Logs why a function refused the data's layout, once per process: every
 * call answers the same (503) until the data is migrated. */
static void layout_refusal_log_once(const char *why)
{
    static atomic_int logged;
    if (!atomic_exchange(&logged, 1))
        log_error("Redis refuses delayq's functions: %s (docs/OPERATIONS.md, \"Upgrading without "
                  "losing jobs\"); every request answers 503 until then", why);
}

/* What an error reply means for call c on node i: done with a status, or
 * sent again in the next round (a redirection, "try again", a missing
 * library). */
static void on_error(dq_store *s, store_pending *c, int i, redisReply *r)
{
    slots_redirect to;
    int kind = slots_error_kind(r->str, r->len);
    store_node *n = &s->nodes[i];
    switch (kind) {
    case SLOTS_ERR_MOVED:
    case SLOTS_ERR_ASK:
        if (slots_parse_redirect(r->str, r->len, &to) != 1 || s->mode != MODE_CLUSTER) {
            finish_call(c, DQ_INTERNAL, "%s", r->str);
            return;
        }
        if (!to.host[0]) /* "MOVED 3999 :6381": the host that answered */
            snprintf(to.host, sizeof to.host, "%s", n->host);
        if (strcmp(to.host, "?") == 0) {
            /* Read the map at the next routing, not now: this round's
             * connections may still owe replies. */
            s->map_fetched = 0;
            suspect_map(s);
            c->node = -1;
        } else if (kind == SLOTS_ERR_MOVED) {
            slots_map_set(s->map, s->slots[c->shard], to.host, to.port);
            c->node = -1;
        } else {
            c->node = node_index(s, to.host, to.port);
            c->asking = 1;
        }
        return;
    case SLOTS_ERR_TRYAGAIN:
    case SLOTS_ERR_CLUSTERDOWN:
    case SLOTS_ERR_LOADING:
    case SLOTS_ERR_MASTERDOWN:
        c->pause = 1;
        c->node = -1;
        snprintf(c->detail, sizeof c->detail, "%s", r->str);
        suspect_map(s);
        return;
    case SLOTS_ERR_READONLY:
        /* A replica now: the map or the primary moved (nothing was run). */
        n->drop = 1;
        suspect_map(s);
        c->pause = 1;
        c->node = -1;
        snprintf(c->detail, sizeof c->detail, "%s", r->str);
        return;
    default:
        break;
    }
    if (strncmp(r->str, "DQ_MOVING", 9) == 0 || strncmp(r->str, "ERR DQ_MOVING", 13) == 0) {
        /* The shard's slot is being migrated (see slot_moving in
         * lib/30-call.lua): nothing ran; the migration ends in moments. */
        c->pause = 1;
        c->node = -1;
        snprintf(c->detail, sizeof c->detail, "the Redis Cluster is moving this shard's slot");
        suspect_map(s);
        return;
    }
    if (strstr(r->str, "Function not found")) {
        n->reload = 1;
        c->node = -1;
        snprintf(c->detail, sizeof c->detail, "Redis lacks delayq's function library");
        return;
    }
    c->status = store_error_status(r->str, r->len, c->detail, sizeof c->detail);
    c->done = 1;
    if (c->status == DQ_UNAVAILABLE) {
        char at[300];
        conn_spec spec = node_spec(s, n, 0);
        if (store_error_is_auth(r->str, r->len))
            set_cause(n, "Redis at %s wants credentials: AUTH failed (%s); set redis_password",
                      conn_where(&spec, at, sizeof at), r->str);
        else if (store_error_is_layout(r->str, r->len))
            layout_refusal_log_once(c->detail);
        else
            log_warn("redis refused %s: %s", lua_functions[c->fn].name, r->str);
    } else if (c->status == DQ_INTERNAL) {
        log_error("function %s failed: %s", lua_functions[c->fn].name, r->str);
    }
}

/* WAIT goes once per node, after the round's last write there: it
 * confirms every earlier write on that connection, so a round waits for
 * replicas once per node, not once per call. */
static void plan_waits(dq_store *s)
{
    for (int i = 0; i < s->nnodes; i++)
        s->nodes[i].wait_after = -1;
    if (!s->wait_replicas)
        return;
    for (size_t k = 0; k < s->ncalls; k++) {
        const store_pending *c = &s->calls[k];
        if (!c->done && c->node >= 0 && is_write(c) && !node_short(s, c->node))
            s->nodes[c->node].wait_after = (long)k;
    }
}

/* Sends every pending call that has a connected node: ASKING first where
 * asked, WAIT where plan_waits put it. */
static void send_round(dq_store *s)
{
    char nrep[16], tmo[16];
    snprintf(nrep, sizeof nrep, "%d", s->wait_replicas);
    snprintf(tmo, sizeof tmo, "%d", s->cfg->redis_wait_timeout_ms);
    const char *wait_argv[3] = {"WAIT", nrep, tmo};
    plan_waits(s);
    for (size_t k = 0; k < s->ncalls; k++) {
        store_pending *c = &s->calls[k];
        if (c->done || c->node < 0)
            continue;
        redisContext *ctx = s->nodes[c->node].ctx;
        if (c->asking)
            redisAppendCommand(ctx, "ASKING");
        redisAppendCommandArgv(ctx, (int)c->argc, s->argv + c->first, s->len + c->first);
        if (s->nodes[c->node].wait_after == (long)k)
            redisAppendCommandArgv(ctx, 3, wait_argv, NULL);
    }
}

/* Every call still pending on node i has an unknown outcome now (its
 * connection died after it was sent). */
static void fail_node_calls(dq_store *s, int i)
{
    for (size_t k = 0; k < s->ncalls; k++) {
        store_pending *c = &s->calls[k];
        if (c->done || c->node != i)
            continue;
        if (is_write(c))
            finish_call(c, DQ_TIMEOUT, "no answer from Redis");
        else
            finish_call(c, DQ_UNAVAILABLE, "no answer from Redis");
    }
}

/* hiredis writes a connection's buffer only when it reads the first reply,
 * so reading node after node would make a round cost the sum of their
 * round trips: every node's buffer goes out first. */
static void write_round(dq_store *s)
{
    for (int i = 0; i < s->nnodes; i++) {
        redisContext *ctx = s->nodes[i].ctx;
        int done = !ctx || sdslen(ctx->obuf) == 0;
        while (!done) {
            if (redisBufferWrite(ctx, &done) != REDIS_OK) {
                node_lost(s, i);
                fail_node_calls(s, i);
                break;
            }
        }
    }
}

/* hiredis keeps a connection's read buffer, grown to the largest reply,
 * until the next read on it: one pop of large bodies would stay allocated
 * in each connection that carried one. Dropped once consumed. */
static void trim_reader(redisContext *c)
{
    redisReader *r = c ? c->reader : NULL;
    if (r && r->buf && r->pos == r->len && sdsalloc(r->buf) > READER_KEEP) {
        sdsfree(r->buf);
        r->buf = sdsempty();
        r->pos = r->len = 0;
    }
}

/* The writes node i applied up to call `last` (those read so far) lack
 * the replicas' confirmation: a failover now could lose them. Deliveries
 * are answered all the same (counted) unless `failing_over`: then the
 * node is being replaced, and a job it reserved is ready on the new
 * primary, so a pop answered now would be delivered twice within its
 * TTR. The callers must treat the others as unknown outcomes. */
static void unconfirmed_writes(dq_store *s, int i, size_t last, int failing_over,
                               const char *why)
{
    for (size_t k = 0; k <= last; k++) {
        store_pending *c = &s->calls[k];
        if (c->node != i || !is_write(c) || !c->done || c->status != DQ_OK)
            continue;
        if (is_delivery(c) && !failing_over)
            replicas_count_unconfirmed(1);
        else
            finish_call(c, DQ_TIMEOUT, "%s", why);
    }
    s->nodes[i].replicas_at = 0; /* a replica may be gone: count them again */
}

/* The replicas WAIT on node i counted; -1 if the connection failed. */
static long long read_wait(dq_store *s, int i)
{
    void *w = NULL;
    if (redisGetReply(s->nodes[i].ctx, &w) != REDIS_OK)
        return -1;
    long long confirmed = ((redisReply *)w)->type == REDIS_REPLY_INTEGER
                              ? ((redisReply *)w)->integer : 0;
    freeReplyObject(w);
    return confirmed;
}

/* Node i's connection failed while reading the reply of call k (or of
 * the WAIT after it): every write it applied this round before its WAIT
 * is unconfirmed, every call still owed an answer has an unknown outcome,
 * and the connection goes. */
static void lose_node(dq_store *s, int i, size_t k)
{
    if ((long)k <= s->nodes[i].wait_after) /* its WAIT was not read yet */
        unconfirmed_writes(s, i, k, 0, "no answer from Redis");
    node_lost(s, i);
    fail_node_calls(s, i);
}

/* Reads the replies of the calls sent, in the order they were sent. */
static void read_round(dq_store *s)
{
    int waits = s->wait_replicas;
    for (size_t k = 0; k < s->ncalls; k++) {
        store_pending *c = &s->calls[k];
        if (c->done || c->node < 0)
            continue;
        int i = c->node;
        redisContext *ctx = s->nodes[i].ctx;
        void *v = NULL;
        if (c->asking) {
            if (redisGetReply(ctx, &v) != REDIS_OK) {
                lose_node(s, i, k);
                continue;
            }
            freeReplyObject(v);
            c->asking = 0;
        }
        if (redisGetReply(ctx, &v) != REDIS_OK) {
            lose_node(s, i, k);
            continue;
        }
        redisReply *r = v;
        if (r->type == REDIS_REPLY_ERROR) {
            on_error(s, c, i, r);
            freeReplyObject(r);
        } else {
            clear_cause(&s->nodes[i]);
            s->nodes[i].down = 0;
            c->reply = r;
            c->status = DQ_OK;
            c->done = 1;
            if (is_write(c) && node_short(s, i)) /* sent without WAIT */
                replicas_count_unconfirmed(1);
        }
        if (s->nodes[i].wait_after != (long)k)
            continue;
        long long confirmed = read_wait(s, i);
        int failing_over = s->mode == MODE_SENTINEL && !sentinel_confirms(s->failover_mark);
        if (confirmed < 0) {
            lose_node(s, i, k);
        } else if (confirmed < waits) {
            char why[128];
            snprintf(why, sizeof why, "%lld of %d replicas confirmed the write in %d ms",
                     confirmed, waits, s->cfg->redis_wait_timeout_ms);
            unconfirmed_writes(s, i, k, failing_over, why);
        } else if (failing_over) {
            unconfirmed_writes(s, i, k, 1, "the sentinels were failing the primary over: the "
                                           "replicas that confirmed the write may be re-synced");
        }
    }
}

/* What reading the round found out about nodes, now that no connection
 * owes a reply. */
static void after_round(dq_store *s)
{
    for (int i = 0; i < s->nnodes; i++) {
        store_node *n = &s->nodes[i];
        if (n->drop) {
            if (s->mode == MODE_SENTINEL)
                sentinel_forget(n->gen);
            node_disconnect(n);
        }
        if (n->reload && n->ctx && load_library(s, i) < 0)
            node_lost(s, i);
        n->drop = n->reload = 0;
        trim_reader(n->ctx);
    }
}

void store_batch_run(dq_store *s)
{
    /* A call short of its function's declared arguments is a caller that
     * drifted from the declaration (src/store/lua/embed.sh). */
    for (size_t k = 0; k < s->ncalls; k++) {
        if (s->calls[k].argc - HEAD_ARGS < (size_t)lua_functions[s->calls[k].fn].nargs)
            abort();
    }
    for (int round = 0;; round++) {
        int pending = 0, pause = 0;
        for (size_t k = 0; k < s->ncalls; k++) {
            store_pending *c = &s->calls[k];
            if (c->done)
                continue;
            if (round == MAX_ROUNDS) { /* redirected or told to retry too often */
                finish_call(c, DQ_UNAVAILABLE, "%s", c->detail[0] ? c->detail
                                                                   : "Redis Cluster is busy");
                continue;
            }
            pending++;
            pause |= c->pause;
            c->pause = 0;
        }
        if (!pending)
            return;
        if (pause)
            usleep(RETRY_PAUSE_MS * 1000);
        /* Where each call goes, and connections there. */
        for (size_t k = 0; k < s->ncalls; k++) {
            store_pending *c = &s->calls[k];
            if (c->done)
                continue;
            if (c->node < 0)
                c->node = route(s, c->shard);
            if (c->node < 0) {
                finish_call(c, DQ_UNAVAILABLE, "no Redis Cluster node serves slot %u",
                            s->slots[c->shard]);
                continue;
            }
            if (ensure_connected(s, c->node) < 0 || count_replicas(s, c->node) < 0) {
                int again = s->mode == MODE_CLUSTER && !c->rerouted;
                c->node = -1;
                c->rerouted = 1;
                /* The map may name a node that is gone: the next round
                 * reads it again and routes the call once more. */
                if (!again)
                    finish_call(c, DQ_UNAVAILABLE, "Redis is unreachable");
                continue;
            }
            note_replicas(s, c->shard, c->node);
        }
        refuse_unconfirmable(s);
        if (s->mode == MODE_SENTINEL)
            s->failover_mark = sentinel_failover_mark();
        send_round(s);
        write_round(s);
        read_round(s);
        after_round(s);
    }
}

dq_status store_ping(dq_store *s)
{
    int targets[MAX_NODES], n = 0;
    if (s->mode == MODE_CLUSTER) {
        if (refresh_map(s) < 0 && !slots_map_covers_all(s->map)) {
            set_cause(NULL, "Redis Cluster: no node answered with a map covering every slot");
            return DQ_UNAVAILABLE;
        }
        for (size_t i = 0; i < slots_map_nodes(s->map) && n < MAX_NODES; i++) {
            const slots_node *m = slots_map_node(s->map, i);
            if (m->is_master)
                targets[n++] = node_index(s, m->host, m->port);
        }
    } else {
        targets[n++] = 0;
    }
    for (int k = 0; k < n; k++) {
        int i = targets[k];
        if (ensure_connected(s, i) < 0)
            return DQ_UNAVAILABLE;
        /* A cluster node answers PING while it refuses keys (just restarted,
         * or a master of the cluster is down): ask for the cluster's state. */
        redisReply *r = s->mode == MODE_CLUSTER ? redisCommand(s->nodes[i].ctx, "CLUSTER INFO")
                                                : redisCommand(s->nodes[i].ctx, "PING");
        if (!r) {
            node_lost(s, i);
            return DQ_UNAVAILABLE;
        }
        int ok = s->mode == MODE_CLUSTER
                     ? r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL
                     : r->type == REDIS_REPLY_STATUS;
        if (!ok)
            set_cause(&s->nodes[i], "Redis at %s:%d: %s", s->nodes[i].host, s->nodes[i].port,
                      r->type == REDIS_REPLY_ERROR ? r->str
                      : s->mode == MODE_CLUSTER    ? "cluster_state is not ok"
                                                   : "no answer to PING");
        freeReplyObject(r);
        if (!ok)
            return DQ_UNAVAILABLE;
    }
    clear_cause(NULL);
    return DQ_OK;
}

int store_replica_counts(dq_store *s, int *replicas)
{
    if (!s->wait_replicas)
        return 0;
    int short_shards = 0;
    for (int k = 0; k < s->shards; k++) {
        int i = route(s, k);
        replicas[k] = -1;
        if (i < 0 || ensure_connected(s, i) < 0 || count_replicas(s, i) < 0)
            continue;
        note_replicas(s, k, i);
        replicas[k] = s->nodes[i].replicas;
        short_shards += node_short(s, i);
    }
    return short_shards;
}

int store_cluster_spread(dq_store *s, int *masters)
{
    *masters = 0;
    if (s->mode != MODE_CLUSTER)
        return 0;
    if (!slots_map_covers_all(s->map) || s->map_suspect)
        refresh_map(s);
    return slots_masters_used(s->map, s->cfg->prefix, s->shards, masters);
}

int store_pick_shards(dq_store *s, int per_master)
{
    if (s->mode != MODE_CLUSTER)
        return 1;
    s->map_fetched = 0;
    if (refresh_map(s) < 0)
        return 0;
    return slots_pick_shards(s->map, s->cfg->prefix, per_master, DQ_SHARDS_MAX);
}

/* ------------------------------------------------------------------------ */
/* Life                                                                      */
/* ------------------------------------------------------------------------ */

dq_store *store_new(const dq_config *cfg)
{
    dq_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = cfg;
    s->shards = cfg->shards;
    s->wait_replicas = cfg->redis_wait_replicas;
    for (int i = 0; i < MAX_NODES; i++)
        s->nodes[i].replicas = -1;
    s->tags = util_xcalloc((size_t)s->shards, sizeof *s->tags);
    s->slots = util_xcalloc((size_t)s->shards, sizeof *s->slots);
    for (int i = 0; i < s->shards; i++) {
        if (s->shards == 1)
            snprintf(s->tags[i], TAG_MAX, "{%s}", cfg->prefix);
        else
            snprintf(s->tags[i], TAG_MAX, "{%s:%d}", cfg->prefix, i);
        s->slots[i] = slots_keyslot(s->tags[i], strlen(s->tags[i]));
    }
    char err[256];
    if (cfg->redis_cluster[0]) {
        s->mode = MODE_CLUSTER;
        s->map = slots_map_new();
        s->nseeds = config_addr_list("redis_cluster", cfg->redis_cluster, s->seeds,
                                     CONFIG_MAX_ADDRS, err, sizeof err);
        if (!s->map || s->nseeds <= 0)
            abort(); /* config_init checked the list */
    } else if (cfg->redis_sentinels[0]) {
        s->mode = MODE_SENTINEL;
        s->nnodes = 1;
        s->nodes[0].backoff_ms = BACKOFF_MIN_MS;
    } else {
        s->mode = MODE_SINGLE;
        s->nnodes = 1;
        store_node *n = &s->nodes[0];
        n->backoff_ms = BACKOFF_MIN_MS;
        if (cfg->redis_socket[0]) {
            snprintf(n->host, sizeof n->host, "%s", cfg->redis_socket);
            n->port = 0;
        } else {
            snprintf(n->host, sizeof n->host, "%s", cfg->redis_host);
            n->port = cfg->redis_port;
        }
    }
    return s;
}

void store_free(dq_store *s)
{
    if (!s)
        return;
    free_replies(s);
    for (int i = 0; i < s->nnodes; i++) {
        node_disconnect(&s->nodes[i]);
        if (s->nodes[i].sub)
            conn_abandon(s->nodes[i].sub);
    }
    slots_map_free(s->map);
    free(s->tags);
    free(s->slots);
    for (size_t i = 0; i < s->nchunks; i++)
        free(s->num_chunks[i]);
    free(s->num_chunks);
    free(s->calls);
    free(s->argv);
    free(s->len);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Subscriber                                                                */
/* ------------------------------------------------------------------------ */

static void sub_close_all(dq_store *s)
{
    for (int i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].sub) {
            conn_abandon(s->nodes[i].sub);
            s->nodes[i].sub = NULL;
        }
    }
    s->subscribed = 0;
}

dq_status store_sub_open(dq_store *s, const char *suffix)
{
    sub_close_all(s);
    snprintf(s->sub_suffix, sizeof s->sub_suffix, "%s", suffix);
    if (s->mode == MODE_SENTINEL) {
        /* Cleared before, not after: a failover announced while we
         * subscribe must still be seen (below, and in store_sub_read). */
        sentinel_event_clear();
        if (locate_primary(s) < 0)
            return DQ_UNAVAILABLE;
        s->sub_gen = s->nodes[0].gen;
    }
    if (s->mode == MODE_CLUSTER) {
        s->map_fetched = 0;
        if (refresh_map(s) < 0)
            return DQ_UNAVAILABLE;
    }
    char channel[TAG_MAX + 32];
    for (int shard = 0; shard < s->shards; shard++) {
        int i = route(s, shard);
        if (i < 0)
            goto fail;
        store_node *n = &s->nodes[i];
        if (!n->sub) {
            n->sub = open_node(s, n, s->cfg->redis_timeout_ms);
            if (!n->sub)
                goto fail;
        }
        snprintf(channel, sizeof channel, "%s%s", s->tags[shard], suffix);
        redisReply *r = redisCommand(n->sub, "SSUBSCRIBE %s", channel);
        int ok = r && r->type == REDIS_REPLY_ARRAY;
        if (!ok)
            log_warn("SSUBSCRIBE %s on %s:%d: %s", channel, n->host, n->port,
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
        freeReplyObject(r);
        if (!ok)
            goto fail;
    }
    /* Messages are waited for with poll; reads must not time out. Silence
     * is bounded by store_sub_read's PINGs instead. */
    int64_t now = util_mono_ms();
    for (int i = 0; i < s->nnodes; i++) {
        if (s->nodes[i].sub) {
            redisSetTimeout(s->nodes[i].sub, (struct timeval){0, 0});
            redisEnableKeepAlive(s->nodes[i].sub);
            s->nodes[i].sub_heard = now;
            s->nodes[i].sub_pinged = 0;
        }
    }
    /* A primary frozen past its failover answers once it wakes, stale: a
     * subscription made there hears nothing the new primary publishes. */
    if (s->mode == MODE_SENTINEL && sentinel_generation() != s->sub_gen)
        goto fail;
    s->subscribed = 1;
    return DQ_OK;
fail:
    sub_close_all(s);
    return DQ_UNAVAILABLE;
}

int store_sub_open_now(const dq_store *s)
{
    return s->subscribed;
}

int store_sub_fds(dq_store *s, struct pollfd *fds, int max)
{
    int n = 0;
    for (int i = 0; i < s->nnodes && n < max; i++) {
        if (s->nodes[i].sub)
            fds[n++] = (struct pollfd){s->nodes[i].sub->fd, POLLIN, 0};
    }
    if (s->mode == MODE_SENTINEL && sentinel_event_fd() >= 0 && n < max)
        fds[n++] = (struct pollfd){sentinel_event_fd(), POLLIN, 0};
    return n;
}

/* The shard whose channel this is, or -1. */
static int shard_of_channel(const dq_store *s, const char *channel)
{
    for (int i = 0; i < s->shards; i++) {
        size_t n = strlen(s->tags[i]);
        if (strncmp(channel, s->tags[i], n) == 0 && strcmp(channel + n, s->sub_suffix) == 0)
            return i;
    }
    return -1;
}

/* The next reply already read or readable without blocking on c: 1 with
 * *out, 0 for none, -1 on a lost connection. */
static int next_pushed(redisContext *c, redisReply **out)
{
    void *v = NULL;
    if (redisGetReplyFromReader(c, &v) != REDIS_OK)
        return -1;
    if (!v) {
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0)
            return 0;
        if (redisBufferRead(c) != REDIS_OK || redisGetReplyFromReader(c, &v) != REDIS_OK)
            return -1;
        if (!v)
            return 0;
    }
    *out = v;
    return 1;
}

/* PINGs each subscription that was silent for SUB_PING_MS. Returns -1 when
 * one did not answer its PING in time (or the PING could not be sent). */
static int sub_keepalive(dq_store *s)
{
    int64_t now = util_mono_ms();
    for (int i = 0; i < s->nnodes; i++) {
        store_node *n = &s->nodes[i];
        if (!n->sub)
            continue;
        if (n->sub_pinged) {
            if (now - n->sub_pinged > s->cfg->redis_timeout_ms) {
                log_warn("redis %s:%d: the subscription did not answer a PING in %d ms",
                         n->host, n->port, s->cfg->redis_timeout_ms);
                return -1;
            }
            continue;
        }
        if (now - n->sub_heard < SUB_PING_MS)
            continue;
        int done = 0;
        redisAppendCommand(n->sub, "PING");
        while (!done) {
            if (redisBufferWrite(n->sub, &done) != REDIS_OK)
                return -1;
        }
        n->sub_pinged = now;
    }
    return 0;
}

int store_sub_wait_ms(const dq_store *s)
{
    int64_t now = util_mono_ms(), wait = SUB_PING_MS;
    for (int i = 0; i < s->nnodes; i++) {
        const store_node *n = &s->nodes[i];
        if (!n->sub)
            continue;
        int64_t at = n->sub_pinged ? n->sub_pinged + s->cfg->redis_timeout_ms + 1
                                   : n->sub_heard + SUB_PING_MS;
        if (at - now < wait)
            wait = at - now;
    }
    return wait < 0 ? 0 : (int)wait;
}

int store_sub_read(dq_store *s, int *shard, char *payload, size_t plen, size_t *len)
{
    if (!s->subscribed)
        return -1;
    if (s->mode == MODE_SENTINEL) {
        struct pollfd p = {sentinel_event_fd(), POLLIN, 0};
        int announced = p.fd >= 0 && poll(&p, 1, 0) > 0;
        if (announced || sentinel_generation() != s->sub_gen) {
            sub_close_all(s); /* the primary changed: subscribe there */
            return -1;
        }
    }
    for (int i = 0; i < s->nnodes; i++) {
        redisContext *c = s->nodes[i].sub;
        if (!c)
            continue;
        for (;;) {
            redisReply *r = NULL;
            int got = next_pushed(c, &r);
            if (got < 0) {
                sub_close_all(s);
                return -1;
            }
            if (!got)
                break;
            s->nodes[i].sub_heard = util_mono_ms();
            s->nodes[i].sub_pinged = 0; /* any reply proves the connection */
            int resubscribe = 0, found = 0;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[0]->type == REDIS_REPLY_STRING) {
                const char *kind = r->element[0]->str;
                if (strcmp(kind, "smessage") == 0 && r->element[1]->type == REDIS_REPLY_STRING &&
                    r->element[2]->type == REDIS_REPLY_STRING) {
                    *shard = shard_of_channel(s, r->element[1]->str);
                    size_t n = r->element[2]->len < plen ? r->element[2]->len : plen - 1;
                    memcpy(payload, r->element[2]->str, n);
                    payload[n] = '\0';
                    if (len)
                        *len = n;
                    found = *shard >= 0;
                } else if (strcmp(kind, "sunsubscribe") == 0) {
                    /* The slot moved to another node (or its node failed
                     * over): the server dropped our subscription. */
                    resubscribe = 1;
                }
            }
            freeReplyObject(r);
            if (resubscribe) {
                sub_close_all(s);
                return -1;
            }
            if (found)
                return 0;
        }
    }
    if (sub_keepalive(s) < 0) {
        sub_close_all(s);
        return -1;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */
/* ------------------------------------------------------------------------ */

void store_reply_free(store_reply *r)
{
    if (r)
        freeReplyObject(r);
}

int store_reply_nil(const store_reply *r)
{
    return !r || r->type == REDIS_REPLY_NIL;
}

size_t store_reply_len(const store_reply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
}

const store_reply *store_reply_at(const store_reply *r, size_t i)
{
    return i < store_reply_len(r) ? r->element[i] : NULL;
}

const char *store_reply_str(const store_reply *r, size_t *n)
{
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) {
        if (n)
            *n = 0;
        return NULL;
    }
    if (n)
        *n = r->len;
    return r->str;
}

int64_t store_reply_int(const store_reply *r)
{
    if (!r || r->type == REDIS_REPLY_NIL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

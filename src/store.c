/* store: one Redis connection with functions, timeouts and reconnection. */
#include "store.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lua_library.inc"
#include "store_errors.h"
#include "util.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 250

/* FCALL, function, numkeys, prefix: store_call fills the slots before the
 * arguments, so a command is sent without copying them. */
#define HEAD_ARGS 4

struct dq_store {
    const dq_config *cfg;
    redisContext *ctx;
    char prefix[72];
    int64_t retry_at;  /* monotonic ms before which we do not reconnect */
    int64_t failed_at; /* monotonic ms of the last failed connect */
    int backoff_ms;
    int subscriber;
    /* The arguments of the call being built. */
    const char *argv[HEAD_ARGS + STORE_MAX_ARGS];
    size_t len[HEAD_ARGS + STORE_MAX_ARGS];
    int argc;
    char nums[STORE_MAX_ARGS][24]; /* storage for numbers added with store_arg_int */
    int nnums;
};

/* Monotonic ms of the latest successful connect by any thread. */
static int64_t last_connect_ok;

/* ------------------------------------------------------------------------ */
/* Why Redis cannot be used: logged once per change, shown to clients        */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t cause_lock = PTHREAD_MUTEX_INITIALIZER;
static char cause[300]; /* "" while Redis works */

/* Records the current cause ("" = working) and logs it when it changed, so
 * a Redis that stays down for an hour logs one line, not one per retry. */
static void set_cause(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_cause(const char *fmt, ...)
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
    pthread_mutex_unlock(&cause_lock);
}

static void clear_cause(void)
{
    /* Cheap check first: the common case is "nothing to clear". */
    if (__atomic_load_n(&cause[0], __ATOMIC_RELAXED))
        set_cause("%s", "");
}

void store_last_cause(char *out, size_t outlen)
{
    pthread_mutex_lock(&cause_lock);
    snprintf(out, outlen, "%s", cause);
    pthread_mutex_unlock(&cause_lock);
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */
/* ------------------------------------------------------------------------ */

void store_args_begin(dq_store *s)
{
    s->argc = 0;
    s->nnums = 0;
}

void store_arg(dq_store *s, const char *str, size_t n)
{
    if (s->argc >= STORE_MAX_ARGS)
        abort(); /* request limits keep us far below this */
    s->argv[HEAD_ARGS + s->argc] = str;
    s->len[HEAD_ARGS + s->argc] = n;
    s->argc++;
}

void store_arg_str(dq_store *s, const char *str)
{
    store_arg(s, str, strlen(str));
}

void store_arg_int(dq_store *s, int64_t v)
{
    char *p = s->nums[s->nnums++];
    int n = snprintf(p, sizeof s->nums[0], "%" PRId64, v);
    store_arg(s, p, (size_t)n);
}

/* ------------------------------------------------------------------------ */
/* Connection                                                                */
/* ------------------------------------------------------------------------ */

dq_store *store_new(const dq_config *cfg)
{
    dq_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = cfg;
    s->backoff_ms = BACKOFF_MIN_MS;
    snprintf(s->prefix, sizeof s->prefix, "{%s}", cfg->prefix);
    return s;
}

void store_disconnect(dq_store *s)
{
    if (s->ctx) {
        redisFree(s->ctx);
        s->ctx = NULL;
    }
}

void store_free(dq_store *s)
{
    if (!s)
        return;
    store_disconnect(s);
    free(s);
}

const char *store_prefix(const dq_store *s)
{
    return s->prefix;
}

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

static const char *where(const dq_config *c, char *buf, size_t n)
{
    if (c->redis_socket[0])
        snprintf(buf, n, "%s", c->redis_socket);
    else
        snprintf(buf, n, "%s:%d", c->redis_host, c->redis_port);
    return buf;
}

/* AUTH and SELECT on a fresh connection; 0 on success. A refusal of the
 * credentials is a cause of its own, so operators see it at once. */
static int setup_connection(dq_store *s)
{
    const dq_config *c = s->cfg;
    char at[300];
    if (c->redis_password[0]) {
        const char *argv[3] = {"AUTH", c->redis_username, c->redis_password};
        int argc = 3;
        if (!c->redis_username[0]) {
            argv[1] = c->redis_password;
            argc = 2;
        }
        redisReply *r = redisCommandArgv(s->ctx, argc, argv, NULL);
        if (!r) {
            set_cause("Redis at %s is unreachable (%s)", where(c, at, sizeof at), s->ctx->errstr);
            return -1;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            set_cause("Redis at %s refused delayq's credentials: AUTH failed (%s); check "
                      "redis_username and redis_password", where(c, at, sizeof at), r->str);
            freeReplyObject(r);
            return -1;
        }
        freeReplyObject(r);
    }
    char db[16];
    snprintf(db, sizeof db, "%d", c->redis_db);
    /* SELECT also tells whether Redis wants a password we did not send. */
    redisReply *r = redisCommandArgv(s->ctx, 2, (const char *[]){"SELECT", db}, NULL);
    if (!r) {
        set_cause("Redis at %s is unreachable (%s)", where(c, at, sizeof at), s->ctx->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (store_error_is_auth(r->str, r->len))
            set_cause("Redis at %s wants credentials: AUTH failed (%s); set redis_password (and "
                      "redis_username)", where(c, at, sizeof at), r->str);
        else
            set_cause("Redis at %s refused SELECT %s: %s", where(c, at, sizeof at), db, r->str);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

static int connect_now(dq_store *s)
{
    const dq_config *c = s->cfg;
    struct timeval ctv = ms_to_tv(c->redis_connect_timeout_ms);
    if (c->redis_socket[0])
        s->ctx = redisConnectUnixWithTimeout(c->redis_socket, ctv);
    else
        s->ctx = redisConnectWithTimeout(c->redis_host, c->redis_port, ctv);
    if (!s->ctx || s->ctx->err) {
        char at[300];
        set_cause("Redis at %s is unreachable (%s)", where(c, at, sizeof at),
                  s->ctx ? s->ctx->errstr : "out of memory");
        store_disconnect(s);
        return -1;
    }
    redisSetTimeout(s->ctx, ms_to_tv(c->redis_timeout_ms));
    if (setup_connection(s) < 0) {
        store_disconnect(s);
        return -1;
    }
    s->backoff_ms = BACKOFF_MIN_MS;
    return 0;
}

/* Makes sure a connection is there; -1 while Redis is unreachable (backing
 * off between attempts, so a down Redis costs a request microseconds). */
static int ensure_connected(dq_store *s)
{
    if (s->ctx && !s->ctx->err) {
        /* A connection Redis has closed (stop, restart, client timeout)
         * shows a pending EOF: find out before sending, so the command gets
         * a clean 503 on a new connection rather than an unknown outcome. */
        struct pollfd p = {s->ctx->fd, POLLIN, 0};
        if (poll(&p, 1, 0) == 0)
            return 0;
        log_info("redis connection closed by the server; reconnecting");
    }
    store_disconnect(s);
    int64_t now = util_mono_ms();
    /* Back off, unless another thread of this process has connected since
     * our last failure: then Redis is back and waiting helps nobody. */
    if (now < s->retry_at && __atomic_load_n(&last_connect_ok, __ATOMIC_RELAXED) <= s->failed_at)
        return -1;
    if (connect_now(s) == 0) {
        __atomic_store_n(&last_connect_ok, util_mono_ms(), __ATOMIC_RELAXED);
        return 0;
    }
    s->failed_at = now;
    s->retry_at = now + s->backoff_ms;
    s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */
/* ------------------------------------------------------------------------ */

/* Classifies a NULL reply: the connection failed after the command was
 * (possibly) sent, so a write's outcome is unknown. */
static dq_status lost_reply(dq_store *s, int read_only)
{
    int timed_out = s->ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    log_warn("redis %s: %s", timed_out ? "timed out" : "connection lost", s->ctx->errstr);
    store_disconnect(s);
    return read_only ? DQ_UNAVAILABLE : DQ_TIMEOUT;
}

/* FUNCTION LOAD of this build's library. Another process may load it at
 * the same moment: "already exists" is success. Returns 0 or -1. */
static int load_library(dq_store *s)
{
    redisReply *r = redisCommand(s->ctx, "FUNCTION LOAD %s", lua_library);
    if (!r)
        return -1;
    int ok = r->type != REDIS_REPLY_ERROR || strstr(r->str, "already exists");
    if (!ok)
        log_error("redis FUNCTION LOAD %s failed: %s", LUA_LIBRARY_NAME, r->str);
    else
        log_info("loaded the Redis function library %s", LUA_LIBRARY_NAME);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int is_function_missing(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strstr(r->str, "Function not found");
}

dq_status store_call(dq_store *s, dq_script fn, store_reply **reply, char *detail,
                     size_t detail_len)
{
    *reply = NULL;
    if (detail_len)
        detail[0] = '\0';
    int read_only = lua_functions[fn].read_only;
    if (ensure_connected(s) < 0)
        return DQ_UNAVAILABLE;
    int n = HEAD_ARGS + s->argc;
    s->argv[0] = read_only ? "FCALL_RO" : "FCALL";
    s->len[0] = strlen(s->argv[0]);
    s->argv[1] = lua_functions[fn].name;
    s->len[1] = strlen(lua_functions[fn].name);
    s->argv[2] = "1";
    s->len[2] = 1;
    s->argv[3] = s->prefix;
    s->len[3] = strlen(s->prefix);
    dq_status st = DQ_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        redisReply *r = redisCommandArgv(s->ctx, n, s->argv, s->len);
        if (!r)
            return lost_reply(s, read_only);
        if (attempt == 0 && is_function_missing(r)) {
            freeReplyObject(r);
            if (load_library(s) < 0)
                return s->ctx ? DQ_INTERNAL : DQ_UNAVAILABLE;
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR) {
            clear_cause();
            *reply = r;
            return DQ_OK;
        }
        st = store_error_status(r->str, r->len, detail, detail_len);
        if (st == DQ_UNAVAILABLE) {
            char at[300];
            if (store_error_is_auth(r->str, r->len))
                set_cause("Redis at %s wants credentials: AUTH failed (%s); set redis_password",
                          where(s->cfg, at, sizeof at), r->str);
            else
                log_warn("redis refused %s: %s", lua_functions[fn].name, r->str);
        } else if (st == DQ_INTERNAL) {
            log_error("function %s failed: %s", lua_functions[fn].name, r->str);
        }
        freeReplyObject(r);
        return st;
    }
    return st;
}

dq_status store_ping(dq_store *s)
{
    if (ensure_connected(s) < 0)
        return DQ_UNAVAILABLE;
    redisReply *r = redisCommand(s->ctx, "PING");
    if (!r)
        return lost_reply(s, 1);
    dq_status st = r->type == REDIS_REPLY_STATUS ? DQ_OK : DQ_UNAVAILABLE;
    if (st == DQ_OK)
        clear_cause();
    freeReplyObject(r);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Subscriber                                                                */
/* ------------------------------------------------------------------------ */

dq_status store_subscribe(dq_store *s, const char *const *channels, int n)
{
    s->subscriber = 1;
    if (ensure_connected(s) < 0)
        return DQ_UNAVAILABLE;
    for (int i = 0; i < n; i++) {
        redisReply *r = redisCommand(s->ctx, "SUBSCRIBE %s", channels[i]);
        if (!r) {
            store_disconnect(s);
            return DQ_UNAVAILABLE;
        }
        freeReplyObject(r);
    }
    /* Messages are waited for with poll; reads must not time out. */
    redisSetTimeout(s->ctx, (struct timeval){0, 0});
    return DQ_OK;
}

int store_fd(const dq_store *s)
{
    return s->ctx ? s->ctx->fd : -1;
}

int store_read_message(dq_store *s, char *channel, size_t chlen, char *payload, size_t plen)
{
    if (!s->ctx)
        return -1;
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(s->ctx, &v) != REDIS_OK) {
            store_disconnect(s);
            return -1;
        }
        if (!v) {
            struct pollfd p = {s->ctx->fd, POLLIN, 0};
            if (poll(&p, 1, 0) <= 0)
                return 1;
            if (redisBufferRead(s->ctx) != REDIS_OK) {
                store_disconnect(s);
                return -1;
            }
            if (redisGetReplyFromReader(s->ctx, &v) != REDIS_OK) {
                store_disconnect(s);
                return -1;
            }
            if (!v)
                return 1;
        }
        redisReply *r = v;
        int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                 r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0;
        if (ok) {
            snprintf(channel, chlen, "%s", r->element[1]->str);
            snprintf(payload, plen, "%s", r->element[2]->str);
        }
        freeReplyObject(r);
        if (ok)
            return 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */
/* ------------------------------------------------------------------------ */

void store_reply_free(store_reply *r)
{
    if (r)
        freeReplyObject(r);
}

int reply_is_nil(const store_reply *r)
{
    return !r || r->type == REDIS_REPLY_NIL;
}

size_t reply_len(const store_reply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
}

const store_reply *reply_at(const store_reply *r, size_t i)
{
    return i < reply_len(r) ? r->element[i] : NULL;
}

const char *reply_str(const store_reply *r, size_t *n)
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

int64_t reply_int(const store_reply *r)
{
    if (!r || r->type == REDIS_REPLY_NIL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

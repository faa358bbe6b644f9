/* store: one Redis connection with scripts, timeouts and reconnection. */
#include "store.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 250

struct dq_store {
    const dq_config *cfg;
    redisContext *ctx;
    char prefix[72];
    char sha[SCRIPT_COUNT][41];
    int64_t retry_at;   /* monotonic ms before which we do not reconnect */
    int64_t failed_at;  /* monotonic ms of the last failed connect */
    int backoff_ms;
    int subscriber;
};

/* Monotonic ms of the latest successful connect by any thread. */
static int64_t last_connect_ok;

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */
/* ------------------------------------------------------------------------ */

void args_reset(store_args *a)
{
    a->argc = 0;
    a->nnums = 0;
}

void args_str(store_args *a, const char *s, size_t n)
{
    if (a->argc >= STORE_MAX_ARGS)
        abort(); /* request limits keep us far below this */
    a->argv[STORE_HEAD_ARGS + a->argc] = s;
    a->len[STORE_HEAD_ARGS + a->argc] = n;
    a->argc++;
}

void args_cstr(store_args *a, const char *s)
{
    args_str(a, s, strlen(s));
}

void args_int(store_args *a, int64_t v)
{
    char *p = a->nums[a->nnums++];
    int n = snprintf(p, sizeof a->nums[0], "%" PRId64, v);
    args_str(a, p, (size_t)n);
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

/* A reply error that means Redis did not run the command. */
static int error_means_no_effect(const char *msg)
{
    static const char *const prefixes[] = {"LOADING", "READONLY", "MASTERDOWN", "BUSY", "NOAUTH",
                                           "WRONGPASS", "NOPERM", "OOM", "MISCONF"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (strncmp(msg, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    }
    return 0;
}

/* Runs one setup command on a fresh connection; 0 on success. */
static int setup_command(dq_store *s, const char *what, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(s->ctx, argc, argv, NULL);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        log_warn("redis %s failed: %s", what, r ? r->str : s->ctx->errstr);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

static int load_scripts(dq_store *s)
{
    for (int i = 0; i < SCRIPT_COUNT; i++) {
        redisReply *r = redisCommand(s->ctx, "SCRIPT LOAD %s", script_source((dq_script)i));
        if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
            log_warn("redis SCRIPT LOAD %s failed: %s", script_name((dq_script)i),
                     r && r->type == REDIS_REPLY_ERROR ? r->str : s->ctx->errstr);
            freeReplyObject(r);
            return -1;
        }
        memcpy(s->sha[i], r->str, 41);
        freeReplyObject(r);
    }
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
        log_debug("redis connect failed: %s", s->ctx ? s->ctx->errstr : "out of memory");
        store_disconnect(s);
        return -1;
    }
    redisSetTimeout(s->ctx, ms_to_tv(c->redis_timeout_ms));
    if (c->redis_password[0]) {
        const char *auth[3] = {"AUTH", c->redis_username, c->redis_password};
        if (c->redis_username[0] ? setup_command(s, "AUTH", 3, auth) < 0
                                 : setup_command(s, "AUTH", 2, (const char *[]){"AUTH", c->redis_password}) < 0)
            goto fail;
    }
    if (c->redis_db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", c->redis_db);
        if (setup_command(s, "SELECT", 2, (const char *[]){"SELECT", db}) < 0)
            goto fail;
    }
    if (!s->subscriber && load_scripts(s) < 0)
        goto fail;
    s->backoff_ms = BACKOFF_MIN_MS;
    return 0;
fail:
    store_disconnect(s);
    return -1;
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

dq_status store_eval(dq_store *s, dq_script script, store_args *a, int read_only,
                     store_reply **reply)
{
    *reply = NULL;
    if (ensure_connected(s) < 0)
        return DQ_UNAVAILABLE;
    /* EVALSHA sha 0 prefix args... (keys are built inside the script from
     * the prefix; they all share its hash tag). */
    int n = STORE_HEAD_ARGS + a->argc;
    const char **argv = a->argv;
    size_t *len = a->len;
    argv[0] = "EVALSHA";
    len[0] = 7;
    argv[2] = "0";
    len[2] = 1;
    argv[3] = s->prefix;
    len[3] = strlen(s->prefix);
    dq_status st = DQ_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        argv[1] = s->sha[script];
        len[1] = 40;
        redisReply *r = redisCommandArgv(s->ctx, n, argv, len);
        if (!r) {
            st = lost_reply(s, read_only);
            break;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            if (strncmp(r->str, "NOSCRIPT", 8) == 0 && attempt == 0 && load_scripts(s) == 0) {
                freeReplyObject(r);
                continue;
            }
            if (error_means_no_effect(r->str)) {
                log_warn("redis refused %s: %s", script_name(script), r->str);
                st = DQ_UNAVAILABLE;
            } else {
                log_error("script %s failed: %s", script_name(script), r->str);
                st = DQ_INTERNAL;
            }
            freeReplyObject(r);
            break;
        }
        *reply = r;
        break;
    }
    if (!s->ctx && st == DQ_OK)
        st = DQ_UNAVAILABLE; /* script reload lost the connection */
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

int reply_is_array(const store_reply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY;
}

size_t reply_len(const store_reply *r)
{
    return reply_is_array(r) ? r->elements : 0;
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
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

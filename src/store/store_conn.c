/* store_conn: one connection with timeouts and credentials (see
 * store_conn.h). */
#include "store/store_conn.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "store/store_errors.h"

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

void conn_abandon(redisContext *c)
{
    if (!c)
        return;
    if (c->fd >= 0) {
        struct linger discard = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &discard, sizeof discard);
    }
    redisFree(c);
}

const char *conn_where(const conn_spec *spec, char *buf, size_t n)
{
    if (spec->port == 0)
        snprintf(buf, n, "%s", spec->host);
    else if (strchr(spec->host, ':'))
        snprintf(buf, n, "[%s]:%d", spec->host, spec->port);
    else
        snprintf(buf, n, "%s:%d", spec->host, spec->port);
    return buf;
}

redisContext *conn_open(const conn_spec *spec, char *err, size_t errlen, int *auth_refused)
{
    char at[300];
    *auth_refused = 0;
    struct timeval ctv = ms_to_tv(spec->connect_timeout_ms);
    redisContext *c = spec->port == 0 ? redisConnectUnixWithTimeout(spec->host, ctv)
                                      : redisConnectWithTimeout(spec->host, spec->port, ctv);
    if (!c || c->err) {
        snprintf(err, errlen, "Redis at %s is unreachable (%s)", conn_where(spec, at, sizeof at),
                 c ? c->errstr : "out of memory");
        conn_abandon(c);
        return NULL;
    }
    if (spec->timeout_ms > 0)
        redisSetTimeout(c, ms_to_tv(spec->timeout_ms));
    redisReply *r = NULL;
    if (spec->password && spec->password[0]) {
        const char *argv[3] = {"AUTH", spec->username, spec->password};
        int argc = 3;
        if (!spec->username || !spec->username[0]) {
            argv[1] = spec->password;
            argc = 2;
        }
        r = redisCommandArgv(c, argc, argv, NULL);
        if (!r)
            goto lost;
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "Redis at %s refused delayq's credentials: AUTH failed (%s)",
                     conn_where(spec, at, sizeof at), r->str);
            *auth_refused = 1;
            goto fail;
        }
        freeReplyObject(r);
        r = NULL;
    }
    /* SELECT (or PING where there is no database to choose) also tells
     * whether Redis wants a password we did not send. */
    char db[16];
    snprintf(db, sizeof db, "%d", spec->db);
    const char *probe[2] = {"SELECT", db};
    if (spec->db < 0)
        probe[0] = "PING";
    r = redisCommandArgv(c, spec->db < 0 ? 1 : 2, probe, NULL);
    if (!r)
        goto lost;
    if (r->type == REDIS_REPLY_ERROR) {
        *auth_refused = store_error_is_auth(r->str, r->len);
        if (*auth_refused)
            snprintf(err, errlen, "Redis at %s wants credentials: AUTH failed (%s)",
                     conn_where(spec, at, sizeof at), r->str);
        else
            snprintf(err, errlen, "Redis at %s refused %s: %s", conn_where(spec, at, sizeof at),
                     probe[0], r->str);
        goto fail;
    }
    freeReplyObject(r);
    return c;
lost:
    snprintf(err, errlen, "Redis at %s is unreachable (%s)", conn_where(spec, at, sizeof at),
             c->errstr);
fail:
    freeReplyObject(r);
    conn_abandon(c);
    return NULL;
}

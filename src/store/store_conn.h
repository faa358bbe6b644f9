/* store_conn: opening one hiredis connection with delayq's timeouts and
 * credentials, for the store's nodes, its slot-map queries and the
 * sentinels. Part of the store (includes hiredis). */
#ifndef DQ_STORE_CONN_H
#define DQ_STORE_CONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>

typedef struct {
    const char *host; /* or a unix socket path, when port is 0 */
    int port;
    int connect_timeout_ms;
    int timeout_ms;       /* for replies; 0: none (a subscriber waits in poll) */
    const char *username; /* AUTH: "" for none, or only a password */
    const char *password;
    int db;               /* SELECT; -1: PING instead (sentinels, cluster nodes) */
} conn_spec;

/* Connects, sends AUTH and SELECT. Returns the connection, or NULL with err
 * saying why as a sentence ("Redis at h:p is unreachable (...)", "... refused
 * delayq's credentials: AUTH failed (...)"); *auth_refused is set when the
 * credentials were the problem. The caller closes it with conn_abandon. */
redisContext *conn_open(const conn_spec *spec, char *err, size_t errlen, int *auth_refused);

/* Closes c and discards what it has not sent yet (an RST, not a FIN after
 * the queued bytes). A command whose reply timed out may still sit in the
 * kernel's send buffer, retransmitted once a partition heals: sent then,
 * it would run seconds after its caller answered 504, and recreate a job
 * that its retry made and a consumer finished meanwhile. NULL is a no-op. */
void conn_abandon(redisContext *c);

/* "host:port" (or the socket path) for messages. */
const char *conn_where(const conn_spec *spec, char *buf, size_t n);

#endif

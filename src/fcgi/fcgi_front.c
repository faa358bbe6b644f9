/* fcgi_front: FastCGI connections and requests through libfcgi. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "fcgi/fcgi_front.h"

#include <fcgiapp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

struct fcgi_conn {
    FCGX_Request fr;
};

int fcgi_listen(const dq_config *cfg)
{
    if (FCGX_Init() != 0)
        return -1;
    /* Owner and group only: the systemd unit runs delayq-fcgi with nginx's
     * group as its own, so nginx's workers may connect and no other local
     * user may (a connect needs write permission on the socket). Any local
     * user who could connect would bypass nginx's access rules. The umask
     * keeps the socket closed to others from bind() on; the chmod opens it
     * to the group whatever the umask was. */
    mode_t umask_was = umask(0117);
    int fd = FCGX_OpenSocket(cfg->listen, cfg->backlog);
    umask(umask_was);
    if (fd < 0)
        return -1;
    if (cfg->listen[0] == '/' && chmod(cfg->listen, 0660) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

fcgi_conn *fcgi_conn_new(int fd)
{
    fcgi_conn *c = util_xcalloc(1, sizeof *c);
    /* No listening socket: libfcgi must never accept by itself (it would
     * block a thread in accept). A read error then ends in an error return
     * instead of a new accept. */
    FCGX_InitRequest(&c->fr, -1, 0);
    c->fr.ipcFd = fd;
    /* Keep the fd across FCGX_Accept_r's opening "finish the previous
     * request"; the request header then says whether nginx keeps it. */
    c->fr.keepConnection = 1;
    /* Close with a plain close(): libfcgi's graceful close waits with
     * select(), which cannot take fds above 1024. We always read a request
     * to its end, so there is nothing left for a graceful close to drain. */
    c->fr.detached = 1;
    return c;
}

int fcgi_conn_fd(const fcgi_conn *c)
{
    return c->fr.ipcFd;
}

void fcgi_conn_free(fcgi_conn *c)
{
    if (!c)
        return;
    c->fr.detached = 1;
    FCGX_Free(&c->fr, 1);
    free(c);
}

int fcgi_next_request(fcgi_conn *c)
{
    c->fr.detached = 1;
    if (FCGX_Accept_r(&c->fr) < 0) {
        c->fr.ipcFd = -1; /* closed by libfcgi */
        return -1;
    }
    c->fr.detached = 1;
    return 0;
}

const char *fcgi_param(fcgi_conn *c, const char *name)
{
    return FCGX_GetParam(name, c->fr.envp);
}

int fcgi_read_body(fcgi_conn *c, dq_buf *out, size_t limit, dq_status *st)
{
    buf_reset(out);
    const char *cl = fcgi_param(c, "CONTENT_LENGTH");
    long want = cl && *cl ? strtol(cl, NULL, 10) : -1;
    int too_large = want > (long)limit;
    char chunk[16384];
    for (;;) {
        int n = FCGX_GetStr(chunk, sizeof chunk, c->fr.in);
        if (n <= 0)
            break;
        if (out->len + (size_t)n > limit)
            too_large = 1;
        if (!too_large)
            buf_append(out, chunk, (size_t)n);
    }
    if (too_large) {
        *st = DQ_TOO_LARGE;
        return -1;
    }
    if (want >= 0 && out->len != (size_t)want) {
        *st = DQ_BAD_REQUEST;
        return -1;
    }
    return 0;
}

void fcgi_respond(fcgi_conn *c, dq_status st, int is_text, const dq_buf *body)
{
    /* Formatted here: FCGX_FPrintF has its own printf without %zu. */
    char head[160];
    int n = snprintf(head, sizeof head, "Status: %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                     status_line(st), is_text ? "text/plain; version=0.0.4" : "application/json",
                     body->len);
    FCGX_PutStr(head, n, c->fr.out);
    FCGX_PutStr(body->data ? body->data : "", (int)body->len, c->fr.out);
}

/* nginx closes the FastCGI connection when its client aborts a request. */
int fcgi_client_gone(fcgi_conn *c)
{
    if (c->fr.ipcFd < 0)
        return 1;
    struct pollfd p = {c->fr.ipcFd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN)) != 0;
}

int fcgi_end_request(fcgi_conn *c, int keep)
{
    if (!keep)
        c->fr.keepConnection = 0;
    /* Closed as expected unless both nginx (FCGI_KEEP_CONN) and we meant to
     * keep it and nginx had not hung up already (its client went away). */
    int meant = c->fr.keepConnection;
    if (meant && c->fr.ipcFd >= 0) {
        struct pollfd p = {c->fr.ipcFd, POLLRDHUP, 0};
        meant = !(poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)));
    }
    c->fr.detached = 1;
    FCGX_Finish_r(&c->fr);
    if (c->fr.ipcFd >= 0)
        return 1;
    return meant ? -1 : 0;
}

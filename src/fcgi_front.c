/* fcgi_front: request threads of a worker process. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "fcgi_front.h"

#include <fcgiapp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "request.h"
#include "util.h"

static const dq_config *config;
static dq_auth *auth; /* NULL when auth_file is empty */
/* Per-thread state lives as long as the process: threads idle on a kept-alive
 * connection are never joined (see front_run_worker). */
typedef struct thread_state thread_state;
static thread_state *threads;
static int listen_sock = -1;
static int active_requests; /* accepted and not yet finished; atomic */
static int stopping;        /* atomic */

int front_listen(const dq_config *cfg)
{
    if (FCGX_Init() != 0)
        return -1;
    int fd = FCGX_OpenSocket(cfg->listen, cfg->backlog);
    if (fd < 0)
        return -1;
    if (cfg->listen[0] == '/')
        chmod(cfg->listen, 0666);
    return fd;
}

/* Reads the body; returns 0, or -1 with *st set (too large / unreadable). */
static int read_body(FCGX_Request *fr, dq_buf *body, dq_status *st)
{
    const char *cl = FCGX_GetParam("CONTENT_LENGTH", fr->envp);
    long want = cl && *cl ? strtol(cl, NULL, 10) : -1;
    size_t limit = (size_t)config->max_request;
    if (want > (long)limit) {
        *st = DQ_TOO_LARGE;
        return -1;
    }
    char chunk[16384];
    for (;;) {
        int n = FCGX_GetStr(chunk, sizeof chunk, fr->in);
        if (n <= 0)
            break;
        if (body->len + (size_t)n > limit) {
            *st = DQ_TOO_LARGE;
            return -1;
        }
        buf_append(body, chunk, (size_t)n);
    }
    if (want >= 0 && body->len != (size_t)want) {
        *st = DQ_BAD_REQUEST;
        return -1;
    }
    return 0;
}

static void send_response(FCGX_Request *fr, dq_status st, int is_text, const dq_buf *out)
{
    /* Formatted here: FCGX_FPrintF has its own printf without %zu. */
    char head[160];
    int n = snprintf(head, sizeof head, "Status: %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                     status_line(st), is_text ? "text/plain; version=0.0.4" : "application/json",
                     out->len);
    FCGX_PutStr(head, n, fr->out);
    FCGX_PutStr(out->data ? out->data : "", (int)out->len, fr->out);
}

struct thread_state {
    FCGX_Request fr;
    dq_handler_ctx h;
    dq_buf body;
    dq_buf out;
};

static void serve_one(thread_state *t)
{
    int64_t start = util_mono_ms();
    FCGX_Request *fr = &t->fr;
    const char *method = FCGX_GetParam("REQUEST_METHOD", fr->envp);
    const char *path = FCGX_GetParam("DOCUMENT_URI", fr->envp);
    if (!path)
        path = FCGX_GetParam("SCRIPT_NAME", fr->envp);
    const char *query = FCGX_GetParam("QUERY_STRING", fr->envp);
    dq_limits lim = {(size_t)config->max_body, (int64_t)config->default_ttr * 1000};
    dq_request req;
    dq_response res = {DQ_OK, 0};
    char err[512];
    dq_command cmd = CMD_COUNT;

    buf_reset(&t->body);
    buf_reset(&t->out);
    if (read_body(fr, &t->body, &res.status) < 0) {
        write_error(&t->out, res.status, res.status == DQ_TOO_LARGE
                                             ? "request body is larger than the limit (max_request)"
                                             : "request body is shorter than its Content-Length");
    } else {
        res.status = request_parse(method ? method : "GET", path, query, t->body.data, t->body.len,
                                   &lim, &req, err, sizeof err);
        if (res.status != DQ_OK) {
            write_error(&t->out, res.status, err);
        } else {
            cmd = req.cmd;
            t->h.authorization = FCGX_GetParam("HTTP_AUTHORIZATION", fr->envp);
            res = handle_request(&t->h, &req, &t->out);
            request_free(&req);
        }
    }
    send_response(fr, res.status, res.is_text, &t->out);
    metrics_observe(cmd, res.status, (double)(util_mono_ms() - start) / 1000.0);
}

/* nginx closes the FastCGI connection when its client aborts a request. */
static int client_gone(void *arg)
{
    FCGX_Request *fr = arg;
    struct pollfd p = {fr->ipcFd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

static void *thread_main(void *arg)
{
    thread_state *t = arg;
    for (;;) {
        if (FCGX_Accept_r(&t->fr) < 0)
            break;
        __atomic_add_fetch(&active_requests, 1, __ATOMIC_SEQ_CST);
        serve_one(t);
        FCGX_Finish_r(&t->fr);
        __atomic_sub_fetch(&active_requests, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&stopping, __ATOMIC_SEQ_CST))
            break;
    }
    return NULL;
}

int front_run_worker(const dq_config *cfg, int listen_fd)
{
    config = cfg;
    listen_sock = listen_fd;
    if (cfg->auth_file[0]) {
        char err[512];
        auth = auth_load(cfg->auth_file, err, sizeof err);
        if (!auth) {
            log_error("%s", err);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (notify_start(cfg) < 0) {
        log_error("cannot start the notification thread");
        return 1;
    }
    int n = cfg->threads;
    threads = calloc((size_t)n, sizeof *threads);
    if (!threads)
        return 1;
    for (int i = 0; i < n; i++) {
        thread_state *t = &threads[i];
        FCGX_InitRequest(&t->fr, listen_fd, 0);
        t->h.cfg = cfg;
        t->h.store = store_new(cfg);
        t->h.args = malloc(sizeof *t->h.args);
        t->h.auth = auth;
        t->h.client_gone = client_gone;
        t->h.client_arg = &t->fr;
        buf_init(&t->body);
        buf_init(&t->out);
        pthread_t tid;
        if (!t->h.store || !t->h.args || pthread_create(&tid, NULL, thread_main, t) != 0) {
            log_error("cannot start request thread %d", i);
            return 1;
        }
        pthread_detach(tid);
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int sig = 0;
    sigwait(&set, &sig);

    /* Stop: no new connections, long-polls answer now, in-flight requests
     * finish. Threads idle on a kept-alive nginx connection are not waited
     * for: they hold no request. */
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    notify_shutdown();
    FCGX_ShutdownPending();
    shutdown(listen_fd, SHUT_RD);
    int64_t give_up = util_mono_ms() + (int64_t)cfg->redis_timeout_ms + 5000;
    while (__atomic_load_n(&active_requests, __ATOMIC_SEQ_CST) > 0 && util_mono_ms() < give_up)
        usleep(10000);
    log_info("worker stopped (signal %d)", sig);
    return 0;
}

/* worker: the event loop, the request threads and parked long-polls of one
 * delayq-fcgi worker process (see worker.h). */
#define _GNU_SOURCE
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "buf.h"
#include "fcgi_front.h"
#include "handlers.h"
#include "json_scan.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "ready_sub.h"
#include "reply.h"
#include "request.h"
#include "store.h"
#include "util.h"

/* Buffers that grew beyond this after a request are freed, so one large
 * request or answer does not stay allocated for the life of the process. */
#define BUF_KEEP (64 * 1024)
/* A stuck read or write on a connection (nginx never does this) gives up
 * after this long rather than holding a thread. */
#define IO_TIMEOUT_S 30
#define LISTEN_TAG UINT64_MAX
#define WAKE_TAG (UINT64_MAX - 1)

typedef enum { C_FREE, C_IDLE, C_QUEUED, C_RUNNING, C_PARKED } conn_state;

/* One FastCGI connection and the request in progress on it. Connections
 * live in slots that are reused, never freed while the process runs, and an
 * epoll event names a slot and its generation: an event about a connection
 * that was closed meanwhile finds another generation and is ignored. */
typedef struct conn {
    uint32_t slot, gen;
    conn_state state;
    fcgi_conn *fc;
    int gone;           /* the client left while the request was parked */
    int has_req;        /* req holds a parsed request */
    dq_request req;
    dq_buf body;        /* the request body; req points into it */
    int64_t started_ms; /* monotonic ms the request arrived */
    int parked_before;
    notify_waiter w;
    struct conn *qnext;
} conn;

/* A request thread's own things. */
typedef struct {
    dq_handler_ctx h;
    json_doc doc;
    dq_buf out;
} thread_state;

static struct {
    const dq_config *cfg;
    dq_auth *auth;
    int listen_fd, ep, evfd;
    pthread_mutex_t lock; /* everything below, and every conn's state */
    pthread_cond_t work;
    conn **slots;
    uint32_t nslots, maxslots;
    uint32_t *free_slots;
    uint32_t nfree;
    uint32_t open;     /* connections open */
    uint32_t requests; /* requests in progress: queued, running or parked */
    conn *qhead, *qtail;
    int listening; /* the listening socket is armed in epoll */
} W = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

static void poke_loop(void)
{
    uint64_t one = 1;
    if (write(W.evfd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("event loop wake-up failed: %s", strerror(errno));
}

static void on_woken(notify_waiter *w);

/* ------------------------------------------------------------------------ */
/* Slots                                                                     */
/* ------------------------------------------------------------------------ */

/* A free slot with a new connection in it, or NULL when max_connections
 * are open. Lock held. */
static conn *slot_take(fcgi_conn *fc)
{
    conn *c;
    if (W.nfree > 0) {
        c = W.slots[W.free_slots[--W.nfree]];
    } else if (W.nslots < W.maxslots) {
        c = calloc(1, sizeof *c);
        if (!c)
            abort();
        c->slot = W.nslots;
        W.slots[W.nslots++] = c;
        buf_init(&c->body);
    } else {
        return NULL;
    }
    c->gen++;
    c->fc = fc;
    c->state = C_IDLE;
    c->gone = c->has_req = c->parked_before = 0;
    c->qnext = NULL;
    c->w.owner = c;
    c->w.wake = on_woken;
    W.open++;
    return c;
}

static uint64_t tag_of(const conn *c)
{
    return ((uint64_t)c->gen << 32) | c->slot;
}

/* Arms the connection's fd in epoll for one event. Called only by the
 * thread that owns the connection (its fd cannot be closed meanwhile). */
static void arm(conn *c, uint32_t events)
{
    struct epoll_event ev = {events | EPOLLONESHOT, {.u64 = tag_of(c)}};
    if (epoll_ctl(W.ep, EPOLL_CTL_MOD, fcgi_conn_fd(c->fc), &ev) < 0)
        log_warn("epoll_ctl: %s", strerror(errno));
}

/* Closes the connection and frees its slot; its request, if any, ends. */
static void conn_close(conn *c)
{
    if (c->has_req) {
        request_free(&c->req);
        c->has_req = 0;
    }
    fcgi_conn_free(c->fc);
    c->fc = NULL;
    buf_trim(&c->body, 0);
    pthread_mutex_lock(&W.lock);
    c->state = C_FREE;
    c->gen++;
    W.free_slots[W.nfree++] = c->slot;
    int was_full = W.open-- == W.maxslots;
    pthread_mutex_unlock(&W.lock);
    if (was_full)
        poke_loop(); /* below the limit again: accept once more */
}

/* ------------------------------------------------------------------------ */
/* The queue of connections with work                                        */
/* ------------------------------------------------------------------------ */

/* Lock held. */
static void enqueue(conn *c)
{
    c->state = C_QUEUED;
    c->qnext = NULL;
    if (W.qtail)
        W.qtail->qnext = c;
    else
        W.qhead = c;
    W.qtail = c;
    pthread_cond_signal(&W.work);
}

static conn *dequeue(void)
{
    pthread_mutex_lock(&W.lock);
    while (!W.qhead)
        pthread_cond_wait(&W.work, &W.lock);
    conn *c = W.qhead;
    W.qhead = c->qnext;
    if (!W.qhead)
        W.qtail = NULL;
    c->state = C_RUNNING;
    pthread_mutex_unlock(&W.lock);
    return c;
}

/* notify's callback: a parked long-poll was woken (job, deadline, stop). */
static void on_woken(notify_waiter *w)
{
    conn *c = w->owner;
    pthread_mutex_lock(&W.lock);
    enqueue(c);
    pthread_mutex_unlock(&W.lock);
}

/* ------------------------------------------------------------------------ */
/* Serving                                                                   */
/* ------------------------------------------------------------------------ */

static void request_done(void)
{
    pthread_mutex_lock(&W.lock);
    W.requests--;
    pthread_mutex_unlock(&W.lock);
}

/* Answers, ends the request, and hands the connection back to the loop
 * (kept alive) or closes it. */
static void finish(thread_state *t, conn *c, dq_command cmd, dq_status st, int is_text)
{
    fcgi_respond(c->fc, st, is_text, &t->out);
    metrics_observe(cmd, st, (double)(util_mono_ms() - c->started_ms) / 1000.0);
    if (c->has_req) {
        request_free(&c->req);
        c->has_req = 0;
    }
    buf_trim(&c->body, BUF_KEEP);
    buf_trim(&t->out, BUF_KEEP);
    json_doc_trim(&t->doc);
    int kept = fcgi_end_request(c->fc, !notify_stopping());
    request_done();
    if (!kept) {
        conn_close(c);
        return;
    }
    pthread_mutex_lock(&W.lock);
    c->state = C_IDLE;
    pthread_mutex_unlock(&W.lock);
    arm(c, EPOLLIN | EPOLLRDHUP);
}

static void park(conn *c, uint64_t gen)
{
    pthread_mutex_lock(&W.lock);
    c->state = C_PARKED;
    pthread_mutex_unlock(&W.lock);
    /* Armed before it is parked: once parked, another thread may run it. */
    arm(c, EPOLLIN | EPOLLRDHUP);
    notify_park(&c->w, c->req.topics, c->req.ntopics, gen, c->started_ms + c->req.timeout_ms,
                !c->parked_before);
    c->parked_before = 1;
}

/* Reads and parses a new request on c. Returns 0 when it is ready to run;
 * -1 when it was answered with an error (or the connection closed). */
static int read_request(thread_state *t, conn *c)
{
    if (fcgi_next_request(c->fc) < 0) {
        conn_close(c);
        return -1;
    }
    pthread_mutex_lock(&W.lock);
    W.requests++;
    pthread_mutex_unlock(&W.lock);
    c->started_ms = util_mono_ms();
    c->parked_before = 0;
    const dq_config *cfg = W.cfg;
    dq_status st;
    buf_reset(&t->out);
    if (fcgi_read_body(c->fc, &c->body, (size_t)cfg->max_request, &st) < 0) {
        reply_error(&t->out, st, st == DQ_TOO_LARGE
                                     ? "request body is larger than the limit (max_request)"
                                     : "request body is shorter than its Content-Length");
        finish(t, c, CMD_COUNT, st, 0);
        return -1;
    }
    const char *method = fcgi_param(c->fc, "REQUEST_METHOD");
    const char *path = fcgi_param(c->fc, "DOCUMENT_URI");
    if (!path)
        path = fcgi_param(c->fc, "SCRIPT_NAME");
    dq_limits lim = {(size_t)cfg->max_body, (int64_t)cfg->default_ttr * 1000};
    char err[600];
    st = request_parse(&t->doc, method ? method : "GET", path, fcgi_param(c->fc, "QUERY_STRING"),
                       c->body.data, c->body.len, &lim, &c->req, err, sizeof err);
    if (st != DQ_OK) {
        reply_error(&t->out, st, err);
        finish(t, c, CMD_COUNT, st, 0);
        return -1;
    }
    c->has_req = 1;
    return 0;
}

static void serve(thread_state *t, conn *c)
{
    if (c->gone) { /* its client left while it was parked */
        request_done();
        conn_close(c);
        return;
    }
    if (!c->has_req) {
        if (read_request(t, c) < 0)
            return;
    } else if (fcgi_client_gone(c->fc)) {
        /* Woken, but nobody to hand a job to: leave it for another waiter. */
        notify_pass_on(c->w.woken_by);
        request_done();
        conn_close(c);
        return;
    }
    uint64_t gen = notify_generation();
    t->h.authorization = fcgi_param(c->fc, "HTTP_AUTHORIZATION");
    t->h.started_ms = c->started_ms;
    t->h.stopping = notify_stopping();
    dq_response res = handle_request(&t->h, &c->req, &t->out);
    if (res.wait) {
        park(c, gen);
        return;
    }
    finish(t, c, c->req.cmd, res.status, res.is_text);
}

static void *thread_main(void *arg)
{
    thread_state *t = arg;
    for (;;)
        serve(t, dequeue());
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The event loop                                                            */
/* ------------------------------------------------------------------------ */

static void set_listening(int on)
{
    if (W.listening == on)
        return;
    struct epoll_event ev = {on ? EPOLLIN | EPOLLEXCLUSIVE : 0, {.u64 = LISTEN_TAG}};
    /* EPOLLEXCLUSIVE cannot be changed with MOD: delete and add again. */
    epoll_ctl(W.ep, EPOLL_CTL_DEL, W.listen_fd, NULL);
    if (on && epoll_ctl(W.ep, EPOLL_CTL_ADD, W.listen_fd, &ev) < 0)
        log_warn("epoll_ctl(listen): %s", strerror(errno));
    W.listening = on;
}

static void accept_connections(void)
{
    for (;;) {
        int fd = accept4(W.listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        struct timeval tv = {IO_TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        pthread_mutex_lock(&W.lock);
        conn *c = slot_take(fcgi_conn_new(fd));
        int full = W.open >= W.maxslots;
        pthread_mutex_unlock(&W.lock);
        if (!c) { /* cannot happen: the listener is off while full */
            close(fd);
            set_listening(0);
            return;
        }
        struct epoll_event ev = {EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, {.u64 = tag_of(c)}};
        if (epoll_ctl(W.ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            log_warn("epoll_ctl(add): %s", strerror(errno));
            conn_close(c);
        }
        if (full) {
            log_warn("max_connections (%d) open in this worker: accepting no more until one "
                     "closes", W.cfg->max_connections);
            set_listening(0);
            return;
        }
    }
}

/* A connection the loop holds became readable (or closed). */
static void on_conn_event(uint64_t tag)
{
    uint32_t slot = (uint32_t)tag, gen = (uint32_t)(tag >> 32);
    pthread_mutex_lock(&W.lock);
    conn *c = slot < W.nslots ? W.slots[slot] : NULL;
    if (!c || c->gen != gen) {
        pthread_mutex_unlock(&W.lock);
        return; /* closed since */
    }
    if (c->state == C_IDLE) {
        enqueue(c); /* the next request, or nginx closing it: a thread finds out */
        pthread_mutex_unlock(&W.lock);
        return;
    }
    int parked = c->state == C_PARKED;
    pthread_mutex_unlock(&W.lock);
    /* A parked long-poll's connection closed: its client left. Whoever
     * takes it out of notify owns it (a wake-up may have come first). */
    if (parked && notify_cancel(&c->w)) {
        pthread_mutex_lock(&W.lock);
        c->gone = 1;
        enqueue(c);
        pthread_mutex_unlock(&W.lock);
    }
}

/* Closes idle connections at shutdown. */
static void close_idle(void)
{
    for (uint32_t i = 0;; i++) {
        pthread_mutex_lock(&W.lock);
        if (i >= W.nslots) {
            pthread_mutex_unlock(&W.lock);
            return;
        }
        conn *c = W.slots[i];
        int idle = c->state == C_IDLE;
        if (idle)
            c->state = C_RUNNING; /* ours now: no thread will take it */
        pthread_mutex_unlock(&W.lock);
        if (idle)
            conn_close(c);
    }
}

static void *loop_main(void *arg)
{
    (void)arg;
    struct epoll_event events[256];
    int64_t next_deadline = -1;
    for (;;) {
        int timeout = -1;
        if (next_deadline >= 0) {
            int64_t d = next_deadline - util_mono_ms();
            timeout = d < 0 ? 0 : (int)d;
        }
        int n = epoll_wait(W.ep, events, 256, timeout);
        if (n < 0 && errno != EINTR)
            log_warn("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            uint64_t tag = events[i].data.u64;
            if (tag == LISTEN_TAG) {
                accept_connections();
            } else if (tag == WAKE_TAG) {
                uint64_t v;
                if (read(W.evfd, &v, sizeof v) < 0 && errno != EAGAIN)
                    log_warn("eventfd: %s", strerror(errno));
            } else {
                on_conn_event(tag);
            }
        }
        next_deadline = notify_expire(util_mono_ms());
        if (notify_stopping()) {
            set_listening(0);
            close_idle();
        } else {
            pthread_mutex_lock(&W.lock);
            int room = W.open < W.maxslots;
            pthread_mutex_unlock(&W.lock);
            if (room)
                set_listening(1);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Start and stop                                                            */
/* ------------------------------------------------------------------------ */

/* Each open connection is an fd: allow as many as the hard limit permits,
 * and cap max_connections below it. */
static uint32_t connection_limit(const dq_config *cfg)
{
    struct rlimit rl;
    uint32_t max = (uint32_t)cfg->max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)max + 256) {
            uint32_t room = rl.rlim_cur > 512 ? (uint32_t)rl.rlim_cur - 256 : 256;
            log_warn("max_connections %u is above what the open-file limit (%llu) allows; "
                     "using %u", max, (unsigned long long)rl.rlim_cur, room);
            max = room;
        }
    }
    return max;
}

static int start_threads(const dq_config *cfg)
{
    pthread_t tid;
    for (int i = 0; i < cfg->threads; i++) {
        thread_state *t = calloc(1, sizeof *t);
        if (!t)
            return -1;
        t->h.cfg = cfg;
        t->h.store = store_new(cfg);
        t->h.auth = W.auth;
        json_doc_init(&t->doc);
        buf_init(&t->out);
        if (!t->h.store || pthread_create(&tid, NULL, thread_main, t) != 0)
            return -1;
        pthread_detach(tid);
    }
    if (pthread_create(&tid, NULL, loop_main, NULL) != 0)
        return -1;
    pthread_detach(tid);
    return 0;
}

int worker_run(const dq_config *cfg, int listen_fd)
{
    W.cfg = cfg;
    W.listen_fd = listen_fd;
    if (cfg->auth_file[0]) {
        char err[512];
        W.auth = auth_load(cfg->auth_file, err, sizeof err);
        if (!W.auth) {
            log_error("%s", err);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    /* Large buffers (a big answer, a big reply) are mapped and unmapped as
     * they come and go; without a fixed threshold glibc raises it after the
     * first free and keeps such memory in its heaps for good. */
    mallopt(M_MMAP_THRESHOLD, BUF_KEEP * 2);
    W.maxslots = connection_limit(cfg);
    W.slots = calloc(W.maxslots, sizeof *W.slots);
    W.free_slots = calloc(W.maxslots, sizeof *W.free_slots);
    /* The socket is shared by every worker: a wake-up that finds another
     * worker took the connection must not block in accept. */
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    W.ep = epoll_create1(EPOLL_CLOEXEC);
    W.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {EPOLLIN, {.u64 = WAKE_TAG}};
    if (!W.slots || !W.free_slots || W.ep < 0 || W.evfd < 0 ||
        epoll_ctl(W.ep, EPOLL_CTL_ADD, W.evfd, &ev) < 0) {
        log_error("cannot set up the event loop: %s", strerror(errno));
        return 1;
    }
    notify_init(poke_loop);
    if (ready_sub_start(cfg) < 0 || start_threads(cfg) < 0) {
        log_error("cannot start the worker's threads");
        return 1;
    }
    poke_loop(); /* the loop arms the listening socket */

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int sig = 0;
    sigwait(&set, &sig);

    /* Stop: no new connections, parked long-polls answer now (empty),
     * requests in progress finish, idle connections close. notify's flag
     * is the worker's one stop flag. */
    notify_shutdown();
    poke_loop();
    int64_t give_up = util_mono_ms() + (int64_t)cfg->redis_timeout_ms + 5000;
    for (;;) {
        pthread_mutex_lock(&W.lock);
        uint32_t left = W.requests;
        pthread_mutex_unlock(&W.lock);
        if (!left || util_mono_ms() >= give_up)
            break;
        usleep(10000);
    }
    log_info("worker stopped (signal %d)", sig);
    return 0;
}

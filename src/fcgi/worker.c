/* worker: the request threads, connections and parked long-polls of one
 * delayq-fcgi worker process (see worker.h). */
#define _GNU_SOURCE
#include "fcgi/worker.h"

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
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/json_scan.h"
#include "common/log.h"
#include "common/push_guard.h"
#include "common/util.h"
#include "fcgi/fcgi_front.h"
#include "fcgi/handlers.h"
#include "fcgi/metrics.h"
#include "fcgi/notify.h"
#include "fcgi/ready_sub.h"
#include "fcgi/reply.h"
#include "fcgi/shard_hints.h"
#include "protocol/auth.h"
#include "protocol/request.h"
#include "store/store.h"
#include "store/store_sentinel.h"

/* Buffers that grew beyond this after a request are freed, so one large
 * request or answer does not stay allocated for the life of the process. */
#define BUF_KEEP (64 * 1024)
/* A stuck read or write on a connection (nginx never does this) gives up
 * after this long rather than holding a thread. */
#define IO_TIMEOUT_S 30
#define LISTEN_TAG UINT64_MAX
#define WOKEN_TAG (UINT64_MAX - 1)
#define DEADLINE_TAG (UINT64_MAX - 2)

typedef enum { C_FREE, C_IDLE, C_QUEUED, C_RUNNING, C_PARKED } conn_state;

/* One FastCGI connection and the request in progress on it. Connections
 * live in slots that are reused, never freed while the process runs, and an
 * epoll event names a slot and its generation. The generation changes when
 * the connection closes and each time it is armed, so an event that a
 * thread took before the connection moved on (closed, or served and armed
 * again) is ignored: such a late event must not pass for news about a
 * request that came after it (a parked long-poll taken for one whose client
 * left). */
typedef struct conn {
    uint32_t slot, gen;
    conn_state state;
    fcgi_conn *fc;
    int gone;           /* the client left while the request was parked */
    int has_req;        /* req holds a parsed request */
    dq_request req;
    dq_progress progress; /* what req has done across its runs */
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

/* Every request thread waits in epoll_wait on the same epoll set and takes
 * one event at a time: a readable connection (a new request, or nginx
 * closing it), the listening socket, a parked long-poll woken (the woken
 * queue and its eventfd), or the earliest parked deadline (a timerfd).
 * Every fd is armed for one event (EPOLLONESHOT), so one thread handles it
 * and re-arms it when done: the thread the kernel wakes serves the request
 * itself, with no hand-off between threads. */
static struct {
    const dq_config *cfg;
    dq_auth *auth;
    dq_allow *push_allow; /* where callbacks may go, checked at add */
    shard_hints *hints; /* several shards: where ready jobs are */
    dq_group *group;    /* group commit of single-job requests */
    int listen_fd, ep, woken_fd, deadline_fd;
    pthread_mutex_t lock; /* everything below, and every conn's state */
    conn **slots;
    uint32_t nslots, maxslots;
    uint32_t *free_slots;
    uint32_t nfree;
    uint32_t open;     /* connections open */
    uint32_t requests; /* requests in progress: queued, running or parked */
    conn *qhead, *qtail; /* parked long-polls woken, waiting for a thread */
    int listening;       /* the listening socket is armed (not full, not stopping) */
    pthread_mutex_t deadline_lock; /* orders setting the timerfd */
} W = {.lock = PTHREAD_MUTEX_INITIALIZER, .deadline_lock = PTHREAD_MUTEX_INITIALIZER};

static void on_woken(notify_waiter *w);

/* Arms fd in epoll for one event tagged tag (ADD or MOD as told). */
static void arm_fd(int op, int fd, uint32_t events, uint64_t tag)
{
    struct epoll_event ev = {events | EPOLLONESHOT, {.u64 = tag}};
    if (epoll_ctl(W.ep, op, fd, &ev) < 0)
        log_warn("epoll_ctl(%d): %s", fd, strerror(errno));
}

/* The listening socket, armed again while there is room. Lock held. */
static void listen_again(void)
{
    W.listening = W.open < W.maxslots && !notify_stopping();
    if (W.listening)
        arm_fd(EPOLL_CTL_MOD, W.listen_fd, EPOLLIN, LISTEN_TAG);
}

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
        c = util_xcalloc(1, sizeof *c);
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

/* Hands the connection back to the event loop in `state` (idle, or parked)
 * and arms its fd for the next event, under a new generation. Called only
 * by the thread that owns the connection (its fd cannot be closed
 * meanwhile); once armed, another thread may take it. */
static void release_to(conn *c, conn_state state)
{
    pthread_mutex_lock(&W.lock);
    c->state = state;
    c->gen++;
    uint64_t tag = tag_of(c);
    pthread_mutex_unlock(&W.lock);
    arm_fd(EPOLL_CTL_MOD, fcgi_conn_fd(c->fc), EPOLLIN | EPOLLRDHUP, tag);
}

/* The request on c, if any, ends. */
static void request_end(conn *c)
{
    if (c->has_req) {
        request_free(&c->req);
        handle_progress_free(&c->progress);
        c->has_req = 0;
    }
}

/* Closes the connection and frees its slot; its request, if any, ends. */
static void conn_close(conn *c)
{
    request_end(c);
    fcgi_conn_free(c->fc);
    c->fc = NULL;
    buf_trim(&c->body, 0);
    pthread_mutex_lock(&W.lock);
    c->state = C_FREE;
    c->gen++;
    W.free_slots[W.nfree++] = c->slot;
    W.open--;
    if (!W.listening)
        listen_again(); /* below max_connections again */
    pthread_mutex_unlock(&W.lock);
}

/* ------------------------------------------------------------------------ */
/* Woken long-polls and deadlines                                            */
/* ------------------------------------------------------------------------ */

/* notify's callback: a parked long-poll was woken (job, deadline, stop).
 * It joins the woken queue; the eventfd (a semaphore) lets one thread take
 * one entry. */
static void on_woken(notify_waiter *w)
{
    conn *c = w->owner;
    pthread_mutex_lock(&W.lock);
    c->state = C_QUEUED;
    c->qnext = NULL;
    if (W.qtail)
        W.qtail->qnext = c;
    else
        W.qhead = c;
    W.qtail = c;
    pthread_mutex_unlock(&W.lock);
    uint64_t one = 1;
    if (write(W.woken_fd, &one, sizeof one) < 0)
        log_warn("eventfd: %s", strerror(errno));
}

static conn *take_woken(void)
{
    uint64_t v;
    if (read(W.woken_fd, &v, sizeof v) < 0)
        return NULL; /* another thread took it */
    pthread_mutex_lock(&W.lock);
    conn *c = W.qhead;
    if (c) {
        W.qhead = c->qnext;
        if (!W.qhead)
            W.qtail = NULL;
        c->state = C_RUNNING;
    }
    pthread_mutex_unlock(&W.lock);
    return c;
}

/* Sets the deadline timerfd to notify's earliest parked deadline. */
static void set_deadline(int64_t next)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    if (next >= 0) {
        /* 0 would disarm it: a deadline already due fires in 1 ns. */
        its.it_value.tv_sec = next / 1000;
        its.it_value.tv_nsec = (long)(next % 1000) * 1000000 + 1;
    }
    if (timerfd_settime(W.deadline_fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        log_warn("timerfd_settime: %s", strerror(errno));
}

/* notify's hook: a parked long-poll's deadline became the earliest. */
static void deadline_moved(void)
{
    pthread_mutex_lock(&W.deadline_lock);
    set_deadline(notify_expire(util_mono_ms()));
    pthread_mutex_unlock(&W.deadline_lock);
}

static void on_deadline(void)
{
    uint64_t v;
    if (read(W.deadline_fd, &v, sizeof v) < 0 && errno != EAGAIN)
        log_warn("timerfd: %s", strerror(errno));
    deadline_moved(); /* wakes the due ones, sets the next */
    arm_fd(EPOLL_CTL_MOD, W.deadline_fd, EPOLLIN, DEADLINE_TAG);
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

/* Answers, ends the request, and keeps the connection for the next one
 * (armed again) or closes it. */
static void finish(thread_state *t, conn *c, dq_command cmd, dq_status st, int is_text)
{
    fcgi_respond(c->fc, st, is_text, &t->out);
    metrics_observe(cmd, st, (double)(util_mono_ms() - c->started_ms) / 1000.0);
    request_end(c);
    buf_trim(&c->body, BUF_KEEP);
    buf_trim(&t->out, BUF_KEEP);
    json_doc_trim(&t->doc);
    int kept = fcgi_end_request(c->fc, !notify_stopping());
    request_done();
    if (kept < 0) /* nginx may have meant to reuse it */
        log_warn("closed a connection after answering it: libfcgi saw an error on it");
    if (kept <= 0) {
        conn_close(c);
        return;
    }
    release_to(c, C_IDLE);
}

/* wait_ms: run it again after this long at most (0: no bound but its
 * timeout): when a rate-limited topic's next token is due. */
static void park(conn *c, uint64_t gen, int64_t wait_ms)
{
    int first_park = !c->parked_before;
    c->parked_before = 1;
    int64_t deadline = c->started_ms + c->req.timeout_ms;
    if (wait_ms > 0 && util_mono_ms() + wait_ms < deadline)
        deadline = util_mono_ms() + wait_ms;
    /* Armed before it is parked: once parked, another thread may run it. */
    release_to(c, C_PARKED);
    notify_park(&c->w, c->req.topics, c->req.ntopics, gen, deadline, first_park);
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
    dq_limits lim = {(size_t)cfg->max_body, (int64_t)cfg->default_ttr * 1000, W.push_allow};
    /* The params live as long as the request, so the parsed one may point into them. */
    dq_headers headers = {fcgi_param(c->fc, "HTTP_TRACEPARENT"),
                          fcgi_param(c->fc, "HTTP_TRACESTATE")};
    if (!request_origin_allowed(fcgi_param(c->fc, "HTTP_ORIGIN"), fcgi_param(c->fc, "HTTP_HOST"))) {
        reply_error(&t->out, DQ_FORBIDDEN, "a request from a page of another site (its Origin "
                    "header is not this server's) is refused");
        finish(t, c, CMD_COUNT, DQ_FORBIDDEN, 0);
        return -1;
    }
    char err[600];
    st = request_parse(&t->doc, method ? method : "GET", path, fcgi_param(c->fc, "QUERY_STRING"),
                       &headers, c->body.data, c->body.len, &lim, &c->req, err, sizeof err);
    if (st != DQ_OK) {
        reply_error(&t->out, st, err);
        finish(t, c, CMD_COUNT, st, 0);
        return -1;
    }
    c->has_req = 1;
    return 0;
}

/* Runs the request on c: a new one, or a parked long-poll woken. */
static void serve(thread_state *t, conn *c)
{
    if (c->gone) { /* its client left while it was parked */
        log_debug("a parked long-poll's connection closed: dropped");
        request_done();
        conn_close(c);
        return;
    }
    if (!c->has_req) {
        if (read_request(t, c) < 0)
            return;
    } else if (fcgi_client_gone(c->fc)) {
        /* Woken, but nobody to hand a job to: leave it for another waiter. */
        log_debug("a woken long-poll's connection closed: its wake-up passed on");
        notify_pass_on(c->w.woken_by);
        request_done();
        conn_close(c);
        return;
    }
    uint64_t gen = notify_generation();
    t->h.authorization = fcgi_param(c->fc, "HTTP_AUTHORIZATION");
    t->h.started_ms = c->started_ms;
    t->h.stopping = notify_stopping();
    t->h.recheck = c->parked_before && c->w.woken_by == 0;
    dq_response res = handle_request(&t->h, &c->req, &c->progress, &t->out);
    if (res.wait) {
        park(c, gen, res.wait_ms);
        return;
    }
    finish(t, c, c->req.cmd, res.status, res.is_text);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

static void accept_connections(void)
{
    for (;;) {
        int fd = accept4(W.listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                log_warn("accept: %s", strerror(errno));
            break;
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
            full = 1;
        } else {
            arm_fd(EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, tag_of(c));
        }
        if (full) {
            log_warn("max_connections (%u) open in this worker: accepting no more until one "
                     "closes", W.maxslots);
            break;
        }
    }
    pthread_mutex_lock(&W.lock);
    listen_again();
    pthread_mutex_unlock(&W.lock);
}

/* A connection became readable (or closed): the connection this thread
 * will serve, or NULL. */
static conn *on_conn_event(uint64_t tag)
{
    uint32_t slot = (uint32_t)tag, gen = (uint32_t)(tag >> 32);
    pthread_mutex_lock(&W.lock);
    conn *c = slot < W.nslots ? W.slots[slot] : NULL;
    if (!c || c->gen != gen) {
        pthread_mutex_unlock(&W.lock);
        return NULL; /* closed since */
    }
    if (c->state == C_IDLE) {
        c->state = C_RUNNING; /* the next request, or nginx closing it */
        pthread_mutex_unlock(&W.lock);
        return c;
    }
    int parked = c->state == C_PARKED;
    pthread_mutex_unlock(&W.lock);
    /* A parked long-poll's connection closed: its client left. Whoever
     * takes it out of notify owns it (a wake-up may have come first). */
    if (parked && notify_cancel(&c->w)) {
        c->gone = 1;
        pthread_mutex_lock(&W.lock);
        c->state = C_RUNNING;
        pthread_mutex_unlock(&W.lock);
        return c;
    }
    return NULL;
}

static void *thread_main(void *arg)
{
    thread_state *t = arg;
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(W.ep, &ev, 1, -1);
        if (n < 0) {
            if (errno != EINTR)
                log_warn("epoll_wait: %s", strerror(errno));
            continue;
        }
        if (n == 0)
            continue;
        conn *c = NULL;
        switch (ev.data.u64) {
        case LISTEN_TAG:
            accept_connections();
            break;
        case WOKEN_TAG:
            c = take_woken();
            arm_fd(EPOLL_CTL_MOD, W.woken_fd, EPOLLIN, WOKEN_TAG);
            break;
        case DEADLINE_TAG:
            on_deadline();
            break;
        default:
            c = on_conn_event(ev.data.u64);
            break;
        }
        if (c)
            serve(t, c);
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
    for (int i = 0; i < cfg->threads; i++) {
        thread_state *t = calloc(1, sizeof *t);
        pthread_t tid;
        if (!t)
            return -1;
        t->h.cfg = cfg;
        t->h.store = store_new(cfg);
        t->h.auth = W.auth;
        t->h.hints = W.hints;
        t->h.group = W.group;
        json_doc_init(&t->doc);
        buf_init(&t->out);
        if (!t->h.store || pthread_create(&tid, NULL, thread_main, t) != 0)
            return -1;
        pthread_detach(tid);
    }
    return 0;
}

/* The epoll set with the listening socket, the woken queue's eventfd and
 * the deadline timerfd in it. Returns 0 or -1. */
static int setup_events(int listen_fd)
{
    W.listen_fd = listen_fd;
    /* The socket is shared by every worker: a wake-up that finds another
     * worker took the connection must not block in accept. */
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    W.ep = epoll_create1(EPOLL_CLOEXEC);
    W.woken_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE);
    W.deadline_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (W.ep < 0 || W.woken_fd < 0 || W.deadline_fd < 0)
        return -1;
    arm_fd(EPOLL_CTL_ADD, W.woken_fd, EPOLLIN, WOKEN_TAG);
    arm_fd(EPOLL_CTL_ADD, W.deadline_fd, EPOLLIN, DEADLINE_TAG);
    arm_fd(EPOLL_CTL_ADD, W.listen_fd, EPOLLIN, LISTEN_TAG);
    W.listening = 1;
    return 0;
}

/* Closes the idle connections at shutdown: nothing will come on them that
 * a stopping worker wants to serve. */
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

int worker_run(const dq_config *cfg, int listen_fd, const worker_shared *shared)
{
    W.cfg = cfg;
    if (cfg->auth_file[0]) {
        char err[512];
        W.auth = auth_load(cfg->auth_file, err, sizeof err);
        if (!W.auth) {
            log_error("%s", err);
            return 2;
        }
    }
    char allow_err[512];
    W.push_allow = guard_allow_parse(cfg->push_allow, allow_err, sizeof allow_err);
    if (!W.push_allow) {
        log_error("%s", allow_err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Large buffers (a big answer, a big reply) are mapped and unmapped as
     * they come and go; without a fixed threshold glibc raises it after the
     * first free and keeps such memory in its heaps for good. */
    mallopt(M_MMAP_THRESHOLD, BUF_KEEP * 2);
    W.maxslots = connection_limit(cfg);
    W.slots = calloc(W.maxslots, sizeof *W.slots);
    W.free_slots = calloc(W.maxslots, sizeof *W.free_slots);
    if (!W.slots || !W.free_slots || setup_events(listen_fd) < 0) {
        log_error("cannot set up the worker's events: %s", strerror(errno));
        return 1;
    }
    notify_init(deadline_moved, cfg->longpoll_recheck_ms, shared->claims);
    W.hints = shared->hints;
    if (!(W.group = group_new(cfg->group_commit))) {
        log_error("out of memory");
        return 1;
    }
    if (cfg->redis_sentinels[0] && sentinel_watch_start(cfg) < 0) {
        log_error("cannot start the sentinel watcher");
        return 1;
    }
    if (ready_sub_start(cfg, W.hints) < 0 || start_threads(cfg) < 0) {
        log_error("cannot start the worker's threads");
        return 1;
    }

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
    pthread_mutex_lock(&W.lock);
    epoll_ctl(W.ep, EPOLL_CTL_DEL, W.listen_fd, NULL);
    W.listening = 0;
    pthread_mutex_unlock(&W.lock);
    int64_t give_up = util_mono_ms() + (int64_t)cfg->redis_timeout_ms + 5000;
    for (;;) {
        close_idle();
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

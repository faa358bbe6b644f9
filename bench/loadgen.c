/* loadgen: closed-loop load generator for delayq (HTTP/1.1 through nginx)
 * and beanstalkd (text protocol), used by bench/run.py.
 *
 * N connections to 127.0.0.1, each with exactly one request in flight,
 * driven by one epoll loop. Prints one result line of key=value pairs on
 * stdout; with --lateness-out, one lateness value (ms) per received job,
 * with --jobs-out, "index due_ms received_ms" (realtime) per received job.
 *
 * Modes (--mode):
 *   add        POST /add, one job per request or --batch jobs per request
 *   drain      POST /pop (--count, no timeout) then POST /finish ({"id"} or
 *              {"ids":[...]}) until --jobs received or pops come back empty;
 *              with --finish-and-pop the ids ride on the next pop ("finish")
 *              and there are no finish requests but a last one
 *   late       producers (--producers conns) add --jobs jobs paced evenly over
 *              --spread seconds, each with delay --delay-min; the other
 *              connections long-poll pop (timeout 1) + finish and record
 *              received - due, due = add sent + delay (ms); with --late-at
 *              each job is added with that due time as its own "at", so
 *              that delayq's due time is the one lateness counts from
 *              (with "delay", delayq counts from when its add ran)
 *   fixed      --method/--path/--body, --jobs requests (ceiling runs)
 *   bs-put     beanstalkd put with delay (the "add" of beanstalkd)
 *   bs-drain   beanstalkd reserve-with-timeout 0 + delete
 *   bs-late    like late: put with delay, reserve-with-timeout 1 + delete
 *
 * Every loop is bounded: by --jobs and by --max-seconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum mode { M_ADD, M_DRAIN, M_LATE, M_FIXED, M_BS_PUT, M_BS_DRAIN, M_BS_LATE };

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

static struct {
    enum mode mode;
    int port;
    int conns;
    long jobs;
    int batch;
    int count;
    int batch_finish;
    int finish_and_pop; /* drain/late: the next pop finishes the last jobs */
    double delay_min, delay_max;
    int ttr;
    int body_size;
    const char *topic;
    const char *tag;
    int producers;
    double spread;
    double grace;
    double max_seconds;
    const char *method, *path, *fixed_body;
    const char *lateness_out;
    const char *jobs_out; /* late: "index due_ms received_ms" per received job */
    double at; /* > 0: every added job gets "at" (Unix seconds) instead of a delay */
    int late_at; /* late: each job gets its own "at", its due time */
} opt = {
    .port = 8080, .conns = 32, .jobs = 100000, .batch = 1, .count = 0, .batch_finish = 0,
    .delay_min = 600, .delay_max = 3600, .ttr = 60, .body_size = 200, .topic = "bench",
    .tag = "r", .producers = 4, .spread = 10, .grace = 5, .max_seconds = 600,
    .method = "GET", .path = "/", .fixed_body = "",
};

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* ------------------------------------------------------------------------ */
/* Growable byte buffer                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p)
        die("out of memory");
    b->cap = cap;
}

static void sb_add(sbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        sb_reserve(b, 64);
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            die("vsnprintf");
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        sb_reserve(b, (size_t)n + 1);
    }
}

static void sb_consume(sbuf *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    if (b->p)
        b->p[b->len] = 0;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */
/* ------------------------------------------------------------------------ */

enum role { R_MAIN, R_PRODUCER, R_CONSUMER };
enum step { S_IDLE, S_SETUP, S_REQ, S_FINISH, S_DONE };

typedef struct {
    int fd;
    int idx;
    enum role role;
    enum step step;
    int setup_left; /* beanstalkd: use/watch/ignore replies still expected */
    sbuf w;
    size_t woff;
    sbuf r;
    double sent_at;      /* monotonic, for request latency */
    double sent_real_ms; /* realtime, for lateness (producers) */
    int reconnect;       /* server said Connection: close */
    int jobs_in_req;     /* add: jobs in the request in flight */
    double due_in_req[1000];
    sbuf finish_ids; /* drain/late: ids to finish next */
    int nfinish;
} conn;

static conn *conns;
static int epfd;

/* Results. */
static long jobs_done;       /* added / received */
static long jobs_issued;     /* add: jobs put in requests so far */
static long requests;
static long errors;
static long empty_pops;
static double *lat_req;      /* request latencies (s), bounded */
static long nlat_req, cap_lat_req;
static double *lateness;     /* late: ms per received job, by job index */
static double *received_ms;  /* late: when it arrived (realtime ms), by job index */
static unsigned char *seen;
static long dup_received;
static double late_start_mono, late_t0_real;
static long late_next; /* next job index a producer sends */
static int consumers_stop;

static void record_latency(double s)
{
    if (nlat_req < cap_lat_req)
        lat_req[nlat_req++] = s;
}

static int connect_one(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)opt.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* 127.0.0.1 only */
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
        die("connect 127.0.0.1:%d: %s", opt.port, strerror(errno));
    return fd;
}

static void arm(conn *c, int want_write)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_write ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

static void open_conn(conn *c)
{
    c->fd = connect_one();
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
        die("epoll_ctl add: %s", strerror(errno));
    c->r.len = 0;
    c->reconnect = 0;
}

static void close_conn(conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
}

/* Queues what is in c->w for sending; marks the request start. */
static void send_now(conn *c)
{
    c->woff = 0;
    c->sent_at = now_mono();
    if (c->fd < 0)
        open_conn(c);
    arm(c, 1);
}

/* ------------------------------------------------------------------------ */
/* Request builders                                                          */
/* ------------------------------------------------------------------------ */

static char *body_text; /* a JSON string of body_size bytes: "xxx...x" */

static double rand_delay(void)
{
    if (opt.delay_max <= opt.delay_min)
        return opt.delay_min;
    return opt.delay_min + (opt.delay_max - opt.delay_min) * ((double)random() / (double)RAND_MAX);
}

static void http_post(sbuf *w, const char *path, const char *body, size_t n)
{
    sb_printf(w, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n", path, n);
    sb_add(w, body, n);
}

static sbuf tmp;

/* A job of the add request: at > 0 gives it that "at" (Unix seconds),
 * else it gets delay. */
static void add_job_json(sbuf *b, long i, double delay, double at, const char *body)
{
    if (at > 0) {
        sb_printf(b, "{\"topic\":\"%s\",\"id\":\"%s-%ld\",\"at\":%.3f,\"ttr\":%d,\"body\":%s}",
                  opt.topic, opt.tag, i, at, opt.ttr, body);
        return;
    }
    sb_printf(b, "{\"topic\":\"%s\",\"id\":\"%s-%ld\",\"delay\":%.3f,\"ttr\":%d,\"body\":%s}",
              opt.topic, opt.tag, i, delay, opt.ttr, body);
}

/* The next add request: up to batch jobs. 0 when nothing is left. */
static int build_add(conn *c)
{
    long left = opt.jobs - jobs_issued;
    if (left <= 0)
        return 0;
    int n = opt.batch < left ? opt.batch : (int)left;
    tmp.len = 0;
    if (opt.batch > 1)
        sb_add(&tmp, "{\"jobs\":[", 9);
    for (int k = 0; k < n; k++) {
        if (k)
            sb_add(&tmp, ",", 1);
        add_job_json(&tmp, jobs_issued + k, rand_delay(), opt.at, body_text);
    }
    if (opt.batch > 1)
        sb_add(&tmp, "]}", 2);
    jobs_issued += n;
    c->jobs_in_req = n;
    c->w.len = 0;
    http_post(&c->w, "/add", tmp.p, tmp.len);
    return 1;
}

/* The pending ids as a JSON array, into tmp; they are no longer pending. */
static void take_finish_ids(conn *c)
{
    sb_add(&tmp, "[", 1);
    char *s = c->finish_ids.p;
    for (int k = 0; k < c->nfinish; k++) {
        size_t l = strlen(s);
        if (k)
            sb_add(&tmp, ",", 1);
        sb_add(&tmp, "\"", 1);
        sb_add(&tmp, s, l);
        sb_add(&tmp, "\"", 1);
        s += l + 1;
    }
    sb_add(&tmp, "]", 1);
    c->nfinish = 0;
    c->finish_ids.len = 0;
}

static void build_pop(conn *c, double timeout)
{
    tmp.len = 0;
    sb_printf(&tmp, "{\"topic\":\"%s\"", opt.topic);
    if (opt.finish_and_pop && c->nfinish > 0) {
        sb_add(&tmp, ",\"finish\":", 10);
        take_finish_ids(c);
    }
    if (opt.count > 0)
        sb_printf(&tmp, ",\"count\":%d", opt.count);
    if (timeout > 0)
        sb_printf(&tmp, ",\"timeout\":%g", timeout);
    sb_add(&tmp, "}", 1);
    c->w.len = 0;
    http_post(&c->w, "/pop", tmp.p, tmp.len);
}

/* Builds finish requests for c->finish_ids; returns 1 if one was built. With
 * batch finish, one request for all of them; else one per id (the caller
 * calls again until 0). */
static int build_finish(conn *c)
{
    if (c->nfinish == 0)
        return 0;
    c->w.len = 0;
    tmp.len = 0;
    if (opt.batch_finish && c->nfinish > 1) {
        sb_add(&tmp, "{\"ids\":", 7);
        take_finish_ids(c);
        sb_add(&tmp, "}", 1);
    } else {
        /* the last id of the list */
        char *s = c->finish_ids.p, *last = s;
        for (int k = 0; k < c->nfinish; k++) {
            last = s;
            s += strlen(s) + 1;
        }
        sb_printf(&tmp, "{\"id\":\"%s\"}", last);
        c->finish_ids.len = (size_t)(last - c->finish_ids.p);
        c->nfinish--;
    }
    http_post(&c->w, "/finish", tmp.p, tmp.len);
    return 1;
}

static void bs_put(conn *c, double delay, const char *data, size_t n)
{
    c->w.len = 0;
    sb_printf(&c->w, "put 1024 %d %d %zu\r\n", (int)(delay + 0.5), opt.ttr, n);
    sb_add(&c->w, data, n);
    sb_add(&c->w, "\r\n", 2);
}

/* ------------------------------------------------------------------------ */
/* Lateness                                                                  */
/* ------------------------------------------------------------------------ */

/* Producer body of job i: {"d":<due ms realtime>,"i":<index>} */
static void late_received(long i, double due_ms)
{
    double l = now_real_ms() - due_ms;
    if (i < 0 || i >= opt.jobs)
        return;
    if (seen[i]) {
        dup_received++;
        return;
    }
    seen[i] = 1;
    lateness[i] = l;
    received_ms[i] = l + due_ms;
    jobs_done++;
}

/* Where the jobs a pop answer s[0..n) took end: at its "finished" list (the
 * ids of the jobs finished in the same request, not taken), if any. */
static const char *taken_end(const char *s, size_t n)
{
    const char *finished = memmem(s, n, "\"finished\":", 11);
    return finished ? finished : s + n;
}

/* Parses every {"d":X,"i":Y} in s (pop answers and beanstalkd payloads). */
static int parse_late_bodies(const char *s, size_t n)
{
    int got = 0;
    const char *end = taken_end(s, n);
    const char *p = s;
    while (p < end && (p = memmem(p, (size_t)(end - p), "{\"d\":", 5)) != NULL) {
        char *q;
        double d = strtod(p + 5, &q);
        if (strncmp(q, ",\"i\":", 5) == 0) {
            long i = strtol(q + 5, &q, 10);
            late_received(i, d);
            got++;
        }
        p = q;
    }
    return got;
}

/* Whether the producer may send job late_next now; if not, when (mono). */
static double late_send_time(long i)
{
    return late_start_mono + opt.spread * (double)i / (double)opt.jobs;
}

/* ------------------------------------------------------------------------ */
/* State machine                                                             */
/* ------------------------------------------------------------------------ */

static int waiting_producers;

/* Whether c's pending ids go in a finish request now: always, unless they
 * ride on the next pop; then only once no pop follows. */
static int finish_now(void)
{
    if (!opt.finish_and_pop)
        return 1;
    return jobs_done >= opt.jobs || consumers_stop;
}

/* Starts the next request of c, or marks it done / waiting. */
static void next_request(conn *c)
{
    double t = now_mono();
    if (t - late_start_mono > opt.max_seconds) {
        c->step = S_DONE;
        return;
    }
    switch (opt.mode) {
    case M_ADD:
        if (!build_add(c)) {
            c->step = S_DONE;
            return;
        }
        c->step = S_REQ;
        break;
    case M_DRAIN:
        if (finish_now() && build_finish(c)) {
            c->step = S_FINISH;
        } else if (jobs_done >= opt.jobs) {
            c->step = S_DONE;
            return;
        } else {
            build_pop(c, 0);
            c->step = S_REQ;
        }
        break;
    case M_BS_DRAIN:
    case M_BS_LATE:
        if (c->role == R_CONSUMER || opt.mode == M_BS_DRAIN) {
            if (c->nfinish) {
                c->w.len = 0;
                sb_printf(&c->w, "delete %s\r\n", c->finish_ids.p);
                c->nfinish = 0;
                c->finish_ids.len = 0;
                c->step = S_FINISH;
            } else if (jobs_done >= opt.jobs || consumers_stop) {
                c->step = S_DONE;
                return;
            } else {
                c->w.len = 0;
                sb_printf(&c->w, "reserve-with-timeout %d\r\n", opt.mode == M_BS_LATE ? 1 : 0);
                c->step = S_REQ;
            }
            break;
        }
        /* a bs-late producer: */
        __attribute__((fallthrough));
    case M_LATE:
        if (c->role == R_CONSUMER) {
            if (finish_now() && build_finish(c)) {
                c->step = S_FINISH;
            } else if (jobs_done >= opt.jobs || consumers_stop) {
                c->step = S_DONE;
                return;
            } else {
                build_pop(c, 1.0);
                c->step = S_REQ;
            }
            break;
        }
        /* producer */
        if (late_next >= opt.jobs) {
            c->step = S_DONE;
            return;
        }
        if (t < late_send_time(late_next)) {
            c->step = S_IDLE; /* woken by the main loop */
            waiting_producers++;
            return;
        }
        {
            long i = late_next++;
            double delay = opt.delay_min;
            double sent = now_real_ms();
            /* whole ms with --late-at: the due time delayq stores exactly */
            double due_ms = opt.late_at ? (double)(long long)(sent + delay * 1000.0 + 0.5)
                                        : sent + delay * 1000.0;
            char body[96];
            int bn = snprintf(body, sizeof body, "{\"d\":%.3f,\"i\":%ld}", due_ms, i);
            if (opt.mode == M_BS_LATE) {
                bs_put(c, delay, body, (size_t)bn);
            } else {
                tmp.len = 0;
                add_job_json(&tmp, i, delay, opt.late_at ? due_ms / 1000.0 : opt.at, body);
                c->w.len = 0;
                http_post(&c->w, "/add", tmp.p, tmp.len);
            }
            c->jobs_in_req = 1;
            c->step = S_REQ;
        }
        break;
    case M_FIXED:
        if (jobs_issued >= opt.jobs) {
            c->step = S_DONE;
            return;
        }
        jobs_issued++;
        c->w.len = 0;
        if (strcmp(opt.method, "GET") == 0)
            sb_printf(&c->w, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", opt.path);
        else
            http_post(&c->w, opt.path, opt.fixed_body, strlen(opt.fixed_body));
        c->step = S_REQ;
        break;
    case M_BS_PUT: {
        long left = opt.jobs - jobs_issued;
        if (left <= 0) {
            c->step = S_DONE;
            return;
        }
        jobs_issued++;
        /* The same 200 bytes delayq stores (a JSON string). */
        bs_put(c, rand_delay(), body_text, strlen(body_text));
        c->jobs_in_req = 1;
        c->step = S_REQ;
        break;
    }
    }
    send_now(c);
}

/* Collects the ids of a pop answer into c->finish_ids; returns how many. */
static int collect_ids(conn *c, const char *s, size_t n)
{
    int got = 0;
    const char *end = taken_end(s, n);
    const char *p = s;
    while (p < end && (p = memmem(p, (size_t)(end - p), "\"id\":\"", 6)) != NULL) {
        p += 6;
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            break;
        sb_add(&c->finish_ids, p, (size_t)(q - p));
        sb_add(&c->finish_ids, "", 1); /* NUL separator */
        c->nfinish++;
        got++;
        p = q;
    }
    return got;
}

/* A complete HTTP response (status, body) arrived on c. */
static void on_http_response(conn *c, int status, const char *body, size_t n)
{
    requests++;
    record_latency(now_mono() - c->sent_at);
    int failed = status != 200 || memmem(body, n, "\"success\":false", 15) != NULL;
    if (failed) {
        errors++;
        if (errors <= 5)
            fprintf(stderr, "loadgen: HTTP %d: %.*s\n", status, (int)(n > 300 ? 300 : n), body);
    }
    switch (opt.mode) {
    case M_ADD:
        if (!failed)
            jobs_done += c->jobs_in_req;
        break;
    case M_FIXED:
        if (!failed)
            jobs_done++;
        break;
    case M_DRAIN:
    case M_LATE:
        if (c->step == S_REQ && c->role == R_PRODUCER) {
            break;
        }
        if (c->step == S_REQ) {
            int got = collect_ids(c, body, n);
            if (opt.mode == M_DRAIN) {
                jobs_done += got;
                if (got == 0 && !failed) {
                    empty_pops++;
                    if (jobs_done < opt.jobs)
                        c->step = S_DONE; /* nothing ready: drained */
                }
            } else {
                parse_late_bodies(body, n);
            }
        }
        break;
    default:
        break;
    }
}

/* Parses one HTTP response in c->r; returns 1 if complete and consumed. */
static int try_http(conn *c)
{
    char *hend = memmem(c->r.p, c->r.len, "\r\n\r\n", 4);
    if (!hend)
        return 0;
    size_t hlen = (size_t)(hend - c->r.p) + 4;
    int status = 0;
    if (sscanf(c->r.p, "HTTP/1.%*d %d", &status) != 1)
        die("bad HTTP response: %.80s", c->r.p);
    long clen = -1;
    int close_after = 0;
    for (char *line = strstr(c->r.p, "\r\n"); line && line < hend; line = strstr(line + 2, "\r\n")) {
        char *l = line + 2;
        if (strncasecmp(l, "Content-Length:", 15) == 0)
            clen = strtol(l + 15, NULL, 10);
        else if (strncasecmp(l, "Connection: close", 17) == 0)
            close_after = 1;
        else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0)
            die("chunked responses are not supported");
    }
    if (clen < 0)
        die("response without Content-Length");
    if (c->r.len < hlen + (size_t)clen)
        return 0;
    enum step was = c->step;
    on_http_response(c, status, c->r.p + hlen, (size_t)clen);
    sb_consume(&c->r, hlen + (size_t)clen);
    if (close_after)
        c->reconnect = 1;
    if (c->step == S_DONE && was != S_DONE)
        return 1;
    return 1;
}

/* Parses one beanstalkd reply in c->r; returns 1 if complete and consumed. */
static int try_bs(conn *c)
{
    char *eol = memmem(c->r.p, c->r.len, "\r\n", 2);
    if (!eol)
        return 0;
    size_t llen = (size_t)(eol - c->r.p) + 2;
    if (c->step == S_SETUP) {
        if (strncmp(c->r.p, "USING", 5) && strncmp(c->r.p, "WATCHING", 8))
            die("beanstalkd setup: %.*s", (int)llen, c->r.p);
        sb_consume(&c->r, llen);
        if (--c->setup_left == 0)
            c->step = S_IDLE;
        return 1;
    }
    requests++;
    record_latency(now_mono() - c->sent_at);
    if (strncmp(c->r.p, "RESERVED ", 9) == 0) {
        long id;
        size_t bytes;
        if (sscanf(c->r.p + 9, "%ld %zu", &id, &bytes) != 2)
            die("bad RESERVED line");
        if (c->r.len < llen + bytes + 2)
            return 0;
        if (opt.mode == M_BS_LATE)
            parse_late_bodies(c->r.p + llen, bytes);
        else
            jobs_done++;
        c->finish_ids.len = 0;
        sb_printf(&c->finish_ids, "%ld", id);
        c->nfinish = 1;
        sb_consume(&c->r, llen + bytes + 2);
        return 1;
    }
    if (strncmp(c->r.p, "INSERTED", 8) == 0) {
        if (opt.mode == M_BS_PUT)
            jobs_done++;
    } else if (strncmp(c->r.p, "DELETED", 7) == 0) {
    } else if (strncmp(c->r.p, "TIMED_OUT", 9) == 0) {
        empty_pops++;
        if (opt.mode == M_BS_DRAIN && jobs_done < opt.jobs)
            c->step = S_DONE;
    } else {
        errors++;
        if (errors <= 5)
            fprintf(stderr, "loadgen: beanstalkd: %.*s\n", (int)llen, c->r.p);
    }
    sb_consume(&c->r, llen);
    return 1;
}

static int is_bs(void)
{
    return opt.mode == M_BS_PUT || opt.mode == M_BS_DRAIN || opt.mode == M_BS_LATE;
}

static void bs_setup(conn *c)
{
    c->w.len = 0;
    if (c->role == R_PRODUCER || opt.mode == M_BS_PUT) {
        sb_printf(&c->w, "use %s\r\n", opt.topic);
        c->setup_left = 1;
    } else {
        sb_printf(&c->w, "watch %s\r\nignore default\r\n", opt.topic);
        c->setup_left = 2;
    }
    c->step = S_SETUP;
    send_now(c);
}

/* The server closed c: an answer still in flight is lost. */
static void on_closed(conn *c)
{
    if (c->step == S_REQ || c->step == S_FINISH) {
        errors++;
        fprintf(stderr, "loadgen: connection %d closed by the server mid-request\n", c->idx);
    }
    close_conn(c);
    c->r.len = 0;
    if (c->step != S_DONE)
        next_request(c);
}

static void on_readable(conn *c)
{
    int closed = 0;
    for (;;) {
        sb_reserve(&c->r, 65536);
        ssize_t n = read(c->fd, c->r.p + c->r.len, c->r.cap - c->r.len - 1);
        if (n > 0) {
            c->r.len += (size_t)n;
            c->r.p[c->r.len] = 0;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        /* EOF or an error: the answer and the close can arrive together
         * (nginx's last answer on a connection, keepalive_requests), so
         * what was read is parsed first. */
        closed = n == 0 || errno != EAGAIN;
        break;
    }
    for (;;) {
        int done = is_bs() ? try_bs(c) : try_http(c);
        if (!done)
            break;
        if (c->step == S_SETUP)
            continue;
        if (c->reconnect || closed) {
            close_conn(c);
            c->reconnect = 0;
            closed = 0;
        }
        if (c->step != S_DONE)
            next_request(c);
        return;
    }
    if (closed)
        on_closed(c);
}

static void on_writable(conn *c)
{
    while (c->woff < c->w.len) {
        ssize_t n = write(c->fd, c->w.p + c->woff, c->w.len - c->woff);
        if (n < 0) {
            if (errno == EAGAIN)
                return;
            if (errno == EINTR)
                continue;
            die("write: %s", strerror(errno));
        }
        c->woff += (size_t)n;
    }
    arm(c, 0);
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, long n, double p)
{
    if (n == 0)
        return 0;
    long i = (long)(p / 100.0 * (double)(n - 1) + 0.5);
    return v[i];
}

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen --mode add|drain|late|fixed|bs-put|bs-drain|bs-late --port P\n"
            "  [--conns N] [--jobs N] [--batch B] [--count C] [--batch-finish] [--finish-and-pop]\n"
            "  [--delay-min S] [--delay-max S] [--ttr S] [--body-size B] [--topic T] [--tag T]\n"
            "  [--producers N] [--spread S] [--grace S] [--max-seconds S]\n"
            "  [--method GET|POST] [--path P] [--body JSON] [--lateness-out FILE] [--at UNIX_S]\n"
            "  [--late-at] [--jobs-out FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct option lo[] = {
        {"mode", 1, 0, 'm'},       {"port", 1, 0, 'p'},         {"conns", 1, 0, 'c'},
        {"jobs", 1, 0, 'n'},       {"batch", 1, 0, 'b'},        {"count", 1, 0, 'C'},
        {"batch-finish", 0, 0, 'F'}, {"delay-min", 1, 0, 'd'},  {"delay-max", 1, 0, 'D'},
        {"ttr", 1, 0, 't'},        {"body-size", 1, 0, 's'},    {"topic", 1, 0, 'T'},
        {"tag", 1, 0, 'g'},        {"producers", 1, 0, 'P'},    {"spread", 1, 0, 'S'},
        {"grace", 1, 0, 'G'},      {"max-seconds", 1, 0, 'X'},  {"method", 1, 0, 'M'},
        {"path", 1, 0, 'u'},       {"body", 1, 0, 'B'},         {"lateness-out", 1, 0, 'L'},
        {"at", 1, 0, 'A'},         {"finish-and-pop", 0, 0, 'J'}, {"late-at", 0, 0, 'W'},
        {"jobs-out", 1, 0, 'O'},
        {0, 0, 0, 0}};
    const char *mode = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'm': mode = optarg; break;
        case 'p': opt.port = atoi(optarg); break;
        case 'c': opt.conns = atoi(optarg); break;
        case 'n': opt.jobs = atol(optarg); break;
        case 'b': opt.batch = atoi(optarg); break;
        case 'C': opt.count = atoi(optarg); break;
        case 'F': opt.batch_finish = 1; break;
        case 'J': opt.finish_and_pop = 1; break;
        case 'd': opt.delay_min = atof(optarg); break;
        case 'D': opt.delay_max = atof(optarg); break;
        case 't': opt.ttr = atoi(optarg); break;
        case 's': opt.body_size = atoi(optarg); break;
        case 'T': opt.topic = optarg; break;
        case 'g': opt.tag = optarg; break;
        case 'P': opt.producers = atoi(optarg); break;
        case 'S': opt.spread = atof(optarg); break;
        case 'G': opt.grace = atof(optarg); break;
        case 'X': opt.max_seconds = atof(optarg); break;
        case 'M': opt.method = optarg; break;
        case 'u': opt.path = optarg; break;
        case 'B': opt.fixed_body = optarg; break;
        case 'L': opt.lateness_out = optarg; break;
        case 'A': opt.at = atof(optarg); break;
        case 'W': opt.late_at = 1; break;
        case 'O': opt.jobs_out = optarg; break;
        default: usage();
        }
    }
    if (!mode)
        usage();
    static const char *names[] = {"add", "drain", "late", "fixed", "bs-put", "bs-drain", "bs-late"};
    int found = 0;
    for (int i = 0; i < 7; i++) {
        if (strcmp(mode, names[i]) == 0) {
            opt.mode = (enum mode)i;
            found = 1;
        }
    }
    if (!found)
        usage();
    if (opt.conns < 1 || opt.conns > 4096 || opt.jobs < 1 || opt.batch < 1 || opt.batch > 1000 ||
        opt.body_size < 2 || opt.port < 1 || opt.port > 65535 || opt.max_seconds <= 0)
        die("bad option value");
    int late = opt.mode == M_LATE || opt.mode == M_BS_LATE;
    if (late && opt.producers >= opt.conns)
        die("--producers must be below --conns");
    if (opt.late_at && opt.mode != M_LATE)
        die("--late-at is for --mode late (beanstalkd's delays are whole seconds)");
    srandom(12345);

    body_text = malloc((size_t)opt.body_size + 1);
    body_text[0] = '"';
    memset(body_text + 1, 'x', (size_t)opt.body_size - 2);
    body_text[opt.body_size - 1] = '"';
    body_text[opt.body_size] = 0;
    cap_lat_req = 2000000;
    lat_req = malloc(sizeof(double) * (size_t)cap_lat_req);
    if (late) {
        lateness = calloc((size_t)opt.jobs, sizeof *lateness);
        received_ms = calloc((size_t)opt.jobs, sizeof *received_ms);
        seen = calloc((size_t)opt.jobs, 1);
        if (!lateness || !received_ms || !seen)
            die("out of memory");
    }

    epfd = epoll_create1(0);
    conns = calloc((size_t)opt.conns, sizeof *conns);
    late_start_mono = now_mono();
    late_t0_real = now_real_ms();
    for (int i = 0; i < opt.conns; i++) {
        conn *c = &conns[i];
        c->idx = i;
        c->fd = -1;
        c->role = late ? (i < opt.producers ? R_PRODUCER : R_CONSUMER) : R_MAIN;
        if (is_bs())
            bs_setup(c);
    }
    /* Late: consumers start first and have their long polls waiting. */
    double start = now_mono();
    late_start_mono = start + (late ? 0.5 : 0);
    if (!is_bs()) {
        for (int i = 0; i < opt.conns; i++)
            next_request(&conns[i]);
    }
    double producers_done_at = 0;
    struct epoll_event evs[256];
    for (;;) {
        double t = now_mono();
        if (t - start > opt.max_seconds + 5) {
            fprintf(stderr, "loadgen: --max-seconds reached\n");
            break;
        }
        int active = 0;
        waiting_producers = 0;
        for (int i = 0; i < opt.conns; i++) {
            conn *c = &conns[i];
            if (c->step == S_IDLE) {
                next_request(c); /* beanstalkd after setup, waiting producers */
            }
            if (c->step != S_DONE)
                active++;
        }
        if (late) {
            if (late_next >= opt.jobs && producers_done_at == 0)
                producers_done_at = t;
            /* Consumers stop once every job was received, or grace seconds
             * after the last one was due. */
            if (producers_done_at > 0 && t > producers_done_at + opt.delay_min + opt.grace)
                consumers_stop = 1;
        }
        if (!active)
            break;
        int timeout = waiting_producers ? 1 : 100;
        int n = epoll_wait(epfd, evs, 256, timeout);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (c->fd < 0)
                continue;
            if (evs[i].events & EPOLLOUT)
                on_writable(c);
            if (c->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                on_readable(c);
        }
    }
    double secs = now_mono() - start - (late ? 0.5 : 0);
    qsort(lat_req, (size_t)nlat_req, sizeof(double), cmp_double);
    printf("mode=%s jobs=%ld requests=%ld errors=%ld empty=%ld secs=%.3f jobs_per_s=%.1f "
           "req_per_s=%.1f req_p50_ms=%.3f req_p99_ms=%.3f",
           mode, jobs_done, requests, errors, empty_pops, secs, (double)jobs_done / secs,
           (double)requests / secs, pct(lat_req, nlat_req, 50) * 1000, pct(lat_req, nlat_req, 99) * 1000);
    if (late) {
        double *v = malloc(sizeof(double) * (size_t)opt.jobs);
        long k = 0;
        for (long i = 0; i < opt.jobs; i++) {
            if (seen[i])
                v[k++] = lateness[i];
        }
        qsort(v, (size_t)k, sizeof(double), cmp_double);
        printf(" received=%ld missed=%ld dup=%ld late_p50_ms=%.3f late_p99_ms=%.3f late_max_ms=%.3f "
               "late_min_ms=%.3f", k, opt.jobs - k, dup_received, pct(v, k, 50), pct(v, k, 99),
               k ? v[k - 1] : 0.0, k ? v[0] : 0.0);
        if (opt.lateness_out) {
            FILE *f = fopen(opt.lateness_out, "w");
            if (!f)
                die("cannot write %s", opt.lateness_out);
            for (long i = 0; i < k; i++)
                fprintf(f, "%.3f\n", v[i]);
            fclose(f);
        }
        if (opt.jobs_out) {
            FILE *f = fopen(opt.jobs_out, "w");
            if (!f)
                die("cannot write %s", opt.jobs_out);
            for (long i = 0; i < opt.jobs; i++) {
                if (seen[i])
                    fprintf(f, "%ld %.3f %.3f\n", i, received_ms[i] - lateness[i], received_ms[i]);
            }
            fclose(f);
        }
        free(v);
    }
    printf("\n");
    return 0;
}

/* push: delivering callback jobs (see push.h). */
#include "push/push.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "common/json_scan.h"
#include "common/log.h"
#include "common/push_guard.h"
#include "common/util.h"
#include "push/webhook.h"
#include "store/store.h"
#include "store/store_ops.h"
#include "store/store_sentinel.h"

/* Ready push jobs announce themselves on P:pushwake, and every shard is
 * looked at after each (re)subscription, so an idle pusher sleeps; this
 * rare look at every shard only bounds the damage of a message Redis
 * dropped without dropping the subscription. */
#define RESCAN_MS 1000
#define RETRY_MS 200       /* after Redis did not answer; doubles per shard... */
#define RETRY_MAX_MS 2000  /* ...up to this while the shard keeps failing */
#define STOP_WAIT_MS 30000 /* after SIGTERM, for the requests in flight */
#define MAX_FDS 66         /* stop, and the subscriber's nodes */

/* One request in flight. Owns copies of what it sends. */
typedef struct {
    CURL *easy;
    struct curl_slist *headers;
    const dq_allow *allow;
    char *id, *body;
    int64_t attempt;
    size_t received, limit; /* response body bytes, and the most read */
    /* the response body's first bytes, for the job's delivery log; then
     * the same as text (response_text: valid UTF-8, no NUL) */
    char response[DQ_DELIVERY_RESPONSE_MAX];
    size_t response_len;
    char response_text[DQ_DELIVERY_RESPONSE_MAX + 1];
    int truncated;          /* stopped reading at the limit */
    int64_t retry_after_s;  /* -1: none */
    char refused[96];       /* the address push_allow refused, if one was */
    int sends;              /* times libcurl was about to send the request */
    char errbuf[CURL_ERROR_SIZE];
    /* Kept from the take until the request starts (launch): */
    char *url, *topic, *key, *traceparent, *tracestate; /* NULL: none */
    size_t body_len;
    int64_t timeout_ms;
    int64_t away_at_launch; /* the pusher's away_ms when it started */
    char *host;       /* "host:port" of url, for push_per_host */
    int64_t start_by; /* monotonic ms: later, it could not end within its reservation */
    store_job taken;  /* id, shard and attempt, for store_give_back */
} delivery;

typedef struct {
    const dq_config *cfg;
    dq_store *cmd, *sub;
    dq_allow *allow;
    dq_webhook_keys *keys; /* NULL: requests are not signed */
    CURLM *multi;
    int inflight;
    /* Taken, not yet started: at most push_per_host requests per host are
     * in flight, so that a request's timeout and webhook-timestamp run from
     * when it is sent, not from a wait for a connection inside libcurl. */
    delivery **waiting;
    int nwaiting;
    delivery **active; /* the requests in flight (inflight of them) */
    int nshards;
    unsigned char *more; /* per shard: may hold ready push jobs */
    /* Per shard, for one round of takes: how many to ask for, how the take
     * went and how many it gave; and the shard the next sharing starts at. */
    int *limits;
    dq_status *took;
    int *got;
    /* Per shard: when it may be asked again after a failed take (0: now),
     * and the back-off that follows another failure. A take the replicas
     * cannot confirm is given back, so without this a cut replica would
     * make every round take and give back the same jobs. */
    int64_t *retry_at;
    int *retry_ms;
    /* Per shard: when a token is next due for a topic whose jobs wait for
     * their `rate` (0: none); the shard is asked again then, and its take
     * puts them back. */
    int64_t *token_at;
    int64_t *token_wait; /* one round's answers, ms from now */
    int first_shard;
    int64_t next_rescan;
    /* The time the loop spent in Redis calls, in all: libcurl moved no
     * request on meanwhile, yet their timeouts ran. */
    int64_t away_ms;
    /* Outcomes not yet recorded in Redis (it did not answer). */
    store_push_outcome *done;
    delivery **done_of;
    size_t ndone, done_cap;
} pusher;

void push_webhook_id(const char *id, char *out)
{
    for (; *id; id++) {
        if (*id == '.') {
            memcpy(out, "%2E", 3);
            out += 3;
        } else {
            *out++ = *id;
        }
    }
    *out = '\0';
}

/* The response body is read and dropped, up to a bound: a receiver that
 * streams forever must not hold a slot (its status is in by then). Its
 * first DQ_DELIVERY_RESPONSE_MAX bytes are kept for the delivery log. */
static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    delivery *d = arg;
    size_t room = sizeof d->response - d->response_len;
    size_t take = size * n < room ? size * n : room;
    memcpy(d->response + d->response_len, data, take);
    d->response_len += take;
    d->received += size * n;
    if (d->received > d->limit) {
        d->truncated = 1;
        return 0;
    }
    return size * n;
}

/* Reads Retry-After; no other response header matters. */
static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
    delivery *d = arg;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    size_t nl = sizeof name - 1;
    if (len > nl && len < 256 && strncasecmp(line, name, nl) == 0) {
        char value[256];
        size_t vlen = len - nl;
        memcpy(value, line + nl, vlen);
        while (vlen && (value[vlen - 1] == '\r' || value[vlen - 1] == '\n'))
            vlen--;
        value[vlen] = '\0';
        int64_t secs;
        if (guard_retry_after(value, (int64_t)time(NULL), &secs) == 0)
            d->retry_after_s = secs;
    }
    return len;
}

/* Every connection libcurl opens comes here first: the address it is about
 * to connect to must pass push_allow, whatever name led to it. */
static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    delivery *d = arg;
    if (purpose != CURLSOCKTYPE_IPCXN || !guard_addr_allowed(d->allow, &a->addr)) {
        char ip[INET6_ADDRSTRLEN] = "?";
        if (a->family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&a->addr)->sin_addr, ip, sizeof ip);
        else if (a->family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a->addr)->sin6_addr, ip, sizeof ip);
        snprintf(d->refused, sizeof d->refused, "%s (%s)", ip,
                 guard_addr_class_name(guard_addr_class(&a->addr)));
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

/* Called before the request goes out on a connection. libcurl sends it a
 * second time, on a fresh connection, when a kept-alive one closed before
 * any answer: but the receiver may have read and acted on the first. An
 * attempt is sent once; this one ends as failed (outcome unknown) and the
 * job is retried on its schedule, as the next attempt. */
static int on_send(void *arg, char *remote_ip, char *local_ip, int remote_port, int local_port)
{
    (void)remote_ip, (void)local_ip, (void)remote_port, (void)local_port;
    delivery *d = arg;
    return d->sends++ == 0 ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

static void delivery_free(delivery *d)
{
    if (!d)
        return;
    if (d->easy)
        curl_easy_cleanup(d->easy);
    curl_slist_free_all(d->headers);
    free(d->id);
    free(d->body);
    free(d->url);
    free(d->topic);
    free(d->key);
    free(d->traceparent);
    free(d->tracestate);
    free(d->host);
    free(d);
}

static char *copy(const char *s, size_t n)
{
    char *p = util_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static struct curl_slist *header(struct curl_slist *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static struct curl_slist *header(struct curl_slist *h, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return curl_slist_append(h, line);
}

static char *copy_or_null(const char *s, size_t n)
{
    return s ? copy(s, n) : NULL;
}

/* "host:port" of a URL (libcurl's unit for push_per_host); the URL itself
 * when it does not parse (libcurl then fails the request). */
static char *url_host(const char *url)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *out = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        size_t n = strlen(host) + strlen(port) + 2;
        out = util_xmalloc(n);
        snprintf(out, n, "%s:%s", host, port);
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return out ? out : copy(url, strlen(url));
}

/* A delivery for one reserved job, its request not yet started. */
static delivery *delivery_new(const pusher *p, const store_job *j, int64_t now)
{
    delivery *d = util_xcalloc(1, sizeof *d);
    d->allow = p->allow;
    d->id = copy(j->id, j->id_len);
    d->body = copy(j->body, j->body_len);
    d->body_len = j->body_len;
    d->attempt = j->attempts;
    d->limit = (size_t)p->cfg->push_response_max;
    d->retry_after_s = -1;
    d->url = copy(j->url, j->url_len);
    d->topic = copy(j->topic, j->topic_len);
    d->key = copy_or_null(j->key, j->key_len);
    d->traceparent = copy_or_null(j->traceparent, j->traceparent_len);
    d->tracestate = copy_or_null(j->tracestate, j->tracestate_len);
    d->timeout_ms = j->cb_timeout_ms;
    d->host = url_host(d->url);
    /* reserved until take + timeout + grace: a start after take + grace
     * could still be running when the reservation runs out */
    d->start_by = now + p->cfg->push_grace_ms;
    d->taken.id = d->id;
    d->taken.id_len = j->id_len;
    d->taken.shard = j->shard;
    d->taken.attempts = j->attempts;
    return d;
}

/* Builds the request of a delivery and hands it to libcurl; the headers
 * (webhook-timestamp, the signature) are made now, as it is sent. */
static int launch(pusher *p, delivery *d)
{
    const char *url = d->url, *topic = d->topic;
    char wid[3 * 256 + 1];
    push_webhook_id(d->id, wid);
    int64_t now_s = (int64_t)time(NULL);

    d->headers = header(d->headers, "Content-Type: application/json");
    d->headers = header(d->headers, "Expect:"); /* no 100-continue round trip */
    d->headers = header(d->headers, "webhook-id: %s", wid);
    d->headers = header(d->headers, "webhook-timestamp: %" PRId64, now_s);
    d->headers = header(d->headers, "delayq-topic: %s", topic);
    d->headers = header(d->headers, "delayq-attempt: %" PRId64, d->attempt);
    if (d->key) /* a key is at most DQ_KEY_MAX bytes of name characters */
        d->headers = header(d->headers, "delayq-key: %s", d->key);
    /* The trace context as the job was added with it (W3C Trace Context),
     * so the receiver's span continues the producer's trace; request.c let
     * in printable ASCII only, within DQ_TRACESTATE_MAX. */
    if (d->traceparent)
        d->headers = header(d->headers, "traceparent: %s", d->traceparent);
    if (d->tracestate)
        d->headers = header(d->headers, "tracestate: %s", d->tracestate);
    if (p->keys) {
        size_t n = webhook_signature_size(p->keys);
        char *sig = util_xmalloc(n);
        if (webhook_sign(p->keys, wid, now_s, d->body, d->body_len, sig, n) == 0)
            d->headers = header(d->headers, "webhook-signature: %s", sig);
        else
            log_warn("job %s: could not sign its callback", d->id);
        free(sig);
    }

    d->away_at_launch = p->away_ms;
    CURL *e = d->easy = curl_easy_init();
    if (!e)
        abort();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* a proxy would hide the address we connect to */
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, d->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)d->body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, d->headers);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "delayq-push/" PACKAGE_VERSION);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)d->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)d->timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, d);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, d);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_send);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, d);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, d->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, d);
    if (curl_multi_add_handle(p->multi, e) != CURLM_OK)
        return -1;
    p->active[p->inflight++] = d;
    log_debug("job %s: attempt %" PRId64 " started", d->id, d->attempt);
    return 0;
}

/* Requests in flight to a host. */
static int host_inflight(const pusher *p, const char *host)
{
    int n = 0;
    for (int i = 0; i < p->inflight; i++)
        n += strcmp(p->active[i]->host, host) == 0;
    return n;
}

/* Makes waiting deliveries ready again at once, their attempts uncounted
 * (store_give_back), and frees them. */
static void give_back(pusher *p, delivery **ds, int n, const char *why)
{
    if (n <= 0)
        return;
    store_jobs back = {0};
    back.jobs = util_xcalloc((size_t)n, sizeof *back.jobs);
    for (int i = 0; i < n; i++)
        back.jobs[back.n++] = ds[i]->taken;
    store_give_back(p->cmd, &back, why);
    free(back.jobs);
    for (int i = 0; i < n; i++)
        delivery_free(ds[i]);
}

/* Starts the waiting deliveries, oldest first, whose host has fewer than
 * push_per_host requests in flight; one that waited past its start_by is
 * given back unsent, its attempt uncounted. */
static void start_waiting(pusher *p)
{
    int64_t now = util_mono_ms();
    delivery *late[p->nwaiting + 1];
    int kept = 0, nlate = 0;
    for (int i = 0; i < p->nwaiting; i++) {
        delivery *d = p->waiting[i];
        if (now > d->start_by) {
            late[nlate++] = d;
        } else if (host_inflight(p, d->host) >= p->cfg->push_per_host) {
            p->waiting[kept++] = d;
        } else if (launch(p, d) < 0) {
            log_error("job %s: libcurl refused the request; it comes back after its deadline", d->id);
            delivery_free(d);
        }
    }
    p->nwaiting = kept;
    give_back(p, late, nlate, "they waited for a connection to their host past push_grace_ms");
}

/* Whether shard k may hold ready push jobs and is not backing off. */
static int shard_wanted(const pusher *p, int k, int64_t now)
{
    return p->more[k] && p->retry_at[k] <= now;
}

/* Notes the outcome of a take from shard k: a failure backs the shard off,
 * doubling from RETRY_MS to RETRY_MAX_MS; a success ends the back-off. */
static void note_take(pusher *p, int k, int ok, int64_t now)
{
    if (ok) {
        p->retry_ms[k] = 0;
        p->retry_at[k] = 0;
        return;
    }
    int next = p->retry_ms[k] ? p->retry_ms[k] * 2 : RETRY_MS;
    p->retry_ms[k] = next < RETRY_MAX_MS ? next : RETRY_MAX_MS;
    p->retry_at[k] = now + p->retry_ms[k];
}

/* Shares `room` among the shards that may hold ready push jobs, starting
 * at a shard that moves on each round, so that with less room than such
 * shards none waits behind the others for long. Returns how many shards
 * get some. */
static int share_room(pusher *p, int room, int64_t now)
{
    int wanted = 0;
    for (int k = 0; k < p->nshards; k++)
        wanted += shard_wanted(p, k, now);
    int each = wanted ? room / wanted : 0, extra = wanted ? room % wanted : 0, asked = 0;
    for (int i = 0; i < p->nshards; i++) {
        int k = (p->first_shard + i) % p->nshards;
        p->limits[k] = 0;
        if (!shard_wanted(p, k, now))
            continue;
        p->limits[k] = each + (extra > 0);
        extra -= extra > 0;
        asked += p->limits[k] > 0;
    }
    p->first_shard = (p->first_shard + 1) % p->nshards;
    return asked;
}

/* Takes what there is room for from every shard that may hold ready push
 * jobs, in one round (store_push_take), and starts the requests. */
static void take_where_ready(pusher *p)
{
    int64_t now = util_mono_ms();
    if (now >= p->next_rescan) {
        memset(p->more, 1, (size_t)p->nshards);
        p->next_rescan = now + RESCAN_MS;
    }
    for (int k = 0; k < p->nshards; k++) {
        if (p->token_at[k] && now >= p->token_at[k]) {
            p->more[k] = 1;
            p->token_at[k] = 0;
        }
    }
    int room = p->cfg->push_concurrency - p->inflight - p->nwaiting;
    if (room <= 0 || !share_room(p, room, now))
        return;
    store_jobs jobs = {0};
    store_push_take(p->cmd, p->limits, p->cfg->push_grace_ms, &jobs, p->took, p->token_wait);
    int *got = p->got;
    memset(got, 0, (size_t)p->nshards * sizeof *got);
    for (size_t i = 0; i < jobs.n; i++) {
        got[jobs.jobs[i].shard]++;
        p->waiting[p->nwaiting++] = delivery_new(p, &jobs.jobs[i], now);
    }
    store_jobs_free(&jobs);
    start_waiting(p);
    for (int k = 0; k < p->nshards; k++) {
        if (p->limits[k] <= 0)
            continue; /* not asked this round: still may hold some */
        int ok = p->took[k] == DQ_OK;
        note_take(p, k, ok, now);
        p->more[k] = !ok || got[k] == p->limits[k]; /* failed, or full: may hold more */
        if (ok)
            p->token_at[k] = p->token_wait[k] > 0 ? now + p->token_wait[k] : 0;
    }
}

/* The kept response bytes as text for the delivery log: each byte that is
 * not part of a valid UTF-8 character (a character cut at the limit
 * included), and NUL, becomes '?'. */
static void response_text(delivery *d)
{
    size_t at = 0, out = 0;
    while (at < d->response_len) {
        size_t c = json_utf8_char(d->response + at, d->response_len - at);
        if (c == 0 || d->response[at] == '\0') {
            d->response_text[out++] = '?';
            at++;
            continue;
        }
        memcpy(d->response_text + out, d->response + at, c);
        out += c;
        at += c;
    }
    d->response_text[out] = '\0';
}

/* What the answer means for the job (docs/PROTOCOL.md, Push delivery). */
static void judge(delivery *d, CURLcode rc, store_push_outcome *o)
{
    long code = 0;
    curl_easy_getinfo(d->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_off_t us = 0;
    curl_easy_getinfo(d->easy, CURLINFO_TOTAL_TIME_T, &us);
    o->ms = (int64_t)(us / 1000);
    response_text(d);
    o->response = d->response_text;
    o->id = d->id;
    o->attempt = d->attempt;
    o->wait_ms = 0;
    o->status = code > 0 ? code : -1;
    o->error = "";
    int answered = code > 0 && (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && d->truncated));
    if (answered && code >= 200 && code < 300) {
        o->outcome = "ok";
    } else if (answered && code == 410) {
        o->outcome = "gone";
    } else if (answered && (code == 429 || code == 503) && d->retry_after_s >= 0) {
        o->outcome = "wait";
        o->wait_ms = d->retry_after_s > INT64_MAX / 1000 ? INT64_MAX : d->retry_after_s * 1000;
    } else {
        o->outcome = "fail";
        if (answered) {
            snprintf(d->errbuf, sizeof d->errbuf, "HTTP %ld", code);
        } else if (d->sends > 1) {
            snprintf(d->errbuf, sizeof d->errbuf, "the connection closed after the request was "
                     "sent, before any answer");
        } else if (d->refused[0]) {
            snprintf(d->errbuf, sizeof d->errbuf, "address %s not allowed by push_allow",
                     d->refused);
        } else if (!d->errbuf[0]) {
            snprintf(d->errbuf, sizeof d->errbuf, "%s", curl_easy_strerror(rc));
        }
        o->error = d->errbuf;
    }
}

/* Whether a request's time ran out, before it was sent, because the
 * pusher was away in Redis calls (a shard slow or cut off): the receiver
 * never saw it, had less than its timeout to connect, and lost a quarter
 * of it or more to those calls. (Every call takes a little of it: a
 * receiver that never answers a connect must still spend its attempts.) */
static int timed_out_while_away(const pusher *p, const delivery *d, CURLcode rc)
{
    if (rc != CURLE_OPERATION_TIMEDOUT || d->sends > 0)
        return 0;
    int64_t away = p->away_ms - d->away_at_launch;
    curl_off_t us = 0;
    curl_easy_getinfo(d->easy, CURLINFO_TOTAL_TIME_T, &us);
    return away * 4 >= d->timeout_ms && (int64_t)(us / 1000) - away < d->timeout_ms;
}

/* Collects finished requests into p->done; one that timed out unsent
 * while the pusher was away is given back, its attempt uncounted. */
static void collect(pusher *p)
{
    CURLMsg *m;
    int left;
    delivery *unsent[p->cfg->push_concurrency + 1];
    int nunsent = 0;
    while ((m = curl_multi_info_read(p->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        delivery *d = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &d);
        curl_multi_remove_handle(p->multi, m->easy_handle);
        for (int i = 0; i < p->inflight; i++) {
            if (p->active[i] == d) {
                p->active[i] = p->active[--p->inflight];
                break;
            }
        }
        if (p->ndone == p->done_cap) {
            p->done_cap = p->done_cap ? p->done_cap * 2 : 64;
            p->done = util_xrealloc(p->done, p->done_cap * sizeof *p->done);
            p->done_of = util_xrealloc(p->done_of, p->done_cap * sizeof *p->done_of);
        }
        if (timed_out_while_away(p, d, m->data.result)) {
            unsent[nunsent++] = d;
            continue;
        }
        judge(d, m->data.result, &p->done[p->ndone]);
        p->done_of[p->ndone++] = d;
    }
    give_back(p, unsent, nunsent, "their time to connect ran out while delayq-push waited on "
              "Redis");
}

/* Records the outcomes in Redis; those Redis did not take are kept for the
 * next round (the job's deadline bounds how long that can matter). */
static void report(pusher *p)
{
    if (!p->ndone)
        return;
    store_push_done(p->cmd, p->done, p->ndone);
    size_t kept = 0;
    for (size_t i = 0; i < p->ndone; i++) {
        store_push_outcome *o = &p->done[i];
        delivery *d = p->done_of[i];
        if (o->result == DQ_UNAVAILABLE) {
            p->done[kept] = *o;
            p->done_of[kept++] = d;
            continue;
        }
        if (o->result == DQ_TIMEOUT)
            log_warn("job %s: outcome %s may or may not be recorded (Redis did not answer); if "
                     "not, the job comes back after its deadline", d->id, o->outcome);
        else if (o->result != DQ_OK)
            log_warn("job %s: outcome %s not recorded (%s); it comes back after its deadline",
                     d->id, o->outcome, status_code(o->result));
        else if (strcmp(o->outcome, "ok") == 0)
            log_debug("job %s: delivered (HTTP %" PRId64 ")", d->id, o->status);
        else if (o->error[0])
            log_info("job %s: attempt %" PRId64 " failed (%s); now %s", d->id, d->attempt,
                     o->error, o->state);
        else
            log_info("job %s: attempt %" PRId64 " answered HTTP %" PRId64 " (%s); now %s", d->id,
                     d->attempt, o->status, o->outcome, o->state);
        delivery_free(d);
    }
    p->ndone = kept;
}

static void read_wakeups(pusher *p)
{
    char payload[64];
    int k;
    while (store_sub_read(p->sub, &k, payload, sizeof payload, NULL) == 0) {
        if (k >= 0 && k < p->nshards)
            p->more[k] = 1;
    }
}

static int pusher_init(pusher *p, const dq_config *cfg)
{
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    char err[512];
    p->allow = guard_allow_parse(cfg->push_allow, err, sizeof err);
    if (!p->allow) {
        log_error("%s", err);
        return -2;
    }
    if (cfg->push_secret[0]) {
        p->keys = webhook_keys_parse(cfg->push_secret, err, sizeof err);
        if (!p->keys) {
            log_error("push_secret: %s", err);
            return -2;
        }
    }
    p->cmd = store_new(cfg);
    p->sub = store_new(cfg);
    p->multi = curl_multi_init();
    p->nshards = cfg->shards;
    p->more = calloc((size_t)p->nshards, 1);
    p->limits = calloc((size_t)p->nshards, sizeof *p->limits);
    p->took = calloc((size_t)p->nshards, sizeof *p->took);
    p->got = calloc((size_t)p->nshards, sizeof *p->got);
    p->retry_at = calloc((size_t)p->nshards, sizeof *p->retry_at);
    p->retry_ms = calloc((size_t)p->nshards, sizeof *p->retry_ms);
    p->token_at = calloc((size_t)p->nshards, sizeof *p->token_at);
    p->token_wait = calloc((size_t)p->nshards, sizeof *p->token_wait);
    p->waiting = calloc((size_t)cfg->push_concurrency, sizeof *p->waiting);
    p->active = calloc((size_t)cfg->push_concurrency, sizeof *p->active);
    if (!p->waiting || !p->active || !p->cmd || !p->sub || !p->multi || !p->more || !p->limits || !p->took || !p->got ||
        !p->retry_at || !p->retry_ms || !p->token_at || !p->token_wait)
        return -1;
    curl_multi_setopt(p->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)cfg->push_per_host);
    curl_multi_setopt(p->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)cfg->push_concurrency);
    return 0;
}

static void pusher_free(pusher *p)
{
    for (size_t i = 0; i < p->ndone; i++)
        delivery_free(p->done_of[i]);
    for (int i = 0; i < p->nwaiting; i++)
        delivery_free(p->waiting[i]);
    for (int i = 0; i < p->inflight; i++) { /* still in flight at the stop's deadline */
        curl_multi_remove_handle(p->multi, p->active[i]->easy);
        delivery_free(p->active[i]);
    }
    free(p->waiting);
    free(p->active);
    free(p->done);
    free(p->done_of);
    if (p->multi)
        curl_multi_cleanup(p->multi);
    store_free(p->cmd);
    store_free(p->sub);
    guard_allow_free(p->allow);
    webhook_keys_free(p->keys);
    free(p->more);
    free(p->limits);
    free(p->took);
    free(p->got);
    free(p->retry_at);
    free(p->retry_ms);
    free(p->token_at);
    free(p->token_wait);
}

int push_run(const dq_config *cfg, int stop_fd)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("libcurl did not initialise");
        return 1;
    }
    pusher p;
    int code = 0;
    int rc = pusher_init(&p, cfg);
    if (rc < 0) {
        code = rc == -2 ? 2 : 1; /* -2: a bad setting */
        goto out;
    }
    if (cfg->redis_sentinels[0] && sentinel_watch_start(cfg) < 0) {
        code = 1;
        goto out;
    }
    log_info("started; %d shards, at most %d requests in flight, %d per host, %s", p.nshards,
             cfg->push_concurrency, cfg->push_per_host, p.keys ? "signed" : "unsigned");
    int stopping = 0;
    int64_t stop_by = 0;
    for (;;) {
        if (!store_sub_open_now(p.sub) && store_sub_open(p.sub, ":pushwake") == DQ_OK)
            memset(p.more, 1, (size_t)p.nshards); /* messages may have been missed */
        int64_t left_curl = util_mono_ms();
        if (!stopping)
            take_where_ready(&p);
        p.away_ms += util_mono_ms() - left_curl;
        int running;
        curl_multi_perform(p.multi, &running);
        left_curl = util_mono_ms();
        collect(&p);
        report(&p);
        if (!stopping)
            start_waiting(&p);
        p.away_ms += util_mono_ms() - left_curl;
        if (stopping && ((p.inflight == 0 && p.ndone == 0) || util_mono_ms() >= stop_by))
            break;

        struct curl_waitfd extra[MAX_FDS];
        struct pollfd fds[MAX_FDS];
        int n = store_sub_fds(p.sub, fds, MAX_FDS - 1);
        extra[0] = (struct curl_waitfd){stop_fd, CURL_WAIT_POLLIN, 0};
        for (int i = 0; i < n; i++)
            extra[1 + i] = (struct curl_waitfd){fds[i].fd, CURL_WAIT_POLLIN, 0};
        int64_t wait = p.next_rescan - util_mono_ms();
        if (p.ndone || !store_sub_open_now(p.sub))
            wait = RETRY_MS;
        int64_t now = util_mono_ms();
        for (int k = 0; k < p.nshards && wait > 0; k++) {
            if (p.more[k] && p.inflight + p.nwaiting < cfg->push_concurrency &&
                p.retry_at[k] - now < wait)
                wait = p.retry_at[k] - now; /* a shard may hold more, and there is room */
            if (p.token_at[k] && p.token_at[k] - now < wait)
                wait = p.token_at[k] - now; /* a rate-held topic's next token */
        }
        if (wait < 0)
            wait = 0;
        if (wait > RESCAN_MS)
            wait = RESCAN_MS;
        if (store_sub_open_now(p.sub) && wait > store_sub_wait_ms(p.sub))
            wait = store_sub_wait_ms(p.sub); /* the subscription's keepalive */
        curl_multi_poll(p.multi, extra, (unsigned)(1 + n), (int)wait, NULL);
        if (extra[0].revents && !stopping) {
            struct signalfd_siginfo si;
            if (read(stop_fd, &si, sizeof si) < 0)
                log_debug("signalfd read failed");
            stopping = 1;
            stop_by = util_mono_ms() + STOP_WAIT_MS;
            give_back(&p, p.waiting, p.nwaiting, "delayq-push is stopping");
            p.nwaiting = 0;
            log_info("stopping; %d requests in flight", p.inflight);
        }
        if (store_sub_open_now(p.sub))
            read_wakeups(&p);
    }
    if (p.inflight || p.ndone)
        log_warn("stopped with %d requests in flight; their jobs come back after their deadline",
                 p.inflight + (int)p.ndone);
    else
        log_info("stopped");
out:
    pusher_free(&p);
    curl_global_cleanup();
    return code;
}

/* store_sentinel: the primary behind Redis Sentinel (see store_sentinel.h). */
#include "store/store_sentinel.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "store/store_conn.h"

/* A primary that cannot be reached is doubted at most this often per
 * process: every thread's failed connect would otherwise ask the sentinels. */
#define DOUBT_MIN_MS 500
/* The watcher pings a sentinel that said nothing for this long, and gives it
 * up when the PING gets no answer in as long again (a sentinel cut off by a
 * partition sends no EOF). */
#define WATCH_PING_MS 2000
/* How long writes go unconfirmed after the sentinels agreed the primary
 * was down, unless +switch-master ends the doubt sooner: longer than a
 * failover takes once it has started. */
#define FAILOVER_DOUBT_MS 15000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char primary_host[256];
static int primary_port; /* 0: not known */
static uint64_t generation = 1;
static int first_sentinel; /* the one that answered last: asked first */
static int event_fd = -1;
/* Failover doubt: failover_mark grows with each failover event; writes
 * are unconfirmed until failover_doubt_until (monotonic ms, 0: none). */
static uint64_t failover_mark = 1;
static int64_t failover_doubt_until;

static conn_spec sentinel_spec(const dq_config *cfg, const dq_addr *a)
{
    conn_spec spec = {a->host,
                      a->port,
                      cfg->redis_connect_timeout_ms,
                      cfg->redis_timeout_ms,
                      cfg->redis_sentinel_username,
                      cfg->redis_sentinel_password,
                      -1};
    return spec;
}

/* Asks the sentinels in turn for the primary. Returns 0 with host/port,
 * or -1 with err. */
static int ask_sentinels(const dq_config *cfg, char *host, size_t hostlen, int *port, char *err,
                         size_t errlen)
{
    dq_addr addrs[CONFIG_MAX_ADDRS];
    int n = config_addr_list("redis_sentinels", cfg->redis_sentinels, addrs, CONFIG_MAX_ADDRS,
                             err, errlen);
    if (n <= 0) {
        if (n == 0)
            snprintf(err, errlen, "config key 'redis_sentinels' names no sentinel");
        return -1;
    }
    pthread_mutex_lock(&lock);
    int start = first_sentinel % n;
    pthread_mutex_unlock(&lock);
    char why[300] = "";
    for (int k = 0; k < n; k++) {
        int i = (start + k) % n;
        conn_spec spec = sentinel_spec(cfg, &addrs[i]);
        int refused;
        redisContext *c = conn_open(&spec, why, sizeof why, &refused);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s",
                                     cfg->redis_sentinel_master);
        int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[0]->type == REDIS_REPLY_STRING &&
                 r->element[1]->type == REDIS_REPLY_STRING;
        if (ok) {
            snprintf(host, hostlen, "%s", r->element[0]->str);
            *port = atoi(r->element[1]->str);
            pthread_mutex_lock(&lock);
            first_sentinel = i;
            pthread_mutex_unlock(&lock);
        } else {
            char at[300];
            snprintf(why, sizeof why, "sentinel %s does not know a primary named '%s'%s%s",
                     conn_where(&spec, at, sizeof at), cfg->redis_sentinel_master,
                     r && r->type == REDIS_REPLY_ERROR ? ": " : "",
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        }
        freeReplyObject(r);
        conn_abandon(c);
        if (ok)
            return 0;
    }
    snprintf(err, errlen, "no sentinel told where the primary '%s' is (last: %s)",
             cfg->redis_sentinel_master, why);
    return -1;
}

/* Records an answer; a new address is a new generation. */
static void record(const char *host, int port)
{
    int changed = 0;
    pthread_mutex_lock(&lock);
    if (port != primary_port || strcmp(host, primary_host) != 0) {
        snprintf(primary_host, sizeof primary_host, "%s", host);
        primary_port = port;
        generation++;
        changed = 1;
    }
    pthread_mutex_unlock(&lock);
    if (changed) {
        log_info("sentinels: the primary is %s:%d", host, port);
        if (event_fd >= 0) {
            uint64_t one = 1;
            if (write(event_fd, &one, sizeof one) < 0)
                log_warn("eventfd: %s", strerror(errno));
        }
    }
}

int sentinel_primary(const dq_config *cfg, char *host, size_t hostlen, int *port, uint64_t *gen,
                     char *err, size_t errlen)
{
    pthread_mutex_lock(&lock);
    int known = primary_port != 0;
    if (known) {
        snprintf(host, hostlen, "%s", primary_host);
        *port = primary_port;
        *gen = generation;
    }
    pthread_mutex_unlock(&lock);
    if (known)
        return 0;
    char h[256];
    int p;
    if (ask_sentinels(cfg, h, sizeof h, &p, err, errlen) < 0)
        return -1;
    record(h, p);
    pthread_mutex_lock(&lock);
    snprintf(host, hostlen, "%s", primary_host);
    *port = primary_port;
    *gen = generation;
    pthread_mutex_unlock(&lock);
    return 0;
}

void sentinel_forget(uint64_t gen)
{
    pthread_mutex_lock(&lock);
    if (gen == generation) {
        primary_port = 0; /* ask again; the next answer is a new generation */
        generation++;
    }
    pthread_mutex_unlock(&lock);
}

void sentinel_doubt(uint64_t gen)
{
    static int64_t last_doubt;
    int64_t now = util_mono_ms();
    pthread_mutex_lock(&lock);
    if (gen == generation && (!last_doubt || now - last_doubt >= DOUBT_MIN_MS)) {
        last_doubt = now;
        primary_port = 0;
        generation++;
    }
    pthread_mutex_unlock(&lock);
}

uint64_t sentinel_generation(void)
{
    pthread_mutex_lock(&lock);
    uint64_t g = generation;
    pthread_mutex_unlock(&lock);
    return g;
}

uint64_t sentinel_failover_mark(void)
{
    pthread_mutex_lock(&lock);
    uint64_t m = failover_mark;
    pthread_mutex_unlock(&lock);
    return m;
}

int sentinel_confirms(uint64_t mark)
{
    int64_t now = util_mono_ms();
    pthread_mutex_lock(&lock);
    int ok = mark == failover_mark && (!failover_doubt_until || now >= failover_doubt_until);
    if (failover_doubt_until && now >= failover_doubt_until)
        failover_doubt_until = 0; /* no failover came of it */
    pthread_mutex_unlock(&lock);
    return ok;
}

int sentinel_event_fd(void)
{
    return event_fd;
}

void sentinel_event_clear(void)
{
    uint64_t v;
    if (event_fd >= 0 && read(event_fd, &v, sizeof v) < 0 && errno != EAGAIN)
        log_warn("eventfd: %s", strerror(errno));
}

/* ------------------------------------------------------------------------ */
/* The watcher                                                               */
/* ------------------------------------------------------------------------ */

static const dq_config *watch_cfg;

/* "+switch-master <name> <old ip> <old port> <new ip> <new port>" */
static void on_switch(const char *payload)
{
    char name[128], oldip[256], newip[256];
    int oldport, newport;
    if (sscanf(payload, "%127s %255s %d %255s %d", name, oldip, &oldport, newip, &newport) != 5)
        return;
    if (strcmp(name, watch_cfg->redis_sentinel_master) != 0)
        return;
    log_info("sentinels: failover of '%s' from %s:%d to %s:%d", name, oldip, oldport, newip,
             newport);
    pthread_mutex_lock(&lock);
    failover_mark++; /* a write confirmed on the old primary may be lost */
    failover_doubt_until = 0;
    pthread_mutex_unlock(&lock);
    record(newip, newport);
}

/* "+odown" or "+try-failover" with "master <name> <ip> <port> ...": the
 * sentinels agreed the primary is down (busy, paused, cut off) and will
 * fail it over. Until the replicas are re-pointed, those still following
 * the old primary confirm what it applies, and the new primary never sees
 * it. Confirmations are not trusted (store.c answers such writes as
 * unknown outcomes) until +switch-master, or FAILOVER_DOUBT_MS if none
 * comes. (+sdown alone is one sentinel's view: a sentinel cut off from a
 * healthy primary would stop every confirmation.) */
static void on_down_event(const char *payload)
{
    char kind[16], name[128], ip[256];
    int port;
    if (sscanf(payload, "%15s %127s %255s %d", kind, name, ip, &port) != 4 ||
        strcmp(kind, "master") != 0 || strcmp(name, watch_cfg->redis_sentinel_master) != 0)
        return;
    pthread_mutex_lock(&lock);
    /* A sentinel late to agree on a primary already replaced says nothing
     * about the new one. */
    if (primary_port != 0 && (port != primary_port || strcmp(ip, primary_host) != 0)) {
        pthread_mutex_unlock(&lock);
        return;
    }
    int was = failover_doubt_until != 0;
    failover_mark++;
    failover_doubt_until = util_mono_ms() + FAILOVER_DOUBT_MS;
    pthread_mutex_unlock(&lock);
    if (!was)
        log_warn("sentinels: the primary is down in their view (%s): writes confirmed by "
                 "replicas count as unknown outcomes until the failover ends", payload);
}

/* Subscribed to one sentinel until its connection drops. */
static void watch_one(redisContext *c)
{
    redisReply *r = redisCommand(c, "SUBSCRIBE +switch-master +odown +try-failover");
    if (!r)
        return;
    freeReplyObject(r);
    for (int more = 2; more > 0; more--) { /* a confirmation per channel */
        void *v = NULL;
        if (redisGetReply(c, &v) != REDIS_OK)
            return;
        freeReplyObject(v);
    }
    /* A failover that happened before we subscribed: ask once more now. */
    char host[256], err[300];
    int port;
    if (ask_sentinels(watch_cfg, host, sizeof host, &port, err, sizeof err) == 0)
        record(host, port);
    int pinged = 0;
    for (;;) {
        void *v = NULL;
        if (redisGetReplyFromReader(c, &v) != REDIS_OK)
            return;
        if (!v) {
            struct pollfd p = {c->fd, POLLIN, 0};
            int ready = poll(&p, 1, WATCH_PING_MS);
            if (ready < 0 && errno == EINTR)
                continue;
            if (ready == 0 && !pinged) {
                int done = 0;
                redisAppendCommand(c, "PING");
                while (!done) {
                    if (redisBufferWrite(c, &done) != REDIS_OK)
                        return;
                }
                pinged = 1;
                continue;
            }
            if (ready <= 0 || redisBufferRead(c) != REDIS_OK)
                return; /* silent past its PING, or gone */
            continue;
        }
        pinged = 0;
        redisReply *m = v;
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
            m->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(m->element[0]->str, "message") == 0 &&
            m->element[1]->type == REDIS_REPLY_STRING &&
            m->element[2]->type == REDIS_REPLY_STRING) {
            if (strcmp(m->element[1]->str, "+switch-master") == 0)
                on_switch(m->element[2]->str);
            else
                on_down_event(m->element[2]->str);
        }
        freeReplyObject(m);
    }
}

/* One watcher per sentinel: a failover is decided by whichever sentinels
 * saw the primary down (+odown, +try-failover), and the others announce
 * nothing until +switch-master, when the window in which a confirmed
 * write can be lost is already over. */
static void *watch_main(void *arg)
{
    dq_addr *addr = arg;
    int backoff_ms = 100;
    for (;;) {
        char err[300];
        conn_spec spec = sentinel_spec(watch_cfg, addr);
        int refused;
        redisContext *c = conn_open(&spec, err, sizeof err, &refused);
        if (c) {
            backoff_ms = 100;
            watch_one(c);
            conn_abandon(c);
            log_warn("sentinel watcher: lost %s; reconnecting", addr->host);
            /* Messages may have been missed: the next ask settles it. */
        } else {
            log_debug("sentinel watcher: %s", err);
            usleep((useconds_t)backoff_ms * 1000);
            backoff_ms = backoff_ms < 2000 ? backoff_ms * 2 : 2000;
        }
    }
    return NULL;
}

int sentinel_watch_start(const dq_config *cfg)
{
    static dq_addr addrs[CONFIG_MAX_ADDRS];
    char err[300];
    watch_cfg = cfg;
    int n = config_addr_list("redis_sentinels", cfg->redis_sentinels, addrs, CONFIG_MAX_ADDRS,
                             err, sizeof err);
    event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n <= 0 || event_fd < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, watch_main, &addrs[i]) != 0)
            return -1;
        pthread_detach(t);
    }
    return 0;
}

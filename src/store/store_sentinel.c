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

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char primary_host[256];
static int primary_port; /* 0: not known */
static uint64_t generation = 1;
static int first_sentinel; /* the one that answered last: asked first */
static int event_fd = -1;

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
        redisFree(c);
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
    record(newip, newport);
}

/* Subscribed to one sentinel until its connection drops. */
static void watch_one(redisContext *c)
{
    redisReply *r = redisCommand(c, "SUBSCRIBE +switch-master");
    if (!r)
        return;
    freeReplyObject(r);
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
            m->element[2]->type == REDIS_REPLY_STRING)
            on_switch(m->element[2]->str);
        freeReplyObject(m);
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    dq_addr addrs[CONFIG_MAX_ADDRS];
    char err[300];
    int n = config_addr_list("redis_sentinels", watch_cfg->redis_sentinels, addrs,
                             CONFIG_MAX_ADDRS, err, sizeof err);
    int backoff_ms = 100;
    for (int i = 0;; i = (i + 1) % (n > 0 ? n : 1)) {
        if (n <= 0)
            return NULL;
        conn_spec spec = sentinel_spec(watch_cfg, &addrs[i]);
        int refused;
        redisContext *c = conn_open(&spec, err, sizeof err, &refused);
        if (c) {
            backoff_ms = 100;
            watch_one(c);
            redisFree(c);
            log_warn("sentinel watcher: lost %s; trying the next sentinel", addrs[i].host);
            /* Messages may have been missed: the next ask settles it. */
        } else if (i == n - 1) {
            log_debug("sentinel watcher: %s", err);
            usleep((useconds_t)backoff_ms * 1000);
            backoff_ms = backoff_ms < 2000 ? backoff_ms * 2 : 2000;
        }
    }
    return NULL;
}

int sentinel_watch_start(const dq_config *cfg)
{
    watch_cfg = cfg;
    event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd < 0)
        return -1;
    pthread_t t;
    if (pthread_create(&t, NULL, watch_main, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}

/* notify: subscriber thread and condition variable for long-polls. */
#include "notify.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "util.h"

#define RING 256
#define ANY_TOPIC 0 /* hash meaning "wake everyone" (after a resubscribe) */
#define MAX_WAIT_MS 1000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static uint64_t generation;
static uint32_t ring[RING]; /* topic hash of generation g at ring[g % RING] */
static int stopping;
static const dq_config *config;

static uint32_t topic_hash(const char *t, size_t n)
{
    uint32_t h = util_crc32(t, n);
    return h == ANY_TOPIC ? 1 : h;
}

static void announce(uint32_t hash)
{
    pthread_mutex_lock(&lock);
    generation++;
    ring[generation % RING] = hash;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void *subscriber_main(void *arg)
{
    (void)arg;
    dq_store *st = store_new(config);
    char channel[128], payload[256];
    snprintf(channel, sizeof channel, "%s:ready", store_prefix(st));
    const char *channels[1] = {channel};
    int backoff_ms = 100;
    while (!notify_stopping()) {
        if (store_fd(st) < 0) {
            if (store_subscribe(st, channels, 1) != DQ_OK) {
                usleep((useconds_t)backoff_ms * 1000);
                backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
                continue;
            }
            backoff_ms = 100;
            announce(ANY_TOPIC); /* messages may have been missed meanwhile */
        }
        /* No timeout: an idle worker should cost no CPU. A dropped
         * connection wakes poll (POLLHUP) and is resubscribed above. */
        struct pollfd p = {store_fd(st), POLLIN, 0};
        if (poll(&p, 1, -1) <= 0)
            continue;
        char got[128];
        int r;
        while ((r = store_read_message(st, got, sizeof got, payload, sizeof payload)) == 0)
            announce(topic_hash(payload, strlen(payload)));
        if (r < 0)
            log_warn("ready-notification subscription lost; resubscribing");
    }
    store_free(st);
    return NULL;
}

int notify_start(const dq_config *cfg)
{
    config = cfg;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_t t;
    if (pthread_create(&t, NULL, subscriber_main, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}

uint64_t notify_generation(void)
{
    pthread_mutex_lock(&lock);
    uint64_t g = generation;
    pthread_mutex_unlock(&lock);
    return g;
}

/* Called with the lock held: has a generation after `since` named a topic? */
static int woken(const uint32_t *hashes, size_t n, uint64_t since)
{
    if (generation - since >= RING)
        return 1; /* the ring forgot some: assume a match */
    for (uint64_t g = since + 1; g <= generation; g++) {
        uint32_t h = ring[g % RING];
        if (h == ANY_TOPIC)
            return 1;
        for (size_t i = 0; i < n; i++) {
            if (hashes[i] == h)
                return 1;
        }
    }
    return 0;
}

void notify_wait(const char *const *topics, size_t ntopics, uint64_t *gen, int64_t deadline_ms)
{
    uint32_t hashes[64];
    size_t n = ntopics < 64 ? ntopics : 64;
    for (size_t i = 0; i < n; i++)
        hashes[i] = topic_hash(topics[i], strlen(topics[i]));
    int64_t now = util_mono_ms();
    int64_t until = deadline_ms < now + MAX_WAIT_MS ? deadline_ms : now + MAX_WAIT_MS;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t wait_ms = until - now;
    if (wait_ms < 0)
        wait_ms = 0;
    ts.tv_sec += wait_ms / 1000;
    ts.tv_nsec += (wait_ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&lock);
    while (!stopping && !woken(hashes, n, *gen)) {
        if (pthread_cond_timedwait(&cond, &lock, &ts) != 0)
            break;
    }
    *gen = generation;
    pthread_mutex_unlock(&lock);
}

void notify_shutdown(void)
{
    pthread_mutex_lock(&lock);
    stopping = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

int notify_stopping(void)
{
    pthread_mutex_lock(&lock);
    int s = stopping;
    pthread_mutex_unlock(&lock);
    return s;
}

/* notify: subscriber thread and per-waiter wake-ups for long-polls. */
#include "notify.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "util.h"

#define RING 256
#define ANY_TOPIC 0 /* hash meaning "wake everyone" (after a resubscribe) */
#define WOKEN_BY_ALL 1 /* woken_by of a waiter woken with everyone: nothing to pass on */
#define ALL_WAITERS ((unsigned long)-1)
#define MAX_WAIT_MS 1000
#define MAX_TOPICS 64

/* A long-poll waiting in notify_wait. Waiters form a FIFO, so the one that
 * has waited longest is woken first. */
typedef struct waiter {
    uint32_t hashes[MAX_TOPICS];
    size_t n;
    uint32_t woken_by; /* topic hash that woke it; 0 while waiting */
    pthread_cond_t cond;
    struct waiter *prev, *next;
} waiter;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_condattr_t monotonic;
static waiter *first, *last;
static uint64_t generation;
static uint32_t ring[RING]; /* topic hash of generation g at ring[g % RING] */
static int stopping;
static const dq_config *config;

static uint32_t topic_hash(const char *t, size_t n)
{
    uint32_t h = util_crc32(t, n);
    return h == ANY_TOPIC || h == WOKEN_BY_ALL ? 2 : h;
}

static int wants(const waiter *w, uint32_t hash)
{
    for (size_t i = 0; i < w->n; i++) {
        if (w->hashes[i] == hash)
            return 1;
    }
    return 0;
}

/* Called with the lock held: wakes up to `count` waiters of the topic (any
 * topic for ANY_TOPIC), the longest-waiting first. */
static void wake_waiters(uint32_t hash, unsigned long count)
{
    for (waiter *w = first; w && count > 0; w = w->next) {
        if (w->woken_by || (hash != ANY_TOPIC && !wants(w, hash)))
            continue;
        w->woken_by = hash == ANY_TOPIC ? WOKEN_BY_ALL : hash;
        pthread_cond_signal(&w->cond);
        count--;
    }
}

static void announce(uint32_t hash, unsigned long count)
{
    pthread_mutex_lock(&lock);
    generation++;
    ring[generation % RING] = hash;
    wake_waiters(hash, count);
    pthread_mutex_unlock(&lock);
}

/* Payload "<count>:<topic>": the scripts made `count` jobs of the topic
 * ready in one call, so `count` waiters of this process are woken; as every
 * worker process does the same, each job gets one pop per process rather
 * than one per waiting request. A payload without a count wakes them all. */
static void announce_payload(const char *payload)
{
    char *end;
    unsigned long count = strtoul(payload, &end, 10);
    if (end == payload || *end != ':' || count == 0) {
        announce(topic_hash(payload, strlen(payload)), ALL_WAITERS);
        return;
    }
    announce(topic_hash(end + 1, strlen(end + 1)), count);
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
            announce(ANY_TOPIC, ALL_WAITERS); /* messages may have been missed meanwhile */
        }
        /* No timeout: an idle worker should cost no CPU. A dropped
         * connection wakes poll (POLLHUP) and is resubscribed above. */
        struct pollfd p = {store_fd(st), POLLIN, 0};
        if (poll(&p, 1, -1) <= 0)
            continue;
        char got[128];
        int r;
        while ((r = store_read_message(st, got, sizeof got, payload, sizeof payload)) == 0)
            announce_payload(payload);
        if (r < 0)
            log_warn("ready-notification subscription lost; resubscribing");
    }
    store_free(st);
    return NULL;
}

int notify_start(const dq_config *cfg)
{
    config = cfg;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
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

/* Called with the lock held: did a message after generation `since` name
 * one of the waiter's topics (it came between the pop and the wait)? */
static uint32_t missed_since(const waiter *w, uint64_t since)
{
    if (generation - since >= RING)
        return WOKEN_BY_ALL; /* the ring forgot some: assume a match */
    for (uint64_t g = since + 1; g <= generation; g++) {
        uint32_t h = ring[g % RING];
        if (h == ANY_TOPIC)
            return WOKEN_BY_ALL;
        if (wants(w, h))
            return h;
    }
    return 0;
}

static void deadline_timespec(int64_t deadline_ms, struct timespec *ts)
{
    int64_t now = util_mono_ms();
    int64_t until = deadline_ms < now + MAX_WAIT_MS ? deadline_ms : now + MAX_WAIT_MS;
    int64_t wait_ms = until > now ? until - now : 0;
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += wait_ms / 1000;
    ts->tv_nsec += (wait_ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

uint32_t notify_wait(const char *const *topics, size_t ntopics, uint64_t *gen, int64_t deadline_ms)
{
    waiter w;
    w.n = ntopics < MAX_TOPICS ? ntopics : MAX_TOPICS;
    for (size_t i = 0; i < w.n; i++)
        w.hashes[i] = topic_hash(topics[i], strlen(topics[i]));
    w.woken_by = 0;
    struct timespec ts;
    deadline_timespec(deadline_ms, &ts);
    pthread_cond_init(&w.cond, &monotonic);
    pthread_mutex_lock(&lock);
    w.woken_by = missed_since(&w, *gen);
    if (!w.woken_by && !stopping) {
        w.prev = last;
        w.next = NULL;
        if (last)
            last->next = &w;
        else
            first = &w;
        last = &w;
        while (!w.woken_by && !stopping) {
            if (pthread_cond_timedwait(&w.cond, &lock, &ts) != 0)
                break;
        }
        if (w.prev)
            w.prev->next = w.next;
        else
            first = w.next;
        if (w.next)
            w.next->prev = w.prev;
        else
            last = w.prev;
    }
    *gen = generation;
    pthread_mutex_unlock(&lock);
    pthread_cond_destroy(&w.cond);
    return w.woken_by;
}

void notify_pass_on(uint32_t woken_by)
{
    if (!woken_by || woken_by == WOKEN_BY_ALL)
        return; /* not woken, or woken with everyone */
    pthread_mutex_lock(&lock);
    wake_waiters(woken_by, 1);
    pthread_mutex_unlock(&lock);
}

void notify_shutdown(void)
{
    pthread_mutex_lock(&lock);
    stopping = 1;
    for (waiter *w = first; w; w = w->next)
        pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&lock);
}

int notify_stopping(void)
{
    pthread_mutex_lock(&lock);
    int s = stopping;
    pthread_mutex_unlock(&lock);
    return s;
}

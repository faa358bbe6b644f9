/* notify: the registry of parked long-polls and their wake-ups. */
#include "fcgi/notify.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "fcgi/wake_claims.h"

#define RING 256
#define ANY_TOPIC 0    /* hash meaning "wake everyone" (after a resubscribe) */
#define WOKEN_BY_ALL 1 /* woken_by of a waiter woken with everyone: nothing to pass on */
#define ALL_WAITERS ((unsigned long)-1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static notify_waiter *first, *last; /* FIFO by order */
static notify_waiter **heap;        /* min-heap by deadline */
static size_t nheap, heapcap;
static uint64_t generation, next_order;
static uint32_t ring[RING]; /* topic hash of generation g at ring[g % RING] */
static int stopping; /* set once, under the lock; read anywhere atomically */
static void (*deadline_hook)(void);
static int64_t max_wait_ms = 1000;
static wake_claims *claims; /* shared with the other worker processes, or NULL */

static uint32_t topic_hash(const char *t, size_t n)
{
    uint32_t h = util_crc32(t, n);
    return h == ANY_TOPIC || h == WOKEN_BY_ALL ? 2 : h;
}

static int wants(const notify_waiter *w, uint32_t hash)
{
    for (size_t i = 0; i < w->n; i++) {
        if (w->hashes[i] == hash)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The deadline heap (called with the lock held)                             */
/* ------------------------------------------------------------------------ */

static void heap_set(size_t i, notify_waiter *w)
{
    heap[i] = w;
    w->heap_at = i;
}

static void heap_up(size_t i)
{
    notify_waiter *w = heap[i];
    while (i > 0 && heap[(i - 1) / 2]->deadline > w->deadline) {
        heap_set(i, heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(i, w);
}

static void heap_down(size_t i)
{
    notify_waiter *w = heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheap)
            break;
        if (c + 1 < nheap && heap[c + 1]->deadline < heap[c]->deadline)
            c++;
        if (heap[c]->deadline >= w->deadline)
            break;
        heap_set(i, heap[c]);
        i = c;
    }
    heap_set(i, w);
}

static void heap_push(notify_waiter *w)
{
    if (nheap == heapcap) {
        size_t cap = heapcap ? heapcap * 2 : 64;
        notify_waiter **h = util_xrealloc(heap, cap * sizeof *h);
        heap = h;
        heapcap = cap;
    }
    heap_set(nheap++, w);
    heap_up(nheap - 1);
}

static void heap_remove(notify_waiter *w)
{
    size_t i = w->heap_at;
    notify_waiter *moved = heap[--nheap];
    if (i == nheap)
        return;
    heap_set(i, moved);
    heap_up(i);
    heap_down(moved->heap_at);
}

/* ------------------------------------------------------------------------ */
/* Parking and waking                                                        */
/* ------------------------------------------------------------------------ */

/* Takes w out of the list and the heap (lock held). */
static void unpark(notify_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        first = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        last = w->prev;
    w->prev = w->next = NULL;
    heap_remove(w);
    w->parked = 0;
}

/* Woken waiters are collected under the lock and their callbacks run after
 * it is released, so a callback may take other locks. */
typedef struct {
    notify_waiter *head;
} wake_list;

static void wake_later(wake_list *l, notify_waiter *w, uint32_t by)
{
    unpark(w);
    w->woken_by = by;
    w->next = l->head;
    l->head = w;
}

static void run_wakes(wake_list *l)
{
    notify_waiter *w = l->head;
    while (w) {
        notify_waiter *next = w->next;
        w->next = NULL;
        w->wake(w);
        w = next;
    }
}

/* Wakes up to `count` waiters of the topic (any topic for ANY_TOPIC), the
 * longest-waiting first (lock held). */
static void wake_waiters(wake_list *l, uint32_t hash, unsigned long count)
{
    notify_waiter *w = first;
    while (w && count > 0) {
        notify_waiter *next = w->next;
        if (hash == ANY_TOPIC || wants(w, hash)) {
            wake_later(l, w, hash == ANY_TOPIC ? WOKEN_BY_ALL : hash);
            count--;
        }
        w = next;
    }
}

/* How many waiters want the topic, counting up to `most` (lock held). */
static unsigned long waiting_for(uint32_t hash, unsigned long most)
{
    unsigned long n = 0;
    for (notify_waiter *w = first; w && n < most; w = w->next)
        n += wants(w, hash);
    return n;
}

/* A message: `count` jobs of the topic became ready. With a claim key,
 * this process wakes only the share it claims from the other processes of
 * the host (it still records the message in the ring, so a waiter whose
 * pop raced with it tries again). */
static void announce(uint32_t hash, unsigned long count, const uint64_t *claim_key)
{
    wake_list l = {NULL};
    pthread_mutex_lock(&lock);
    generation++;
    ring[generation % RING] = hash;
    if (claim_key && claims && hash != ANY_TOPIC)
        count = wake_claims_take(claims, *claim_key, count, waiting_for(hash, count));
    wake_waiters(&l, hash, count);
    pthread_mutex_unlock(&lock);
    run_wakes(&l);
}

/* Did a message after generation `since` name one of the waiter's topics
 * (it came between the pop and the park)? Lock held. */
static uint32_t missed_since(const notify_waiter *w, uint64_t since)
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

/* Inserts w into the FIFO by its order (a re-parked waiter goes back to
 * where it stood, so the longest-waiting request keeps its turn). */
static void insert_in_order(notify_waiter *w)
{
    notify_waiter *after = last;
    while (after && after->order > w->order)
        after = after->prev;
    w->prev = after;
    w->next = after ? after->next : first;
    if (w->next)
        w->next->prev = w;
    else
        last = w;
    if (after)
        after->next = w;
    else
        first = w;
}

void notify_park(notify_waiter *w, const char *const *topics, size_t ntopics, uint64_t gen,
                 int64_t deadline_ms, int first_park)
{
    w->n = ntopics < NOTIFY_MAX_TOPICS ? ntopics : NOTIFY_MAX_TOPICS;
    for (size_t i = 0; i < w->n; i++)
        w->hashes[i] = topic_hash(topics[i], strlen(topics[i]));
    int64_t cap = util_mono_ms() + max_wait_ms;
    w->deadline = deadline_ms < cap ? deadline_ms : cap;
    w->woken_by = 0;
    wake_list l = {NULL};
    int earlier = 0;
    pthread_mutex_lock(&lock);
    if (first_park)
        w->order = next_order++;
    uint32_t missed = stopping ? WOKEN_BY_ALL : missed_since(w, gen);
    w->parked = 1;
    insert_in_order(w);
    heap_push(w);
    if (missed)
        wake_later(&l, w, missed);
    else
        earlier = w->heap_at == 0;
    pthread_mutex_unlock(&lock);
    run_wakes(&l);
    if (earlier && deadline_hook)
        deadline_hook();
}

int notify_cancel(notify_waiter *w)
{
    pthread_mutex_lock(&lock);
    int was = w->parked;
    if (was)
        unpark(w);
    pthread_mutex_unlock(&lock);
    return was;
}

void notify_pass_on(uint32_t woken_by)
{
    if (!woken_by || woken_by == WOKEN_BY_ALL)
        return; /* not woken by a job, or woken with everyone */
    wake_list l = {NULL};
    pthread_mutex_lock(&lock);
    wake_waiters(&l, woken_by, 1);
    pthread_mutex_unlock(&lock);
    run_wakes(&l);
}

int64_t notify_expire(int64_t now_ms)
{
    wake_list l = {NULL};
    pthread_mutex_lock(&lock);
    while (nheap > 0 && heap[0]->deadline <= now_ms)
        wake_later(&l, heap[0], 0);
    int64_t next = nheap > 0 ? heap[0]->deadline : -1;
    pthread_mutex_unlock(&lock);
    run_wakes(&l);
    return next;
}

size_t notify_parked(void)
{
    pthread_mutex_lock(&lock);
    size_t n = nheap;
    pthread_mutex_unlock(&lock);
    return n;
}

void notify_shutdown(void)
{
    wake_list l = {NULL};
    pthread_mutex_lock(&lock);
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    while (first)
        wake_later(&l, first, 0);
    pthread_mutex_unlock(&lock);
    run_wakes(&l);
}

int notify_stopping(void)
{
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

uint64_t notify_generation(void)
{
    pthread_mutex_lock(&lock);
    uint64_t g = generation;
    pthread_mutex_unlock(&lock);
    return g;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

void notify_init(void (*earlier_deadline)(void), int64_t recheck_ms, wake_claims *shared)
{
    deadline_hook = earlier_deadline;
    max_wait_ms = recheck_ms;
    claims = shared;
}

void ready_message_parse(int shard, const char *payload, size_t len, ready_message *m)
{
    char *end;
    memset(m, 0, sizeof *m);
    m->text = payload;
    m->text_len = strnlen(payload, len); /* "<count>:<topic>" ends at the NUL */
    m->count = strtoul(payload, &end, 10);
    m->has_count = end != payload && *end == ':';
    m->topic = m->has_count ? end + 1 : payload;
    m->topic_len = m->text_len - (size_t)(m->topic - payload);
    if (m->text_len + 1 < len) /* NUL, then the message's id */
        m->key = wake_claims_key(shard, payload + m->text_len + 1, len - m->text_len - 1);
}

/* "<count>:<topic>": the functions made `count` jobs of the topic ready in
 * one call, so `count` waiters of this process are woken; as every worker
 * process does the same, each job gets one pop per process rather than one
 * per waiting request. A payload without a count wakes them all. */
void notify_announce(const ready_message *m)
{
    if (!m->has_count || m->count == 0) {
        announce(topic_hash(m->text, m->text_len), ALL_WAITERS, NULL);
        return;
    }
    announce(topic_hash(m->topic, m->topic_len), m->count, m->key ? &m->key : NULL);
}

void notify_announce_all(void)
{
    announce(ANY_TOPIC, ALL_WAITERS, NULL);
}

/* shard_hints: per-topic ready counts by shard (see shard_hints.h), in an
 * open-addressing hash table of topics, in memory the worker processes
 * share. */
#include "fcgi/shard_hints.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "common/util.h"
#include "job/job.h"

/* The counts of every slot together stay within this (a slot holds two
 * 8-byte numbers per shard, and there are twice as many slots as topics):
 * with 1,024 shards, 512 topics. */
#define COUNTS_BYTES (16u << 20)
/* Ids of the messages counted lately, so the subscribers after the first
 * pass a message over; one overwritten by a newer id before every
 * subscriber read it is counted twice, a high hint. */
#define COUNTED_MESSAGES 4096

typedef struct {
    uint32_t len; /* 0: a free slot (topics are not empty) */
    int counted;  /* every shard counted since the entry was made */
    char topic[DQ_TOPIC_MAX];
} hint_entry;

struct shard_hints {
    pthread_mutex_t lock; /* process-shared, robust */
    int shards;
    size_t max_topics, ntopics;
    size_t nslots;    /* a power of two, at least twice max_topics */
    size_t bytes;     /* of the whole mapping */
    uint64_t seq;     /* counts messages and clears: what hints_seen gives */
    uint64_t cleared; /* `seq` at the last clear */
    uint64_t messages[COUNTED_MESSAGES];
    hint_entry *slots; /* nslots, after this struct */
    int64_t *counts;   /* nslots * shards: a slot's count per shard */
    uint64_t *added;   /* nslots * shards: `seq` at its shard's last message */
};

/* Pointers into the one mapping: each process maps it at the same address
 * (inherited over fork), so they hold in every worker. */
shard_hints *hints_new(int shards, size_t max_topics)
{
    if (shards < 1)
        return NULL;
    size_t per_topic = 2 * (size_t)shards * sizeof(int64_t);
    size_t fit = COUNTS_BYTES / (2 * per_topic);
    if (max_topics > fit)
        max_topics = fit;
    if (max_topics == 0)
        max_topics = 1;
    size_t nslots = 4;
    while (nslots < 2 * max_topics)
        nslots *= 2;
    size_t head = (sizeof(shard_hints) + 63) / 64 * 64;
    size_t bytes = head + nslots * sizeof(hint_entry) + nslots * per_topic;
    shard_hints *h = util_shared_alloc(bytes); /* zeroed: every slot free */
    if (!h)
        return NULL;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(&h->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0) {
        util_shared_free(h, bytes);
        return NULL;
    }
    h->shards = shards;
    h->max_topics = max_topics;
    h->nslots = nslots;
    h->bytes = bytes;
    h->slots = (hint_entry *)((char *)h + head);
    h->counts = (int64_t *)(h->slots + nslots);
    h->added = (uint64_t *)(h->counts + nslots * (size_t)shards);
    return h;
}

static void clear_locked(shard_hints *h)
{
    for (size_t i = 0; i < h->nslots; i++) {
        h->slots[i].len = 0;
        h->slots[i].counted = 0;
    }
    h->ntopics = 0;
    h->cleared = ++h->seq;
}

static void lock(shard_hints *h)
{
    if (pthread_mutex_lock(&h->lock) == EOWNERDEAD) {
        /* A worker died holding it, perhaps halfway through a change:
         * what the table says is unknown, so it says nothing. */
        clear_locked(h);
        pthread_mutex_consistent(&h->lock);
    }
}

static void unlock(shard_hints *h)
{
    pthread_mutex_unlock(&h->lock);
}

void hints_free(shard_hints *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    util_shared_free(h, h->bytes);
}

static int64_t *counts_of(shard_hints *h, const hint_entry *e)
{
    return h->counts + (size_t)(e - h->slots) * (size_t)h->shards;
}

static uint64_t *added_of(shard_hints *h, const hint_entry *e)
{
    return h->added + (size_t)(e - h->slots) * (size_t)h->shards;
}

/* The entry of topic, or NULL; with create, a new one (clearing a full
 * table first). A name longer than a topic can be is never tracked. */
static hint_entry *find(shard_hints *h, const char *topic, size_t len, int create)
{
    if (len == 0 || len > DQ_TOPIC_MAX)
        return NULL;
    size_t mask = h->nslots - 1;
    size_t i = util_crc32(topic, len) & mask;
    for (;; i = (i + 1) & mask) {
        hint_entry *e = &h->slots[i];
        if (!e->len)
            break;
        if (e->len == len && memcmp(e->topic, topic, len) == 0)
            return e;
    }
    if (!create)
        return NULL;
    if (h->ntopics == h->max_topics) {
        clear_locked(h);
        return find(h, topic, len, create);
    }
    hint_entry *e = &h->slots[i];
    memcpy(e->topic, topic, len);
    e->len = (uint32_t)len;
    e->counted = 0;
    memset(counts_of(h, e), 0, (size_t)h->shards * sizeof(int64_t));
    memset(added_of(h, e), 0, (size_t)h->shards * sizeof(uint64_t));
    h->ntopics++;
    return e;
}

/* Whether another worker's subscriber counted this message already; marks
 * it counted if not. */
static int counted_before(shard_hints *h, uint64_t message)
{
    if (message == 0)
        return 0;
    uint64_t *m = &h->messages[message % COUNTED_MESSAGES];
    if (*m == message)
        return 1;
    *m = message;
    return 0;
}

void hints_add(shard_hints *h, const char *topic, size_t len, int shard, int64_t n,
               uint64_t message)
{
    if (shard < 0 || shard >= h->shards)
        return;
    lock(h);
    if (!counted_before(h, message)) {
        hint_entry *e = find(h, topic, len, 1);
        if (e) {
            if (n > 0)
                counts_of(h, e)[shard] += n;
            added_of(h, e)[shard] = ++h->seq;
        }
    }
    unlock(h);
}

void hints_take(shard_hints *h, const char *topic, size_t len, int shard, int64_t n)
{
    if (shard < 0 || shard >= h->shards)
        return;
    lock(h);
    hint_entry *e = find(h, topic, len, 0); /* taking from a topic not tracked: nothing */
    if (e) {
        int64_t *c = &counts_of(h, e)[shard];
        *c = *c > n ? *c - n : 0;
    }
    unlock(h);
}

uint64_t hints_seen(shard_hints *h)
{
    lock(h);
    uint64_t seen = h->seq;
    unlock(h);
    return seen;
}

void hints_set(shard_hints *h, const char *topic, size_t len, int shard, int64_t n, uint64_t seen)
{
    if (shard < 0 || shard >= h->shards)
        return;
    if (n < 0)
        n = 0;
    lock(h);
    /* Zeroing a topic not tracked changes nothing. */
    hint_entry *e = h->cleared > seen ? NULL : find(h, topic, len, n > 0);
    if (e && added_of(h, e)[shard] <= seen)
        counts_of(h, e)[shard] = n;
    unlock(h);
}

void hints_mark_counted(shard_hints *h, const char *topic, size_t len, uint64_t seen)
{
    lock(h);
    hint_entry *e = h->cleared <= seen ? find(h, topic, len, 1) : NULL;
    if (e && h->cleared <= seen) /* making e may have cleared the table */
        e->counted = 1;
    unlock(h);
}

int hints_counted(shard_hints *h, const char *const *topics, size_t ntopics)
{
    int all = 1;
    lock(h);
    for (size_t t = 0; t < ntopics && all; t++) {
        hint_entry *e = find(h, topics[t], strlen(topics[t]), 0);
        all = e && e->counted;
    }
    unlock(h);
    return all;
}

int hints_pick(shard_hints *h, const char *const *topics, size_t ntopics,
               const unsigned char *skip, size_t *nfirst)
{
    int best = -1;
    size_t t = 0;
    lock(h);
    for (; t < ntopics && best < 0; t++) {
        hint_entry *e = find(h, topics[t], strlen(topics[t]), 0);
        if (!e)
            continue;
        const int64_t *counts = counts_of(h, e);
        int64_t most = 0;
        for (int k = 0; k < h->shards; k++) {
            if ((!skip || !skip[k]) && counts[k] > most) {
                most = counts[k];
                best = k;
            }
        }
    }
    unlock(h);
    if (nfirst)
        *nfirst = best < 0 ? 0 : t; /* t is one past the topic picked */
    return best;
}

void hints_clear(shard_hints *h)
{
    lock(h);
    clear_locked(h);
    unlock(h);
}

size_t hints_topics(shard_hints *h)
{
    lock(h);
    size_t n = h->ntopics;
    unlock(h);
    return n;
}

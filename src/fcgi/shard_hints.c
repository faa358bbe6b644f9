/* shard_hints: per-topic ready counts by shard (see shard_hints.h), in an
 * open-addressing hash table of topics. */
#include "fcgi/shard_hints.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    char *topic; /* NULL: free slot */
    size_t len;
    int64_t *counts;  /* one per shard */
    uint64_t *added;  /* per shard: `seq` at its last ready message */
    int counted;      /* every shard counted since the entry was made */
} hint_entry;

struct shard_hints {
    pthread_mutex_t lock;
    int shards;
    size_t max_topics, ntopics;
    size_t nslots; /* a power of two, at least twice max_topics */
    hint_entry *slots;
    uint64_t seq;     /* counts messages and clears: what hints_seen gives */
    uint64_t cleared; /* `seq` at the last clear */
};

shard_hints *hints_new(int shards, size_t max_topics)
{
    shard_hints *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->lock, NULL);
    h->shards = shards;
    h->max_topics = max_topics ? max_topics : 1;
    h->nslots = 4;
    while (h->nslots < 2 * h->max_topics)
        h->nslots *= 2;
    h->slots = calloc(h->nslots, sizeof *h->slots);
    if (!h->slots) {
        free(h);
        return NULL;
    }
    return h;
}

static void clear_locked(shard_hints *h)
{
    for (size_t i = 0; i < h->nslots; i++) {
        free(h->slots[i].topic);
        free(h->slots[i].counts);
        free(h->slots[i].added);
    }
    memset(h->slots, 0, h->nslots * sizeof *h->slots);
    h->ntopics = 0;
    h->cleared = ++h->seq;
}

void hints_free(shard_hints *h)
{
    if (!h)
        return;
    clear_locked(h);
    free(h->slots);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* The entry of topic, or NULL; with create, a new one (clearing a full
 * table first). */
static hint_entry *find(shard_hints *h, const char *topic, size_t len, int create)
{
    size_t mask = h->nslots - 1;
    size_t i = util_crc32(topic, len) & mask;
    for (;; i = (i + 1) & mask) {
        hint_entry *e = &h->slots[i];
        if (!e->topic)
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
    e->topic = util_xmalloc(len + 1);
    e->counts = util_xcalloc((size_t)h->shards, sizeof *e->counts);
    e->added = util_xcalloc((size_t)h->shards, sizeof *e->added);
    memcpy(e->topic, topic, len);
    e->topic[len] = '\0';
    e->len = len;
    h->ntopics++;
    return e;
}

void hints_add(shard_hints *h, const char *topic, size_t len, int shard, int64_t n)
{
    if (shard < 0 || shard >= h->shards)
        return;
    pthread_mutex_lock(&h->lock);
    hint_entry *e = find(h, topic, len, 1);
    if (n > 0)
        e->counts[shard] += n;
    e->added[shard] = ++h->seq;
    pthread_mutex_unlock(&h->lock);
}

void hints_take(shard_hints *h, const char *topic, size_t len, int shard, int64_t n)
{
    if (shard < 0 || shard >= h->shards)
        return;
    pthread_mutex_lock(&h->lock);
    hint_entry *e = find(h, topic, len, 0); /* taking from a topic not tracked: nothing */
    if (e)
        e->counts[shard] = e->counts[shard] > n ? e->counts[shard] - n : 0;
    pthread_mutex_unlock(&h->lock);
}

uint64_t hints_seen(shard_hints *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t seen = h->seq;
    pthread_mutex_unlock(&h->lock);
    return seen;
}

void hints_set(shard_hints *h, const char *topic, size_t len, int shard, int64_t n, uint64_t seen)
{
    if (shard < 0 || shard >= h->shards)
        return;
    if (n < 0)
        n = 0;
    pthread_mutex_lock(&h->lock);
    /* Zeroing a topic not tracked changes nothing. */
    hint_entry *e = h->cleared > seen ? NULL : find(h, topic, len, n > 0);
    if (e && e->added[shard] <= seen)
        e->counts[shard] = n;
    pthread_mutex_unlock(&h->lock);
}

void hints_mark_counted(shard_hints *h, const char *topic, size_t len, uint64_t seen)
{
    pthread_mutex_lock(&h->lock);
    hint_entry *e = h->cleared <= seen ? find(h, topic, len, 1) : NULL;
    if (e && h->cleared <= seen) /* making e may have cleared the table */
        e->counted = 1;
    pthread_mutex_unlock(&h->lock);
}

int hints_counted(shard_hints *h, const char *const *topics, size_t ntopics)
{
    int all = 1;
    pthread_mutex_lock(&h->lock);
    for (size_t t = 0; t < ntopics && all; t++) {
        hint_entry *e = find(h, topics[t], strlen(topics[t]), 0);
        all = e && e->counted;
    }
    pthread_mutex_unlock(&h->lock);
    return all;
}

int hints_pick(shard_hints *h, const char *const *topics, size_t ntopics,
               const unsigned char *skip, size_t *nfirst)
{
    int best = -1;
    size_t t = 0;
    pthread_mutex_lock(&h->lock);
    for (; t < ntopics && best < 0; t++) {
        hint_entry *e = find(h, topics[t], strlen(topics[t]), 0);
        if (!e)
            continue;
        int64_t most = 0;
        for (int k = 0; k < h->shards; k++) {
            if ((!skip || !skip[k]) && e->counts[k] > most) {
                most = e->counts[k];
                best = k;
            }
        }
    }
    pthread_mutex_unlock(&h->lock);
    if (nfirst)
        *nfirst = best < 0 ? 0 : t; /* t is one past the topic picked */
    return best;
}

void hints_clear(shard_hints *h)
{
    pthread_mutex_lock(&h->lock);
    clear_locked(h);
    pthread_mutex_unlock(&h->lock);
}

size_t hints_topics(shard_hints *h)
{
    pthread_mutex_lock(&h->lock);
    size_t n = h->ntopics;
    pthread_mutex_unlock(&h->lock);
    return n;
}

/* wake_claims: the shared table of ready-message wake-ups (see wake_claims.h). */
#include "fcgi/wake_claims.h"

#include <stdlib.h>

#include "common/util.h"

/* An entry: the message's tag in the high 40 bits, the wake-ups left in the
 * low 24. Fresh memory is zero, a tag no message has (tags are odd). */
#define LEFT_BITS 24
#define LEFT_MAX ((1UL << LEFT_BITS) - 1)

struct wake_claims {
    size_t slots;
    uint64_t *entries; /* shared */
};

wake_claims *wake_claims_new(size_t slots)
{
    wake_claims *t = calloc(1, sizeof *t);
    if (!t || slots == 0) {
        free(t);
        return NULL;
    }
    t->entries = util_shared_alloc(slots * sizeof(uint64_t));
    if (!t->entries) {
        free(t);
        return NULL;
    }
    t->slots = slots;
    return t;
}

void wake_claims_free(wake_claims *t)
{
    if (!t)
        return;
    util_shared_free(t->entries, t->slots * sizeof(uint64_t));
    free(t);
}

/* splitmix64's finaliser: spreads neighbouring sequence numbers apart. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t wake_claims_key(int shard, const char *id, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)id[i]) * 0x100000001b3ULL;
    return mix(h + (uint64_t)(uint32_t)shard);
}

unsigned long wake_claims_take(wake_claims *t, uint64_t key, unsigned long count,
                               unsigned long want)
{
    if (want == 0 || count == 0)
        return 0;
    if (count > LEFT_MAX)
        count = LEFT_MAX;
    uint64_t *e = &t->entries[key % t->slots];
    uint64_t tag = (key >> LEFT_BITS) | 1;
    uint64_t old = __atomic_load_n(e, __ATOMIC_ACQUIRE);
    for (;;) {
        unsigned long left = old >> LEFT_BITS == tag ? (unsigned long)(old & LEFT_MAX) : count;
        unsigned long take = want < left ? want : left;
        if (take == 0)
            return 0;
        uint64_t now = tag << LEFT_BITS | (left - take);
        if (__atomic_compare_exchange_n(e, &old, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return take;
    }
}

/* store_replicas: each shard's replica count as last seen, and the writes
 * answered without the replicas' confirmation (see store_replicas.h). */
#include "store/store_replicas.h"

#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"

typedef struct {
    /* Per shard: replicas online + 1 (0: not seen yet), and whether the
     * shard was short when last logged. */
    int seen[DQ_SHARDS_MAX];
    int short_now[DQ_SHARDS_MAX];
    uint64_t unconfirmed;
} replica_table;

static replica_table own;
static replica_table *t = &own;

int replicas_share(void)
{
    replica_table *shared = util_shared_alloc(sizeof *shared);
    if (!shared)
        return -1;
    t = shared;
    return 0;
}

void replicas_note(int shard, int online, int wanted, const char *where)
{
    if (shard < 0 || shard >= DQ_SHARDS_MAX)
        return;
    __atomic_store_n(&t->seen[shard], online + 1, __ATOMIC_RELAXED);
    int now = online < wanted;
    /* One process of many wins the exchange: the change is logged once. */
    if (__atomic_exchange_n(&t->short_now[shard], now, __ATOMIC_RELAXED) == now)
        return;
    if (now)
        log_error("shard %d has %d of the %d replicas redis_wait_replicas asks for (its master "
                  "at %s): its adds answer 503, its deliveries go on unconfirmed", shard, online,
                  wanted, where);
    else
        log_info("shard %d has its %d replicas again (master at %s): adds there are confirmed",
                 shard, online, where);
}

#define REFUSAL_END "; redis_wait_replicas %d): nothing was written"

void replicas_refusal(char *out, size_t outlen, int shard, int online, int wanted,
                      const char *where)
{
    if (online == 0)
        snprintf(out, outlen, "shard %d has no replica (master %s" REFUSAL_END, shard, where,
                 wanted);
    else
        snprintf(out, outlen, "shard %d has only %d replicas (master %s" REFUSAL_END, shard,
                 online, where, wanted);
}

int replicas_is_refusal(const char *detail)
{
    return strncmp(detail, "shard ", 6) == 0 && strstr(detail, "; redis_wait_replicas ");
}

int replicas_known(int shard)
{
    if (shard < 0 || shard >= DQ_SHARDS_MAX)
        return -1;
    return __atomic_load_n(&t->seen[shard], __ATOMIC_RELAXED) - 1;
}

int replicas_short(int shard)
{
    return shard >= 0 && shard < DQ_SHARDS_MAX &&
           __atomic_load_n(&t->short_now[shard], __ATOMIC_RELAXED);
}

void replicas_count_unconfirmed(uint64_t n)
{
    __atomic_add_fetch(&t->unconfirmed, n, __ATOMIC_RELAXED);
}

uint64_t replicas_unconfirmed(void)
{
    return __atomic_load_n(&t->unconfirmed, __ATOMIC_RELAXED);
}

/* store_sentinel: where the Redis primary is, behind Redis Sentinel
 * (redis_sentinels, redis_sentinel_master). A process keeps one answer for
 * all its threads: the primary's address and a generation that grows each
 * time it changes. It asks the sentinels (SENTINEL get-master-addr-by-name)
 * when it has no answer, when a store found the answer wrong (a READONLY
 * reply, a lost connection, a ROLE that is not master), and a watcher
 * thread hears +switch-master from a sentinel, so every store finds the new
 * primary after a failover with no operator action. */
#ifndef DQ_STORE_SENTINEL_H
#define DQ_STORE_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

/* The primary's address now: 0 with host/port and its generation, or -1
 * when no sentinel answered (then err says why). Asks the sentinels when
 * the process has no answer. */
int sentinel_primary(const dq_config *cfg, char *host, size_t hostlen, int *port, uint64_t *gen,
                     char *err, size_t errlen);
/* The answer of generation gen proved wrong: ask the sentinels next time. */
void sentinel_forget(uint64_t gen);
/* A store could not reach the primary of generation gen (a failed connect):
 * ask the sentinels again (at most twice a second per process). */
void sentinel_doubt(uint64_t gen);
/* The current generation (a store connected at an older one reconnects). */
uint64_t sentinel_generation(void);
/* Replicas' confirmations of writes (WAIT) during a failover: take a mark
 * before sending writes; sentinel_confirms(mark) after their WAIT says
 * whether the confirmation holds: the sentinels did not agree the primary
 * was down (+odown, +try-failover) or fail it over since the mark, and no
 * such doubt is still open. A write confirmed on a primary that is being
 * replaced can be lost with the replicas that confirmed it. */
uint64_t sentinel_failover_mark(void);
int sentinel_confirms(uint64_t mark);
/* Starts a watcher thread per sentinel (once per process): +switch-master,
 * and their views of the primary's health for sentinel_confirms. */
int sentinel_watch_start(const dq_config *cfg);
/* An fd that becomes readable when the primary changed (for subscribers,
 * which must subscribe again on the new primary); -1 before the watcher
 * runs. Reading it is the caller's business (sentinel_event_clear). */
int sentinel_event_fd(void);
void sentinel_event_clear(void);

#endif

/* wake_claims: how the worker processes of one delayq-fcgi share out the
 * wake-ups of a ready message. Every worker process receives every message
 * ("<count> jobs of <topic> became ready"); without sharing, each would wake
 * `count` of its own parked long-polls, and all but one process's pops
 * would find nothing. The table lives in memory the master maps before it
 * forks, so its workers (and the ones it starts again) see one table. A
 * message is known by a key unique in the deployment (its shard and the id
 * the functions give it); the first process to claim it starts
 * its budget at `count`, and each takes what it has waiters for. Lock-free:
 * one compare-and-swap per claim.
 *
 * A slot holds one message at a time. A later message in the same slot
 * makes an older one look new again, which wakes more than needed
 * (harmless). Keys are checked by a 40-bit tag, so two messages sharing a
 * slot and a tag could leave the second unclaimed; that costs at most
 * longpoll_recheck_ms, the wait after which a parked long-poll tries anyway. */
#ifndef DQ_WAKE_CLAIMS_H
#define DQ_WAKE_CLAIMS_H

#include <stddef.h>
#include <stdint.h>

typedef struct wake_claims wake_claims;

/* A table of `slots` entries in shared anonymous memory, or NULL. */
wake_claims *wake_claims_new(size_t slots);
void wake_claims_free(wake_claims *t);

/* The key of the message of `shard` with the id of `len` bytes. */
uint64_t wake_claims_key(int shard, const char *id, size_t len);

/* Claims up to `want` of the message's `count` wake-ups for the caller;
 * returns how many it got (0 when other processes took them all). */
unsigned long wake_claims_take(wake_claims *t, uint64_t key, unsigned long count,
                               unsigned long want);

#endif

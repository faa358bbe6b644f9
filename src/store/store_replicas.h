/* store_replicas: what the store knows of each shard's replicas, for a
 * deployment with redis_wait_replicas. A shard is "short" while its master
 * has fewer replicas online than redis_wait_replicas: writes there cannot
 * be confirmed. Adds are refused at once (503) and placed on other shards
 * where the id allows; deliveries (pops, takes, finishes) go on
 * unconfirmed and are counted. See docs/OPERATIONS.md, "A master without
 * its replicas".
 *
 * The table is process-wide, or shared by the worker processes of one
 * delayq-fcgi when replicas_share() was called before they were forked:
 * then a change is logged once, not once per worker, and the count of
 * unconfirmed writes covers all of them. */
#ifndef DQ_STORE_REPLICAS_H
#define DQ_STORE_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

/* Maps the table in shared memory; call once, before forking. 0 or -1. */
int replicas_share(void);
/* Shard k's master (at host:port) has `online` replicas online of the
 * `wanted` redis_wait_replicas asks for. Logs when the shard turns short
 * or whole again. */
void replicas_note(int shard, int online, int wanted, const char *where);
/* The replicas shard k's master was last seen with; -1: not known yet. */
int replicas_known(int shard);
/* Shard k is known to have fewer replicas than wanted. */
int replicas_short(int shard);
/* The sentence of a write refused because shard k's master (at where) has
 * `online` of the `wanted` replicas: "shard 3 has no replica (...)". */
void replicas_refusal(char *out, size_t outlen, int shard, int online, int wanted,
                      const char *where);
/* detail is such a sentence: it says more than the last cause of a
 * failure (store_last_cause), which may be about a node long gone. */
int replicas_is_refusal(const char *detail);
/* n writes were answered without the replicas' confirmation. */
void replicas_count_unconfirmed(uint64_t n);
uint64_t replicas_unconfirmed(void);

#endif

/* shard_hints: where the worker processes of one delayq-fcgi believe
 * ready jobs are, per topic and shard, so a pop goes straight to a shard
 * that has some instead of asking every shard.
 *
 * The counts come from the ready messages (each names its shard and how
 * many jobs of a topic became ready), go down as the workers pop, and are
 * set exactly when a pop finds a shard empty or the caller counts a
 * shard's ready jobs. The table is shared by the workers (made before they
 * are forked): every worker's subscriber gets every message, and a message
 * is counted once, by the first to bring it (its id: hints_add's message);
 * a job one worker pops is gone from every worker's hints. With a table
 * per worker, each message raised every worker's hint and all but the one
 * that popped the job asked its shard for nothing: a wasted call per job
 * and extra worker. Other delayq-fcgi instances pop too, so a hint may be
 * high: a pop that finds less corrects it. A missed message leaves a hint
 * low: a pop that finds no hint counts every shard. So hints cost at most
 * extra calls, never a job left unseen.
 *
 * What Redis says is set only if no ready message for that topic and shard
 * came after the caller asked (hints_seen before the call): such a message
 * may name jobs the answer did not include, and setting the answer would
 * lose them. A topic whose every shard was counted since the hints were
 * last cleared is "counted": from then on the messages keep its hints
 * whole, so a pop that may wait (a later message wakes it) can trust them
 * without counting again; only a message Redis dropped is missed, until
 * the waiter's recheck counts.
 *
 * Bounded: at most max_topics topics are tracked (fewer with many shards:
 * the table stays within a fixed size); a new topic beyond that clears the
 * table (the next pops count again). Safe across threads and processes
 * (a worker that dies holding the lock leaves the table cleared, since its
 * change may be half made); no I/O. */
#ifndef DQ_SHARD_HINTS_H
#define DQ_SHARD_HINTS_H

#include <stddef.h>
#include <stdint.h>

typedef struct shard_hints shard_hints;

/* In shared memory: processes forked after this share it. NULL when out of
 * memory. */
shard_hints *hints_new(int shards, size_t max_topics);
void hints_free(shard_hints *h);

/* n jobs of topic became ready in shard: a ready message, whose id (its
 * wake_claims_key; 0 for a message without one) makes the subscribers of
 * every worker count it once. */
void hints_add(shard_hints *h, const char *topic, size_t len, int shard, int64_t n,
               uint64_t message);
/* A worker took n jobs of topic from shard. */
void hints_take(shard_hints *h, const char *topic, size_t len, int shard, int64_t n);
/* Where the hints stand, taken before asking Redis (for hints_set and
 * hints_mark_counted). */
uint64_t hints_seen(shard_hints *h);
/* Redis said the shard has exactly n ready jobs of topic, when the hints
 * stood at `seen`: set unless a message for them came since. */
void hints_set(shard_hints *h, const char *topic, size_t len, int shard, int64_t n, uint64_t seen);
/* Every shard of topic was counted (hints_set) from `seen` on. */
void hints_mark_counted(shard_hints *h, const char *topic, size_t len, uint64_t seen);
/* Whether every one of the topics is counted (see above). */
int hints_counted(shard_hints *h, const char *const *topics, size_t ntopics);
/* The shard to pop from for these topics (in priority order): the one with
 * the most jobs of the first topic that has any, skipping shards where
 * skip[shard] is set (skip may be NULL); -1 when no hint says any.
 * *nfirst (may be NULL) gets that topic's position + 1: the pop asks the
 * shard for those first topics only, so no shard gives a later topic's
 * jobs while the hints know of an earlier topic's jobs anywhere. */
int hints_pick(shard_hints *h, const char *const *topics, size_t ntopics,
               const unsigned char *skip, size_t *nfirst);
/* Forgets every hint (subscription lost: counts are unknown). */
void hints_clear(shard_hints *h);
/* Topics tracked, for tests. */
size_t hints_topics(shard_hints *h);

#endif

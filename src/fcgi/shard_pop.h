/* shard_pop: a pop over every shard of a deployment. It goes to the shard
 * the hints name for the first topic that has jobs (one function call in
 * the common case); when the hints know of too few, it counts the ready
 * jobs of every shard in one pipelined round and pops where they are. A
 * pop that may wait skips that count for topics whose hints are counted
 * (shard_hints.h): a message will wake it.
 * Topics keep their priority across shards: a later topic's jobs are
 * taken only after a count found none of the earlier topics' in any shard
 * that answered. Shards that do not answer are passed over while others
 * can serve: a pop fails only when no shard answered. A topic's jobs come
 * in order within a shard, not across shards. */
#ifndef DQ_SHARD_POP_H
#define DQ_SHARD_POP_H

#include "fcgi/shard_hints.h"
#include "store/store_ops.h"

/* Finishes q's ids, then takes up to q->count jobs into out (zeroed by the
 * caller); hints may be NULL with one shard. With one shard the finish and
 * the pop are one atomic call; with several, the finishes go first (one
 * call per shard, sent together), then the pop. may_wait: if it finds
 * nothing, the caller parks the request until a ready message (not its
 * recheck) wakes it. */
dq_status shard_pop(dq_store *s, shard_hints *hints, const store_pop_req *q, int may_wait,
                    store_jobs *out, store_error *err);

#endif

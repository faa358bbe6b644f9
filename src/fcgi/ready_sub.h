/* ready_sub: the thread of a worker process that listens to the ready
 * messages of every shard ("<tag>:ready", sharded pub/sub on the node that
 * holds the shard). Each message says how many jobs of a topic became
 * ready in that shard: the shard hints learn where they are, then notify
 * wakes the parked long-polls it concerns. */
#ifndef DQ_READY_SUB_H
#define DQ_READY_SUB_H

#include "common/config.h"
#include "fcgi/shard_hints.h"

/* Starts the thread; hints may be NULL (one shard). Returns 0 or -1. */
int ready_sub_start(const dq_config *cfg, shard_hints *hints);

#endif

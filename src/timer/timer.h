/* timer: the delayq-timer loop. In every shard it takes its fair share of
 * the shard's delay buckets with leased Redis locks (one pipelined round
 * for all shards), moves due jobs to the ready queues with the move
 * function, and sleeps until the earliest due time of its buckets or until
 * a "<tag>:wake" message (sharded pub/sub, on the node of each shard)
 * announces an earlier one. No fixed tick: besides moves, it only wakes to
 * renew its locks (a third of the lease). A shard whose Redis does not
 * answer keeps its buckets until their lease ends, then lets them go; when
 * it answers again (a failover done), they are taken again. */
#ifndef DQ_TIMER_H
#define DQ_TIMER_H

#include "common/config.h"

/* Runs until stop_fd (a signalfd) becomes readable; then releases its locks
 * so other timers take the buckets at once. Returns the exit code. */
int timer_run(const dq_config *cfg, int stop_fd);

#endif

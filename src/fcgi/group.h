/* group: group commit of single-job requests within one worker process.
 *
 * A request that adds, finishes, deletes or pops one job hands its
 * operation to the group. If no call of that kind is on its way to Redis,
 * it goes at once, alone (at low load nothing waits). Otherwise it waits
 * for that call to return; then the waiting operations of the kind (up to
 * max) go as one call, on the connection of one of their threads, and each
 * request gets its own outcome back: its item's status, and the call's
 * failure when the call failed for its shard. Under many connections, Redis' per-call cost
 * (and the round trips) is paid once per group instead of once per job. */
#ifndef DQ_GROUP_H
#define DQ_GROUP_H

#include "protocol/request.h"
#include "store/store.h"
#include "store/store_ops.h"

typedef struct dq_group dq_group;

/* max: operations per call (1: every request alone). NULL on no memory.
 * A worker's group lives as long as the worker process: nothing frees it. */
dq_group *group_new(int max);

/* As store_add() of one job, through the group; s is the calling thread's
 * connection. The status is this job's own: a failure of the call for
 * another job's shard is not this request's. */
dq_status group_add(dq_group *g, dq_store *s, const char *allow, const dq_job_spec *job,
                    const char *id, store_item *item, store_error *err);
/* As store_pop() on shard 0 (a deployment of one shard), through the
 * group: pops of the same topics share a call, each with its own finishes;
 * out gets the jobs taken for this request (copies when the call was
 * shared, so keep q->count small: single-job pops). */
dq_status group_pop(dq_group *g, dq_store *s, const store_pop_req *q, store_jobs *out,
                    store_error *err);
/* As store_remove() of one id, through the group. */
dq_status group_remove(dq_group *g, dq_store *s, const char *allow, int finished, const char *id,
                       store_item *item, store_error *err);

#endif

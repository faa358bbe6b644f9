/* worker: one delayq-fcgi worker process. Its `threads` request threads,
 * each with its own Redis connection, wait together on one epoll set that
 * holds the listening socket and every connection: a thread woken by a
 * connection with a new request serves it, and goes back to waiting. A
 * long-poll that finds no job is parked (its connection armed in the set,
 * its wait in notify), so threads serve only requests that have work, and a
 * waiting long-poll or an idle kept-alive connection costs a few hundred
 * bytes, not a thread. */
#ifndef DQ_WORKER_H
#define DQ_WORKER_H

#include "common/config.h"
#include "fcgi/shard_hints.h"
#include "fcgi/wake_claims.h"

/* What the workers of one master share, mapped before they are forked. */
typedef struct {
    wake_claims *claims; /* ready messages' wake-ups */
    shard_hints *hints;  /* where ready jobs are; NULL with one shard */
} worker_shared;

/* Runs a worker: starts the loop and the threads, waits for SIGTERM or
 * SIGINT, then stops accepting, answers parked long-polls (empty), lets
 * in-flight requests finish and returns the process exit code. Call with
 * those signals blocked. */
int worker_run(const dq_config *cfg, int listen_fd, const worker_shared *shared);

#endif

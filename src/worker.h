/* worker: one delayq-fcgi worker process. An event loop thread owns the
 * listening socket and every connection that waits: idle kept-alive
 * connections and parked long-polls. `threads` request threads, each with
 * its own Redis connection, take connections that have work (a new request,
 * or a parked long-poll woken by a ready job or its deadline) from a queue,
 * so threads serve only requests that have work, and a waiting long-poll or
 * an idle connection costs a few hundred bytes, not a thread. */
#ifndef DQ_WORKER_H
#define DQ_WORKER_H

#include "config.h"

/* Runs a worker: starts the loop and the threads, waits for SIGTERM or
 * SIGINT, then stops accepting, answers parked long-polls (empty), lets
 * in-flight requests finish and returns the process exit code. Call with
 * those signals blocked. */
int worker_run(const dq_config *cfg, int listen_fd);

#endif

/* notify: wakes long-polling pops when jobs become ready. One subscriber
 * thread per worker process listens on the "<prefix>:ready" channel (the
 * scripts publish "<count>:<topic>" for the jobs one call made ready) and
 * wakes at most `count` of the request threads waiting on that topic, so a
 * ready job costs one pop per worker process, not one per waiting request.
 * Waits are capped at one second, so a lost subscription costs at most a
 * second of latency, never a lost wake-up. */
#ifndef DQ_NOTIFY_H
#define DQ_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Starts the subscriber thread. Returns 0 or -1. */
int notify_start(const dq_config *cfg);
/* The current generation: take it before trying a pop. */
uint64_t notify_generation(void);
/* Waits until a message newer than *gen names one of the topics, until the
 * monotonic deadline, at most one second, or until shutdown. Updates *gen.
 * Returns nonzero when a message woke it: a waiter that will not pop after
 * all hands that value to notify_pass_on, so the job wakes someone else. */
uint32_t notify_wait(const char *const *topics, size_t ntopics, uint64_t *gen, int64_t deadline_ms);
void notify_pass_on(uint32_t woken_by);
/* Wakes every waiter for good: the worker is stopping. */
void notify_shutdown(void);
int notify_stopping(void);

#endif

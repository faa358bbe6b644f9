/* notify: wakes long-polling pops when jobs become ready. One subscriber
 * thread per worker process listens on the "<prefix>:ready" channel (the
 * scripts publish the topic that got jobs) and wakes the waiting request
 * threads whose topics match. Waits are capped at one second, so a lost
 * subscription costs at most a second of latency, never a lost wake-up. */
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
 * monotonic deadline, at most one second, or until shutdown. Updates *gen. */
void notify_wait(const char *const *topics, size_t ntopics, uint64_t *gen, int64_t deadline_ms);
/* Wakes every waiter for good: the worker is stopping. */
void notify_shutdown(void);
int notify_stopping(void);

#endif

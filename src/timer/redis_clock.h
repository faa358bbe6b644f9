/* redis_clock: where a Redis node's clock stands against this process's
 * monotonic clock, so the timer can sleep until a Redis time.
 *
 * It is learnt from calls that answer with Redis' time in whole ms: each
 * says the offset lies in an interval, as wide as its round trip plus that
 * ms. The clock keeps the intersection of what its samples say, so a round
 * trip of several ms (a busy node, or the timer waiting for a core) cannot
 * move an estimate that short ones pinned down, and samples falling at
 * different points of a ms narrow it below a ms. The interval widens as it
 * ages (by far more than clocks drift); a sample that cannot be true of it
 * (a stepped clock) starts it afresh. Pure: no I/O. */
#ifndef DQ_REDIS_CLOCK_H
#define DQ_REDIS_CLOCK_H

#include <stdint.h>

typedef struct {
    int64_t lo_us, hi_us; /* Redis' time minus monotonic time lies in [lo, hi] */
    int64_t at_us;        /* monotonic time of the last sample */
    int known;
} redis_clock;

/* A call sent at sent_us and answered at answered_us (monotonic) read
 * redis_ms on Redis' clock. */
void redis_clock_learn(redis_clock *c, int64_t redis_ms, int64_t sent_us, int64_t answered_us);
/* The monotonic us at which Redis' clock reaches redis_ms (the middle of
 * what the samples allow); 0, at once, before any sample. */
int64_t redis_clock_mono_us(const redis_clock *c, int64_t redis_ms);

#endif

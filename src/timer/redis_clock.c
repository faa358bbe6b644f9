/* redis_clock: the intersection of what samples say of a node's clock (see
 * redis_clock.h). */
#include "timer/redis_clock.h"

/* The interval widens by this many us on each side per ms since the last
 * sample: 1,000 ppm, far beyond a real clock's drift or slew. */
#define DRIFT_US_PER_MS 1

void redis_clock_learn(redis_clock *c, int64_t redis_ms, int64_t sent_us, int64_t answered_us)
{
    if (answered_us < sent_us)
        return;
    /* Redis read redis_ms, at or after its start and before its end,
     * between the send and the answer. */
    int64_t lo = redis_ms * 1000 - answered_us;
    int64_t hi = redis_ms * 1000 + 1000 - sent_us;
    if (c->known) {
        int64_t widen = (answered_us - c->at_us) / 1000 * DRIFT_US_PER_MS;
        int64_t kept_lo = c->lo_us - widen, kept_hi = c->hi_us + widen;
        if (kept_lo > lo)
            lo = kept_lo;
        if (kept_hi < hi)
            hi = kept_hi;
        if (lo > hi) { /* not both true: the clock was stepped */
            lo = redis_ms * 1000 - answered_us;
            hi = redis_ms * 1000 + 1000 - sent_us;
        }
    }
    c->lo_us = lo;
    c->hi_us = hi;
    c->at_us = answered_us;
    c->known = 1;
}

int64_t redis_clock_mono_us(const redis_clock *c, int64_t redis_ms)
{
    if (!c->known)
        return 0;
    return redis_ms * 1000 - (c->lo_us + c->hi_us) / 2;
}

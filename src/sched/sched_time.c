/* sched_time: fire times of schedules (see sched_time.h). */
#include "sched/sched_time.h"

#include <string.h>

/* Floor division for a possibly negative numerator and a positive d. */
static int64_t floor_div(int64_t a, int64_t d)
{
    int64_t q = a / d;
    return (a % d != 0 && a < 0) ? q - 1 : q;
}

int sched_define(dq_sched *s, const char *cron_text, const dq_tz *tz, int64_t every_s,
                 int64_t anchor_s, int64_t start_s, int64_t end_s, char *why, size_t whylen)
{
    memset(s, 0, sizeof *s);
    if (cron_text && cron_parse(cron_text, &s->cron, why, whylen) < 0)
        return -1;
    s->is_cron = cron_text != NULL;
    s->tz = tz;
    s->every_s = every_s;
    s->anchor_s = anchor_s;
    s->start_s = start_s < 0 ? SCHED_NONE : start_s;
    s->end_s = end_s < 0 ? SCHED_NONE : end_s;
    return 0;
}

int64_t sched_next(const dq_sched *s, int64_t after)
{
    int64_t t;
    if (s->start_s != SCHED_NONE && after < s->start_s - 1)
        after = s->start_s - 1;
    if (s->is_cron) {
        t = cron_next(&s->cron, s->tz, after);
        if (t < 0)
            return SCHED_NONE;
    } else {
        if (s->every_s < 1)
            return SCHED_NONE;
        if (after < s->anchor_s)
            t = s->anchor_s;
        else
            t = s->anchor_s + (floor_div(after - s->anchor_s, s->every_s) + 1) * s->every_s;
    }
    if (s->end_s != SCHED_NONE && t > s->end_s)
        return SCHED_NONE;
    return t;
}

int sched_upcoming(const dq_sched *s, int64_t after, int64_t *out, int n)
{
    int i = 0;
    while (i < n) {
        int64_t t = sched_next(s, after);
        if (t == SCHED_NONE)
            break;
        out[i++] = t;
        after = t;
    }
    return i;
}

void sched_catch_up(const dq_sched *s, int64_t due, int64_t now, long max_steps, int64_t *fire,
                    int64_t *missed, int64_t *next)
{
    *fire = due;
    *missed = 0;
    if (!s->is_cron && s->every_s >= 1 && now > due) {
        /* The latest anchor + k * every <= now (and <= end), at once. */
        int64_t last = now;
        if (s->end_s != SCHED_NONE && s->end_s < last)
            last = s->end_s;
        int64_t latest = s->anchor_s + floor_div(last - s->anchor_s, s->every_s) * s->every_s;
        if (latest > due) {
            /* due itself may lie off the grid (a replaced schedule): count
             * the grid points after it. */
            *missed = floor_div(latest - due - 1, s->every_s) + 1;
            *fire = latest;
        }
        *next = sched_next(s, *fire);
        return;
    }
    int64_t n = sched_next(s, due);
    long steps = 0;
    while (n != SCHED_NONE && n <= now) {
        if (steps++ == max_steps) {
            /* Out of steps with fires still due: fire none this time; the
             * caller continues from the last one reached. */
            *next = *fire;
            *fire = SCHED_NONE;
            return;
        }
        (*missed)++;
        *fire = n;
        n = sched_next(s, n);
    }
    *next = n;
}

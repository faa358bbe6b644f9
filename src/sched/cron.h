/* cron: five-field cron expressions and when they fire in a time zone, for
 * periodic jobs (the timer fires them; the HTTP workers validate them and
 * preview fire times). Pure: no allocation, no global state; a parsed
 * expression is a plain value that may be copied and shared freely. */
#ifndef DQ_CRON_H
#define DQ_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "sched/tz.h"

/* Longest expression cron_parse accepts, in bytes. */
#define CRON_EXPR_MAX 128
/* cron_next looks this many days ahead (8 years of 365.25 days: enough for
 * every Feb 29, even across a century that skips one). */
#define CRON_HORIZON_DAYS 2922

/* Bit v of a field is set when value v matches. */
typedef struct dq_cron {
    uint64_t minutes; /* 0-59 */
    uint32_t hours;   /* 0-23 */
    uint32_t mdays;   /* 1-31 */
    uint16_t months;  /* 1-12 */
    uint8_t wdays;    /* 0-6, 0 Sunday (7 is folded into 0) */
    /* The day-of-month / day-of-week field began with '*'. When neither
     * did, a day matches if either field matches (Vixie cron); otherwise
     * both must. */
    uint8_t mday_star;
    uint8_t wday_star;
} dq_cron;

/* Parses "m h dom mon dow" (fields separated by spaces or tabs; each a
 * comma list of `*`, n, a-b, `*`/s, a-b/s or a/s, the last meaning a to
 * the field's end; months and weekdays also by three-letter English name in
 * any case) or one of @yearly @annually @monthly @weekly @daily @midnight
 * @hourly (any case). Blanks around the whole are ignored. Returns 0, or -1
 * with err naming the field and the rule it broke (*out is then left
 * alone). */
int cron_parse(const char *expr, dq_cron *out, char *err, size_t errlen);

/* 1 if local wall-clock time local_s (seconds, see tz.h) matches, to the
 * minute (seconds are ignored). */
int cron_matches(const dq_cron *c, int64_t local_s);

/* The first fire instant strictly after `after`, or -1 if there is none
 * within CRON_HORIZON_DAYS (such as "0 0 30 2 *") or `after` is beyond
 * +-2^55 s. tz NULL means UTC. Instants before 1970 work too;
 * -1 itself (1969-12-31T23:59:59Z) is not a whole local minute in any zone
 * of the tz database, so it never is a real fire instant.
 * Each matching local time fires once:
 *   - a time that does not exist (skipped by a spring-forward change) fires
 *     at the instant the gap ends, so several skipped times fire together,
 *     once;
 *   - a time that happens twice (fall-back) fires at its first occurrence
 *     only. */
int64_t cron_next(const dq_cron *c, const dq_tz *tz, int64_t after);

/* The next n fire instants after `after` into out; returns how many were
 * found (fewer than n when the horizon runs out). */
int cron_upcoming(const dq_cron *c, const dq_tz *tz, int64_t after, int64_t *out, int n);

#endif

/* sched_time: when a periodic job (schedule) fires. A schedule fires either on a
 * cron expression in a time zone, or every N seconds from an anchor (its
 * `start`, else the time it was made). Both respect `start` (no fire
 * before it) and `end` (no fire after it). Pure: no clock, no I/O; the
 * HTTP workers compute a schedule's first fire and previews with it, and
 * delayq-timer each next fire. Times are Unix seconds. */
#ifndef DQ_SCHED_TIME_H
#define DQ_SCHED_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "sched/cron.h"
#include "sched/tz.h"

#define SCHED_EVERY_MAX (366LL * 86400) /* a year, leap day included */
#define SCHED_NONE (-1)

typedef struct {
    int is_cron;
    dq_cron cron;     /* is_cron */
    const dq_tz *tz;  /* is_cron; NULL: UTC. Borrowed. */
    int64_t every_s;  /* !is_cron: 1..SCHED_EVERY_MAX */
    int64_t anchor_s; /* !is_cron: fires are anchor + k * every, k >= 0 */
    int64_t start_s;  /* no fire before it; SCHED_NONE for none */
    int64_t end_s;    /* no fire after it; SCHED_NONE for none */
} dq_sched;

/* A schedule's definition as it is sent and stored: cron_text (NULL for
 * an `every` schedule, fires anchor + k * every_s), start and end (< 0:
 * none), in tz (borrowed). Returns 0, or -1 with why when cron_text does
 * not parse (a definition another version stored). */
int sched_define(dq_sched *s, const char *cron_text, const dq_tz *tz, int64_t every_s,
                 int64_t anchor_s, int64_t start_s, int64_t end_s, char *why, size_t whylen);

/* The first fire instant strictly after `after`, or SCHED_NONE when there
 * is none (past `end`, or a cron expression with no fire in its horizon). */
int64_t sched_next(const dq_sched *s, int64_t after);

/* The next n fire instants after `after` into out; returns how many. */
int sched_upcoming(const dq_sched *s, int64_t after, int64_t *out, int n);

/* Catching up. `due` is a fire instant that is due (due <= now). When
 * later fire instants are due too (no timer ran through them), only the
 * latest of them fires: *fire gets it, *missed how many earlier ones are
 * skipped (due included when it is not the one that fires), *next the
 * first fire after *fire (SCHED_NONE if none). A cron schedule is walked
 * one fire at a time, at most `max_steps`; when they run out, *fire is
 * SCHED_NONE (nothing fires yet), *missed counts the fires passed so far
 * and *next is the last one reached, still due: the caller stores it and
 * comes back for the rest. */
void sched_catch_up(const dq_sched *s, int64_t due, int64_t now, long max_steps, int64_t *fire,
                    int64_t *missed, int64_t *next);

#endif

/* tz: IANA time zones read from the system's tz database (TZif files), for
 * the periodic-job arithmetic in cron.c. Thread-safe: a loaded zone is
 * immutable and nothing here touches TZ, tzset() or localtime(), which
 * share process-wide state the multi-threaded HTTP workers cannot afford.
 *
 * Times are int64 seconds. An "instant" is Unix time (seconds since
 * 1970-01-01 00:00 UTC); a "local" time is the civil date and time on a
 * wall clock in the zone, counted as if it were UTC (seconds since
 * 1970-01-01 00:00 local). Instants are clamped to +-2^56 s (about two
 * billion years), where the arithmetic cannot overflow. */
#ifndef DQ_TZ_H
#define DQ_TZ_H

#include <stddef.h>
#include <stdint.h>

/* Longest zone name tz_load accepts. */
#define TZ_NAME_MAX 64

typedef struct dq_tz dq_tz;

/* Loads the zone `name` ("Europe/Berlin") from $TZDIR if set, else from
 * /usr/share/zoneinfo. The name must be a plain zone name: 1 to 64 bytes of
 * [A-Za-z0-9/_+-], no absolute path, no empty or dot components. "UTC"
 * works without the file. Zones with leap seconds ("right/...") are
 * refused: delayq counts POSIX seconds. Returns NULL with err set on a bad
 * name, a missing zone or a damaged file. Owned by the caller: tz_free it. */
dq_tz *tz_load(const char *name, char *err, size_t errlen);
void tz_free(dq_tz *tz);

/* The zone's name as given to tz_load. */
const char *tz_name(const dq_tz *tz);

/* The UTC offset in seconds (east positive) in effect at instant unix_s. */
int tz_offset(const dq_tz *tz, int64_t unix_s);

/* The instants at which the wall clock shows local time local_s:
 *   1: one instant, *first;
 *   2: the time happens twice (a fall-back overlap), *first < *second;
 *   0: it never happens (a spring-forward gap); *first is the instant the
 *      gap ends, i.e. the transition that skipped it. */
int tz_local_to_utc(const dq_tz *tz, int64_t local_s, int64_t *first, int64_t *second);

/* ---------------------------------------------------------------- civil dates
 * Proleptic Gregorian calendar, any year; cron.c walks the calendar with
 * these. Days count from 1970-01-01. */

/* Days from 1970-01-01 to y-m-d (m 1-12, d 1-31). */
int64_t tz_days_from_civil(int64_t y, int m, int d);
/* The date of day number `days`. */
void tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d);
/* 0 Sunday .. 6 Saturday. */
int tz_weekday(int64_t days);
/* 28 to 31; February has 29 in years divisible by 4, except centuries not
 * divisible by 400. */
int tz_month_days(int64_t y, int m);

#endif

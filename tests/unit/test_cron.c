/* Unit tests for src/sched/cron.c and src/sched/tz.c: expression syntax, next-fire
 * arithmetic in UTC and across DST changes, zone offsets, and TZif
 * parsing. Expected instants come from the tz database as `zdump -v` and
 * `TZ=Zone date` print it (tzdata 2025b); they are facts, not output of the
 * code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sched/cron.h"
#include "sched/tz.h"

/* ---------------------------------------------------------------- helpers */

/* A UTC instant. Relies on tz_days_from_civil, which test_civil pins to
 * known day numbers first. */
static int64_t at(int64_t y, int mo, int d, int h, int mi)
{
    return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60;
}

/* A local wall-clock time, in tz.h's "as if UTC" seconds. */
static int64_t local(int64_t y, int mo, int d, int h, int mi)
{
    return at(y, mo, d, h, mi);
}

static dq_tz *zone(const char *name)
{
    char err[256] = "";
    dq_tz *tz = tz_load(name, err, sizeof err);
    if (!tz)
        fail_msg("cannot load %s: %s", name, err);
    return tz;
}

static dq_cron parse_ok(const char *expr)
{
    dq_cron c;
    char err[256] = "";
    if (cron_parse(expr, &c, err, sizeof err) < 0)
        fail_msg("'%s' rejected: %s", expr, err);
    return c;
}

static void parse_bad(const char *expr, const char *needle)
{
    dq_cron c;
    char err[256] = "";
    if (cron_parse(expr, &c, err, sizeof err) == 0)
        fail_msg("accepted: '%s'", expr);
    if (!strstr(err, needle))
        fail_msg("error for '%s' is '%s', which does not mention '%s'", expr, err, needle);
}

/* The fire instants of expr in zone after `after` are exactly want[0..n). */
static void expect_fires(const char *expr, const char *zname, int64_t after, const int64_t *want, int n)
{
    dq_cron c = parse_ok(expr);
    dq_tz *tz = zone(zname);
    int64_t got[16];
    int k = cron_upcoming(&c, tz, after, got, n);
    tz_free(tz);
    if (k != n)
        fail_msg("'%s' in %s: %d fire times, expected %d", expr, zname, k, n);
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("'%s' in %s, fire %d: got %lld, expected %lld (off by %lld s)", expr, zname, i,
                     (long long)got[i], (long long)want[i], (long long)(got[i] - want[i]));
    }
}

static int64_t next_utc(const char *expr, int64_t after)
{
    dq_cron c = parse_ok(expr);
    return cron_next(&c, NULL, after);
}

/* ---------------------------------------------------------------- civil dates */

static void test_civil(void **state)
{
    (void)state;
    assert_int_equal(tz_days_from_civil(1970, 1, 1), 0);
    assert_int_equal(tz_days_from_civil(1969, 12, 31), -1);
    assert_int_equal(tz_days_from_civil(2000, 3, 1), 11017);
    assert_int_equal(tz_days_from_civil(2025, 1, 1), 20089);
    assert_int_equal(tz_days_from_civil(2100, 3, 1), 47541);
    assert_int_equal(tz_days_from_civil(2400, 2, 29), 157113);
    assert_int_equal(tz_days_from_civil(1600, 1, 1), -135140);
    assert_int_equal(tz_days_from_civil(1, 1, 1), -719162);
    assert_int_equal(tz_weekday(0), 4);       /* Thursday */
    assert_int_equal(tz_weekday(-1), 3);      /* Wednesday */
    assert_int_equal(tz_weekday(157113), 2);  /* 2400-02-29, Tuesday */
    assert_int_equal(tz_weekday(-135140), 6); /* 1600-01-01, Saturday */
    assert_int_equal(tz_weekday(-719162), 1); /* 0001-01-01, Monday */
    assert_int_equal(tz_month_days(2000, 2), 29);
    assert_int_equal(tz_month_days(2028, 2), 29);
    assert_int_equal(tz_month_days(2400, 2), 29);
    assert_int_equal(tz_month_days(2100, 2), 28);
    assert_int_equal(tz_month_days(1900, 2), 28);
    assert_int_equal(tz_month_days(2025, 2), 28);
    assert_int_equal(tz_month_days(2025, 4), 30);
    assert_int_equal(tz_month_days(2025, 12), 31);
    /* Round trip over 1200 years, every day. */
    int64_t y;
    int m, d;
    for (int64_t days = -300000; days < 140000; days++) {
        tz_civil_from_days(days, &y, &m, &d);
        if (m < 1 || m > 12 || d < 1 || d > tz_month_days(y, m) || tz_days_from_civil(y, m, d) != days)
            fail_msg("day %lld -> %lld-%d-%d", (long long)days, (long long)y, m, d);
    }
    tz_civil_from_days(157113, &y, &m, &d);
    assert_int_equal(y, 2400);
    assert_int_equal(m, 2);
    assert_int_equal(d, 29);
    /* The helpers against raw Unix times from `date -u -d ... +%s`. */
    assert_int_equal(at(2025, 3, 30, 1, 0), 1743296400);
    assert_int_equal(at(2025, 11, 2, 6, 0), 1762063200);
    assert_int_equal(at(1893, 3, 1, 0, 0), -2424729600LL);
}

/* ---------------------------------------------------------------- parsing */

static void test_parse_syntax(void **state)
{
    (void)state;
    dq_cron c = parse_ok("* * * * *");
    assert_int_equal(c.minutes, 0x0fffffffffffffffULL);
    assert_int_equal(c.hours, 0xffffff);
    assert_int_equal(c.mdays, 0xfffffffe);
    assert_int_equal(c.months, 0x1ffe);
    assert_int_equal(c.wdays, 0x7f);
    assert_true(c.mday_star);
    assert_true(c.wday_star);

    c = parse_ok("*/15 0-6/2 1,15 JAN-mar/2 mon-FRI");
    assert_int_equal(c.minutes, 1ULL << 0 | 1ULL << 15 | 1ULL << 30 | 1ULL << 45);
    assert_int_equal(c.hours, 1 << 0 | 1 << 2 | 1 << 4 | 1 << 6);
    assert_int_equal(c.mdays, 1u << 1 | 1u << 15);
    assert_int_equal(c.months, 1 << 1 | 1 << 3);
    assert_int_equal(c.wdays, 0x3e);
    assert_false(c.mday_star);
    assert_false(c.wday_star);

    c = parse_ok("5/20 23 31 12 6");
    assert_int_equal(c.minutes, 1ULL << 5 | 1ULL << 25 | 1ULL << 45); /* a/n runs to the end */
    assert_int_equal(c.hours, 1u << 23);
    assert_int_equal(c.mdays, 1u << 31);
    assert_int_equal(c.months, 1 << 12);
    assert_int_equal(c.wdays, 1 << 6);

    c = parse_ok("0,59 1-3,7,20-22/2 */10 */5 */2");
    assert_int_equal(c.minutes, 1ULL | 1ULL << 59);
    assert_int_equal(c.hours, 1 << 1 | 1 << 2 | 1 << 3 | 1 << 7 | 1 << 20 | 1 << 22);
    assert_int_equal(c.mdays, 1u << 1 | 1u << 11 | 1u << 21 | 1u << 31);
    assert_int_equal(c.months, 1 << 1 | 1 << 6 | 1 << 11);
    assert_int_equal(c.wdays, 1 << 0 | 1 << 2 | 1 << 4 | 1 << 6);
    assert_true(c.mday_star); /* a step over '*' is still '*': the AND rule */
    assert_true(c.wday_star);

    /* Sunday is 0 and 7; names in any case; 5-7 wraps to Sunday. */
    assert_int_equal(parse_ok("0 0 * * 7").wdays, 1);
    assert_int_equal(parse_ok("0 0 * * 0").wdays, 1);
    assert_int_equal(parse_ok("0 0 * * 5-7").wdays, 1 << 5 | 1 << 6 | 1);
    assert_int_equal(parse_ok("0 0 * * SUN,sat").wdays, 1 | 1 << 6);
    assert_int_equal(parse_ok("0 0 * * Tue-Thu").wdays, 1 << 2 | 1 << 3 | 1 << 4);
    assert_int_equal(parse_ok("0 0 * * 1-7").wdays, 0x7f);
    assert_int_equal(parse_ok("0 0 * jan,Feb,MAR,apr,may,jun,jul,aug,sep,oct,nov,DEC *").months, 0x1ffe);
    assert_int_equal(parse_ok("0 0 * sep-dec *").months, 0x1e00);
    assert_int_equal(parse_ok("07 08 09 010 1").minutes, 1ULL << 7); /* leading zeros */

    /* Blanks: several spaces or tabs between fields, and around the whole. */
    c = parse_ok("  \t30\t\t4   1,15  * \t 5  ");
    assert_int_equal(c.minutes, 1ULL << 30);
    assert_int_equal(c.hours, 1 << 4);
    assert_int_equal(c.wdays, 1 << 5);
}

static void test_parse_macros(void **state)
{
    (void)state;
    static const struct {
        const char *macro, *same;
    } cases[] = {
        {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"},  {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"},  {"  @DAILY ", "0 0 * * *"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dq_cron a = parse_ok(cases[i].macro), b = parse_ok(cases[i].same);
        if (memcmp(&a, &b, sizeof a) != 0)
            fail_msg("%s differs from %s", cases[i].macro, cases[i].same);
    }
}

static void test_parse_errors(void **state)
{
    (void)state;
    dq_cron c;
    char err[256] = "";
    assert_int_equal(cron_parse("* 24 * * *", &c, err, sizeof err), -1);
    assert_string_equal(err, "cron field 'hour': 24 is out of range 0-23");

    /* Out of range, in each field. */
    parse_bad("60 * * * *", "cron field 'minute': 60 is out of range 0-59");
    parse_bad("* * 0 * *", "cron field 'day-of-month': 0 is out of range 1-31");
    parse_bad("* * 32 * *", "cron field 'day-of-month': 32 is out of range 1-31");
    parse_bad("* * * 0 *", "cron field 'month': 0 is out of range 1-12");
    parse_bad("* * * 13 *", "cron field 'month': 13 is out of range 1-12");
    parse_bad("* * * * 8", "cron field 'day-of-week': 8 is out of range 0-7");
    parse_bad("99999999999999999999 * * * *", "cron field 'minute': 99999999999999999999 is out of range");
    parse_bad("1-60 * * * *", "cron field 'minute': 60 is out of range 0-59");
    parse_bad("-1 * * * *", "cron field 'minute': unexpected '-'");
    /* Names only where they belong, and only the three-letter ones. */
    parse_bad("* * * JANUARY *", "cron field 'month': 'JANUARY' is not a number or month name");
    parse_bad("* * * * JAN", "cron field 'day-of-week': 'JAN' is not a number or day name");
    parse_bad("* * * * monday", "cron field 'day-of-week'");
    parse_bad("a * * * *", "cron field 'minute': 'a' is not a number");
    parse_bad("* MON * * *", "cron field 'hour': 'MON' is not a number");
    /* Ranges and steps. */
    parse_bad("10-5 * * * *", "cron field 'minute': range 10-5 is reversed");
    parse_bad("* * * DEC-JAN *", "cron field 'month': range DEC-JAN is reversed");
    parse_bad("*/0 * * * *", "cron field 'minute': step 0");
    parse_bad("* 1-5/0 * * *", "cron field 'hour': step 0");
    parse_bad("*/61 * * * *", "cron field 'minute': step 61 is out of range 1-60");
    parse_bad("* * * * */8", "cron field 'day-of-week': step 8 is out of range 1-7");
    parse_bad("*/ * * * *", "cron field 'minute': step in '*/' is not a number");
    parse_bad("* * * */JAN *", "cron field 'month': step in '*/JAN' is not a number");
    parse_bad("5- * * * *", "cron field 'minute': '5-' is missing a number");
    parse_bad("1-2-3 * * * *", "cron field 'minute': unexpected '-' in '1-2-3'");
    parse_bad("*-5 * * * *", "cron field 'minute': unexpected '-' in '*-5'");
    parse_bad("1/2/3 * * * *", "cron field 'minute': unexpected '/' in '1/2/3'");
    /* Lists. */
    parse_bad("1,,2 * * * *", "cron field 'minute': empty list item");
    parse_bad(",1 * * * *", "cron field 'minute': empty list item");
    parse_bad("* * * * 1,", "cron field 'day-of-week': empty list item");
    parse_bad("* * 1,x * *", "cron field 'day-of-month': 'x' is not a number");
    /* Trailing garbage inside a field. */
    parse_bad("5x * * * *", "cron field 'minute': unexpected 'x' in '5x'");
    parse_bad("* 3; * * *", "cron field 'hour': unexpected ';' in '3;'");
    parse_bad("* * * * 5\n", "cron expression has byte 0x0a at offset 9; only printable ASCII");
    parse_bad("* * * * 5\xc3\xa9", "cron expression has byte 0xc3 at offset 9");
    parse_bad("0 3 * * mon/p\b", "has byte 0x08 at offset 13");
    parse_bad("@0gg\n", "has byte 0x0a at offset 4");
    /* Field count and size. */
    parse_bad("* * * *", "has 4 fields; it needs 5");
    parse_bad("* * * * * *", "has 6 fields; it needs 5");
    parse_bad("* * * * * /bin/true", "has 6 fields");
    parse_bad("*", "has 1 field;");
    parse_bad("", "cron expression is empty");
    parse_bad(" \t ", "cron expression is empty");
    char longer[200];
    memset(longer, ' ', sizeof longer);
    memcpy(longer, "* * * * *", 9);
    longer[129] = '\0'; /* 129 bytes */
    parse_bad(longer, "longer than 128 bytes");
    longer[128] = '\0'; /* 128 bytes: fine */
    parse_ok(longer);
    /* Macros. */
    parse_bad("@reboot", "unknown cron macro '@reboot'");
    parse_bad("@every", "unknown cron macro");
    parse_bad("@", "unknown cron macro");
    parse_bad("@daily 5", "cron macro '@daily' takes nothing after it");
    parse_bad("0 @daily * * *", "cron field 'hour'");
    /* A failed parse leaves *out alone. */
    memset(&c, 0xab, sizeof c);
    assert_int_equal(cron_parse("* * * * 9", &c, err, sizeof err), -1);
    assert_int_equal(c.wdays, 0xab);
}

static void test_matches(void **state)
{
    (void)state;
    dq_cron c = parse_ok("30 9 * * MON-FRI");
    assert_true(cron_matches(&c, local(2025, 6, 2, 9, 30)));      /* Monday */
    assert_true(cron_matches(&c, local(2025, 6, 2, 9, 30) + 59)); /* seconds ignored */
    assert_false(cron_matches(&c, local(2025, 6, 1, 9, 30)));     /* Sunday */
    assert_false(cron_matches(&c, local(2025, 6, 2, 9, 31)));
    assert_false(cron_matches(&c, local(2025, 6, 2, 10, 30)));
    c = parse_ok("0 0 1 1 *");
    assert_true(cron_matches(&c, local(1960, 1, 1, 0, 0))); /* before 1970 */
    assert_false(cron_matches(&c, local(1960, 1, 2, 0, 0)));
}

/* ---------------------------------------------------------------- next, UTC */

static void test_next_utc_basics(void **state)
{
    (void)state;
    int64_t t0 = at(2025, 1, 1, 0, 0);
    assert_int_equal(next_utc("* * * * *", t0), t0 + 60); /* strictly after */
    assert_int_equal(next_utc("* * * * *", t0 - 1), t0);
    assert_int_equal(next_utc("* * * * *", t0 + 30), t0 + 60);
    assert_int_equal(next_utc("*/15 * * * *", t0), at(2025, 1, 1, 0, 15));
    assert_int_equal(next_utc("*/15 * * * *", at(2025, 1, 1, 0, 50)), at(2025, 1, 1, 1, 0));
    assert_int_equal(next_utc("5,35 */6 * * *", at(2025, 1, 1, 6, 40)), at(2025, 1, 1, 12, 5));
    assert_int_equal(next_utc("5,35 */6 * * *", at(2025, 1, 1, 18, 35)), at(2025, 1, 2, 0, 5));
    assert_int_equal(next_utc("0 9-17/4 * * *", at(2025, 1, 1, 13, 0)), at(2025, 1, 1, 17, 0));
    assert_int_equal(next_utc("@hourly", at(2025, 1, 1, 23, 0)), at(2025, 1, 2, 0, 0));
    assert_int_equal(next_utc("@weekly", at(2025, 1, 1, 0, 0)), at(2025, 1, 5, 0, 0)); /* a Sunday */
    assert_int_equal(next_utc("@monthly", at(2025, 1, 15, 0, 0)), at(2025, 2, 1, 0, 0));
    assert_int_equal(next_utc("@yearly", at(2025, 12, 31, 23, 59)), at(2026, 1, 1, 0, 0));
    /* Month ends and year ends. */
    assert_int_equal(next_utc("0 0 31 * *", at(2025, 1, 31, 0, 0)), at(2025, 3, 31, 0, 0));
    assert_int_equal(next_utc("0 12 30 * *", at(2025, 1, 30, 12, 0)), at(2025, 3, 30, 12, 0));
    assert_int_equal(next_utc("0 0 31 * *", at(2025, 8, 31, 0, 0)), at(2025, 10, 31, 0, 0));
    assert_int_equal(next_utc("59 23 31 12 *", at(2025, 6, 1, 0, 0)), at(2025, 12, 31, 23, 59));
    assert_int_equal(next_utc("0 0 1 * *", at(2025, 12, 31, 23, 59)), at(2026, 1, 1, 0, 0));
    assert_int_equal(next_utc("0 0 * 2 *", at(2025, 2, 28, 0, 0)), at(2026, 2, 1, 0, 0));
    /* Sunday as 7. */
    assert_int_equal(next_utc("0 0 * * 7", at(2025, 6, 1, 0, 0)), at(2025, 6, 8, 0, 0));
    /* Before 1970. */
    assert_int_equal(next_utc("0 0 1 1 *", at(1960, 6, 1, 0, 0)), at(1961, 1, 1, 0, 0));
    assert_int_equal(next_utc("30 12 * * *", at(1969, 12, 31, 12, 30) - 1), at(1969, 12, 31, 12, 30));
}

static void test_next_utc_leap_years(void **state)
{
    (void)state;
    const char *feb29 = "0 0 29 2 *";
    assert_int_equal(next_utc(feb29, at(2025, 1, 1, 0, 0)), at(2028, 2, 29, 0, 0));
    assert_int_equal(next_utc(feb29, at(2024, 2, 29, 0, 0) - 1), at(2024, 2, 29, 0, 0));
    assert_int_equal(next_utc(feb29, at(2028, 2, 29, 0, 0)), at(2032, 2, 29, 0, 0));
    assert_int_equal(next_utc(feb29, at(1999, 1, 1, 0, 0)), at(2000, 2, 29, 0, 0)); /* 2000: /400 */
    /* 2100 is not a leap year: eight years from 2096 to 2104, still inside
     * the horizon even from the very day. */
    assert_int_equal(next_utc(feb29, at(2096, 3, 1, 0, 0)), at(2104, 2, 29, 0, 0));
    assert_int_equal(next_utc(feb29, at(2096, 2, 29, 0, 0)), at(2104, 2, 29, 0, 0));
    assert_int_equal(next_utc(feb29, at(2396, 3, 1, 0, 0)), at(2400, 2, 29, 0, 0)); /* 2400 is */
    assert_int_equal(next_utc("0 12 28-31 2 *", at(2100, 2, 28, 12, 0)), at(2101, 2, 28, 12, 0));
    assert_int_equal(next_utc("0 12 28-31 2 *", at(2400, 2, 28, 12, 0)), at(2400, 2, 29, 12, 0));
    /* With a weekday: day 29, month 2, weekday 0 is Feb 29 or any Sunday in
     * February (the first is 2030-02-03). Weekday '*' stepped by 7 is
     * Sunday too, but starts with '*', so only a Feb 29 that is a Sunday
     * matches: 2032-02-29, then 2060-02-29, beyond the horizon. */
    assert_int_equal(next_utc("0 0 29 2 0", at(2030, 1, 1, 0, 0)), at(2030, 2, 3, 0, 0));
    assert_int_equal(next_utc("0 0 29 2 */7", at(2029, 3, 1, 0, 0)), at(2032, 2, 29, 0, 0));
    assert_int_equal(next_utc("0 0 29 2 */7", at(2032, 2, 29, 0, 0)), -1);
    assert_int_equal(next_utc("0 0 29 2 */7", at(2053, 3, 1, 0, 0)), at(2060, 2, 29, 0, 0));
    /* Never: reported as -1, not looped on. */
    assert_int_equal(next_utc("0 0 30 2 *", at(2025, 1, 1, 0, 0)), -1);
    assert_int_equal(next_utc("0 0 31 4,6,9,11 *", at(2025, 1, 1, 0, 0)), -1);
    /* In a zone: midnight Feb 29 in Berlin is 23:00 UTC the day before. */
    static const int64_t berlin[] = {1835391600 /* 2028-02-28T23:00Z */, 1961622000 /* 2032-02-28T23:00Z */};
    expect_fires(feb29, "Europe/Berlin", at(2025, 1, 1, 0, 0), berlin, 2);
}

static void test_next_utc_day_rule(void **state)
{
    (void)state;
    /* Both restricted: the 13th or a Monday (June 2025: Mondays 2, 9, 16;
     * the 13th is a Friday). */
    static const int64_t either[] = {1748822400 /* 06-02 */, 1749427200 /* 06-09 */, 1749772800 /* 06-13 */,
                                     1750032000 /* 06-16 */};
    expect_fires("0 0 13 * 1", "UTC", at(2025, 6, 1, 0, 0), either, 4);
    /* Day-of-month starts with '*': both must match (odd day and Monday). */
    const int64_t both[] = {at(2025, 6, 9, 0, 0), at(2025, 6, 23, 0, 0), at(2025, 7, 7, 0, 0)};
    expect_fires("0 0 */2 * 1", "UTC", at(2025, 6, 1, 0, 0), both, 3);
    /* Day-of-week starts with '*': the 13th on Sun/Tue/Thu/Sat only. */
    assert_int_equal(next_utc("0 0 13 * */2", at(2025, 6, 1, 0, 0)), at(2025, 7, 13, 0, 0));
    /* Plain '*' in one field: only the other counts. */
    assert_int_equal(next_utc("0 0 13 * *", at(2025, 6, 1, 0, 0)), at(2025, 6, 13, 0, 0));
    assert_int_equal(next_utc("0 0 * * 1", at(2025, 6, 1, 0, 0)), at(2025, 6, 2, 0, 0));
    /* The OR rule makes Feb 31 harmless: Mondays in February. */
    assert_int_equal(next_utc("0 0 31 2 1", at(2025, 1, 1, 0, 0)), at(2025, 2, 3, 0, 0));
}

static void test_upcoming(void **state)
{
    (void)state;
    dq_cron c = parse_ok("@yearly");
    int64_t out[4];
    assert_int_equal(cron_upcoming(&c, NULL, at(2025, 6, 1, 0, 0), out, 3), 3);
    assert_int_equal(out[0], at(2026, 1, 1, 0, 0));
    assert_int_equal(out[1], at(2027, 1, 1, 0, 0));
    assert_int_equal(out[2], at(2028, 1, 1, 0, 0));
    assert_int_equal(cron_upcoming(&c, NULL, 0, out, 0), 0);
    c = parse_ok("0 0 30 2 *");
    assert_int_equal(cron_upcoming(&c, NULL, 0, out, 4), 0);
    c = parse_ok("0 0 29 2 *");
    int64_t many[4];
    assert_int_equal(cron_upcoming(&c, NULL, at(2025, 1, 1, 0, 0), many, 4), 4);
    assert_int_equal(many[3], at(2040, 2, 29, 0, 0));
}

/* A rare expression must cost calendar steps, not minutes: 2000 full
 * eight-year searches take milliseconds that way, and hours minute by
 * minute (even under valgrind this bound is generous). */
static void test_next_is_fast(void **state)
{
    (void)state;
    dq_cron never = parse_ok("0 0 30 2 *"), feb29 = parse_ok("0 0 29 2 *");
    dq_tz *tz = zone("America/New_York");
    clock_t start = clock();
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(cron_next(&never, tz, at(2025, 1, 1, 0, 0) + i * 86400), -1);
        assert_true(cron_next(&feb29, tz, at(2096, 3, 1, 0, 0) + i * 60) > at(2104, 2, 28, 0, 0));
    }
    double secs = (double)(clock() - start) / CLOCKS_PER_SEC;
    tz_free(tz);
    if (secs > 20.0)
        fail_msg("2000 searches took %.1f s of CPU", secs);
}

/* ---------------------------------------------------------------- DST */

static void test_dst_berlin(void **state)
{
    (void)state;
    /* 2025-03-30: 02:00 CET -> 03:00 CEST at 01:00Z. 02:30 does not exist:
     * the daily job fires once, at the gap's end, then at 02:30 CEST. */
    static const int64_t spring[] = {1743211800 /* 03-29 02:30 CET */, 1743296400 /* 03-30 01:00Z */,
                                     1743381000 /* 03-31 02:30 CEST */};
    expect_fires("30 2 * * *", "Europe/Berlin", at(2025, 3, 28, 12, 0), spring, 3);
    /* Every skipped minute collapses into that one fire; 03:00 is the gap
     * end itself, so it joins them. */
    static const int64_t collapse[] = {1743296400, 1743296400 + 15 * 60, 1743296400 + 30 * 60};
    expect_fires("*/15 2,3 * * *", "Europe/Berlin", at(2025, 3, 30, 0, 0), collapse, 3);
    /* 2025-10-26: 03:00 CEST -> 02:00 CET at 01:00Z; 02:00-02:59 happen
     * twice and fire at the first (CEST) occurrence only. */
    static const int64_t fall[] = {1761352200 /* 10-25 02:30 CEST */, 1761438600 /* 10-26 00:30Z */,
                                   1761528600 /* 10-27 02:30 CET = 01:30Z */};
    expect_fires("30 2 * * *", "Europe/Berlin", at(2025, 10, 24, 12, 0), fall, 3);
    static const int64_t quarter[] = {1761436800, 1761437700, 1761438600, 1761439500, 1761526800};
    expect_fires("*/15 2 * * *", "Europe/Berlin", at(2025, 10, 25, 12, 0), quarter, 5);
    /* From inside the second pass, the repeated times are done. */
    dq_cron c = parse_ok("*/15 2 * * *");
    dq_tz *tz = zone("Europe/Berlin");
    assert_int_equal(cron_next(&c, tz, 1761442200 /* 02:30 CET */), 1761526800);
    assert_int_equal(cron_next(&c, tz, 1761439500 /* 02:45 CEST */), 1761526800);
    /* Between the passes (02:50 CEST) the next fire is tomorrow as well. */
    assert_int_equal(cron_next(&c, tz, 1761439500 + 300), 1761526800);
    tz_free(tz);
    /* Hourly through both changes: the repeated hour fires once, the
     * skipped one at the gap end together with 03:00. */
    c = parse_ok("0 * * * *");
    tz = zone("Europe/Berlin");
    int64_t out[16];
    assert_int_equal(cron_upcoming(&c, tz, at(2025, 10, 25, 23, 0), out, 4), 4);
    assert_int_equal(out[0], at(2025, 10, 26, 0, 0)); /* 02:00 CEST */
    assert_int_equal(out[1], at(2025, 10, 26, 2, 0)); /* 03:00 CET: 02:00 CET is a repeat */
    assert_int_equal(out[2], at(2025, 10, 26, 3, 0));
    assert_int_equal(cron_upcoming(&c, tz, at(2025, 3, 29, 23, 30), out, 3), 3);
    assert_int_equal(out[0], at(2025, 3, 30, 0, 0)); /* 01:00 CET */
    assert_int_equal(out[1], at(2025, 3, 30, 1, 0)); /* 02:00 skipped and 03:00 CEST: one fire */
    assert_int_equal(out[2], at(2025, 3, 30, 2, 0)); /* 04:00 CEST */
    tz_free(tz);
}

static void test_dst_new_york(void **state)
{
    (void)state;
    /* 2025-03-09: 02:00 EST -> 03:00 EDT at 07:00Z. */
    static const int64_t spring[] = {1741419000 /* 03-08 02:30 EST */, 1741503600 /* gap end */,
                                     1741588200 /* 03-10 02:30 EDT */};
    expect_fires("30 2 * * *", "America/New_York", at(2025, 3, 7, 12, 0), spring, 3);
    /* 2025-11-02: 02:00 EDT -> 01:00 EST at 06:00Z. 01:30 fires once, at
     * 01:30 EDT; every quarter of the 1 o'clock hour fires once. */
    static const int64_t once[] = {1762061400 /* 05:30Z */, 1762151400 /* 11-03 01:30 EST */};
    expect_fires("30 1 * * *", "America/New_York", at(2025, 11, 1, 12, 0), once, 2);
    static const int64_t quarters[] = {1762059600, 1762060500, 1762061400, 1762062300, 1762149600};
    expect_fires("*/15 1 * * *", "America/New_York", at(2025, 11, 1, 12, 0), quarters, 5);
    dq_cron c = parse_ok("*/15 1 * * *");
    dq_tz *tz = zone("America/New_York");
    assert_int_equal(cron_next(&c, tz, 1762063800 /* 01:10 EST */), 1762149600);
    assert_int_equal(cron_next(&c, tz, 1762062300 /* 01:45 EDT */), 1762149600);
    assert_int_equal(cron_next(&c, tz, 1762062300 - 1), 1762062300);
    tz_free(tz);
    /* The footer rule in 2100 (past the last stored transition). */
    static const int64_t y2100[] = {4108690800 /* 2100-03-14T07:00Z */, 4129246800 /* 11-07 01:00 EDT */};
    expect_fires("0 2 14 3 *", "America/New_York", at(2100, 1, 1, 0, 0), y2100, 1);
    expect_fires("0 1 7 11 *", "America/New_York", at(2100, 10, 1, 0, 0), y2100 + 1, 1);
}

static void test_dst_lord_howe(void **state)
{
    (void)state;
    /* +10:30 standard, +11:00 summer: a 30-minute change.
     * 2025-10-05 02:00 -> 02:30 at 2025-10-04T15:30Z: 02:00-02:29 skipped. */
    static const int64_t spring[] = {1759591800, 1759591800 + 600, 1759591800 + 1200, 1759678200 - 1800};
    /* 02:00, 02:10, 02:20 (skipped) and 02:30 (the gap end) fire once
     * together; then 02:40, 02:50; then 02:00 next day (+11). */
    expect_fires("*/10 2 * * *", "Australia/Lord_Howe", at(2025, 10, 4, 12, 0), spring, 4);
    /* 2025-04-06 02:00 (+11) -> 01:30 (+10:30) at 2025-04-05T15:00Z:
     * 01:30-01:59 repeat. */
    const int64_t fall[] = {at(2025, 4, 5, 14, 0), at(2025, 4, 5, 14, 15), at(2025, 4, 5, 14, 30),
                                   at(2025, 4, 5, 14, 45), at(2025, 4, 6, 14, 30)};
    expect_fires("*/15 1 * * *", "Australia/Lord_Howe", at(2025, 4, 5, 12, 0), fall, 5);
    dq_tz *tz = zone("Australia/Lord_Howe");
    assert_int_equal(tz_offset(tz, 1759591800 - 1), 37800);
    assert_int_equal(tz_offset(tz, 1759591800), 39600);
    assert_int_equal(tz_offset(tz, 1743865200 - 1), 39600);
    assert_int_equal(tz_offset(tz, 1743865200), 37800);
    int64_t first = 0, second = 0;
    assert_int_equal(tz_local_to_utc(tz, local(2025, 10, 5, 2, 15), &first, &second), 0);
    assert_int_equal(first, 1759591800);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 4, 6, 1, 45), &first, &second), 2);
    assert_int_equal(first, at(2025, 4, 5, 14, 45));
    assert_int_equal(second, at(2025, 4, 5, 15, 15));
    /* 2050, from the footer: 2050-10-02 02:00 -> 02:30 at 2050-10-01T15:30Z. */
    assert_int_equal(tz_offset(tz, 2548251000 - 1), 37800);
    assert_int_equal(tz_offset(tz, 2548251000), 39600);
    tz_free(tz);
}

static void test_kolkata(void **state)
{
    (void)state;
    /* +05:30 all year: 09:00 is 03:30Z, and :30 past is :00 UTC. */
    const int64_t nine[] = {at(2025, 6, 1, 3, 30), at(2025, 6, 2, 3, 30)};
    expect_fires("0 9 * * *", "Asia/Kolkata", at(2025, 6, 1, 0, 0), nine, 2);
    const int64_t half[] = {at(2025, 6, 1, 1, 0), at(2025, 6, 1, 2, 0)};
    expect_fires("30 * * * *", "Asia/Kolkata", at(2025, 6, 1, 0, 30), half, 2);
    dq_tz *tz = zone("Asia/Kolkata");
    assert_int_equal(tz_offset(tz, at(2025, 1, 1, 0, 0)), 19800);
    assert_int_equal(tz_offset(tz, at(2060, 7, 1, 0, 0)), 19800);
    assert_int_equal(tz_offset(tz, -3786825600LL /* 1850 */), 21208); /* LMT, before any transition */
    int64_t first = 0, second = 0;
    assert_int_equal(tz_local_to_utc(tz, local(2025, 1, 1, 5, 30), &first, &second), 1);
    assert_int_equal(first, at(2025, 1, 1, 0, 0));
    tz_free(tz);
}

static void test_southern_hemisphere(void **state)
{
    (void)state;
    /* Sydney: 2025-10-05 02:00 AEST -> 03:00 AEDT at 2025-10-04T16:00Z;
     * 2025-04-06 03:00 AEDT -> 02:00 AEST at 2025-04-05T16:00Z. */
    const int64_t spring[] = {1759593600, at(2025, 10, 5, 15, 30)};
    expect_fires("30 2 * * *", "Australia/Sydney", at(2025, 10, 4, 0, 0), spring, 2);
    const int64_t fall[] = {at(2025, 4, 5, 15, 30) /* 02:30 AEDT */, at(2025, 4, 6, 16, 30)};
    expect_fires("30 2 * * *", "Australia/Sydney", at(2025, 4, 5, 0, 0), fall, 2);
    dq_tz *tz = zone("Australia/Sydney");
    assert_int_equal(tz_offset(tz, at(2025, 1, 15, 0, 0)), 39600); /* January is summer */
    assert_int_equal(tz_offset(tz, at(2025, 7, 15, 0, 0)), 36000);
    assert_int_equal(tz_offset(tz, at(2041, 1, 15, 0, 0)), 39600);
    assert_int_equal(tz_offset(tz, at(2041, 7, 15, 0, 0)), 36000);
    tz_free(tz);

    /* Santiago changes at 24:00: 2025-09-06 24:00 -04 -> 01:00 -03 at
     * 2025-09-07T04:00Z, so midnight does not exist that day. */
    const int64_t midnight[] = {at(2025, 9, 6, 4, 0), 1757217600, at(2025, 9, 8, 3, 0)};
    expect_fires("0 0 * * *", "America/Santiago", at(2025, 9, 5, 12, 0), midnight, 3);
    /* 2025-04-05 24:00 -03 -> 23:00 -04 at 2025-04-06T03:00Z: 23:30 twice. */
    const int64_t late[] = {1743906600 /* 23:30 -03 */, at(2025, 4, 7, 3, 30)};
    expect_fires("30 23 * * *", "America/Santiago", at(2025, 4, 5, 12, 0), late, 2);
    tz = zone("America/Santiago");
    int64_t first = 0, second = 0;
    assert_int_equal(tz_local_to_utc(tz, local(2025, 9, 7, 0, 30), &first, &second), 0);
    assert_int_equal(first, 1757217600);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 4, 5, 23, 30), &first, &second), 2);
    assert_int_equal(first, 1743906600);
    assert_int_equal(second, 1743910200);
    tz_free(tz);
}

/* ---------------------------------------------------------------- offsets */

static void test_offsets(void **state)
{
    (void)state;
    dq_tz *tz = zone("Europe/Berlin");
    assert_string_equal(tz_name(tz), "Europe/Berlin");
    assert_int_equal(tz_offset(tz, 1743296400 - 1), 3600);
    assert_int_equal(tz_offset(tz, 1743296400), 7200);
    assert_int_equal(tz_offset(tz, 1761440400 - 1), 7200);
    assert_int_equal(tz_offset(tz, 1761440400), 3600);
    /* Past the stored transitions (2037), the footer rule:
     * 2045-03-26T01:00Z and 2045-10-29T01:00Z. */
    assert_int_equal(tz_offset(tz, 2374102800 - 1), 3600);
    assert_int_equal(tz_offset(tz, 2374102800), 7200);
    assert_int_equal(tz_offset(tz, 2392851600 - 1), 7200);
    assert_int_equal(tz_offset(tz, 2392851600), 3600);
    assert_int_equal(tz_offset(tz, at(2400, 7, 1, 0, 0)), 7200);
    assert_int_equal(tz_offset(tz, at(9999, 12, 31, 0, 0)), 3600);
    /* Before the first transition (1893-03-31T23:06:32Z): local mean time. */
    assert_int_equal(tz_offset(tz, -2424729600LL /* 1893-03-01 */), 3208);
    assert_int_equal(tz_offset(tz, INT64_MIN), 3208);
    /* Historic: 1945 had double summer time (+3). */
    assert_int_equal(tz_offset(tz, at(1945, 6, 1, 0, 0)), 10800);

    int64_t first = 0, second = 0;
    assert_int_equal(tz_local_to_utc(tz, local(2025, 7, 1, 12, 0), &first, &second), 1);
    assert_int_equal(first, at(2025, 7, 1, 10, 0));
    /* Gap: [02:00, 03:00) on 2025-03-30. */
    assert_int_equal(tz_local_to_utc(tz, local(2025, 3, 30, 1, 59), &first, &second), 1);
    assert_int_equal(first, at(2025, 3, 30, 0, 59));
    assert_int_equal(tz_local_to_utc(tz, local(2025, 3, 30, 2, 0), &first, &second), 0);
    assert_int_equal(first, 1743296400);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 3, 30, 2, 59), &first, &second), 0);
    assert_int_equal(first, 1743296400);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 3, 30, 3, 0), &first, &second), 1);
    assert_int_equal(first, 1743296400);
    /* Overlap: [02:00, 03:00) on 2025-10-26. */
    assert_int_equal(tz_local_to_utc(tz, local(2025, 10, 26, 1, 59), &first, &second), 1);
    assert_int_equal(first, at(2025, 10, 25, 23, 59));
    assert_int_equal(tz_local_to_utc(tz, local(2025, 10, 26, 2, 0), &first, &second), 2);
    assert_int_equal(first, at(2025, 10, 26, 0, 0));
    assert_int_equal(second, at(2025, 10, 26, 1, 0));
    assert_int_equal(tz_local_to_utc(tz, local(2025, 10, 26, 2, 30), &first, &second), 2);
    assert_int_equal(first, 1761438600);
    assert_int_equal(second, 1761442200);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 10, 26, 3, 0), &first, &second), 1);
    assert_int_equal(first, at(2025, 10, 26, 2, 0));
    /* 2045, from the footer. */
    assert_int_equal(tz_local_to_utc(tz, local(2045, 3, 26, 2, 30), &first, &second), 0);
    assert_int_equal(first, 2374102800);
    assert_int_equal(tz_local_to_utc(tz, local(2045, 10, 29, 2, 30), &first, &second), 2);
    assert_int_equal(first, 2392851600 - 1800);
    assert_int_equal(second, 2392851600 + 1800);
    static const int64_t future[] = {2374102800, 2374102800 + 86400 - 1800};
    expect_fires("30 2 * * *", "Europe/Berlin", at(2045, 3, 25, 12, 0), future, 2);
    tz_free(tz);

    tz = zone("America/New_York");
    assert_int_equal(tz_offset(tz, -2840140800LL /* 1880 */), -17762);
    assert_int_equal(tz_offset(tz, 1762063200 - 1), -14400);
    assert_int_equal(tz_offset(tz, 1762063200), -18000);
    assert_int_equal(tz_offset(tz, 4129250400 - 1), -14400); /* 2100-11-07T06:00Z */
    assert_int_equal(tz_offset(tz, 4129250400), -18000);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 11, 2, 1, 30), &first, &second), 2);
    assert_int_equal(first, 1762061400);
    assert_int_equal(second, 1762065000);
    assert_int_equal(tz_local_to_utc(tz, local(2025, 3, 9, 2, 30), &first, &second), 0);
    assert_int_equal(first, 1741503600);
    tz_free(tz);

    tz = zone("UTC");
    assert_int_equal(tz_offset(tz, 1743296400), 0);
    assert_int_equal(tz_local_to_utc(tz, 1743296400, &first, &second), 1);
    assert_int_equal(first, 1743296400);
    tz_free(tz);
    tz_free(NULL);

    /* The ends of int64: clamped, no overflow (the sanitizer build checks). */
    tz = zone("Australia/Lord_Howe");
    assert_int_equal(tz_offset(tz, INT64_MAX), tz_offset(tz, (int64_t)1 << 56));
    assert_true(tz_local_to_utc(tz, INT64_MAX, &first, &second) >= 0);
    assert_true(tz_local_to_utc(tz, INT64_MIN, &first, &second) >= 0);
    dq_cron c = parse_ok("* * * * *");
    assert_int_equal(cron_next(&c, tz, INT64_MAX), -1);
    assert_int_equal(cron_next(&c, tz, INT64_MIN), -1);
    assert_int_equal(cron_next(&c, tz, (int64_t)1 << 55), ((int64_t)1 << 55) + 60 - ((int64_t)1 << 55) % 60);
    tz_free(tz);
}

/* ---------------------------------------------------------------- loading */

static void load_bad(const char *name, const char *needle)
{
    char err[512] = "";
    dq_tz *tz = tz_load(name, err, sizeof err);
    if (tz) {
        tz_free(tz);
        fail_msg("loaded: '%s'", name ? name : "(null)");
    }
    if (!strstr(err, needle))
        fail_msg("error for '%s' is '%s', which does not mention '%s'", name ? name : "(null)", err, needle);
}

static void test_bad_names(void **state)
{
    (void)state;
    load_bad("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'");
    load_bad("Europe", "unknown time zone 'Europe'"); /* a directory */
    load_bad("", "time zone name is empty");
    load_bad(NULL, "time zone name is empty");
    load_bad("/etc/localtime", "absolute path");
    load_bad("/usr/share/zoneinfo/UTC", "absolute path");
    load_bad("../../etc/passwd", "has byte 0x2e at offset 0");
    load_bad("Europe/../../../etc/passwd", "has byte 0x2e at offset 7");
    load_bad("Europe/Berlin.", "has byte 0x2e at offset 13; use letters, digits");
    load_bad("Europe/Ber lin", "has byte 0x20 at offset 10");
    load_bad("Europe\\Berlin", "has byte 0x5c at offset 6");
    load_bad("/etc/\x01", "has byte 0x01 at offset 5"); /* not quoted as an absolute path */
    load_bad("Europe//Berlin", "empty path component");
    load_bad("Europe/Berlin/", "empty path component");
    char name[80];
    memset(name, 'A', sizeof name);
    name[65] = '\0';
    load_bad(name, "longer than 64 bytes");
    name[64] = '\0'; /* 64 bytes: a legal name, just not a zone */
    load_bad(name, "unknown time zone");
    /* Plain names with '+', '-' and '_' are fine. */
    tz_free(zone("Etc/GMT+5"));
    tz_free(zone("America/Port-au-Prince"));
    tz_free(zone("America/Los_Angeles"));
    dq_tz *tz = zone("Etc/GMT+5");
    assert_int_equal(tz_offset(tz, 0), -18000); /* POSIX signs: GMT+5 is UTC-5 */
    tz_free(tz);
}

/* TZif files built by hand in a private $TZDIR. */
typedef struct {
    unsigned char b[1024];
    size_t n;
} tzbuf;

static void put(tzbuf *t, const void *p, size_t n)
{
    assert_true(t->n + n <= sizeof t->b);
    if (n > 0) /* p may be NULL for an empty list */
        memcpy(t->b + t->n, p, n);
    t->n += n;
}

static void put_be(tzbuf *t, int64_t v, int bytes)
{
    unsigned char c[8];
    for (int i = 0; i < bytes; i++)
        c[i] = (unsigned char)((uint64_t)v >> (8 * (bytes - 1 - i)));
    put(t, c, (size_t)bytes);
}

/* One header and data block: transitions at times[] to types idx[], types
 * with offsets offs[] (isdst 0, all named "ZZZ"), leap leap-second records. */
static void put_block(tzbuf *t, char version, int tsize, int ntimes, const int64_t *times,
                      const unsigned char *idx, int ntypes, const int32_t *offs, int leap)
{
    put(t, "TZif", 4);
    put(t, &version, 1);
    static const unsigned char zero[15] = {0};
    put(t, zero, 15);
    int32_t counts[6] = {0, 0, leap, ntimes, ntypes, 4};
    for (int i = 0; i < 6; i++)
        put_be(t, counts[i], 4);
    for (int i = 0; i < ntimes; i++)
        put_be(t, times[i], tsize);
    put(t, idx, (size_t)ntimes);
    for (int i = 0; i < ntypes; i++) {
        put_be(t, offs[i], 4);
        put(t, "\0\0", 2);
    }
    put(t, "ZZZ", 4);
    for (int i = 0; i < leap; i++) {
        put_be(t, 78796800, tsize);
        put_be(t, 1, 4);
    }
}

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A version 2+ file: a v1 block saying "+01 always", then the real data. */
static void write_v2(const char *dir, const char *name, char version, int ntimes, const int64_t *times,
                     const unsigned char *idx, int ntypes, const int32_t *offs, const char *footer, int leap)
{
    tzbuf t = {.n = 0};
    static const int32_t one_hour[] = {3600};
    put_block(&t, version, 4, 0, NULL, NULL, 1, one_hour, 0);
    put_block(&t, version, 8, ntimes, times, idx, ntypes, offs, leap);
    put(&t, "\n", 1);
    put(&t, footer, strlen(footer));
    put(&t, "\n", 1);
    write_file(dir, name, t.b, t.n);
}

static void test_tzif_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/delayq-test-tz-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[600];
    snprintf(sub, sizeof sub, "%s/Test", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    const char *old = getenv("TZDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TZDIR", dir, 1);

    /* Version 1: 32-bit times, no footer; the last type lasts forever. */
    tzbuf t = {.n = 0};
    static const int64_t v1_times[] = {1000000000};
    static const unsigned char v1_idx[] = {1};
    static const int32_t v1_offs[] = {3600, 7200};
    put_block(&t, 0, 4, 1, v1_times, v1_idx, 2, v1_offs, 0);
    write_file(sub, "V1", t.b, t.n);
    dq_tz *tz = zone("Test/V1");
    assert_int_equal(tz_offset(tz, 999999999), 3600);
    assert_int_equal(tz_offset(tz, 1000000000), 7200);
    assert_int_equal(tz_offset(tz, 4000000000LL), 7200);
    int64_t first = 0, second = 0;
    assert_int_equal(tz_local_to_utc(tz, 1000000000 + 3600 + 1800, &first, &second), 0);
    assert_int_equal(first, 1000000000);
    tz_free(tz);

    /* Version 2: the 64-bit block is the one read (a transition past 2038
     * that 32 bits cannot hold); an empty footer keeps the last type. */
    static const int64_t v2_times[] = {-5000000000LL, 8589934592LL};
    static const unsigned char v2_idx[] = {1, 0};
    static const int32_t v2_offs[] = {7200, -3600};
    write_v2(sub, "V2", '2', 2, v2_times, v2_idx, 2, v2_offs, "", 0);
    tz = zone("Test/V2");
    assert_int_equal(tz_offset(tz, -5000000001LL), 7200); /* type 0 before the first */
    assert_int_equal(tz_offset(tz, -5000000000LL), -3600);
    assert_int_equal(tz_offset(tz, 8589934591LL), -3600);
    assert_int_equal(tz_offset(tz, 8589934592LL), 7200);
    assert_int_equal(tz_offset(tz, INT64_MAX), 7200);
    tz_free(tz);

    /* Version 3, no transitions: the footer governs everything. J60 is
     * March 1 in every year, 299 is zero-based (Oct 27, or Oct 26 in a leap
     * year), 25:00 runs into the next day. Checked against
     * TZ='XST-2XDT-3,J60/0,299/25' date. */
    static const int32_t xst[] = {7200};
    write_v2(sub, "Rule", '3', 0, NULL, NULL, 1, xst, "XST-2XDT-3,J60/0,299/25", 0);
    tz = zone("Test/Rule");
    assert_int_equal(tz_offset(tz, at(2025, 2, 28, 22, 0) - 1), 7200);
    assert_int_equal(tz_offset(tz, at(2025, 2, 28, 22, 0)), 10800);
    assert_int_equal(tz_offset(tz, at(2025, 10, 27, 22, 0) - 1), 10800);
    assert_int_equal(tz_offset(tz, at(2025, 10, 27, 22, 0)), 7200);
    assert_int_equal(tz_offset(tz, at(2028, 2, 29, 22, 0) - 1), 7200);
    assert_int_equal(tz_offset(tz, at(2028, 2, 29, 22, 0)), 10800);
    assert_int_equal(tz_offset(tz, at(2028, 10, 26, 22, 0) - 1), 10800);
    assert_int_equal(tz_offset(tz, at(2028, 10, 26, 22, 0)), 7200);
    assert_int_equal(tz_offset(tz, at(1900, 7, 1, 0, 0)), 10800);
    tz_free(tz);

    /* Year-round DST (a v3 extension) and negative rule times. */
    static const int32_t est[] = {-18000};
    write_v2(sub, "AllDST", '3', 0, NULL, NULL, 1, est, "EST5EDT,0/0,J365/25", 0);
    tz = zone("Test/AllDST");
    for (int y = 2020; y < 2030; y++) {
        assert_int_equal(tz_offset(tz, at(y, 1, 1, 5, 0)), -14400);
        assert_int_equal(tz_offset(tz, at(y, 1, 1, 4, 0)), -14400);
        assert_int_equal(tz_offset(tz, at(y, 7, 1, 0, 0)), -14400);
    }
    assert_int_equal(tz_local_to_utc(tz, local(2025, 1, 1, 0, 30), &first, &second), 1);
    assert_int_equal(first, at(2025, 1, 1, 4, 30));
    tz_free(tz);
    static const int32_t m2[] = {-7200};
    write_v2(sub, "Neg", '4', 0, NULL, NULL, 1, m2, "<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 0);
    tz = zone("Test/Neg");
    assert_int_equal(tz_offset(tz, at(2025, 3, 30, 1, 0) - 1), -7200);
    assert_int_equal(tz_offset(tz, at(2025, 3, 30, 1, 0)), -3600);
    assert_int_equal(tz_offset(tz, at(2025, 10, 26, 1, 0) - 1), -3600);
    assert_int_equal(tz_offset(tz, at(2025, 10, 26, 1, 0)), -7200);
    tz_free(tz);

    /* Damaged and unusable files. */
    write_file(sub, "Text", "hello, world\n", 13);
    load_bad("Test/Text", "not a TZif file");
    write_v2(sub, "Leap", '2', 0, NULL, NULL, 1, xst, "XST-2", 1);
    load_bad("Test/Leap", "leap seconds");
    write_v2(sub, "BadFooter", '2', 0, NULL, NULL, 1, xst, "XST-2XDT,M13.1.0,M10.5.0", 0);
    load_bad("Test/BadFooter", "TZ string 'XST-2XDT,M13.1.0,M10.5.0' is not understood");
    t.n = 0;
    put_block(&t, '2', 4, 1, v1_times, v1_idx, 2, v1_offs, 0);
    write_file(sub, "Truncated", t.b, t.n); /* the 64-bit part is missing */
    load_bad("Test/Truncated", "truncated or damaged");
    t.n = 0;
    static const unsigned char bad_idx[] = {5};
    put_block(&t, 0, 4, 1, v1_times, bad_idx, 2, v1_offs, 0);
    write_file(sub, "BadIndex", t.b, t.n);
    load_bad("Test/BadIndex", "truncated or damaged");
    write_file(sub, "Empty", "", 0);
    load_bad("Test/Empty", "not a TZif file");

    /* UTC needs no file; other zones do. */
    tz = zone("UTC");
    assert_int_equal(tz_offset(tz, 1743296400), 0);
    dq_cron c = parse_ok("0 0 * * *");
    assert_int_equal(cron_next(&c, tz, at(2025, 1, 1, 0, 0)), at(2025, 1, 2, 0, 0));
    tz_free(tz);
    load_bad("Europe/Berlin", "unknown time zone 'Europe/Berlin'");

    const char *names[] = {"V1", "V2", "Rule", "AllDST", "Neg", "Text", "Leap", "BadFooter", "Truncated",
                           "BadIndex", "Empty"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", sub, names[i]);
        unlink(path);
    }
    rmdir(sub);
    rmdir(dir);
    if (saved) {
        setenv("TZDIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TZDIR");
    }
}

/* ------------------------------------------------------- error messages */

/* An error message is printable ASCII whatever byte the input held, since
 * it is quoted into JSON answers and log lines. */
static void assert_printable(const char *what, const char *input, const char *err)
{
    for (const char *p = err; *p; p++) {
        if (*p < ' ' || *p > '~')
            fail_msg("%s '%s': error '%s' has byte 0x%02x", what, input, err, (unsigned char)*p);
    }
}

static void with_byte(char *out, size_t outlen, const char *shape, int b)
{
    snprintf(out, outlen, "%s", shape);
    *strchr(out, '#') = (char)b;
}

static void test_errors_are_printable(void **state)
{
    (void)state;
    /* '#' marks where the byte goes. */
    static const char *cron_shapes[] = {"# * * * *", "5# * * * *", "* * * * mon/#", "@#daily",
                                        "@daily #", "1-# * * * *", "*/# * * * *", "0 3 * * mon/p#0"};
    static const char *zone_shapes[] = {"#", "/#", "Europe/#Berlin", "Europe/Berlin#", "#/UTC"};
    char input[64], err[256];
    for (int b = 1; b < 256; b++) {
        for (size_t i = 0; i < sizeof cron_shapes / sizeof cron_shapes[0]; i++) {
            with_byte(input, sizeof input, cron_shapes[i], b);
            dq_cron c;
            err[0] = '\0';
            if (cron_parse(input, &c, err, sizeof err) < 0)
                assert_printable("cron", input, err);
        }
        for (size_t i = 0; i < sizeof zone_shapes / sizeof zone_shapes[0]; i++) {
            with_byte(input, sizeof input, zone_shapes[i], b);
            err[0] = '\0';
            dq_tz *tz = tz_load(input, err, sizeof err);
            if (tz)
                tz_free(tz);
            else
                assert_printable("zone", input, err);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_civil),
        cmocka_unit_test(test_parse_syntax),
        cmocka_unit_test(test_parse_macros),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_matches),
        cmocka_unit_test(test_next_utc_basics),
        cmocka_unit_test(test_next_utc_leap_years),
        cmocka_unit_test(test_next_utc_day_rule),
        cmocka_unit_test(test_upcoming),
        cmocka_unit_test(test_next_is_fast),
        cmocka_unit_test(test_dst_berlin),
        cmocka_unit_test(test_dst_new_york),
        cmocka_unit_test(test_dst_lord_howe),
        cmocka_unit_test(test_kolkata),
        cmocka_unit_test(test_southern_hemisphere),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_tzif_files),
        cmocka_unit_test(test_errors_are_printable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

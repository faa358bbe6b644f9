/* Unit tests for src/sched/sched_time.c: when a schedule fires (cron or every,
 * with start and end) and how fires missed while no timer ran collapse
 * into one. Expected instants are worked out by hand from the rules in
 * docs/PROTOCOL.md, not taken from the code under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sched/sched_time.h"

/* A UTC instant. */
static int64_t at(int64_t y, int mo, int d, int h, int mi)
{
    return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60;
}

static dq_sched every(int64_t every_s, int64_t anchor_s)
{
    dq_sched s;
    memset(&s, 0, sizeof s);
    s.every_s = every_s;
    s.anchor_s = anchor_s;
    s.start_s = s.end_s = SCHED_NONE;
    return s;
}

static dq_sched cron(const char *expr, const dq_tz *tz)
{
    dq_sched s;
    char err[256] = "";
    memset(&s, 0, sizeof s);
    s.is_cron = 1;
    s.tz = tz;
    s.start_s = s.end_s = SCHED_NONE;
    if (cron_parse(expr, &s.cron, err, sizeof err) < 0)
        fail_msg("'%s' rejected: %s", expr, err);
    return s;
}

static void test_every_next(void **state)
{
    (void)state;
    dq_sched s = every(300, 1000);
    assert_int_equal(sched_next(&s, 0), 1000);      /* before the anchor: the anchor */
    assert_int_equal(sched_next(&s, 999), 1000);
    assert_int_equal(sched_next(&s, 1000), 1300);   /* strictly after */
    assert_int_equal(sched_next(&s, 1299), 1300);
    assert_int_equal(sched_next(&s, 1300), 1600);
    assert_int_equal(sched_next(&s, 100000), 100300); /* 1000 + 331 * 300 */
    s.end_s = 1600;
    assert_int_equal(sched_next(&s, 1300), 1600);   /* end is inclusive */
    assert_int_equal(sched_next(&s, 1600), SCHED_NONE);
    s.end_s = SCHED_NONE;
    s.start_s = 1000;
    assert_int_equal(sched_next(&s, 0), 1000);
    int64_t out[4];
    assert_int_equal(sched_upcoming(&s, 1000, out, 4), 4);
    assert_int_equal(out[0], 1300);
    assert_int_equal(out[3], 2200);
    s.end_s = 1900;
    assert_int_equal(sched_upcoming(&s, 1000, out, 4), 3);
}

static void test_cron_start_end(void **state)
{
    (void)state;
    dq_sched s = cron("0 3 * * *", NULL);
    int64_t t0 = at(2030, 1, 1, 12, 0);
    assert_int_equal(sched_next(&s, t0), at(2030, 1, 2, 3, 0));
    s.start_s = at(2030, 2, 1, 3, 0); /* a fire exactly at start fires */
    assert_int_equal(sched_next(&s, t0), at(2030, 2, 1, 3, 0));
    s.end_s = at(2030, 2, 2, 2, 59);
    assert_int_equal(sched_next(&s, at(2030, 2, 1, 3, 0)), SCHED_NONE);
    dq_sched never = cron("0 0 30 2 *", NULL);
    assert_int_equal(sched_next(&never, t0), SCHED_NONE);
}

static void test_dst_gap_preview(void **state)
{
    (void)state;
    char err[256] = "";
    dq_tz *ny = tz_load("America/New_York", err, sizeof err);
    if (!ny)
        fail_msg("America/New_York: %s", err);
    /* 2030-03-10 02:30 does not exist in New York (02:00 EST -> 03:00 EDT
     * at 07:00Z): it fires when the gap ends, 07:00Z; the days around it at
     * 02:30 EST (07:30Z) and EDT (06:30Z). */
    dq_sched s = cron("30 2 * * *", ny);
    int64_t out[3];
    assert_int_equal(sched_upcoming(&s, at(2030, 3, 9, 0, 0), out, 3), 3);
    assert_int_equal(out[0], at(2030, 3, 9, 7, 30));
    assert_int_equal(out[1], at(2030, 3, 10, 7, 0));
    assert_int_equal(out[2], at(2030, 3, 11, 6, 30));
    tz_free(ny);
}

static void test_catch_up_every(void **state)
{
    (void)state;
    dq_sched s = every(60, 0);
    int64_t fire, missed, next;
    /* Nothing else due: the due one fires. */
    sched_catch_up(&s, 600, 630, 1000, &fire, &missed, &next);
    assert_int_equal(fire, 600);
    assert_int_equal(missed, 0);
    assert_int_equal(next, 660);
    /* Due 600, 660, ..., 900 by 930: 900 fires, five missed. */
    sched_catch_up(&s, 600, 930, 1000, &fire, &missed, &next);
    assert_int_equal(fire, 900);
    assert_int_equal(missed, 5);
    assert_int_equal(next, 960);
    /* A due time off the grid (a replaced schedule) counts as one. */
    sched_catch_up(&s, 590, 630, 1000, &fire, &missed, &next);
    assert_int_equal(fire, 600);
    assert_int_equal(missed, 1);
    /* No fire after end: the last one before it fires, none follows. */
    s.end_s = 800;
    sched_catch_up(&s, 600, 930, 1000, &fire, &missed, &next);
    assert_int_equal(fire, 780);
    assert_int_equal(missed, 3);
    assert_int_equal(next, SCHED_NONE);
}

static void test_catch_up_cron(void **state)
{
    (void)state;
    dq_sched s = cron("*/10 * * * *", NULL);
    int64_t base = at(2030, 5, 1, 0, 0), fire, missed, next;
    sched_catch_up(&s, base, base + 3599, 1000, &fire, &missed, &next);
    assert_int_equal(fire, base + 3000); /* 00:50 */
    assert_int_equal(missed, 5);
    assert_int_equal(next, base + 3600);
    /* Out of steps: nothing fires yet; it goes on from the last reached. */
    sched_catch_up(&s, base, base + 3599, 2, &fire, &missed, &next);
    assert_int_equal(fire, SCHED_NONE);
    assert_int_equal(missed, 2);
    assert_int_equal(next, base + 1200);
    sched_catch_up(&s, next, base + 3599, 1000, &fire, &missed, &next);
    assert_int_equal(fire, base + 3000);
    assert_int_equal(missed, 3); /* 2 + 3 + the one that fires = the six due */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_next),
        cmocka_unit_test(test_cron_start_end),
        cmocka_unit_test(test_dst_gap_preview),
        cmocka_unit_test(test_catch_up_every),
        cmocka_unit_test(test_catch_up_cron),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

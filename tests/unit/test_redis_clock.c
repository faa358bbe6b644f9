/* Unit tests for src/timer/redis_clock.c: a node's clock learnt from calls
 * that answer with its time in ms, kept as the intersection of what the
 * samples allow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "timer/redis_clock.h"

/* The node's clock runs this far ahead of the monotonic one (us). */
#define TRUE_OFFSET 1700000000123456LL

/* A call sent at sent_us that Redis ran at ran_us and answered at
 * answered_us (monotonic us): it reads the ms of its clock then. */
static void sample(redis_clock *c, int64_t sent_us, int64_t ran_us, int64_t answered_us)
{
    redis_clock_learn(c, (ran_us + TRUE_OFFSET) / 1000, sent_us, answered_us);
}

/* Calls 1.373 ms apart (so they fall at every point of Redis' ms), each
 * run 50 us after its send and answered 50 us later, from from_us to
 * to_us. */
static void steady_samples(redis_clock *c, int64_t from_us, int64_t to_us)
{
    for (int64_t t = from_us; t < to_us; t += 1373)
        sample(c, t, t + 50, t + 100);
}

/* How far off the estimate of when Redis reaches a ms is, in us. */
static int64_t error_us(const redis_clock *c)
{
    int64_t ms = (TRUE_OFFSET + 50000000) / 1000;
    return redis_clock_mono_us(c, ms) - (ms * 1000 - TRUE_OFFSET);
}

static int64_t abs64(int64_t x)
{
    return x < 0 ? -x : x;
}

static void test_unknown_means_at_once(void **state)
{
    (void)state;
    redis_clock c = {0};
    assert_int_equal(redis_clock_mono_us(&c, 1700000000000LL), 0);
}

static void test_one_sample_is_within_its_round_trip_and_ms(void **state)
{
    (void)state;
    redis_clock c = {0};
    sample(&c, 1000000, 1000100, 1000200);
    assert_true(abs64(error_us(&c)) <= 600);
}

/* Samples that fall at different points of Redis' ms pin the offset down
 * well below a ms. */
static void test_samples_narrow_it_below_a_ms(void **state)
{
    (void)state;
    redis_clock c = {0};
    steady_samples(&c, 1000000, 1100000);
    assert_true(abs64(error_us(&c)) <= 60);
}

/* A round trip of 20 ms (a busy node, the timer waiting for a core) does
 * not move what short ones said; the old midpoint rule moved it by ~10 ms. */
static void test_a_slow_round_trip_does_not_move_it(void **state)
{
    (void)state;
    redis_clock c = {0};
    steady_samples(&c, 1000000, 1050000);
    int64_t before = error_us(&c);
    sample(&c, 1060000, 1060100, 1080000); /* ran at once, answered 20 ms late */
    assert_true(abs64(error_us(&c) - before) <= 2);
    assert_true(abs64(error_us(&c)) <= 100);
}

/* A stepped clock (or a new node with another clock) contradicts the
 * interval: the clock starts again from the new sample. */
static void test_a_stepped_clock_is_followed(void **state)
{
    (void)state;
    redis_clock c = {0};
    steady_samples(&c, 1000000, 1050000);
    /* Redis' clock jumps 500 ms ahead. */
    int64_t ms = (1060050 + TRUE_OFFSET + 500000) / 1000;
    redis_clock_learn(&c, ms, 1060000, 1060100);
    int64_t want = ms * 1000 - (TRUE_OFFSET + 500000);
    assert_true(abs64(redis_clock_mono_us(&c, ms) - want) <= 600);
}

/* A clock that drifts 200 ppm against ours is followed. */
static void test_drift_is_followed(void **state)
{
    (void)state;
    redis_clock c = {0};
    int64_t t = 1000000;
    for (; t < 61000000; t += 997) { /* a minute */
        int64_t ran = t + 50;
        int64_t drift = (ran - 1000000) / 5000; /* 200 ppm */
        redis_clock_learn(&c, (ran + TRUE_OFFSET + drift) / 1000, t, t + 100);
    }
    int64_t drift = (t - 1000000) / 5000;
    int64_t ms = (t + TRUE_OFFSET + drift) / 1000 + 10;
    int64_t want = ms * 1000 - (TRUE_OFFSET + drift);
    assert_true(abs64(redis_clock_mono_us(&c, ms) - want) <= 600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_means_at_once),
        cmocka_unit_test(test_one_sample_is_within_its_round_trip_and_ms),
        cmocka_unit_test(test_samples_narrow_it_below_a_ms),
        cmocka_unit_test(test_a_slow_round_trip_does_not_move_it),
        cmocka_unit_test(test_a_stepped_clock_is_followed),
        cmocka_unit_test(test_drift_is_followed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

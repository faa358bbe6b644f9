/* Unit tests for src/fcgi/shard_hints.c: where a worker believes ready jobs
 * are (messages add, pops take, exact counts set), which shard a pop picks
 * for topics in priority order, and the bound on tracked topics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fcgi/shard_hints.h"

static int pick1(shard_hints *h, const char *topic)
{
    const char *topics[1] = {topic};
    return hints_pick(h, topics, 1, NULL, NULL);
}

static void add(shard_hints *h, const char *topic, int shard, int64_t n)
{
    hints_add(h, topic, strlen(topic), shard, n);
}

static void test_nothing_known_picks_none(void **state)
{
    (void)state;
    shard_hints *h = hints_new(4, 16);
    assert_int_equal(pick1(h, "orders"), -1);
    hints_free(h);
}

static void test_picks_the_shard_with_most(void **state)
{
    (void)state;
    shard_hints *h = hints_new(4, 16);
    add(h, "orders", 1, 2);
    add(h, "orders", 3, 5);
    add(h, "other", 0, 100);
    assert_int_equal(pick1(h, "orders"), 3);
    /* Taking from shard 3 until it has fewer than shard 1 moves the pick. */
    hints_take(h, "orders", 6, 3, 4);
    assert_int_equal(pick1(h, "orders"), 1);
    hints_take(h, "orders", 6, 1, 2);
    assert_int_equal(pick1(h, "orders"), 3);
    hints_take(h, "orders", 6, 3, 10); /* more than known: floors at zero */
    assert_int_equal(pick1(h, "orders"), -1);
    hints_free(h);
}

static void test_set_is_exact(void **state)
{
    (void)state;
    shard_hints *h = hints_new(3, 16);
    add(h, "a", 2, 7);
    hints_set(h, "a", 1, 2, 0, hints_seen(h)); /* a pop found shard 2 empty */
    assert_int_equal(pick1(h, "a"), -1);
    hints_set(h, "a", 1, 0, 3, hints_seen(h)); /* a count found three in shard 0 */
    assert_int_equal(pick1(h, "a"), 0);
    hints_set(h, "a", 1, 0, -1, hints_seen(h)); /* a shard that did not answer counts as none */
    assert_int_equal(pick1(h, "a"), -1);
    hints_free(h);
}

static void test_topics_in_priority_order(void **state)
{
    (void)state;
    shard_hints *h = hints_new(4, 16);
    add(h, "low", 0, 50);
    add(h, "high", 2, 1);
    const char *topics[2] = {"high", "low"};
    assert_int_equal(hints_pick(h, topics, 2, NULL, NULL), 2);
    hints_take(h, "high", 4, 2, 1);
    assert_int_equal(hints_pick(h, topics, 2, NULL, NULL), 0);
    hints_free(h);
}

/* A pop asks the shard picked for the topics up to the one picked: earlier
 * topics it may hold unknown to the hints, never later ones. */
static void test_pick_names_how_many_topics_to_ask_for(void **state)
{
    (void)state;
    shard_hints *h = hints_new(3, 16);
    const char *topics[3] = {"high", "mid", "low"};
    size_t nfirst = 99;
    assert_int_equal(hints_pick(h, topics, 3, NULL, &nfirst), -1);
    assert_int_equal(nfirst, 0);
    add(h, "low", 0, 5);
    add(h, "mid", 1, 1);
    assert_int_equal(hints_pick(h, topics, 3, NULL, &nfirst), 1);
    assert_int_equal(nfirst, 2);
    hints_set(h, "mid", 3, 1, 0, hints_seen(h));
    assert_int_equal(hints_pick(h, topics, 3, NULL, &nfirst), 0);
    assert_int_equal(nfirst, 3);
    add(h, "high", 2, 1);
    assert_int_equal(hints_pick(h, topics, 3, NULL, &nfirst), 2);
    assert_int_equal(nfirst, 1);
    hints_free(h);
}

static void test_skip_passes_shards_over(void **state)
{
    (void)state;
    shard_hints *h = hints_new(3, 16);
    add(h, "t", 0, 9);
    add(h, "t", 1, 1);
    unsigned char skip[3] = {1, 0, 0};
    const char *topics[1] = {"t"};
    assert_int_equal(hints_pick(h, topics, 1, skip, NULL), 1);
    skip[1] = 1;
    assert_int_equal(hints_pick(h, topics, 1, skip, NULL), -1);
    hints_free(h);
}

static void test_bad_shards_and_untracked_topics_change_nothing(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 16);
    add(h, "t", 2, 5);
    add(h, "t", -1, 5);
    assert_int_equal(pick1(h, "t"), -1);
    hints_take(h, "u", 1, 0, 3);
    hints_set(h, "v", 1, 0, 0, hints_seen(h));
    assert_int_equal(hints_topics(h), 0); /* nothing worth tracking */
    hints_free(h);
}

static void test_bounded_table_clears_when_full(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    char name[32];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "topic-%d", i);
        add(h, name, 1, 1);
    }
    assert_int_equal(hints_topics(h), 8);
    assert_int_equal(pick1(h, "topic-7"), 1);
    add(h, "one-more", 0, 1);
    assert_int_equal(hints_topics(h), 1);
    assert_int_equal(pick1(h, "topic-7"), -1); /* forgotten: the next pop counts */
    assert_int_equal(pick1(h, "one-more"), 0);
    for (int i = 0; i < 10000; i++) { /* never grows past the bound */
        snprintf(name, sizeof name, "t%d", i);
        add(h, name, i % 2, 1);
        assert_true(hints_topics(h) <= 8);
    }
    hints_free(h);
}

static void test_clear_forgets(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    add(h, "t", 1, 4);
    hints_clear(h);
    assert_int_equal(pick1(h, "t"), -1);
    assert_int_equal(hints_topics(h), 0);
    hints_free(h);
}

/* A message that came while Redis was asked may name jobs its answer did
 * not include: the answer does not overwrite it. */
static void test_answer_loses_to_a_newer_message(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    add(h, "t", 1, 1);
    uint64_t seen = hints_seen(h); /* a pop of shard 1 starts */
    add(h, "t", 1, 1);             /* a job becomes ready meanwhile */
    hints_set(h, "t", 1, 1, 0, seen); /* the pop found none */
    assert_int_equal(pick1(h, "t"), 1);
    hints_set(h, "t", 1, 1, 0, hints_seen(h)); /* a later pop found none */
    assert_int_equal(pick1(h, "t"), -1);
    /* A message for another shard or topic does not block the answer. */
    seen = hints_seen(h);
    add(h, "t", 0, 1);
    add(h, "u", 1, 1);
    hints_set(h, "t", 1, 1, 2, seen);
    assert_int_equal(pick1(h, "t"), 1);
    hints_free(h);
}

/* Counted: every shard counted since the last clear, no clear since. */
static void test_counted_until_cleared(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 2);
    const char *topics[2] = {"a", "b"};
    assert_false(hints_counted(h, topics, 1));
    uint64_t seen = hints_seen(h);
    hints_mark_counted(h, "a", 1, seen);
    assert_true(hints_counted(h, topics, 1));
    assert_false(hints_counted(h, topics, 2)); /* "b" never counted */
    hints_mark_counted(h, "b", 1, hints_seen(h));
    assert_true(hints_counted(h, topics, 2));
    seen = hints_seen(h);
    hints_clear(h); /* a resubscription: messages may have been missed */
    assert_false(hints_counted(h, topics, 1));
    hints_mark_counted(h, "a", 1, seen); /* counted before the clear */
    assert_false(hints_counted(h, topics, 1));
    hints_set(h, "a", 1, 0, 5, seen);
    assert_int_equal(pick1(h, "a"), -1); /* nor set */
    /* Making an entry in a full table clears it: a count that ended after
     * that clear began before it, so it is not counted. */
    hints_mark_counted(h, "a", 1, hints_seen(h));
    add(h, "b", 0, 1);
    seen = hints_seen(h);
    add(h, "c", 0, 1); /* a third topic: the table of two clears */
    hints_mark_counted(h, "a", 1, seen);
    assert_false(hints_counted(h, topics, 1));
    hints_free(h);
}

/* Topics are bytes: a name that is a prefix of another is another topic. */
static void test_names_compare_whole(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    add(h, "ab", 1, 1);
    assert_int_equal(pick1(h, "a"), -1);
    assert_int_equal(pick1(h, "abc"), -1);
    assert_int_equal(pick1(h, "ab"), 1);
    hints_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_known_picks_none),
        cmocka_unit_test(test_picks_the_shard_with_most),
        cmocka_unit_test(test_set_is_exact),
        cmocka_unit_test(test_topics_in_priority_order),
        cmocka_unit_test(test_pick_names_how_many_topics_to_ask_for),
        cmocka_unit_test(test_skip_passes_shards_over),
        cmocka_unit_test(test_bad_shards_and_untracked_topics_change_nothing),
        cmocka_unit_test(test_bounded_table_clears_when_full),
        cmocka_unit_test(test_clear_forgets),
        cmocka_unit_test(test_answer_loses_to_a_newer_message),
        cmocka_unit_test(test_counted_until_cleared),
        cmocka_unit_test(test_names_compare_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

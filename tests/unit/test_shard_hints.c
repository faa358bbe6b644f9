/* Unit tests for src/fcgi/shard_hints.c: where the workers believe ready
 * jobs are (messages add, once each; pops take, exact counts set), which
 * shard a pop picks for topics in priority order, the bound on tracked
 * topics, and the table shared by forked processes, one of them killed
 * while it holds the lock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fcgi/shard_hints.h"

static int pick1(shard_hints *h, const char *topic)
{
    const char *topics[1] = {topic};
    return hints_pick(h, topics, 1, NULL, NULL);
}

static void add(shard_hints *h, const char *topic, int shard, int64_t n)
{
    hints_add(h, topic, strlen(topic), shard, n, 0);
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

/* Every worker's subscriber brings the same message: it counts once. A
 * message without an id counts each time (high, never low). */
static void test_a_message_counts_once(void **state)
{
    (void)state;
    shard_hints *h = hints_new(3, 8);
    hints_add(h, "t", 1, 2, 4, 77); /* the first worker's subscriber */
    hints_add(h, "t", 1, 2, 4, 77); /* the second's */
    hints_take(h, "t", 1, 2, 4);
    assert_int_equal(pick1(h, "t"), -1);
    hints_add(h, "t", 1, 2, 1, 78); /* the next message */
    assert_int_equal(pick1(h, "t"), 2);
    hints_add(h, "t", 1, 0, 1, 0);
    hints_add(h, "t", 1, 0, 1, 0);
    hints_take(h, "t", 1, 0, 1);
    hints_take(h, "t", 1, 2, 1);
    assert_int_equal(pick1(h, "t"), 0);
    hints_free(h);
}

/* Made before a fork, the table is one for parent and child: what one
 * process's pop took is gone for the other. */
static void test_shared_with_forked_processes(void **state)
{
    (void)state;
    shard_hints *h = hints_new(4, 8);
    add(h, "t", 3, 1);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hints_take(h, "t", 1, 3, 1);  /* the child's worker popped the job */
        hints_add(h, "u", 1, 1, 2, 5); /* and its subscriber brought this */
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(pick1(h, "t"), -1);
    assert_int_equal(pick1(h, "u"), 1);
    hints_add(h, "u", 1, 1, 2, 5); /* the parent's subscriber: counted already */
    hints_take(h, "u", 1, 1, 2);
    assert_int_equal(pick1(h, "u"), -1);
    hints_free(h);
}

/* A worker killed while it holds the table's lock leaves it usable (and
 * cleared: its change may be half made), not locked for good. */
static void test_a_worker_killed_holding_the_lock(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    for (int round = 0; round < 20; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (uint64_t m = 1;; m++)
                hints_add(h, "busy", 4, (int)(m % 2), 1, m);
        }
        usleep(2000 + 500 * (useconds_t)round);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        alarm(5); /* a lock left held would hang here */
        add(h, "t", 1, 1);
        assert_int_equal(pick1(h, "t"), 1);
        hints_clear(h);
        alarm(0);
    }
    hints_free(h);
}

/* Many shards: the table stays within its size by tracking fewer topics. */
static void test_many_shards_track_fewer_topics(void **state)
{
    (void)state;
    shard_hints *h = hints_new(1024, 4096);
    char name[32];
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "t%d", i);
        add(h, name, 1023, 1);
    }
    assert_true(hints_topics(h) <= 512);
    assert_int_equal(pick1(h, "t599"), 1023);
    hints_free(h);
}

/* A name longer than any topic is not tracked (its pops count). */
static void test_overlong_names_are_not_tracked(void **state)
{
    (void)state;
    shard_hints *h = hints_new(2, 8);
    char name[300];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    add(h, name, 1, 1);
    assert_int_equal(hints_topics(h), 0);
    assert_int_equal(pick1(h, name), -1);
    const char *topics[1] = {name};
    hints_mark_counted(h, name, strlen(name), hints_seen(h));
    assert_false(hints_counted(h, topics, 1));
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
        cmocka_unit_test(test_a_message_counts_once),
        cmocka_unit_test(test_shared_with_forked_processes),
        cmocka_unit_test(test_a_worker_killed_holding_the_lock),
        cmocka_unit_test(test_many_shards_track_fewer_topics),
        cmocka_unit_test(test_overlong_names_are_not_tracked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

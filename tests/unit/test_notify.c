/* Unit tests for src/notify.c: parked long-polls and their wake-ups (which
 * waiters a ready message wakes, in what order, missed messages, deadlines,
 * cancelling, passing a wake-up on, shutdown). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "notify.h"
#include "util.h"

/* A waiter and how often its callback ran. */
typedef struct {
    notify_waiter w;
    int woken;
} probe;

static void on_wake(notify_waiter *w)
{
    ((probe *)w->owner)->woken++;
}

static void probe_init(probe *p)
{
    memset(p, 0, sizeof *p);
    p->w.owner = p;
    p->w.wake = on_wake;
}

static void park(probe *p, const char *topic, int first)
{
    const char *topics[1] = {topic};
    notify_park(&p->w, topics, 1, notify_generation(), util_mono_ms() + 800, first);
}

static int hook_calls;
static void deadline_hook(void)
{
    hook_calls++;
}

static int setup(void **state)
{
    (void)state;
    notify_init(deadline_hook, 1000);
    return 0;
}

static void test_wakes_as_many_as_jobs(void **state)
{
    (void)state;
    probe a1, a2, a3, b;
    probe_init(&a1), probe_init(&a2), probe_init(&a3), probe_init(&b);
    park(&a1, "a", 1);
    park(&a2, "a", 1);
    park(&a3, "a", 1);
    park(&b, "b", 1);
    assert_int_equal(notify_parked(), 4);
    notify_announce("2:a"); /* two jobs of a: the two longest-waiting */
    assert_int_equal(a1.woken, 1);
    assert_int_equal(a2.woken, 1);
    assert_int_equal(a3.woken, 0);
    assert_int_equal(b.woken, 0);
    assert_int_not_equal(a1.w.woken_by, 0);
    notify_announce("1:c"); /* nobody waits on c */
    assert_int_equal(notify_parked(), 2);
    notify_announce("5:b");
    assert_int_equal(b.woken, 1);
    notify_announce("a"); /* no count (an older version): everyone of a */
    assert_int_equal(a3.woken, 1);
    assert_int_equal(notify_parked(), 0);
}

static void test_several_topics(void **state)
{
    (void)state;
    probe p;
    probe_init(&p);
    const char *topics[2] = {"x", "y"};
    notify_park(&p.w, topics, 2, notify_generation(), util_mono_ms() + 800, 1);
    notify_announce("1:y");
    assert_int_equal(p.woken, 1);
}

static void test_reparked_keeps_its_turn(void **state)
{
    (void)state;
    probe first, second;
    probe_init(&first), probe_init(&second);
    park(&first, "q", 1);
    park(&second, "q", 1);
    notify_announce("1:q");
    assert_int_equal(first.woken, 1);
    /* Its pop found nothing (another process took the job): it parks again
     * and is still first in line. */
    park(&first, "q", 0);
    notify_announce("1:q");
    assert_int_equal(first.woken, 2);
    assert_int_equal(second.woken, 0);
    notify_announce("1:q");
    assert_int_equal(second.woken, 1);
}

static void test_message_between_pop_and_park(void **state)
{
    (void)state;
    probe p;
    probe_init(&p);
    uint64_t gen = notify_generation(); /* taken before the (empty) pop */
    notify_announce("1:m");             /* a job came meanwhile */
    const char *topics[1] = {"m"};
    notify_park(&p.w, topics, 1, gen, util_mono_ms() + 800, 1);
    assert_int_equal(p.woken, 1); /* at once: pop again */
    assert_int_equal(notify_parked(), 0);
    /* A message about another topic does not count. */
    gen = notify_generation();
    notify_announce("1:other");
    notify_park(&p.w, topics, 1, gen, util_mono_ms() + 800, 0);
    assert_int_equal(p.woken, 1);
    assert_true(notify_cancel(&p.w));
}

static void test_cancel_and_pass_on(void **state)
{
    (void)state;
    probe gone, next;
    probe_init(&gone), probe_init(&next);
    park(&gone, "c", 1);
    park(&next, "c", 1);
    assert_true(notify_cancel(&gone.w)); /* its client left: taken out */
    assert_false(notify_cancel(&gone.w));
    notify_announce("1:c");
    assert_int_equal(gone.woken, 0);
    assert_int_equal(next.woken, 1);
    assert_false(notify_cancel(&next.w)); /* woken already */

    /* Woken by a job, but its client left: the wake-up goes to the next. */
    probe a, b;
    probe_init(&a), probe_init(&b);
    park(&a, "p", 1);
    park(&b, "p", 1);
    notify_announce("1:p");
    assert_int_equal(a.woken, 1);
    notify_pass_on(a.w.woken_by);
    assert_int_equal(b.woken, 1);
}

static void test_deadlines(void **state)
{
    (void)state;
    probe soon, later;
    probe_init(&soon), probe_init(&later);
    const char *topics[1] = {"d"};
    int64_t now = util_mono_ms();
    hook_calls = 0;
    notify_park(&later.w, topics, 1, notify_generation(), now + 500, 1);
    assert_int_equal(hook_calls, 1); /* the only one: the earliest */
    notify_park(&soon.w, topics, 1, notify_generation(), now + 100, 1);
    assert_int_equal(hook_calls, 2); /* earlier than the one before */
    assert_int_equal(notify_expire(now), soon.w.deadline);
    assert_int_equal(soon.woken, 0);
    int64_t next = notify_expire(now + 200);
    assert_int_equal(soon.woken, 1);
    assert_int_equal(soon.w.woken_by, 0); /* the deadline, not a job */
    assert_int_equal(next, later.w.deadline);
    assert_int_equal(notify_expire(now + 10000), -1);
    assert_int_equal(later.woken, 1);
    /* A wait is capped at a second, whatever the request's timeout. */
    probe capped;
    probe_init(&capped);
    now = util_mono_ms();
    notify_park(&capped.w, topics, 1, notify_generation(), now + 60000, 1);
    assert_true(capped.w.deadline <= util_mono_ms() + 1000);
    assert_true(notify_cancel(&capped.w));
}

static void test_many_waiters(void **state)
{
    (void)state;
    enum { N = 2000 };
    static probe p[N];
    const char *topics[1] = {"many"};
    int64_t now = util_mono_ms();
    for (int i = 0; i < N; i++) {
        probe_init(&p[i]);
        /* Deadlines out of order, to exercise the heap. */
        notify_park(&p[i].w, topics, 1, notify_generation(), now + 100 + (i * 7919) % 800, 1);
    }
    notify_announce("10:many");
    for (int i = 0; i < N; i++)
        assert_int_equal(p[i].woken, i < 10);
    for (int64_t t = 0; t >= 0; t = notify_expire(t)) {
        /* each call wakes the waiters due by t and tells the next deadline */
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(p[i].woken, 1);
    assert_int_equal(notify_parked(), 0);
}

static void test_shutdown(void **state)
{
    (void)state;
    probe p, q;
    probe_init(&p), probe_init(&q);
    park(&p, "s", 1);
    assert_false(notify_stopping());
    notify_shutdown();
    assert_true(notify_stopping());
    assert_int_equal(p.woken, 1);
    park(&q, "s", 1); /* stopping: nobody waits any more */
    assert_int_equal(q.woken, 1);
    assert_int_equal(notify_parked(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wakes_as_many_as_jobs),
        cmocka_unit_test(test_several_topics),
        cmocka_unit_test(test_reparked_keeps_its_turn),
        cmocka_unit_test(test_message_between_pop_and_park),
        cmocka_unit_test(test_cancel_and_pass_on),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_many_waiters),
        cmocka_unit_test(test_shutdown), /* last: it cannot be undone */
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

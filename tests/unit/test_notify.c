/* Unit tests for src/fcgi/notify.c and src/fcgi/wake_claims.c: parked long-polls and
 * their wake-ups (which waiters a ready message wakes, in what order, missed
 * messages, deadlines, cancelling, passing a wake-up on, shutdown), and how
 * worker processes share a message's wake-ups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "fcgi/notify.h"

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

/* A message as the functions publish it: "<count>:<topic>", and when seq
 * is not NULL, a NUL byte and the first job's sequence number. */
static void announce_seq(const char *text, const char *seq)
{
    char msg[128];
    size_t n = strlen(text);
    memcpy(msg, text, n + 1);
    if (seq) {
        memcpy(msg + n + 1, seq, strlen(seq));
        n += 1 + strlen(seq);
    }
    ready_message m;
    ready_message_parse(0, msg, n, &m);
    notify_announce(&m);
}

static void announce(const char *text)
{
    announce_seq(text, NULL);
}

static int hook_calls;
static wake_claims *claims;

static uint64_t key(int shard, const char *id)
{
    return wake_claims_key(shard, id, strlen(id));
}
static void deadline_hook(void)
{
    hook_calls++;
}

static int setup(void **state)
{
    (void)state;
    claims = wake_claims_new(64);
    notify_init(deadline_hook, 1000, claims);
    return claims ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    wake_claims_free(claims);
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
    announce("2:a"); /* two jobs of a: the two longest-waiting */
    assert_int_equal(a1.woken, 1);
    assert_int_equal(a2.woken, 1);
    assert_int_equal(a3.woken, 0);
    assert_int_equal(b.woken, 0);
    assert_int_not_equal(a1.w.woken_by, 0);
    announce("1:c"); /* nobody waits on c */
    assert_int_equal(notify_parked(), 2);
    announce("5:b");
    assert_int_equal(b.woken, 1);
    announce("a"); /* no count (an older version): everyone of a */
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
    announce("1:y");
    assert_int_equal(p.woken, 1);
}

static void test_reparked_keeps_its_turn(void **state)
{
    (void)state;
    probe first, second;
    probe_init(&first), probe_init(&second);
    park(&first, "q", 1);
    park(&second, "q", 1);
    announce("1:q");
    assert_int_equal(first.woken, 1);
    /* Its pop found nothing (another process took the job): it parks again
     * and is still first in line. */
    park(&first, "q", 0);
    announce("1:q");
    assert_int_equal(first.woken, 2);
    assert_int_equal(second.woken, 0);
    announce("1:q");
    assert_int_equal(second.woken, 1);
}

static void test_message_between_pop_and_park(void **state)
{
    (void)state;
    probe p;
    probe_init(&p);
    uint64_t gen = notify_generation(); /* taken before the (empty) pop */
    announce("1:m");             /* a job came meanwhile */
    const char *topics[1] = {"m"};
    notify_park(&p.w, topics, 1, gen, util_mono_ms() + 800, 1);
    assert_int_equal(p.woken, 1); /* at once: pop again */
    assert_int_equal(notify_parked(), 0);
    /* A message about another topic does not count. */
    gen = notify_generation();
    announce("1:other");
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
    announce("1:c");
    assert_int_equal(gone.woken, 0);
    assert_int_equal(next.woken, 1);
    assert_false(notify_cancel(&next.w)); /* woken already */

    /* Woken by a job, but its client left: the wake-up goes to the next. */
    probe a, b;
    probe_init(&a), probe_init(&b);
    park(&a, "p", 1);
    park(&b, "p", 1);
    announce("1:p");
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
    announce("10:many");
    for (int i = 0; i < N; i++)
        assert_int_equal(p[i].woken, i < 10);
    for (int64_t t = 0; t >= 0; t = notify_expire(t)) {
        /* each call wakes the waiters due by t and tells the next deadline */
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(p[i].woken, 1);
    assert_int_equal(notify_parked(), 0);
}

/* A message's count is shared by the worker processes: the first to claim
 * it starts the budget, each takes what it has waiters for. */
static void test_claims_budget(void **state)
{
    (void)state;
    wake_claims *t = wake_claims_new(8);
    assert_non_null(t);
    uint64_t k = key(0, "41");
    assert_int_equal(wake_claims_take(t, k, 3, 0), 0); /* no waiters: takes nothing */
    assert_int_equal(wake_claims_take(t, k, 3, 2), 2);
    assert_int_equal(wake_claims_take(t, k, 3, 5), 1);
    assert_int_equal(wake_claims_take(t, k, 3, 1), 0); /* all taken */
    /* Another message, another budget (even where it shares the slot). */
    for (int seq = 42; seq < 60; seq++) {
        char id[16];
        snprintf(id, sizeof id, "%d", seq);
        assert_int_equal(wake_claims_take(t, key(0, id), 1, 4), 1);
    }
    /* The same id in another shard is another message. */
    assert_int_not_equal(key(1, "41"), k);
    wake_claims_free(t);
}

/* The table is shared across fork(): a child's claim is the parent's loss. */
static void test_claims_shared_across_fork(void **state)
{
    (void)state;
    wake_claims *t = wake_claims_new(8);
    assert_non_null(t);
    uint64_t k = key(2, "7");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(wake_claims_take(t, k, 2, 1) == 1 ? 0 : 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(wake_claims_take(t, k, 2, 2), 1);
    wake_claims_free(t);
}

/* A message with a sequence number wakes only the share this process
 * claims; one without (resume, an older version) wakes as many as it says. */
static void test_message_shared_with_other_processes(void **state)
{
    (void)state;
    probe a, b, c;
    probe_init(&a), probe_init(&b), probe_init(&c);
    park(&a, "shared", 1);
    park(&b, "shared", 1);
    park(&c, "shared", 1);
    /* Another process took one of the two wake-ups of message 10 first. */
    assert_int_equal(wake_claims_take(claims, key(0, "10"), 2, 1), 1);
    announce_seq("2:shared", "10");
    assert_int_equal(a.woken + b.woken + c.woken, 1);
    assert_int_equal(a.woken, 1); /* the longest waiting */
    /* Another process took all of message 11. */
    assert_int_equal(wake_claims_take(claims, key(0, "11"), 1, 1), 1);
    announce_seq("1:shared", "11");
    assert_int_equal(b.woken + c.woken, 0);
    /* ... but a waiter whose pop raced with it still tries again. */
    uint64_t gen = notify_generation() - 1;
    assert_true(notify_cancel(&b.w));
    const char *topics[1] = {"shared"};
    notify_park(&b.w, topics, 1, gen, util_mono_ms() + 800, 0);
    assert_int_equal(b.woken, 1);
    announce("1:shared");
    assert_int_equal(c.woken, 1);
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
        cmocka_unit_test(test_claims_budget),
        cmocka_unit_test(test_claims_shared_across_fork),
        cmocka_unit_test(test_message_shared_with_other_processes),
        cmocka_unit_test(test_shutdown), /* last: it cannot be undone */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

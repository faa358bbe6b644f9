"""A topic's `rate` per `period` (docs/PROTOCOL.md, policy): a token bucket
of `rate` tokens refilled at rate/period, one spent per delivery (a pop's
job, a callback attempt), never on an empty pop. Measured with the
client's (or the receiver's) own clock, not Redis': over 10 s (RUN_S) the count is
within 5% of the burst plus rate per period, and no window of one period
holds more than rate + a burst of rate; a long-poll held back by the rate
is answered when the next token is due (the recheck is 30 s, so only that
can answer it in time); a limit changed under load applies within a
second; removing it frees the held callbacks at once. Runs with the
deployment's shard count (one Redis, or a Cluster under
DQTEST_REDIS=cluster, where each shard allows its share and the sum stays
within the limit) and once with four shards."""

import bisect
import os
import threading
import time

from dqtest import SLOW, DeploymentTestCase, main, unique
from dqtest.receiver import ReceiverTestCase

RATE = 50          # per second, for the measured runs
# The measured span: 10 s, the burst plus 500 jobs at 50/s, where 5% is 27
# jobs; a longer run, for the figure, is DQTEST_RATE_RUN_S=30 (the
# accuracy over 30 s is in docs/PERFORMANCE.md).
RUN_S = float(os.environ.get("DQTEST_RATE_RUN_S") or 10)
TOLERANCE = 0.05
# With the servers under valgrind (SLOW > 1) they may not keep up with the
# rate: the limits are still checked (never more), the accuracy is not.
EXACT = SLOW == 1.0
# The bound on any window of one period is checked on windows a little
# shorter: the client's and the receiver's clocks see a delivery some ms
# after Redis took its token, and that lag varies (a callback's request
# more than a pop's answer), which can bring one more job into a window.
WINDOW_S = 0.95
# On a busy machine that lag varies more (at load average 5 on 2 cores a
# window of callbacks seen at the receiver once held 103 against a bound
# of 100, and the same test passed again at once): the bound allows the
# accuracy's tolerance on top. A limit not enforced, or one whose shard
# shares add up to more than it, is far beyond it.
MOST_IN_WINDOW = int(2 * RATE * (1 + TOLERANCE))


def most_in_window(times, window):
    """The most timestamps in any window [t, t + window) of the sorted list."""
    best = 0
    for i, t in enumerate(times):
        best = max(best, bisect.bisect_left(times, t + window) - i)
    return best


def count_between(times, start, end):
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


class RateBase(DeploymentTestCase):
    """The helpers of the pop tests, and no test of its own."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000)

    CHECK_INVARIANTS = True

    def fill(self, topic, n):
        for at in range(0, n, 500):
            st, r = self.c.req("add", jobs=[{"topic": topic, "body": i, "ttr": 600}
                                            for i in range(at, min(n, at + 500))])
            self.assertOk(st, r)

    def consume(self, topic, seconds, threads=4, stop=None):
        """`threads` consumers pop (long-polls of 1 s) as fast as answers
        come for `seconds`: the sorted monotonic times of the jobs taken,
        and their ids."""
        times, ids, lock = [], [], threading.Lock()
        end = time.monotonic() + seconds

        def run():
            conn = self.c.new_http()
            try:
                while time.monotonic() < end and not (stop and stop.is_set()):
                    st, r = self.c.req("pop", topic=topic, timeout=1, conn=conn)
                    at = time.monotonic()
                    if st == 200 and r.get("id"):
                        with lock:
                            times.append(at)
                            ids.append(r["id"])
            finally:
                conn.close()

        ths = [threading.Thread(target=run) for _ in range(threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(seconds + 30)
        return sorted(times), ids


class SharedRateTests:
    """The pop tests run on the deployment's shard count and on four shards."""

    def test_measured_pop_rate(self):
        t = unique("rate")
        self.policy(t, rate=RATE, period=1)
        self.fill(t, int(RATE * (RUN_S + 8)))
        times, ids = self.consume(t, RUN_S + 2)
        self.assertGreater(len(times), RATE, "the consumers got jobs")
        t0 = times[0]
        # The burst (a full bucket: `rate`) at once, then rate per period.
        expected = RATE + RATE * RUN_S
        measured = count_between(times, t0, t0 + RUN_S)
        print("\npop rate: %d jobs in %.0f s from the first (expected %d: a burst of %d plus "
              "%d/s), error %+.2f%%; most in any 1 s window %d (bound %d)"
              % (measured, RUN_S, expected, RATE, RATE, 100.0 * (measured - expected) / expected,
                 most_in_window(times, 1.0), 2 * RATE))
        self.assertLessEqual(measured, (1 + TOLERANCE) * expected, "%d pops in %.0f s" % (measured, RUN_S))
        steady = count_between(times, t0 + 5, t0 + RUN_S)
        self.assertLessEqual(steady, (1 + TOLERANCE) * RATE * (RUN_S - 5))
        if EXACT:
            self.assertGreaterEqual(measured, (1 - TOLERANCE) * expected,
                                    "%d pops in %.0f s" % (measured, RUN_S))
            # Steady state, after the burst: the rate itself.
            self.assertGreaterEqual(steady, (1 - TOLERANCE) * RATE * (RUN_S - 5))
        self.assertLessEqual(most_in_window(times, WINDOW_S), MOST_IN_WINDOW, "rate plus a burst of rate")
        self.assertEqual(len(set(ids)), len(ids))
        use = self.use(t)
        self.assertGreaterEqual(use["throttled"], 1, "jobs held back by the rate")
        self.assertIsNotNone(use["tokens"])
        self.assertLessEqual(use["tokens"], RATE)
        st, _, data = self.c.request("GET", "/metrics")
        self.assertEqual(st, 200)
        label = '{topic="%s"}' % t
        self.assertIn("delayq_topic_rate_limit_per_second%s %d\n" % (label, RATE), data.decode())
        self.assertIn("delayq_topic_tokens%s " % label, data.decode())
        self.policy(t, rate=None)
        self.c.req("purge", topic=t, state="ready")
        self.c.req("purge", topic=t, state="reserved")

    def test_empty_pops_spend_no_token(self):
        t = unique("rempty")
        n = 3 * self.c.shards  # 3 tokens per shard
        self.policy(t, rate=n, period=60)  # no refill to speak of in the test
        for _ in range(10 * self.c.shards):
            st, r = self.c.req("pop", topic=t)
            self.assertOk(st, r)
            self.assertIsNone(r["id"])
        self.assertEqual(self.use(t)["tokens"], n, "a full bucket after empty pops")
        ids = [self.add(t, body=i) for i in range(2 * n)]
        got = []
        for _ in range(4 * self.c.shards + 2):
            st, r = self.c.req("pop", topic=t, count=100)
            self.assertOk(st, r)
            got += [j["id"] for j in r["jobs"]]
        # Each shard delivers its share at most (fewer where it holds fewer).
        per_shard = {}
        for jid in ids:
            k = [k for k in range(self.c.shards)
                 if self.c.redis("EXISTS", "%s:j:%s" % (self.c.tag(k), jid)) == 1][0]
            per_shard[k] = per_shard.get(k, 0) + 1
        burst = sum(min(3, m) for m in per_shard.values())
        self.assertEqual(len(got), burst, "the burst, and no more")
        use = self.use(t)
        self.assertEqual((use["tokens"], use["throttled"]), (n - burst, 2 * n - burst))
        self.c.req("delete", ids=ids)
        self.policy(t, rate=None, period=None)

    def test_throttled_long_poll_wakes_when_a_token_is_due(self):
        t = unique("rwake")
        s = self.c.shards
        # One token per shard per second (the least a deployment of s shards
        # takes); every job in one shard (the shard of the topic name).
        self.policy(t, rate=s, period=1)
        ids = [self.add(t, body=i, id="%s@%d" % (t, i)) for i in range(3)]
        st, r = self.c.req("pop", topic=t, timeout=5)
        self.assertOk(st, r)
        self.assertIsNotNone(r["id"], "the burst")
        t0 = time.monotonic()
        st, r = self.c.req("pop", topic=t, timeout=5)
        took = time.monotonic() - t0
        self.assertOk(st, r)
        self.assertIsNotNone(r["id"], "a job once the next token is due")
        print("\nthrottled long-poll answered after %.3f s (token every 1 s)" % took)
        self.assertGreater(took, 0.7, "held back by the rate")
        self.assertLess(took, 1.6 * SLOW, "woken at the token, not at its 5 s timeout")
        self.c.req("delete", ids=ids)
        self.policy(t, rate=None, period=None)

    def test_rate_below_the_shard_count(self):
        t = unique("rs")
        self.policy(t, rate=self.c.shards)
        if self.c.shards > 1:
            st, r = self.c.req("policy", topic=t, rate=self.c.shards - 1)
            self.assertError(st, r, 400, "bad_request")
            self.assertIn("field 'rate' must be at least %d" % self.c.shards, r["error"])
        self.policy(t, rate=None)



class Rate(SharedRateTests, RateBase):
    def test_limit_changed_under_load(self):
        t = unique("rchg")
        low, high = 20, 100
        self.policy(t, rate=low, period=1)
        self.fill(t, 1200)
        stop = threading.Event()
        result = {}

        def run():
            result["times"], _ = self.consume(t, 9, stop=stop)

        th = threading.Thread(target=run)
        th.start()
        time.sleep(3)
        raised_at = time.monotonic()
        self.policy(t, rate=high)
        time.sleep(3)
        lowered_at = time.monotonic()
        self.policy(t, rate=low)
        th.join(40)
        times = result["times"]
        before = count_between(times, raised_at - 2, raised_at)
        after_raise = count_between(times, raised_at + 1, raised_at + 3)
        after_lower = count_between(times, lowered_at + 1, lowered_at + 3)
        print("\nper 2 s: %d at rate %d; %d from 1 s after raising to %d; %d from 1 s after "
              "lowering to %d" % (before, low, after_raise, high, after_lower, low))
        self.assertLessEqual(before, 1.15 * 2 * low + 1)
        self.assertLessEqual(after_raise, 1.15 * 2 * high)
        self.assertLessEqual(after_lower, 1.15 * 2 * low + 1, "lowered: at the new rate within 1 s")
        if EXACT:
            self.assertGreaterEqual(before, 0.85 * 2 * low - 1)
            self.assertGreaterEqual(after_raise, 0.85 * 2 * high, "raised: at the new rate within 1 s")
            self.assertGreaterEqual(after_lower, 0.85 * 2 * low - 1)
        self.policy(t, rate=None)
        self.c.req("purge", topic=t, state="ready")
        self.c.req("purge", topic=t, state="reserved")


class RateFourShards(SharedRateTests, RateBase):
    """Four shards: each with its share of the rate (the measured rate's
    test is the split's); a changed limit applies alike to every shard
    (Rate's run covers it)."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000, shards=4)


class PushRate(ReceiverTestCase):
    """delayq-push honours `rate`: the receiver's own clock counts the
    callbacks; a job over the rate waits in its topic's hold and goes when
    its token is due; removing the limit sends the held ones at once."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")

    @staticmethod
    def answer(req):
        return (200, {}, b"")

    def paths_times(self, path):
        with self.rx.lock:
            return sorted(q.at for q in self.rx.requests if q.path == path)

    def test_measured_callback_rate(self):
        t, path = unique("prate"), "/" + unique("rate")
        st, r = self.c.req("policy", topic=t, rate=RATE, period=1)
        self.assertOk(st, r)
        n = int(RATE * (RUN_S + 5))
        url = self.rx.url(path)
        for at in range(0, n, 500):
            st, r = self.c.req("add", jobs=[{"topic": t, "body": i, "url": url}
                                            for i in range(at, min(n, at + 500))])
            self.assertOk(st, r)
        time.sleep(RUN_S + 2)
        times = self.paths_times(path)
        t0 = times[0]
        expected = RATE + RATE * RUN_S
        measured = count_between(times, t0, t0 + RUN_S)
        print("\ncallback rate: %d in %.0f s from the first (expected %d), error %+.2f%%; "
              "most in any 1 s window %d (bound %d)"
              % (measured, RUN_S, expected, 100.0 * (measured - expected) / expected,
                 most_in_window(times, 1.0), 2 * RATE))
        self.assertLessEqual(measured, (1 + TOLERANCE) * expected)
        if EXACT:
            self.assertGreaterEqual(measured, (1 - TOLERANCE) * expected)
        self.assertLessEqual(most_in_window(times, WINDOW_S), MOST_IN_WINDOW, "rate plus a burst of rate")
        st, r = self.c.get("/policies?topic=" + t)
        self.assertGreater(r["policies"][t]["throttled"], 0, "callbacks held for the rate")
        # Removing the limit frees the held callbacks at once.
        removed = time.time()
        self.c.req("policy", topic=t, rate=None)
        self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= n, 20 * SLOW, path)
        rest = [x for x in self.paths_times(path) if x >= removed]
        print("after removing the rate: %d callbacks in %.2f s" % (len(rest), rest[-1] - removed))
        self.assertLess(rest[-1] - removed, 5 * SLOW)
        self.assertEqual(len(self.paths_times(path)), n)

    def test_a_held_callback_goes_when_its_token_is_due(self):
        t, path = unique("pwake"), "/" + unique("wake")
        s = self.c.shards
        self.c.req("policy", topic=t, rate=s, period=2)  # one per 2 s per shard
        url = self.rx.url(path)
        for i in range(3):
            self.add(t, body=i, id="%s@%d" % (t, i), url=url)  # one shard
        self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= 3, 12 * SLOW, path)
        times = self.paths_times(path)
        gaps = [b - a for a, b in zip(times, times[1:])]
        print("\ncallback gaps at one per 2 s: %s" % ", ".join("%.2f" % g for g in gaps))
        for g in gaps:
            self.assertGreater(g, 1.7, "one token per 2 s")
            self.assertLess(g, 3.0 * SLOW, "sent when its token is due")
        self.assertEqual(len(times), 3)
        self.c.req("policy", topic=t, rate=None, period=None)


if __name__ == "__main__":
    main()

"""delayq-timer: several timers share buckets without double delivery; a
timer killed with SIGKILL loses its buckets after the lease; SIGTERM releases
its locks at once."""

import collections
import os
import random
import re
import signal
import sys
import threading
import time

from dqtest import DeploymentTestCase, SLOW, log_time, main, unique

LEASE_MS = 2000


def add_spread(c, topic, n, lo, hi, tc):
    """Adds n jobs with delays spread over lo..hi seconds (shuffled), 100 per
    batch. Returns (ids, {id: due monotonic time})."""
    ids = ["%s-%05d" % (topic, i) for i in range(n)]
    delays = [lo + (hi - lo) * i / max(n - 1, 1) for i in range(n)]
    random.shuffle(delays)
    due = {}
    for b in range(0, n, 100):
        jobs = [{"topic": topic, "id": ids[i], "body": i, "delay": round(delays[i], 3), "ttr": 60}
                for i in range(b, min(n, b + 100))]
        t0 = time.monotonic()
        st, r = c.req("add", jobs=jobs)
        tc.assertOk(st, r)
        tc.assertTrue(all(x["success"] for x in r["results"]))
        for i in range(b, min(n, b + 100)):
            due[ids[i]] = t0 + delays[i]
    return ids, due


def consume(c, topic, want, deadline_s, n_consumers=4):
    """n consumers pop (count 20, long-poll) + batch finish until `want` ids
    were received or the deadline passes. Returns (Counter of deliveries,
    {id: first receive monotonic time}, errors)."""
    deliveries = collections.Counter()
    first = {}
    errors = []
    lock = threading.Lock()
    stop = time.monotonic() + deadline_s

    def worker():
        conn = c.new_http()
        try:
            while time.monotonic() < stop:
                with lock:
                    if len(first) >= want:
                        return
                st, r = c.req("pop", conn=conn, topic=topic, count=20, timeout=0.5)
                now = time.monotonic()
                if st != 200:
                    errors.append((st, r))
                    time.sleep(0.1)
                    continue
                ids = [j["id"] for j in r["jobs"]]
                if not ids:
                    continue
                with lock:
                    for j in ids:
                        deliveries[j] += 1
                        first.setdefault(j, now)
                st, f = c.req("finish", conn=conn, ids=ids)
                if st != 200 or not all(x["success"] for x in f["results"]):
                    errors.append(("finish", st, f))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            conn.close()

    ths = [threading.Thread(target=worker) for _ in range(n_consumers)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(deadline_s + 70)
    return deliveries, first, errors


def lock_owners(c):
    """{bucket lock key: owner token} as stored in Redis (<tag>:lock:<k>)."""
    out = {}
    for k in c.redis("KEYS", "*:lock:*"):
        out[k.decode()] = c.redis("GET", k)
    return out


def describe_buckets(c, ids):
    """{bucket key: (jobs of ids in it, its lock's owner)}, for a failure's
    report: which timer should have moved what was left behind."""
    out = {}
    for j in ids:
        bk = c.bucket_key(j)
        lock = bk.replace(":b:", ":lock:")
        n, _ = out.get(bk, (0, None))
        out[bk] = (n + 1, c.redis("GET", lock))
    return out


class TwoTimersTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8, n_timers=2, timer_lease_ms=LEASE_MS)

    def assert_topic_empty(self, t, finished):
        st, s = self.c.req("stats", topic=t)
        s = s["topics"][t]
        self.assertEqual((s["delay"], s["ready"], s["reserved"], s["buried"], s["finished"],
                          s["redelivered"]), (0, 0, 0, 0, finished, 0), s)

    def test_a_two_timers_exactly_once(self):
        t = unique("two")
        ids, due = add_spread(self.c, t, 2000, 0.0, 2.0, self)
        deliveries, first, errors = consume(self.c, t, 2000, 15 * SLOW)
        self.assertEqual(errors, [])
        lateness = sorted(first[j] - due[j] for j in first)
        print("2 timers, 2000 jobs: received %d; lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms" %
              (len(first), lateness[len(lateness) // 2] * 1000,
               lateness[int(len(lateness) * 0.99)] * 1000, lateness[-1] * 1000))
        self.assertEqual(set(first), set(ids), "missing: %d" % len(set(ids) - set(first)))
        early = [j for j in first if first[j] < due[j] - 0.1]
        self.assertEqual(early, [], "delivered before due")
        # nothing more arrives afterwards
        more, _, errors = consume(self.c, t, 1, 1.5)
        self.assertEqual(errors, [])
        deliveries.update(more)
        twice = {j: n for j, n in deliveries.items() if n != 1}
        self.assertEqual(twice, {}, "delivered more than once")
        self.assert_topic_empty(t, 2000)

    def test_b_kill9_one_timer(self):
        t = unique("kill")
        t0 = time.monotonic()
        ids, due = add_spread(self.c, t, 1000, 0.5, 2.5, self)
        victim = 0 if self.c.timers[0].poll() is None else 1
        time.sleep(max(0, t0 + 0.8 - time.monotonic()))
        before = lock_owners(self.c)
        self.c.kill_timer(victim, signal.SIGKILL)
        t_kill = time.monotonic()
        shares = collections.Counter(before.values())
        print("bucket shares before the kill: %s" % sorted(shares.values()))
        self.assertEqual(len(shares), 2, "both timers must hold buckets for this test")
        watch = {}

        def watcher():
            # when does a single timer own every bucket again?
            while time.monotonic() - t_kill < 10 * SLOW:
                o = lock_owners(self.c)
                if len(o) == len(before) and len(set(o.values())) == 1:
                    watch["t"] = time.monotonic() - t_kill
                    return
                time.sleep(0.05)

        wt = threading.Thread(target=watcher)
        wt.start()
        deliveries, first, errors = consume(self.c, t, 1000, 15 * SLOW)
        self.assertEqual(errors, [])
        missing = set(ids) - set(first)
        late = sorted(first[j] - due[j] for j in first)
        print("kill -9 of timer %d at %.2f s: %d/%d delivered, last at %.2f s after the kill, "
              "max lateness %.2f s (lease %d ms)" %
              (victim, t_kill - t0, len(first), len(ids),
               max(first.values()) - t_kill if first else -1, late[-1] if late else -1, LEASE_MS))
        if missing:
            print("never delivered, by bucket (its lock's owner now): %s" %
                  describe_buckets(self.c, missing))
        self.assertEqual(missing, set(), "%d jobs never delivered" % len(missing))
        wt.join()
        print("the surviving timer owned all buckets %.2f s after the kill" % watch.get("t", -1))
        self.assertIn("t", watch, "the surviving timer never took the dead one's buckets")
        self.assertLess(watch["t"], (LEASE_MS / 1000.0) * 1.5 + 0.5)
        more, _, _ = consume(self.c, t, 1, 1.0)
        deliveries.update(more)
        self.assertEqual({j: n for j, n in deliveries.items() if n != 1}, {})
        self.assert_topic_empty(t, 1000)
        # back to two timers for whatever runs next
        self.c.start_timer()


class TimerSigtermTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8, n_timers=1, timer_lease_ms=LEASE_MS)

    def lock_owners(self):
        return lock_owners(self.c)

    def test_sigterm_releases_locks(self):
        # timer 0 takes every bucket first; then a second timer starts
        time.sleep(0.5)
        first = self.lock_owners()
        print("bucket locks held by timer 0: %d keys, e.g. %s" %
              (len(first), sorted(first)[:2]))
        self.assertGreater(len(first), 0, "no lock keys found (expected names containing 'lock')")
        self.assertEqual(len(set(first.values())), 1, "one timer, one owner token")
        tok0 = next(iter(first.values()))
        self.c.start_timer()
        # wait until the buckets are shared out between the two timers
        t_start = time.monotonic()
        while len(set(self.lock_owners().values())) < 2:
            self.assertLess(time.monotonic() - t_start, 3 * SLOW, "timer 1 never took a bucket")
            time.sleep(0.02)
        time.sleep(0.1)
        print("buckets shared between two timers %.0f ms after the second started: %s" %
              (1000 * (time.monotonic() - t_start),
               sorted(collections.Counter(self.lock_owners().values()).values())))
        # jobs due shortly after the SIGTERM, spread over all buckets
        t = unique("term")
        ids, due = add_spread(self.c, t, 300, 0.5, 0.8, self)
        held0 = [k for k, v in self.lock_owners().items() if v == tok0]
        res = {}
        consumer = threading.Thread(
            target=lambda: res.update(r=consume(self.c, t, 300, 10 * SLOW)))
        consumer.start()
        t_term = time.monotonic()
        rc = self.c.kill_timer(0, signal.SIGTERM)
        t_exit = time.monotonic()
        after = self.lock_owners()
        print("SIGTERM: timer 0 held %d buckets, exited with %s after %.0f ms; right after its "
              "exit %d locks with its token, %d in all" %
              (len(held0), rc, (t_exit - t_term) * 1000,
               sum(1 for v in after.values() if v == tok0), len(after)))
        self.assertEqual(rc, 0, "timer exit code on SIGTERM")
        self.assertGreater(len(held0), 0, "timer 0 held no bucket when terminated")
        self.assertEqual([k for k, v in after.items() if v == tok0], [],
                         "locks of the terminated timer still held")
        # the other timer takes them over well before the lease would expire
        deadline = t_exit + LEASE_MS / 2000.0
        while True:
            owners = self.lock_owners()
            if len(owners) >= len(first) and len(set(owners.values())) == 1:
                break
            self.assertLess(time.monotonic(), deadline,
                            "timer 1 did not take all buckets within %.1f s: %d of %d" %
                            (LEASE_MS / 2000.0, len(owners), len(first)))
            time.sleep(0.02)
        print("timer 1 held all %d buckets %.0f ms after timer 0 exited" %
              (len(owners), (time.monotonic() - t_exit) * 1000))
        consumer.join(80)
        deliveries, got, errors = res["r"]
        self.assertEqual(errors, [])
        self.assertEqual(set(got), set(ids))
        lateness = max(got[j] - due[j] for j in got)
        print("after SIGTERM all 300 jobs delivered, max lateness %.0f ms" % (lateness * 1000))
        self.assertLess(lateness, LEASE_MS / 2000.0, "jobs waited for the lease to expire")
        self.assertEqual({j: n for j, n in deliveries.items() if n != 1}, {})


class FailingMoveTest(DeploymentTestCase):
    """A move Redis refuses is retried, not dropped, and reported in the
    timer's log at most once per 10 s rather than at every retry."""
    DEPLOYMENT_KW = dict(workers=1, threads=4, n_timers=1)

    def wait_for_reports(self, n, timeout):
        """The timer's first n "moves failing" lines, waiting up to timeout s."""
        deadline = time.monotonic() + timeout
        while True:
            with open(self.c.timer_logs[0], encoding="utf-8") as f:
                reports = [line for line in f if "moves failing" in line]
            if len(reports) >= n or time.monotonic() > deadline:
                self.assertGreaterEqual(len(reports), n, reports)
                return reports[:n]
            time.sleep(0.2)

    def test_failing_move_is_reported_and_retried(self):
        t = unique("broken")
        jid = t + "-1"
        self.assertOk(*self.c.req("add", topic=t, id=jid, body="b", ttr=1))
        st, r = self.c.req("pop", topic=t, timeout=2.0 * SLOW)
        self.assertEqual(r["id"], jid)
        [key] = self.c.redis("KEYS", "*:j:" + jid)
        saved = self.c.redis("DUMP", key)
        # A list where the reserved job's key should be: the move that
        # redelivers it after its TTR (the one move that reads jobs) fails
        # with WRONGTYPE until the job is put back.
        self.c.redis("DEL", key)
        self.c.redis("RPUSH", key, "not a job")
        reports = self.wait_for_reports(2, 15.0 * SLOW)
        gap = log_time(reports[1]) - log_time(reports[0])
        retries = int(re.search(r"moves failing: (\d+) failed", reports[1]).group(1))
        print("failing move: reports %.2f s apart, %d failed moves between them: %s" %
              (gap, retries, reports[1].strip()))
        self.assertGreaterEqual(gap, 10.0, "reported more often than every 10 s")
        self.assertIn("WRONGTYPE", reports[0])
        # retried every 200 ms: about 50 in 10 s
        self.assertGreaterEqual(retries, 25, "the move was not retried")
        self.c.redis("DEL", key)
        self.c.redis("RESTORE", key, 0, saved)
        st, r = self.c.req("pop", topic=t, timeout=2.0 * SLOW)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2), "the job was not moved once it could be")


if __name__ == "__main__":
    main()

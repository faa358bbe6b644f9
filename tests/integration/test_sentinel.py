#!/usr/bin/env python3
"""delayq behind Redis Sentinel (a primary, two replicas, three sentinels on
loopback ports), whatever DQTEST_REDIS says: every process finds the
primary through the sentinels, and after a kill -9 of the primary finds the
new one by itself: jobs acknowledged before are there, long-polls are woken
by jobs made ready on the new primary, timers move due jobs there."""

import time

from dqtest import SLOW, DeploymentTestCase, main, text, unique
from dqtest.ledger import LedgerLoad


class SentinelTestCase(DeploymentTestCase):
    """A deployment behind its own Sentinel group (self.group)."""
    DEPLOYMENT_KW = dict(redis_mode="sentinel", workers=2, threads=8, n_timers=2,
                         timer_lease_ms=2000, redis_wait_timeout_ms=500)

    @property
    def group(self):
        return self.c.redis_server


class SentinelFailover(SentinelTestCase):
    DEPLOYMENT_KW = dict(SentinelTestCase.DEPLOYMENT_KW, redis_wait_replicas=2)

    def test_kill9_primary_under_load(self):
        """Every write confirmed by both replicas (redis_wait_replicas = 2,
        all of them: whichever the sentinels promote has it). The killed
        primary comes back, as a supervisor would restart it, and the
        sentinels make it a replica. Nothing acknowledged is lost."""
        t = unique("sf")
        load = LedgerLoad(self.c, t, producers=2, consumers=2, rate=100).start()
        time.sleep(2.0)
        old = self.group.primary()
        t0 = time.monotonic()
        old.kill9()
        new = self.group.wait_failover(old, 30)
        promoted = time.monotonic() - t0
        self.assertIsNot(new, old)
        time.sleep(1.0)
        old.start()
        deadline = time.monotonic() + 40 * SLOW
        while not load.every_producer_acked_after(t0):
            self.assertLess(time.monotonic(), deadline, "adds never came back")
            time.sleep(0.2)
        back = load.outage_after(t0)
        load.stop()
        print("kill -9 of the primary: promoted after %.1f s; the longest a producer waited for "
              "an add to be acknowledged: %.1f s; %s" % (promoted, back, load.summary()))
        self.assertEqual(load.lost(), [])
        self.assertEqual(load.duplicates(), [])
        self.assertGreater(len(load.acked), 50, "the load ran")


class SentinelPrimaryLostForGood(SentinelTestCase):
    """A primary with one replica (redis_wait_replicas = 1) killed with -9
    and never restarted: the promoted replica serves alone. Its adds answer
    503 at once; pops and finishes go on unconfirmed (counted), so every
    acknowledged job is delivered within 15 s of the promotion, none
    twice within its TTR."""

    DEPLOYMENT_KW = dict(SentinelTestCase.DEPLOYMENT_KW, redis_wait_replicas=1,
                         redis_kw=dict(replicas=1))

    def test_kill9_primary_for_good(self):
        t = unique("slost")
        load = LedgerLoad(self.c, t, producers=2, consumers=2, rate=100).start()
        time.sleep(2.0)
        due_later = ["%s-later-%d" % (t, i) for i in range(40)]  # due after the promotion
        for j in due_later:
            load.add(lambda cmd, f: self.c.req(cmd, **f),
                     {"topic": t, "id": j, "body": j, "delay": 3, "ttr": 5})
        old = self.group.primary()
        t0 = time.monotonic()
        old.kill9()
        self.group.wait_failover(old, 30)
        promoted = time.monotonic()
        time.sleep(5.0)
        # An add in flight at the kill keeps its unknown outcome (the retries
        # answer 503): its producer stops with the consumers, not before.
        load.stop_adding.set()
        deadline = time.monotonic() + 15 * SLOW
        while load.lost() and time.monotonic() < deadline:
            time.sleep(0.2)
        load.stop_popping.set()
        load.stop(drain_timeout=0)
        last = max(min(r for r, *_ in load.deliveries[j]) for j in due_later
                   if j in load.deliveries) - promoted
        st, h = self.c.get("/health")
        print("kill -9 of a primary with one replica, never restarted: promoted after %.1f s; "
              "the last of 40 jobs due after it delivered %.1f s after the promotion; %s; "
              "/health: %s" % (promoted - t0, last, load.summary(), h.get("short_of_replicas")))
        self.assertEqual(load.lost(), [])
        self.assertEqual(load.duplicates(), [])
        self.assertLess(last, 15 * SLOW)
        self.assertEqual(h.get("short_of_replicas"), [{"shard": 0, "replicas": 0}])
        # From the kill on, only the adds in flight at it (one a producer)
        # have unknown outcomes; after it, 503 at once. (Before it, a WAIT
        # that times out on a loaded machine answers 504 too.)
        since_kill = [st for answers in load.add_answers.values() for at, st in answers
                      if st == 504 and at >= t0]
        self.assertLessEqual(len(since_kill), 2)


class SentinelStalledPrimary(SentinelTestCase):
    DEPLOYMENT_KW = dict(SentinelTestCase.DEPLOYMENT_KW, redis_wait_replicas=1)

    def test_writes_confirmed_while_failing_over_are_not_acknowledged(self):
        """A primary that stops answering the sentinels for longer than
        down-after-milliseconds (CLIENT PAUSE WRITE also holds their PING,
        queued behind a PUBLISH) is failed over while it still holds writes.
        Here it wakes the moment a replica is promoted, as a busy primary
        may: it applies the writes it held, and the other replica, not yet
        re-pointed, confirms them (redis_wait_replicas = 1) just before it is
        re-synced from the new primary, which never had them. delayq answers
        writes confirmed after the sentinels agreed the primary was down as
        unknown outcomes (504), so none of them is acknowledged and lost."""
        t = unique("sp")
        load = LedgerLoad(self.c, t, producers=2, consumers=2, rate=100).start()
        time.sleep(2.0)
        old = self.group.primary()
        others = [r for r in self.group.servers if r is not old]
        t0 = time.monotonic()
        old("CLIENT", "PAUSE", 20000, "WRITE")
        promoted = None
        while promoted is None:
            self.assertLess(time.monotonic() - t0, 30 * SLOW, "no replica was promoted")
            promoted = next((r for r in others if text(r("ROLE")[0]) == "master"), None)
            time.sleep(0.01)
        old("CLIENT", "UNPAUSE")
        woke = time.monotonic() - t0
        deadline = time.monotonic() + 40 * SLOW
        while not load.every_producer_acked_after(t0 + woke + 1.0):
            self.assertLess(time.monotonic(), deadline, "adds never came back")
            time.sleep(0.2)
        load.stop()
        print("CLIENT PAUSE WRITE of the primary until a replica was promoted, %.1f s: %s" %
              (woke, load.summary()))
        self.assertEqual(self.group.wait_failover(old, 30), promoted)
        self.assertEqual(load.lost(), [])
        self.assertEqual(load.duplicates(), [])
        self.assertGreater(len(load.acked), 50, "the load ran")
        with open(self.c.fcgi_log()) as f:
            self.assertIn("the primary is down in their view", f.read())


class SentinelNoWait(SentinelTestCase):
    DEPLOYMENT_KW = dict(redis_mode="sentinel", workers=1, threads=8)

    def test_failover_needs_no_operator(self):
        """Without WAIT: the service is back within seconds of the kill, a
        job replicated before it is there, a long-poll parked after it is
        woken by a job the timer makes ready on the new primary."""
        t = unique("nw")
        self.assertOk(*self.c.req("add", topic=t, id=t + "-1", body=1))
        self.assertOk(*self.c.req("add", topic=t + "-later", id=t + "-d", body="d", delay=5))
        old = self.group.primary()
        old("WAIT", 2, 2000)  # both jobs are on both replicas
        t0 = time.monotonic()
        old.kill9()
        while True:
            st, r = self.c.req("get", id=t + "-1")
            if st == 200:
                break
            self.assertEqual(st, 503, r)
            self.assertLess(time.monotonic() - t0, 30 * SLOW, "no service after the kill")
            time.sleep(0.1)
        back = time.monotonic() - t0
        print("get answered again %.1f s after the kill of the primary" % back)
        self.assertEqual(r["value"], 1)
        self.assertOk(*self.c.req("add", topic=t, id=t + "-2", body=2))
        st, r = self.c.req("pop", topic=t + "-later", timeout=30)
        self.assertOk(st, r)
        self.assertEqual(r["id"], t + "-d")
        self.assertLess(time.monotonic() - t0, 15 * SLOW)
        old.start()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""delayq behind Redis Sentinel (a primary, two replicas, three sentinels on
loopback ports), whatever DQTEST_REDIS says: every process finds the
primary through the sentinels, and after a kill -9 of the primary finds the
new one by itself: jobs acknowledged before are there, long-polls are woken
by jobs made ready on the new primary, timers move due jobs there."""

import time

from dqtest import SLOW, DeploymentTestCase, main, unique
from dqtest.ledger import LedgerLoad


class SentinelFailover(DeploymentTestCase):
    DEPLOYMENT_KW = dict(redis_mode="sentinel", workers=2, threads=8, n_timers=2,
                         timer_lease_ms=2000, redis_wait_replicas=2, redis_wait_timeout_ms=500)

    @property
    def group(self):
        return self.c.redis_server

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


class SentinelNoWait(DeploymentTestCase):
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

    @property
    def group(self):
        return self.c.redis_server


if __name__ == "__main__":
    main()

"""Per-key limits (docs/PROTOCOL.md 1.2). `key_concurrency`: at most that
many jobs of one key reserved at once, for pull and for push; 1 makes a key
serial (one at a time, in due order, also through TTR expiries and a
consumer killed with SIGKILL). A job over its key's limit stays ready (set
aside in its key's lane: `get`, `GET /jobs`, stats, delete, upsert, purge
and pause/resume treat it as any ready job); a limited key never blocks
the other keys, the small keys behind a big key's backlog are reached (the
fairness figure), a finish wakes a waiting long-poll, and a limit changed
under load applies at once. `key_rate` per `key_period`: a token bucket per
key, measured within 5% over 10 s, woken by the timer when a token comes,
for pull and for push. Each test ends with the deployment's invariants.
Runs with the deployment's shard count (one Redis, or a Cluster under
DQTEST_REDIS=cluster) and the key_concurrency tests once more with four
shards."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

from dqtest import SLOW, DeploymentTestCase, LongPoll, invariants, main, run_threads, unique
from dqtest.receiver import ReceiverTestCase


class Ledger:
    """What each key has in flight, and the most it ever had, as the
    consumers see it (noted before a finish is sent, so the count is never
    low)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = collections.Counter()
        self.most = collections.Counter()
        self.order = collections.defaultdict(list)  # key -> ids in delivery order

    def took(self, key, jid):
        with self.lock:
            self.now[key] += 1
            self.most[key] = max(self.most[key], self.now[key])
            self.order[key].append(jid)

    def done(self, key):
        with self.lock:
            self.now[key] -= 1


class KeyTestCase(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000)

    CHECK_INVARIANTS = True

    def add_many(self, topic, keyed, **fields):
        """Adds jobs [(id, key)] in batches of 1000, in order."""
        for i in range(0, len(keyed), 1000):
            jobs = [dict(topic=topic, id=jid, key=key, body=jid, **fields)
                    for jid, key in keyed[i:i + 1000]]
            st, r = self.c.req("add", jobs=jobs)
            self.assertOk(st, r)
            self.assertTrue(all(x["success"] for x in r["results"]), r)

    def pop(self, topic, count=1, timeout=None, conn=None):
        fields = dict(topic=topic, count=count)
        if timeout is not None:
            fields["timeout"] = timeout
        st, r = self.c.req("pop", conn=conn, **fields)
        self.assertOk(st, r)
        return r["jobs"] if "jobs" in r else ([r] if r.get("id") else [])

    def finish(self, jid, conn=None):
        st, r = self.c.req("finish", id=jid, conn=conn)
        self.assertOk(st, r, "finish %s" % jid)

    def run_consumers(self, consume, n, timeout):
        """Runs consume(conn) in n threads at once, each on a keep-alive
        connection of its own, and waits for them (each at most timeout s);
        then fails if any of them raised."""
        errors = []

        def run():
            conn = self.c.new_http()
            try:
                consume(conn)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
            finally:
                conn.close()

        run_threads(run, n, timeout)
        self.assertEqual(errors, [])

    def pops_until_idle(self, topic, conn, **pop):
        """The jobs of each pop (pop's arguments) that brought some, until
        three in a row brought none."""
        idle = 0
        while idle < 3:
            jobs = self.pop(topic, conn=conn, **pop)
            if not jobs:
                idle += 1
                continue
            idle = 0
            yield jobs


class KeyConcurrency(KeyTestCase):

    def test_never_more_in_flight_per_key_than_the_limit(self):
        t, limit = unique("kc"), 3
        self.policy(t, key_concurrency=limit)
        keys = ["%s-%s" % (t, k) for k in ("a", "b", "c")]
        keyed = [("%s@%d" % (k, i), k) for i in range(12) for k in keys]
        self.add_many(t, keyed)
        ledger = Ledger()

        def consume(conn):
            for jobs in self.pops_until_idle(t, conn, count=2, timeout=1):
                for j in jobs:
                    ledger.took(j["key"], j["id"])
                time.sleep(0.05)
                for j in jobs:
                    ledger.done(j["key"])
                    self.finish(j["id"], conn=conn)

        self.run_consumers(consume, 8, 120 * SLOW)
        for k in keys:
            self.assertLessEqual(ledger.most[k], limit, "key %s in flight at once" % k)
            self.assertEqual(len(ledger.order[k]), 12, "every job of key %s delivered once" % k)
        self.assertEqual(max(ledger.most.values()), limit, "8 consumers use the limit")
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["finished"], 36)

    def test_serial_keys_in_due_order_through_ttr_expiries(self):
        """key_concurrency 1: each key's jobs one at a time, in the order
        they were added; a job whose TTR expires (the consumer drops it)
        comes back before its key's later jobs."""
        t = unique("ks")
        self.policy(t, key_concurrency=1)
        keys = ["%s-m%d" % (t, i) for i in range(4)]
        keyed = [("%s@%d" % (k, i), k) for i in range(8) for k in keys]
        self.add_many(t, keyed, ttr=1)
        dropped = {"%s@2" % keys[1], "%s@5" % keys[3]}  # each dropped once
        ledger = Ledger()

        def consume(conn):
            for jobs in self.pops_until_idle(t, conn, timeout=2):
                j = jobs[0]
                ledger.took(j["key"], j["id"])
                with ledger.lock:
                    drop = j["id"] in dropped
                    dropped.discard(j["id"])
                if drop:
                    ledger.done(j["key"])  # its TTR (1 s) ends its turn
                    continue
                time.sleep(0.02)
                ledger.done(j["key"])
                self.finish(j["id"], conn=conn)

        self.run_consumers(consume, 6, 120 * SLOW)
        for k in keys:
            self.assertEqual(ledger.most[k], 1, "key %s: one at a time" % k)
            want = ["%s@%d" % (k, i) for i in range(8)]
            if k == keys[1]:
                want.insert(3, want[2])  # redelivered after its TTR, before @3
            if k == keys[3]:
                want.insert(6, want[5])
            self.assertEqual(ledger.order[k], want, "key %s in due order" % k)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["finished"], s["topics"][t]["redelivered"]), (32, 2))

    def test_serial_key_through_a_killed_consumer(self):
        """A consumer process killed with SIGKILL while it holds a serial
        key's job: the key's later jobs wait; other keys go on; after the
        TTR the held job comes back first."""
        t = unique("kk")
        self.policy(t, key_concurrency=1)
        x, y = t + "-x", t + "-y"
        keyed = [("%s@%d" % (x, i), x) for i in range(3)] + [(y + "@0", y)]
        self.add_many(t, keyed, ttr=2)
        script = (
            "import http.client, json, sys, time\n"
            "c = http.client.HTTPConnection('127.0.0.1', %d, timeout=10)\n"
            "c.request('POST', '/pop', json.dumps({'topic': sys.argv[1]}))\n"
            "print(json.loads(c.getresponse().read())['id'], flush=True)\n"
            "time.sleep(600)\n" % self.c.http_port)
        proc = subprocess.Popen([sys.executable, "-c", script, t], stdout=subprocess.PIPE)
        try:
            held = proc.stdout.readline().decode().strip()
            self.assertEqual(held, x + "@0")
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        killed_at = time.monotonic()
        got = self.pop(t, count=10)
        self.assertEqual([j["id"] for j in got], [y + "@0"], "x waits; y is not blocked")
        self.finish(got[0]["id"])
        got = self.pop(t, count=10, timeout=10)
        self.assertGreater(time.monotonic() - killed_at, 1.0, "not before the TTR")
        self.assertEqual([(j["id"], j["attempts"]) for j in got], [(held, 2)], "the killed job first")
        self.assertEqual(self.pop(t, count=10), [], "one at a time")
        self.finish(held)
        for i in (1, 2):
            got = self.pop(t, count=10, timeout=5)
            self.assertEqual([j["id"] for j in got], ["%s@%d" % (x, i)])
            self.finish(got[0]["id"])

    def test_a_limited_key_never_blocks_other_keys(self):
        t = unique("kb")
        self.policy(t, key_concurrency=2)
        bk, sk = t + "-big", t + "-small"
        big = [("%s@%d" % (bk, i), bk) for i in range(50)]
        self.add_many(t, big)
        other = self.add(t, body=1, key=sk, id=sk + "@0")
        first = self.pop(t, count=2)
        self.assertEqual([j["key"] for j in first], [bk, bk])
        got = self.pop(t)
        self.assertEqual([j["id"] for j in got], [other], "the next key's job at once")
        self.finish(other)
        use = self.use(t)
        self.assertEqual(use["keys_waiting"], 1)
        self.assertEqual(use["throttled"], 48)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["ready"], s["topics"][t]["reserved"]), (48, 2))
        self.assertEqual((s["topics"][t]["throttled"], s["topics"][t]["keys_waiting"]), (48, 1),
                         "stats says what the limits hold back")
        st, _, data = self.c.request("GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertIn('delayq_topic_keys_waiting{topic="%s"} 1\n' % t, data.decode())
        self.assertIn('delayq_topic_throttled{topic="%s"} 48\n' % t, data.decode())
        # A long-poll waits while the key is at its limit; a finish wakes it
        # (the recheck is 30 s: only the wake-up answers in time).
        poll = LongPoll(self.c, topic=t, count=1, timeout=20).start()
        time.sleep(0.5)
        self.assertIsNone(poll.answer, "nothing eligible: the long-poll waits")
        self.finish(first[0]["id"])
        st, r = poll.wait(25)
        self.assertOk(st, r)
        self.assertEqual([j["id"] for j in r["jobs"]], [big[2][0]], "the key's next, in order")
        self.assertLess(poll.took, 3.0, "woken by the finish")
        st, r = self.c.req("purge", topic=t, state="ready")
        self.assertOk(st, r)
        self.c.req("delete", ids=[first[1]["id"], big[2][0]])

    def test_lane_jobs_are_ready_jobs(self):
        """Jobs set aside for their key's limit answer `get` as ready, are
        listed by GET /jobs?state=ready, count as ready, can be deleted and
        purged; a finish moves the key's next one back in order."""
        t = unique("kl")
        self.policy(t, key_concurrency=1)
        ids = ["%s@%d" % (t, i) for i in range(6)]
        self.add_many(t, [(jid, t) for jid in ids])
        first = self.pop(t, count=10)
        self.assertEqual([j["id"] for j in first], ids[:1])
        self.assertEqual(self.pop(t, count=10), [])
        for jid in ids[1:]:
            st, g = self.c.req("get", id=jid)
            self.assertEqual(g["state"], "ready")
        st, page = self.c.get("/jobs?" + urllib.parse.urlencode({"topic": t, "state": "ready"}))
        self.assertOk(st, page)
        self.assertEqual([j["id"] for j in page["jobs"]], ids[1:], "in due order")
        st, r = self.c.req("delete", id=ids[1])
        self.assertOk(st, r)
        self.finish(ids[0])
        got = self.pop(t, count=10)
        self.assertEqual([j["id"] for j in got], [ids[2]], "the deleted one is gone, order kept")
        st, r = self.c.req("bury", id=ids[2])
        self.assertOk(st, r)
        got = self.pop(t, count=10)
        self.assertEqual([j["id"] for j in got], [ids[3]], "a bury ends the turn")
        # An upsert of a job set aside replaces it (out of its lane).
        st, r = self.c.req("add", id=ids[5], topic=t, key=t, body="new", replace=True)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=ids[5])
        self.assertEqual(g["state"], "ready")
        st, r = self.c.req("purge", topic=t, state="ready")
        self.assertOk(st, r)
        self.assertEqual(r["purged"], 2)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["ready"], 0)
        self.assertEqual(self.use(t)["keys_waiting"], 0)
        self.c.req("delete", ids=[ids[2], ids[3]])

    def test_pause_and_resume_with_jobs_held_for_their_key(self):
        """A serial key's turn ends while its topic is paused: its next job
        waits for the resume, which hands it to a waiting long-poll."""
        t = unique("kz")
        self.policy(t, key_concurrency=1)
        ids = ["%s@%d" % (t, i) for i in range(3)]
        self.add_many(t, [(jid, t) for jid in ids])
        self.assertEqual([j["id"] for j in self.pop(t, count=10)], ids[:1])
        st, r = self.c.req("pause", topic=t)
        self.assertOk(st, r)
        self.finish(ids[0])
        self.assertEqual(self.pop(t, count=10), [], "paused")
        poll = LongPoll(self.c, topic=t, count=1, timeout=20).start()
        time.sleep(0.5)
        st, r = self.c.req("resume", topic=t)
        self.assertOk(st, r)
        st, r = poll.wait(25)
        self.assertOk(st, r)
        self.assertEqual([j["id"] for j in r["jobs"]], ids[1:2], "the key's next, after the resume")
        self.finish(ids[1])
        self.assertEqual([j["id"] for j in self.pop(t, count=10)], ids[2:])
        self.finish(ids[2])

    def test_a_limit_changed_under_load(self):
        t = unique("kx")
        self.policy(t, key_concurrency=4)
        ids = ["%s@%d" % (t, i) for i in range(20)]
        self.add_many(t, [(jid, t) for jid in ids])
        held = [j["id"] for j in self.pop(t, count=10)]
        self.assertEqual(held, ids[:4])
        # Lowered: two finishes leave 2 in flight, still over 1: nothing.
        changed = time.monotonic()
        self.policy(t, key_concurrency=1)
        self.finish(held.pop(0))
        self.finish(held.pop(0))
        self.assertEqual(self.pop(t, count=10), [], "lowered to 1 with 2 in flight")
        self.finish(held.pop(0))
        self.finish(held.pop(0))
        got = [j["id"] for j in self.pop(t, count=10)]
        self.assertLess(time.monotonic() - changed, 1.0)
        self.assertEqual(got, ids[4:5], "the key's next, alone")
        # Raised: the lanes go back, the next pop fills the new limit.
        self.policy(t, key_concurrency=3)
        got += [j["id"] for j in self.pop(t, count=10)]
        self.assertEqual(got, ids[4:7])
        # Removed: everything left comes out, in order.
        self.policy(t, key_concurrency=None)
        got += [j["id"] for j in self.pop(t, count=20)]
        self.assertEqual(got, ids[4:])
        st, r = self.c.req("delete", ids=ids)
        self.assertOk(st, r)

    def test_removing_the_limit_releases_every_lane(self):
        """2,500 jobs of a serial key held back: removing key_concurrency
        lets them all go, in order (1000 in the policy call, the rest by the
        next pops), while the other key's jobs went meanwhile."""
        t = unique("kr")
        self.policy(t, key_concurrency=1)
        a, b = t + "-a", t + "-b"
        ids = ["%s@%d" % (a, i) for i in range(2500)]
        self.add_many(t, [(jid, a) for jid in ids] + [("%s@%d" % (b, i), b) for i in range(3)])
        self.assertEqual([j["id"] for j in self.pop(t)], ids[:1])
        others = []
        for _ in range(4):  # each pop sets up to 1000 of a's jobs aside
            others += [j["id"] for j in self.pop(t, count=10)]
        self.assertEqual(others, [b + "@0"], "b's first, alone (b is serial too)")
        use = self.use(t)
        self.assertEqual((use["throttled"], use["keys_waiting"]), (2499 + 2, 2))
        self.policy(t, key_concurrency=None)
        got = []
        for _ in range(40):
            got += [j["id"] for j in self.pop(t, count=100)]
        self.assertEqual([x for x in got if x.startswith(a)], ids[1:], "every one, in order")
        self.assertEqual([x for x in got if x.startswith(b)], [b + "@1", b + "@2"])
        st, r = self.c.req("purge", topic=t, state="reserved")
        self.assertOk(st, r)
        self.assertEqual(r["purged"], 2503)

    def test_a_drain_goes_on_without_pops(self):
        """The same lane, limit removed, and no pop of the topic until it
        is drained: the policy call moves 1000 jobs back and the timers'
        moves the rest (a drain needs no caller of its own)."""
        t = unique("kd")
        self.policy(t, key_concurrency=1)
        a = t + "-a"
        ids = ["%s@%d" % (a, i) for i in range(2500)]
        self.add_many(t, [(jid, a) for jid in ids])
        self.assertEqual([j["id"] for j in self.pop(t)], ids[:1])
        for _ in range(3):  # each pop sets up to 1000 of a's jobs aside
            self.assertEqual(self.pop(t, count=10), [])
        self.assertEqual(self.use(t)["throttled"], 2499)
        self.policy(t, key_concurrency=None)
        deadline = time.monotonic() + 20 * SLOW
        while any(self.c.redis_all("KEYS", "*:kr:" + t)):  # the topic's lane jobs
            self.assertLess(time.monotonic(), deadline, "lanes still not drained")
            time.sleep(0.2)
        got = []
        for _ in range(30):
            got += [j["id"] for j in self.pop(t, count=100)]
        self.assertEqual(got, ids[1:], "every one, in order")

    def test_bad_key_policies_name_the_field(self):
        t = unique("kp")
        for fields, name in ((dict(key_concurrency=-1), "key_concurrency"),
                             (dict(key_concurrency=0), "key_concurrency"),
                             (dict(key_concurrency="x"), "key_concurrency"),
                             (dict(key_limit=3), "key_limit")):
            st, r = self.c.req("policy", topic=t, **fields)
            self.assertError(st, r, 400, "bad_request")
            self.assertIn("'%s'" % name, r["error"])

    def test_fairness_behind_a_big_key(self):
        """One key with 10,000 ready jobs ahead of 100 keys with 10 each,
        key_concurrency 5; the big key's jobs are held (their consumers are
        slow), the small keys' jobs are finished at once. A FIFO would need
        11,000 pops to deliver the 1,000 small-key jobs; here each big-key
        job is set aside once (at most 1000 per pop), so the figure is
        about 1,000 pops plus one per 1,000 of the big key's backlog."""
        t = unique("kf")
        self.policy(t, key_concurrency=5)
        bk = t + "-big"
        keyed = [("%s@%d" % (bk, i), bk) for i in range(10000)]
        keyed += [("%s-s%03d@%d" % (t, k, i), "%s-s%03d" % (t, k)) for i in range(10) for k in range(100)]
        self.add_many(t, keyed)
        pops, small, big = 0, 0, []
        t0 = time.monotonic()
        while small < 1000 and pops < 11000:
            jobs = self.pop(t)
            pops += 1
            for j in jobs:
                if j["key"] == bk:
                    big.append(j["id"])
                else:
                    small += 1
                    self.finish(j["id"])
        took = time.monotonic() - t0
        print("\nfairness: %d pops (%.1f s) delivered all 1000 small-key jobs behind a "
              "10000-job key at key_concurrency 5 (FIFO: 11000)" % (pops, took), file=sys.stderr)
        self.assertEqual(small, 1000)
        self.assertLessEqual(len(big), 5, "the big key never over its limit")
        self.assertLess(pops, 1000 + 20 * self.c.shards + 20)
        st, r = self.c.req("purge", topic=t, state="ready")
        self.assertOk(st, r)
        self.c.req("delete", ids=big)


class KeyRate(KeyTestCase):
    """key_rate per key_period: a token bucket per key (up to key_rate
    jobs at once, then key_rate per key_period); other keys are not held;
    a waiting long-poll is woken when the next token comes (the recheck is
    30 s: only the wake-up answers in time)."""

    def consume(self, topic, seconds_idle=3):
        """4 consumers pop (long-polls of 4 s) and finish at once until
        nothing came for seconds_idle: [(monotonic time, key, id)]."""
        got, lock = [], threading.Lock()
        stop_at = time.monotonic() + 60 * SLOW

        def run(conn):
            last = time.monotonic()
            while time.monotonic() - last < seconds_idle and time.monotonic() < stop_at:
                jobs = self.pop(topic, timeout=4, conn=conn)
                for j in jobs:
                    last = time.monotonic()
                    with lock:
                        got.append((last, j["key"], j["id"]))
                    self.finish(j["id"], conn=conn)

        self.run_consumers(run, 4, 90 * SLOW)
        return sorted(got)

    def assert_token_bucket(self, times, rate, period):
        """No window of the deliveries holds more than a full bucket plus
        what it refills meanwhile (50 ms of slack for the clocks)."""
        for i in range(len(times)):
            for j in range(i, len(times)):
                allowed = rate + rate * (times[j] - times[i] + 0.05) / period
                self.assertLessEqual(j - i + 1, allowed + 1e-9,
                                     "%d jobs in %.3f s" % (j - i + 1, times[j] - times[i]))

    def test_each_key_paced_others_not_held(self):
        t, rate = unique("kr"), 4
        self.policy(t, key_rate=rate, key_period=1)
        a, b = t + "-a", t + "-b"
        self.add_many(t, [("%s@%d" % (a, i), a) for i in range(16)] +
                      [("%s@%d" % (b, i), b) for i in range(4)])
        t0 = time.monotonic()
        got = self.consume(t)
        times_a = [x[0] for x in got if x[1] == a]
        times_b = [x[0] for x in got if x[1] == b]
        self.assertEqual(len(times_a), 16)
        self.assertEqual(len(times_b), 4)
        self.assert_token_bucket(times_a, rate, 1.0)
        self.assertLess(max(times_b) - t0, 1.0, "b (a bucket of its own) is not held behind a")
        span = times_a[-1] - times_a[0]
        self.assertGreater(span, (16 - rate) / rate - 0.2, "a's 12 beyond the burst take 3 s")
        self.assertLess(span, (16 - rate) / rate + 1.5, "woken as tokens come, not by rechecks")
        self.assertEqual(sorted(x[2] for x in got if x[1] == a),
                         sorted("%s@%d" % (a, i) for i in range(16)), "each once")

    def test_rate_accuracy_over_ten_seconds(self):
        t, rate = unique("ka"), 10
        self.policy(t, key_rate=rate, key_period=1)
        k = t + "-k"
        n = rate + 10 * rate  # the burst, then 10 s of tokens
        self.add_many(t, [("%s@%d" % (k, i), k) for i in range(n)])
        got = self.consume(t)
        times = [x[0] for x in got]
        self.assertEqual(len(times), n)
        self.assert_token_bucket(times, rate, 1.0)
        steady = (n - rate) / (times[-1] - times[rate - 1])
        print("\nkey_rate %d/s: measured %.2f/s over %.1f s after the burst" %
              (rate, steady, times[-1] - times[rate - 1]), file=sys.stderr)
        self.assertLess(abs(steady - rate) / rate, 0.05, "within 5%% of the limit: %.2f/s" % steady)

    def test_a_job_let_go_by_its_token_then_deleted_passes_the_turn(self):
        """The timer lets B go from the lane when the key's token comes;
        deleting B before any pop takes it must let C go in its place
        (before, C stayed in the lane with no token awaited: never
        delivered)."""
        t = unique("kd")
        self.policy(t, key_rate=1, key_period=1)
        k = t + "-k"
        a, b, c = ["%s@%d" % (k, i) for i in range(3)]
        self.add_many(t, [(a, k), (b, k), (c, k)])
        self.assertEqual([j["id"] for j in self.pop(t, count=10)], [a])
        self.assertEqual(self.pop(t, count=10), [], "no token until a second has passed")
        self.assertEqual(self.use(t)["throttled"], 2)
        deadline = time.monotonic() + 10 * SLOW
        while self.use(t)["throttled"] > 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the timer lets B go (C waits behind it)
        self.assertEqual(self.use(t)["throttled"], 1)
        st, r = self.c.req("delete", id=b)
        self.assertOk(st, r)
        self.assertEqual([j["id"] for j in self.pop(t, count=10, timeout=3 * SLOW)], [c])
        st, r = self.c.req("delete", ids=[a, c])
        self.assertOk(st, r)

    def test_key_rate_removed_releases_the_lane(self):
        t = unique("kq")
        self.policy(t, key_rate=1, key_period=60)
        k = t + "-k"
        ids = ["%s@%d" % (k, i) for i in range(5)]
        self.add_many(t, [(jid, k) for jid in ids])
        got = [j["id"] for j in self.pop(t, count=10)]
        self.assertEqual(got, ids[:1], "one token a minute")
        self.assertEqual(self.pop(t, count=10), [])
        self.assertEqual(self.use(t)["keys_waiting"], 1)
        self.policy(t, key_rate=None, key_period=None)
        got += [j["id"] for j in self.pop(t, count=10)]
        self.assertEqual(got, ids)
        st, r = self.c.req("delete", ids=ids)
        self.assertOk(st, r)


class KeyConcurrencyFourShards(KeyConcurrency):
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000, shards=4)


class KeyPush(ReceiverTestCase):
    """delayq-push honours key_concurrency: a ledger at the receiver (each
    callback answered after 0.4 s) never holds more than the limit of one
    key (delayq-key header), other keys go on meanwhile, every job is
    delivered, and serial keys' callbacks come in due order."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")
    HOLD_S = 0.4
    ledger = Ledger()
    total = collections.Counter()

    @classmethod
    def answer(cls, req):
        key = req.headers.get("delayq-key")
        cls.ledger.took(key, req.headers.get("webhook-id"))
        with cls.ledger.lock:
            cls.total["now"] += 1
            cls.total["most"] = max(cls.total["most"], cls.total["now"])
        time.sleep(cls.HOLD_S)
        with cls.ledger.lock:
            cls.total["now"] -= 1
        cls.ledger.done(key)
        return (200, {}, b"")

    CHECK_INVARIANTS = True

    def delivered(self, t, n):
        deadline = time.monotonic() + (n * self.HOLD_S + 20) * SLOW
        while time.monotonic() < deadline:
            st, s = self.c.req("stats", topic=t)
            if s["topics"].get(t, {}).get("finished") == n:
                return
            time.sleep(0.1)
        self.fail("%s: %r" % (t, s))

    def test_callbacks_in_flight_per_key(self):
        t, path = unique("kpush"), "/" + unique("slow")
        st, r = self.c.req("policy", topic=t, key_concurrency=2)
        self.assertOk(st, r)
        keys = ["%s-a" % t, "%s-b" % t, "%s-c" % t]
        for i in range(6):
            for k in keys:
                self.add(t, body=i, key=k, url=self.rx.url(path))
        self.delivered(t, 18)
        for k in keys:
            self.assertEqual(self.ledger.most[k], 2, "key %s: at most (and up to) 2" % k)
            self.assertEqual(len(self.ledger.order[k]), 6)
        self.assertGreater(self.total["most"], 2, "other keys are sent meanwhile")

    def test_callbacks_paced_per_key(self):
        t, path = unique("kprate"), "/" + unique("rate")
        st, r = self.c.req("policy", topic=t, key_rate=3, key_period=1)
        self.assertOk(st, r)
        key = "%s-k" % t
        for i in range(9):
            self.add(t, body=i, key=key, id="%s@%d" % (key, i), url=self.rx.url(path))
        qs = self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= 9, 20 * SLOW, path)
        at = sorted(q.at for q in qs if q.path == path)
        self.assertGreater(at[-1] - at[0], 1.8, "3 at once, then 3 a second")
        for i in range(len(at)):
            for j in range(i, len(at)):
                self.assertLessEqual(j - i + 1, 3 + 3 * (at[j] - at[i] + 0.05) + 1e-9)
        self.delivered(t, 9)

    def test_serial_key_callbacks_in_order(self):
        t, path = unique("kpser"), "/" + unique("ser")
        st, r = self.c.req("policy", topic=t, key_concurrency=1)
        self.assertOk(st, r)
        key = "%s-k" % t
        ids = [self.add(t, body=i, key=key, id="%s@%d" % (key, i), url=self.rx.url(path))
               for i in range(5)]
        self.delivered(t, 5)
        self.assertEqual(self.ledger.most[key], 1)
        self.assertEqual(self.ledger.order[key], ids)


if __name__ == "__main__":
    main()

"""Kept history and the idempotency window (docs/PROTOCOL.md, "History,
idempotency window, upsert"): with a topic's `keep`, a job finished,
deleted or buried-then-deleted (by a client, by finish-and-pop, by a
callback's outcome) leaves a record for `keep` seconds; `get` answers it,
`GET /jobs?state=finished|deleted` lists the records newest first with
cursors, and an `add` of its id answers 409 naming the outcome and its
time, writing nothing, also under 48 racing adds. Records expire on time,
their index is capped per topic (the oldest go first), and keep 0 (the
default) leaves nothing. Runs on one Redis and, with
DQTEST_REDIS=cluster, on a Cluster."""

import re
import threading
import time
import urllib.parse

from dqtest import SLOW, DeploymentTestCase, Http, main, unique
from dqtest.receiver import ReceiverTestCase
from dqtest.redis_cluster import key_slot

# src/job/job.h, DQ_HISTORY_CAP: records per topic in each shard.
HISTORY_CAP = 100000
RECORD_FIELDS = {"success", "id", "topic", "state", "due", "first_delivered", "ended", "attempts",
                 "created"}


class History(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    CHECK_INVARIANTS = True

    def keep(self, topic, seconds):
        st, r = self.c.req("policy", topic=topic, keep=seconds)
        self.assertOk(st, r)
        self.assertEqual(r["policy"]["keep"], seconds)

    def get(self, jid):
        return self.c.req("get", id=jid)

    def page(self, topic, state, limit=50, cursor=None):
        q = {"topic": topic, "state": state, "limit": limit}
        if cursor:
            q["cursor"] = cursor
        st, r = self.c.get("/jobs?" + urllib.parse.urlencode(q))
        self.assertOk(st, r)
        return r

    def listed(self, topic, state, limit=50):
        """Every record of the listing, page by page: [ids], pages."""
        ids, cursor, pages = [], None, 0
        while True:
            r = self.page(topic, state, limit, cursor)
            pages += 1
            ids += [j["id"] for j in r["jobs"]]
            cursor = r["cursor"]
            if not cursor:
                return ids, pages

    def record_key(self, jid):
        return "%s:h:%s" % (self.c.tag(self.c.shard_of(jid)), jid)

    def on_node_of(self, key, *args):
        """A command about `key` that names it elsewhere than first (MEMORY
        USAGE), sent to the node that holds it."""
        if self.c.redis_mode != "cluster":
            return self.c.redis(*args)
        rs = self.c.redis_server
        return rs.client(rs.port_of_slot(key_slot(key)))(*args)

    def pop_one(self, topic):
        st, r = self.c.req("pop", topic=topic)
        self.assertOk(st, r)
        self.assertIsNotNone(r["id"])
        return r

    # ------------------------------------------------------------------

    def test_finish_delete_and_buried_delete_leave_records(self):
        t = unique("h")
        self.keep(t, 30)
        before = int(time.time() * 1000)
        fin = self.add(t, body={"n": 1})
        self.assertEqual(self.pop_one(t)["id"], fin)
        self.assertOk(*self.c.req("finish", id=fin))
        dele = self.add(t, body={"n": 2}, delay=60)
        self.assertOk(*self.c.req("delete", id=dele))
        bur = self.add(t, body={"n": 3})
        self.assertEqual(self.pop_one(t)["id"], bur)
        self.assertOk(*self.c.req("bury", id=bur))
        self.assertOk(*self.c.req("delete", id=bur))
        after = int(time.time() * 1000)

        st, g = self.get(fin)
        self.assertOk(st, g)
        self.assertEqual(set(g), RECORD_FIELDS, "a record has no value, ttr or retries: %r" % g)
        self.assertEqual((g["id"], g["topic"], g["state"], g["attempts"]), (fin, t, "finished", 1))
        self.assertLessEqual(g["created"], g["first_delivered"])
        self.assertLessEqual(g["first_delivered"], g["ended"])
        self.assertTrue(before - 1000 <= g["created"] <= g["ended"] <= after + 1000, g)
        self.assertEqual(g["due"], g["created"], "a job ready at once was due when added")

        st, g = self.get(dele)
        self.assertOk(st, g)
        self.assertEqual((g["state"], g["attempts"], g["first_delivered"]), ("deleted", 0, None))
        self.assertAlmostEqual(g["due"], g["created"] + 60000, delta=5)

        st, g = self.get(bur)
        self.assertOk(st, g)
        self.assertEqual((g["state"], g["attempts"]), ("deleted", 1))
        self.assertIsNotNone(g["first_delivered"])

        self.assertEqual(self.listed(t, "finished")[0], [fin])
        self.assertEqual(self.listed(t, "deleted")[0], [bur, dele], "newest first")
        st, s = self.c.req("stats", topic=t)
        self.assertOk(st, s)
        self.assertEqual((s["topics"][t]["finished"], s["topics"][t]["deleted"]), (1, 2))

    def test_records_expire_on_time(self):
        t = unique("hexp")
        self.keep(t, 2)
        jid = self.add(t, key="merchant-7", id="merchant-7@%d" % (time.time() * 1e6)) \
            if self.c.shards > 1 else self.add(t, key="merchant-7")
        self.pop_one(t)
        self.assertOk(*self.c.req("finish", id=jid))
        ended = time.time()
        st, g = self.get(jid)
        self.assertOk(st, g)
        self.assertEqual((g["state"], g["key"]), ("finished", "merchant-7"))
        ttl = self.c.redis("PTTL", self.record_key(jid))
        self.assertTrue(0 < ttl <= 2000, "the record expires after keep: PTTL %r" % ttl)
        # Still kept just before keep has passed, gone just after.
        time.sleep(max(0, ended + 1.5 - time.time()))
        st, g = self.get(jid)
        self.assertOk(st, g, "kept for 2 s")
        time.sleep(max(0, ended + 2.3 - time.time()))
        st, g = self.get(jid)
        self.assertError(st, g, 404, "not_found", "gone after 2 s")
        self.assertEqual(self.listed(t, "finished")[0], [])
        self.assertEqual(self.c.redis("EXISTS", self.record_key(jid)), 0)
        # The window closed with it: the id may be used again.
        self.add(t, id=jid, key="merchant-7")
        st, g = self.get(jid)
        self.assertOk(st, g)
        self.assertEqual(g["state"], "ready")
        self.assertOk(*self.c.req("delete", id=jid))
        # An index goes once its newest record has expired (its PEXPIRE).
        tag = self.c.tag(self.c.shard_of(jid))
        self.assertEqual(self.c.redis("EXISTS", "%s:hf:%s" % (tag, t)), 0)
        self.assertTrue(0 < self.c.redis("PTTL", "%s:hd:%s" % (tag, t)) <= 2000)

    def test_keep_zero_leaves_nothing(self):
        t, was = unique("hnone"), unique("hwas")
        jid = self.add(t)
        self.pop_one(t)
        self.assertOk(*self.c.req("finish", id=jid))
        st, g = self.get(jid)
        self.assertError(st, g, 404, "not_found")
        self.assertEqual(self.c.redis("EXISTS", self.record_key(jid)), 0)
        self.add(t, id=jid)  # reused at once, as before keep existed
        self.assertOk(*self.c.req("delete", id=jid))
        # keep set, then back to 0: nothing more is kept.
        self.keep(was, 60)
        self.keep(was, 0)
        other = self.add(was)
        self.assertOk(*self.c.req("delete", id=other))
        self.assertError(*self.get(other), 404, "not_found")
        self.assertEqual(self.listed(was, "deleted")[0], [])
        self.assertEqual(sum(len(self.c.redis("KEYS", "%s:h*:%s" % (self.c.tag(k), x)))
                             for k in range(self.c.shards) for x in (t, was)), 0)

    def test_finish_and_pop_and_purge(self):
        t = unique("hfp")
        self.keep(t, 30)
        a, b = self.add(t), self.add(t)
        first = self.pop_one(t)["id"]
        st, r = self.c.req("pop", topic=t, finish=first)
        self.assertOk(st, r)
        self.assertEqual(r["finished"], [{"id": first, "success": True}])
        self.assertEqual(self.get(first)[1]["state"], "finished")
        self.assertEqual({first, r["id"]}, {a, b})
        # purge empties a queue and keeps no records (its ids are free at once)
        c = self.add(t)
        st, r = self.c.req("purge", topic=t)
        self.assertOk(st, r)
        self.assertEqual(r["purged"], 2)
        self.assertError(*self.get(c), 404, "not_found")
        self.add(t, id=c)
        self.assertEqual(self.listed(t, "deleted")[0], [])

    def test_listing_pages_newest_first(self):
        t = unique("hlist")
        self.keep(t, 60)
        ids = []
        for i in range(11):
            jid = self.add(t, body=i)
            self.assertOk(*self.c.req("finish" if i % 2 else "delete", id=jid))
            ids.append(jid)
            time.sleep(0.003)  # distinct ended times
        fin = [i for n, i in enumerate(ids) if n % 2][::-1]
        dele = [i for n, i in enumerate(ids) if not n % 2][::-1]
        got, pages = self.listed(t, "finished", limit=2)
        self.assertEqual(got, fin)
        self.assertEqual(pages, 3)
        got, pages = self.listed(t, "deleted", limit=4)
        self.assertEqual(got, dele)
        self.assertEqual(pages, 2)
        r = self.page(t, "deleted", limit=50)
        self.assertIsNone(r["cursor"])
        ended = [j["ended"] for j in r["jobs"]]
        self.assertEqual(ended, sorted(ended, reverse=True))
        for j in r["jobs"]:
            self.assertEqual(set(j), RECORD_FIELDS, "each as get answers it")
        # a bad state is refused, as before
        st, r = self.c.get("/jobs?" + urllib.parse.urlencode({"topic": t, "state": "gone"}))
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("finished, deleted", r["error"])
        st, r = self.c.req("purge", topic=t, state="finished")
        self.assertError(st, r, 400, "bad_request")

    def test_idempotency_window_under_racing_adds(self):
        t = unique("hrace")
        self.keep(t, 60)
        jid = unique("order")

        def race():
            barrier = threading.Barrier(48)
            out = [None] * 48

            def one(i):
                conn = Http(self.c.http_port)
                try:
                    barrier.wait()
                    out[i] = self.c.req("add", conn=conn, topic=t, id=jid, body={"n": i})
                finally:
                    conn.close()
            threads = [threading.Thread(target=one, args=(i,)) for i in range(48)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            return out

        first = race()
        self.assertEqual(sorted(st for st, _ in first).count(200), 1, first)
        for st, r in first:
            if st != 200:
                self.assertError(st, r, 409, "conflict")
        st, g = self.get(jid)
        self.assertOk(st, g)
        body = g["value"]
        self.pop_one(t)
        self.assertOk(*self.c.req("finish", id=jid))
        st, rec = self.get(jid)
        self.assertOk(st, rec)
        added = self.c.req("stats", topic=t)[1]["topics"][t]["added"]

        again = race()
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(rec["ended"] / 1000))
        for st, r in again:
            self.assertError(st, r, 409, "conflict")
            self.assertIn("finished", r["error"])
            self.assertIn(when, r["error"])
            self.assertIn(str(rec["ended"]), r["error"])
        # Nothing written: the record is the same, no job, no count.
        self.assertEqual(self.get(jid), (200, rec))
        self.assertEqual(self.c.redis("EXISTS", "%s:j:%s" % (self.c.tag(self.c.shard_of(jid)), jid)), 0)
        self.assertEqual(self.c.req("stats", topic=t)[1]["topics"][t]["added"], added)
        self.assertEqual(body, {"n": int(body["n"])})

        # A batch: that job's item says so, the others are added.
        other = unique("order")
        st, r = self.c.req("add", jobs=[{"topic": t, "id": jid, "body": 1},
                                        {"topic": t, "id": other, "body": 2}])
        self.assertOk(st, r)
        self.assertEqual([x["success"] for x in r["results"]], [False, True])
        self.assertEqual(r["results"][0]["code"], "conflict")
        self.assertRegex(r["results"][0]["error"], re.escape("was finished at " + when))

    def test_cap_evicts_the_oldest(self):
        """The index of a topic's records in a shard holds at most
        HISTORY_CAP; a record written beyond it evicts the oldest, and the
        evicted record's key goes with it. The index is filled straight in
        Redis (a hundred thousand jobs through HTTP would take minutes)."""
        t = unique("hcap")
        self.keep(t, 600)
        jid = self.add(t)
        tag = self.c.tag(self.c.shard_of(jid))
        fin, dele = "%s:hf:%s" % (tag, t), "%s:hd:%s" % (tag, t)
        # Two real records, the oldest of the topic: they are evicted first.
        old = []
        for _ in range(2):
            x = self.add(t, id=self.c.one_shard_ids(unique("old"), 1, self.c.shard_of(jid))[0])
            self.assertOk(*self.c.req("delete", id=x))
            old.append(x)
            time.sleep(0.002)
        sec, usec = self.c.redis_all("TIME")[0]
        now = int(sec) * 1000 + int(usec) // 1000 + 10
        # Then fillers, newer than those, up to the cap: half in each index.
        n = HISTORY_CAP - 2
        for start in range(0, n, 5000):
            args = []
            for i in range(start, min(n, start + 5000)):
                args += [str(-(now + 1 + i)), "filler-%d" % i]
            self.c.redis("ZADD", fin if start % 10000 else dele, *args)
        total = lambda: self.c.redis("ZCARD", fin) + self.c.redis("ZCARD", dele)
        self.assertEqual(total(), HISTORY_CAP)
        self.assertEqual([self.get(x)[0] for x in old], [200, 200])
        self.assertOk(*self.c.req("finish", id=jid))
        self.assertEqual(total(), HISTORY_CAP, "one in, the oldest out")
        self.assertEqual(self.get(old[0])[0], 404, "the oldest record went with its entry")
        self.assertEqual(self.get(old[1])[0], 200)
        self.assertEqual(self.get(jid)[1]["state"], "finished")
        # The fillers go, with the real records (a record is in its index).
        self.c.redis("DEL", fin, dele, *[self.record_key(x) for x in [jid] + old])

    def test_bytes_per_record(self):
        """MEMORY USAGE of a record and of its index entry, for
        docs/DESIGN.md; the figures are printed, and bounded."""
        t = "order"
        self.keep(t, 600)
        sizes = []
        ids = [unique("order") for _ in range(200)]
        for jid in ids:
            self.add(t, id=jid, body={"order": 42, "amount": "19.90"})
        st, r = self.c.req("delete", ids=ids)
        self.assertOk(st, r)
        for jid in ids:
            key = self.record_key(jid)
            sizes.append(self.on_node_of(key, "MEMORY", "USAGE", key, "SAMPLES", "0"))
        indexes = ["%s:hd:%s" % (self.c.tag(k), t) for k in range(self.c.shards)]
        index = sum(self.on_node_of(k, "MEMORY", "USAGE", k, "SAMPLES", "0") or 0 for k in indexes)
        per_record = sum(sizes) / len(sizes)
        per_entry = index / len(ids)
        print("bytes per kept record: key %.0f, index entry %.0f (id %d bytes, topic %r)"
              % (per_record, per_entry, len(ids[0]), t))
        self.assertLess(per_record, 160)
        st, r = self.c.req("purge", topic=t)
        self.assertOk(st, r)


class HistoryPush(ReceiverTestCase):
    """A callback's outcome leaves the record: 2xx finished, 410 deleted,
    with the attempts it took and its first delivery."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")

    @classmethod
    def setUpClass(cls):
        cls.failing = set()
        cls.calls = {}
        super().setUpClass()

    @classmethod
    def answer(cls, req):
        if req.path.startswith("/gone"):
            return (410, {}, b"")
        if req.path.startswith("/twice"):
            n = cls.calls[req.path] = cls.calls.get(req.path, 0) + 1
            if n == 1:
                return (500, {}, b"x" * 2000)  # the log keeps 1024 bytes
            if n == 2:
                return (503, {}, b"busy \xff\xfe\x00 \xc3\xa9t\xc3")  # not UTF-8 throughout
            return (200, {}, "d\u00e9j\u00e0 vu".encode())
        if req.path in cls.failing:
            cls.failing.discard(req.path)  # fails once, then succeeds
            return (500, {}, b"again")
        return (200, {}, b"ok")

    def wait_state(self, jid, state):
        deadline = time.time() + 10 * SLOW
        while time.time() < deadline:
            st, g = self.c.req("get", id=jid)
            if st == 200 and g["state"] == state:
                return g
            time.sleep(0.05)
        self.fail("%s never %s: %r" % (jid, state, g))

    def test_callback_outcomes_leave_records(self):
        t = unique("hpush")
        st, r = self.c.req("policy", topic=t, keep=60)
        self.assertOk(st, r)
        ok_path, gone_path = "/" + unique("ok"), "/gone-" + unique("g")
        self.failing.add(ok_path)
        ok = self.add(t, body=1, url=self.rx.url(ok_path), backoff=[0.1])
        gone = self.add(t, body=2, url=self.rx.url(gone_path))
        g = self.wait_state(ok, "finished")
        self.assertEqual(g["attempts"], 2, "a failed attempt, then the one that finished it")
        self.assertLessEqual(g["created"], g["first_delivered"])
        self.assertLess(g["first_delivered"], g["ended"])
        g = self.wait_state(gone, "deleted")
        self.assertEqual(g["attempts"], 1)
        st, r = self.c.req("add", topic=t, id=gone, body=2, url=self.rx.url(gone_path))
        self.assertError(st, r, 409, "conflict")
        self.assertIn("was deleted at", r["error"])
        self.assertEqual([(d["status"], d["decision"]) for d in g["deliveries"]], [(410, "deleted")])

    def test_delivery_log_of_a_receiver_that_fails_twice(self):
        """Every attempt: its time, status or error, duration, the first
        1024 bytes of the response (valid UTF-8), the decision; while the
        job lives, and with its record."""
        t = unique("hlog")
        st, r = self.c.req("policy", topic=t, keep=60)
        self.assertOk(st, r)
        path = "/twice-" + unique("p")
        jid = self.add(t, body=1, url=self.rx.url(path), backoff=[0.5], retries=3)
        deadline = time.time() + 10 * SLOW
        while time.time() < deadline:  # after the first failure: live, one attempt logged
            st, g = self.c.req("get", id=jid)
            if g.get("deliveries"):
                break
            time.sleep(0.02)
        self.assertIn(g["state"], ("delay", "ready", "reserved"), g)
        first = g["deliveries"][0]
        self.assertEqual((first["status"], first["error"], first["decision"]), (500, "HTTP 500", "retry"))
        self.assertEqual(first["response"], "x" * 1024)
        g = self.wait_state(jid, "finished")
        log = g["deliveries"]
        self.assertEqual([d["status"] for d in log], [500, 503, 200])
        self.assertEqual([d["decision"] for d in log], ["retry", "retry", "finished"])
        self.assertEqual([d["error"] for d in log], ["HTTP 500", "HTTP 503", None])
        self.assertEqual(log[1]["response"], "busy ??? \u00e9t?")
        self.assertEqual(log[2]["response"], "d\u00e9j\u00e0 vu")
        self.assertIsNone(log[2]["retry_at"])
        self.assertGreaterEqual(log[0]["retry_at"], log[0]["at"] + 500)
        self.assertEqual([d["at"] for d in log], sorted(d["at"] for d in log))
        self.assertLessEqual(log[-1]["at"], g["ended"])
        for d in log:
            self.assertIsInstance(d["ms"], int)
            self.assertGreaterEqual(d["ms"], 0)
        self.assertEqual(g["attempts"], 3)


if __name__ == "__main__":
    main()

"""Upsert (docs/PROTOCOL.md, "History, idempotency window, upsert"): an
`add` with "replace": true replaces a delayed, ready or buried job of its
id and topic (body, due time, ttr, retries, backoff, callback, key)
atomically and answers "replaced": true; a reserved job answers 409; a job
of another topic answers 409 naming it; a kept record or no job: the job
is created ("replaced": false). Nothing stale is left (the invariants'
check of every set, index and counter after each test), a bad `replace`
is 400 and writes nothing, batches take `replace` per job, and a replace
racing a pop of the same job is one or the other, never a mix; a replaced
callback job is sent anew by a real pusher. Runs on
one Redis and, with DQTEST_REDIS=cluster, on a Cluster; each with one
shard (six on a Cluster) and with four."""

import json
import threading
import time
import urllib.parse
import zlib

from dqtest import SLOW, DeploymentTestCase, main, unique
from dqtest.receiver import ReceiverTestCase
from dqtest.redis_cluster import key_slot

# A callback URL for push jobs: no pusher runs here, so a ready push job
# waits in P:push and is never sent.
URL = "http://127.0.0.1:9/hook"


class Upsert(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, push_allow="*,loopback")

    CHECK_INVARIANTS = True

    # ---- helpers

    def upsert(self, jid, topic, body, **fields):
        return self.c.req("add", id=jid, topic=topic, body=body, replace=True, **fields)

    def replaced(self, jid, topic, body, expect=True, **fields):
        st, r = self.upsert(jid, topic, body, **fields)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["replaced"]), (jid, expect), r)
        return r

    def get(self, jid):
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        return r

    def listed(self, topic, state):
        q = urllib.parse.urlencode({"topic": topic, "state": state, "limit": 1000})
        st, r = self.c.get("/jobs?" + q)
        self.assertOk(st, r)
        return [j["id"] for j in r["jobs"]]

    def counts(self, topic):
        st, r = self.c.req("stats", topic=topic)
        self.assertOk(st, r)
        row = r["topics"].get(topic, {})
        return {s: row.get(s, 0) for s in ("delay", "ready", "reserved", "buried")}

    def where(self, topic, jid):
        """The states whose listing shows jid (exactly one for a live job)."""
        return [s for s in ("delay", "ready", "reserved", "buried") if jid in self.listed(topic, s)]

    def pop(self, topic, conn=None):
        st, r = self.c.req("pop", topic=topic, conn=conn)
        self.assertOk(st, r)
        return r

    def key_of_shard(self, shard, base):
        """A key whose jobs live in the given shard (store_key_shard)."""
        k = 0
        while zlib.crc32(("%s%d" % (base, k)).encode()) % self.c.shards != shard:
            k += 1
        return "%s%d" % (base, k)

    # ---- each state

    def test_replace_delayed_job(self):
        t = unique("up")
        jid = unique("job")
        key1 = self.key_of_shard(self.c.shard_of(jid), "m")
        key2 = self.key_of_shard(self.c.shard_of(jid), "n")
        self.add(t, body={"v": 1}, id=jid, delay=60, ttr=30, retries=2, key=key1)
        created = self.get(jid)["created"]
        before = int(time.time() * 1000)
        self.replaced(jid, t, {"v": 2}, delay=120, ttr=5, retries=0, backoff=[1, 2], key=key2)
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"], g["ttr"], g["retries"], g["attempts"], g["key"]),
                         ("delay", {"v": 2}, 5, 0, 0, key2))
        self.assertEqual(g["created"], created, "a replace keeps when the job was created")
        self.assertAlmostEqual(g["due"], before + 120000, delta=3000)
        self.assertEqual(self.where(t, jid), ["delay"])
        self.assertEqual(self.counts(t), {"delay": 1, "ready": 0, "reserved": 0, "buried": 0})
        # delayed -> ready: poppable at once, with the new body
        self.replaced(jid, t, {"v": 3})
        self.assertEqual(self.where(t, jid), ["ready"])
        self.assertEqual(self.counts(t), {"delay": 0, "ready": 1, "reserved": 0, "buried": 0})
        r = self.pop(t)
        self.assertEqual((r["id"], r["value"], r["attempts"]), (jid, {"v": 3}, 1))
        self.assertNotIn("key", r, "the replace without key removed it")
        self.assertOk(*self.c.req("finish", id=jid))

    def test_replace_ready_job_to_delay_is_not_poppable(self):
        t = unique("up")
        # one shard: FIFO order holds within a shard (on a Cluster, several)
        jid, other = self.c.one_shard_ids(unique("job"), 2)
        self.add(t, body="old", id=jid)
        self.assertEqual(self.counts(t)["ready"], 1)
        self.replaced(jid, t, "later", delay=60)
        self.assertEqual(self.where(t, jid), ["delay"])
        self.assertEqual(self.counts(t), {"delay": 1, "ready": 0, "reserved": 0, "buried": 0})
        self.assertIsNone(self.pop(t)["id"], "a job replaced to a later time is not ready")
        # and back to ready, at the back of the queue
        self.add(t, body="first", id=other)
        self.replaced(jid, t, "now")
        self.assertEqual(self.listed(t, "ready")[-1], jid)
        self.assertEqual(self.pop(t)["id"], other)
        self.assertEqual(self.pop(t)["value"], "now")

    def test_replace_ready_job_body_byte_for_byte(self):
        t = unique("up")
        jid = self.add(t, body={"old": True}, id=unique("job"))
        text = '{"n":123456789012345678901234567890,"z":1.50,"e":"\\u0000\\u00e9","k":[{"b":1,"a":2}]}'
        raw = '{"id":"%s","topic":"%s","replace":true,"body":%s}' % (jid, t, text)
        st, _, data = self.c.post_raw("/add", raw.encode())
        self.assertEqual(st, 200, data)
        self.assertEqual(json.loads(data), {"success": True, "id": jid, "replaced": True})
        st, _, data = self.c.post_raw("/pop", json.dumps({"topic": t}).encode())
        self.assertEqual(st, 200, data)
        self.assertIn(('"value":' + text).encode(), data, "the new body byte for byte")
        self.assertOk(*self.c.req("finish", id=jid))

    def test_replace_buried_job(self):
        t = unique("up")
        jid = self.add(t, body="old", id=unique("job"), retries=0)
        self.assertEqual(self.pop(t)["id"], jid)
        self.assertOk(*self.c.req("bury", id=jid))
        self.assertEqual(self.counts(t)["buried"], 1)
        self.replaced(jid, t, "new", retries=1)
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"], g["attempts"], g["retries"]),
                         ("ready", "new", 0, 1), "attempts start again: a new definition")
        self.assertEqual(self.where(t, jid), ["ready"])
        self.assertEqual(self.counts(t), {"delay": 0, "ready": 1, "reserved": 0, "buried": 0})
        # its fresh allowance: one redelivery after the first (released) one
        r = self.pop(t)
        self.assertEqual((r["id"], r["value"], r["attempts"]), (jid, "new", 1))
        self.assertOk(*self.c.req("release", id=jid))
        self.assertEqual(self.pop(t)["attempts"], 2)
        self.assertOk(*self.c.req("delete", id=jid))

    def test_reserved_job_is_a_conflict(self):
        t = unique("up")
        jid = self.add(t, body="old", id=unique("job"))
        self.assertEqual(self.pop(t)["id"], jid)
        st, r = self.upsert(jid, t, "new")
        self.assertError(st, r, 409, "conflict")
        self.assertIn("reserved", r["error"])
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"]), ("reserved", "old"), "nothing written")
        self.assertOk(*self.c.req("finish", id=jid))

    def test_no_job_is_created(self):
        t = unique("up")
        jid = unique("job")
        self.replaced(jid, t, "fresh", False, delay=30)
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"]), ("delay", "fresh"))
        # and a plain add of that id is still the conflict it was
        st, r = self.c.req("add", id=jid, topic=t, body="again")
        self.assertError(st, r, 409, "conflict")
        self.assertOk(*self.c.req("delete", id=jid))

    def test_kept_record_is_created_again(self):
        t = unique("up")
        self.assertOk(*self.c.req("policy", topic=t, keep=60))
        jid = self.add(t, body="first", id=unique("job"))
        self.assertEqual(self.pop(t)["id"], jid)
        self.assertOk(*self.c.req("finish", id=jid))
        st, r = self.c.req("add", id=jid, topic=t, body="again")
        self.assertError(st, r, 409, "conflict")
        self.assertIn("finished", r["error"], "the idempotency window without replace")
        self.assertEqual(self.listed(t, "finished"), [jid])
        self.replaced(jid, t, "second", False)
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"], g["attempts"]), ("ready", "second", 0))
        self.assertEqual(self.listed(t, "finished"), [], "the id is live, not kept, once created")
        self.assertEqual(self.pop(t)["value"], "second")
        self.assertOk(*self.c.req("finish", id=jid))
        self.assertEqual(self.get(jid)["state"], "finished")
        self.assertEqual(self.listed(t, "finished"), [jid])

    def test_another_topic_is_a_conflict(self):
        t, other = unique("up"), unique("up")
        jid = self.add(t, body="old", id=unique("job"), delay=30)
        st, r = self.upsert(jid, other, "new")
        self.assertError(st, r, 409, "conflict")
        self.assertIn("topic '%s'" % t, r["error"])
        g = self.get(jid)
        self.assertEqual((g["topic"], g["value"], g["state"]), (t, "old", "delay"))
        self.assertEqual(self.counts(other), {"delay": 0, "ready": 0, "reserved": 0, "buried": 0})
        self.assertOk(*self.c.req("delete", id=jid))

    def test_push_jobs(self):
        """A ready push job waits in P:push (no pusher runs): replaced by a
        pull job it moves to the ready set, and back; a delayed one moves
        bucket entries."""
        t = unique("up")
        jid = self.add(t, body="push", id=unique("job"), callback={"url": URL})
        self.assertEqual(self.where(t, jid), ["ready"])
        self.replaced(jid, t, "pull")
        self.assertNotIn("url", json.dumps(self.get(jid)))
        self.replaced(jid, t, "push again", callback={"url": URL, "timeout": 3}, delay=40)
        g = self.get(jid)
        self.assertEqual((g["state"], g["value"]), ("delay", "push again"))
        self.replaced(jid, t, "pushed now", url=URL)
        self.assertEqual(self.where(t, jid), ["ready"])
        self.assertIsNone(self.pop(t)["id"], "a push job is never popped")
        self.replaced(jid, t, "popped")
        self.assertEqual(self.pop(t)["value"], "popped")
        self.assertOk(*self.c.req("finish", id=jid))

    def test_trace_context_kept_unless_given(self):
        t = unique("up")
        tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        tp2 = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
        jid = self.add(t, body="a", id=unique("job"), delay=30, traceparent=tp1, tracestate="x=1")
        self.replaced(jid, t, "b", delay=30)
        g = self.get(jid)
        self.assertEqual((g["traceparent"], g["tracestate"]), (tp1, "x=1"))
        self.replaced(jid, t, "c", traceparent=tp2)
        r = self.pop(t)
        self.assertEqual(r["traceparent"], tp2)
        self.assertNotIn("tracestate", r, "a given trace context replaces both")
        self.assertOk(*self.c.req("finish", id=jid))

    def test_key_change_to_another_shard_is_refused(self):
        if self.c.shards == 1:
            self.skipTest("one shard: every key picks it")
        t = unique("up")
        jid = unique("job")
        self.add(t, body="old", id=jid, delay=30)
        elsewhere = self.key_of_shard((self.c.shard_of(jid) + 1) % self.c.shards, "k")
        st, r = self.upsert(jid, t, "new", key=elsewhere)
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("'key'", r["error"])
        self.assertEqual(self.get(jid)["value"], "old")
        self.assertOk(*self.c.req("delete", id=jid))

    # ---- validation and batches

    def test_bad_replace_is_refused_and_writes_nothing(self):
        t = unique("up")
        jid = self.add(t, body="old", id=unique("job"), delay=30)
        for bad in ("true", 1, 0, None, [True], {"x": True}):
            with self.subTest(bad=bad):
                st, r = self.c.req("add", id=jid, topic=t, body="new", replace=bad)
                self.assertError(st, r, 400, "bad_request")
                self.assertIn("'replace'", r["error"])
        st, r = self.c.req("add", topic=t, body="new", replace=True)
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("'id'", r["error"], "an upsert names its job")
        st, r = self.c.req("add", jobs=[{"id": jid, "topic": t, "body": "new", "replace": True},
                                        {"id": unique("job"), "topic": t, "body": "n",
                                         "replace": "yes"}])
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("jobs[1].replace", r["error"])
        self.assertEqual(self.get(jid)["value"], "old", "nothing written")
        self.assertEqual(self.counts(t)["delay"], 1)
        st, r = self.c.req("add", id=jid, topic=t, body="new", replace=False)
        self.assertError(st, r, 409, "conflict")
        self.assertOk(*self.c.req("delete", id=jid))

    def test_batch_takes_replace_per_job(self):
        t = unique("up")
        a = self.add(t, body="a", id=unique("job"), delay=30)
        b = self.add(t, body="b", id=unique("job"))
        c = unique("job")
        st, r = self.c.req("add", jobs=[
            {"id": a, "topic": t, "body": "a2", "replace": True},
            {"id": b, "topic": t, "body": "b2"},
            {"id": c, "topic": t, "body": "c1", "replace": True, "delay": 30},
            # the same id again in one call: replaced twice, once ready
            {"id": c, "topic": t, "body": "c2", "replace": True},
        ])
        self.assertOk(st, r)
        res = r["results"]
        self.assertEqual([(x["id"], x["success"], x.get("replaced")) for x in res],
                         [(a, True, True), (b, False, None), (c, True, False), (c, True, True)])
        self.assertEqual(res[1]["code"], "conflict")
        self.assertEqual((self.get(a)["value"], self.get(b)["value"], self.get(c)["value"]),
                         ("a2", "b", "c2"))
        self.assertEqual(self.where(t, c), ["ready"])
        self.assertEqual(self.counts(t), {"delay": 0, "ready": 3, "reserved": 0, "buried": 0})
        for jid in (a, b, c):
            self.assertOk(*self.c.req("delete", id=jid))

    def test_plain_add_answers_no_replaced(self):
        t = unique("up")
        st, r = self.c.req("add", topic=t, body="x")
        self.assertOk(st, r)
        self.assertNotIn("replaced", r)
        self.assertOk(*self.c.req("delete", id=r["id"]))

    # ---- atomic against a concurrent pop

    def test_upsert_races_pop(self):
        t = unique("race")
        rounds = 150
        seen = {"old": 0, "new": 0}
        pop_conn, add_conn = self.c.new_http(), self.c.new_http()
        self.addCleanup(pop_conn.close)
        self.addCleanup(add_conn.close)
        for n in range(rounds):
            jid = "race-%d-%s" % (n, t)
            old, new = {"v": "old", "n": n}, {"v": "new", "n": n}
            self.add(t, body=old, id=jid)
            out = {}
            go = threading.Barrier(2)

            def popper():
                go.wait()
                out["pop"] = self.c.req("pop", topic=t, conn=pop_conn)

            def replacer():
                go.wait()
                out["add"] = self.c.req("add", id=jid, topic=t, body=new, replace=True,
                                        conn=add_conn)

            threads = [threading.Thread(target=popper), threading.Thread(target=replacer)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            (pst, p), (ast, a) = out["pop"], out["add"]
            self.assertOk(pst, p)
            if ast == 200:
                self.assertIs(a["replaced"], True, a)
                # the replace came first (the job was ready all along)
                self.assertEqual((p["id"], p["value"]), (jid, new), "round %d" % n)
                seen["new"] += 1
            else:
                self.assertError(ast, a, 409, "conflict", "round %d" % n)
                self.assertIn("reserved", a["error"])
                self.assertEqual((p["id"], p["value"]), (jid, old), "round %d" % n)
                seen["old"] += 1
            self.assertEqual(p["attempts"], 1)
            self.assertIsNone(self.pop(t)["id"], "round %d: popped once" % n)
            self.assertOk(*self.c.req("finish", id=jid))
        self.assertEqual(seen["old"] + seen["new"], rounds)
        self.assertEqual(self.counts(t), {"delay": 0, "ready": 0, "reserved": 0, "buried": 0})
        print("upsert vs pop: %d rounds, pop first %d, replace first %d"
              % (rounds, seen["old"], seen["new"]))


class UpsertOnShards(Upsert):
    """The same with the jobs split over 4 shards whatever Redis runs them
    (one Redis too): a key's shard must stay the id's."""
    DEPLOYMENT_KW = dict(Upsert.DEPLOYMENT_KW, shards=4)


class UpsertPush(ReceiverTestCase):
    """Push jobs with a real pusher and receiver: a replaced callback job
    keeps its delivery log (what was sent under its id) and starts its
    attempts again; made a pull job, its log goes."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")

    @classmethod
    def answer(cls, req):
        return (500, {}, b"no") if req.path.startswith("/fail") else (200, {}, b"ok")

    CHECK_INVARIANTS = True

    def get(self, jid):
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        return r

    def failed_once(self, t):
        """A push job whose first callback failed: now delayed for its
        next backoff step (a minute), with one attempt logged."""
        jid = self.add(t, body="old", id=unique("job"), url=self.rx.url("/fail-" + t),
                       backoff=[60], retries=5)
        deadline = time.time() + 10 * SLOW
        while time.time() < deadline:
            g = self.get(jid)
            if g["state"] == "delay" and g.get("deliveries"):
                return jid, g
            time.sleep(0.02)
        self.fail("no failed attempt of %s: %r" % (jid, g))

    def exists(self, key):
        if self.c.redis_mode != "cluster":
            return self.c.redis("EXISTS", key)
        rs = self.c.redis_server
        return rs.client(rs.port_of_slot(key_slot(key)))("EXISTS", key)

    def test_replaced_push_job_keeps_its_log_and_is_sent_anew(self):
        t = unique("upush")
        jid, g = self.failed_once(t)
        self.assertEqual((g["attempts"], len(g["deliveries"])), (1, 1))
        path = "/ok-" + t
        st, r = self.c.req("add", id=jid, topic=t, body={"v": "new"}, replace=True,
                           url=self.rx.url(path), delay=1)
        self.assertOk(st, r)
        self.assertIs(r["replaced"], True)
        g = self.get(jid)
        self.assertEqual((g["state"], g["attempts"]), ("delay", 0))
        self.assertEqual([d["status"] for d in g["deliveries"]], [500], "the log stays")
        self.rx.wait_for(lambda reqs: any(q.path == path for q in reqs), 10 * SLOW, path)
        sent = [q for q in self.rx.requests if q.path == path]
        self.assertEqual([q.body for q in sent], [b'{"v":"new"}'])
        self.assertEqual(sent[0].headers.get("delayq-attempt"), "1", "attempts start again")
        deadline = time.time() + 10 * SLOW
        while time.time() < deadline and self.c.req("get", id=jid)[0] == 200:
            time.sleep(0.02)
        self.assertEqual(self.c.req("get", id=jid)[0], 404, "a 2xx finished it")

    def test_push_job_made_pull_drops_its_log(self):
        t = unique("upush")
        jid, _ = self.failed_once(t)
        log = "%s:dl:%s" % (self.c.tag(self.c.shard_of(jid)), jid)
        self.assertEqual(self.exists(log), 1)
        self.assertIs(self.c.req("add", id=jid, topic=t, body="pull", replace=True)[1]["replaced"],
                      True)
        self.assertEqual(self.exists(log), 0, "a pull job keeps no delivery log")
        st, r = self.c.req("pop", topic=t)
        self.assertEqual((r["id"], r["value"], r["attempts"]), (jid, "pull", 1))
        self.assertOk(*self.c.req("finish", id=jid))


if __name__ == "__main__":
    main()

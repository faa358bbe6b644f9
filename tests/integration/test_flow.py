"""Flow control, the grouping key: `add` (and each job of a batch) takes an
optional `key`; `get`, pop answers, `GET /jobs` and push requests
(`delayq-key`) carry it; a job without one answers as before. With several
shards a job with a key lives in the shard its key picks: the server makes
its id there, and an id the client chooses must name that shard
(`<key>@<digits>`). Policies (`policy`, `GET /policies`): set, kept, removed, listed, refused
by name, kept in every shard. Runs with the deployment's shard count (one
Redis, or a Cluster under DQTEST_REDIS=cluster) and once with four
shards."""

import threading
import time
import urllib.parse
import zlib

from dqtest import SLOW, DeploymentTestCase, LongPoll, main, unique
from dqtest.receiver import ReceiverTestCase


RULE = "1 to 128 characters of A-Z a-z 0-9 _ . : @ / -"


class KeyBase(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    CHECK_INVARIANTS = True

    def key_shard(self, key):
        return zlib.crc32(key.encode()) % self.c.shards

    def stored_in_key_shard(self, jid, key):
        """The job's key is in its key's shard (and nowhere else)."""
        where = [k for k in range(self.c.shards)
                 if self.c.redis("EXISTS", "%s:j:%s" % (self.c.tag(k), jid)) == 1]
        self.assertEqual(where, [self.key_shard(key)], "job %s of key %s" % (jid, key))
        raw = self.c.redis("GET", "%s:j:%s" % (self.c.tag(where[0]), jid))
        self.assertIn(key.encode(), raw, "the key is stored with the job (test_functions reads it)")

    def test_key_carried_by_get_pop_and_jobs(self):
        t = unique("k")
        keyed = self.add(t, body={"n": 1}, key="merchant-42")
        plain = self.add(t, body={"n": 2})
        st, g = self.c.req("get", id=keyed)
        self.assertOk(st, g)
        self.assertEqual(g["key"], "merchant-42")
        st, g = self.c.req("get", id=plain)
        self.assertOk(st, g)
        self.assertNotIn("key", g, "a job without a key answers as before")
        st, page = self.c.get("/jobs?" + urllib.parse.urlencode({"topic": t, "state": "ready"}))
        self.assertOk(st, page)
        self.assertEqual({j["id"]: j.get("key") for j in page["jobs"]},
                         {keyed: "merchant-42", plain: None})
        st, p = self.c.req("pop", topic=t, count=2)
        self.assertOk(st, p)
        self.assertEqual({j["id"]: j.get("key") for j in p["jobs"]},
                         {keyed: "merchant-42", plain: None})
        single = self.add(t, body=3, key="k:1/x@y_z.-")
        st, p = self.c.req("pop", topic=t)
        self.assertOk(st, p)
        self.assertEqual((p["id"], p["key"]), (single, "k:1/x@y_z.-"))
        st, g = self.c.req("get", id=single)
        self.assertEqual((g["state"], g["key"]), ("reserved", "k:1/x@y_z.-"))
        for jid in (keyed, plain, single):
            st, r = self.c.req("finish", id=jid)
            self.assertOk(st, r)

    def test_key_survives_redelivery_and_bury(self):
        t = unique("k")
        jid = self.add(t, body=1, key="m7", ttr=0.2, retries=1)
        st, p = self.c.req("pop", topic=t)
        self.assertEqual(p["key"], "m7")
        st, p = self.c.req("pop", topic=t, timeout=3)  # back after its TTR
        self.assertOk(st, p)
        self.assertEqual((p["id"], p["attempts"], p["key"]), (jid, 2, "m7"))
        st, r = self.c.req("bury", id=jid)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=jid)
        self.assertEqual((g["state"], g["key"]), ("buried", "m7"))
        st, r = self.c.req("kick", id=jid)
        self.assertOk(st, r)
        st, p = self.c.req("pop", topic=t)
        self.assertEqual((p["id"], p["key"]), (jid, "m7"))
        self.c.req("finish", id=jid)

    def test_batch_keys(self):
        t = unique("k")
        keys = ["a", None, "b/2", "a"]
        jobs = [dict(topic=t, body=i, **({"key": k} if k else {})) for i, k in enumerate(keys)]
        st, r = self.c.req("add", jobs=jobs)
        self.assertOk(st, r)
        ids = [x["id"] for x in r["results"]]
        self.assertTrue(all(x["success"] for x in r["results"]), r)
        for jid, k in zip(ids, keys):
            st, g = self.c.req("get", id=jid)
            self.assertEqual(g.get("key"), k)
            if k:
                self.stored_in_key_shard(jid, k)
        st, r = self.c.req("delete", ids=ids)
        self.assertOk(st, r)

    def test_server_made_ids_follow_the_key(self):
        t = unique("k")
        for i in range(40):
            key = "merchant-%d" % i
            jid = self.add(t, body=i, key=key, delay=60)
            self.assertRegex(jid, "^[0-9a-f]{24}$")
            self.stored_in_key_shard(jid, key)
            st, r = self.c.req("delete", id=jid)
            self.assertOk(st, r)

    def test_client_ids_with_a_key(self):
        t = unique("k")
        # "<key>@<digits>" names the key's shard whatever the shard count.
        jid = self.add(t, body=1, key="shop-9", id="shop-9@1001")
        self.stored_in_key_shard(jid, "shop-9")
        st, r = self.c.req("add", topic=t, body=1, key="shop-9", id="shop-9@1001")
        self.assertError(st, r, 409, "conflict")
        # Any id whose own shard is the key's: refused only where it is not.
        misfit = next(i for i in ("order-%d" % n for n in range(100))
                      if self.c.shard_of(i) != self.key_shard("shop-9")) \
            if self.c.shards > 1 else "order-1"
        st, r = self.c.req("add", topic=t, body=1, key="shop-9", id=misfit)
        if self.c.shards == 1:
            self.assertOk(st, r)
            self.c.req("delete", id=misfit)
        else:
            self.assertError(st, r, 400, "bad_request")
            self.assertIn("field 'id'", r["error"])
            self.assertIn("'key'", r["error"])
            st, g = self.c.req("get", id=misfit)
            self.assertEqual(st, 404, "a refused add writes nothing")
            st, r = self.c.req("add", jobs=[{"topic": t, "body": 1, "key": "shop-9"},
                                            {"topic": t, "body": 2, "key": "shop-9", "id": misfit}])
            self.assertError(st, r, 400, "bad_request")
            self.assertIn("'jobs[1].id'", r["error"])
            st, p = self.c.req("jobs", topic=t, state="ready")
            self.assertEqual([j["id"] for j in p["jobs"]], [jid], "the batch wrote nothing")
        self.c.req("delete", id=jid)

    def test_bad_keys(self):
        t = unique("k")
        for bad in ("", "a b", "x" * 129, "caf\u00e9", "a#b"):
            st, r = self.c.req("add", topic=t, body=1, key=bad)
            self.assertError(st, r, 400, "bad_request", repr(bad))
            self.assertIn("field 'key' must be " + RULE, r["error"])
        for bad in (7, None, ["a"], {"k": 1}):
            st, r = self.c.req("add", topic=t, body=1, key=bad)
            self.assertError(st, r, 400, "bad_request", repr(bad))
            self.assertIn("'key'", r["error"])
        st, r = self.c.req("add", jobs=[{"topic": t, "body": 1}, {"topic": t, "body": 1, "key": "a b"}])
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("field 'jobs[1].key' must be " + RULE, r["error"])
        st, r = self.c.req("pop", topic=t, key="a")
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("is not a field of pop", r["error"])
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s.get("topics", {}).get(t, {}).get("added", 0), 0, "nothing added")


class KeyFourShards(KeyBase):
    """The same on four shards (one Redis or a Cluster)."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, shards=4)


FIELDS = ["concurrency", "rate", "period", "key_concurrency", "key_rate", "key_period", "keep"]
NONE = dict.fromkeys(FIELDS)


class PolicyBase(DeploymentTestCase):
    """policy / GET /policies as docs/PROTOCOL.md (1.2) says: omitted keeps,
    null removes, ranges refused naming the field, the answer's shape, and
    each topic's use (reserved) summed over the shards."""
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    def policy(self, topic, **fields):
        st, r = self.c.req("policy", topic=topic, **fields)
        self.assertOk(st, r)
        self.assertEqual(set(r), {"success", "topic", "policy"})
        self.assertEqual(r["topic"], topic)
        self.assertEqual(set(r["policy"]), set(FIELDS))
        return r["policy"]

    def policies(self, query=""):
        st, r = self.c.get("/policies" + query)
        self.assertOk(st, r)
        self.assertEqual(set(r), {"success", "policies", "cursor"})
        return r

    def test_set_keep_remove(self):
        t = unique("pol")
        full = dict(concurrency=50, rate=100, period=1, key_concurrency=1, key_rate=5,
                    key_period=60, keep=86400)
        self.assertEqual(self.policy(t, **full), full)
        self.assertEqual(self.policy(t), full, "every field omitted: nothing changes")
        self.assertEqual(self.policy(t, rate=None, period=0.25), dict(full, rate=None, period=0.25))
        got = self.policies("?topic=" + t)
        self.assertEqual(got, {"success": True, "cursor": None, "policies": {
            t: dict(full, rate=None, period=0.25, reserved=0, throttled=0, keys_waiting=0,
                    tokens=None)}})
        self.assertEqual(self.policy(t, **NONE), NONE)
        self.assertEqual(self.policies("?topic=" + t)["policies"], {}, "no field left: no policy")
        self.assertNotIn(t, self.policies()["policies"])

    def test_list_pages_by_name(self):
        names = sorted(unique("pl") for _ in range(5))
        for i, t in enumerate(names):
            self.policy(t, concurrency=i + 10)
        seen, cursor = [], None
        while True:
            page = self.policies("?limit=2" + ("&cursor=" + cursor if cursor else ""))
            self.assertLessEqual(len(page["policies"]), 2)
            seen += list(page["policies"])
            cursor = page["cursor"]
            if not cursor:
                break
        mine = [t for t in seen if t in names]
        self.assertEqual(mine, names, "each topic once, by name")
        self.assertEqual(seen, sorted(seen))
        for i, t in enumerate(names):
            self.policy(t, concurrency=None)

    def test_reserved_counts_every_shard(self):
        t = unique("pr")
        self.policy(t, concurrency=10)
        ids = [self.add(t, body=i, id="%s-%d" % (t, i)) for i in range(6)]
        st, p = self.c.req("pop", topic=t, count=4)
        self.assertOk(st, p)
        self.assertEqual(len(p["jobs"]), 4)
        self.assertEqual(self.policies("?topic=" + t)["policies"][t]["reserved"], 4)
        self.c.req("finish", ids=[j["id"] for j in p["jobs"]][:3])
        self.assertEqual(self.policies("?topic=" + t)["policies"][t]["reserved"], 1)
        self.c.req("delete", ids=ids)
        self.assertEqual(self.policies("?topic=" + t)["policies"][t]["reserved"], 0)
        self.policy(t, concurrency=None)

    def test_bad_policies_name_the_field(self):
        t = unique("pb")
        self.policy(t, rate=7)
        cases = [
            (dict(concurrency=-1), "field 'concurrency' must be an integer from 1 to 1000000"),
            (dict(concurrency=0), "field 'concurrency' must be an integer from 1 to 1000000"),
            (dict(key_concurrency=1000001), "field 'key_concurrency'"),
            (dict(rate=1.5), "field 'rate' must be an integer"),
            (dict(key_rate="5"), "field 'key_rate' must be"),
            (dict(period=0), "field 'period' must be between 0.001 and 86400 seconds"),
            (dict(key_period=-1), "field 'key_period' must be between 0.001 and 86400 seconds"),
            (dict(period=86401), "field 'period'"),
            (dict(period=0.0004), "field 'period' must be"),
            (dict(keep=2592001), "field 'keep' must be between 0 and 2592000 seconds"),
            (dict(burst=3), "unknown field 'burst'"),
            (dict(id="x"), "field 'id' is not a field of policy"),
        ]
        for fields, words in cases:
            st, r = self.c.req("policy", topic=t, concurrency=3, **fields) \
                if "concurrency" not in fields else self.c.req("policy", topic=t, **fields)
            self.assertError(st, r, 400, "bad_request", repr(fields))
            self.assertIn(words, r["error"], repr(fields))
        st, r = self.c.req("policy", rate=1)
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("'topic'", r["error"])
        self.assertEqual(self.policy(t), dict(NONE, rate=7), "a refused policy changed nothing")
        self.policy(t, rate=None)


class PolicyFourShards(PolicyBase):
    """The same on four shards: each shard keeps a copy, use is summed."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, shards=4)

    def test_every_shard_has_the_copy(self):
        t = unique("pc")
        self.policy(t, concurrency=5, key_period=2)
        for k in range(self.c.shards):
            h = self.c.redis("HGETALL", "%s:pol:%s" % (self.c.tag(k), t))
            self.assertEqual(dict(zip(h[::2], h[1::2])),
                             {b"concurrency": b"5", b"key_period_ms": b"2000"}, "shard %d" % k)
        self.policy(t, concurrency=None, key_period=None)
        for k in range(self.c.shards):
            self.assertEqual(self.c.redis("EXISTS", "%s:pol:%s" % (self.c.tag(k), t)), 0)


class ConcurrencyBase(DeploymentTestCase):
    """A topic's `concurrency` enforced by pop, atomically in its Redis
    function: reserved jobs never exceed it (each shard allows its share);
    the rest stay ready (throttled); a finish frees room at once and wakes
    a waiting long-poll (the recheck is set to 30 s, so only a wake-up can
    answer it in time); a limit changed under load applies to the next
    pop."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000)

    def limit(self):
        return max(3, self.c.shards)

    def pop_all(self, topic, rounds=None):
        """Pops until pops give nothing (each shard asked): the ids taken."""
        got = []
        for _ in range(rounds or 4 * self.c.shards + 2):
            st, r = self.c.req("pop", topic=topic, count=100)
            self.assertOk(st, r)
            got += [j["id"] for j in r["jobs"]]
        return got

    def test_never_more_reserved_than_the_limit(self):
        t, c = unique("cc"), self.limit()
        self.policy(t, concurrency=c)
        ids = [self.add(t, body=i, id="%s-%d" % (t, i)) for i in range(4 * c)]
        taken = self.pop_all(t)
        self.assertLessEqual(len(taken), c)
        if self.c.shards == 1:
            self.assertEqual(len(taken), c, "one shard: the whole limit is used")
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["reserved"], len(taken))
        self.assertEqual(s["topics"][t]["ready"], 4 * c - len(taken), "held back, still ready")
        use = self.use(t)
        self.assertEqual(use["reserved"], len(taken))
        if self.c.shards == 1:
            self.assertEqual(use["throttled"], 4 * c - len(taken))
        self.assertEqual((s["topics"][t]["throttled"], s["topics"][t]["keys_waiting"]),
                         (use["throttled"], 0), "stats says what the limits hold back")
        free = self.add(unique("cf"), body=1)
        st, g = self.c.req("get", id=free)
        st, s = self.c.req("stats", topic=g["topic"])
        self.assertNotIn("throttled", s["topics"][g["topic"]], "a topic without a policy")
        self.c.req("delete", id=free)
        for jid in taken:
            st, g = self.c.req("get", id=jid)
            self.assertEqual(g["state"], "reserved")
        st, _, data = self.c.request("GET", "/metrics")
        self.assertEqual(st, 200)
        text = data.decode()
        label = '{topic="%s"}' % t
        self.assertIn("delayq_topic_concurrency_limit%s %d\n" % (label, c), text)
        self.assertIn("delayq_topic_reserved%s %d\n" % (label, len(taken)), text)
        self.assertIn("delayq_topic_throttled%s %d\n" % (label, use["throttled"]), text)
        # A finish frees room for one more, not two.
        self.c.req("finish", id=taken[0])
        more = self.pop_all(t)
        self.assertLessEqual(len(more), 1)
        if self.c.shards == 1:
            self.assertEqual(len(more), 1)
        # Raised under load: the next pops take up to the new limit.
        self.policy(t, concurrency=c + 2)
        more2 = self.pop_all(t)
        self.assertLessEqual(len(taken) - 1 + len(more) + len(more2), c + 2)
        if self.c.shards == 1:
            self.assertEqual(len(more2), 2)
        # Removed: everything left comes out.
        self.policy(t, concurrency=None)
        rest = self.pop_all(t)
        self.assertEqual(sorted(set(taken + more + more2 + rest)), sorted(ids))
        self.c.req("delete", ids=ids)

    def test_a_finish_wakes_a_waiting_long_poll(self):
        t = unique("cw")
        c = self.limit()
        self.policy(t, concurrency=c)
        jid0 = self.add(t, body=0, id=t + "@0")  # one shard: the shard of t
        ids = [self.add(t, body=i, id="%s@%d" % (t, i)) for i in range(1, c + 2)]
        st, r = self.c.req("pop", topic=t, count=100)
        self.assertOk(st, r)
        held = self.pop_all(t)
        taken = [j["id"] for j in r["jobs"]] + held
        self.assertLessEqual(len(taken), c)
        poll = LongPoll(self.c, topic=t, timeout=20).start()
        time.sleep(0.5)
        self.assertIsNone(poll.answer, "the long-poll waits while the limit is used")
        st, f = self.c.req("finish", id=taken[0])
        self.assertOk(st, f)
        st, r = poll.wait(25)
        self.assertOk(st, r)
        self.assertIsNotNone(r["id"], "woken with a job")
        self.assertLess(poll.took, 3.0, "woken by the finish, not by a 30 s recheck")
        self.c.req("delete", ids=[jid0] + ids)

    def test_concurrency_below_the_shard_count(self):
        t = unique("cs")
        st, r = self.c.req("policy", topic=t, concurrency=self.c.shards)
        self.assertOk(st, r)
        if self.c.shards > 1:
            st, r = self.c.req("policy", topic=t, concurrency=self.c.shards - 1)
            self.assertError(st, r, 400, "bad_request")
            self.assertIn("field 'concurrency' must be at least %d" % self.c.shards, r["error"])
        self.policy(t, concurrency=None)


class ConcurrencyFourShards(ConcurrencyBase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, longpoll_recheck_ms=30000, shards=4)


class PushConcurrency(ReceiverTestCase):
    """delayq-push honours `concurrency`: a ledger of the callbacks in
    flight at the receiver (each answered after 0.8 s) never holds more
    than the limit, and every job is delivered; the held jobs go once a
    callback's outcome frees room."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")
    HOLD_S = 0.8

    @classmethod
    def setUpClass(cls):
        cls.ledger = {"now": 0, "most": 0}
        cls.lock = threading.Lock()
        super().setUpClass()

    @classmethod
    def answer(cls, req):
        with cls.lock:
            cls.ledger["now"] += 1
            cls.ledger["most"] = max(cls.ledger["most"], cls.ledger["now"])
        time.sleep(cls.HOLD_S)
        with cls.lock:
            cls.ledger["now"] -= 1
        return (200, {}, b"")

    def test_callbacks_in_flight_never_exceed_the_limit(self):
        t, path = unique("pc"), "/" + unique("slow")
        c = max(2, self.c.shards)
        st, r = self.c.req("policy", topic=t, concurrency=c)
        self.assertOk(st, r)
        n = 3 * c
        ids = [self.add(t, body=i, url=self.rx.url(path)) for i in range(n)]
        qs = self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= n,
                              (n * self.HOLD_S + 15) * SLOW, path)
        self.assertLessEqual(self.ledger["most"], c, "callbacks in flight at once")
        if self.c.shards == 1:
            self.assertEqual(self.ledger["most"], c, "the limit is used")
        self.assertEqual(len({q.headers["webhook-id"] for q in qs if q.path == path}), n)
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline:
            st, s = self.c.req("stats", topic=t)
            if s["topics"].get(t, {}).get("finished") == n:
                break
            time.sleep(0.1)
        self.assertEqual(s["topics"][t]["finished"], n, ids)
        self.c.req("policy", topic=t, concurrency=None)

    def test_removing_the_limit_frees_held_callbacks(self):
        t, path = unique("pr"), "/" + unique("held")
        c = self.c.shards
        self.c.req("policy", topic=t, concurrency=c)
        n = 4 * c
        for i in range(n):
            self.add(t, body=i, id="%s@%d" % (t, i), url=self.rx.url(path))
        time.sleep(0.3)  # the first ones are in flight, the rest held
        st, r = self.c.req("policy", topic=t, concurrency=None)
        self.assertOk(st, r)
        qs = self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= n,
                              (2 * self.HOLD_S + 10) * SLOW, path)
        self.assertEqual(len([q for q in qs if q.path == path]), n)


class KeyPush(ReceiverTestCase):
    """delayq-push sends a job's key as the delayq-key header."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")

    def test_delayq_key_header(self):
        t = unique("kp")
        keyed, plain = "/" + unique("keyed"), "/" + unique("plain")
        self.add(t, body=1, key="merchant/42", url=self.rx.url(keyed))
        self.add(t, body=2, url=self.rx.url(plain))
        qs = self.rx.wait_for(lambda qs: {q.path for q in qs} >= {keyed, plain}, 10 * SLOW, keyed)
        by_path = {q.path: q for q in qs}
        self.assertEqual(by_path[keyed].headers["delayq-key"], "merchant/42")
        self.assertNotIn("delayq-key", by_path[plain].headers)


if __name__ == "__main__":
    main()

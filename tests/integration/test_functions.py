"""The Redis functions of src/store/lua, each against its contract (the header
comment of each script): arguments, replies, error replies, the keys it
writes, the messages it publishes, and that a failed call writes nothing.
They run on a private redis-server with the library the build made
(src/store/lua_library.lua), without delayq-fcgi or a timer; after every call the
deployment's invariants (tests/dqtest/invariants.py) must hold, since a
crash can stop delayq between any two calls. The last test kills Redis
with -9 in the middle of a stream of calls and checks the same after the
restart (AOF, appendfsync always).
"""

import os
import re
import socket
import tempfile
import shutil
import threading
import time
import unittest

from dqtest import BUILD_DIR, RedisError, job_h_int, RedisServer, Resp, invariants, job_keys, main, pid_alive

P = "{t}"
BUCKETS = 4
SHARDS = 1
LAYOUT = 9  # the stored layout these functions write (lib/95-layout.lua)
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR", BUILD_DIR)


def library():
    with open(os.path.join(BUILD_DIR, "src", "store", "lua_library.lua")) as f:
        return f.read()


def conflict(reason, state=None, ended_ms=None, topic=None):
    """An item of add's reply that is a conflict record (add.lua's
    `conflict`: reason state ended_ms topic, nil where unset)."""
    return [reason.encode(), state and state.encode(), ended_ms, topic and topic.encode()]


def topic_bucket(topic, buckets=BUCKETS):
    """The bucket that moves a topic's delayed jobs (topic_bucket in
    lib/50-placement.lua: a hash of the name)."""
    h = 0
    for b in topic.encode():
        h = (h * 31 + b) % 2**32
    return h % buckets


def delay_key(topic, push=False):
    return P + (":dc:" if push else ":d:") + topic


class Functions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dq-fn-")
        cls.server = RedisServer(cls.dir, appendonly=True, appendfsync="always").start()
        cls.lib = library()
        cls.version = re.match(r"#!lua name=delayq_([0-9a-f]+)", cls.lib).group(1)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        r = self.server.resp()
        r("FLUSHALL")
        r("FUNCTION", "FLUSH")
        self.assertEqual(r("FUNCTION", "LOAD", self.lib), b"delayq_" + self.version.encode())
        self.sub = None

    def tearDown(self):
        if self.sub:
            self.sub.close()

    # ---------------------------------------------------------- helpers

    def call(self, name, *args, ro=False):
        """FCALL of one function with KEYS[1] = P; checks the invariants."""
        r = self.server.resp()
        try:
            return r("FCALL_RO" if ro else "FCALL", "dq_%s_%s" % (self.version, name), 1, P,
                     *args)
        finally:
            inv = invariants.check(r, prefix=P)
            self.assertEqual(inv["problems"], [], "after %s %r" % (name, args))

    def redis(self, *args):
        return self.server(*args)

    def add(self, jid, topic="q", **kw):
        return self.call("add", *self.add_args(jid, topic, **kw))

    @staticmethod
    def add_args(jid, topic="q", body=b'{"x":1}', ttr=60000, retries=-1, delay=0, at="",
                 allow="", backoff="", url="", timeout=10000, key="", traceparent="",
                 tracestate="", replace=0):
        """add's arguments for one job."""
        return (allow, BUCKETS, SHARDS, 1, jid, topic, body, ttr, retries, delay, at,
                sum(jid.encode()) % BUCKETS, backoff, url, timeout, key, traceparent, tracestate,
                replace)

    def pop(self, *topics, count=1):
        return self.pop_finish([], *topics, count=count)[1]

    def pop_finish(self, finish, *topics, count=1, allow=""):
        """(the outcome of each id finished, the jobs popped)"""
        got = self.call("pop", allow, count, len(finish), *finish, *topics)
        return got[0], got[2:]  # got[1]: token_wait_ms

    def push_take(self, limit, grace_ms):
        """push_take's jobs (its first field, token_wait_ms, left out)."""
        return self.call("push_take", limit, grace_ms)[1:]

    def job(self, jid):
        return job_keys.read(self.server.resp(), P, jid)

    def move_of(self, jid):
        """The bucket whose move reaches job jid: its topic's for a delayed
        job (its delay set's), its own for a reserved one (its TTR)."""
        j = self.job(jid)
        return str(topic_bucket(j["t"])) if j["s"] == "delay" else j["k"]

    def stats(self, topic):
        flat = self.redis("HGETALL", P + ":s:" + topic)
        return {k.decode(): int(v) for k, v in zip(flat[0::2], flat[1::2])}

    def subscribe(self, *channels):
        """Messages published from now on, read by messages()."""
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=2)
        s.sendall(Resp._encode(["SSUBSCRIBE"] + list(channels)))
        self.sub = Resp(self.server.port)
        self.sub.sock = s
        for _ in channels:
            self.sub._reply()

    def messages(self, wait=0.2, ids=None):
        """(channel, payload) of the messages published meanwhile. A ready
        message's payload is "<count>:<topic>", a NUL and the message's id:
        the id is cut off here, and appended to `ids` when given."""
        out = []
        self.sub.sock.settimeout(wait)
        try:
            while True:
                m = self.sub._reply()
                payload, _, msg_id = m[2].decode().partition("\0")
                out.append((m[1].decode(), payload))
                if ids is not None and msg_id:
                    ids.append(msg_id)
        except (socket.timeout, OSError):
            pass
        return out

    def assertDqError(self, code, fn, *args, **kw):
        with self.assertRaises(RedisError) as e:
            fn(*args, **kw)
        self.assertIn(code, str(e.exception))
        return str(e.exception)

    # ---------------------------------------------------------- add

    def test_add(self):
        self.subscribe(P + ":ready", P + ":wake")
        self.assertEqual(self.add("a", body=b'{"exact": 1.0e+2}'), [b"ok"])
        self.assertEqual(self.add("d", delay=5000), [b"ok"])
        self.assertEqual(self.add("a"), [conflict("live", "ready")])
        self.assertEqual(self.add("a", allow="other."), [conflict("hidden")], "a hidden topic")
        j = self.job("a")
        self.assertEqual((j["s"], j["t"], j["ttr"], j["n"], j["r"], j["d"]),
                         ("ready", "q", "60000", "0", "-1", "-1"))
        self.assertEqual(j["body"], b'{"exact": 1.0e+2}')
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [b"a"])
        self.assertEqual(self.job("d")["s"], "delay")
        bucket = topic_bucket("q")
        self.assertEqual(self.redis("ZSCORE", delay_key("q"), "d"), self.job("d")["d"].encode())
        self.assertEqual(self.redis("ZSCORE", P + ":bt:%d" % bucket, "d:q"), self.job("d")["d"].encode())
        self.assertEqual(self.redis("ZCARD", P + ":b:" + self.job("d")["k"]), 0, "no bucket entry")
        self.assertEqual({k: v for k, v in self.stats("q").items()},
                         {"ready": 1, "delay": 1, "added": 2, "jobs": 2})
        self.assertEqual(self.redis("ZRANGE", P + ":topics", 0, -1), [b"q"])
        ids = []
        msgs = self.messages(ids=ids)
        self.assertIn((P + ":ready", "1:q"), msgs)
        self.assertIn((P + ":wake", "%s:%s" % (bucket, self.job("d")["d"])), msgs)
        # The ready message's id: a sequence number of the call, the message's
        # place among the call's, @ the time.
        self.assertEqual(len(ids), 1, ids)
        self.assertRegex(ids[0], r"^\d+\.1@\d{13}$")
        # A batch: one reply per job, in order; one ready message per topic.
        r = self.call("add", "", BUCKETS, SHARDS, 3,
                      "b1", "q", "1", 1000, 2, 0, "", 1, "", "", 0, "", "", "", 0,
                      "b2", "q", "2", 1000, 2, 0, "", 2, "", "", 0, "", "", "", 0,
                      "a", "q", "3", 1000, 2, 0, "", 3, "", "", 0, "", "", "", 0)
        self.assertEqual(r, [b"ok", b"ok", conflict("live", "ready")])
        ids2 = []
        self.assertIn((P + ":ready", "2:q"), self.messages(ids=ids2))
        self.assertEqual(len(ids2), 1, ids2)
        self.assertNotEqual(ids2[0], ids[0])

    def test_ready_message_ids_are_unique_within_a_millisecond(self):
        """Two finishes of one topic under a concurrency limit in one
        MULTI (so, mostly, in one millisecond of Redis' clock) each tell
        the waiters with a message of its own id: a repeated id is taken
        for the first message, and the second wakes nobody. Tried until
        both calls fall in one millisecond."""
        fn = "dq_%s_remove" % self.version
        self.subscribe(P + ":ready")
        for attempt in range(50):
            t = "q%d" % attempt
            self.call("policy", t, 2, *[""] * 6)
            for jid in ("a", "b", "c"):
                self.add("%s-%s" % (t, jid), topic=t)
            popped = [j[0].decode() for j in self.pop(t, count=2)]
            self.assertEqual(len(popped), 2)
            self.messages()  # (the adds' messages)
            r = self.server.resp()
            r("MULTI")
            for jid in popped:
                r("FCALL", fn, 1, P, "", "finished", jid)
            r("EXEC")
            ids = []
            self.assertEqual(self.messages(ids=ids), [(P + ":ready", "1:" + t)] * 2)
            if len(set(i.split("@")[1] for i in ids)) == 1:
                break
        else:
            self.fail("no two calls in one millisecond in 50 tries")
        self.assertEqual(len(set(ids)), 2, ids)

    def test_add_errors_write_nothing(self):
        self.add("x")
        before = sorted(self.redis("KEYS", "*"))
        seq = self.redis("GET", P + ":seq")
        e = self.assertDqError("DQ_LAYOUT", self.call, "add", "", BUCKETS + 1, SHARDS, 1,
                               "y", "q", "1", 1000, -1, 0, "", 0, "", "", 0, "", "", "", 0)
        self.assertIn("DQ_LAYOUT buckets %d shards %d" % (BUCKETS, SHARDS), e)
        self.assertDqError("DQ_LAYOUT", self.call, "add", "", BUCKETS, SHARDS + 1, 1,
                           "y", "q", "1", 1000, -1, 0, "", 0, "", "", 0, "", "", "", 0)
        self.assertEqual(sorted(self.redis("KEYS", "*")), before)
        self.assertEqual(self.redis("GET", P + ":seq"), seq)

    def test_a_conflicting_add_writes_nothing(self):
        """A plain add writes its job at once (SET NX) and, when the id is
        taken, leaves the job there byte for byte: with history off and on
        (where a kept record is read first)."""
        for history in (False, True):
            if history:
                self.call("policy", "h", "", "", "", "", "", "", 60000)
            topic = "h" if history else "q"
            self.assertEqual(self.add("c-" + topic, topic=topic, body=b"first", delay=9000), [b"ok"])
            before = self.redis("GET", P + ":j:c-" + topic)
            stats = self.stats(topic)
            self.assertEqual(self.add("c-" + topic, topic=topic, body=b"second", ttr=5, url="http://x/"),
                             [conflict("live", "delay")])
            self.assertEqual(self.add("c-" + topic, topic=topic, allow="other."), [conflict("hidden")])
            self.assertEqual(self.redis("GET", P + ":j:c-" + topic), before)
            self.assertEqual(self.stats(topic), stats)

    def test_layout_counts_are_checked_once_and_again_after_a_new_record(self):
        """add remembers that the shard's recorded bucket and shard counts
        match; other counts are refused all the same, and when the shard's
        keys are removed and another process records other counts, the
        remembered match is forgotten: the first counts are refused."""
        self.assertEqual(self.add("a"), [b"ok"])
        self.assertEqual(self.add("b"), [b"ok"])  # (the remembered match)
        self.assertDqError("DQ_LAYOUT buckets %d shards %d" % (BUCKETS, SHARDS), self.call, "add", "",
                           BUCKETS * 2, SHARDS, 1, "y", "q", "1", 1000, -1, 0, "", 0, "", "", 0, "",
                           "", "", 0)
        self.redis("FLUSHALL")  # the deployment starts again, under other counts
        self.assertEqual(self.call("add", "", BUCKETS * 2, SHARDS, 1, "z", "q", "1", 1000, -1, 0, "", 0,
                                   "", "", 0, "", "", "", 0), [b"ok"])
        self.assertDqError("DQ_LAYOUT buckets %d shards %d" % (BUCKETS * 2, SHARDS), self.add, "c")
        self.assertEqual(self.redis("EXISTS", P + ":j:c"), 0)

    def test_a_new_record_of_the_counts_forgets_what_was_read_of_the_old(self):
        """The library remembers a shard's bucket and shard counts while it
        stays loaded; a deployment that starts again (its keys removed)
        under other counts must be read afresh: its delay sets listed under
        the new buckets, its concurrency share split over the new shards."""
        t = next(x for x in ("q%d" % i for i in range(100))
                 if topic_bucket(x, 4) != topic_bucket(x, 8))

        def add(nb, ns, jid, delay=0):
            self.assertEqual(self.call("add", "", nb, ns, 1, jid, t, "1", 60000, -1, delay, "", 0,
                                       "", "", 0, "", "", "", 0), [b"ok"])

        def pop_with_concurrency_4(nb, ns):
            self.call("policy", t, 4, *[""] * 6)
            for i in range(3):
                add(nb, ns, "r%d" % i)
            add(nb, ns, "d", delay=60000)
            return len(self.pop(t, count=5))

        self.assertEqual(pop_with_concurrency_4(4, 2), 2, "shard 0 of 2: half of 4")
        self.redis("FLUSHALL")  # the deployment starts again, under other counts
        self.assertEqual(pop_with_concurrency_4(8, 4), 1, "shard 0 of 4: a quarter of 4")
        self.assertIsNotNone(self.redis("ZSCORE", P + ":bt:%d" % topic_bucket(t, 8), "d:" + t))
        self.assertEqual(self.redis("EXISTS", P + ":bt:%d" % topic_bucket(t, 4)), 0)

    def test_a_job_due_beyond_the_horizon_reads_no_bucket_head(self):
        """A job due WAKE_HORIZON_MS or more ahead is found by the timer's
        next read of its bucket's head: no wake-up, even as the bucket's
        earliest entry. A job due sooner is announced as before, also when
        a later one of the same call skipped the read."""
        horizon = job_h_int("WAKE_HORIZON_MS")
        self.subscribe(P + ":wake")
        far = horizon + 60000
        self.assertEqual(self.add("far", delay=far), [b"ok"])
        k = self.job("far")["k"]
        self.assertEqual(self.redis("ZRANGE", delay_key("q"), 0, -1), [b"far"])
        self.assertEqual(self.messages(), [])
        # One batch of one bucket: a far job, then a near one.
        r = self.call("add", "", BUCKETS, SHARDS, 2,
                      "far2", "q", "1", 1000, -1, far, "", k, "", "", 0, "", "", "", 0,
                      "near", "q", "2", 1000, -1, 5000, "", k, "", "", 0, "", "", "", 0)
        self.assertEqual(r, [b"ok", b"ok"])
        self.assertEqual(self.messages(), [(P + ":wake", "%s:%s" % (topic_bucket("q"),
                                                                    self.job("near")["d"]))])
        self.assertEqual(self.redis("ZRANGE", delay_key("q"), 0, 0), [b"near"])
        self.assertEqual(self.redis("ZCARD", P + ":d:q"), 3)

    def test_a_batch_that_names_a_delayed_id_twice(self):
        """The second of two delayed jobs of one id in one batch sees the
        first as delayed (its delay-set entry, gathered for the end of the
        call, is written before the job's state is read), and a replace
        takes the first out of its delay set."""
        def job(jid, delay, body, replace=0):
            return [jid, "q", body, 1000, -1, delay, "", 0, "", "", 0, "", "", "", replace]
        r = self.call("add", "", BUCKETS, SHARDS, 2, *job("tw", 60000, "1"), *job("tw", 60000, "2"))
        self.assertEqual(r, [b"ok", conflict("live", "delay")])
        r = self.call("add", "", BUCKETS, SHARDS, 2, *job("tr", 60000, "1"),
                      *job("tr", 0, "2", replace=1))
        self.assertEqual(r, [b"ok", b"replaced"])
        self.assertEqual(self.job("tr")["s"], "ready")
        self.assertIsNone(self.redis("ZSCORE", delay_key("q"), "tr"))
        self.assertEqual(self.pop("q")[0][:3], [b"tr", b"q", b"2"])

    def test_an_upsert_that_cannot_replace_writes_nothing(self):
        """An upsert of a job of another topic answers that topic, and of a
        reserved job its state; neither job changes."""
        self.assertEqual(self.add("u", topic="q", delay=5000), [b"ok"])
        before = self.redis("GET", P + ":j:u")
        self.assertEqual(self.add("u", topic="other", replace=1),
                         [conflict("topic", "delay", topic="q")])
        self.assertEqual(self.redis("GET", P + ":j:u"), before)
        self.assertEqual(self.add("v", topic="q"), [b"ok"])
        self.assertEqual(self.pop("q")[0][0], b"v")
        before = self.redis("GET", P + ":j:v")
        self.assertEqual(self.add("v", topic="q", replace=1), [conflict("reserved", "reserved")])
        self.assertEqual(self.redis("GET", P + ":j:v"), before)

    # ---------------------------------------------------------- pop

    def test_key_stored_and_answered(self):
        self.add("k1", topic="kq", key="merchant-1")
        self.add("k0", topic="kq")
        self.assertEqual(self.job("k1")["g"], "merchant-1")
        self.assertNotIn("g", self.job("k0"))
        view = self.call("get", "", "k1", ro=True)
        self.assertEqual(view[14], b"merchant-1", "job_view's key")
        view = self.call("get", "", "k0", ro=True)
        self.assertEqual(len(view), 20, "every field, false where the job has none")
        self.assertIsNone(view[14])
        got = self.pop("kq", count=2)
        self.assertEqual([(g[0], g[5]) for g in got], [(b"k1", b"merchant-1"), (b"k0", None)])

    def keep(self, topic, ms):
        """The policy function's keep_ms for a topic (the other fields kept)."""
        return self.call("policy", topic, "", "", "", "", "", "", ms)

    def test_history_kept_in_the_removing_call(self):
        """With keep, remove, pop's finish and push_done leave the record
        (P:h:<id>, with PEXPIRE keep) and its index entry in the call that
        removes the job; add then answers the outcome and its time and
        writes nothing; get answers the record. Without P:history (no
        topic ever kept history in the shard) nothing of it is read."""
        self.add("n1", topic="none")
        self.assertEqual(self.call("remove", "", "finished", "n1"), [b"ok"])
        self.assertEqual(self.redis("KEYS", P + ":h*"), [], "keep 0: no record, no flag")
        self.keep("hq", 60000)
        self.assertEqual(self.redis("EXISTS", P + ":history"), 1)
        self.add("h1", topic="hq", delay=5000)
        self.assertEqual(int(self.job("h1")["du"]), int(self.job("h1")["d"]), "its due, for the record")
        self.call("reschedule", "", "h1", 0, "")
        self.pop("hq")
        j = self.job("h1")
        self.assertGreaterEqual(int(j["fd"]), int(j["du"]), "its first delivery")
        before = sorted(self.redis("KEYS", "*"))
        self.assertEqual(self.pop_finish(["h1"], "hq")[0], [b"ok"])
        view = self.call("get", "", "h1", ro=True)
        self.assertEqual(len(view), 20)
        self.assertEqual((view[0], view[1], view[2], view[5]), (b"finished", b"hq", None, 1))
        ended = view[17]
        self.assertEqual(view[18], int(j["fd"]))
        self.assertEqual(view[3], int(j["du"]))
        self.assertTrue(0 < self.redis("PTTL", P + ":h:h1") <= 60000)
        self.assertEqual(self.redis("ZRANGE", P + ":hf:hq", 0, -1, "WITHSCORES"),
                         [b"h1", str(-ended).encode()])
        self.assertEqual(self.add("h1", topic="hq"), [conflict("kept", "finished", ended)])
        self.assertEqual(self.add("h1", topic="hq", allow="other."), [conflict("hidden")])
        self.assertEqual(self.add("h1", topic="other"), [conflict("kept", "finished", ended)],
                         "ids are global: the window holds in any topic")
        self.assertNotIn(P + ":j:h1", [k.decode() for k in self.redis("KEYS", "*")])
        self.assertDqError("DQ_NOT_FOUND", self.call, "get", "other.", "h1", ro=True)
        # jobs lists it (scored by minus its ended time: newest first)
        page = self.call("jobs", "hq", "finished", 10, "", "", ro=True)
        self.assertEqual(page[:5], [0, str(-ended).encode(), b"h1", b"h1", str(-ended).encode()])
        # A delivery given back uncounted was no delivery: no first delivery.
        self.add("h2", topic="hq")
        got = self.pop("hq")
        self.assertIn("fd", self.job("h2"))
        self.assertEqual(self.call("give_back", "h2", got[0][3]), 1)
        self.assertNotIn("fd", self.job("h2"))
        # delete of a buried job: a deleted record, in the other index
        self.pop("hq")
        self.call("bury", "", "h2")
        self.assertEqual(self.call("remove", "", "deleted", "h2"), [b"ok"])
        self.assertEqual(self.call("get", "", "h2", ro=True)[0], b"deleted")
        self.assertEqual(self.redis("ZRANGE", P + ":hd:hq", 0, -1), [b"h2"])
        # A push job's delivery log stays with its record, for keep; a deadline
        # that passed with no outcome is logged too.
        self.add("h3", topic="hq", url="http://example.com/h", timeout=1000, backoff="[1]")
        self.push_take(10, 500)
        self.due_now("h3")
        self.call("move", self.move_of("h3"), 100)
        self.due_now("h3")
        self.call("move", self.move_of("h3"), 100)
        self.push_take(10, 500)
        self.assertEqual(self.call("push_done", "h3", 2, "gone", 0, 410, "", 5, ""), b"deleted")
        log = self.call("get", "", "h3", ro=True)[19]
        self.assertEqual([(e[1], e[2], e[5]) for e in log],
                         [(None, b"no outcome recorded by the deadline", b"retry"), (410, None, b"deleted")])
        self.assertTrue(0 < self.redis("PTTL", P + ":dl:h3") <= 60000)
        # keep off in the last topic: the flag expires when no record can be left
        self.keep("hq", "null")
        self.assertTrue(0 < self.redis("PTTL", P + ":history") <= 2592000000)
        self.assertEqual(self.redis("SCARD", P + ":keeping"), 0)
        self.assertEqual(self.add("h1", topic="hq"), [conflict("kept", "finished", ended)],
                         "records written stay for their time")

    def test_trace_context_stored_and_answered(self):
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        self.add("t1", topic="tq", traceparent=tp, tracestate="a=b")
        self.add("t2", topic="tq", key="m", traceparent=tp)
        self.add("t0", topic="tq", key="m")
        self.assertEqual((self.job("t1")["tp"], self.job("t1")["ts"]), (tp, "a=b"))
        self.assertNotIn("ts", self.job("t2"))
        self.assertNotIn("tp", self.job("t0"))
        # job_view's fields 15-17 (ended and first_delivered follow)
        views = [self.call("get", "", jid, ro=True)[14:17] for jid in ("t1", "t2", "t0")]
        self.assertEqual(views, [[None, tp.encode(), b"a=b"], [b"m", tp.encode(), None],
                                 [b"m", None, None]], "job_view's key, traceparent, tracestate")
        got = self.pop("tq", count=3)
        self.assertEqual([g[-3:] for g in got], views, "pop's key, traceparent, tracestate")
        # A push job's callback carries them: push_take answers them.
        self.add("t3", topic="tpush", url="http://127.0.0.1:9/x", traceparent=tp, tracestate="c=d")
        taken = self.push_take(10, 1000)
        self.assertEqual([(j[0], j[-2], j[-1]) for j in taken], [(b"t3", tp.encode(), b"c=d")])


    def test_rate_token_bucket(self):
        """A topic's rate: pop takes no more jobs than its bucket has whole
        tokens (P:tk:<topic>: t tokens at `at`, a PEXPIRE of one period),
        an empty pop spends none, and a pop the rate left with nothing
        answers when the next token is due (token_wait_ms; -1 otherwise)."""
        self.call("policy", "rq", "", 3, 60000, "", "", "", "")  # 3 a minute: a token per 20 s
        got = self.call("pop", "", 5, 0, "rq")
        self.assertEqual(got[1:], [-1], "empty: no wait, and no token spent")
        self.assertEqual(self.redis("EXISTS", P + ":tk:rq"), 0, "an untouched bucket is full")
        for i in range(5):
            self.add("rq%d" % i, topic="rq")
        got = self.call("pop", "", 5, 0, "rq")
        self.assertEqual([j[0] for j in got[2:]], [b"rq0", b"rq1", b"rq2"], "the burst of 3")
        self.assertEqual(got[1], -1, "it got jobs: nothing to wait for")
        self.assertLess(float(self.redis("HGET", P + ":tk:rq", "t")), 0.01)
        self.assertTrue(50000 < self.redis("PTTL", P + ":tk:rq") <= 60000, "it expires when full")
        got = self.call("pop", "", 5, 0, "rq")
        self.assertEqual(len(got), 2, "no token left")
        self.assertTrue(19000 < got[1] <= 20000, "the next token in about 20 s: %r" % got[1])
        self.assertEqual(self.call("ready", "rq", ro=True), [2], "ready counts the jobs, not tokens")
        # Raised: the tokens refill at the new rate from what was left.
        self.call("policy", "rq", "", 1000000, 1000, "", "", "", "")
        time.sleep(0.01)
        got = self.call("pop", "", 5, 0, "rq")
        self.assertEqual([j[0] for j in got[2:]], [b"rq3", b"rq4"])
        self.call("policy", "rq", "", "null", "null", "", "", "", "")

    def test_push_take_holds_for_the_rate(self):
        """push_take holds a push job whose topic has no token in its hold,
        lists the topic in P:rh at its next token's time and answers that
        wait; a call after that time puts back what the tokens allow."""
        self.call("policy", "rp", "", 1, 60000, "", "", "", "")  # one a minute
        for i in range(3):
            self.add("rp%d" % i, topic="rp", url="http://127.0.0.1:9/x")
        got = self.call("push_take", 10, 500)
        self.assertEqual([j[0] for j in got[1:]], [b"rp0"])
        self.assertTrue(59000 < got[0] <= 60000, "the next token in a minute: %r" % got[0])
        self.assertEqual(self.redis("ZRANGE", P + ":ph:rp", 0, -1), [b"rp1", b"rp2"])
        due = int(self.redis("ZSCORE", P + ":rh", "rp"))
        got = self.call("push_take", 10, 500)
        self.assertEqual(len(got), 1, "nothing before the token")
        self.assertTrue(0 < got[0] <= 60000)
        # The token is due (the bucket full again, P:rh's time passed).
        self.redis("DEL", P + ":tk:rp")
        self.redis("ZADD", P + ":rh", due - 60000, "rp")
        got = self.call("push_take", 10, 500)
        self.assertEqual([j[0] for j in got[1:]], [b"rp1"], "one token: one job back")
        self.assertEqual(self.redis("ZRANGE", P + ":ph:rp", 0, -1), [b"rp2"])
        self.assertEqual(self.redis("ZCARD", P + ":rh"), 1, "listed again for the one left")
        # Removed: the policy call puts the held job back at once.
        self.call("policy", "rp", "", "null", "null", "", "", "", "")
        got = self.call("push_take", 10, 500)
        self.assertEqual([j[0] for j in got[1:]], [b"rp2"])

    def test_pop(self):
        for i in range(5):
            self.add("p%d" % i, topic="one", body=b'"%d"' % i)
        self.add("other", topic="two")
        self.assertEqual(self.pop("none"), [])
        got = self.pop("one", "two", count=3)
        self.assertEqual([g[0] for g in got], [b"p0", b"p1", b"p2"], "FIFO")
        self.assertEqual(got[0][1:], [b"one", b'"0"', 1, 60000, None, None, None])
        got = self.pop("none", "one", "two", count=5)
        self.assertEqual([g[0] for g in got], [b"p3", b"p4", b"other"], "topics in order")
        j = self.job("p0")
        self.assertEqual((j["s"], j["n"]), ("reserved", "1"))
        self.assertEqual(self.redis("ZSCORE", P + ":b:" + j["k"], "p0"), j["d"].encode())
        self.assertEqual(self.stats("one")["reserved"], 5)
        self.assertEqual(self.stats("one")["popped"], 5)

    def test_pop_finishes_first(self):
        """finish-and-pop: the named jobs are finished in the same call that
        takes the next ones; an unknown id, or one outside the caller's
        topics, is not_found and changes nothing."""
        self.add("f1", topic="one")
        self.add("f2", topic="one")
        self.add("secret", topic="mail.x")
        self.pop("one")
        self.pop("mail.x")
        done, got = self.pop_finish(["f1", "nope", "secret"], "one", allow="one")
        self.assertEqual(done, [b"ok", b"DQ_NOT_FOUND", b"DQ_NOT_FOUND"])
        self.assertEqual([g[0] for g in got], [b"f2"])
        self.assertEqual(self.redis("EXISTS", P + ":j:f1"), 0)
        self.assertEqual(self.job("secret")["s"], "reserved", "another topic's job is untouched")
        self.assertEqual(self.stats("one")["finished"], 1)
        self.assertEqual(self.stats("one")["reserved"], 1)
        # The job just taken can be finished by the next call, which finds none.
        done, got = self.pop_finish(["f2"], "one")
        self.assertEqual((done, got), ([b"ok"], []))
        self.assertEqual(self.stats("one")["jobs"], 0)

    # ---------------------------------------------------------- remove

    def test_remove_in_every_state(self):
        self.add("r-ready")
        self.add("r-delay", delay=9000)
        self.add("r-res")
        self.add("r-bur")
        self.pop("q", count=2)  # r-ready, r-res reserved... take them in order
        self.call("bury", "", "r-res")
        r = self.call("remove", "", "finished", "r-ready", "r-delay", "r-res", "r-bur", "nope")
        self.assertEqual(r, [b"ok", b"ok", b"ok", b"ok", b"DQ_NOT_FOUND"])
        self.assertEqual(self.redis("KEYS", P + ":j:*"), [])
        self.assertEqual(self.redis("KEYS", P + ":v:*"), [])
        self.assertEqual(self.stats("q")["finished"], 4)
        self.assertEqual(self.stats("q")["jobs"], 0)
        self.assertEqual(self.redis("ZRANGE", P + ":idle", 0, -1), [b"q"], "the topic is idle")

    def test_topic_limits_look_like_missing_ids(self):
        self.add("secret", topic="mail.x", body=b'"s"')
        self.pop("mail.x")
        before = sorted(self.redis("KEYS", "*"))
        for name, extra in (("remove", ["finished"]), ("get", []), ("touch", []),
                            ("release", []), ("bury", [])):
            args = ["order.", *extra, "secret"] + (["0"] if name == "release" else [])
            if name in ("remove",):
                self.assertEqual(self.call(name, *args), [b"DQ_NOT_FOUND"])
            else:
                self.assertDqError("DQ_NOT_FOUND", self.call, name, *args, ro=name == "get")
        self.assertEqual(sorted(self.redis("KEYS", "*")), before)
        self.assertEqual(self.call("get", "mail.,order.", "secret", ro=True)[0], b"reserved")

    def legacy_job(self, jid, state, body, **extra):
        """A job as delayq before one key per job wrote it: a hash and a
        body key, in a bucket or a ready set as its state says."""
        now = int(self.redis("TIME")[0]) * 1000
        k = str(sum(jid.encode()) % BUCKETS)
        due = now - 1000 if state in ("delay", "reserved") else -1
        fields = {"t": "q", "ttr": 60000, "n": 1 if state == "reserved" else 0, "r": -1, "kb": 0,
                  "c": now - 2000, "k": k, "s": state, "d": due}
        fields.update(extra)
        # a shard that was migrated: its jobs are rewritten at their first change
        self.redis("MSET", P + ":buckets", BUCKETS, P + ":layout", LAYOUT)
        job_keys.write_legacy(self.server.resp(), P, jid, fields, body)
        if state == "ready":
            self.redis("ZADD", P + ":r:q", self.redis("INCR", P + ":seq"), jid)
        elif state == "delay":
            self.redis("ZADD", delay_key("q"), due, jid)
            self.redis("ZADD", P + ":bt:%d" % topic_bucket("q"), "LT", due, "d:q")
        else:
            self.redis("ZADD", P + ":b:" + k, due, jid)
            self.redis("ZADD", P + ":w:q", due, jid)
        self.redis("HINCRBY", P + ":s:q", state, 1)
        self.redis("HINCRBY", P + ":s:q", "jobs", 1)
        self.redis("HINCRBY", P + ":s:q", "added", 1)
        self.redis("HINCRBY", P + ":totals", state, 1)
        self.redis("ZADD", P + ":topics", 0, "q")
        return k

    def test_jobs_of_the_older_layout_are_read_and_rewritten(self):
        """An upgrade finds jobs stored as a hash and a body key: every
        function reads them, and the first change writes the job as one key
        (the body key goes), byte for byte."""
        body = bytes(range(256)) * 2
        self.legacy_job("old-ready", "ready", body, rt=1)
        self.legacy_job("old-delay", "delay", b"later")
        self.legacy_job("old-reserved", "reserved", b"taken", bo="5000")
        self.assertEqual(self.call("get", "", "old-ready", ro=True)[:3], [b"ready", b"q", body])
        self.assertEqual(self.call("add", "", BUCKETS, SHARDS, 1, "old-ready", "q", b"x", 60000, -1,
                                   0, "", 0, "", "", 0, "", "", "", 0), [conflict("live", "ready")])
        job = self.pop("q")[0]
        self.assertEqual((job[0], job[2], job[3]), (b"old-ready", body, 1))
        self.assertEqual(self.redis("TYPE", P + ":j:old-ready"), "string")
        self.assertEqual(self.redis("EXISTS", P + ":v:old-ready"), 0)
        self.assertEqual(self.job("old-ready")["body"], body)
        # The timer's move: the delayed job becomes ready (the move writes
        # no job: it stays a hash until pop changes it), the reserved one
        # past its TTR waits for its backoff step.
        self.assertEqual(self.call("move", topic_bucket("q"), 100, "")[0], 1)
        self.call("move", str(sum(b"old-reserved") % BUCKETS), 100, "")
        self.assertEqual(self.call("get", "", "old-delay", ro=True)[:3], [b"ready", b"q", b"later"])
        self.assertEqual(self.redis("TYPE", P + ":j:old-delay"), "hash")
        self.assertEqual(self.job("old-reserved")["s"], "delay")
        self.assertEqual(self.pop("q")[0][2], b"later")
        self.assertEqual(self.redis("KEYS", P + ":v:*"), [])
        self.assertEqual(self.call("remove", "", "finished", "old-ready", "old-delay",
                                   "old-reserved"), [b"ok", b"ok", b"ok"])
        self.assertEqual(self.redis("KEYS", P + ":j:*"), [])
        # A job of the older layout that is removed as it is takes its body key.
        self.legacy_job("old-gone", "ready", b"x")
        self.assertEqual(self.call("remove", "", "deleted", "old-gone"), [b"ok"])
        self.assertEqual(self.redis("KEYS", P + ":[jv]:*"), [])

    # ---------------------------------------------------------- get / touch / release / bury / kick

    def test_get(self):
        self.add("g", body=b"[1, 2]", retries=3, delay=60000)
        r = self.call("get", "", "g", ro=True)
        self.assertEqual(r[:3], [b"delay", b"q", b"[1, 2]"])
        self.assertEqual((r[4], r[5], r[6]), (60000, 0, 3))
        self.assertDqError("DQ_NOT_FOUND", self.call, "get", "", "none", ro=True)

    def test_touch_release_bury_kick(self):
        self.add("k", retries=1)
        self.assertDqError("DQ_CONFLICT ready", self.call, "touch", "", "k")
        self.assertDqError("DQ_CONFLICT ready", self.call, "release", "", "k", 0)
        self.assertDqError("DQ_CONFLICT ready", self.call, "bury", "", "k")
        self.pop("q")
        deadline = int(self.job("k")["d"])
        time.sleep(0.01)
        self.assertGreater(self.call("touch", "", "k"), deadline)
        self.assertEqual(self.call("release", "", "k", 50), b"delay")
        self.assertEqual(self.job("k")["s"], "delay")
        self.assertEqual(self.call("move", self.move_of("k"), 100)[0], 0, "not due yet")
        time.sleep(0.06)
        self.assertEqual(self.call("move", self.move_of("k"), 100)[0], 1)
        self.pop("q")
        # second delivery of a job with retries=1: a release now buries it
        self.assertEqual(self.call("release", "", "k", 0), b"buried")
        self.assertEqual(self.redis("ZRANGE", P + ":x:q", 0, -1), [b"k"])
        self.assertEqual(self.call("kick", "q", 10), 1)
        j = self.job("k")
        self.assertEqual((j["s"], j["kb"]), ("ready", "2"))
        self.assertEqual(self.call("kick", "q", 10), 0)
        self.pop("q")
        self.assertEqual(self.call("bury", "", "k"), b"ok")
        self.assertEqual(self.stats("q")["buries"], 2)
        self.assertEqual(self.stats("q")["kicked"], 1)

    # ---------------------------------------------------------- move

    def test_move_redelivers_and_buries(self):
        self.add("m1", retries=0, ttr=1)
        self.add("m2", ttr=1)
        self.pop("q", count=2)
        time.sleep(0.01)
        moved = 0
        for k in range(BUCKETS):
            n, earliest, now = self.call("move", k, 100)
            moved += n
            self.assertGreater(now, 0)
        self.assertEqual(moved, 2)
        self.assertEqual(self.job("m1")["s"], "buried", "retries 0: one delivery only")
        self.assertEqual(self.job("m2")["s"], "ready")
        self.assertEqual(self.stats("q")["redelivered"], 1)
        # The limit bounds one call; the earliest remaining due is returned.
        # (Delayed jobs are moved by their topic's bucket.)
        for i in range(5):
            self.call("add", "", BUCKETS, SHARDS, 1, "lim%d" % i, "q", "1", 60000, -1, 1, "", 0,
                      "", "", 0, "", "", "", 0)
        self.call("add", "", BUCKETS, SHARDS, 1, "later", "q", "1", 60000, -1, 3600000, "", 0,
                  "", "", 0, "", "", "", 0)
        time.sleep(0.01)
        n, earliest, now = self.call("move", topic_bucket("q"), 3)
        self.assertEqual(n, 3)
        self.assertLessEqual(earliest, now, "two are still due")
        n, earliest, now = self.call("move", topic_bucket("q"), 3)
        self.assertEqual((n, earliest), (2, int(self.job("later")["d"])))

    # ---------------------------------------------------------- stats / sweep

    def test_stats_pages(self):
        for i in range(7):
            self.add("s%d" % i, topic="t%d" % i)
        r = self.call("stats", "", "", 3, ro=True)
        totals = dict(zip(r[0][0::2], r[0][1::2]))
        self.assertEqual(int(totals[b"ready"]), 7)
        self.assertEqual((r[1], r[2]), (b"t2", 7))
        self.assertEqual(r[3::2], [b"t0", b"t1", b"t2"])
        r = self.call("stats", "", "t2", 3, ro=True)
        self.assertEqual(r[3::2], [b"t3", b"t4", b"t5"])
        r = self.call("stats", "", "t5", 3, ro=True)
        self.assertEqual((r[1], r[3::2]), (None, [b"t6"]))
        r = self.call("stats", "t3", "", 3, ro=True)
        self.assertEqual(r[3], b"t3")

    def test_sweep(self):
        self.add("w1", topic="keep")
        self.add("w2", topic="gone")
        self.call("remove", "", "deleted", "w2")
        self.assertEqual(self.call("sweep", 3600000, 10), 0, "not idle long enough")
        self.assertEqual(self.call("sweep", 0, 10), 1)
        self.assertEqual(self.redis("EXISTS", P + ":s:gone"), 0)
        self.assertEqual(self.redis("ZRANGE", P + ":topics", 0, -1), [b"keep"])
        self.assertEqual(self.redis("ZCARD", P + ":idle"), 0)
        totals = dict(zip(*[iter(self.redis("HGETALL", P + ":totals"))] * 2))
        self.assertEqual(int(totals[b"deleted"]), 1, "the totals keep counting")

    # ---------------------------------------------------------- lock

    def test_lock_shares_buckets(self):
        a = self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(sorted(a), list(range(BUCKETS)))
        b = self.call("lock", "maintain", "B", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(b, [], "A holds them all until it gives back")
        a = self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(len(a), BUCKETS // 2)
        b = self.call("lock", "maintain", "B", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(sorted(a + b), list(range(BUCKETS)))
        self.assertEqual(self.call("lock", "release", "A", 5000, BUCKETS, 0, SHARDS), BUCKETS // 2)
        self.assertDqError("DQ_LAYOUT", self.call, "lock", "maintain", "C", 5000, BUCKETS * 2, 0,
                           SHARDS)

    def horizon(self):
        h = self.redis("GET", P + ":horizon")
        return None if h is None else int(h)

    def test_lock_records_the_wake_up_horizon(self):
        """Each maintain records its timer's lease (P:leases) and the
        shard's wake-up horizon, the largest of the live timers' (lease / 3
        + HEAD_RECHECK_MS + HEAD_READ_SPARE_MS); the longest lease's while a
        live timer (one of an older release) has recorded none; nothing
        once the last timer has left."""
        spare = job_h_int("HEAD_RECHECK_MS") + job_h_int("HEAD_READ_SPARE_MS")
        self.assertIsNone(self.horizon())
        self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.horizon(), 5000 // 3 + spare)
        self.call("lock", "maintain", "B", 60000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.horizon(), 20000 + spare, "the longest lease's")
        self.call("lock", "release", "B", 60000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.horizon(), 5000 // 3 + spare)
        # A timer whose maintain records no lease (an older release's).
        now_ms = int(self.redis("TIME")[0]) * 1000
        self.redis("ZADD", P + ":timers", now_ms + 60000, "old")
        self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.horizon(), job_h_int("WAKE_HORIZON_MS"))
        # It leaves, and its own maintain pruned a lease of ours: forgotten.
        self.redis("ZREM", P + ":timers", "old")
        self.redis("HSET", P + ":leases", "pruned", 60000)
        self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.horizon(), 5000 // 3 + spare)
        self.assertEqual(self.redis("HGETALL", P + ":leases"), [b"A", b"5000"])
        self.call("lock", "release", "A", 5000, BUCKETS, 0, SHARDS)
        self.assertIsNone(self.horizon())
        self.assertEqual(self.redis("EXISTS", P + ":leases"), 0)

    def test_a_ttr_deadline_is_announced_only_within_the_horizon(self):
        """A pop's TTR deadline that becomes its bucket's earliest entry is
        announced on P:wake while no horizon is recorded (the longest
        lease's stands in) or when it falls within the recorded one; beyond
        it, the holder's next read of the head finds it."""
        self.subscribe(P + ":wake")
        for jid in ("a", "b", "c"):
            self.add(jid)
        self.add("short", ttr=2000)
        self.assertEqual(self.messages(), [])

        def wake_of_pop():
            jid = self.pop("q")[0][0].decode()
            return self.messages(), "%s:%s" % (self.job(jid)["k"], self.job(jid)["d"])

        got, want = wake_of_pop()
        self.assertEqual(got, [(P + ":wake", want)], "a 60 s TTR, no horizon recorded")
        self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.messages()  # (its "rebalance")
        got, _ = wake_of_pop()
        self.assertEqual(got, [], "a 60 s TTR, beyond the 5 s lease's horizon")
        self.call("lock", "maintain", "A", 600000, BUCKETS, 0, SHARDS)
        self.messages()
        got, want = wake_of_pop()
        self.assertEqual(got, [(P + ":wake", want)], "a 60 s TTR, within a 600 s lease's horizon")
        self.call("lock", "maintain", "A", 5000, BUCKETS, 0, SHARDS)
        self.messages()
        got, want = wake_of_pop()
        self.assertEqual(got, [(P + ":wake", want)], "a 2 s TTR, within the 5 s lease's horizon")

    # ---------------------------------------------------------- layout, ready

    def test_layout_and_ready_counts(self):
        self.assertEqual(self.call("layout", ro=True), [None, None, None, 0, LAYOUT],
                         "nothing recorded yet")
        self.add("r1", topic="one")
        self.add("r2", topic="one")
        self.add("d1", topic="one", delay=60000)
        self.add("t1", topic="two")
        self.assertEqual(self.call("layout", ro=True), [str(BUCKETS).encode(), b"1", LAYOUT, 1,
                                                        LAYOUT])
        self.assertEqual(self.call("ready", "one", "two", "none", ro=True), [2, 1, 0])
        self.pop("one")
        self.assertEqual(self.call("ready", "one", ro=True), [1])

    def test_a_layout_recorded_before_shards_counts_as_one_shard(self):
        self.redis("SET", P + ":buckets", BUCKETS)  # what an older delayq wrote
        self.assertEqual(self.add("old"), [b"ok"])
        self.assertDqError("DQ_LAYOUT buckets %d shards 1" % BUCKETS, self.call, "add", "",
                           BUCKETS, 4, 1, "y", "q", "1", 1000, -1, 0, "", 0, "", "", 0, "", "", "", 0)

    # ---------------------------------------------------------- stored layouts, migration

    def fcall(self, name, *args, ro=False):
        """FCALL without the invariants check, for data of an older layout."""
        return self.server.resp()("FCALL_RO" if ro else "FCALL",
                                  "dq_%s_%s" % (self.version, name), 1, P, *args)

    def write_layout1(self):
        """What delayq wrote at 1656faa (layout 1): job hashes with a list
        generation g and body keys, ready and buried lists of
        '<generation>:<id>' (stale entries too: r1 under an older
        generation, a job gone), a set of topics, counters without 'jobs'."""
        far = 5000000000000
        jobs = (("r1", "ready", "2.1", -1, 0), ("r2", "ready", "3.1", -1, 1),
                ("b1", "buried", "4.1", -1, 2), ("d1", "delay", None, far, 1),
                ("w1", "reserved", None, far + 1, 3))
        for jid, state, g, due, k in jobs:
            fields = ["t", "q", "ttr", "60000", "n", "1" if state in ("buried", "reserved") else "0",
                      "r", "-1", "kb", "0", "c", "1000", "s", state, "d", str(due), "k", str(k)]
            if g:
                fields += ["g", g]
            self.redis("HSET", P + ":j:" + jid, *fields)
            self.redis("SET", P + ":v:" + jid, '{"id":"%s"}' % jid)
            if due > 0:
                self.redis("ZADD", P + ":b:%d" % k, due, jid)
        self.redis("RPUSH", P + ":r:q", "1.1:r1", "2.1:r1", "2.2:gone", "3.1:r2")
        self.redis("RPUSH", P + ":x:q", "4.1:b1")
        self.redis("HSET", P + ":s:q", "delay", 1, "ready", 2, "reserved", 1, "buried", 1,
                   "added", 6, "finished", 1, "popped", 2)
        self.redis("HSET", P + ":s:idle", "delay", 0, "ready", 0, "added", 1, "deleted", 1)
        self.redis("SADD", P + ":topics", "q", "idle")
        self.redis("SET", P + ":buckets", BUCKETS)
        self.redis("SET", P + ":seq", 4)

    def migrate_all(self, limit):
        """Runs migrate until done; returns how many steps it took."""
        for steps in range(1, 1000):
            done, what = self.fcall("migrate", limit)
            if done:
                self.assertEqual(what, b"done")
                return steps
        self.fail("migrate never finished")

    def test_layout1_is_refused_until_migrated_in_bounded_steps(self):
        self.write_layout1()
        self.assertEqual(self.fcall("layout", ro=True), [str(BUCKETS).encode(), None, 1, 0, LAYOUT])
        for name, args in (("stats", ("", "", 10)), ("pop", ("", 1, 0, "q")),
                           ("kick", ("q", 1)), ("move", (0, 100, ""))):
            self.assertDqError("DQ_LAYOUT_OLD 1 %d" % LAYOUT, self.fcall, name, *args)
        # One entry a step: the lists take a step each of their entries, and
        # a half-converted shard is still refused.
        self.assertEqual(self.fcall("migrate", 1)[0], 0)
        self.assertEqual(self.fcall("migrate", 1)[0], 0)
        self.assertDqError("DQ_LAYOUT_OLD", self.fcall, "pop", "", 1, 0, "q")
        self.assertGreaterEqual(self.migrate_all(1), 6)
        self.assertEqual(self.redis("GET", P + ":layout"), str(LAYOUT).encode())
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [b"r1", b"r2"],
                         "live entries in list order, stale ones dropped")
        self.assertEqual(self.redis("ZRANGE", P + ":x:q", 0, -1), [b"b1"])
        self.assertEqual(self.redis("ZRANGE", P + ":d:q", 0, -1), [b"d1"])
        self.assertEqual(self.redis("ZRANGE", P + ":w:q", 0, -1), [b"w1"])
        self.assertEqual(self.redis("ZRANGE", P + ":topics", 0, -1), [b"idle", b"q"])
        self.assertEqual(self.redis("ZRANGE", P + ":idle", 0, -1), [b"idle"])
        self.assertEqual(self.stats("q")["jobs"], 5)
        totals = dict(zip(*[iter(self.redis("HGETALL", P + ":totals"))] * 2))
        self.assertEqual((totals[b"added"], totals[b"finished"], totals[b"deleted"],
                          totals[b"ready"]), (b"7", b"1", b"1", b"2"))
        self.assertEqual(self.redis("KEYS", P + ":migrate*"), [])
        # Every function works now (self.call checks the invariants).
        self.assertEqual([j[0] for j in self.pop("q", count=5)], [b"r1", b"r2"])
        self.assertEqual(self.call("kick", "q", 5), 1)
        self.assertEqual(self.pop("q")[0][2], b'{"id":"b1"}')
        self.assertEqual(self.fcall("migrate", 1), [1, b"done"], "a migrated shard is done")

    def fill_for_the_walk(self):
        """Delayed jobs of two topics (one a callback), a reserved and a
        ready push job; answers the layout-9 sets the walk must rebuild,
        with their members and scores."""
        for i in range(12):
            self.add("d%d" % i, topic="t%d" % (i % 2), delay=60000 + i)
        self.add("h1", topic="t0", url="http://example.com/h", timeout=2000)
        self.add("h2", topic="t1", url="http://example.com/h", timeout=2000, delay=70000)
        self.add("w1", topic="t0")
        self.pop("t0")  # reserved
        sets = [P + ":d:t0", P + ":d:t1", P + ":dc:t1", P + ":w:t0", P + ":q:t0"]
        sets += [P + ":bt:%d" % k for k in range(BUCKETS)] + [P + ":b:%d" % k for k in range(BUCKETS)]
        return {k: self.redis("ZRANGE", k, 0, -1, "WITHSCORES") for k in sets}

    def back_to_layout_8(self):
        """What layouts 6-8 held for the same jobs: every delayed job in its
        own bucket and in its topic's P:d (callbacks too), no delay sets of
        callbacks, no P:bt."""
        for dk in self.redis("KEYS", P + ":d*:*"):
            if dk.startswith((P + ":dl:").encode()):
                continue
            topic = dk.decode().split(":", 2)[2]
            for jid, due in zip(*[iter(self.redis("ZRANGE", dk, 0, -1, "WITHSCORES"))] * 2):
                self.redis("ZADD", P + ":b:" + self.job(jid.decode())["k"], due, jid)
                self.redis("ZADD", P + ":d:" + topic, due, jid)
            if dk.startswith((P + ":dc:").encode()):
                self.redis("DEL", dk)
        self.redis("DEL", *["%s:bt:%d" % (P, k) for k in range(BUCKETS)])

    def assert_refused_then_walked_back(self, old_layout, want):
        """The data of old_layout is refused until the migration's walk (in
        steps of 2 entries), which leaves the sets fill_for_the_walk answered."""
        self.assertDqError("DQ_LAYOUT_OLD %d %d" % (old_layout, LAYOUT), self.fcall, "jobs", "t0",
                           "delay", 10, "", "")
        self.assertGreaterEqual(self.migrate_all(2), BUCKETS + 1)
        for k, v in want.items():
            self.assertEqual(self.redis("ZRANGE", k, 0, -1, "WITHSCORES"), v, k)
        self.assertEqual(len(self.call("jobs", "t1", "delay", 10, "", "")), 3 + 3 * 7)

    def test_delayed_jobs_of_layout_8_go_to_their_delay_sets_by_a_resumable_walk(self):
        want = self.fill_for_the_walk()
        self.back_to_layout_8()
        self.redis("SET", P + ":layout", 8)
        self.redis("FUNCTION", "LOAD", "REPLACE", self.lib)
        self.assert_refused_then_walked_back(8, want)

    def test_indexes_of_layouts_2_to_5_are_built_by_a_resumable_walk(self):
        want = self.fill_for_the_walk()
        self.back_to_layout_8()
        # What layouts 2-5 held: the same, without the indexes and P:layout;
        # loaded anew, as after the Redis restart that an upgrade of a
        # Redis holding such data begins with (the library caches layouts).
        self.redis("DEL", P + ":layout", P + ":d:t0", P + ":d:t1", P + ":w:t0", P + ":q:t0")
        self.redis("FUNCTION", "LOAD", "REPLACE", self.lib)
        self.assertEqual(self.fcall("layout", ro=True)[2:4], [4, 0])
        self.assert_refused_then_walked_back(4, want)

    def test_a_shard_migrated_partway_is_refused_whatever_its_heads_say(self):
        # Ready push jobs only: once the walk indexed P:push's first
        # entries, the heads look like layout 9 (no bucket entry, P:push's
        # head indexed), yet later entries are not indexed.
        for i in range(6):
            self.add("h%d" % i, topic="t0", url="http://example.com/h")
        self.redis("DEL", P + ":layout", P + ":q:t0")  # what layouts 2-5 held
        self.redis("FUNCTION", "LOAD", "REPLACE", self.lib)
        self.assertEqual(self.fcall("layout", ro=True)[2:4], [4, 0])
        while self.fcall("migrate", 2)[1] != b"ready push jobs: from 2":
            pass
        self.assertEqual(self.redis("ZCARD", P + ":q:t0"), 2, "the walk is partway")
        self.redis("FUNCTION", "LOAD", "REPLACE", self.lib)  # a new process' first look
        self.assertEqual(self.fcall("layout", ro=True)[2:4], [4, 0])
        self.assertDqError("DQ_LAYOUT_OLD 4 %d" % LAYOUT, self.fcall, "push_take", 10, 1000)
        self.migrate_all(2)
        self.assertEqual(self.redis("KEYS", P + ":migrate*"), [])
        self.assertEqual(len(self.push_take(10, 1000)), 6)

    def test_a_newer_layout_is_refused(self):
        self.add("a")
        self.redis("SET", P + ":layout", LAYOUT + 1)
        for name, args in (("get", ("", "a")), ("add", ("", BUCKETS, SHARDS, 0)),
                           ("migrate", (10,))):
            self.assertDqError("DQ_LAYOUT_NEW %d %d" % (LAYOUT + 1, LAYOUT), self.fcall, name,
                               *args)
        self.assertEqual(self.fcall("layout", ro=True)[2:], [LAYOUT + 1, 1, LAYOUT])

    # ---------------------------------------------------------- schedules

    def redis_ms(self):
        secs, us = self.redis("TIME")
        return int(secs) * 1000 + int(us) // 1000

    def put_schedule(self, sid, next_ms, every=60, body=b"old", now_ms=None):
        """schedule's reply for an `every` schedule of topic q whose first
        fire is next_ms, computed on now_ms (Redis' time unless given)."""
        now_ms = self.redis_ms() if now_ms is None else now_ms
        return self.call("schedule", "", sid, "q", body, 60000, -1, "", every, "UTC", -1, -1,
                         next_ms // 1000, next_ms, "", "", 10000, now_ms)

    def due(self, sid):
        """(next_ms, version) of schedule sid as sched_due, a timer's read,
        gives them."""
        got = self.call("sched_due", 100, ro=True)
        rest = got[2:]
        for i in range(0, len(rest), 2):
            if rest[i] == sid.encode():
                return int(rest[i + 1][6]), int(rest[i + 1][7])
        self.fail("%s is not due" % sid)

    def fire(self, sid, version, expected_ms, fire_ms, next_ms):
        return self.call("fire", sid, version, expected_ms, fire_ms, next_ms, 0, 0)

    def test_a_fire_planned_on_a_replaced_definition_with_the_same_next_is_stale(self):
        n1 = (self.redis_ms() // 1000 - 5) * 1000
        self.assertEqual(self.put_schedule("s", n1)[0], b"created")
        read = self.due("s")  # a timer's read: it plans n1, then n1 + 60 s
        self.assertEqual(read, (n1, 1))
        self.assertEqual(self.put_schedule("s", n1, every=30, body=b"new")[0], b"replaced")
        self.assertEqual(self.fire("s", read[1], n1, n1, n1 + 60000), b"stale")
        self.assertEqual(self.redis("HGET", P + ":sch:s", "n"), str(n1).encode(),
                         "the new definition's next fire is kept")
        self.assertEqual(self.redis("EXISTS", P + ":j:s@%d" % (n1 // 1000)), 0)
        self.assertEqual(self.fire("s", 2, n1, n1, n1 + 30000), b"fired")

    def test_a_stopped_timer_cannot_fire_after_a_replacement_fired(self):
        n1 = (self.redis_ms() // 1000 - 5) * 1000
        self.put_schedule("s", n1)
        read = self.due("s")  # timer A reads n1, and stops before its fire
        # Replaced (every 30 s, on a clock a little behind: its first fire
        # is n1 - 30 s), another timer fires that, and the next is n1 again.
        self.put_schedule("s", n1 - 30000, every=30, body=b"new")
        self.assertEqual(self.fire("s", 2, n1 - 30000, n1 - 30000, n1), b"fired")
        # A goes on with what it read: the old definition's fire and next.
        self.assertEqual(self.fire("s", read[1], n1, n1, n1 + 60000), b"stale")
        self.assertEqual(self.redis("HGET", P + ":sch:s", "n"), str(n1).encode())

    def test_a_first_fire_off_redis_clock_or_not_after_the_last_fire_is_refused(self):
        now = self.redis_ms()
        n1 = (now // 1000 - 5) * 1000
        # computed on a clock 30 s behind Redis': nothing written, Redis' time answered
        got = self.put_schedule("s", n1, now_ms=now - 30000)
        self.assertEqual(got[0], b"retry")
        self.assertLessEqual(abs(got[3] - now), 1000)
        self.assertEqual(self.redis("EXISTS", P + ":sch:s"), 0)
        self.put_schedule("s", n1)
        self.assertEqual(self.fire("s", 1, n1, n1, n1 + 60000), b"fired")
        for again in (n1, n1 - 1000):  # a fire time that made a job, or one before it
            self.assertEqual(self.put_schedule("s", again)[:2], [b"retry", n1])
        self.assertEqual(self.redis("HMGET", P + ":sch:s", "n", "v"),
                         [str(n1 + 60000).encode(), b"1"])
        self.assertEqual(self.put_schedule("s", n1 + 1000)[0], b"replaced")

    # ---------------------------------------------------------- push jobs

    def test_push_take_and_done(self):
        self.subscribe(P + ":pushwake")
        self.add("h1", url="http://example.com/h", timeout=2000, backoff="[1,2.5]", retries=1)
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h1"])
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [], "not in the ready set")
        self.assertIn((P + ":pushwake", "1"), self.messages())
        self.assertEqual(self.pop("q"), [], "pop never takes a push job")
        got = self.push_take(10, 500)
        self.assertEqual(got, [[b"h1", b"q", b'{"x":1}', b"http://example.com/h", 1, 2000, None, None, None]])
        j = self.job("h1")
        self.assertEqual((j["s"], j["n"], j["bo"]), ("reserved", "1", "1000,2500"))
        self.assertEqual(self.redis("ZSCORE", P + ":b:" + j["k"], "h1"), j["d"].encode())
        self.assertEqual(self.stats("q")["reserved"], 1)
        # An outcome for another attempt changes nothing.
        self.assertEqual(self.call("push_done", "h1", 2, "ok", 0, 200, "", 0, ""), b"stale")
        # A failure: the first backoff step, last_attempt recorded.
        self.assertEqual(self.call("push_done", "h1", 1, "fail", 0, 500, "HTTP 500", 37, "oops"), b"delay")
        j = self.job("h1")
        self.assertEqual((j["s"], j["ls"], j["le"]), ("delay", "500", "HTTP 500"))
        self.assertEqual(int(j["d"]) - int(j["la"]), 1000)
        # ... and logged: get's deliveries (at status error ms response decision retry_at)
        self.assertEqual(self.call("get", "", "h1", ro=True)[19],
                         [[int(j["la"]), 500, b"HTTP 500", 37, b"oops", b"retry", int(j["d"])]])
        # Retries spent (1): the second failure buries it.
        self.due_now("h1")
        self.call("move", self.move_of("h1"), 100)
        self.assertEqual(self.push_take(10, 500)[0][4], 2)
        self.assertEqual(self.call("push_done", "h1", 2, "wait", 60000, 429, "", 0, ""), b"buried")
        self.assertEqual(self.redis("ZRANGE", P + ":x:q", 0, -1), [b"h1"])
        # Kicked back: to the push set, not the ready set.
        self.assertEqual(self.call("kick", "q", 1), 1)
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h1"])
        self.push_take(10, 500)
        self.assertEqual([e[5] for e in self.call("get", "", "h1", ro=True)[19]], [b"retry", b"buried"])
        self.assertEqual(self.call("push_done", "h1", 3, "ok", 0, 204, "", 0, ""), b"finished")
        self.assertEqual(self.redis("EXISTS", P + ":j:h1", P + ":v:h1", P + ":dl:h1"), 0,
                         "without keep the log goes with the job")
        self.assertEqual(self.stats("q")["finished"], 1)

    def test_give_back_undoes_a_reservation_uncounted(self):
        self.add("g1")
        self.add("g2")
        self.add("h3", url="http://example.com/h", backoff="[5]", retries=1)
        rt = {j: self.job(j)["rt"] for j in ("g1", "g2", "h3")}
        self.assertEqual([j[0] for j in self.pop("q", count=2)], [b"g1", b"g2"])
        self.push_take(10, 500)
        self.add("g3")
        popped = self.stats("q").get("popped", 0)
        self.assertEqual(self.call("give_back", "g2", 1, "h3", 1, "g1", 2), 2,
                         "g1 is reserved for its first delivery, not its second")
        self.assertEqual(self.call("give_back", "g1", 1), 1)
        for jid in ("g1", "g2", "h3"):
            j = self.job(jid)
            self.assertEqual((j["s"], j["n"], j["rt"]), ("ready", "0", rt[jid]),
                             "uncounted; ready since it first was")
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [b"g1", b"g2", b"g3"],
                         "given back to the head of the queue")
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h3"])
        st = self.stats("q")
        self.assertEqual((st["reserved"], st["ready"], st.get("popped", 0)), (0, 4, popped - 3))
        # Its one retry is still there: the next take is attempt 1 again.
        self.assertEqual(self.push_take(10, 500)[0][4], 1)
        self.assertEqual(self.call("push_done", "h3", 1, "fail", 0, 500, "", 0, ""), b"delay")
        self.assertEqual(self.call("give_back", "h3", 1), 0, "only a reservation still held")

    def test_an_edge_from_a_state_it_does_not_leave_is_an_error(self):
        """lib/80-lifecycle.lua's transition() refuses a job that is not in one of its
        edge's from states, before it writes the job: a ready job found in
        its topic's buried set (a stray entry) is not kicked."""
        self.add("k1")
        self.redis("ZADD", P + ":x:q", 1, "k1")
        before = self.job("k1")
        r = self.server.resp()
        err = self.assertDqError("lifecycle: kick from ready", r, "FCALL",
                                 "dq_%s_kick" % self.version, 1, P, "q", 1)
        self.assertNotIn("DQ_", err, "a bug, not a client's error")
        self.assertEqual(self.job("k1"), before)
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [b"k1"])

    def test_a_hook_the_bulk_due_edge_lacks_fails_the_move(self):
        """The timer's move makes the due edge in bulk (due_jobs_go), not
        through transition(): a hook added to what leaving delay runs
        fails the first move loudly, before it writes, until the bulk edge
        does it too."""
        self.add("d1", delay=50)
        time.sleep(0.1)
        old = "        delay = {'leave_due_set'},\n"
        self.assertIn(old, self.lib)
        lib = self.lib.replace(old, "        delay = {'leave_due_set', 'count_popped'},\n")
        self.redis("FUNCTION", "LOAD", "REPLACE", lib)
        r = self.server.resp()
        self.assertDqError("lifecycle: due_jobs_go does", r, "FCALL",
                           "dq_%s_move" % self.version, 1, P, topic_bucket("q"), 100, "")
        self.assertEqual(self.redis("ZCARD", P + ":r:q"), 0, "nothing moved")
        self.redis("FUNCTION", "LOAD", "REPLACE", self.lib)
        self.assertEqual(self.call("move", topic_bucket("q"), 100, "")[0], 1)

    def test_push_wait_is_bounded_by_the_last_step(self):
        self.add("h2", url="http://example.com/", backoff="[5,2]")
        self.push_take(1, 500)
        self.assertEqual(self.call("push_done", "h2", 1, "wait", 3600000, 503, "", 0, ""), b"delay")
        j = self.job("h2")
        self.assertEqual(int(j["d"]) - int(j["la"]), 2000)
        self.call("remove", "", "deleted", "h2")
        self.assertEqual(self.redis("ZCARD", P + ":push"), 0)

    # ---------------------------------------------------------- pause / resume

    def test_pause_stops_pop_and_resume_wakes_waiters(self):
        self.add("a")
        self.add("b", topic="other")
        self.subscribe(P + ":ready")
        self.assertEqual(self.call("pause", "pause", "q", 1000), 0)
        self.assertEqual(self.redis("SMEMBERS", P + ":paused"), [b"q"])
        got = self.pop("q", "other", count=5)
        self.assertEqual([j[0] for j in got], [b"b"], "nothing of the paused topic")
        self.assertEqual(self.call("ready", "q", "other", ro=True), [0, 0])
        self.add("c")  # due jobs still become ready, but nobody is woken
        self.assertEqual(self.job("c")["s"], "ready")
        self.assertNotIn((P + ":ready", "1:q"), self.messages())
        flat = self.call("stats", "q", "", 10, ro=True)
        fields = dict(zip(flat[4][0::2], flat[4][1::2]))
        self.assertEqual(fields[b"paused"], 1)
        self.assertIn(b"ready_age", fields)
        self.assertEqual(self.call("pause", "resume", "q", 1000), 0)
        self.assertEqual(self.redis("SMEMBERS", P + ":paused"), [])
        self.assertIn((P + ":ready", "2:q"), self.messages(), "resume tells parked long-polls")
        self.assertEqual([j[0] for j in self.pop("q", count=5)], [b"a", b"c"])
        # A second resume is a no-op that tells nobody.
        self.assertEqual(self.call("pause", "resume", "q", 1000), 0)
        self.assertEqual(self.messages(), [])

    def test_pause_holds_push_jobs_in_order(self):
        self.subscribe(P + ":pushwake")
        self.call("pause", "pause", "q", 1000)
        for jid in ("h1", "h2"):
            self.add(jid, url="http://example.com/h")
        self.add("g1", topic="other", url="http://example.com/g")
        self.add("h3", url="http://example.com/h")
        got = self.push_take(10, 500)
        self.assertEqual([j[0] for j in got], [b"g1"], "the paused topic's jobs wait")
        self.assertEqual(self.redis("ZRANGE", P + ":ph:q", 0, -1), [b"h1", b"h2", b"h3"])
        self.assertEqual(self.redis("ZCARD", P + ":push"), 0)
        self.assertEqual(self.stats("q")["ready"], 3, "held jobs are still ready")
        self.call("remove", "", "deleted", "h2")
        self.assertEqual(self.redis("ZRANGE", P + ":ph:q", 0, -1), [b"h1", b"h3"])
        self.messages()
        # A resume moves the hold back a chunk per call, oldest first.
        self.assertEqual(self.call("pause", "resume", "q", 1), 1)
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h1"])
        self.assertIn((P + ":pushwake", "1"), self.messages())
        self.add("h4", url="http://example.com/h")
        self.assertEqual(self.call("pause", "resume", "q", 1), 0)
        self.assertEqual(self.redis("EXISTS", P + ":ph:q"), 0)
        got = self.push_take(10, 500)
        self.assertEqual([j[0] for j in got], [b"h1", b"h3", b"h4"])

    def test_push_take_finishes_an_abandoned_resume_in_order(self):
        self.call("pause", "pause", "q", 1000)
        args = []
        for i in range(1200):
            args += ["p%04d" % i, "q", "1", 1000, -1, 0, "", i % BUCKETS, "",
                     "http://example.com/h", 1000, "", "", "", 0]
        self.call("add", "", BUCKETS, SHARDS, 1200, *args)
        self.push_take(1, 500)  # all 1200 looked at: 1001 held
        self.push_take(1, 500)
        self.assertEqual(self.redis("ZCARD", P + ":ph:q"), 1200)
        # A resume whose caller died after its first call: 1 moved back.
        self.assertEqual(self.call("pause", "resume", "q", 1), 1199)
        self.add("new", url="http://example.com/h")
        got = [j[0] for j in self.push_take(5, 500)]
        self.assertEqual(got, [b"p0000", b"p0001", b"p0002", b"p0003", b"p0004"])
        # 1000 moved back by that call; "new" joined the 199 left held, behind them.
        self.assertEqual(self.redis("ZCARD", P + ":ph:q"), 200)
        self.assertEqual(self.redis("ZRANGE", P + ":ph:q", -1, -1), [b"new"])
        taken = got
        while True:
            got = [j[0] for j in self.push_take(500, 500)]
            if not got:
                break
            taken += got
        self.assertEqual(taken, [b"p%04d" % i for i in range(1200)] + [b"new"])
        self.assertEqual(self.redis("EXISTS", P + ":ph:q"), 0)

    def test_push_take_skips_held_jobs_within_a_bound(self):
        self.call("pause", "pause", "q", 1000)
        args = []
        for i in range(1100):
            args += ["p%04d" % i, "q", "1", 1000, -1, 0, "", i % BUCKETS, "",
                     "http://example.com/h", 1000, "", "", "", 0]
        self.call("add", "", BUCKETS, SHARDS, 1100, *args)
        self.add("g1", topic="other", url="http://example.com/g")
        # limit 1 looks at 1 + 1000 entries at most: those are held, g1 not reached.
        self.assertEqual(self.push_take(1, 500), [])
        self.assertEqual(self.redis("ZCARD", P + ":ph:q"), 1001)
        self.assertEqual(self.redis("ZCARD", P + ":push"), 100)
        # The next call skips the other 99 held jobs and fills its limit.
        got = self.push_take(1, 500)
        self.assertEqual([j[0] for j in got], [b"g1"])
        self.assertEqual(self.redis("ZCARD", P + ":ph:q"), 1100)

    def test_lag_and_ready_age(self):
        now = int(self.redis("TIME")[0]) * 1000
        self.add("a")
        job_keys.edit(self.server.resp(), P, "a", rt=now - 5000)
        flat = self.call("stats", "q", "", 10, ro=True)
        fields = dict(zip(flat[4][0::2], flat[4][1::2]))
        self.assertGreaterEqual(fields[b"ready_age"], 5000)
        self.assertLess(fields[b"ready_age"], 7000)
        self.assertEqual(fields[b"paused"], 0)
        r = self.call("lag", ro=True)
        self.assertEqual((r[1], r[2], r[3], r[4]), (-1, -1, 0, []), "nothing overdue")
        # A delayed job 3 s past due that no timer moved.
        self.add("d", delay=60000)
        j = self.job("d")
        job_keys.edit(self.server.resp(), P, "d", d=now - 3000)
        self.redis("ZADD", delay_key("q"), now - 3000, "d")
        self.redis("ZADD", P + ":bt:%d" % topic_bucket("q"), now - 3000, "d:q")
        self.call("lock", "maintain", "t1", 5000, BUCKETS, 0, SHARDS)
        r = self.call("lag", ro=True)
        self.assertEqual(r[1], now - 3000)
        self.assertEqual(r[4], [], "t1 has not moved anything yet")
        self.call("move", topic_bucket("q"), 100, "t1")
        late, at = map(int, self.redis("HGET", P + ":timerlag", "t1").split(b":"))
        self.assertGreaterEqual(late, 3000)
        self.assertLess(late, 5000)
        r = self.call("lag", ro=True)
        self.assertEqual(r[1], -1, "moved: nothing overdue")
        self.assertEqual(r[4], [b"t1", late, at])
        # A smaller lateness within the second keeps the larger one.
        self.add("e", delay=60000)
        job_keys.edit(self.server.resp(), P, "e", d=now - 10)
        self.redis("ZADD", delay_key("q"), now - 10, "e")
        self.redis("ZADD", P + ":bt:%d" % topic_bucket("q"), now - 10, "d:q")
        self.call("move", topic_bucket("q"), 100, "t1")
        self.assertEqual(int(self.redis("HGET", P + ":timerlag", "t1").split(b":")[0]), late)
        self.call("lock", "release", "t1", 5000, BUCKETS, 0, SHARDS)
        self.assertEqual(self.redis("EXISTS", P + ":timerlag"), 0)

    def due_now(self, jid):
        """Moves a delay or reserved job's due time (or deadline) to 0."""
        j = self.job(jid)
        job_keys.edit(self.server.resp(), P, jid, d=0)
        if j["s"] == "delay":
            self.redis("ZADD", delay_key(j["t"], "u" in j), "XX", 0, jid)
            self.redis("ZADD", P + ":bt:%d" % topic_bucket(j["t"]), 0,
                       ("dc:" if "u" in j else "d:") + j["t"])
        else:
            self.redis("ZADD", P + ":b:" + j["k"], "XX", 0, jid)
            self.redis("ZADD", P + ":w:" + j["t"], "XX", 0, jid)

    def test_release_and_ttr_take_the_backoff_step(self):
        self.add("bk", backoff="[0.25,4]")
        self.pop("q")
        self.assertEqual(self.call("release", "", "bk", 0), b"delay")
        j = self.job("bk")
        self.assertLessEqual(int(j["d"]) - int(time.time() * 1000), 260)
        self.due_now("bk")
        self.call("move", self.move_of("bk"), 100)
        self.assertEqual(self.job("bk")["s"], "ready")
        self.pop("q")  # attempt 2, then its TTR passes
        self.due_now("bk")
        self.call("move", self.move_of("bk"), 100)
        j = self.job("bk")
        self.assertEqual(j["s"], "delay")
        self.assertGreater(int(j["d"]) - int(time.time() * 1000), 3500, "step 2: 4 s")
        self.assertEqual(self.stats("q")["redelivered"], 1)

    # ---------------------------------------------------------- jobs, kick_ids, reschedule

    def jobs(self, topic, state, limit, score="", after=""):
        """more, [(id, score, view)]; r[1:3] is where the walk ended."""
        r = self.call("jobs", topic, state, limit, score, after, ro=True)
        return r[0], [(r[i].decode(), int(r[i + 1]), r[i + 2]) for i in range(3, len(r), 3)]

    # ---------------------------------------------------------- purge

    def purge_walk(self, topic, state, limit, since=""):
        """Steps of purge from the head of the state until `more` is 0:
        (jobs deleted, the steps' replies)."""
        score, jid, purged, steps = "", "", 0, []
        while True:
            r = self.call("purge", topic, state, limit, since, score, jid)
            steps.append(r)
            purged += r[0]
            since, score, jid = r[2], r[3], r[4]
            if r[1] == 0:
                return purged, steps

    def test_purge_deletes_a_state_in_steps_as_delete_does(self):
        at = int(self.redis("TIME")[0]) * 1000 + 60000
        for i in range(5):  # one due ms: the walk's position is (score, id)
            self.add("pd%d" % i, at=at)
        self.add("pr")
        self.add("po", topic="o", at=at)
        purged, steps = self.purge_walk("q", "delay", 2)
        self.assertEqual(purged, 5)
        self.assertEqual([r[0] for r in steps], [2, 2, 1])
        self.assertEqual(steps[0][3:], [str(at).encode(), b"pd1"], "where the next step starts")
        self.assertEqual(sorted(self.redis("KEYS", P + ":j:*")), [P.encode() + b":j:" + i
                                                                    for i in (b"po", b"pr")])
        self.assertEqual(self.redis("EXISTS", P + ":d:q"), 0)
        self.assertEqual(self.stats("q")["deleted"], 5)
        self.assertEqual(self.stats("q")["delay"], 0)
        self.assertEqual(self.purge_walk("q", "ready", 100)[0], 1)
        self.assertEqual(self.stats("q")["jobs"], 0)
        self.assertEqual(self.redis("ZRANGE", P + ":idle", 0, -1), [b"q"], "the topic is idle")
        self.assertEqual(self.stats("o")["delay"], 1, "another topic is untouched")

    def test_purge_keeps_a_job_created_after_its_first_step_in_the_same_ms(self):
        """Creation times are in ms: of two jobs created in the millisecond
        of a purge's first step, the one created before it goes and the
        one created after it stays (the purge's later walks included)."""
        r = self.server.resp()
        fn = "dq_%s_" % self.version
        for attempt in range(50):
            before, after = "pb%d" % attempt, "pa%d" % attempt
            r("MULTI")
            for name, args in (("add", self.add_args(before)),
                               ("purge", ("q", "ready", 10, "", "", "")),
                               ("add", self.add_args(after))):
                r("FCALL", fn + name, 1, P, *args)
            step = r("EXEC")[1]
            since = step[2]
            if int(self.job(after)["c"]) != since:
                self.purge_walk("q", "ready", 10)  # another millisecond: again
                continue
            self.assertEqual(step[0], 1, "the job created before the step went")
            self.assertFalse(self.job(before))
            self.assertEqual(self.purge_walk("q", "ready", 10, since)[0], 0)
            self.assertEqual(self.job(after)["s"], "ready", "created after the purge began")
            return
        self.fail("no add ran in the millisecond of the purge's first step")

    def test_purge_keeps_jobs_created_after_its_first_step(self):
        self.add("old1")
        self.add("old2")
        r = self.call("purge", "q", "ready", 1, "", "", "")
        self.assertEqual(r[:2], [1, 1])
        since = r[2]
        time.sleep(0.01)  # a later ms than the purge's first step
        self.add("new1")
        self.pop("q")  # old2 moves to reserved...
        self.call("release", "", "old2", 0)  # ...and back: the walk meets it again
        purged, _ = self.purge_walk("q", "ready", 1, since)
        self.assertEqual(purged, 1)
        self.assertFalse(self.job("old2"), "deleted")
        self.assertEqual(self.job("new1")["s"], "ready", "added after the purge began: kept")

    def test_jobs_pages_each_state_from_its_index(self):
        for i, delay in enumerate((3000, 1000, 2000, 1000)):
            self.add("d%d" % i, delay=delay)
        self.add("other", topic="o", delay=1)
        more, page = self.jobs("q", "delay", 2)
        self.assertEqual(more, 1)
        self.assertEqual([p[0] for p in page], ["d1", "d3"], "due order, equal dues by id")
        self.assertEqual(page[0][2], self.call("get", "", "d1", ro=True), "entries are get's")
        self.assertEqual(page[0][1], int(self.job("d1")["d"]))
        more, rest = self.jobs("q", "delay", 2, page[-1][1], page[-1][0])
        self.assertEqual((more, [p[0] for p in rest]), (0, ["d2", "d0"]))
        # a position whose job has gone: the same place, found by score and id
        self.call("remove", "", "deleted", "d3")
        more, rest2 = self.jobs("q", "delay", 5, page[-1][1], "d3")
        self.assertEqual([p[0] for p in rest2], ["d2", "d0"])
        # ready: the ready set and the topic's push jobs, by sequence
        self.add("r1")
        self.add("h1", url="http://example.com/h")
        self.add("r2")
        self.assertEqual(self.redis("ZRANGE", P + ":q:q", 0, -1), [b"h1"])
        more, page = self.jobs("q", "ready", 10)
        self.assertEqual([p[0] for p in page], ["r1", "h1", "r2"])
        more, page = self.jobs("q", "ready", 1, page[0][1], "r1")
        self.assertEqual((more, [p[0] for p in page]), (1, ["h1"]))
        # reserved by deadline, from pop and from push_take
        self.pop("q")
        self.push_take(10, 500)
        more, page = self.jobs("q", "reserved", 10)
        self.assertEqual(sorted(p[0] for p in page), ["h1", "r1"])
        self.assertEqual(self.redis("ZCARD", P + ":q:q"), 0)
        self.assertEqual(self.jobs("q", "buried", 10), (0, []))
        self.call("bury", "", "r1")
        self.assertEqual([p[0] for p in self.jobs("q", "buried", 10)[1]], ["r1"])
        # the other topic's job is in no page of q
        self.assertEqual([p[0] for p in self.jobs("o", "delay", 10)[1]], ["other"])

    def test_kick_ids(self):
        self.add("k1", retries=0)
        self.add("k2", retries=0)
        self.add("k3", topic="secret.x")
        self.pop("q", count=2)
        self.call("bury", "", "k1")
        self.call("bury", "", "k2")
        before = self.job("k2")
        r = self.call("kick_ids", "", "k2", "k1", "nope", "k2")
        self.assertEqual(r, [b"ok", b"ok", b"DQ_NOT_FOUND", b"DQ_CONFLICT ready"])
        self.assertEqual(self.redis("ZRANGE", P + ":r:q", 0, -1), [b"k2", b"k1"], "in kick order")
        self.assertEqual(self.job("k2")["kb"], before["n"])
        st = self.stats("q")
        self.assertEqual((st["buried"], st["ready"], st["kicked"]), (0, 2, 2))
        self.assertEqual(self.call("kick_ids", "q,mail.", "k1"), [b"DQ_CONFLICT ready"])
        self.assertEqual(self.call("kick_ids", "mail.", "k3"), [b"DQ_NOT_FOUND"])

    def test_kick_ids_sends_push_jobs_back_to_push(self):
        self.add("h1", url="http://example.com/h", retries=0)
        self.push_take(10, 500)
        self.assertEqual(self.call("push_done", "h1", 1, "fail", 0, 500, "", 0, ""), b"buried")
        self.assertEqual(self.call("kick_ids", "", "h1"), [b"ok"])
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h1"])
        self.assertEqual(self.redis("ZRANGE", P + ":q:q", 0, -1), [b"h1"])
        self.assertEqual(self.redis("ZCARD", P + ":r:q"), 0)

    def test_reschedule(self):
        self.subscribe(P + ":wake", P + ":ready")
        self.add("a", delay=60000)
        state, due = self.call("reschedule", "", "a", 5000, "")
        self.assertEqual(state, b"delay")
        self.assertEqual(int(self.job("a")["d"]), due)
        self.assertEqual(int(self.redis("ZSCORE", P + ":d:q", "a")), due)
        self.assertIn((P + ":wake", "%s:%d" % (self.job("a")["k"], due)), self.messages())
        self.assertEqual(self.call("reschedule", "", "a", 0, ""), [b"ready", -1])
        self.assertEqual(self.redis("ZCARD", P + ":d:q"), 0)
        self.assertIn((P + ":ready", "1:q"), self.messages())
        at = int(time.time() * 1000) + 3600000
        self.assertEqual(self.call("reschedule", "", "a", 0, at), [b"delay", at])
        self.assertEqual(self.redis("ZCARD", P + ":r:q"), 0)
        st = self.stats("q")
        self.assertEqual((st["delay"], st["ready"]), (1, 0))
        # buried -> ready with fresh retries; a push job goes to P:push
        self.add("h", url="http://example.com/h", retries=0)
        self.push_take(10, 500)
        self.call("push_done", "h", 1, "fail", 0, 500, "", 0, "")
        self.assertEqual(self.call("reschedule", "", "h", 0, 1000), [b"ready", -1])
        self.assertEqual(self.redis("ZRANGE", P + ":push", 0, -1), [b"h"])
        self.assertEqual(self.job("h")["kb"], "1")
        # reserved: refused, nothing written; unknown or another topic: not found
        self.add("r")
        self.pop("q")
        before = self.job("r")
        self.assertDqError("DQ_CONFLICT reserved", self.call, "reschedule", "", "r", 5, "")
        self.assertEqual(self.job("r"), before)
        self.assertDqError("DQ_NOT_FOUND", self.call, "reschedule", "", "nope", 5, "")
        self.assertDqError("DQ_NOT_FOUND", self.call, "reschedule", "mail.", "a", 5, "")

    # ---------------------------------------------------------- a crash between calls

    def test_kill9_between_calls(self):
        """Redis killed with -9 under a stream of calls from several
        connections that are cut off mid-call: after the restart (AOF,
        appendfsync always) every call happened entirely or not at all."""
        stop = threading.Event()
        port = self.server.port
        name = lambda f: "dq_%s_%s" % (self.version, f)  # noqa: E731

        def client(k):
            r = Resp(port, timeout=2)
            i = 0
            while not stop.is_set():
                try:
                    jid = "c%d-%d" % (k, i)
                    r("FCALL", name("add"), 1, P, "", BUCKETS, SHARDS, 1, jid, "crash", "1", 5000, -1,
                      (0, 1, 50)[i % 3], "", i % BUCKETS, "", "", 0, "", "", "", 0)
                    got = r("FCALL", name("pop"), 1, P, "", 2, 0, "crash")
                    for g in got[2:3]:  # got[1]: token_wait_ms
                        r("FCALL", name("remove"), 1, P, "", "finished", g[0])
                    if i % 7 == 0:
                        r("FCALL", name("move"), 1, P, i % BUCKETS, 100)
                    if i % 5 == 0:
                        r("FCALL", name("reschedule"), 1, P, "", jid, (0, 40)[i % 2], "")
                except (OSError, ConnectionError, RedisError):
                    time.sleep(0.01)
                i += 1
            r.close()

        ths = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for th in ths:
            th.start()
        time.sleep(1.0)
        pid = self.server.proc.pid
        self.server.kill9()
        self.assertFalse(pid_alive(pid))
        stop.set()
        for th in ths:
            th.join(10)
        self.server.start()
        inv = invariants.check(self.server.resp(), prefix=P)
        print("after kill -9: %d jobs, states %s" % (inv["jobs"], inv["states"]))
        self.assertGreater(inv["jobs"] + sum(inv["stats"].get("crash", {}).values()), 0)
        self.assertEqual(inv["problems"], [])


if __name__ == "__main__":
    main()

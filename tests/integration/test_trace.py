"""Trace context (W3C Trace Context): `add` takes `traceparent` and
`tracestate` as fields (also per job of a batch) or, for a single add, as
the HTTP headers of the same names, the fields winning; `pop` answers,
`get` and `GET /jobs` return them, and delayq-push sends them as headers
on each callback attempt. A job without trace context answers and is
delivered as before, and stores no byte more. Every malformed form is
refused with 400 naming the field (or header) and the rule, and nothing
is written."""

import json
import urllib.parse

from dqtest import SLOW, DeploymentTestCase, main, unique
from dqtest.receiver import ReceiverTestCase

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
TS = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
SHAPE = ("must be a W3C traceparent of version 00: 00-<32 hex>-<16 hex>-<2 hex>, "
         "in lowercase hex")


class Trace(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    CHECK_INVARIANTS = True

    def add_with_headers(self, headers, **fields):
        """A single add with extra HTTP headers -> (status, parsed answer)."""
        st, _, data = self.c.post_raw("/add", json.dumps(fields).encode(),
                                      dict(headers, **{"Content-Type": "application/json"}))
        return st, json.loads(data)

    def raw_job(self, jid):
        """The job's stored value (one key per job), from whichever shard has it."""
        for k in range(self.c.shards):
            v = self.c.redis("GET", "%s:j:%s" % (self.c.tag(k), jid))
            if v is not None:
                return v
        self.fail("job %s is stored nowhere" % jid)

    def assert_refused(self, st, r, error, jid, topic):
        self.assertEqual(st, 400, r)
        self.assertEqual((r["success"], r["code"]), (False, "bad_request"), r)
        self.assertEqual(r["error"], error)
        st, g = self.c.req("get", id=jid)
        self.assertEqual(st, 404, "nothing written: %r" % g)
        st, s = self.c.req("stats", topic=topic)
        self.assertOk(st, s)
        self.assertEqual(s["topics"].get(topic, {}).get("jobs", 0), 0, s)

    def test_fields_carried_by_pop_get_and_jobs(self):
        t = unique("tr")
        traced = self.add(t, body={"n": 1}, traceparent=TP, tracestate=TS)
        parent_only = self.add(t, body={"n": 2}, traceparent=TP2)
        plain = self.add(t, body={"n": 3})
        st, g = self.c.req("get", id=traced)
        self.assertOk(st, g)
        self.assertEqual((g["traceparent"], g["tracestate"]), (TP, TS))
        st, g = self.c.req("get", id=parent_only)
        self.assertEqual(g["traceparent"], TP2)
        self.assertNotIn("tracestate", g)
        st, g = self.c.req("get", id=plain)
        self.assertNotIn("traceparent", g, "a job without trace context answers as before")
        self.assertNotIn("tracestate", g)
        st, page = self.c.get("/jobs?" + urllib.parse.urlencode({"topic": t, "state": "ready"}))
        self.assertOk(st, page)
        self.assertEqual({j["id"]: (j.get("traceparent"), j.get("tracestate"))
                          for j in page["jobs"]},
                         {traced: (TP, TS), parent_only: (TP2, None), plain: (None, None)})
        st, p = self.c.req("pop", topic=t, count=3)
        self.assertOk(st, p)
        self.assertEqual({j["id"]: (j.get("traceparent"), j.get("tracestate")) for j in p["jobs"]},
                         {traced: (TP, TS), parent_only: (TP2, None), plain: (None, None)})
        st, g = self.c.req("get", id=traced)
        self.assertEqual((g["state"], g["traceparent"], g["tracestate"]), ("reserved", TP, TS))
        for jid in (traced, parent_only, plain):
            self.assertOk(*self.c.req("finish", id=jid))

    def test_single_pop_and_redelivery_keep_it(self):
        t = unique("tr")
        jid = self.add(t, body=1, traceparent=TP, tracestate=TS, ttr=0.2, key="m-1")
        st, p = self.c.req("pop", topic=t)
        self.assertOk(st, p)
        self.assertEqual((p["id"], p["key"], p["traceparent"], p["tracestate"]),
                         (jid, "m-1", TP, TS))
        st, p = self.c.req("pop", topic=t, timeout=3)  # back after its TTR
        self.assertEqual((p["id"], p["attempts"], p["traceparent"], p["tracestate"]),
                         (jid, 2, TP, TS))
        self.assertOk(*self.c.req("bury", id=jid))
        st, g = self.c.req("get", id=jid)
        self.assertEqual((g["state"], g["traceparent"], g["tracestate"]), ("buried", TP, TS))
        self.assertOk(*self.c.req("delete", id=jid))

    def test_no_trace_context_stores_nothing_more(self):
        """A job without trace context is stored as before the fields
        existed: one with no optional field is its head (45 bytes), topic
        and body alone; one with a key but no trace context differs from
        the same job with a traceparent by that traceparent's bytes and its
        3-byte MessagePack header only (no placeholder for what it lacks)."""
        t = unique("tr")
        bare = self.add(t, body="b")
        self.assertEqual(len(self.raw_job(bare)), 45 + len(t) + len('"b"'))
        keyed = self.add(t, body="b", key="m")
        traced = self.add(t, body="b", key="m", traceparent=TP)
        v_keyed, v_traced = self.raw_job(keyed), self.raw_job(traced)
        self.assertNotIn(TP.encode(), v_keyed)
        self.assertIn(TP.encode(), v_traced)
        self.assertEqual(len(v_traced) - len(v_keyed), len(TP) + 3)
        for jid in (bare, keyed, traced):
            self.assertOk(*self.c.req("delete", id=jid))

    def test_batch_per_job(self):
        t = unique("tr")
        st, r = self.c.req("add", jobs=[
            {"topic": t, "body": 1, "traceparent": TP, "tracestate": TS},
            {"topic": t, "body": 2},
            {"topic": t, "body": 3, "traceparent": TP2}])
        self.assertOk(st, r)
        ids = [x["id"] for x in r["results"]]
        got = []
        for jid in ids:
            st, g = self.c.req("get", id=jid)
            self.assertOk(st, g)
            got.append((g.get("traceparent"), g.get("tracestate")))
        self.assertEqual(got, [(TP, TS), (None, None), (TP2, None)])
        for jid in ids:
            self.assertOk(*self.c.req("delete", id=jid))

    def test_headers_of_a_single_add(self):
        t = unique("tr")
        st, r = self.add_with_headers({"traceparent": TP, "tracestate": TS}, topic=t, body=1)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=r["id"])
        self.assertEqual((g["traceparent"], g["tracestate"]), (TP, TS))
        st, p = self.c.req("pop", topic=t)
        self.assertEqual((p["id"], p["traceparent"], p["tracestate"]), (r["id"], TP, TS))
        self.assertOk(*self.c.req("finish", id=r["id"]))
        # A header tracestate that is empty carries no state (W3C).
        st, r = self.add_with_headers({"traceparent": TP2, "tracestate": ""}, topic=t, body=2)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=r["id"])
        self.assertEqual(g["traceparent"], TP2)
        self.assertNotIn("tracestate", g)
        self.assertOk(*self.c.req("delete", id=r["id"]))

    def test_fields_win_over_headers(self):
        """A job with either trace field takes neither header: the fields
        win as a whole, so a trace context is never half one, half the
        other (and a header it does not take is not checked)."""
        t = unique("tr")
        st, r = self.add_with_headers({"traceparent": TP, "tracestate": TS}, topic=t, body=1,
                                      traceparent=TP2)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=r["id"])
        self.assertEqual(g["traceparent"], TP2)
        self.assertNotIn("tracestate", g, "the header's tracestate belongs to another trace")
        st, r2 = self.add_with_headers({"traceparent": "garbage"}, topic=t, body=2,
                                       traceparent=TP2, tracestate="a=b")
        self.assertOk(st, r2)
        st, g = self.c.req("get", id=r2["id"])
        self.assertEqual((g["traceparent"], g["tracestate"]), (TP2, "a=b"))
        # A batch takes no header: each job carries its own.
        st, _, data = self.c.post_raw("/add", json.dumps(
            {"jobs": [{"topic": t, "body": 3}]}).encode(), {"traceparent": TP})
        self.assertEqual(st, 200, data)
        batch_id = json.loads(data)["results"][0]["id"]
        st, g = self.c.req("get", id=batch_id)
        self.assertNotIn("traceparent", g)
        # Other commands ignore the headers (tracing libraries send them on
        # every request), even malformed ones.
        st, _, data = self.c.post_raw("/get", json.dumps({"id": r["id"]}).encode(),
                                      {"traceparent": "garbage"})
        self.assertEqual(st, 200, data)
        for jid in (r["id"], r2["id"], batch_id):
            self.assertOk(*self.c.req("delete", id=jid))

    def test_bad_trace_context_refused_nothing_written(self):
        t = unique("tr")
        jid = unique("bad")
        zeros_trace = "00-" + "0" * 32 + "-00f067aa0ba902b7-01"
        zeros_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01"
        shape = [
            TP.upper(),                                        # uppercase hex
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "01" + TP[2:],                                     # another version
            "ff" + TP[2:],                                     # the invalid version
            TP[:-1],                                           # too short flags
            TP + "0",                                          # too long
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  # ids of 31 and 17
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",  # parent of 15
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",  # separators
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",  # not hex
            "",
        ]
        for tp in shape:
            st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=tp)
            self.assert_refused(st, r, "field 'traceparent' " + SHAPE, jid, t)
        st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=zeros_trace)
        self.assert_refused(st, r, "field 'traceparent' must not have a trace id of all zeros "
                            "(W3C Trace Context)", jid, t)
        st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=zeros_parent)
        self.assert_refused(st, r, "field 'traceparent' must not have a parent id of all zeros "
                            "(W3C Trace Context)", jid, t)
        st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=42)
        self.assert_refused(st, r, "field 'traceparent' must be a string", jid, t)
        st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=TP, tracestate="a" * 513)
        self.assert_refused(st, r, "field 'tracestate' must be at most 512 bytes", jid, t)
        for ts in ("a=b\nc=d", "a=b\tc", "a=\x7f", "a=\u00e9"):
            st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=TP, tracestate=ts)
            self.assert_refused(st, r, "field 'tracestate' must be printable ASCII (no control "
                                "characters)", jid, t)
        st, r = self.c.req("add", topic=t, id=jid, body=1, tracestate=TS)
        self.assert_refused(st, r, "field 'tracestate' needs 'traceparent': a tracestate belongs "
                            "to a traceparent (W3C Trace Context)", jid, t)
        # 512 bytes is the limit, not over it.
        st, r = self.c.req("add", topic=t, id=jid, body=1, traceparent=TP, tracestate="a" * 512)
        self.assertOk(st, r)
        st, g = self.c.req("get", id=jid)
        self.assertEqual(g["tracestate"], "a" * 512)
        self.assertOk(*self.c.req("delete", id=jid))

    def test_bad_headers_refused_nothing_written(self):
        t = unique("tr")
        jid = unique("badh")
        st, r = self.add_with_headers({"traceparent": TP.upper()}, topic=t, id=jid, body=1)
        self.assert_refused(st, r, "header 'traceparent' " + SHAPE, jid, t)
        st, r = self.add_with_headers({"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"},
                                      topic=t, id=jid, body=1)
        self.assert_refused(st, r, "header 'traceparent' must not have a trace id of all zeros "
                            "(W3C Trace Context)", jid, t)
        st, r = self.add_with_headers({"traceparent": TP, "tracestate": "b" * 513}, topic=t,
                                      id=jid, body=1)
        self.assert_refused(st, r, "header 'tracestate' must be at most 512 bytes", jid, t)
        st, r = self.add_with_headers({"tracestate": TS}, topic=t, id=jid, body=1)
        self.assert_refused(st, r, "header 'tracestate' needs 'traceparent': a tracestate "
                            "belongs to a traceparent (W3C Trace Context)", jid, t)

    def test_bad_batch_job_named_nothing_written(self):
        t = unique("tr")
        ok, bad = unique("ok"), unique("bad")
        st, r = self.c.req("add", jobs=[
            {"topic": t, "id": ok, "body": 1, "traceparent": TP},
            {"topic": t, "id": bad, "body": 2, "traceparent": TP[:-2] + "0G"}])
        self.assert_refused(st, r, "field 'jobs[1].traceparent' " + SHAPE, bad, t)
        st, g = self.c.req("get", id=ok)
        self.assertEqual(st, 404, "the batch's valid job was not written either: %r" % g)
        st, r = self.c.req("add", jobs=[
            {"topic": t, "id": ok, "body": 1, "traceparent": TP, "tracestate": "x\x01"}])
        self.assert_refused(st, r, "field 'jobs[0].tracestate' must be printable ASCII (no "
                            "control characters)", ok, t)


class TracePush(ReceiverTestCase):
    """delayq-push sends a job's trace context as the traceparent and
    tracestate headers, on every attempt; a job without sends neither."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback")

    @classmethod
    def setUpClass(cls):
        cls.paths_failing = set()
        super().setUpClass()

    @classmethod
    def answer(cls, req):
        if req.path in cls.paths_failing:
            cls.paths_failing.discard(req.path)  # fails once, then succeeds
            return (500, {}, b"again")
        return (200, {}, b"ok")

    def test_headers_on_each_callback(self):
        t = unique("tp")
        traced, plain, header = "/" + unique("traced"), "/" + unique("plain"), "/" + unique("hdr")
        self.paths_failing.add(traced)
        self.add(t, body=1, traceparent=TP, tracestate=TS, url=self.rx.url(traced),
                 backoff=[0.1])
        self.add(t, body=2, url=self.rx.url(plain))
        st, _, data = self.c.post_raw("/add", json.dumps(
            {"topic": t, "body": 3, "url": self.rx.url(header)}).encode(),
            {"traceparent": TP2})
        self.assertEqual(st, 200, data)
        want = {plain: 1, header: 1, traced: 2}
        qs = self.rx.wait_for(
            lambda qs: all(len([q for q in qs if q.path == p]) >= n for p, n in want.items()),
            10 * SLOW, traced)
        attempts = [q for q in qs if q.path == traced]
        self.assertEqual([q.headers["delayq-attempt"] for q in attempts], ["1", "2"])
        for q in attempts:
            self.assertEqual((q.headers["traceparent"], q.headers["tracestate"]), (TP, TS))
        q = [q for q in qs if q.path == header][0]
        self.assertEqual(q.headers["traceparent"], TP2)
        self.assertNotIn("tracestate", q.headers)
        q = [q for q in qs if q.path == plain][0]
        self.assertNotIn("traceparent", q.headers)
        self.assertNotIn("tracestate", q.headers)


if __name__ == "__main__":
    main()

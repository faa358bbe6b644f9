"""Protocol conformance: every command, every error code, strict JSON, both
request forms, GET endpoints, batches, and "a rejected request writes
nothing" (checked against the private Redis)."""

import json
import os
import re
import sys
import time
import urllib.parse

from dqtest.deployment import LAYOUT
from dqtest import (SLOW, Deployment, DeploymentTestCase, main, raw_http, single_redis_only,
                    unique)


def is_lock_key(k):
    # A timer renews its bucket locks in the background; they are not data.
    return ":lock:" in k or k.endswith(":timers")


def now_ms():
    return int(time.time() * 1000)


# A delay (s) no job reaches while this file runs, even under valgrind on a
# loaded machine: a job the timer moved mid-test would change the snapshot
# a rejected request is checked against.
LATER = 3600


class ProtocolTest(DeploymentTestCase):
    # Long TTRs: no job may change state behind a test's back while it
    # compares Redis before and after a rejected request.
    DEPLOYMENT_KW = dict(workers=2, threads=16, fcgi_flags=dict(default_ttr=3600))

    # ------------------------------------------------------------ helpers

    def snap(self):
        return self.c.snapshot(ignore=is_lock_key)

    def rejected(self, method, path, body, http_status=400, code="bad_request", names=None,
                 headers=None, reason=None):
        """Sends one bad request, checks the error answer and that Redis is
        byte-for-byte unchanged. names: a substring the error must contain
        (the field it names)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode("utf-8")
        before = self.snap()
        st, h, data = self.c.request(method, path, body, headers)
        try:
            r = json.loads(data.decode("utf-8"))
        except ValueError:
            r = data
        what = "%s %s %r" % (method, path, body[:120] if body else body)
        self.assertError(st, r, http_status, code, what)
        if names:
            self.assertIn(names, r["error"], what)
        self.assertEqual(r.get("reason"), reason, what)
        self.assertTrue(h.get("content-type", "").startswith("application/json"),
                        "%s: content-type %r" % (what, h.get("content-type")))
        after = self.snap()
        self.assertEqual(before, after, "%s changed Redis" % what)
        return r

    # ------------------------------------------------------------ forms

    def test_both_request_forms(self):
        t = unique("forms")
        a, b, c = self.c.one_shard_ids(t, 3)  # FIFO holds within a shard
        st, r = self.c.post("/", {"command": "add", "topic": t, "id": a, "body": "A"})
        self.assertOk(st, r)
        self.assertEqual(r["id"], a)
        st, r = self.c.post("/add", {"topic": t, "id": b, "body": "B"})
        self.assertOk(st, r)
        # command present and matching the path: fine
        st, r = self.c.post("/add", {"command": "add", "topic": t, "id": c, "body": "C"})
        self.assertOk(st, r)
        st, r = self.c.post("/", {"command": "pop", "topic": t})
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["value"]), (a, "A"))
        st, r = self.c.post("/pop", {"command": "pop", "topic": t})
        self.assertOk(st, r)
        self.assertEqual(r["id"], b)
        for cmd in ("get", "finish"):
            st, r = self.c.post("/", {"command": cmd, "id": a})
            self.assertOk(st, r, cmd)
        st, r = self.c.post("/", {"command": "stats", "topic": t})
        self.assertOk(st, r)
        self.assertEqual(r["topics"][t]["finished"], 1)
        st, r = self.c.post("/", {"command": "health"})
        self.assertOk(st, r)
        # Content-Type is not checked
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            body = json.dumps({"topic": t, "body": str(ctype)}).encode()
            st, h, data = self.c.post_raw("/add", body, headers={"Content-Type": ctype})
            self.assertOk(st, json.loads(data), "Content-Type %s" % ctype)
        # POST /<cmd> with an empty body is {}
        st, h, data = self.c.post_raw("/stats", b"")
        self.assertOk(st, json.loads(data))

    def test_command_path_mismatch(self):
        t = unique("mis")
        self.rejected("POST", "/add", {"command": "pop", "topic": t, "body": 1}, names="command")
        self.rejected("POST", "/pop", {"command": "add", "topic": t, "body": 1}, names="command")
        self.rejected("POST", "/add", {"command": 5, "topic": t, "body": 1}, names="command")

    def test_bad_commands_and_paths(self):
        t = unique("badcmd")
        self.rejected("POST", "/", {"command": "frobnicate", "topic": t},
                      reason="unknown_command")
        self.rejected("POST", "/", {"topic": t, "body": "x"}, names="command")
        self.rejected("POST", "/", b"")
        self.rejected("POST", "/frobnicate", {"topic": t}, reason="unknown_command")
        self.rejected("POST", "/add/extra", {"topic": t, "body": 1}, reason="unknown_command")
        self.rejected("GET", "/frobnicate", None, reason="unknown_command")
        self.rejected("GET", "/", None)
        # GET of a write command
        for cmd in ("add", "pop", "finish", "delete", "touch", "release", "bury", "kick"):
            self.rejected("GET", "/%s?topic=%s&id=x&body=1" % (cmd, t), None)
        # other methods
        self.rejected("PUT", "/add", {"topic": t, "body": 1})
        self.rejected("DELETE", "/delete?id=x", None)

    # ------------------------------------------------------------ bad input

    def test_not_a_json_object(self):
        t = unique("nobj")
        for body in (b"not json", b"[1,2]", b'"add"', b"42", b"null", b"true", b"{",
                     b'{"topic":"a","body":1', b"{}{}", b'{"topic":"a","body":1} x',
                     b"\xef\xbb\xbf{}"):
            self.rejected("POST", "/add", body)
        self.rejected("POST", "/", b'["add"]')
        self.rejected("POST", "/", b'{"command":"add","topic":"%s","body":1}]' % t.encode())

    def test_strict_json(self):
        t = unique("strict")
        good = '{"topic":"%s","body":%s}'
        cases = {
            "duplicate key": '{"topic":"%s","topic":"%s","body":1}' % (t, t),
            "duplicate key nested": good % (t, '{"a":1,"a":2}'),
            "duplicate key deep": good % (t, '[{"x":{"a":1,"b":{"c":1,"c":1}}}]'),
            "NaN": good % (t, "NaN"),
            "Infinity": good % (t, "Infinity"),
            "-Infinity": good % (t, "-Infinity"),
            "overflow": good % (t, "1e400"),
            "overflow neg": good % (t, "-1e400"),
            "overflow delay": '{"topic":"%s","body":1,"delay":1e400}' % t,
            "single quotes": "{'topic':'%s','body':1}" % t,
            "trailing comma obj": '{"topic":"%s","body":1,}' % t,
            "trailing comma arr": good % (t, "[1,2,]"),
            "leading zero": good % (t, "012"),
            "hex": good % (t, "0x10"),
            "plus": good % (t, "+1"),
            "comment": '{"topic":"%s",/* c */"body":1}' % t,
            "unquoted key": '{topic:"%s","body":1}' % t,
            "bad escape": good % (t, '"\\x41"'),
            "short unicode escape": good % (t, '"\\u12"'),
            "control char in string": good % (t, '"a\tb"'),
            "too deep": good % (t, "[" * 40 + "]" * 40),
            "undefined": good % (t, "undefined"),
        }
        for name, text in cases.items():
            with self.subTest(name):
                self.rejected("POST", "/add", text.encode("utf-8"))
        bad_utf8 = {
            "invalid byte": b"\xff",
            "lone continuation": b"\x80",
            "truncated": b"\xe6\x97",
            "overlong slash": b"\xc0\xaf",
            "overlong 3 byte": b"\xe0\x80\xaf",
            "surrogate": b"\xed\xa0\x80",
            "above U+10FFFF": b"\xf4\x90\x80\x80",
        }
        for name, raw in bad_utf8.items():
            with self.subTest(name):
                body = b'{"topic":"' + t.encode() + b'","body":"a' + raw + b'b"}'
                self.rejected("POST", "/add", body)
                body = b'{"topic":"' + t.encode() + b'","body":{"k' + raw + b'":1}}'
                self.rejected("POST", "/add", body)
        # nesting limit: 32 levels including the request object is fine
        deep_ok = "[" * 30 + "]" * 30
        st, r = self.c.post_raw("/add", (good % (t, deep_ok)).encode())[0:3:2]
        self.assertOk(st, json.loads(r), "30 nested arrays in body")
        # the valid control: the same shape parses
        st, h, data = self.c.post_raw("/add", (good % (t, '"a\\tb\\u00e9\\ud83d\\ude00"')).encode())
        self.assertOk(st, json.loads(data))
        st, r = self.c.req("get", id=json.loads(data)["id"])
        self.assertEqual(r["value"], "a\tb\u00e9\U0001F600")

    def test_field_types_and_ranges(self):
        t = unique("fields")
        base = {"topic": t, "body": "x"}

        def bad_add(names=None, **over):
            d = dict(base)
            for k, v in over.items():
                if v is DROP:
                    d.pop(k, None)
                else:
                    d[k] = v
            self.rejected("POST", "/add", d, names=names)

        bad_add("topic", topic=DROP)
        bad_add("body", body=DROP)
        bad_add("topic", topic=5)
        bad_add("topic", topic="")
        bad_add("topic", topic="a b")
        bad_add("topic", topic="a*b")
        bad_add("topic", topic="caf\u00e9")
        bad_add("topic", topic="a" * 129)
        bad_add("topic", topic=["a"])
        bad_add("id", id="")
        bad_add("id", id="a" * 257)
        bad_add("id", id="x y")
        bad_add("id", id="x\ny")
        bad_add("id", id=12)
        bad_add("delay", delay="30")
        bad_add("delay", delay=-1)
        bad_add("delay", delay=315532800 + 86400 * 10)
        bad_add("delay", delay=True)
        bad_add(None, delay=1, at=time.time() + 10)
        bad_add("at", at="now")
        bad_add("at", at=time.time() + 86400 * 366 * 11)
        bad_add("ttr", ttr=0)
        bad_add("ttr", ttr=-5)
        bad_add("ttr", ttr=86401)
        bad_add("ttr", ttr="60")
        bad_add(None, ttr=5, TTR=5)
        bad_add(None, TTR=0)
        bad_add("retries", retries=-1)
        bad_add("retries", retries=1.5)
        bad_add("retries", retries=2.0)
        bad_add("retries", retries="2")
        # pop
        self.rejected("POST", "/pop", {}, names="topic")
        self.rejected("POST", "/pop", {"topic": t, "count": 0}, names="count")
        self.rejected("POST", "/pop", {"topic": t, "count": 101}, names="count")
        self.rejected("POST", "/pop", {"topic": t, "count": 1.5}, names="count")
        self.rejected("POST", "/pop", {"topic": t, "timeout": 61}, names="timeout")
        self.rejected("POST", "/pop", {"topic": t, "timeout": -1}, names="timeout")
        self.rejected("POST", "/pop", {"topic": t, "timeout": "1"}, names="timeout")
        self.rejected("POST", "/pop", {"topic": t + ",a b"}, names="topic")
        self.rejected("POST", "/pop", {"topic": t + ",,x"})
        self.rejected("POST", "/pop", {"topics": []}, names="topics")
        self.rejected("POST", "/pop", {"topics": [t, 5]}, names="topics")
        self.rejected("POST", "/pop", {"topics": t}, names="topics")
        self.rejected("POST", "/pop", {"topic": t, "topics": [t]})
        self.rejected("POST", "/pop", {"topic": ",".join("t%d" % i for i in range(65))})
        # id commands
        for cmd in ("finish", "delete", "get", "touch", "release", "bury"):
            self.rejected("POST", "/" + cmd, {}, names="id")
            self.rejected("POST", "/" + cmd, {"id": "bad id"}, names="id")
            self.rejected("POST", "/" + cmd, {"id": 7}, names="id")
        self.rejected("POST", "/release", {"id": "x", "delay": -1}, names="delay")
        self.rejected("POST", "/finish", {"id": "x", "ids": ["x"]})
        self.rejected("POST", "/finish", {"ids": []}, names="ids")
        self.rejected("POST", "/finish", {"ids": "x"}, names="ids")
        self.rejected("POST", "/delete", {"ids": ["ok-id", "bad id"]}, names="ids[1]")
        # kick
        self.rejected("POST", "/kick", {}, names="topic")
        self.rejected("POST", "/kick", {"topic": t, "count": 0}, names="count")
        self.rejected("POST", "/kick", {"topic": t, "count": 10001}, names="count")
        self.rejected("POST", "/kick", {"topic": t, "count": "3"}, names="count")
        # stats
        self.rejected("POST", "/stats", {"topic": "a b"}, names="topic")
        self.rejected("POST", "/stats", {"topic": 3}, names="topic")
        # GET query validation
        self.rejected("GET", "/get?id=a%20b", None)
        self.rejected("GET", "/get?id=a&id=b", None)
        self.rejected("GET", "/get?id=%zz", None)
        self.rejected("GET", "/get?id=%ff", None)
        self.rejected("GET", "/get", None, names="id")
        self.rejected("GET", "/stats?topic=a%20b", None)
        # nothing of all that created the topic
        self.assertEqual(self.c.redis("KEYS", "*%s*" % t), [])

    # ------------------------------------------------------------ 404 / 409

    def test_not_found(self):
        missing = unique("missing")
        for cmd in ("get", "finish", "delete", "touch", "release", "bury"):
            with self.subTest(cmd):
                before = self.snap()
                st, r = self.c.req(cmd, id=missing)
                self.assertError(st, r, 404, "not_found", cmd)
                self.assertEqual(before, self.snap())
        st, r = self.c.get("/get?id=" + missing)
        self.assertError(st, r, 404, "not_found")

    def test_conflict(self):
        t = unique("conf")
        jid = self.add(t, {"orig": True}, id=t + "-1", ttr=30)
        before = self.snap()
        st, r = self.c.req("add", topic=t, id=jid, body="other", delay=LATER)
        self.assertError(st, r, 409, "conflict")
        self.assertEqual(before, self.snap(), "a 409 add changed Redis")
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        self.assertEqual((r["value"], r["state"], r["ttr"]), ({"orig": True}, "ready", 30))
        # touch / release / bury on a ready job
        for cmd in ("touch", "release", "bury"):
            before = self.snap()
            st, r = self.c.req(cmd, id=jid)
            self.assertError(st, r, 409, "conflict", cmd + " on ready")
            self.assertEqual(before, self.snap(), cmd)
        # ... on a delayed job
        jd = self.add(t, "d", delay=LATER)
        for cmd in ("touch", "release", "bury"):
            st, r = self.c.req(cmd, id=jd)
            self.assertError(st, r, 409, "conflict", cmd + " on delay")
        # ... on a buried job
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], jid)
        st, r = self.c.req("bury", id=jid)
        self.assertOk(st, r)
        for cmd in ("touch", "release", "bury"):
            st, r = self.c.req(cmd, id=jid)
            self.assertError(st, r, 409, "conflict", cmd + " on buried")
        # a live (buried) id still conflicts; a finished id may be reused
        st, r = self.c.req("add", topic=t, id=jid, body="again")
        self.assertError(st, r, 409, "conflict")
        st, r = self.c.req("finish", id=jid)
        self.assertOk(st, r)
        st, r = self.c.req("add", topic=t, id=jid, body="again")
        self.assertOk(st, r)
        st, r = self.c.req("get", id=jid)
        self.assertEqual((r["value"], r["state"], r["attempts"]), ("again", "ready", 0))
        st, r = self.c.req("delete", id=jid)
        self.assertOk(st, r)
        st, r = self.c.req("add", topic=t, id=jid, body="third")
        self.assertOk(st, r)

    # ------------------------------------------------------------ 413

    def test_body_too_large(self):
        t = unique("big")
        big = "x" * (64 * 1024 + 10)
        r = self.rejected("POST", "/add", {"topic": t, "body": big}, 413, "too_large",
                          names="body")
        print("413 app error: %s" % r["error"])
        # an object body over the limit too
        obj = {"k%d" % i: "v" * 100 for i in range(700)}
        self.rejected("POST", "/add", {"topic": t, "body": obj}, 413, "too_large")
        # inside a batch: nothing written
        self.rejected("POST", "/add", {"jobs": [{"topic": t, "body": "ok"},
                                                {"topic": t, "body": big}]}, 413, "too_large",
                      names="jobs[1]")
        # just under the limit is fine and round-trips
        ok = "y" * (64 * 1024 - 100)
        jid = self.add(t, ok)
        st, r = self.c.req("get", id=jid)
        self.assertEqual(r["value"], ok)

    def test_request_too_large_nginx(self):
        t = unique("huge")
        body = json.dumps({"topic": t, "body": "z" * (1024 * 1024 + 1000)}).encode()
        before = self.snap()
        st, h, data = raw_http(self.c.http_port, "POST", "/add", body)
        print("nginx 413: %s %r" % (st, data[:200]))
        self.assertEqual(st, 413)
        self.assertTrue(h.get("content-type", "").startswith("application/json"), h)
        r = json.loads(data)
        self.assertError(st, r, 413, "too_large")
        self.assertEqual(before, self.snap())

    # ------------------------------------------------------------ round trips

    def test_body_round_trip(self):
        t = unique("rt")
        bodies = [
            "hello", "", "h\u00e9llo \u2713 \u65e5\u672c \U0001F600", '{"a":1}', "[1,2]", "null",
            "42", "line\nbreak \"quoted\" back\\slash /slash \t tab", "nul\u0000byte",
            {"a": 1, "b": [1, 2, {"c": None}], "d": {"e": {"f": "g"}}},
            [[1, [2, [3, [4]]]], {"a": []}, [], {}],
            {}, [], 0, -1, 1.5, -0.25, 1e10, 12345678901234, 9007199254740991,
            None, True, False, {"\u00fcnicode key": "\u00fcnicode value"},
        ]
        ids = []
        for i, b in enumerate(bodies):
            ids.append(self.add(t, b, id="%s-%02d" % (t, i)))
        for i, b in enumerate(bodies):
            with self.subTest(body=b):
                st, r = self.c.req("get", id=ids[i])
                self.assertOk(st, r)
                self.assertIn("value", r)
                self.assertEqual(r["value"], b)
                self.assertIs(type(r["value"]), type(b), "type of %r via get" % (b,))
        popped = []
        for _ in bodies:
            st, r = self.c.req("pop", topic=t)
            self.assertOk(st, r)
            popped.append(r["id"])
            b = bodies[ids.index(r["id"])]
            with self.subTest(pop=b):
                self.assertEqual(r["value"], b)
                self.assertIs(type(r["value"]), type(b), "type of %r via pop" % (b,))
        self.assertEqual(self.c.fifo_by_shard(popped), self.c.fifo_by_shard(ids),
                         "FIFO within a topic (within each shard of it)")

    # ------------------------------------------------------------ get

    def test_get_fields(self):
        t = unique("get")
        t0 = now_ms()
        jid = self.add(t, {"k": "v"}, ttr=700, retries=3)
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        self.assertEqual(r["id"], jid)
        self.assertEqual(r["topic"], t)
        self.assertEqual(r["state"], "ready")
        self.assertEqual(r["value"], {"k": "v"})
        self.assertIsNone(r["due"])
        self.assertEqual(r["ttr"], 700)
        self.assertEqual(r["attempts"], 0)
        self.assertEqual(r["retries"], 3)
        self.assertLessEqual(abs(r["created"] - t0), 3000, "created %r vs now %r" % (r["created"], t0))
        # GET form, percent-encoded
        st, r2 = self.c.get("/get?id=" + urllib.parse.quote(jid, safe=""))
        self.assertOk(st, r2)
        self.assertEqual(r2, r)
        # delayed
        jd = self.add(t, "d", delay=LATER, TTR=9)
        st, r = self.c.req("get", id=jd)
        self.assertEqual(r["state"], "delay")
        self.assertEqual(r["ttr"], 9, "TTR is a synonym of ttr")
        self.assertIsNone(r["retries"])
        self.assertLessEqual(abs(r["due"] - (now_ms() + LATER * 1000)), 3000, r)
        # at in the future / in the past
        at = time.time() + LATER + 0.5
        ja = self.add(t, "a", at=at)
        st, r = self.c.req("get", id=ja)
        self.assertEqual(r["state"], "delay")
        self.assertLessEqual(abs(r["due"] - at * 1000), 1000, r)
        jp = self.add(t, "p", at=time.time() - 100)
        st, r = self.c.req("get", id=jp)
        self.assertEqual(r["state"], "ready")
        # reserved: due is the TTR deadline (jid and jp are ready; with
        # several shards either may come first)
        st, r = self.c.req("pop", topic=t, count=2)
        self.assertEqual(sorted(j["id"] for j in r["jobs"]), sorted([jid, jp]))
        r = next(j for j in r["jobs"] if j["id"] == jid)
        self.assertEqual((r["topic"], r["attempts"], r["ttr"], r["value"]), (t, 1, 700, {"k": "v"}))
        st, r = self.c.req("get", id=jid)
        self.assertEqual((r["state"], r["attempts"]), ("reserved", 1))
        self.assertLessEqual(abs(r["due"] - (now_ms() + 700000)), 2000, r)
        # an id with every allowed character
        weird = "Az09_.:@/-" + unique("w")
        self.add(t, 1, id=weird)
        st, r = self.c.get("/get?id=" + urllib.parse.quote(weird, safe=""))
        self.assertOk(st, r)
        self.assertEqual(r["id"], weird)
        # max lengths are accepted
        long_id = "i" * 256
        long_topic = "T" * 128
        self.add(long_topic, 1, id=long_id)
        st, r = self.c.req("get", id=long_id)
        self.assertEqual((r["id"], r["topic"]), (long_id, long_topic))
        st, r = self.c.req("delete", id=long_id)
        self.assertOk(st, r)

    def test_add_without_id(self):
        t = unique("noid")
        st, r = self.c.req("add", topic=t, body="gen")
        self.assertOk(st, r)
        gid = r["id"]
        self.assertRegex(gid, r"^[0-9a-f]{24}$")
        st, r2 = self.c.req("add", topic=t, body="gen")
        self.assertNotEqual(r2["id"], gid)
        st, r = self.c.req("get", id=gid)
        self.assertOk(st, r)
        self.assertEqual(r["value"], "gen")

    # ------------------------------------------------------------ touch etc.

    def test_touch_release_bury_kick(self):
        t = unique("trbk")
        jid = self.add(t, "v", ttr=600)
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], jid)
        st, g1 = self.c.req("get", id=jid)
        time.sleep(0.3)
        st, r = self.c.req("touch", id=jid)
        self.assertOk(st, r)
        self.assertEqual(r["id"], jid)
        self.assertGreaterEqual(r["due"], g1["due"] + 250)
        st, g2 = self.c.req("get", id=jid)
        self.assertEqual((g2["state"], g2["due"]), ("reserved", r["due"]))
        # release with delay 0 -> ready, poppable again
        st, r = self.c.req("release", id=jid)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["state"]), (jid, "ready"))
        st, r = self.c.req("pop", topic=t)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2))
        # release with delay -> delay
        st, r = self.c.req("release", id=jid, delay=LATER)
        self.assertEqual(r["state"], "delay")
        st, g = self.c.req("get", id=jid)
        self.assertEqual(g["state"], "delay")
        self.assertLessEqual(abs(g["due"] - (now_ms() + LATER * 1000)), 3000)
        st, r = self.c.req("pop", topic=t)
        self.assertIsNone(r["id"])
        # bury / kick
        j2 = self.add(t, "w")
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], j2)
        st, r = self.c.req("bury", id=j2)
        self.assertOk(st, r)
        self.assertEqual(r["id"], j2)
        st, g = self.c.req("get", id=j2)
        self.assertEqual((g["state"], g["due"]), ("buried", None))
        st, r = self.c.req("pop", topic=t)
        self.assertIsNone(r["id"], "pop never returns a buried job")
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["buried"], 1)
        st, r = self.c.req("kick", topic=t, count=10)
        self.assertOk(st, r)
        self.assertEqual(r["kicked"], 1)
        st, r = self.c.req("kick", topic=t)
        self.assertEqual(r["kicked"], 0)
        st, g = self.c.req("get", id=j2)
        self.assertEqual(g["state"], "ready")
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], j2)
        # get/finish/delete work on a buried job
        self.assertOk(*self.c.req("bury", id=j2))
        self.assertOk(*self.c.req("delete", id=j2))
        st, r = self.c.req("get", id=j2)
        self.assertError(st, r, 404, "not_found")
        # kick count default 1
        ids = [self.add(t, i) for i in range(3)]
        popped = []
        for _ in ids:
            st, r = self.c.req("pop", topic=t)
            popped.append(r["id"])
            self.assertOk(*self.c.req("bury", id=r["id"]))
        self.assertEqual(sorted(popped), sorted(ids))
        st, r = self.c.req("kick", topic=t)
        self.assertEqual(r["kicked"], 1)
        st, r = self.c.req("kick", topic=t, count=5)
        self.assertEqual(r["kicked"], 2)

    # ------------------------------------------------------------ stats

    def test_stats(self):
        t = unique("stats")
        st, r = self.c.req("stats", topic=t)
        self.assertOk(st, r)
        self.assertIn(t, r["topics"])
        for k in ("delay", "ready", "reserved", "buried", "finished", "deleted", "redelivered"):
            self.assertEqual(r["topics"][t][k], 0, "fresh topic %s" % k)
        self.assertIn("total", r)
        self.add(t, 1, delay=LATER)
        self.add(t, 2)
        self.add(t, 3)
        self.add(t, 4)
        self.add(t, 5)
        st, p = self.c.req("pop", topic=t, count=3)
        self.assertEqual(len(p["jobs"]), 3)
        ids = [j["id"] for j in p["jobs"]]
        self.assertOk(*self.c.req("finish", id=ids[0]))
        self.assertOk(*self.c.req("delete", id=ids[1]))
        self.assertOk(*self.c.req("bury", id=ids[2]))
        st, r = self.c.req("stats", topic=t)
        s = r["topics"][t]
        got = {k: s[k] for k in ("delay", "ready", "reserved", "buried", "finished", "deleted",
                                 "redelivered")}
        self.assertEqual(got, dict(delay=1, ready=1, reserved=0, buried=1, finished=1, deleted=1,
                                   redelivered=0))
        # GET forms agree
        st, g = self.c.get("/stats?topic=" + t)
        self.assertOk(st, g)
        self.assertEqual(g["topics"][t], s)
        st, g = self.c.get("/stats")
        self.assertOk(st, g)
        self.assertIn(t, g["topics"])
        self.assertEqual(g["topics"][t], s)
        for k in ("delay", "ready", "reserved", "buried", "finished", "deleted", "redelivered"):
            self.assertEqual(g["total"][k], sum(v[k] for v in g["topics"].values()), k)

    def test_health_and_metrics(self):
        st, r = self.c.get("/health")
        self.assertEqual(st, 200)
        self.assertEqual(r, self.c.health_answer())
        st, r = self.c.req("health")
        self.assertEqual(r, self.c.health_answer())
        st, h, data = self.c.request("HEAD", "/health")
        self.assertEqual(st, 200)
        self.c.req("add", topic=unique("m"), body=1)
        st, h, data = self.c.request("GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(h.get("content-type", "").startswith("text/plain"), h)
        text = data.decode()
        for name in ("delayq_jobs", "delayq_requests_total", "delayq_request_duration_seconds_bucket",
                     "delayq_jobs_added_total"):
            self.assertIn(name, text)
        self.assertRegex(text, r'delayq_requests_total\{[^}]*command="add"[^}]*\} [0-9]+')
        self.assertRegex(text, r'delayq_request_duration_seconds_bucket\{[^}]*le="\+Inf"[^}]*\} [0-9]+')
        self.assertIn("\ndelayq_layout_stored %d\n" % LAYOUT, text)
        self.assertIn("\ndelayq_layout_known %d\n" % LAYOUT, text)
        # every non-comment line is "name{labels} value"
        for line in text.splitlines():
            if line and not line.startswith("#"):
                self.assertRegex(line, r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? ([-+0-9.eE]+|NaN|[+-]Inf)$',
                                 line)
        # the request counter moves
        def count_add():
            m = re.findall(r'delayq_requests_total\{([^}]*)\} ([0-9.e+]+)',
                           self.c.request("GET", "/metrics")[2].decode())
            return sum(float(v) for lab, v in m if 'command="add"' in lab)
        # exact, although the requests are spread over both workers
        n0 = count_add()
        for _ in range(20):
            self.c.req("add", topic=unique("m"), body=1)
        n1 = count_add()
        print("delayq_requests_total{command=add}: %d -> %d" % (n0, n1))
        self.assertEqual(n1 - n0, 20, "requests counted over all workers")
        # job gauges agree with stats
        t = unique("mg")
        for _ in range(3):
            self.add(t, 1)
        self.add(t, 1, delay=LATER)
        text = self.c.request("GET", "/metrics")[2].decode()
        m = dict(re.findall(r'delayq_jobs\{([^}]*topic="%s"[^}]*)\} ([0-9.e+]+)' % t, text))
        got = {re.search(r'state="([a-z]+)"', k).group(1): float(v) for k, v in m.items()}
        self.assertEqual(got.get("ready"), 3.0, got)
        self.assertEqual(got.get("delay"), 1.0, got)

    # ------------------------------------------------------------ batches

    def test_batch_add_with_conflict(self):
        t = unique("batch")
        self.add(t, "orig", id=t + "-b")
        jobs = [{"topic": t, "id": t + "-a", "body": "A"},
                {"topic": t, "id": t + "-b", "body": "B"},
                {"topic": t, "id": t + "-c", "body": {"C": 1}, "delay": LATER},
                {"topic": t, "body": "generated"}]
        st, r = self.c.req("add", jobs=jobs)
        self.assertOk(st, r)
        res = r["results"]
        self.assertEqual(len(res), 4)
        self.assertEqual([x["success"] for x in res], [True, False, True, True])
        self.assertEqual([x["id"] for x in res[:3]], [t + "-a", t + "-b", t + "-c"])
        self.assertEqual(res[1]["code"], "conflict")
        self.assertIsInstance(res[1]["error"], str)
        self.assertRegex(res[3]["id"], r"^[0-9a-f]{24}$")
        st, g = self.c.req("get", id=t + "-b")
        self.assertEqual(g["value"], "orig")
        st, g = self.c.req("get", id=t + "-c")
        self.assertEqual((g["value"], g["state"]), ({"C": 1}, "delay"))
        # command form too, and a duplicate id within the batch
        st, r = self.c.post("/", {"command": "add", "jobs": [
            {"topic": t, "id": t + "-d", "body": 1}, {"topic": t, "id": t + "-d", "body": 2}]})
        self.assertOk(st, r)
        self.assertEqual([x["success"] for x in r["results"]], [True, False])
        st, g = self.c.req("get", id=t + "-d")
        self.assertEqual(g["value"], 1)

    def test_batch_add_bad_job(self):
        t = unique("bbad")
        jobs = [{"topic": t, "id": t + "-%d" % i, "body": i} for i in range(5)]
        jobs[3]["ttr"] = -1
        r = self.rejected("POST", "/add", {"jobs": jobs}, names="jobs[3]")
        print("batch 400: %s" % r["error"])
        jobs[3] = "not an object"
        self.rejected("POST", "/add", {"jobs": jobs}, names="jobs[3]")
        jobs[3] = {"topic": t, "id": "bad id", "body": 1}
        self.rejected("POST", "/add", {"jobs": jobs}, names="jobs[3]")
        self.rejected("POST", "/add", {"jobs": []}, names="jobs")
        self.rejected("POST", "/add", {"jobs": {"topic": t}}, names="jobs")
        self.rejected("POST", "/add", {"jobs": [{"topic": t, "body": i} for i in range(1001)]},
                      names="jobs")
        for i in range(5):
            st, r = self.c.req("get", id=t + "-%d" % i)
            self.assertError(st, r, 404, "not_found")
        # 1000 is allowed
        st, r = self.c.req("add", jobs=[{"topic": t, "body": i} for i in range(1000)])
        self.assertOk(st, r)
        self.assertEqual(len(r["results"]), 1000)
        self.assertTrue(all(x["success"] for x in r["results"]))
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["ready"], 1000)
        # and a batch delete of all of them (keeps later snapshots small)
        st, d = self.c.req("delete", ids=[x["id"] for x in r["results"]])
        self.assertOk(st, d)
        self.assertTrue(all(x["success"] for x in d["results"]))
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["ready"], s["topics"][t]["deleted"]), (0, 1000))

    def test_batch_finish_delete(self):
        t = unique("bfin")
        ids = [self.add(t, i, id=jid) for i, jid in enumerate(self.c.one_shard_ids(t, 4))]
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], ids[0])
        st, r = self.c.req("finish", ids=[ids[0], t + "-missing", ids[1]])
        self.assertOk(st, r)
        res = r["results"]
        self.assertEqual([x["id"] for x in res], [ids[0], t + "-missing", ids[1]])
        self.assertEqual([x["success"] for x in res], [True, False, True])
        self.assertEqual(res[1]["code"], "not_found")
        st, r = self.c.post("/", {"command": "delete", "ids": [ids[2], ids[3], ids[2]]})
        self.assertOk(st, r)
        self.assertEqual([x["success"] for x in r["results"]], [True, True, False])
        self.assertEqual(r["results"][2]["code"], "not_found")
        st, s = self.c.req("stats", topic=t)
        s = s["topics"][t]
        self.assertEqual((s["finished"], s["deleted"], s["ready"], s["reserved"]), (2, 2, 0, 0))
        for i in ids:
            st, r = self.c.req("get", id=i)
            self.assertError(st, r, 404, "not_found")

    # ------------------------------------------------------------ pop

    def test_pop_shapes(self):
        t = unique("pop")
        st, r = self.c.req("pop", topic=t)
        self.assertOk(st, r)
        self.assertEqual(r, {"success": True, "id": None, "value": None})
        st, r = self.c.req("pop", topic=t, count=1)
        self.assertEqual(r, {"success": True, "jobs": []})
        ids = [self.add(t, {"n": i}, id=jid, ttr=900)
               for i, jid in enumerate(self.c.one_shard_ids(t, 5))]
        st, r = self.c.req("pop", topic=t, count=1)
        self.assertOk(st, r)
        self.assertEqual(len(r["jobs"]), 1)
        j = dict(r["jobs"][0])
        j.pop("success", None)  # "shaped like the single-job answer": may carry it
        self.assertEqual(j, {"id": ids[0], "topic": t, "value": {"n": 0}, "attempts": 1,
                             "ttr": 900})
        st, r = self.c.req("pop", topic=t, count=3)
        self.assertEqual([j["id"] for j in r["jobs"]], ids[1:4])
        st, r = self.c.req("pop", topic=t, count=10)
        self.assertEqual([j["id"] for j in r["jobs"]], ids[4:])
        st, r = self.c.req("pop", topic=t, count=10)
        self.assertEqual(r["jobs"], [])
        st, r = self.c.req("stats", topic=t)
        self.assertEqual(r["topics"][t]["reserved"], 5)

    def test_pop_several_topics(self):
        a, b, c = unique("pa"), unique("pb"), unique("pc")
        jb = self.add(b, "B1")
        st, r = self.c.req("pop", topic="%s,%s" % (a, b))
        self.assertEqual((r["id"], r["topic"], r["value"]), (jb, b, "B1"))
        ja = self.add(a, "A1")
        jb2 = self.add(b, "B2")
        st, r = self.c.req("pop", topic="%s,%s" % (a, b))
        self.assertEqual(r["id"], ja, "first non-empty topic in order")
        st, r = self.c.req("pop", topics=[c, b, a])
        self.assertEqual(r["id"], jb2)
        st, r = self.c.req("pop", topics=[a, b, c])
        self.assertIsNone(r["id"])
        # count across topics: first topic first, across shards too: a and
        # c share a shard, b's jobs are in another (with several shards)
        x1, z1 = self.c.one_shard_ids(unique("ac"), 2, shard=0)
        y1, y2 = self.c.one_shard_ids(unique("b"), 2, shard=1)
        self.add(a, 1, id=x1)
        self.add(b, 2, id=y1)
        self.add(b, 3, id=y2)
        self.add(c, 4, id=z1)
        st, r = self.c.req("pop", topics=[a, b, c], count=3)
        self.assertEqual([(j["topic"], j["id"]) for j in r["jobs"]], [(a, x1), (b, y1), (b, y2)])
        st, r = self.c.req("pop", topic="%s,%s,%s" % (a, b, c), count=3)
        self.assertEqual([j["id"] for j in r["jobs"]], [z1])
        # a GET of pop is refused even with several topics
        self.rejected("GET", "/pop?topic=%s" % a, None)


DROP = object()


class TimeoutTest(DeploymentTestCase):
    """504: a write that Redis does not answer within redis_timeout_ms.
    CLIENT PAUSE WRITE holds every script call (EVALSHA counts as a write)
    while PING still answers."""

    DEPLOYMENT_KW = dict(workers=1, threads=8, fcgi_flags=dict(redis_timeout_ms=400))

    def test_write_timeout_then_retry_is_safe(self):
        t = unique("slow")
        jid = t + "-1"
        self.assertOk(*self.c.req("add", topic=t, id=t + "-0", body=0))
        self.c.redis("CLIENT", "PAUSE", 1500, "WRITE")
        t0 = time.monotonic()
        st, r = self.c.req("add", topic=t, id=jid, body={"once": True})
        dt = time.monotonic() - t0
        print("add during CLIENT PAUSE: %s %r after %.0f ms" % (st, r, dt * 1000))
        self.assertError(st, r, 504, "timeout")
        self.assertLess(dt, 1.4 * SLOW, "answered only after the pause ended")
        # a read-only command never answers 504 (its outcome is known)
        st, r = self.c.req("get", id=t + "-0")
        print("get during CLIENT PAUSE: %s %r" % (st, r))
        self.assertIn(st, (200, 503), r)
        if st == 503:
            self.assertError(st, r, 503, "unavailable")
        time.sleep(max(0, t0 + 1.7 - time.monotonic()))
        # retrying the add with the same id: 200 (it did not take) or 409 (it did)
        st, r = self.c.req("add", topic=t, id=jid, body={"once": True})
        print("retried add after the pause: %s %r" % (st, r))
        self.assertIn(st, (200, 409), r)
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        self.assertEqual(r["value"], {"once": True})
        st, r = self.c.req("pop", topic=t, count=10)
        self.assertEqual(sorted(j["id"] for j in r["jobs"]), [t + "-0", jid], "one job per id")
        st, r = self.c.req("stats", topic=t)
        self.assertEqual(r["topics"][t]["reserved"], 2)


@single_redis_only
class RedisDownTest(DeploymentTestCase):
    """503 while the private Redis is stopped; service resumes when it is
    back on the same port, without restarting delayq."""

    DEPLOYMENT_KW = dict(workers=2, threads=8)

    def test_redis_down_and_back(self):
        t = unique("down")
        self.assertOk(*self.c.req("add", topic=t, id=t + "-1", body=1))
        self.c.stop_redis()
        timings = []
        for cmd, fields in (("add", dict(topic=t, id=t + "-2", body=2)),
                            ("pop", dict(topic=t)), ("get", dict(id=t + "-1")),
                            ("finish", dict(id=t + "-1")), ("stats", {}),
                            ("add", dict(jobs=[dict(topic=t, body=3)])),
                            ("pop", dict(topic=t, timeout=2))):
            t0 = time.monotonic()
            st, r = self.c.req(cmd, **fields)
            dt = time.monotonic() - t0
            timings.append((cmd, round(dt, 3)))
            self.assertError(st, r, 503, "unavailable", cmd)
            self.assertLess(dt, 2.5 * SLOW, "%s took %.2f s" % (cmd, dt))
        t0 = time.monotonic()
        st, r = self.c.get("/health")
        dt = time.monotonic() - t0
        timings.append(("health", round(dt, 3)))
        self.assertError(st, r, 503, "unavailable")
        self.assertEqual(r.get("redis"), "down")
        self.assertLess(dt, 2.5 * SLOW)
        print("503 timings while Redis is down: %s" % timings)
        self.c.start_redis()
        t0 = time.monotonic()
        while True:
            st, r = self.c.get("/health")
            if st == 200:
                break
            self.assertLess(time.monotonic() - t0, 10 * SLOW, "health never came back: %r" % r)
            time.sleep(0.1)
        print("service back %.2f s after Redis restart" % (time.monotonic() - t0))
        # Redis had no persistence: a fresh store, fully usable
        st, r = self.c.req("add", topic=t, id=t + "-3", body={"back": True})
        self.assertOk(st, r)
        st, r = self.c.req("pop", topic=t)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["value"]), (t + "-3", {"back": True}))
        self.assertOk(*self.c.req("finish", id=t + "-3"))
        # the timer also reconnected: a delayed job comes due
        self.assertOk(*self.c.req("add", topic=t, id=t + "-4", body=4, delay=0.2))
        st, r = self.c.req("pop", topic=t, timeout=5)
        self.assertEqual(r["id"], t + "-4")


if __name__ == "__main__":
    main()

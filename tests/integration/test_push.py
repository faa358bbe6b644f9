"""Push delivery: delayq-push POSTs jobs that have a callback to a real
local HTTP receiver, signs them (Standard Webhooks), follows the outcomes
the protocol lists (2xx, 410, 429/503 with Retry-After, anything else),
steps through the backoff schedule, buries with retries spent, refuses
addresses push_allow does not admit when it connects, and a job whose
pusher was killed comes back after its deadline. stats' push_failed
counts each failed attempt (an error answer, a Retry-After, a timeout, a
reservation that ran out) and nothing else. Also backoff for pull jobs (TTR
expiry and release)."""

import base64
import hashlib
import hmac
import json
import os
import signal
import socket
import threading
import time
import urllib.parse

from dqtest import DeploymentTestCase, SLOW, job_keys, main, unique
from dqtest.hostile_receiver import HostileReceiver, check_ledger
from dqtest.receiver import Receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def verify(req, secret=SECRET):
    """The receiver's side of Standard Webhooks, written from the spec."""
    key = base64.b64decode(secret[len("whsec_"):])
    signed = ("%s.%s." % (req.headers["webhook-id"], req.headers["webhook-timestamp"])).encode()
    mac = base64.b64encode(hmac.new(key, signed + req.body, hashlib.sha256).digest()).decode()
    return ("v1," + mac) in req.headers.get("webhook-signature", "").split(" ")


class Answers:
    """What the receiver answers, by path."""

    def __init__(self):
        self.by_path = {}

    def __call__(self, req):
        a = self.by_path.get(req.path.split("?")[0], (200, {}, b"ok"))
        return a(req) if callable(a) else a


class PushTest(DeploymentTestCase):
    # The workers admit loopback callbacks (add answers 200); the pusher's
    # own list is set per test class.
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback",
                         push_grace_ms=1000, push_flags={"push_secret": SECRET})

    @classmethod
    def setUpClass(cls):
        cls.answers = Answers()
        cls.rx = Receiver(cls.answers).start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.rx.stop()

    def requests(self, path, n, timeout=10):
        return [q for q in self.rx.wait_for(
            lambda qs: len([q for q in qs if q.path == path]) >= n, timeout * SLOW, path)
            if q.path == path]

    def wait_gone(self, jid, timeout=5):
        deadline = time.monotonic() + timeout * SLOW
        while time.monotonic() < deadline:
            st, _ = self.c.req("get", id=jid)
            if st == 404:
                return
            time.sleep(0.05)
        self.fail("job %s still there: %r" % (jid, self.c.req("get", id=jid)))

    def push_failed(self, topic):
        st, s = self.c.req("stats", topic=topic)
        self.assertOk(st, s)
        return s["topics"][topic]["push_failed"]

    def wait_state(self, jid, state, timeout=5):
        deadline = time.monotonic() + timeout * SLOW
        while time.monotonic() < deadline:
            st, r = self.c.req("get", id=jid)
            if st == 200 and r["state"] == state:
                return r
            time.sleep(0.05)
        self.fail("job %s never %s: %r" % (jid, state, self.c.req("get", id=jid)))

    def test_delivered_signed_exact_and_finished(self):
        t, path = unique("p"), "/" + unique("ok")
        body = '{"n":-12345678901234567890123,"s":"a\\u0000b","k":[1.50,2e3]}'
        jid = t + ".order.42"
        st, _, r = self.c.request("POST", "/add", json.dumps(
            {"topic": t, "id": jid, "url": self.rx.url(path)})[:-1].encode() +
            b',"body":' + body.encode() + b'}')
        self.assertEqual(st, 200, r)
        q = self.requests(path, 1)[0]
        self.assertEqual(q.method, "POST")
        self.assertEqual(q.body, body.encode(), "the body's JSON text, byte for byte")
        self.assertEqual(q.headers["content-type"], "application/json")
        self.assertEqual(q.headers["webhook-id"], jid.replace(".", "%2E"))
        self.assertLess(abs(int(q.headers["webhook-timestamp"]) - time.time()), 5)
        self.assertEqual(q.headers["delayq-topic"], t)
        self.assertEqual(q.headers["delayq-attempt"], "1")
        self.assertTrue(verify(q), q.headers)
        self.wait_gone(jid)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["finished"], s["topics"][t]["push_failed"]), (1, 0))

    def test_pop_never_takes_a_push_job(self):
        t, path = unique("p"), "/" + unique("slow")
        self.answers.by_path[path] = (200, {}, b"", 1.5)
        self.add(topic=t, body=1, url=self.rx.url(path))
        st, r = self.c.req("pop", topic=t, timeout=1)
        self.assertEqual((st, r["id"]), (200, None))
        self.requests(path, 1)

    def test_failures_step_through_backoff_then_bury(self):
        t, path = unique("p"), "/" + unique("fail")
        self.answers.by_path[path] = (500, {}, b"no")
        jid = self.add(topic=t, body=1, callback={"url": self.rx.url(path), "timeout": 2},
                       backoff=[0.4, 0.8], retries=2)
        qs = self.requests(path, 3, timeout=15)
        gaps = [b.at - a.at for a, b in zip(qs, qs[1:])]
        self.assertGreaterEqual(gaps[0], 0.35, gaps)
        self.assertGreaterEqual(gaps[1], 0.75, gaps)
        self.assertEqual([q.headers["delayq-attempt"] for q in qs], ["1", "2", "3"])
        self.assertEqual(len({q.headers["webhook-id"] for q in qs}), 1, "same webhook-id")
        r = self.wait_state(jid, "buried")
        self.assertEqual(r["attempts"], 3)
        self.assertEqual(r["backoff"], [0.4, 0.8])
        self.assertEqual(r["last_attempt"]["status"], 500)
        self.assertEqual(r["last_attempt"]["error"], "HTTP 500")
        self.assertEqual(self.push_failed(t), 3, "each of the three 500s")
        time.sleep(1.2)
        self.assertEqual(len([q for q in self.rx.requests if q.path == path]), 3, "buried: no more")
        # kick: delivered again, with its retries back
        self.answers.by_path[path] = (204, {}, b"")
        st, k = self.c.req("kick", topic=t, count=1)
        self.assertEqual(k["kicked"], 1)
        self.requests(path, 4)
        self.wait_gone(jid)
        self.assertEqual(self.push_failed(t), 3, "a delivered attempt is no failure")

    def test_default_schedule_is_stepped(self):
        t, path = unique("p"), "/" + unique("once")
        self.answers.by_path[path] = (502, {}, b"")
        jid = self.add(topic=t, body=1, url=self.rx.url(path))
        self.requests(path, 1)
        r = self.wait_state(jid, "delay")
        self.assertEqual(r["backoff"], [15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000])
        self.assertEqual(r["retries"], 9)
        self.assertAlmostEqual(r["due"] - r["last_attempt"]["at"], 15000, delta=100)
        self.c.req("delete", id=jid)

    def test_410_deletes(self):
        t, path = unique("p"), "/" + unique("gone")
        self.answers.by_path[path] = (410, {}, b"")
        jid = self.add(topic=t, body=1, url=self.rx.url(path))
        self.requests(path, 1)
        self.wait_gone(jid)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["deleted"], s["topics"][t]["finished"]), (1, 0))

    def test_retry_after_is_waited_bounded_by_the_last_step(self):
        t, t2, p1, p2 = unique("p"), unique("p"), "/" + unique("ra"), "/" + unique("rb")
        self.answers.by_path[p1] = lambda q: (
            (429, {"Retry-After": "1"}, b"") if q.headers["delayq-attempt"] == "1" else (200, {}, b""))
        self.answers.by_path[p2] = (503, {"Retry-After": "3600"}, b"")
        j1 = self.add(topic=t, body=1, url=self.rx.url(p1), backoff=[30])
        j2 = self.add(topic=t2, body=2, url=self.rx.url(p2), backoff=[5, 2])
        qs = self.requests(p1, 2)
        self.assertGreaterEqual(qs[1].at - qs[0].at, 0.95)
        self.assertLess(qs[1].at - qs[0].at, 5, "Retry-After 1 s, not the 30 s step")
        self.wait_gone(j1)
        self.assertEqual(self.push_failed(t), 1, "the 429 with Retry-After")
        self.requests(p2, 1)
        r = self.wait_state(j2, "delay")
        self.assertAlmostEqual(r["due"] - r["last_attempt"]["at"], 2000, delta=100,
                               msg="Retry-After 3600 s bounded by the last step (2 s)")
        self.assertEqual(r["last_attempt"]["status"], 503)
        self.c.req("delete", id=j2)

    def test_busy_answers_wait_at_least_a_second(self):
        # Retry-After 0, or a date in the past, must not spend the retries
        # at once: a busy receiver gets at least 1 s between attempts.
        t = unique("p")
        paths = {"/" + unique("ra0"): "0", "/" + unique("rapast"): "Sun, 06 Nov 1994 08:49:37 GMT"}
        for path, value in paths.items():
            self.answers.by_path[path] = (503, {"Retry-After": value}, b"")
            self.add(topic=t, body=1, url=self.rx.url(path), backoff=[0.1], retries=1)
        for path in paths:
            qs = self.requests(path, 2)
            self.assertGreaterEqual(qs[1].at - qs[0].at, 0.95, "Retry-After %s" % paths[path])

    def test_a_burst_beyond_push_per_host_is_sent_once_each(self):
        # 12 callbacks (push_per_host is 8) to a receiver that answers in
        # 1.2 s, each with a 2 s timeout: those beyond the limit wait in
        # delayq-push, and their timeout runs from when they are sent.
        t, path = unique("p"), "/" + unique("burst")
        self.answers.by_path[path] = (200, {}, b"", 1.2)
        jids = [self.add(topic=t, body=i, callback={"url": self.rx.url(path), "timeout": 2},
                         backoff=[0.2]) for i in range(12)]
        for jid in jids:
            self.wait_gone(jid, timeout=15)
        qs = [q for q in self.rx.requests if q.path == path]
        ids = [q.headers["webhook-id"] for q in qs]
        self.assertEqual(sorted(ids), sorted(jids), "each sent once")
        self.assertEqual(self.push_failed(t), 0)
        for q in qs:
            self.assertLessEqual(abs(int(q.headers["webhook-timestamp"]) - q.at), 1.5,
                                 "webhook-timestamp stamped when sent")

    def test_a_callback_in_flight_refuses_touch_release_bury(self):
        t, path = unique("p"), "/" + unique("inflight")
        self.answers.by_path[path] = (200, {}, b"", 1.5)
        jid = self.add(topic=t, body=1, callback={"url": self.rx.url(path), "timeout": 3})
        self.requests(path, 1)
        for cmd in ("touch", "release", "bury"):
            st, r = self.c.req(cmd, id=jid)
            self.assertEqual((st, r.get("code")), (409, "conflict"), (cmd, r))
            self.assertIn("in flight", r["error"])
        st, r = self.c.req("get", id=jid)
        self.assertEqual(r["state"], "reserved")
        self.wait_gone(jid)
        self.assertEqual(len([q for q in self.rx.requests if q.path == path]), 1)

    def test_a_kick_restarts_the_backoff_with_the_retries(self):
        t, path = unique("p"), "/" + unique("kick")
        self.answers.by_path[path] = (500, {}, b"no")
        jid = self.add(topic=t, body=1, callback={"url": self.rx.url(path), "timeout": 2},
                       backoff=[0.3, 30], retries=1)
        self.wait_state(jid, "buried")
        self.assertOk(*self.c.req("kick", id=jid))
        self.requests(path, 3)
        r = self.wait_state(jid, "delay")
        self.assertAlmostEqual(r["due"] - r["last_attempt"]["at"], 300, delta=100,
                               msg="the first step after a kick, not the last")
        self.c.req("delete", id=jid)

    def test_a_request_read_then_hung_up_is_one_attempt(self):
        # A receiver of its own, so that the pusher holds one connection to
        # it: the first callback's, kept alive. The receiver reads the next
        # callback on it and hangs up unanswered. That attempt's outcome is
        # unknown: it counts as failed and is retried on the job's schedule,
        # never sent again as the same attempt (as an HTTP client's silent
        # resend on a fresh connection would).
        rx = Receiver(lambda q: None if q.path == "/hangup" and q.headers["delayq-attempt"] == "1"
                      else (200, {}, b"")).start()
        try:
            t = unique("p")
            self.assertOk(*self.c.req("policy", topic=t, keep=60))  # for the attempts' record
            warm = self.add(topic=t, body=1, url=rx.url("/warm"))
            # Finished: its answer was read and the connection is idle again
            # (the receiver notes a request before it answers: a callback
            # added then could go out on a second, fresh connection).
            self.wait_state(warm, "finished")
            jid = self.add(topic=t, body=2, callback={"url": rx.url("/hangup"), "timeout": 2},
                           backoff=[1], retries=1)
            qs = rx.wait_for(lambda qs: len(qs) >= 3, 10 * SLOW)[1:]
            r = self.wait_state(jid, "finished")
        finally:
            rx.stop()
        self.assertEqual([(q.path, q.headers["delayq-attempt"]) for q in qs],
                         [("/hangup", "1"), ("/hangup", "2")])
        self.assertGreaterEqual(qs[1].at - qs[0].at, 0.9, "the second attempt waits its backoff step")
        self.assertEqual([(d["status"], d["error"]) for d in r["deliveries"]],
                         [(None, "the connection closed after the request was sent, before any answer"),
                          (200, None)], r)

    def test_redirects_are_not_followed_and_bodies_are_bounded(self):
        t, p1, p2, p3 = unique("p"), "/" + unique("r"), "/" + unique("t"), "/" + unique("big")
        self.answers.by_path[p1] = (302, {"Location": self.rx.url(p2)}, b"")
        self.answers.by_path[p3] = (200, {}, b"x" * 5000000)
        j1 = self.add(topic=t, body=1, url=self.rx.url(p1), backoff=[60])
        j3 = self.add(topic=t, body=3, url=self.rx.url(p3))
        self.requests(p1, 1)
        r = self.wait_state(j1, "delay")
        self.assertEqual(r["last_attempt"]["status"], 302)
        self.assertFalse([q for q in self.rx.requests if q.path == p2], "redirect followed")
        self.wait_gone(j3)  # a 200 with a 5 MB body: the status counts
        self.c.req("delete", id=j1)

    def test_timeout_is_a_failed_attempt(self):
        t, path = unique("p"), "/" + unique("hang")
        self.answers.by_path[path] = (200, {}, b"", 3)
        jid = self.add(topic=t, body=1, callback={"url": self.rx.url(path), "timeout": 0.5},
                       backoff=[60])
        r = self.wait_state(jid, "delay", timeout=10)
        self.assertIsNone(r["last_attempt"]["status"])
        self.assertIn("timed out", r["last_attempt"]["error"])
        self.assertEqual(self.push_failed(t), 1)
        self.c.req("delete", id=jid)

    def test_bad_callbacks_are_refused_at_add(self):
        t = unique("p")
        cases = [
            (dict(url="ftp://127.0.0.1/x"), "callback.url"),
            (dict(url="http://10.1.2.3/x"), "push_allow"),
            (dict(url="http://169.254.169.254/latest"), "push_allow"),
            (dict(url="http://user:pw@example.com/"), "callback.url"),
            (dict(callback={"url": "http://example.com/", "timeout": 0}), "timeout"),
            (dict(callback={"timeout": 1}), "url"),
            (dict(callback="http://example.com/"), "callback"),
            (dict(url="http://example.com/", callback={"url": "http://example.com/"}), "both"),
            (dict(backoff=[]), "backoff"),
            (dict(backoff=[1, -1]), "backoff"),
            (dict(backoff="linear"), "backoff"),
            (dict(backoff=[1] * 33), "backoff"),
        ]
        for extra, word in cases:
            st, r = self.c.req("add", topic=t, body=1, **extra)
            self.assertEqual((st, r["success"], r["code"]), (400, False, "bad_request"), extra)
            self.assertIn(word, r["error"], extra)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["added"], 0, "nothing written")

    def test_a_schedule_fires_callbacks(self):
        t, path, sid = unique("p"), "/" + unique("sched"), unique("s").replace("-", "_")
        st, r = self.c.req("schedule", id=sid, topic=t, every=1, body={"tick": True},
                           callback={"url": self.rx.url(path), "timeout": 2}, backoff=[5])
        self.assertOk(st, r)
        qs = self.requests(path, 2, timeout=6)
        self.c.req("unschedule", id=sid)
        ids = [q.headers["webhook-id"] for q in qs[:2]]
        self.assertTrue(all(i.startswith(sid + "@") for i in ids), ids)
        self.assertEqual(len(set(ids)), 2, "one job per fire")
        self.assertEqual(qs[0].body, b'{"tick":true}')
        self.assertTrue(verify(qs[0]))

    def test_pull_jobs_back_off_too(self):
        t = unique("b")
        jid = self.add(topic=t, body=1, ttr=0.3, backoff=[1.0])
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], jid)
        t0 = time.monotonic()
        st, r = self.c.req("pop", topic=t, timeout=3)
        waited = time.monotonic() - t0
        self.assertEqual(r["id"], jid)
        self.assertGreaterEqual(waited, 1.1, "TTR 0.3 s then the 1 s step")
        st, rel = self.c.req("release", id=jid)
        self.assertEqual(rel["state"], "delay", "a release without delay takes the step")
        st, g = self.c.req("get", id=jid)
        self.assertAlmostEqual(g["due"] - int(time.time() * 1000), 1000, delta=300)
        st, rel = self.c.req("delete", id=jid)
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["redelivered"], s["topics"][t]["push_failed"]), (1, 0),
                         "a pull job's TTR expiry is no failed callback")


class HostileReceivers(DeploymentTestCase):
    """Callbacks to receivers that answer slowly, hang, reset, answer busy
    with every kind of Retry-After, and bursts of several times
    push_per_host to one host, each send in a ledger checked against the
    promises of the push protocol (dqtest.hostile_receiver)."""
    PER_HOST = 2
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback",
                         push_grace_ms=1000, push_flags={"push_per_host": PER_HOST})

    @classmethod
    def setUpClass(cls):
        cls.rx = HostileReceiver().start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.rx.stop()

    def test_hostile_receivers_ledger(self):
        t, timeout, step = unique("h"), 0.6, 0.3
        self.assertOk(*self.c.req("policy", topic=t, keep=60))  # the delivery logs stay
        past = urllib.parse.quote("Sun, 06 Nov 1994 08:49:37 GMT", safe="")
        paths = ["/hang", "/reset", "/slow/0.3", "/ok", "/busy/503/0", "/busy/429/" + past,
                 "/busy/503/99999999", "/busy/429/soon"]
        paths += ["/slow/0.4"] * (3 * self.PER_HOST)  # a burst to one host
        jobs = {}
        for i, path in enumerate(paths):
            delay = 0.5 if i % 2 else 0
            jid = unique("j")
            self.add(topic=t, id=jid, body=i, delay=delay, retries=2, backoff=[step],
                     callback={"url": self.rx.url(path), "timeout": timeout})
            jobs[jid] = dict(not_before=time.time() + delay, timeout=timeout, step=step)
        for jid, job in jobs.items():
            job["deliveries"] = self.wait_finished(jid)["deliveries"]
        check_ledger(self, self.rx, jobs)

    def wait_finished(self, jid, timeout=20):
        deadline = time.monotonic() + timeout * SLOW
        while time.monotonic() < deadline:
            st, r = self.c.req("get", id=jid)
            if st == 200 and r["state"] in ("finished", "buried"):
                return r
            time.sleep(0.1)
        self.fail("job %s never finished: %r" % (jid, self.c.req("get", id=jid)))


class PusherAddressCheck(DeploymentTestCase):
    """The workers let loopback URLs in, the pusher's push_allow does not:
    the check at connect time refuses the address, whatever the URL said."""
    DEPLOYMENT_KW = dict(workers=1, threads=4, n_pushers=1, push_allow="*,loopback",
                         push_flags={"push_allow": "*"})

    def test_connect_time_check(self):
        rx = Receiver().start()
        try:
            st, r = self.c.req("add", topic=unique("a"), body=1, url=rx.url("/x"), backoff=[60])
            self.assertEqual(st, 200, r)
            deadline = time.monotonic() + 5 * SLOW
            while time.monotonic() < deadline:
                st, g = self.c.req("get", id=r["id"])
                if g.get("last_attempt"):
                    break
                time.sleep(0.05)
            self.assertIn("address 127.0.0.1 (loopback) not allowed by push_allow",
                          g["last_attempt"]["error"])
            self.assertEqual(rx.requests, [])
        finally:
            rx.stop()


# A delayed callback job made ready by hand, as the timer's move would, but
# without the wake-up its move publishes (P:pushwake): only a rescan finds it.
READY_UNANNOUNCED = r"""
local P, id = string.match(KEYS[1], '^(.-}):j:(.*)$')
local topic = ARGV[1]
redis.call('ZREM', P .. ':dc:' .. topic, id)
local seq = redis.call('INCR', P .. ':seq')
redis.call('ZADD', P .. ':push', seq, id)
redis.call('ZADD', P .. ':q:' .. topic, seq, id)
for _, h in ipairs({P .. ':s:' .. topic, P .. ':totals'}) do
    redis.call('HINCRBY', h, 'delay', -1)
    redis.call('HINCRBY', h, 'ready', 1)
end
return seq
"""


class LostWakeUp(DeploymentTestCase):
    """A push job whose wake-up was lost is sent at the pushers' rescan,
    every second (RESCAN_MS), not 30 s later. No other job is sent in
    this deployment, so no other wake-up takes it along."""
    DEPLOYMENT_KW = dict(workers=1, threads=4, n_pushers=1, push_allow="*,loopback")

    def test_a_job_whose_wake_up_was_lost_is_found_within_seconds(self):
        if self.c.redis_mode == "cluster":
            self.skipTest("the pushers' rescan is the same on any Redis; the hand-made move "
                          "is an EVAL, which the test's Cluster client does not route")
        rx = Receiver().start()
        try:
            t = unique("lost")
            st, r = self.c.req("add", topic=t, body=1, url=rx.url("/lost"), delay=3600)
            self.assertOk(st, r)
            jid = r["id"]
            tag = self.c.tag(self.c.shard_of(jid))
            self.c.redis("EVAL", READY_UNANNOUNCED, 1, "%s:j:%s" % (tag, jid), t)
            job_keys.edit(self.c.redis, tag, jid, s="ready", d=-1, rt=int(time.time() * 1000))
            self.assertEqual(self.c.req("get", id=jid)[1]["state"], "ready")
            t0 = time.monotonic()
            rx.wait_for(lambda qs: len(qs) >= 1, 5 * SLOW, "/lost")
            print("\nfound by the rescan after %.2f s" % (time.monotonic() - t0))
            self.assertEqual([q.path for q in rx.requests], ["/lost"])
        finally:
            rx.stop()


class PusherCrash(DeploymentTestCase):
    """kill -9 of delayq-push while its request is in flight: the job comes
    back after its timeout plus push_grace_ms and another pusher sends it."""
    DEPLOYMENT_KW = dict(workers=1, threads=4, n_pushers=1, push_allow="*,loopback",
                         push_grace_ms=500)

    def test_kill9_in_flight(self):
        answers = Answers()
        rx = Receiver(answers).start()
        try:
            path = "/slow"
            answers.by_path[path] = lambda q: (
                (200, {}, b"", 5) if q.headers["delayq-attempt"] == "1" else (200, {}, b""))
            t = unique("k")
            st, r = self.c.req("add", topic=t, body=1,
                               callback={"url": rx.url(path), "timeout": 1}, backoff=[0.5])
            jid = r["id"]
            rx.wait_for(lambda qs: len(qs) >= 1, 5 * SLOW)
            self.c.kill_pusher(0)
            t0 = time.monotonic()
            self.c.start_pusher()
            qs = rx.wait_for(lambda qs: len(qs) >= 2, 10 * SLOW)
            back = time.monotonic() - t0
            print("killed pusher: the job was sent again after %.1f s" % back)
            self.assertEqual(qs[1].headers["delayq-attempt"], "2")
            deadline = time.monotonic() + 5 * SLOW
            while self.c.req("get", id=jid)[0] != 404:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.05)
            st, s = self.c.req("stats", topic=t)
            self.assertEqual((s["topics"][t]["push_failed"], s["topics"][t]["redelivered"]),
                             (1, 1), "the reservation that ran out is a failed attempt")
        finally:
            rx.stop()


class FullListener:
    """A loopback port whose accept queue is full, so that a connect to it
    hangs (Linux drops the SYNs), until open() starts accepting: then
    each request is read and answered 200, and its delayq-attempt noted."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)  # room for one connection...
        self.filler = socket.create_connection(self.sock.getsockname())  # ...taken
        self.attempts = []

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.sock.getsockname()[1], path)

    def connecting(self):
        """How many connects to it hang now (SYN_SENT sockets in
        /proc/net/tcp whose remote end is this port)."""
        port = "0100007F:%04X" % self.sock.getsockname()[1]
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        return sum(1 for r in rows if r[2] == port and r[3] == "02")

    def open(self):
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return  # the filler, closed
                    data += chunk
            except OSError:
                return
            for line in data.split(b"\r\n"):
                if line.lower().startswith(b"delayq-attempt:"):
                    self.attempts.append(int(line.split(b":")[1]))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def close(self):
        self.filler.close()
        self.sock.close()


class PusherAwayOnRedis(DeploymentTestCase):
    """While delayq-push waits on a Redis that does not answer (frozen
    here), libcurl moves no request on, yet their timeouts run: a request
    that was still connecting when its time ran out was never sent, and is
    given back uncounted rather than failed (it was a failed attempt, with
    the next one a backoff step later, though the receiver was healthy)."""
    DEPLOYMENT_KW = dict(workers=1, threads=4, n_pushers=1, push_allow="*,loopback",
                         redis_timeout_ms=10000)

    def test_a_request_unsent_while_redis_froze_is_not_an_attempt(self):
        if self.c.redis_mode != "single":
            self.skipTest("one frozen Redis stands for any: the pusher's loop is the same")
        rx = FullListener()
        try:
            t = unique("away")
            st, r = self.c.req("add", topic=t, body=1,
                               callback={"url": rx.url("/away"), "timeout": 3}, backoff=[60])
            self.assertOk(st, r)
            jid = r["id"]
            deadline = time.monotonic() + 5 * SLOW
            # its request connecting: reserved is not enough (a pusher
            # frozen between its take and the request's launch sends it
            # after the freeze, as a first try)
            while not rx.connecting():
                self.assertLess(time.monotonic(), deadline, self.c.req("get", id=jid)[1])
                time.sleep(0.02)
            pid = self.c.redis_proc.pid
            os.kill(pid, signal.SIGSTOP)  # the pusher's next rescan waits on it
            try:
                time.sleep(5)
            finally:
                os.kill(pid, signal.SIGCONT)
            rx.open()
            deadline = time.monotonic() + 5 * SLOW
            while self.c.req("get", id=jid)[0] != 404:
                self.assertLess(time.monotonic(), deadline, "not delivered: %r" % (
                    self.c.req("get", id=jid)[1],))
                time.sleep(0.05)
            self.assertEqual(rx.attempts, [1])
            with open(self.c.path("push0.log")) as f:
                self.assertIn("waited on Redis", f.read())
        finally:
            rx.close()

    def test_a_receiver_that_never_connects_spends_its_attempts(self):
        """Without a long wait on Redis, a connect that never completes is a
        failed attempt, though other callbacks' outcomes are recorded in
        Redis meanwhile (short calls, a little of its time each)."""
        rx, healthy = FullListener(), Receiver().start()
        try:
            st, r = self.c.req("add", topic=unique("dead"), body=1,
                               callback={"url": rx.url("/dead"), "timeout": 0.5}, retries=0)
            self.assertOk(st, r)
            others = unique("alive")
            deadline = time.monotonic() + 5 * SLOW
            while (job := self.c.req("get", id=r["id"])[1])["state"] != "buried":
                self.assertLess(time.monotonic(), deadline, job)
                self.assertOk(*self.c.req("add", topic=others, body=1, url=healthy.url("/ok")))
                time.sleep(0.02)
            self.assertEqual(job["attempts"], 1)
            self.assertIn("timed out", job["last_attempt"]["error"])
        finally:
            rx.close()
            healthy.stop()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""clients/php/examples/webhook_receiver.php served by `php -S` on loopback:
requests signed here, independently of the PHP code (Standard Webhooks:
base64 HMAC-SHA256 over "id.timestamp.body" with the key after "whsec_"),
must be processed once (a duplicate webhook-id answers 200 again without a
second event), refused with 401 when the signature is wrong, the body was
changed, or the timestamp is more than 5 minutes off, accepted with either
secret while two are configured (rotation), answered 410 for an unwanted
topic and 503 with Retry-After when paused or when the same id is in
progress. Then a real deployment's delayq-push delivers to it: a job is
finished exactly once, a job of an unwanted topic is deleted.

Needs php-cli: without it this test skips (exit 77), or fails under
DQTEST_REQUIRE_ALL=1 (dqtest.tools).

Run: DELAYQ_SRC_DIR=$PWD DELAYQ_BUILD_DIR=$PWD PYTHONPATH=tests:clients/python \
     python3 tests/clients/test_webhook_php.py
"""

import base64
import fcntl
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

from dqtest import SLOW, DeploymentTestCase, free_port, main, tools, unique

RECEIVER = os.path.join(SRC_DIR, "clients", "php", "examples", "webhook_receiver.php")
NEW = "whsec_" + base64.b64encode(b"the new secret, 32 bytes long..!").decode()
OLD = "whsec_" + base64.b64encode(b"the old secret, also 32 bytes.!").decode()
OTHER = "whsec_" + base64.b64encode(b"somebody else's secret, 32 b.").decode()


def sign(secret, id, timestamp, body):
    """v1,<base64 HMAC-SHA256> as Standard Webhooks define it."""
    key = base64.b64decode(secret[len("whsec_"):])
    mac = hmac.new(key, b"%s.%d.%s" % (id.encode(), timestamp, body), hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


class Receiver:
    """`php -S 127.0.0.1:<port> webhook_receiver.php` with its own state dir."""

    def __init__(self, secrets, gone=""):
        php = shutil.which("php")
        self.state = tempfile.mkdtemp(prefix="delayq-webhook-")
        self.port = free_port()
        env = dict(os.environ, DELAYQ_WEBHOOK_SECRET=secrets, DELAYQ_WEBHOOK_STATE=self.state,
                   DELAYQ_WEBHOOK_GONE=gone)
        self.log = open(os.path.join(self.state, "php-server.log"), "wb")
        self.p = subprocess.Popen([php, "-S", "127.0.0.1:%d" % self.port, RECEIVER],
                                  stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, env=env, cwd=self.state)
        deadline = time.monotonic() + 10 * SLOW
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.p.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise AssertionError("php -S did not start: %s" % self.output())
                time.sleep(0.05)

    @property
    def url(self):
        return "http://127.0.0.1:%d/hooks/delayq" % self.port

    def output(self):
        with open(os.path.join(self.state, "php-server.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def events(self):
        try:
            with open(os.path.join(self.state, "events.log")) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def post(self, body, headers, method="POST"):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * SLOW)
        try:
            conn.request(method, "/hooks/delayq", body=body,
                         headers=dict({"Content-Type": "application/json"}, **headers))
            r = conn.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode()
        finally:
            conn.close()

    def deliver(self, id, body, secrets=(NEW,), timestamp=None, topic="orders", signature=None):
        """A request as delayq-push sends it; returns (status, headers, text)."""
        ts = int(time.time()) if timestamp is None else timestamp
        sig = signature or " ".join(sign(s, id, ts, body) for s in secrets)
        return self.post(body, {"webhook-id": id, "webhook-timestamp": str(ts),
                                "webhook-signature": sig, "delayq-topic": topic,
                                "delayq-attempt": "1"})

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()  # by its Popen, i.e. its pid
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)


class WebhookReceiver(unittest.TestCase):
    """The example on its own, with two secrets configured (mid-rotation)."""

    @classmethod
    def setUpClass(cls):
        cls.r = Receiver(NEW + " " + OLD, gone="newsletter")

    @classmethod
    def tearDownClass(cls):
        cls.r.close()

    def check(self, got, status, text=None):
        self.assertEqual(got[0], status, "%r\nphp -S said:\n%s" % (got, self.r.output()))
        if text is not None:
            self.assertEqual(got[2].strip(), text, got)

    def test_delivered_once_then_duplicate(self):
        id = unique("order%2E1")
        body = b'{"order":42,"note":"caf\xc3\xa9"}'
        self.check(self.r.deliver(id, body), 200, "ok")
        self.check(self.r.deliver(id, body), 200, "duplicate")   # a retry: 2xx, no second event
        self.check(self.r.deliver(id, body, secrets=(OLD,)), 200, "duplicate")
        mine = [e for e in self.r.events() if e["id"] == id]
        self.assertEqual(mine, [{"id": id, "topic": "orders", "event": {"order": 42, "note": "café"}}])

    def test_bad_signatures_are_401(self):
        id = unique("forged")
        body = b'{"order":7}'
        ts = int(time.time())
        for what, kw in (
                ("signed with a secret we do not have", dict(secrets=(OTHER,))),
                ("no v1 prefix", dict(signature=sign(NEW, id, ts, body)[3:])),
                ("v2 scheme", dict(signature="v2," + sign(NEW, id, ts, body)[3:])),
                ("signature of another body", dict(signature=sign(NEW, id, ts, b'{"order":8}'))),
                ("signature of another id", dict(signature=sign(NEW, id + "x", ts, body))),
                ("signature of another timestamp", dict(signature=sign(NEW, id, ts - 1, body))),
                ("empty signature", dict(signature=" ")),
        ):
            with self.subTest(what):
                self.check(self.r.deliver(id, body, timestamp=ts, **kw), 401)
        self.check(self.r.post(body, {"webhook-id": id}), 401)   # headers missing
        self.assertEqual([e for e in self.r.events() if e["id"] == id], [])
        # and the id is not burnt: the genuine request still goes through
        self.check(self.r.deliver(id, body, timestamp=ts), 200, "ok")

    def test_timestamp_more_than_5_minutes_off_is_401(self):
        body = b'"late"'
        now = int(time.time())
        for what, ts in (("6 minutes old", now - 360), ("6 minutes ahead", now + 360),
                         ("a day old", now - 86400)):
            with self.subTest(what):
                # correctly signed, but a replay of something old
                self.check(self.r.deliver(unique("old"), body, timestamp=ts), 401)
        self.check(self.r.deliver(unique("recent"), body, timestamp=now - 240), 200, "ok")

    def test_rotation_either_secret_and_several_signatures(self):
        body = b'{"rotating":true}'
        self.check(self.r.deliver(unique("rot-new"), body, secrets=(NEW,)), 200, "ok")
        self.check(self.r.deliver(unique("rot-old"), body, secrets=(OLD,)), 200, "ok")
        # what delayq sends while push_secret lists two secrets
        self.check(self.r.deliver(unique("rot-both"), body, secrets=(NEW, OLD)), 200, "ok")
        self.check(self.r.deliver(unique("rot-mixed"), body, secrets=(OTHER, OLD)), 200, "ok")
        self.check(self.r.deliver(unique("rot-none"), body, secrets=(OTHER, OTHER)), 401)

    def test_old_secret_refused_once_dropped(self):
        r = Receiver(NEW)
        try:
            body = b'{"after":"rotation"}'
            self.assertEqual(r.deliver(unique("dropped"), body, secrets=(OLD,))[0], 401)
            self.assertEqual(r.deliver(unique("kept"), body, secrets=(NEW,))[0], 200)
        finally:
            r.close()

    def test_unwanted_topic_is_410(self):
        id = unique("news")
        self.check(self.r.deliver(id, b'{"issue":3}', topic="newsletter"), 410)
        self.assertEqual([e for e in self.r.events() if e["id"] == id], [])

    def test_busy_is_503_with_retry_after(self):
        paused = os.path.join(self.r.state, "paused")
        open(paused, "w").close()
        try:
            st, headers, _ = self.r.deliver(unique("busy"), b"1")
        finally:
            os.unlink(paused)
        self.assertEqual((st, headers.get("retry-after")), (503, "30"))
        # the same webhook-id being processed by another request right now
        id = unique("in-progress")
        path = os.path.join(self.r.state, hashlib.sha256(id.encode()).hexdigest())
        with open(path, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            st, headers, _ = self.r.deliver(id, b"2")
        self.assertEqual((st, headers.get("retry-after")), (503, "5"))
        self.check(self.r.deliver(id, b"2"), 200, "ok")

    def test_post_only(self):
        self.assertEqual(self.r.post(None, {}, method="GET")[0], 405)


class PushedByDelayq(DeploymentTestCase):
    """delayq-push (signing with both secrets, as during a rotation) against
    the example: a job is delivered and finished, one event; a job of an
    unwanted topic is deleted on the 410."""

    DEPLOYMENT_KW = dict(workers=1, threads=4, n_pushers=1, push_allow="*,loopback",
                         push_grace_ms=1000, push_flags={"push_secret": NEW + " " + OLD})

    def setUp(self):
        self.r = Receiver(OLD, gone="newsletter")   # receivers not moved to the new one yet
        self.addCleanup(self.r.close)

    def stats(self, topic):
        st, body = self.c.req("stats", topic=topic)
        self.assertOk(st, body)
        return body["topics"][topic]

    def wait_for(self, pred, what):
        deadline = time.monotonic() + 15 * SLOW
        while not pred():
            if time.monotonic() > deadline:
                self.fail("timed out waiting for %s; php -S said:\n%s" % (what, self.r.output()))
            time.sleep(0.05)

    def test_finished_once_and_gone_on_410(self):
        topic = unique("orders")
        self.assertOk(*self.c.req("add", topic=topic, id=topic + ".42", body={"order": 42},
                                  url=self.r.url))
        self.wait_for(lambda: self.stats(topic)["finished"] == 1, "the job finished")
        self.assertEqual(self.r.events(), [{"id": topic + "%2E42", "topic": topic,
                                            "event": {"order": 42}}])
        self.assertOk(*self.c.req("add", topic="newsletter", id=topic + "-news", body="x",
                                  url=self.r.url))
        self.wait_for(lambda: self.stats("newsletter")["deleted"] == 1, "the 410 job deleted")
        self.assertEqual(len(self.r.events()), 1)


if __name__ == "__main__":
    needs = tools.Needs("test_webhook_php")
    needs.program("php", "php-cli")
    needs.settle()
    main()

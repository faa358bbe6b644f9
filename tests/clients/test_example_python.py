#!/usr/bin/env python3
"""examples/python/retry_consumer.py against a real deployment
(tests/integration/dqtest.py): a notification whose simulated endpoint
fails twice is attempted three times, the gaps follow the --backoff steps,
and it ends finished; one that never succeeds is buried after the last
step; SIGTERM stops the consumer with exit status 0.

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_example_python.py
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime


HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

from dqtest import SLOW, DeploymentTestCase, main, unique

EXAMPLE = os.path.join(SRC_DIR, "examples", "python", "retry_consumer.py")
ATTEMPT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) INFO job (\S+) attempt (\d+):")


class Consumer:
    """The example as a subprocess; collects its output lines."""

    def __init__(self, url, *args):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
        env.pop("DELAYQ_TOKEN", None)
        self.p = subprocess.Popen([sys.executable, EXAMPLE, "--url", url] + list(args),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.p.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def output(self):
        return "\n".join(self.lines)

    def attempts(self, id):
        """[(attempt number, unix time)] of the job, from the log lines."""
        out = []
        for line in list(self.lines):
            m = ATTEMPT.match(line)
            if m and m.group(2) == id:
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                out.append((int(m.group(3)), t))
        return out

    def stop(self, timeout=10.0):
        """SIGTERM; returns the exit status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.reader.join(5)
        self.p.stdout.close()
        return rc


class RetryConsumerExample(DeploymentTestCase):
    DEPLOYMENT_KW = {"workers": 1, "threads": 8}

    def consumer(self, *args):
        c = Consumer("http://127.0.0.1:%d" % self.c.http_port, *args)
        self.addCleanup(lambda: c.p.poll() is None and c.p.kill())
        return c

    def wait_for(self, pred, timeout, what, consumer):
        deadline = time.monotonic() + timeout * SLOW
        while not pred():
            if time.monotonic() > deadline:
                self.fail("timed out waiting for %s; consumer output:\n%s" %
                          (what, consumer.output()))
            time.sleep(0.05)

    def topic_stats(self, topic):
        st, body = self.c.req("stats", topic=topic)
        self.assertOk(st, body)
        return body["topics"][topic]

    def test_fails_twice_then_delivered(self):
        steps = (0.3, 0.6, 1.2)
        cons = self.consumer("--backoff", ",".join(str(s) for s in steps), "--poll-timeout", "20")
        self.assertOk(*self.c.req("add", topic="notify", id="notify-1", ttr=30,
                                  body={"to": "ops@example.com", "message": "disk full",
                                        "fail_times": 2}))
        self.wait_for(lambda: self.topic_stats("notify")["finished"] == 1, 15,
                      "the job to be finished", cons)
        t_stop = time.monotonic()
        rc = cons.stop()
        out = cons.output()
        self.assertEqual(rc, 0, out)
        self.assertLess(time.monotonic() - t_stop, 3 * SLOW, "slow to stop on SIGTERM")
        tries = cons.attempts("notify-1")
        self.assertEqual([n for n, _ in tries], [1, 2, 3], out)
        gaps = [tries[1][1] - tries[0][1], tries[2][1] - tries[1][1]]
        for gap, step in zip(gaps, steps):
            self.assertGreaterEqual(gap, step - 0.02, "gaps %r for steps %r\n%s" % (gaps, steps, out))
            self.assertLess(gap, step + 0.5 * SLOW, "gaps %r for steps %r\n%s" % (gaps, steps, out))
        self.assertIn("job notify-1 delivered on attempt 3", out)
        self.assertEqual(out.count("simulated HTTP 503"), 2, out)
        st = self.topic_stats("notify")
        self.assertEqual(st["finished"], 1, st)
        for gauge in ("delay", "ready", "reserved", "buried"):
            self.assertEqual(st[gauge], 0, st)
        self.assertEqual(st["redelivered"], 0, st)  # retries by release, not by TTR expiry
        st, body = self.c.req("get", id="notify-1")
        self.assertError(st, body, 404, "not_found")

    def test_buried_after_the_last_step(self):
        topic = unique("notify")
        cons = self.consumer("--topic", topic, "--backoff", "0.1,0.2")
        self.assertOk(*self.c.req("add", topic=topic, id=topic + "-doomed",
                                  body={"to": "x", "fail_times": 99}))
        self.assertOk(*self.c.req("add", topic=topic, id=topic + "-plain", body="hello"))
        self.wait_for(lambda: self.topic_stats(topic)["buried"] == 1, 10, "a buried job", cons)
        self.wait_for(lambda: self.topic_stats(topic)["finished"] == 1, 10, "a finished job", cons)
        self.assertEqual(cons.stop(), 0, cons.output())
        self.assertEqual([n for n, _ in cons.attempts(topic + "-doomed")], [1, 2, 3],
                         cons.output())
        self.assertIn("buried after 3 attempts", cons.output())
        st, body = self.c.req("get", id=topic + "-doomed")
        self.assertOk(st, body)
        self.assertEqual((body["state"], body["attempts"]), ("buried", 3))

    def test_bad_backoff_is_a_usage_error(self):
        r = subprocess.run([sys.executable, EXAMPLE, "--backoff", "soon"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"--backoff", r.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The Symfony Messenger transport (clients/php/src/Symfony) in a real
Messenger application (tests/clients/symfony_app/messenger.php, on Debian's
php-symfony-messenger: a bus, a handler, Messenger's Worker and retry
listener) against a real deployment with auth on, through a
delayq://host:port?topic=..&token=.. DSN.

Checked: ack finishes, DelayStamp is the delay (lands on time), the
message count (delayed + ready), reject deletes (with and without
Messenger's retry, whose delayed copy is a new job), a handler longer than
the TTR keeps its job by touch (and loses it without), a job that is not a
Messenger message is buried, a bad DSN is a clear error, Messenger's
messenger:failed:show and :retry on the transport (ListableReceiverInterface).

php-cli with curl and pcntl, and php-symfony-messenger are required:
without them this test fails, it does not skip.

Run: DELAYQ_SRC_DIR=$PWD DELAYQ_BUILD_DIR=$PWD PYTHONPATH=tests:clients/python \
     python3 tests/clients/test_symfony.py
"""

import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

from dqtest import SLOW, main, unique
from php_framework import TOKEN, PhpFrameworkTestCase, read_log, require_php

APP = os.path.join(SRC_DIR, "tests", "clients", "symfony_app", "messenger.php")
LATE = 1.0  # how late a delayed message may be handled: php starting, a long-poll waking


class SymfonyMessenger(PhpFrameworkTestCase):

    @classmethod
    def setUpClass(cls):
        cls.php = require_php(
            "test_symfony",
            [("/usr/share/php/Symfony/Component/Messenger/autoload.php", "php-symfony-messenger"),
             ("/usr/share/php/Symfony/Component/EventDispatcher/autoload.php",
              "php-symfony-event-dispatcher")])
        super().setUpClass()
        cls.log = os.path.join(cls.tmp, "messages.log")

    def dsn(self, topic, **options):
        query = dict({"topic": topic, "token": TOKEN}, **options)
        return "delayq://127.0.0.1:%d?%s" % (self.c.http_port,
                                             "&".join("%s=%s" % kv for kv in query.items()))

    def app(self, topic, args, timeout=30, **options):
        """php messenger.php args, on topic -> (exit status, output, seconds)."""
        env = dict(os.environ, DELAYQ_DSN=self.dsn(topic, **options), JOB_LOG=self.log)
        return self.run_php([self.php, APP] + args, env, timeout)

    def app_ok(self, topic, args, **options):
        st, out, _ = self.app(topic, args, **options)
        self.assertEqual(st, 0, out)
        return out.strip()

    def send(self, topic, name, behaviour="ok", delay_ms=None, **options):
        """Dispatches a TestMessage; returns its delayq job id."""
        args = ["send", name, behaviour] + ([] if delay_ms is None else [str(delay_ms)])
        return self.app_ok(topic, args, **options).splitlines()[-1]

    def consume(self, topic, limit, seconds=20, *retry, **options):
        """Messenger's Worker on topic until limit messages or seconds."""
        st, out, _ = self.app(topic, ["consume", str(limit), str(seconds)] + [str(r) for r in retry],
                              timeout=seconds + 20, **options)
        self.assertEqual(st, 0, out)
        return out

    def count(self, topic):
        return int(self.app_ok(topic, ["count"]))

    def events(self, name, event="handled"):
        return [r for r in read_log(self.log, name) if r["event"] == event]

    # ------------------------------------------------------------ tests

    def test_ack_finishes_and_the_count_is_delayed_plus_ready(self):
        t = unique("sf-ack")
        ids = [self.send(t, "%s-%d" % (t, i)) for i in range(2)]
        later = self.send(t, t + "-later", "ok", 600000)
        self.assertEqual(self.count(t), 3)
        self.consume(t, 2)
        for i, id in enumerate(ids):
            self.assertEqual(len(self.events("%s-%d" % (t, i))), 1)
            self.assertEqual(self.job(id)[0], 404, "acked: finished")
        self.assertEqual(self.stats(t)["finished"], 2)
        self.assertEqual(self.count(t), 1)
        self.assertEqual(self.job(later)[1].get("state"), "delay")

    def test_delay_stamp_is_the_delay(self):
        t = unique("sf-delay")
        # a worker already polling (a first message handled), so that what
        # is timed is delayq, not php starting
        env = dict(os.environ, DELAYQ_DSN=self.dsn(t), JOB_LOG=self.log)
        worker = self.start_php([self.php, APP, "consume", "2", "60"], env)
        self.send(t, t + "-ping")
        self.wait_for("the first message handled", lambda: self.events(t + "-ping") or worker.poll() is not None)
        t0 = time.time()
        id = self.send(t, t, "ok", 2500)
        t1 = time.time()
        st, got = self.job(id)
        self.assertEqual(got.get("state"), "delay", got)
        self.assertGreaterEqual(got["due"] / 1000.0, t0 + 2.5 - 0.01)
        self.assertLessEqual(got["due"] / 1000.0, t1 + 2.5 + 0.01)
        st, out = self.wait_php(worker, 60)
        self.assertEqual(st, 0, out)
        handled, = self.events(t)
        self.assertGreaterEqual(handled["time"], t0 + 2.5)
        self.assertLess(handled["time"], t1 + 2.5 + LATE * SLOW)

    def test_reject_deletes(self):
        t = unique("sf-reject")
        id = self.send(t, t, "fail")
        self.consume(t, 1)
        self.assertEqual(len(self.events(t, "failed")), 1)
        self.assertEqual(self.job(id)[0], 404)
        s = self.stats(t)
        self.assertEqual((s["deleted"], s["finished"], s["buried"]), (1, 0, 0), s)

    def test_retry_is_a_delayed_copy_and_the_original_is_deleted(self):
        t = unique("sf-retry")
        id = self.send(t, t, "fail")
        # Messenger's retry listener: 1 retry, 1000 ms later
        self.consume(t, 2, 20, 1, 1000)
        failed = self.events(t, "failed")
        self.assertEqual(len(failed), 2)
        self.assertGreaterEqual(failed[1]["time"] - failed[0]["time"], 1.0)
        self.assertEqual(self.job(id)[0], 404)
        s = self.stats(t)
        self.assertEqual((s["added"], s["deleted"], s["buried"]), (2, 2, 0), s)

    def test_touch_keeps_a_long_handler_s_job(self):
        t = unique("sf-touch")
        id = self.send(t, t, "sleep:3", ttr=1)
        self.consume(t, 1, ttr=1)
        self.assertEqual(len(self.events(t)), 1)
        s = self.stats(t)
        self.assertEqual((s["redelivered"], s["finished"]), (0, 1), s)
        self.assertEqual(self.job(id)[0], 404)

    def test_without_touch_a_long_handler_loses_its_job(self):
        # the control of the test above
        t = unique("sf-notouch")
        self.send(t, t, "sleep:3", ttr=1)
        self.consume(t, 1, ttr=1, touch=0)
        self.assertGreaterEqual(self.stats(t)["redelivered"], 1)

    def test_a_job_that_is_not_a_message_is_buried(self):
        t = unique("sf-garbage")
        st, h, data = self.c.request("POST", "/add", json.dumps({"topic": t, "body": "not a message"}).encode(),
                                     {"Authorization": "Bearer " + TOKEN})
        self.assertEqual(st, 200, data)
        id = json.loads(data)["id"]
        st, out, _ = self.app(t, ["consume", "1", "10"])
        self.assertNotEqual(st, 0, out)
        self.assertIn("is not a Messenger message", out)
        self.assertEqual(self.job(id)[1].get("state"), "buried")

    def test_failed_show_lists_and_finds_the_waiting_messages(self):
        t = unique("sf-show")
        ready = self.send(t, t + "-ready")
        delayed = self.send(t, t + "-delayed", "ok", 600000)
        out = self.app_ok(t, ["failed:show"])
        self.assertIn("There are 2 messages pending in the failure transport", out)
        rows = [line for line in out.splitlines() if "TestMessage" in line]
        self.assertEqual(len(rows), 2, out)
        self.assertIn(ready, rows[0], "ready messages first")
        self.assertIn(delayed, rows[1], out)
        self.assertIn("Showing first 1 messages", self.app_ok(t, ["failed:show", "--max=1"]))
        out = self.app_ok(t, ["failed:show", ready])
        self.assertIn(ready, out)
        self.assertIn("TestMessage", out)
        st, out, _ = self.app(t, ["failed:show", "no-such-job"])
        self.assertNotEqual(st, 0, out)
        self.assertIn('The message "no-such-job" was not found', out)
        s = self.stats(t)
        self.assertEqual((s["ready"], s["delay"], s["reserved"]), (1, 1, 0), "listing takes nothing")

    def test_failed_retry_handles_the_listed_messages_and_deletes_their_jobs(self):
        t = unique("sf-retry")
        ids = [self.send(t, t + "-ready"), self.send(t, t + "-delayed", "ok", 600000)]
        out = self.app_ok(t, ["failed:retry", "--force"])
        self.assertIn("All failed messages have been handled or removed", out)
        for name in (t + "-ready", t + "-delayed"):
            self.assertEqual(len(self.events(name)), 1, out)
        for id in ids:
            self.assertEqual(self.job(id)[0], 404, "a handled listed message's job is finished")
        s = self.stats(t)
        self.assertEqual((s["ready"], s["delay"], s["reserved"]), (0, 0, 0), s)

    def test_a_bad_dsn_is_a_clear_error(self):
        st, out, _ = self.app(unique("sf-dsn"), ["count"], ttr="soon")
        self.assertNotEqual(st, 0, out)
        self.assertIn("ttr must be a number of seconds", out)
        st, out, _ = self.app(unique("sf-dsn"), ["count"], nope="1")
        self.assertNotEqual(st, 0, out)
        self.assertIn("unknown option(s) nope", out)


if __name__ == "__main__":
    main()

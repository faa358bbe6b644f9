#!/usr/bin/env python3
"""The Laravel queue connection (clients/php/src/Laravel) in a minimal
Laravel application (tests/clients/laravel_app, on Debian's
php-laravel-framework) against a real deployment with auth on: jobs pushed
with `php artisan delayq:push` / `delayq:bulk` and run by `php artisan
queue:work delayq` for real.

Checked: push and --stop-when-empty, later() with seconds and with a
DateTime lands on time, release($delay), attempts, --tries with --backoff
reaching failed_jobs (sqlite) and burying the delayq job (and queue:retry
replacing it: one buried job per failed_jobs row), --timeout killing
a job (touches stop, delayq delivers it again after its TTR, the last try
fails it), a job running longer than its TTR kept by touch (and delivered
again without touch), bulk as one batch add, size, a bad connection
setting as a clear error, ttr as a duration ('1m'), delayq:policy setting
each queue's policy from the connection; the starter app of examples/laravel run as
its README says.

php-cli with curl, pcntl and sqlite3, and php-laravel-framework are
required: without them this test fails, it does not skip.

Run: DELAYQ_SRC_DIR=$PWD DELAYQ_BUILD_DIR=$PWD PYTHONPATH=tests:clients/python \
     python3 tests/clients/test_laravel.py
"""

import os
import shutil
import signal
import sqlite3
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

from dqtest import SLOW, main, unique
from php_framework import TOKEN, PhpFrameworkTestCase, read_log, require_php

ARTISAN = os.path.join(SRC_DIR, "tests", "clients", "laravel_app", "artisan")
# how late a job may run after its due time: a long-poll wakes within
# milliseconds, the rest is php starting and Laravel booting
LATE = 1.5


class LaravelQueue(PhpFrameworkTestCase):

    @classmethod
    def setUpClass(cls):
        cls.php = require_php("test_laravel",
                              [("/usr/share/php/Illuminate/autoload.php", "php-laravel-framework")],
                              [("pdo_sqlite", "php-sqlite3")])
        super().setUpClass()
        storage = os.path.join(cls.tmp, "storage")
        for d in ("logs", "framework/cache"):
            os.makedirs(os.path.join(storage, d))
        cls.db = os.path.join(cls.tmp, "failed_jobs.sqlite")
        open(cls.db, "w").close()
        cls.log = os.path.join(cls.tmp, "jobs.log")
        cache = os.path.join(cls.tmp, "cache")
        os.makedirs(cache)
        cls.env = dict(os.environ, LARAVEL_STORAGE=storage, DB_DATABASE=cls.db, JOB_LOG=cls.log,
                       APP_PACKAGES_CACHE=os.path.join(cache, "packages.php"),
                       APP_SERVICES_CACHE=os.path.join(cache, "services.php"),
                       APP_CONFIG_CACHE=os.path.join(cache, "config.php"),
                       DELAYQ_URL="http://127.0.0.1:%d" % cls.deployment.http_port,
                       DELAYQ_TOKEN=TOKEN, QUEUE_CONNECTION="delayq")
        # Laravel's failed_jobs table, by its own migration
        p = subprocess.run([cls.php, ARTISAN, "migrate", "--force"], env=cls.env, cwd=cls.tmp,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60 * SLOW)
        if p.returncode != 0:
            cls.tearDownClass()
            raise AssertionError("php artisan migrate: exit %d:\n%s"
                                 % (p.returncode, p.stdout.decode("utf-8", "replace")))

    def artisan(self, args, timeout=30, **env):
        """php artisan args -> (exit status, output, seconds)."""
        return self.run_php([self.php, ARTISAN] + args, dict(self.env, **env), timeout)

    def artisan_ok(self, args, timeout=30, **env):
        st, out, _ = self.artisan(args, timeout, **env)
        if st != 0:
            raise AssertionError("php artisan %s: exit %d:\n%s" % (" ".join(args), st, out))
        return out.strip()

    def push(self, queue, name, *options, **env):
        """Pushes a RecordJob; returns its delayq id."""
        return self.artisan_ok(["delayq:push", name, "--queue=" + queue] + list(options),
                               **env).splitlines()[-1]

    def work(self, queue, *options, timeout=60, **env):
        """php artisan queue:work delayq on queue -> (exit status, output, seconds).
        --sleep=0: the pop itself waits for a job (block_for), the worker
        need not sleep after an empty one."""
        return self.artisan(["queue:work", "delayq", "--queue=" + queue, "--sleep=0"] + list(options),
                            timeout, **env)

    def work_ok(self, queue, *options, **env):
        st, out, took = self.work(queue, *options, **env)
        self.assertEqual(st, 0, out)
        return out, took

    def failed_jobs(self, queue):
        with sqlite3.connect(self.db) as db:
            return db.execute("SELECT uuid, connection, payload FROM failed_jobs WHERE queue = ?",
                              (queue,)).fetchall()

    def runs(self, name, event="ran"):
        return [r for r in read_log(self.log, name) if r["event"] == event]

    # ------------------------------------------------------------ tests

    def test_the_starter_app_runs_as_its_readme_says(self):
        """examples/laravel, copied elsewhere as its README says: migrate,
        place an order, and queue:work closes it once its delay is up."""
        app = os.path.join(self.tmp, "starter")
        shutil.copytree(os.path.join(SRC_DIR, "examples", "laravel"), app)
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith(("APP_", "DB_")))
        env.update(DELAYQ_PHP_CLIENT=os.path.join(SRC_DIR, "clients", "php", "autoload.php"),
                   DELAYQ_URL=self.env["DELAYQ_URL"], DELAYQ_TOKEN=TOKEN)
        artisan = [self.php, os.path.join(app, "artisan")]
        for args in (["migrate", "--force"], ["order:place", "42", "--close-after=1"]):
            st, out, _ = self.run_php(artisan + args, env, 60)
            self.assertEqual(st, 0, out)
        self.assertIn("order 42 placed", out)
        st, out, took = self.run_php(artisan + ["queue:work", "--once"], env, 60)
        self.assertEqual(st, 0, out)
        with open(os.path.join(app, "storage", "logs", "orders.log")) as f:
            self.assertEqual(f.read(), "closed order 42\n")
        print("starter: queue:work --once closed the order in %.1f s" % took)

    def test_push_then_work_stops_when_empty(self):
        q = unique("lv-push")
        ids = [self.push(q, "%s-%d" % (q, i)) for i in range(2)]
        out, took = self.work_ok(q, "--stop-when-empty")
        for i, id in enumerate(ids):
            ran = self.runs("%s-%d" % (q, i))
            self.assertEqual(len(ran), 1, out)
            self.assertEqual((ran[0]["id"], ran[0]["attempts"], ran[0]["queue"]), (id, 1, q))
            self.assertEqual(self.job(id)[0], 404, "finished jobs are gone")
        s = self.stats(q)
        self.assertEqual((s["finished"], s["ready"], s["reserved"]), (2, 0, 0), s)
        self.assertLess(took, 15 * SLOW, "--stop-when-empty: the worker exits once a pop finds nothing")

    def running_worker(self, queue, *options, **env):
        """queue:work started in the background, and polling: a first job
        ran (so that what the test times is delayq, not php booting)."""
        p = self.start_php([self.php, ARTISAN, "queue:work", "delayq", "--queue=" + queue, "--sleep=0"]
                           + list(options), dict(self.env, **env))
        self.push(queue, queue + "-ping")
        self.wait_for("run of the first job", lambda: self.runs(queue + "-ping") or p.poll() is not None)
        return p

    def test_later_with_seconds_and_with_a_datetime(self):
        q = unique("lv-later")
        worker = self.running_worker(q, "--max-jobs=3", "--max-time=60")
        t0 = time.time()
        self.push(q, q + "-delay", "--delay=3")
        t1 = time.time()
        at = time.time() + 4
        self.push(q, q + "-at", "--at=%.3f" % at)
        t2 = time.time()  # on a loaded machine, php may still be booting at `at`
        st, out = self.wait_php(worker, 60)
        self.assertEqual(st, 0, out)
        delayed, = self.runs(q + "-delay")
        self.assertGreaterEqual(delayed["time"], t0 + 3)
        self.assertLess(delayed["time"], t1 + 3 + LATE * SLOW)
        timed, = self.runs(q + "-at")
        self.assertGreaterEqual(timed["time"], at)
        self.assertLess(timed["time"], max(at, t2) + LATE * SLOW)

    def test_release_with_a_delay_counts_attempts(self):
        q = unique("lv-release")
        id = self.push(q, q, "--behaviour=release:2")
        out, _ = self.work_ok(q, "--tries=2", "--max-jobs=2", "--max-time=30")
        first = self.runs(q, "start")[0]
        ran = self.runs(q)
        self.assertEqual(len(ran), 1, "%s\n%s" % (out, read_log(self.log, q)))
        ran = ran[0]
        self.assertEqual((first["attempts"], ran["attempts"], ran["id"]), (1, 2, id))
        self.assertGreaterEqual(ran["time"], first["time"] + 2)
        self.assertLess(ran["time"], first["time"] + 2 + LATE * SLOW)
        self.assertEqual(self.job(id)[0], 404)

    def test_tries_spent_reach_failed_jobs_and_bury(self):
        q = unique("lv-tries")
        id = self.push(q, q, "--behaviour=fail")
        # a pop waits 3 s: longer than the 1 s backoff, so the worker sees
        # the released job again before --stop-when-empty ends it
        out, _ = self.work_ok(q, "--tries=3", "--backoff=1", "--stop-when-empty", DELAYQ_BLOCK_FOR="3")
        starts = self.runs(q, "start")
        self.assertEqual([r["attempts"] for r in starts], [1, 2, 3], out)
        for a, b in zip(starts, starts[1:]):
            self.assertGreaterEqual(b["time"] - a["time"], 1.0, "--backoff=1 is release with a 1 s delay")
        st, got = self.job(id)
        self.assertEqual((st, got.get("state"), got.get("attempts")), (200, "buried", 3), got)
        failed = self.failed_jobs(q)
        self.assertEqual(len(failed), 1, out)
        self.assertEqual(failed[0][1], "delayq")
        self.assertIn("App\\\\Jobs\\\\RecordJob", failed[0][2])
        self.assertEqual(self.stats(q)["buries"], 1)
        self.assertEqual(failed[0][0], id, "the delayq job id is the payload's uuid")
        # queue:retry pushes the failed payload again, same uuid: the
        # buried job is replaced, not copied
        self.artisan_ok(["queue:retry", id])
        s = self.stats(q)
        self.assertEqual((s["ready"], s["buried"]), (1, 0), s)
        # failing again: still one buried job for the one failed_jobs row
        out, _ = self.work_ok(q, "--tries=1", "--stop-when-empty")
        self.assertEqual(len(self.failed_jobs(q)), 1, out)
        s = self.stats(q)
        self.assertEqual((s["ready"], s["buried"]), (0, 1), s)

    def test_sigterm_stops_a_waiting_worker_within_a_second(self):
        q = unique("lv-term")
        worker = self.running_worker(q, DELAYQ_BLOCK_FOR="20")
        time.sleep(0.3)  # the worker is in its next long-poll
        start = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        st, out = self.wait_php(worker, 20)
        took = time.monotonic() - start
        self.assertEqual(st, 0, out)
        self.assertLess(took, 1.0 * SLOW, "SIGTERM ends the 20 s long-poll, not waits it out")
        self.assertNotIn("ERROR", out, "the cut long-poll is no error")

    def test_touch_keeps_a_job_longer_than_its_ttr(self):
        q = unique("lv-touch")
        # the TTR is the job's, set when it is pushed
        id = self.push(q, q, "--behaviour=sleep:3", DELAYQ_TTR="1")
        out, _ = self.work_ok(q, "--stop-when-empty", "--timeout=20")
        self.assertEqual([r["attempts"] for r in self.runs(q)], [1], out)
        s = self.stats(q)
        self.assertEqual((s["redelivered"], s["finished"]), (0, 1), s)
        self.assertEqual(self.job(id)[0], 404)

    def test_without_touch_a_job_longer_than_its_ttr_is_delivered_again(self):
        # the control of the test above: the same job, touch off
        q = unique("lv-notouch")
        self.push(q, q, "--behaviour=sleep:3", DELAYQ_TTR="1")
        out, _ = self.work_ok(q, "--stop-when-empty", "--timeout=20", DELAYQ_TOUCH="0")
        self.assertGreaterEqual(self.stats(q)["redelivered"], 1, out)

    def test_timeout_kills_the_job_then_delayq_delivers_it_again(self):
        q = unique("lv-timeout")
        id = self.push(q, q, "--behaviour=sleep:30", DELAYQ_TTR="1")
        # Laravel's --timeout kills the worker (SIGKILL) after 2 s; the
        # touching child sees its parent gone and stops
        st, out, took = self.work(q, "--timeout=2", "--tries=2")
        self.assertNotEqual(st, 0, out)
        self.assertLess(took, 10 * SLOW, out)
        deadline = time.monotonic() + 5 * SLOW
        while self.job(id)[1].get("state") == "reserved" and time.monotonic() < deadline:
            time.sleep(0.1)
        st, got = self.job(id)
        self.assertEqual((got.get("state"), got.get("attempts")), ("ready", 1),
                         "no touch after the kill: delivered again after its TTR: %r" % got)
        self.assertEqual(self.failed_jobs(q), [], "1 try of 2: not failed yet")
        # the second try is the last: Laravel fails it before killing the worker
        st, out, _ = self.work(q, "--timeout=2", "--tries=2")
        self.assertNotEqual(st, 0, out)
        st, got = self.job(id)
        self.assertEqual((got.get("state"), got.get("attempts")), ("buried", 2), got)
        self.assertEqual(len(self.failed_jobs(q)), 1, out)
        self.assertEqual([r["attempts"] for r in self.runs(q, "start")], [1, 2])

    def test_bulk_is_one_batch_add_and_size_counts_it(self):
        q = unique("lv-bulk")
        before = self.add_requests()
        self.artisan_ok(["delayq:bulk", "5", "--queue=" + q])
        self.assertEqual(self.add_requests() - before, 1, "one add request for the 5 jobs")
        self.assertEqual(self.stats(q)["added"], 5)
        self.assertEqual(self.artisan_ok(["delayq:size", "--queue=" + q]), "5")
        self.work_ok(q, "--stop-when-empty")
        self.assertEqual(len([r for r in read_log(self.log) if r["queue"] == q]), 5)
        self.assertEqual(self.artisan_ok(["delayq:size", "--queue=" + q]), "0")

    def test_a_bad_connection_setting_is_a_clear_error(self):
        st, out, _ = self.artisan(["delayq:size"], DELAYQ_URL="ftp://127.0.0.1")
        self.assertNotEqual(st, 0, out)
        self.assertIn("the delayq URL must start with http:// or https://", out)
        st, out, _ = self.artisan(["delayq:size"], DELAYQ_BLOCK_FOR="600")
        self.assertNotEqual(st, 0, out)
        self.assertIn("block_for 0..60 seconds", out)
        st, out, _ = self.artisan(["delayq:size"], DELAYQ_RETRY_AFTER="90")
        self.assertNotEqual(st, 0, out)
        self.assertIn("retry_after is the redis driver's key; delayq's is ttr", out)

    def test_ttr_takes_a_duration_and_refuses_what_is_not_one(self):
        q = unique("lv-ttr")
        for ttr, seconds in (("1m", 60), ("90", 90), ("2.5s", 2.5)):
            st, job = self.job(self.push(q, q + "-" + ttr, DELAYQ_TTR=ttr))
            self.assertOk(st, job, "get")
            self.assertEqual(job["ttr"], seconds, "ttr %r" % ttr)
        st, out, _ = self.artisan(["delayq:size"], DELAYQ_TTR="1 minute")
        self.assertNotEqual(st, 0, out)
        self.assertIn("ttr must be a number of seconds or a duration such as '90s', '1m' or '2h'", out)

    def test_policy_command_sets_each_queue_s_policy_from_the_connection(self):
        mail, api = unique("lv-pol-mail"), unique("lv-pol-api")
        policies = '{"%s": {"concurrency": 2, "keep": 60}, "%s": {"rate": 120, "period": 60}}' % (mail, api)
        out = self.artisan_ok(["delayq:policy"], DELAYQ_POLICIES=policies)
        self.assertIn(mail + ": ", out)
        for topic, want in ((mail, {"concurrency": 2, "keep": 60}), (api, {"rate": 120, "period": 60})):
            st, r = self.api_get("/policies?topic=" + topic)
            self.assertOk(st, r, "policies")
            self.assertEqual({k: r["policies"][topic][k] for k in want}, want, r)
        st, out, _ = self.artisan(["delayq:policy"], DELAYQ_POLICIES='{"%s": {"concurrency": 0}}' % mail)
        self.assertNotEqual(st, 0, out)
        self.assertIn("concurrency", out)  # delayq's 400 names the field
        st, out, _ = self.artisan(["delayq:policy"], DELAYQ_POLICIES='[5]')
        self.assertNotEqual(st, 0, out)
        self.assertIn("policies must map each queue name to its limits", out)

    def test_size_counts_delayed_ready_and_reserved(self):
        q = unique("lv-size")
        self.push(q, q + "-now")
        self.push(q, q + "-later", "--delay=600")
        self.assertEqual(self.artisan_ok(["delayq:size", "--queue=" + q]), "2")
        self.assertEqual(self.artisan_ok(["delayq:size", "--queue=" + unique("lv-empty")]), "0")

    def test_queue_clear_purges_what_size_counts(self):
        q = unique("lv-clear")
        self.push(q, q + "-now")
        self.push(q, q + "-later", "--delay=600")
        out = self.artisan_ok(["queue:clear", "delayq", "--queue=" + q, "--force"])
        self.assertIn("Cleared 2 jobs from the [%s] queue" % q, out)
        self.assertEqual(self.artisan_ok(["delayq:size", "--queue=" + q]), "0")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PHP example examples/php/close-unpaid-order against a real deployment
(dqtest.Deployment): two orders made by producer.php with ORDER_CLOSE_DELAY=1,
one paid with pay.php, worker.php running: the unpaid order is closed and its
stock returned, the paid one stays paid, both close-order jobs are finished.

The example and the client are copied to a temp dir; when composer is
installed the example is installed there with `composer install` (path
repository, no network) and runs on Composer's autoloader, else on
clients/php/autoload.php. Needs php-cli with curl: without them it skips
(exit 77), or fails under DQTEST_REQUIRE_ALL=1 (dqtest.tools).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_example_php.py
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

import dqtest
from dqtest import DeploymentTestCase, tools

PHP = shutil.which("php")
COMPOSER = shutil.which("composer")
EXAMPLE = os.path.join("examples", "php", "close-unpaid-order")
SKIP_COPY = shutil.ignore_patterns("vendor", "composer.lock", "orders.json")


class CloseUnpaidOrder(DeploymentTestCase):
    DEPLOYMENT_KW = {"workers": 1, "threads": 8}

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="delayq-php-example-")
        # The same layout as the repository, so ../../../clients/php resolves.
        shutil.copytree(os.path.join(SRC_DIR, "clients", "php"),
                        os.path.join(self.tmp, "clients", "php"), ignore=SKIP_COPY)
        self.dir = os.path.join(self.tmp, EXAMPLE)
        shutil.copytree(os.path.join(SRC_DIR, EXAMPLE), self.dir, ignore=SKIP_COPY)
        # The source tree may be read-only (distcheck); the copy must not be.
        for root, _, files in os.walk(self.tmp):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        self.orders_file = os.path.join(self.tmp, "orders.json")
        self.env = dict(os.environ)
        self.env.pop("DELAYQ_TOKEN", None)
        self.env.update(DELAYQ_URL="http://127.0.0.1:%d" % self.c.http_port,
                        ORDERS_FILE=self.orders_file, ORDER_CLOSE_DELAY="1")
        self.worker = None

    def tearDown(self):
        if self.worker and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def php(self, script, *args):
        r = subprocess.run([PHP, script] + list(args), cwd=self.dir, env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def orders(self):
        with open(self.orders_file) as f:
            return json.load(f)

    def composer_install(self):
        env = dict(self.env, COMPOSER_HOME=os.path.join(self.tmp, "composer-home"),
                   COMPOSER_ALLOW_SUPERUSER="1", COMPOSER_NO_INTERACTION="1",
                   COMPOSER_DISABLE_NETWORK="1")
        r = subprocess.run([COMPOSER, "install", "--no-interaction", "--no-progress"], cwd=self.dir,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "composer install failed:\n" + out)
        link = os.path.join(self.dir, "vendor", "delayq", "client")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "vendor", "autoload.php")), out)
        self.assertEqual(os.path.realpath(link), os.path.realpath(os.path.join(self.tmp, "clients", "php")),
                         "vendor/delayq/client is not the path repository")

    def test_unpaid_order_is_closed_paid_one_is_not(self):
        if COMPOSER:
            self.composer_install()
        else:
            print("\ncomposer not installed: the example runs on clients/php/autoload.php", file=sys.stderr)

        rc, out, err = self.php("producer.php", "tea", "2")
        self.assertEqual(rc, 0, err)
        self.assertIn("order 1 created", out)
        rc, out, err = self.php("producer.php", "cake", "1")
        self.assertEqual(rc, 0, err)
        self.assertIn("order 2 created", out)
        db = self.orders()
        self.assertEqual(db["stock"], {"tea": 98, "cake": 19})
        self.assertEqual([db["orders"][k]["status"] for k in ("1", "2")], ["unpaid", "unpaid"])
        st, job = self.c.get("/get?id=order-1")
        self.assertOk(st, job)
        # due 1 s after it was made: "ready" when the machine is slow
        self.assertEqual((job["topic"], job["value"]), ("close-order", {"order": 1}))
        self.assertIn(job["state"], ("delay", "ready"), job)

        rc, out, err = self.php("pay.php", "2")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, "order 2 paid\n")

        log = open(os.path.join(self.tmp, "worker.log"), "wb")
        self.worker = subprocess.Popen([PHP, "worker.php"], cwd=self.dir, env=self.env,
                                       stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        stats = None
        while time.monotonic() < deadline:
            st, body = self.c.get("/stats?topic=close-order")
            self.assertOk(st, body)
            stats = body["topics"]["close-order"]
            if stats["finished"] == 2:
                break
            self.assertIsNone(self.worker.poll(), "worker.php exited early:\n" + self.worker_log())
            time.sleep(0.1)
        self.assertEqual(stats["finished"], 2, "both jobs finished within 10 s: %r\n%s" %
                         (stats, self.worker_log()))
        for gauge in ("delay", "ready", "reserved", "buried"):
            self.assertEqual(stats[gauge], 0, gauge)

        db = self.orders()
        self.assertEqual(db["orders"]["1"]["status"], "closed")
        self.assertEqual(db["orders"]["2"]["status"], "paid")
        self.assertEqual(db["stock"], {"tea": 100, "cake": 19}, "the closed order's stock came back")
        rc, out, err = self.php("pay.php", "1")
        self.assertNotEqual(rc, 0)
        self.assertIn("order 1 is closed", err)

        self.worker.send_signal(signal.SIGTERM)
        self.assertEqual(self.worker.wait(15), 0, self.worker_log())
        text = self.worker_log()
        self.assertIn("order 1 was not paid in time: closed, stock returned", text)
        self.assertIn("order 2: paid, nothing to do", text)
        self.assertIn("stopped after 2 job(s)", text)

    def test_producer_refuses_the_order_when_delayq_is_down(self):
        self.env["DELAYQ_URL"] = "http://127.0.0.1:%d" % dqtest.free_port()
        rc, out, err = self.php("producer.php", "tea", "1")
        self.assertEqual(rc, 1)
        self.assertIn("order 1 NOT created", err)
        db = self.orders()
        self.assertEqual(db["orders"], {})
        self.assertEqual(db["stock"]["tea"], 100)

    def worker_log(self):
        with open(os.path.join(self.tmp, "worker.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")


if __name__ == "__main__":
    needs = tools.Needs("test_example_php")
    needs.program("php", "php-cli")
    needs.php_extension(PHP, "curl", "php-curl")
    needs.settle()
    dqtest.main()

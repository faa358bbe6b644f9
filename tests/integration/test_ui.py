#!/usr/bin/env python3
"""The dashboard (ui/, served by nginx at /ui/) in a real browser: Debian's
chromium, headless, driven by playwright-core (tests/ui/ui.test.mjs) against
a private Deployment with bearer tokens. The script loads the page, watches
counts change as jobs are added, searches a job, kicks a buried one, deletes
one (after a cancelled confirmation), shows a failed callback, pauses a topic when the server knows
pause, checks that a read-only token sees no action buttons, and keeps
screenshots (desktop 1280x800, phone 390x844) in test_ui.artifacts/ beside
this test's log. ForeignPage: a page of another site tries every write
command in every preflight-free form (tests/ui/foreign.test.mjs), refused.

Needs node, chromium (Debian's, /usr/bin/chromium or $CHROMIUM) and
playwright-core from `npm ci --prefix tests/ui` (the lockfile's; it downloads
no browser). It looks for node_modules/playwright-core under
$DELAYQ_UI_NPM_PREFIX, else under the source tree's tests/ui: a dist tree
has no node_modules, so `make distcheck` passes the source tree's (configure
takes DELAYQ_UI_NPM_PREFIX=DIR). Without any of them it skips (exit 77), or
fails under DQTEST_REQUIRE_ALL=1 (dqtest.tools).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. PYTHONPATH=tests python3 tests/integration/test_ui.py
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

import dqtest
from dqtest import DeploymentTestCase, free_port, main, tools
from dqtest.commands import SAMPLES, WRITES

ADMIN = "ui-admin-token-0123456789"
READONLY = "ui-readonly-token-0123456789"

TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-ui-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("%s\n%s commands=get,stats,schedules,health\n" % (ADMIN, READONLY))
os.chmod(TOKENS_DIR, 0o755)

UI_TESTS = os.path.join(dqtest.SRC_DIR, "tests", "ui")
# Where `npm ci --prefix` installed playwright-core (ui.test.mjs requires
# it from there).
NPM_PREFIX = os.environ.get("DELAYQ_UI_NPM_PREFIX") or UI_TESTS
CHROMIUM = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
# Beside this test's log: automake runs the tests from the build dir.
ARTIFACTS = os.environ.get("DELAYQ_UI_ARTIFACTS") or os.path.join(
    dqtest.BUILD_DIR, "tests", "integration", "test_ui.artifacts")


class Dashboard(DeploymentTestCase):
    # A pusher, and callbacks to loopback let in: a callback to a closed port
    # fails and leaves a job with last_attempt for the page to show.
    DEPLOYMENT_KW = {"workers": 1, "threads": 8, "fcgi_flags": {"auth_file": TOKENS},
                     "n_pushers": 1, "push_allow": "*,loopback"}

    def test_dashboard_in_chromium(self):
        node = shutil.which("node")
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
        os.makedirs(ARTIFACTS)
        env = dict(os.environ, DQ_URL="http://127.0.0.1:%d" % self.c.http_port, DQ_ADMIN=ADMIN,
                   DQ_READONLY=READONLY, DQ_ARTIFACTS=ARTIFACTS, CHROMIUM=CHROMIUM,
                   DQ_NPM_PREFIX=NPM_PREFIX,
                   DQ_CLOSED_PORT=str(free_port()))
        r = subprocess.run([node, os.path.join(UI_TESTS, "ui.test.mjs")], cwd=UI_TESTS, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        out = r.stdout.decode("utf-8", "replace")
        print(out, end="")
        self.assertEqual(r.returncode, 0, "the browser test failed:\n" + out)
        for name in ("desktop-1280x800.png", "phone-390x844.png", "read-only-1280x800.png"):
            with open(os.path.join(ARTIFACTS, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)


class ForeignPage(DeploymentTestCase):
    """A page of another site (another port of 127.0.0.1) writes to a
    deployment with auth off, the default, through the browser: every write
    command of commands.def in every form a page may send without a CORS
    preflight (tests/ui/foreign.test.mjs). Each answers 403 `forbidden`
    (its Origin is not the server's) and Redis is unchanged."""
    DEPLOYMENT_KW = {"workers": 1, "threads": 4}

    def forbidden(self):
        st, h, data = self.c.request("GET", "/metrics")
        return sum(int(n) for n in re.findall(
            rb'^delayq_requests_total\{command="[^"]*",code="forbidden"\} (\d+)$', data, re.M))

    def test_writes_from_a_foreign_page_are_refused(self):
        self.assertEqual(sorted(set(WRITES) - set(SAMPLES)), [], "a write command has no sample")
        # Something for each write to change: a job with the samples' id
        # and topic, and a paused topic for resume.
        self.assertOk(*self.c.req("add", topic="sample.a", id="sample-1", body=1))
        self.assertOk(*self.c.req("pause", topic="sample.p"))
        before, refused = self.c.snapshot(), self.forbidden()
        env = dict(os.environ, DQ_URL="http://127.0.0.1:%d" % self.c.http_port,
                   DQ_WRITES=json.dumps([[cmd, SAMPLES[cmd]] for cmd in WRITES]),
                   CHROMIUM=CHROMIUM, DQ_NPM_PREFIX=NPM_PREFIX)
        r = subprocess.run([shutil.which("node"), os.path.join(UI_TESTS, "foreign.test.mjs")],
                           cwd=UI_TESTS, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, "the browser test failed:\n" + out)
        awaited = int(re.search(r"foreign: awaited (\d+)", out).group(1))
        self.assertEqual(awaited, 4 * len(WRITES))
        self.assertEqual(before, self.c.snapshot(), "a foreign page changed Redis")
        # Every awaited fetch reached delayq and was refused (the beacons
        # and forms besides, when they arrived before the browser closed).
        self.assertGreaterEqual(self.forbidden() - refused, awaited)

    def test_origin_header(self):
        """The same rule without a browser: the server's own origin, or no
        Origin at all (every client), may write; another may not."""
        own = "http://127.0.0.1:%d" % self.c.http_port
        body = json.dumps({"topic": "origin.t", "body": 1}).encode()
        host = {"Host": "127.0.0.1:%d" % self.c.http_port}
        st, h, data = self.c.request("POST", "/add", body, dict(host, Origin=own))
        self.assertEqual(st, 200, data)
        for origin in ("http://127.0.0.1:1", "http://evil.example", "null"):
            before = self.c.snapshot()
            st, h, data = self.c.request("POST", "/add", body, dict(host, Origin=origin))
            self.assertError(st, json.loads(data), 403, "forbidden", origin)
            self.assertEqual(before, self.c.snapshot())
        st, h, data = self.c.request("POST", "/add", body, host)
        self.assertEqual(st, 200, data)


if __name__ == "__main__":
    needs = tools.Needs("test_ui")
    needs.program("node", "nodejs")
    needs.file(CHROMIUM, "chromium")
    needs.node_module(NPM_PREFIX, "playwright-core",
                      "npm ci --prefix tests/ui, Debian package npm; or DELAYQ_UI_NPM_PREFIX")
    needs.settle()
    main()

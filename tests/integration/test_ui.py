#!/usr/bin/env python3
"""The dashboard (ui/, served by nginx at /ui/) in a real browser: Debian's
chromium, headless, driven by playwright-core (tests/ui/ui.test.mjs) against
a private Deployment with bearer tokens. The script loads the page, watches
counts change as jobs are added, searches a job, kicks a buried one, deletes
one (after a cancelled confirmation), shows a failed callback, pauses a topic when the server knows
pause, checks that a read-only token sees no action buttons, and keeps
screenshots (desktop 1280x800, phone 390x844) in test_ui.artifacts/ beside
this test's log.

Needs: chromium (Debian's, /usr/bin/chromium or $CHROMIUM) and
`npm ci --prefix tests/ui` (playwright-core from the lockfile; it downloads no
browser). Missing either is a failure that says so, not a skip.

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. PYTHONPATH=tests python3 tests/integration/test_ui.py
"""

import os
import shutil
import subprocess
import tempfile

import dqtest
from dqtest import DeploymentTestCase, free_port, main

ADMIN = "ui-admin-token-0123456789"
READONLY = "ui-readonly-token-0123456789"

TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-ui-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("%s\n%s commands=get,stats,schedules,health\n" % (ADMIN, READONLY))
os.chmod(TOKENS_DIR, 0o755)

UI_TESTS = os.path.join(dqtest.SRC_DIR, "tests", "ui")
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
        self.assertTrue(node, "node is not installed (Debian: apt-get install nodejs)")
        self.assertTrue(os.access(CHROMIUM, os.X_OK),
                        "%s missing (Debian: apt-get install chromium)" % CHROMIUM)
        self.assertTrue(os.path.isdir(os.path.join(UI_TESTS, "node_modules", "playwright-core")),
                        "playwright-core missing: run npm ci --prefix tests/ui")
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
        os.makedirs(ARTIFACTS)
        env = dict(os.environ, DQ_URL="http://127.0.0.1:%d" % self.c.http_port, DQ_ADMIN=ADMIN,
                   DQ_READONLY=READONLY, DQ_ARTIFACTS=ARTIFACTS, CHROMIUM=CHROMIUM,
                   DQ_CLOSED_PORT=str(free_port()))
        r = subprocess.run([node, os.path.join(UI_TESTS, "ui.test.mjs")], cwd=UI_TESTS, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        out = r.stdout.decode("utf-8", "replace")
        print(out, end="")
        self.assertEqual(r.returncode, 0, "the browser test failed:\n" + out)
        for name in ("desktop-1280x800.png", "phone-390x844.png", "read-only-1280x800.png"):
            with open(os.path.join(ARTIFACTS, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)


if __name__ == "__main__":
    main()

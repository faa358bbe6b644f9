"""What the Laravel and Symfony integration tests share: a check that php
and Debian's framework packages are there, a deployment with bearer-token
auth on, a temporary directory, a PHP command run with a deadline, and the
JSON-lines log their test handlers write."""

import json
import os
import shutil
import subprocess
import tempfile
import time

from dqtest import SLOW, DeploymentTestCase, tools
from dqtest.httpconn import parse_body

TOKEN = "php-framework-test-token-0123456789"


def require_php(test, autoloaders, extensions=()):
    """The php binary, once php with its curl extension, each extension
    (name -> Debian package) and each framework autoloader (path -> Debian
    package) are there; else it exits as dqtest.tools says: a skip, or a
    failure under DQTEST_REQUIRE_ALL=1."""
    needs = tools.Needs(test)
    php = needs.program("php", "php-cli")
    needs.php_extension(php, "curl", "php-curl")
    for ext, package in extensions:
        needs.php_extension(php, ext, package)
    for path, package in autoloaders:
        needs.path(path, package)
    needs.settle()
    return php


class PhpFrameworkTestCase(DeploymentTestCase):
    """A deployment whose API needs TOKEN, and self.tmp, a directory of the
    class removed at the end."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="delayq-%s-" % cls.__name__.lower())
        os.chmod(cls.tmp, 0o755)  # delayq-fcgi reads the token file
        tokens = os.path.join(cls.tmp, "tokens")
        with open(tokens, "w") as f:
            f.write("%s\n" % TOKEN)
        cls.DEPLOYMENT_KW = dict(cls.DEPLOYMENT_KW, fcgi_flags={"auth_file": tokens})
        try:
            super().setUpClass()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.c.http_port

    def run_php(self, argv, env, timeout, cwd=None):
        """Runs argv to its end (killed after timeout seconds, times SLOW);
        returns (exit status, output, seconds taken)."""
        start = time.monotonic()
        try:
            p = subprocess.run(argv, env=env, cwd=cwd or self.tmp, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=timeout * SLOW)
        except subprocess.TimeoutExpired as e:
            out = (e.output or b"").decode("utf-8", "replace")
            self.fail("%s did not end within %s s:\n%s" % (" ".join(argv), timeout * SLOW, out))
        return p.returncode, p.stdout.decode("utf-8", "replace"), time.monotonic() - start

    def api_get(self, path):
        """GET path with the token -> (status, parsed JSON or text)."""
        st, h, data = self.c.request("GET", path, None, {"Authorization": "Bearer " + TOKEN})
        return st, parse_body(data, h)

    def start_php(self, argv, env):
        """Starts argv in the background (a worker); returns its Popen,
        output to a file, stopped at the end of the test if still running."""
        out = tempfile.TemporaryFile(dir=self.tmp)
        p = subprocess.Popen(argv, env=env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT)
        p.output = out

        def stop():
            if p.poll() is None:
                p.kill()  # by its Popen, i.e. its pid
                p.wait()
            out.close()
        self.addCleanup(stop)
        return p

    def wait_php(self, p, timeout):
        """Waits for a start_php() process to end; returns (exit status, output)."""
        try:
            st = p.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            st = None
        p.output.seek(0)
        text = p.output.read().decode("utf-8", "replace")
        if st is None:
            self.fail("%s did not end within %s s:\n%s" % (" ".join(p.args), timeout * SLOW, text))
        return st, text

    def wait_for(self, what, check, timeout=30):
        """Polls check() until it is true (timeout in seconds, times SLOW)."""
        deadline = time.monotonic() + timeout * SLOW
        while not check():
            if time.monotonic() > deadline:
                self.fail("no %s within %s s" % (what, timeout * SLOW))
            time.sleep(0.05)

    def stats(self, topic):
        st, r = self.api_get("/stats?topic=" + topic)
        self.assertOk(st, r, "stats")
        return r["topics"].get(topic, {})

    def job(self, id):
        """get of job id: (HTTP status, answer)."""
        return self.api_get("/get?id=" + id)

    def add_requests(self):
        """delayq_requests_total of add answered ok, from /metrics."""
        st, text = self.api_get("/metrics")
        self.assertEqual(st, 200, text)
        for line in text.splitlines():
            if line.startswith('delayq_requests_total{command="add",code="ok"}'):
                return int(float(line.split()[-1]))
        return 0


def read_log(path, name=None):
    """The handler's JSON lines (those of one job name when given)."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [r for r in rows if name is None or r["name"] == name]

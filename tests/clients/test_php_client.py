#!/usr/bin/env python3
"""The PHP client (clients/php) against a real deployment (dqtest.Deployment,
with bearer-token auth on): runs its PHPUnit suite with DELAYQ_URL,
DELAYQ_TOKEN and DELAYQ_TEST_REDIS (its Redis' host:port) set, then stops
the deployment's Redis and runs the suite's redis-down group (every command
a 503 UnavailableException).

Needs php-cli (>= 7.4, with curl and json) and phpunit: without them it
skips (exit 77), or fails under DQTEST_REQUIRE_ALL=1 (dqtest.tools).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_php_client.py
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

import dqtest
from dqtest import tools

TOKEN = "php-client-test-token-0123456789"
PHPUNIT_TIMEOUT = 300


def fail(msg):
    print("test_php_client: FAIL: %s" % msg, file=sys.stderr)
    sys.exit(1)


def check_tools():
    """(php, phpunit) paths: skips (dqtest.tools) when one is missing, fails
    when php is too old."""
    needs = tools.Needs("test_php_client")
    php = needs.program("php", "php-cli")
    phpunit = needs.program("phpunit", "phpunit")
    needs.php_extension(php, "curl", "php-curl")
    needs.php_extension(php, "json", "php-cli")
    needs.settle()
    r = subprocess.run([php, "-r", 'echo PHP_VERSION_ID >= 70400 ? "" : "php >= 7.4 needed, this is " . PHP_VERSION;'],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode("utf-8", "replace").strip()
    if r.returncode != 0 or out:
        fail("%s: %s" % (php, out or "exit %d" % r.returncode))
    return php, phpunit


def run_phpunit(phpunit, args, env, label):
    conf = os.path.join(SRC_DIR, "clients", "php", "phpunit.xml.dist")
    argv = [phpunit, "-c", conf] + args
    print("test_php_client: %s: %s" % (label, " ".join(argv)), flush=True)
    # cwd: anywhere but the source tree, which may be read-only (distcheck).
    p = subprocess.Popen(argv, env=env, cwd=tempfile.gettempdir())
    try:
        return p.wait(PHPUNIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        print("test_php_client: %s: phpunit did not finish within %d s" % (label, PHPUNIT_TIMEOUT),
              file=sys.stderr)
        return 1


def main():
    _, phpunit = check_tools()
    if not (os.path.exists(os.path.join(dqtest.BUILD_DIR, "delayq-fcgi")) and
            os.path.exists(os.path.join(dqtest.BUILD_DIR, "delayq-timer"))):
        print("delayq binaries not found in %s" % dqtest.BUILD_DIR, file=sys.stderr)
        sys.exit(99)

    def on_term(*_):
        dqtest.stop_leftovers()
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)

    tokens_dir = tempfile.mkdtemp(prefix="delayq-php-auth-")
    tokens = os.path.join(tokens_dir, "tokens")
    with open(tokens, "w") as f:
        f.write("# the PHP client tests' token\n%s\n" % TOKEN)
    os.chmod(tokens_dir, 0o755)
    try:
        with dqtest.Deployment(workers=1, threads=8, fcgi_flags={"auth_file": tokens}) as c:
            env = dict(os.environ)
            env.pop("DELAYQ_REDIS_DOWN", None)
            env["DELAYQ_URL"] = "http://127.0.0.1:%d" % c.http_port
            env["DELAYQ_TOKEN"] = TOKEN
            # the Redis of the deployment, for the tests that make it read-only
            env["DELAYQ_TEST_REDIS"] = "127.0.0.1:%d" % c.redis_port
            # DQTEST_PHPUNIT_FILTER=testSchedules runs only the tests it matches.
            only = os.environ.get("DQTEST_PHPUNIT_FILTER")
            rc = run_phpunit(phpunit, ["--filter", only] if only else [], env, "suite")
            c.stop_redis()
            env["DELAYQ_REDIS_DOWN"] = "1"
            rc_down = run_phpunit(phpunit, ["--group", "redis-down"], env, "redis-down group")
            if rc or rc_down:
                c.failed = True  # keep the deployment's logs
    finally:
        shutil.rmtree(tokens_dir, ignore_errors=True)
    rc = rc or rc_down
    print("test_php_client: %s" % ("PASS" if rc == 0 else "FAIL (phpunit exit %d)" % rc), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

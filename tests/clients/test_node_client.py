#!/usr/bin/env python3
"""The Node.js client (clients/node) against a real deployment
(dqtest.Deployment, bearer-token auth on, one delayq-push signing callbacks
with two secrets as during a rotation): runs `node --test` on
clients/node/test/*.test.js with DELAYQ_URL, DELAYQ_TOKEN and the webhook
secrets in the environment, then stops the deployment's Redis and runs the
redis-down file again (every command an Unavailable).

Needs node >= 18 (Debian's nodejs): without it this test skips (exit 77),
or fails under DQTEST_REQUIRE_ALL=1 (dqtest.tools).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. PYTHONPATH=tests python3 tests/clients/test_node_client.py
"""

import base64
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import dqtest
from dqtest import tools

# test_java_client's temp_dir_with_token; that module imports the Python client.
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)),
                os.path.join(dqtest.SRC_DIR, "clients", "python")]
import test_java_client  # noqa: E402

TOKEN = "node-client-test-token-0123456789"
NEW = "whsec_" + base64.b64encode(b"the new node secret, 32 bytes..").decode()
OLD = "whsec_" + base64.b64encode(b"the old node secret, 32 bytes!.").decode()
NODE_TIMEOUT = 120
TEST_DIR = os.path.join(dqtest.SRC_DIR, "clients", "node", "test")


def check_node():
    """node's path: skips (dqtest.tools) when it is missing; fails when it
    is older than the client's engines (18)."""
    needs = tools.Needs("test_node_client")
    node = needs.program("node", "nodejs")
    needs.settle()
    out = subprocess.run([node, "--version"], stdout=subprocess.PIPE, check=True).stdout.decode()
    if int(out.strip().lstrip("v").split(".")[0]) < 18:
        print("test_node_client: FAIL: node >= 18 needed, this is %s" % out.strip(),
              file=sys.stderr)
        sys.exit(1)
    return node


def run_node(node, files, env, label):
    argv = [node, "--test"] + files
    print("test_node_client: %s: %s" % (label, " ".join(argv)), flush=True)
    # cwd: anywhere but the source tree, which may be read-only (distcheck).
    try:
        return subprocess.run(argv, env=env, cwd=tempfile.gettempdir(),
                              timeout=NODE_TIMEOUT).returncode
    except subprocess.TimeoutExpired:
        print("test_node_client: %s: node --test did not finish within %d s (killed)"
              % (label, NODE_TIMEOUT), file=sys.stderr)
        return 1


def main():
    node = check_node()
    dqtest.require_build()
    dqtest.stop_on_sigterm()
    files = sorted(glob.glob(os.path.join(TEST_DIR, "*.test.js")))
    down = [f for f in files if os.path.basename(f) == "redis-down.test.js"]
    if not files or not down:
        print("test_node_client: FAIL: no test files in %s" % TEST_DIR, file=sys.stderr)
        return 1
    tokens_dir, tokens = test_java_client.temp_dir_with_token("delayq-node-auth-", TOKEN,
                                                              "the Node client tests")
    try:
        with dqtest.Deployment(workers=1, threads=8, fcgi_flags={"auth_file": tokens},
                               n_pushers=1, push_allow="*,loopback", push_grace_ms=1000,
                               push_flags={"push_secret": NEW + " " + OLD}) as c:
            env = dict(os.environ, DELAYQ_URL="http://127.0.0.1:%d" % c.http_port,
                       DELAYQ_TOKEN=TOKEN, DELAYQ_TEST_PUSH_SECRET=NEW,
                       DELAYQ_TEST_OLD_SECRET=OLD)
            env.pop("DELAYQ_REDIS_DOWN", None)
            rc = run_node(node, files, env, "suite")
            c.stop_redis()
            env["DELAYQ_REDIS_DOWN"] = "1"
            rc_down = run_node(node, down, env, "redis down")
            if rc or rc_down:
                c.failed = True  # keep the deployment's logs
    finally:
        shutil.rmtree(tokens_dir, ignore_errors=True)
    rc = rc or rc_down
    print("test_node_client: %s" % ("PASS" if rc == 0 else "FAIL (node --test exit %d)" % rc),
          flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

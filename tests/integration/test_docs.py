"""Every curl and ./delayq example in README.md and docs/PROTOCOL.md runs
against a real deployment and answers what the docs say it answers.

A code block's lines starting with `curl` or `./delayq` are run in order
(in the build directory), with localhost:8080 and DELAYQ_URL pointed at the
test's nginx. A following line `# {...}` is the documented answer: both are
parsed as JSON and compared, except for values that differ on every run
(`created`, `due`, a kept record's `first_delivered` and `ended`, and the
time an error sentence quotes). An example whose answer is not shown must still succeed:
its curl runs with --fail-with-body (an HTTP error fails it) and its
pipeline with pipefail."""

import json
import os
import re
import subprocess
import unittest

from dqtest import BUILD_DIR, SRC_DIR, DeploymentTestCase, main

VOLATILE = {"created", "due", "first_delivered", "ended"}
# The time an idempotency-window conflict names: "<UTC> (<Unix ms> ms)".
ERROR_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d+ ms\)")


def examples(path):
    """[(command, expected JSON text or None)] of every ```sh block."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith(("curl ", "./delayq ")):
                continue
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            expected = nxt[2:] if nxt.startswith("# {") else None
            out.append((line, expected))
    return out


# What /health says of the Redis it runs on: the examples show one Redis,
# the test runs on whichever DQTEST_REDIS gives (a Cluster adds its masters).
TOPOLOGY = {"shards", "masters", "masters_used", "warning"}


def normalise(value):
    if isinstance(value, dict):
        if value.get("redis") == "ok":
            value = {k: v for k, v in value.items() if k not in TOPOLOGY}
        return {k: ("<varies>" if k in VOLATILE else
                    ERROR_TIME.sub("<time>", v) if k == "error" and isinstance(v, str) else
                    normalise(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


class DocExamples(DeploymentTestCase):
    # As scripts/run: callbacks to loopback are let in (README's callback example).
    DEPLOYMENT_KW = {"workers": 1, "threads": 8, "push_allow": "*,loopback"}

    def run_examples(self, relpath):
        path = os.path.join(SRC_DIR, relpath)
        found = examples(path)
        self.assertGreater(len(found), 3, "no curl examples found in %s" % relpath)
        port = str(self.c.http_port)
        checked = 0
        for cmd, expected in found:
            shell = cmd.replace("localhost:8080", "127.0.0.1:" + port)
            if expected is None:
                shell = "set -o pipefail; " + re.sub(r"\bcurl ", "curl --fail-with-body ", shell)
            env = dict(os.environ, DELAYQ_URL="http://127.0.0.1:" + port)
            r = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30,
                               cwd=BUILD_DIR, env=env)
            self.assertEqual(r.returncode, 0, "%s failed: %s" % (cmd, r.stderr))
            if expected is None:
                continue
            got = json.loads(r.stdout)
            self.assertEqual(normalise(got), normalise(json.loads(expected)),
                             "%s in %s" % (cmd, relpath))
            checked += 1
        print("%s: %d commands run, %d answers compared" % (relpath, len(found), checked))

    def test_protocol_examples(self):
        self.run_examples("docs/PROTOCOL.md")

    def test_readme_examples(self):
        self.run_examples("README.md")


if __name__ == "__main__":
    main()

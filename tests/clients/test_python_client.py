#!/usr/bin/env python3
"""Runs the Python client's test suite (clients/python/tests/test_client.py)
against a real deployment started by tests/integration/harness.py: every
Client method, batch results, the exception of every error code, body
round trips, long-poll wake-ups, reconnects, and the Worker (success,
release with backoff, SIGTERM/SIGINT).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_python_client.py
Exit status 0: all passed; 1: a failure; 99: no delayq build to test.
"""

import os
import signal
import sys
import unittest

sys.dont_write_bytecode = True  # keep the source tree clean

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(SRC_DIR, "clients", "python", "tests"),
          os.path.join(SRC_DIR, "clients", "python"),
          os.path.join(SRC_DIR, "tests", "integration")):
    sys.path.insert(0, p)

import harness  # noqa: E402


def main():
    for exe in ("delayq-fcgi", "delayq-timer"):
        if not os.path.exists(os.path.join(harness.BUILD_DIR, exe)):
            print("%s not found in %s" % (exe, harness.BUILD_DIR), file=sys.stderr)
            return 99  # a hard error for automake, not a skip

    def on_term(*_):
        # a test driver's timeout: stop the servers this process started
        harness._stop_leftovers()
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    suite = unittest.defaultTestLoader.loadTestsFromName("test_client")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())

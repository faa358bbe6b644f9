#!/usr/bin/env python3
"""Runs the Python client's test suite (clients/python/tests/test_client.py)
against a real deployment started by tests/dqtest: every Client method,
batch results, the exception of every error code, body round trips,
long-poll wake-ups, reconnects, and the Worker (success, release with
backoff, SIGTERM/SIGINT).

Run: PYTHONPATH=tests:clients/python python3 tests/clients/test_python_client.py
Exit status 0: all passed; 1: a failure; 99: no delayq build to test.
"""

import importlib.util
import os
import sys
import unittest

import dqtest


def main():
    dqtest.require_build()
    dqtest.stop_on_sigterm()
    path = os.path.join(dqtest.SRC_DIR, "clients", "python", "tests", "test_client.py")
    spec = importlib.util.spec_from_file_location("test_client", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_client"] = module
    spec.loader.exec_module(module)
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())

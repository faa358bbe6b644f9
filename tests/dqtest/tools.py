"""Optional tools a test needs beyond the packages delayq runs with
(scripts/lib.sh, DELAYQ_TEST_PACKAGES): PHP and PHPUnit for the PHP client,
node, playwright-core and chromium for the dashboard's browser test, ...

A test file collects what it needs before it starts anything:

    needs = tools.Needs("test_php_client")
    php = needs.program("php", "php-cli")
    needs.php_extension(php, "curl", "php-curl")
    needs.settle()

settle() returns when everything is there. Otherwise it names each missing
tool and the Debian package that brings it, and exits 77, which automake
counts as a SKIP: a plain `make check` or `make distcheck` on a machine
with only the run packages passes and says what it left out. With
DQTEST_REQUIRE_ALL=1 (scripts/test and .ci/run set it) it exits 1 instead:
there a missing tool is a failure, never a skip.
"""

import os
import shutil
import subprocess
import sys

SKIP = 77  # automake's exit status for a skipped test
REQUIRE_ALL = os.environ.get("DQTEST_REQUIRE_ALL", "") not in ("", "0", "no")


class Needs:
    def __init__(self, test):
        self.test = test
        self.missing = []  # "what (how to get it)"

    def _lack(self, what, how):
        self.missing.append("%s (%s)" % (what, how))

    def program(self, name, package):
        """The program's path on PATH, or None (recorded as missing)."""
        path = shutil.which(name)
        if not path:
            self._lack(name, "Debian package %s" % package)
        return path

    def file(self, path, package, what=None):
        """path when it is an executable file, else None (recorded)."""
        if os.access(path, os.X_OK):
            return path
        self._lack(what or path, "Debian package %s" % package)
        return None

    def path(self, path, package, what=None):
        """path when it exists, else None (recorded)."""
        if os.path.exists(path):
            return path
        self._lack(what or path, "Debian package %s" % package)
        return None

    def php_extension(self, php, ext, package):
        """Whether php (a path, or None when php itself is missing) loads ext."""
        if not php:
            return False
        r = subprocess.run([php, "-r", "exit(extension_loaded('%s') ? 0 : 1);" % ext],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            self._lack("PHP extension %s" % ext, "Debian package %s" % package)
            return False
        return True

    def node_module(self, prefix, module, how):
        """The module's folder under prefix/node_modules, or None (recorded)."""
        path = os.path.join(prefix, "node_modules", module)
        if os.path.isdir(path):
            return path
        self._lack("%s in %s/node_modules" % (module, prefix), how)
        return None

    def settle(self):
        """Returns when nothing is missing; else exits 77 (skip) or, with
        DQTEST_REQUIRE_ALL=1, 1 (fail), naming what is missing."""
        if not self.missing:
            return
        what = "; ".join(self.missing)
        if REQUIRE_ALL:
            print("%s: FAIL: missing %s. DQTEST_REQUIRE_ALL=1 (scripts/test, CI): every tool "
                  "is required" % (self.test, what), file=sys.stderr, flush=True)
            sys.exit(1)
        print("%s: SKIP: missing %s" % (self.test, what), file=sys.stderr, flush=True)
        sys.exit(SKIP)


def skip_or_fail(testcase, why):
    """For a check inside one test method that needs an optional tool:
    unittest's skip, or a failure under DQTEST_REQUIRE_ALL=1."""
    if REQUIRE_ALL:
        testcase.fail("%s (DQTEST_REQUIRE_ALL=1: every tool is required)" % why)
    testcase.skipTest(why)

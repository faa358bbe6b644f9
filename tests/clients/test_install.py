#!/usr/bin/env python3
"""`make install DESTDIR=<tmp>` puts every file where docs/INSTALL.md says,
with the configured paths filled in; the installed nginx snippets pass
`nginx -t`; the installed delayq-fcgi and delayq-timer serve a Deployment that
the installed `delayq` command line talks to; `make uninstall` removes every
file again.

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_install.py
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

import dqtest
from dqtest import Deployment, free_port, tools

BUILD_DIR = dqtest.BUILD_DIR
LEFTOVER = re.compile(r"@[A-Za-z_][A-Za-z0-9_]*@")


def make(*args):
    """Runs make in the build dir, outside any make that runs this test (its
    jobserver and flags would leak in through the environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL",
                                                            "MAKEOVERRIDES")}
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", BUILD_DIR] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=600)
    if r.returncode != 0:
        raise AssertionError("make %s failed (%d):\n%s" % (" ".join(args), r.returncode,
                                                          r.stdout.decode("utf-8", "replace")))
    return r.stdout.decode("utf-8")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dirs = dict(line.split("=", 1) for line in make("print-install-dirs").splitlines()
                        if "=" in line)
        cls.dest = tempfile.mkdtemp(prefix="delayq-install-")
        os.chmod(cls.dest, 0o755)  # nginx workers may run as another user
        make("install", "DESTDIR=" + cls.dest)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dest, ignore_errors=True)

    def p(self, key, *parts):
        """An installed path: DESTDIR + the configured dir + parts."""
        return os.path.join(self.dest + self.dirs[key], *parts)

    def test_0_binaries(self):
        for path in (self.p("bindir", "delayq"), self.p("sbindir", "delayq-fcgi"),
                     self.p("sbindir", "delayq-timer")):
            self.assertTrue(os.path.isfile(path) and os.access(path, os.X_OK), path)
        # delayq-fcgi and delayq-timer are daemons: not in bindir
        self.assertFalse(os.path.exists(self.p("bindir", "delayq-fcgi")))
        r = subprocess.run([self.p("bindir", "delayq"), "--version"], stdout=subprocess.PIPE)
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout.decode(), r"^delayq \d+\.\d+\.\d+\n$")

    def test_config_and_nginx_snippets(self):
        conf = self.p("sysconfdir", "delayq", "delayq.conf")
        self.assertEqual(read(conf), read(os.path.join(SRC_DIR, "delayq.conf")))
        self.assertFalse(os.path.exists(self.p("sysconfdir", "delayq.conf")))
        ndir = self.p("sysconfdir", "delayq", "nginx")
        # The locations as shipped, with the installed dashboard's directory.
        src = read(os.path.join(SRC_DIR, "nginx", "delayq-locations.conf"))
        self.assertIn("@DELAYQ_UI_DIR@", src)
        self.assertEqual(read(os.path.join(ndir, "delayq-locations.conf")),
                         src.replace("@DELAYQ_UI_DIR@", self.dirs["delayq_ui_dir"]))
        self.assertIn("    alias %s/;" % self.dirs["delayq_ui_dir"],
                      read(os.path.join(ndir, "delayq-locations.conf")).splitlines())
        up = read(os.path.join(ndir, "delayq-upstream.conf"))
        code = [line for line in up.splitlines() if not line.lstrip().startswith("#")]
        self.assertIn("    server unix:%s max_fails=0;" % self.dirs["delayq_socket"], code)
        self.assertFalse([line for line in code if LEFTOVER.search(line)], code)

    def test_dashboard(self):
        ui = self.dest + self.dirs["delayq_ui_dir"]
        self.assertEqual(self.dirs["delayq_ui_dir"], self.dirs["datadir"].rstrip("/") + "/delayq/ui")
        names = sorted(os.listdir(os.path.join(SRC_DIR, "ui")))
        self.assertIn("index.html", names)
        self.assertEqual(sorted(os.listdir(ui)), names, "every file of ui/ is installed")
        for n in names:
            self.assertEqual(read(os.path.join(ui, n)), read(os.path.join(SRC_DIR, "ui", n)), n)

    def test_nginx_accepts_the_installed_snippets(self):
        if not shutil.which("nginx"):
            self.skipTest("no nginx")
        ndir = self.p("sysconfdir", "delayq", "nginx")
        work = tempfile.mkdtemp(prefix="delayq-nginx-t-", dir=self.dest)
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write("pid %s/nginx.pid;\nevents {}\nhttp {\n"
                    "    client_body_temp_path %s/body;\n    fastcgi_temp_path %s/fcgi;\n"
                    "    proxy_temp_path %s/proxy;\n    uwsgi_temp_path %s/uwsgi;\n"
                    "    scgi_temp_path %s/scgi;\n    access_log off;\n"
                    "    include %s/delayq-upstream.conf;\n"
                    "    server {\n        listen 127.0.0.1:%d;\n"
                    "        include %s/delayq-locations.conf;\n    }\n}\n"
                    % ((work,) * 6 + (ndir, free_port(), ndir)))
        r = subprocess.run(["nginx", "-t", "-p", work, "-c", conf, "-e",
                            os.path.join(work, "error.log")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 0, r.stdout.decode("utf-8", "replace"))

    def test_systemd_units(self):
        udir = self.p("systemdsystemunitdir")
        self.assertEqual(self.dirs["systemdsystemunitdir"],
                         self.dirs["prefix"].rstrip("/") + "/lib/systemd/system")
        conf = "%s/delayq/delayq.conf" % self.dirs["sysconfdir"]
        fcgi = read(os.path.join(udir, "delayq-fcgi.service"))
        timer = read(os.path.join(udir, "delayq-timer@.service"))
        for text in (fcgi, timer):
            self.assertFalse(LEFTOVER.findall(text))
            self.assertIn("\nType=simple\n", text)
            self.assertIn("\nRestart=on-failure\n", text)
            self.assertIn("\nUser=delayq\n", text)
            self.assertIn("\nKillSignal=SIGTERM\n", text)
            self.assertIn("\nWantedBy=multi-user.target\n", text)
        self.assertIn("\nExecStart=%s/delayq-fcgi -c %s\n" % (self.dirs["sbindir"], conf), fcgi)
        self.assertIn("\nExecStart=%s/delayq-timer -c %s --timer-id=%%H-%%i\n" % (self.dirs["sbindir"], conf),
                      timer)
        self.assertIn("\nRuntimeDirectory=delayq\n", fcgi)
        self.assertIn("\nEnvironment=DELAYQ_LISTEN=%s\n" % self.dirs["delayq_socket"], fcgi)
        self.assertTrue(self.dirs["delayq_socket"].startswith("/run/delayq/"))
        stop = re.search(r"\nTimeoutStopSec=(\d+)s?\n", fcgi)
        self.assertTrue(stop and int(stop.group(1)) > 60, "TimeoutStopSec above the 60 s long-poll")
        # the timer unit is a template: %i names the instance
        self.assertIn("%i", timer)

    def man_pages(self):
        return [self.p("mandir", "man1", "delayq.1"), self.p("mandir", "man8", "delayq-fcgi.8"),
                self.p("mandir", "man8", "delayq-timer.8"), self.p("mandir", "man5", "delayq.conf.5"),
                self.p("mandir", "man8", "delayq-push.8")]

    def test_man_pages(self):
        pages = self.man_pages()
        for page in pages:
            self.assertFalse(LEFTOVER.findall(read(page)), page)
        # Paths in man pages may break after any '/' (troff's \:).
        self.assertIn("%s/delayq/delayq.conf" % self.dirs["sysconfdir"],
                      read(pages[1]).replace("\\:", ""))
        # delayq.conf(5) documents every key of delayq.conf with its default
        conf5 = read(pages[3])
        keys = re.findall(r"^([a-z_]+) = ?(.*)$", read(os.path.join(SRC_DIR, "delayq.conf")), re.M)
        self.assertGreater(len(keys), 15)
        for key, default in keys:
            m = re.search(r'^\.BR %s " \(default (?:" (\S+) \)|empty\)")$' % re.escape(key), conf5, re.M)
            self.assertTrue(m, "delayq.conf(5) lacks key %s" % key)
            self.assertEqual(m.group(1) or "", default.strip(), key)
        # delayq(1) documents every exit code 0..9
        for code in range(10):
            self.assertRegex(read(pages[0]), r"\n\.B %d\n" % code)

    def test_man_pages_format_without_warnings(self):
        if not shutil.which("man"):
            tools.skip_or_fail(self, "man is not installed (Debian package man-db)")
        for page in self.man_pages():
            r = subprocess.run(["man", "--warnings", "-l", page], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=dict(os.environ, MANWIDTH="80"))
            self.assertEqual((r.returncode, r.stderr), (0, b""), page)

    def test_docs(self):
        for name in ("INSTALL.md", "PROTOCOL.md", "OPERATIONS.md", "history/OPERATIONS-incidents.md"):
            self.assertTrue(os.path.isfile(self.p("docdir", name)), name)

    def test_installed_binaries_serve_the_installed_cli(self):
        cluster = Deployment(workers=1, threads=8)
        cluster.fcgi_bin = self.p("sbindir", "delayq-fcgi")
        cluster.timer_bin = self.p("sbindir", "delayq-timer")
        with cluster as c:
            url = "http://127.0.0.1:%d" % c.http_port

            def cli(*args):
                r = subprocess.run([self.p("bindir", "delayq"), "--url", url] + list(args),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                return r.returncode, r.stdout.decode(), r.stderr.decode()

            self.assertEqual(cli("health"), (0, "ok (redis ok)\n", ""))
            self.assertEqual(cli("add", "--topic", "inst", "--id", "inst-1", "--delay", "0.3",
                                 "--body", '{"n":1}'), (0, "inst-1\n", ""))
            # due in 0.3 s: only the installed timer makes it ready
            rc, out, err = cli("pop", "--topic", "inst", "--timeout", "10")
            self.assertEqual(rc, 0, err)
            self.assertIn("id        inst-1\n", out)
            self.assertIn('value     {"n":1}\n', out)
            self.assertEqual(cli("finish", "--id", "inst-1"), (0, "finished inst-1\n", ""))
            rc, _, err = cli("finish", "--id", "inst-1")
            self.assertEqual(rc, 3, err)
            # the processes are the installed ones
            self.assertEqual(os.path.realpath("/proc/%d/exe" % c.fcgi_proc.pid),
                             os.path.realpath(cluster.fcgi_bin))
            self.assertEqual(os.path.realpath("/proc/%d/exe" % c.timers[0].pid),
                             os.path.realpath(cluster.timer_bin))

    def test_z_uninstall_removes_every_file(self):
        make("uninstall", "DESTDIR=" + self.dest)
        left = []
        for root, _, files in os.walk(self.dest):
            if "delayq-nginx-t-" in root:
                continue  # test_nginx_accepts_the_installed_snippets' own files
            left += [os.path.join(root, f) for f in files]
        self.assertEqual(left, [])


if __name__ == "__main__":
    dqtest.main()

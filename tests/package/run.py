#!/usr/bin/env python3
"""The Debian package, end to end, on this machine (as root):
  - `dpkg-buildpackage -us -uc -b` builds it in a scratch copy of the
    source tree (the tree itself is left alone), and lintian finds no
    error or warning;
  - `apt-get install ./delayq_*.deb` installs every file where
    docs/INSTALL.md says, creates the delayq system user, and neither
    enables nor starts a service;
  - the installed units' commands (as systemd would run them: their user,
    environment and runtime directory) serve a private Redis named in the
    installed /etc/delayq/delayq.conf, and an nginx that includes the
    installed include files serves one job (add, a delayed pop through the
    timer, finish), a callback through delayq-push, the dashboard and the
    installed command line;
  - `apt-get purge` removes every file again.
The machine is left as it was: everything started is stopped by pid, the
package purged, and the delayq user and group removed again when this
test created them (a purge keeps them, as Debian's packages do).

usage: tests/package/run.py
  DELAYQ_DEB_DIR=DIR  test the delayq_*.deb and .changes already built in
                      DIR instead of building them
"""

import atexit
import glob
import json
import grp
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, HERE)

from dqtest import (Http, RedisServer, connect_as, free_port, kill_started,  # noqa: E402
                    stop_process, tail, track)
from dqtest.deployment import stop_on_sigterm  # noqa: E402
from dqtest.receiver import Receiver  # noqa: E402
import units  # noqa: E402

PACKAGE = "delayq"
USER = "delayq"
CONF = "/etc/delayq/delayq.conf"
NGINX_DIR = "/etc/delayq/nginx"
UI_DIR = "/usr/share/delayq/ui"
UNIT_DIR = "/lib/systemd/system"
SOCKET = "/run/delayq/delayq-fcgi.sock"
# Debian's nginx runs its workers as www-data (user and group): the group
# the delayq-fcgi unit gives its socket.
NGINX_USER = "www-data"
# The units the test starts, as an operator would enable them:
# delayq-fcgi and one instance of each template.
SERVICES = (("delayq-fcgi.service", None), ("delayq-timer@.service", "1"),
            ("delayq-push@.service", "1"))
FILES = ["/usr/bin/delayq", "/usr/sbin/delayq-fcgi", "/usr/sbin/delayq-timer",
         "/usr/sbin/delayq-push", CONF, NGINX_DIR + "/delayq-upstream.conf",
         NGINX_DIR + "/delayq-locations.conf", "/usr/share/man/man1/delayq.1.gz",
         "/usr/share/man/man5/delayq.conf.5.gz", "/usr/share/man/man8/delayq-fcgi.8.gz",
         "/usr/share/man/man8/delayq-timer.8.gz", "/usr/share/man/man8/delayq-push.8.gz",
         "/usr/share/doc/delayq/INSTALL.md", "/usr/share/doc/delayq/copyright"]
FILES += [os.path.join(UNIT_DIR, name) for name, _ in SERVICES]
FILES += [os.path.join(UI_DIR, name) for name in sorted(os.listdir(os.path.join(TOP, "ui")))]
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
# apt-get waits for dpkg's lock rather than failing: others install
# packages on a shared machine too.
APT_GET = ["apt-get", "-y", "-o", "DPkg::Lock::Timeout=300"]


def run(argv, **kw):
    """argv's output; a failure raises with that output."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s" % (" ".join(argv), r.returncode, out[-6000:]))
    return out


def log(msg):
    print("package: %s" % msg, file=sys.stderr, flush=True)


def package_state():
    """dpkg's status of the package ("installed", "config-files", ...),
    None when dpkg does not know it."""
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    state = r.stdout.decode().strip()
    if r.returncode != 0 or state in ("", "not-installed"):
        return None
    return state


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def build_debs(out_dir):
    """Copies the source tree's files (tracked and new, not ignored: no
    build products) into out_dir/delayq and builds the package there; the
    .deb and .changes land in out_dir."""
    src = os.path.join(out_dir, PACKAGE)
    os.mkdir(src)
    listed = subprocess.run(["git", "-C", TOP, "ls-files", "-z", "-co", "--exclude-standard"],
                            stdout=subprocess.PIPE, check=True).stdout.split(b"\0")
    files = b"\0".join(f for f in listed if f and os.path.lexists(os.path.join(TOP.encode(), f)))
    subprocess.run(["tar", "-C", TOP, "--null", "-T", "-", "-cf", os.path.join(out_dir, "src.tar")],
                   input=files, check=True)
    run(["tar", "-C", src, "-xf", os.path.join(out_dir, "src.tar")])
    log("dpkg-buildpackage -us -uc -b in %s" % src)
    with open(os.path.join(out_dir, "build.log"), "wb") as f:
        r = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, stdout=f,
                           stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise AssertionError("dpkg-buildpackage failed (%d):\n%s" %
                             (r.returncode, tail(os.path.join(out_dir, "build.log"), 60)))


def one(pattern):
    found = glob.glob(pattern)
    if len(found) != 1:
        raise AssertionError("expected one %s, found %r" % (pattern, found))
    return found[0]


def set_conf(path, settings):
    """Sets keys of delayq.conf in place, as an operator edits it: each
    key's own `key = value` line is replaced."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(True)
    for key, value in settings.items():
        hits = [i for i, line in enumerate(lines) if line.split("=", 1)[0].strip() == key
                and not line.lstrip().startswith("#")]
        if len(hits) != 1:
            raise AssertionError("%s has %d lines for %s" % (path, len(hits), key))
        lines[hits[0]] = "%s = %s\n" % (key, value)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def running_installed_daemons():
    """Pids of processes whose executable is one of the installed daemons."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink("/proc/%s/exe" % pid)
        except OSError:
            continue
        if exe.startswith("/usr/sbin/delayq-"):
            pids.append(int(pid))
    return pids


def proc_uid(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid in /proc/%d/status" % pid)


def mode_owner_group(path):
    """(permission bits, user name, group name) of path."""
    st = os.stat(path)
    return (st.st_mode & 0o7777, pwd.getpwuid(st.st_uid).pw_name,
            grp.getgrgid(st.st_gid).gr_name)


def start_nginx(work):
    """nginx with a config of its own in work/ that includes the installed
    upstream (in http) and locations (in server), on a free loopback port;
    returns (Popen, port)."""
    for _ in range(5):
        port = free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write("user %(u)s %(u)s;\npid %(w)s/nginx.pid;\nevents {}\nhttp {\n"
                    "    client_body_temp_path %(w)s/body;\n    fastcgi_temp_path %(w)s/fcgi;\n"
                    "    proxy_temp_path %(w)s/proxy;\n    uwsgi_temp_path %(w)s/uwsgi;\n"
                    "    scgi_temp_path %(w)s/scgi;\n    access_log off;\n"
                    "    include %(n)s/delayq-upstream.conf;\n"
                    "    server {\n        listen 127.0.0.1:%(p)d;\n"
                    "        include %(n)s/delayq-locations.conf;\n    }\n}\n"
                    % {"w": work, "n": NGINX_DIR, "p": port, "u": NGINX_USER})
        error_log = os.path.join(work, "error.log")
        proc = track(subprocess.Popen(["nginx", "-p", work, "-c", conf, "-e", error_log,
                                       "-g", "daemon off;"], stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return proc, port
            except OSError:
                time.sleep(0.05)
        stop_process(proc)  # the port was taken meanwhile, or nginx failed: try again
    raise AssertionError("nginx did not start:\n" + tail(error_log))


class DebianPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("installs a package: run as root")
        if package_state() is not None:
            raise AssertionError("%s is already known to dpkg (%s): this test installs and "
                                 "purges it, so it runs only where it is absent" %
                                 (PACKAGE, package_state()))
        if os.path.lexists(os.path.dirname(SOCKET)):
            raise AssertionError("%s exists: a delayq runs here already" % os.path.dirname(SOCKET))
        cls.had_user = user_exists(USER)
        cls.had_group = group_exists(USER)
        cls.scratch = tempfile.mkdtemp(prefix="delayq-deb-")
        atexit.register(shutil.rmtree, cls.scratch, ignore_errors=True)
        cls.deb_dir = os.environ.get("DELAYQ_DEB_DIR")
        if not cls.deb_dir:
            build_debs(cls.scratch)
            cls.deb_dir = cls.scratch
        cls.deb = one(os.path.join(cls.deb_dir, "%s_*.deb" % PACKAGE))
        cls.changes = one(os.path.join(cls.deb_dir, "%s_*.changes" % PACKAGE))
        # At the class's end, and at exit (a SIGTERM from `timeout` exits
        # through atexit, dqtest.stop_on_sigterm) whatever failed.
        cls.addClassCleanup(cls.leave_machine_clean)
        atexit.register(cls.leave_machine_clean)
        log("apt-get install -y %s" % cls.deb)
        run(APT_GET + ["install", os.path.abspath(cls.deb)], env=APT_ENV, timeout=900)

    @classmethod
    def leave_machine_clean(cls):
        """Whatever happened: every process the test started stopped, the
        package purged, and the user and group gone again if this test made
        them. Safe to run twice."""
        kill_started()
        subprocess.run(["rm", "-rf", "--one-file-system", os.path.dirname(SOCKET)])
        for _ in range(2):
            if package_state() is None:
                break
            subprocess.run(APT_GET + ["purge", PACKAGE], env=APT_ENV, stdout=subprocess.DEVNULL)
            if package_state() is not None:
                # An install of ours cut short (a timeout signals the whole
                # process group, dpkg too) leaves dpkg "interrupted", which
                # refuses a purge until the interrupted run is finished.
                subprocess.run(["dpkg", "--configure", "-a"], env=APT_ENV,
                               stdout=subprocess.DEVNULL)
        if package_state() is not None:
            log("could not purge %s: dpkg says %s" % (PACKAGE, package_state()))
            return  # the user stays while the package that needs it does
        if not cls.had_user and user_exists(USER):
            subprocess.run(["userdel", USER])
        if not cls.had_group and group_exists(USER):
            subprocess.run(["groupdel", USER])

    def test_0_lintian_is_clean(self):
        r = subprocess.run(["lintian", "--fail-on", "error,warning", self.changes],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, out + r.stderr.decode("utf-8", "replace"))
        tags = [line for line in out.splitlines() if line[:2] in ("E:", "W:")]
        self.assertEqual(tags, [])

    def test_1_files_where_install_md_says(self):
        listed = set(run(["dpkg-query", "-L", PACKAGE]).splitlines())
        for path in FILES:
            self.assertIn(path, listed)
            self.assertTrue(os.path.isfile(path), path)
        for path in FILES[:4]:
            self.assertTrue(os.access(path, os.X_OK), path)
        # dpkg keeps the operator's edits of everything under /etc
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", PACKAGE])
        for path in (CONF, NGINX_DIR + "/delayq-upstream.conf", NGINX_DIR + "/delayq-locations.conf"):
            self.assertIn(" %s " % path, conffiles)
        with open(CONF) as f, open(os.path.join(TOP, "delayq.conf")) as g:
            self.assertEqual(f.read(), g.read())
        # the include files as installed: the units' socket, the dashboard's directory
        with open(NGINX_DIR + "/delayq-upstream.conf") as f:
            self.assertIn("    server unix:%s max_fails=0;\n" % SOCKET, f.read())
        with open(NGINX_DIR + "/delayq-locations.conf") as f:
            self.assertIn("    alias %s/;\n" % UI_DIR, f.read())
        # the package's version is the program's
        version = run(["dpkg-query", "-W", "-f=${Version}", PACKAGE])
        self.assertEqual(run(["/usr/bin/delayq", "--version"]), "delayq %s\n" % version)
        # the units name installed binaries and uncompressed documentation
        for name, instance in SERVICES:
            path = os.path.join(UNIT_DIR, name)
            service = units.Service(path, instance)
            self.assertTrue(os.access(service.argv[0], os.X_OK), service.argv)
            self.assertEqual(service.argv[1:3], ["-c", CONF])
            for key, value in units.parse(path)["Unit"]:
                for url in value.split() if key == "Documentation" else ():
                    if url.startswith("file://"):
                        self.assertTrue(os.path.isfile(url[len("file://"):]), url)

    def test_2_system_user_and_config_modes(self):
        user = pwd.getpwnam(USER)
        self.assertLess(user.pw_uid, 1000, "a system user")
        self.assertEqual(grp.getgrgid(user.pw_gid).gr_name, USER)
        self.assertEqual(user.pw_dir, "/nonexistent")
        self.assertFalse(os.path.exists("/nonexistent"))
        self.assertEqual(user.pw_shell, "/usr/sbin/nologin")
        # delayq.conf may hold push_secret and Redis passwords
        self.assertEqual(mode_owner_group(CONF), (0o640, "root", USER))
        self.assertEqual(os.stat(NGINX_DIR + "/delayq-upstream.conf").st_mode & 0o7777, 0o644)

    def test_3_nothing_enabled_nor_started(self):
        for name, instance in SERVICES:
            unit = name.replace("@", "@%s" % instance) if instance else name
            r = subprocess.run(["systemctl", "is-enabled", unit], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            self.assertEqual(r.stdout.decode().strip(), "disabled", unit)
        # no enablement symlink of any kind points at a delayq unit
        for root, dirs, files in os.walk("/etc/systemd"):
            for n in dirs + files:
                p = os.path.join(root, n)
                if os.path.islink(p):
                    self.assertFalse(os.path.basename(os.readlink(p)).startswith("delayq"), p)
        self.assertEqual(running_installed_daemons(), [])
        if os.path.isdir("/run/systemd/system"):  # systemd is running: ask it too
            for name, instance in SERVICES:
                unit = name.replace("@", "@%s" % instance) if instance else name
                r = subprocess.run(["systemctl", "is-active", unit], stdout=subprocess.PIPE)
                self.assertEqual(r.stdout.decode().strip(), "inactive", unit)

    def test_4_units_and_include_serve_a_job(self):
        work = tempfile.mkdtemp(prefix="delayq-pkg-run-")
        os.chmod(work, 0o755)  # nginx's workers run as another user
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        redis = RedisServer(work).start()
        self.addCleanup(redis.stop)
        # what an operator does: name the Redis, let callbacks reach loopback
        set_conf(CONF, {"redis_port": redis.port, "push_allow": "*,loopback"})

        daemons = []
        for name, instance in SERVICES:
            service = units.Service(os.path.join(UNIT_DIR, name), instance)
            log_path = os.path.join(work, name + ".log")
            proc = track(service.start(log_path))
            daemons.append((name, service, proc, log_path))
            self.addCleanup(self.stop_daemon, service, proc, log_path)
        nginx, port = start_nginx(work)
        self.addCleanup(stop_process, nginx)
        http = Http(port, timeout=30)
        self.addCleanup(http.close)

        def call(path, body=None):
            status, _, data = http.request("POST" if body is not None else "GET", path,
                                           None if body is None else json.dumps(body).encode())
            return status, json.loads(data)

        deadline = time.monotonic() + 30
        while True:  # until delayq-fcgi listens on the socket the upstream names
            for name, _, proc, log_path in daemons:
                self.assertIsNone(proc.poll(), "%s exited:\n%s" % (name, tail(log_path)))
            status, answer = call("/health")
            if status == 200:
                break
            self.assertLess(time.monotonic(), deadline, "no health: %d %r" % (status, answer))
            time.sleep(0.2)
        self.assertEqual(answer["redis"], "ok")
        uid = pwd.getpwnam(USER).pw_uid
        for name, _, proc, _ in daemons:
            self.assertEqual(proc_uid(proc.pid), uid, name)
        # only nginx's workers (and delayq) reach the socket: any other
        # local user would bypass nginx's allow/deny, limit_req and auth
        self.assertEqual(mode_owner_group(os.path.dirname(SOCKET)), (0o750, USER, NGINX_USER))
        self.assertEqual(mode_owner_group(SOCKET), (0o660, USER, NGINX_USER))
        self.assertEqual(connect_as(NGINX_USER, SOCKET), "ok")
        self.assertEqual(connect_as("nobody", SOCKET), "EACCES")

        # one job: due in 1 s, so only the installed timer makes it ready
        self.assertEqual(call("/add", {"topic": "pkg", "id": "pkg-1", "delay": 1, "ttr": 30,
                                       "body": {"n": 1}}), (200, {"success": True, "id": "pkg-1"}))
        status, popped = call("/pop", {"topic": "pkg", "timeout": 15})
        self.assertEqual((status, popped["id"], popped["value"]), (200, "pkg-1", {"n": 1}), popped)
        self.assertEqual(call("/finish", {"id": "pkg-1"}), (200, {"success": True, "id": "pkg-1"}))
        status, again = call("/finish", {"id": "pkg-1"})
        self.assertEqual((status, again["code"]), (404, "not_found"))

        # a callback, sent by the installed delayq-push
        receiver = Receiver().start()
        self.addCleanup(receiver.stop)
        self.assertEqual(call("/add", {"topic": "pkghook", "id": "pkg-2", "url": receiver.url(),
                                       "body": {"n": 2}})[0], 200)
        hook = receiver.wait_for(lambda reqs: reqs, 30, "the callback")[0]
        self.assertEqual(json.loads(hook.body), {"n": 2})

        # the dashboard, through the installed include
        status, _, page = http.request("GET", "/ui/")
        with open(os.path.join(UI_DIR, "index.html"), "rb") as f:
            self.assertEqual((status, page), (200, f.read()))

        # the installed command line
        self.assertEqual(run(["/usr/bin/delayq", "--url", "http://127.0.0.1:%d" % port, "health"]),
                         "ok (redis ok)\n")

    def stop_daemon(self, service, proc, log_path):
        """As systemd stops the unit: SIGTERM (KillSignal), then its
        runtime directory goes. A clean stop exits 0."""
        killed = stop_process(proc, grace=90)
        service.remove_runtime_dirs()
        self.assertEqual((killed, proc.returncode), (False, 0),
                         "%s did not stop cleanly:\n%s" % (service.argv[0], tail(log_path)))

    def test_5_upgrade_keeps_the_operators_config(self):
        """Installing the package over itself runs the upgrade path of the
        maintainer scripts (prerm, preinst, postinst configure with the old
        version); dpkg keeps the operator's edit of a conffile."""
        set_conf(CONF, {"workers": 3})
        with open(CONF) as f:
            edited = f.read()
        run(APT_GET + ["install", "--reinstall", os.path.abspath(self.deb)], env=APT_ENV,
            timeout=900)
        self.assertEqual(package_state(), "installed")
        with open(CONF) as f:
            self.assertEqual(f.read(), edited)
        self.test_2_system_user_and_config_modes()
        self.test_3_nothing_enabled_nor_started()

    def test_9_purge_removes_everything(self):
        run(APT_GET + ["purge", PACKAGE], env=APT_ENV, timeout=900)
        self.assertIsNone(package_state())
        for path in FILES + ["/etc/delayq", UI_DIR, "/usr/share/doc/delayq", "/run/delayq"]:
            self.assertFalse(os.path.lexists(path), path)
        self.assertEqual(running_installed_daemons(), [])


if __name__ == "__main__":
    stop_on_sigterm()
    unittest.main(verbosity=2)

"""scripts/run as a supervisor.

scripts/run is started from the source tree (already built, so its build
step does nothing) on free ports with a fresh DELAYQ_VAR_DIR. Then, for each
process it supervises (redis, nginx, the delayq-fcgi master, each
delayq-timer), kill -9 by the pid in its pid file and check that the service
answers again within a few seconds, that a job added before the kill can be
popped after it, and that the restart is logged. Then that SIGTERM stops
every process of the run, and (on a second run) that a child exiting 5
times within 30 s stops scripts/run with status 1 and a message naming it.
StopUnderLoad: a signal to scripts/run's whole process group (what Ctrl-C in
a terminal does) under load stops every process, every time, in a bounded
time; and when scripts/run is killed with SIGKILL, its children stop too.

Every process is stopped by pid, also when a test fails or the run is
interrupted (atexit). Loopback only. Standard library only.
"""

import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from dqtest import (SANITIZER_MARKS, SANITIZED, SRC_DIR, VALGRIND, Http, KeepOnFailure,
                    Resp, connect_as, free_cluster_ports, free_port, raw_http, read_text, tail)

RUN = os.path.join(SRC_DIR, "scripts", "run")
TIMERS = ("delayq-timer-1", "delayq-timer-2")
CHILDREN = ("redis", "delayq-fcgi") + TIMERS + ("delayq-push", "nginx")
# What each child's command line shows (its pid file must name one of ours).
PROGRAM = {"redis": "redis-server", "delayq-fcgi": "delayq-fcgi", "nginx": "nginx",
           "delayq-timer-1": "delayq-timer", "delayq-timer-2": "delayq-timer"}
# Make's variables would hand scripts/run's `make` the jobserver of the
# `make check` that runs this test.
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")


def stat(pid):
    """(state, session id) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid):
    """Running (a zombie only waits to be reaped: not alive)."""
    s = stat(pid)
    return s is not None and s[0] != "Z"


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def session_members(sids):
    """Live pids of the processes in any of the sessions sids."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        s = stat(int(entry))
        if s and s[0] != "Z" and s[1] in sids:
            out.append(int(entry))
    return sorted(out)


_LIVE = set()  # runs started and not yet stopped


@atexit.register
def _stop_leftovers():
    for r in list(_LIVE):
        try:
            r.stop(failed=True)
        except Exception as e:  # noqa: BLE001
            print("test_run: stopping a leftover run: %r" % e, file=sys.stderr)


class Run:
    """One scripts/run in the foreground, on free ports, with its own var dir."""

    def __init__(self, args=(), env=None):
        """args: scripts/run's arguments (--cluster); env: more environment
        (DELAYQ_REDIS_CLUSTER for a Redis of another run)."""
        # Short: the FastCGI socket goes to <dir>/run/delayq-fcgi.sock.
        self.dir = tempfile.mkdtemp(prefix="dq-run-")
        self.args = list(args)
        self.env = dict(env or {})
        self.http_port = free_port()
        if "--cluster" in self.args:
            self.redis_port = free_cluster_ports(6)
        else:
            self.redis_port = free_port()
        while self.redis_port == self.http_port:
            self.redis_port = free_port()
        self.out_path = os.path.join(self.dir, "run.out")
        self.proc = None
        self.sessions = set()  # every child pid seen: each leads a session of its own
        self.stopped = False

    # ---------------------------------------------------------------- start

    def start(self, timeout=90.0):
        env = {k: v for k, v in os.environ.items() if k not in MAKE_VARS}
        env.pop("DELAYQ_TIMERS", None)
        env.update(DELAYQ_VAR_DIR=self.dir, DELAYQ_HTTP_PORT=str(self.http_port),
                   DELAYQ_REDIS_PORT=str(self.redis_port))
        env.update(self.env)
        _LIVE.add(self)
        with open(self.out_path, "ab") as out:
            # A session of its own: a Ctrl-C meant for the test reaches it
            # only through _stop_leftovers, which stops it in order. SIGINT
            # at its default, as in a terminal: a test run started in the
            # background of a shell without job control inherits it
            # ignored, and bash cannot trap a signal ignored at its start.
            self.proc = subprocess.Popen([RUN] + self.args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=env, cwd=self.dir,
                                         start_new_session=True,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + timeout
        while "delayq is running at" not in self.output():
            if self.proc.poll() is not None:
                raise AssertionError("scripts/run exited with %s before its banner:\n%s" %
                                     (self.proc.returncode, self.output()[-6000:]))
            if time.monotonic() > deadline:
                raise AssertionError("no banner from scripts/run within %.0f s:\n%s" %
                                     (timeout, self.output()[-6000:]))
            time.sleep(0.1)
        self.pids()  # remember the sessions
        return self

    def output(self):
        return read_text(self.out_path)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    # ---------------------------------------------------------------- pids

    def pid(self, name):
        """The pid in run/NAME.pid, or None (no file: the child is waiting to
        be restarted)."""
        try:
            with open(self.path("run", name + ".pid")) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        self.sessions.add(pid)
        return pid

    def pids(self):
        """Every child's pid (None while it waits to be restarted)."""
        try:
            names = {f[:-4] for f in os.listdir(self.path("run")) if f.endswith(".pid")}
        except OSError:
            names = set()
        return {n: self.pid(n) for n in names | set(CHILDREN)}

    def new_pid(self, name, old, timeout=5.0):
        """Waits for run/NAME.pid to name a live process other than old."""
        deadline = time.monotonic() + timeout
        while True:
            pid = self.pid(name)
            if pid and pid != old and alive(pid):
                return pid
            if self.proc.poll() is not None:
                raise AssertionError("scripts/run exited with %s:\n%s" %
                                     (self.proc.returncode, self.output()[-4000:]))
            if time.monotonic() > deadline:
                raise AssertionError("%s was not restarted within %.0f s (pid file: %s)\n%s" %
                                     (name, timeout, pid, self.output()[-4000:]))
            time.sleep(0.02)

    def kill9(self, name):
        """kill -9 of the pid in its pid file (checked to be ours); returns it."""
        pid = self.pid(name)
        if pid is None or not alive(pid):
            raise AssertionError("%s has no live pid (%s)" % (name, pid))
        if PROGRAM.get(name, "redis-server") not in cmdline(pid):
            raise AssertionError("pid %d of %s is %r" % (pid, name, cmdline(pid)))
        os.kill(pid, signal.SIGKILL)
        return pid

    def members(self):
        """Live processes of every session a child of this run led."""
        return session_members(self.sessions)

    # ---------------------------------------------------------------- HTTP

    def http(self, cmd, timeout=30.0, **fields):
        """POST /cmd on a connection of its own -> (status, parsed body)."""
        st, _, body = raw_http(self.http_port, "POST", "/" + cmd,
                               json.dumps(fields).encode("utf-8"), timeout=timeout)
        try:
            return st, json.loads(body.decode("utf-8"))
        except ValueError:
            return st, body

    def wait_healthy(self, timeout=5.0):
        """Seconds until GET /health answers 200."""
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < timeout:
            try:
                st, _, body = raw_http(self.http_port, "GET", "/health", timeout=2)
                last = (st, body[:200])
                if st == 200:
                    return time.monotonic() - t0
            except OSError as e:
                last = repr(e)
            time.sleep(0.05)
        raise AssertionError("/health did not answer 200 within %.0f s (last: %r)\n%s" %
                             (timeout, last, self.output()[-4000:]))

    # ---------------------------------------------------------------- stop

    def stop(self, failed=False):
        """SIGTERM scripts/run and wait; then SIGKILL, by pid, whatever of
        the run is left (only after a failure). Removes the var dir unless
        failed."""
        if self.stopped:
            return
        self.stopped = True
        _LIVE.discard(self)
        p = self.proc
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                print("test_run: scripts/run (pid %d) ignored SIGTERM for 40 s; SIGKILL" % p.pid,
                      file=sys.stderr)
                p.kill()
                p.wait()
                failed = True
        left = self.members()
        for pid in left:
            print("test_run: pid %d (%s) outlived the run; SIGKILL" % (pid, cmdline(pid)),
                  file=sys.stderr)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if failed or left:
            print("\ntest_run: keeping %s\n---- scripts/run output\n%s" %
                  (self.dir, self.output()[-6000:]), file=sys.stderr)
            log_dir = self.path("log")
            for f in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
                print("---- %s\n%s" % (f, tail(os.path.join(log_dir, f), 30)), file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def sanitizer_reports(self):
        found = []
        for d in (self.path("log"), self.path("nginx")):
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if not os.path.isfile(os.path.join(d, f)):
                    continue  # nginx's temp/ directories
                with open(os.path.join(d, f), "rb") as fh:
                    if any(m in fh.read() for m in SANITIZER_MARKS):
                        found.append(f)
        return found


def skip_reason():
    if VALGRIND:
        return "scripts/run does not run the servers under valgrind; the plain build covers it"
    for b in ("delayq-fcgi", "delayq-timer"):
        if not os.access(os.path.join(SRC_DIR, b), os.X_OK):
            return "the source tree %s is not built (scripts/run would build it)" % SRC_DIR
    return None


class RunTestCase(KeepOnFailure):
    ARGS = ()
    run_ = None

    @classmethod
    def setUpClass(cls):
        reason = skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls._class_failed = False
        cls.run_ = Run(args=cls.ARGS)
        try:
            cls.run_.start()
        except BaseException:
            cls.run_.stop(failed=True)
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.run_:
            r, cls.run_ = cls.run_, None
            r.stop(failed=cls._class_failed)

    def assertNoSanitizerReports(self):
        if SANITIZED:
            self.assertEqual(self.run_.sanitizer_reports(), [], "sanitizer reports in the logs")


class Supervision(RunTestCase):
    """kill -9 of each child: restarted, service back, jobs kept, logged."""

    def add(self, tag, delay=0):
        job = "run-%s-%d" % (tag, os.getpid())
        st, r = self.run_.http("add", topic="run-" + tag, id=job, delay=delay, ttr=30,
                               body={"tag": tag})
        self.assertEqual((st, r.get("success")), (200, True), "add %s: %r" % (job, r))
        return job

    def pop_after(self, tag, job, timeout):
        """Pops the topic's job; 503 (nginx or delayq-fcgi restarting) is retried."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                st, r = self.run_.http("pop", topic="run-" + tag, timeout=5)
            except OSError as e:
                st, r = None, repr(e)
            if st == 200 and r.get("id"):
                break
            self.assertLess(time.monotonic(), deadline,
                            "no pop of %s within %.0f s (last: %s %r)" % (job, timeout, st, r))
            if st != 200:
                time.sleep(0.1)
        self.assertEqual(r["id"], job)
        st, r = self.run_.http("finish", id=job)
        self.assertEqual(st, 200, r)

    def check_kill(self, name, job_delay=0, fsync_wait=0.0, pop_timeout=10.0):
        r = self.run_
        self.assertIsNone(r.proc.poll(), "scripts/run is not running")
        job = self.add(name, job_delay)
        if fsync_wait:
            time.sleep(fsync_wait)
        before = r.pids()
        old = r.kill9(name)
        t0 = time.monotonic()
        new = r.new_pid(name, old)
        restarted = time.monotonic() - t0
        r.wait_healthy(5.0)
        back = time.monotonic() - t0
        self.assertLess(back, 5.0)
        self.pop_after(name, job, pop_timeout)
        popped = time.monotonic() - t0
        print("%s: pid %d killed; pid %d after %.2f s, /health 200 after %.2f s, "
              "job popped after %.2f s" % (name, old, new, restarted, back, popped))
        out = r.output()
        self.assertIn("%s (pid %d) was killed by SIGKILL" % (name, old), out)
        self.assertIn("restarted %s (pid %d)" % (name, new), out)
        for other, pid in before.items():
            if other != name:
                self.assertEqual(r.pid(other), pid, "%s was restarted too" % other)
        self.assertIsNone(r.proc.poll(), "scripts/run exited:\n" + out[-3000:])
        self.last_popped = popped
        return old, new

    def wait_session_gone(self, sid, timeout=5.0):
        """What the killed child forked (workers) exits too."""
        deadline = time.monotonic() + timeout
        while session_members({sid}):
            self.assertLess(time.monotonic(), deadline, "processes of killed pid %d left: %s" %
                            (sid, session_members({sid})))
            time.sleep(0.05)

    def test_a_redis(self):
        redis = Resp(self.run_.redis_port)
        try:
            self.assertEqual(redis("CONFIG", "GET", "appendfsync"), [b"appendfsync", b"everysec"])
        finally:
            redis.close()
        # An acknowledged add is in the AOF after the next fsync (everysec).
        old, _ = self.check_kill("redis", fsync_wait=1.5)
        self.wait_session_gone(old)

    def test_b_nginx(self):
        old, _ = self.check_kill("nginx")
        # Its workers outlive a master killed with -9; scripts/run stops them.
        self.wait_session_gone(old)

    def test_c_socket_for_this_user_only(self):
        """Any other local user who reached delayq-fcgi's socket would get
        past nginx's rules; nginx's workers run as this user."""
        run_dir = os.path.join(self.run_.dir, "run")
        self.assertEqual(os.stat(run_dir).st_mode & 0o777, 0o700)
        sock = os.path.join(run_dir, "delayq-fcgi.sock")
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o660)
        if os.geteuid() == 0:
            self.assertEqual(connect_as("nobody", sock), "EACCES")

    def test_c_fcgi_master(self):
        old, _ = self.check_kill("delayq-fcgi")
        self.wait_session_gone(old)

    def test_d_timers(self):
        # A job due a second after the kill: whichever timer holds its bucket
        # moves it on time. A killed timer comes back with its timer_id and
        # takes its own buckets back at once, without waiting for its lease
        # (5 s) to run out.
        for name in TIMERS:
            with self.subTest(name):
                self.check_kill(name, job_delay=1, pop_timeout=5.0)
                self.assertLess(self.last_popped, 1.0 + 1.0, "the job was late")

    def test_z_sigterm_stops_everything(self):
        r = self.run_
        self.assertIsNone(r.proc.poll(), "scripts/run is not running")
        r.pids()
        everything = r.members()
        self.assertGreaterEqual(len(everything), len(CHILDREN))
        conn = Http(r.http_port, timeout=10)
        try:
            st, _, body = conn.request("GET", "/health")
            self.assertEqual(st, 200, body)
        finally:
            conn.close()
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        rc = r.proc.wait(40)
        print("SIGTERM: scripts/run exited %d after %.2f s" % (rc, time.monotonic() - t0))
        out = r.output()
        self.assertEqual(rc, 143, out[-3000:])
        self.assertEqual([p for p in everything if alive(p)], [], "left running")
        self.assertEqual(r.members(), [], "left running")
        stops = [out.find("stopping %s " % n) for n in reversed(CHILDREN)]
        self.assertTrue(all(i >= 0 for i in stops) and stops == sorted(stops),
                        "stop order (nginx first, redis last):\n" + out[-2000:])
        self.assertEqual(os.listdir(r.path("run")), [], "pid files or socket left")
        self.assertNoSanitizerReports()


class CrashLoop(RunTestCase):
    """A child that keeps exiting stops the run."""

    def test_five_exits_within_30s(self):
        r = self.run_
        name = "delayq-timer-2"
        everything = r.members()
        old = None
        kills = 0
        t0 = time.monotonic()
        for kills in range(1, 6):  # restarted after 0.1, 0.2, 0.4 and 0.8 s
            pid = r.new_pid(name, old)
            os.kill(pid, signal.SIGKILL)
            old = pid
        rc = r.proc.wait(40)
        out = r.output()
        print("%d kills of %s in %.2f s; scripts/run exited %d; its last lines:\n%s" %
              (kills, name, time.monotonic() - t0, rc, "\n".join(out.splitlines()[-25:])))
        self.assertEqual(kills, 5)
        self.assertEqual(rc, 1, out[-3000:])
        self.assertIn("gave up: %s exited 5 times within 30 s" % name, out)
        self.assertIn("----- %s (last 40 lines)" % r.path("log", name + ".log"), out)
        self.assertEqual([p for p in everything if alive(p)], [], "left running")
        self.assertEqual(r.members(), [], "left running")
        self.assertNoSanitizerReports()


class Load:
    """Clients adding and popping on a run until stop(); errors (the run
    stopping under them) are expected and ignored."""

    def __init__(self, port, clients=4):
        self.port = port
        self.done = threading.Event()
        self.answered = 0
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(clients)]
        for t in self.threads:
            t.start()

    def _client(self, i):
        add = json.dumps({"topic": "load", "body": i}).encode()
        pop = json.dumps({"topic": "load", "timeout": 1}).encode()
        while not self.done.is_set():
            for body, cmd in ((add, "/add"), (pop, "/pop")):
                try:
                    st, _, _ = raw_http(self.port, "POST", cmd, body, timeout=3)
                    self.answered += st == 200
                except OSError:
                    time.sleep(0.02)

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(5)


class StopUnderLoad(KeepOnFailure):
    """Stop must always stop. A signal to scripts/run's process group also
    kills the `sleep` that times its supervision loop; bash 5.2 could lose
    that child's exit while the signal interrupted `wait -n`, and a `wait`
    for it in the stop then blocked for good, with every child left running
    (one stop in two, before the fix). And a scripts/run killed with SIGKILL
    left its children running."""

    ROUNDS = [(signal.SIGTERM, 143)] * 6 + [(signal.SIGINT, 130)]  # signal, exit status
    STOP_BOUND = 20.0  # s: a stop takes ~1 s; a child ignoring SIGTERM gets 15 s

    @classmethod
    def setUpClass(cls):
        reason = skip_reason()
        if reason:
            raise unittest.SkipTest(reason)

    def start_loaded(self):
        r = Run()
        try:
            r.start()
        except BaseException:
            r.stop(failed=True)
            raise
        load = Load(r.http_port)
        deadline = time.monotonic() + 10
        while load.answered < 4:  # the load reaches delayq before the signal
            if time.monotonic() > deadline:
                load.stop()
                r.stop(failed=True)
                self.fail("no answers to the load within 10 s")
            time.sleep(0.02)
        return r, load

    def started(self, r):
        """The pids scripts/run started (pid files), all alive."""
        pids = {n: p for n, p in r.pids().items() if p}
        self.assertEqual(sorted(pids), sorted(CHILDREN))
        self.assertEqual([n for n, p in pids.items() if not alive(p)], [])
        return pids

    def wait_gone(self, r, pids, timeout):
        """Seconds until no process of the run is left (the children and
        whatever they forked), or a failure naming what is left."""
        t0 = time.monotonic()
        while True:
            left = sorted(set(r.members()) | {p for p in pids.values() if alive(p)})
            if not left:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                self.fail("left running %.0f s after the signal: %s\n%s" %
                          (timeout, ["%d %s" % (p, cmdline(p)[:60]) for p in left],
                           r.output()[-2000:]))
            time.sleep(0.05)

    def test_a_signal_to_the_group_under_load(self):
        times = []
        for i, (sig, want_rc) in enumerate(self.ROUNDS):
            with self.subTest(round=i, signal=sig.name):
                r, load = self.start_loaded()
                ok = False
                try:
                    pids = self.started(r)
                    time.sleep(random.uniform(0.0, 0.5))  # anywhere in the loop's tick
                    t0 = time.monotonic()
                    os.killpg(r.proc.pid, sig)  # its own session: pgid = its pid
                    try:
                        rc = r.proc.wait(self.STOP_BOUND)
                    except subprocess.TimeoutExpired:
                        # A hung stop; Run.stop kills what is left by pid.
                        r.proc.kill()
                        r.proc.wait()
                        self.fail("round %d: scripts/run did not exit within %.0f s of %s to "
                                  "its group:\n%s" % (i, self.STOP_BOUND, sig.name,
                                                       r.output()[-2000:]))
                    took = time.monotonic() - t0
                    times.append(took)
                    self.assertEqual(rc, want_rc, r.output()[-2000:])
                    self.wait_gone(r, pids, 0.0)
                    self.assertEqual(os.listdir(r.path("run")), [], "pid files or socket left")
                    ok = True
                finally:
                    load.stop()
                    r.stop(failed=not ok)
        print("%d stops under load: %s s" % (len(times), " ".join("%.2f" % t for t in times)))

    def test_b_sigkill_of_scripts_run(self):
        r, load = self.start_loaded()
        ok = False
        try:
            pids = self.started(r)
            os.killpg(r.proc.pid, signal.SIGKILL)  # scripts/run and its sleep
            r.proc.wait(5)
            # Each child got SIGTERM from the kernel (its parent died): Redis
            # writes its AOF, nginx and delayq-fcgi stop their workers.
            took = self.wait_gone(r, pids, self.STOP_BOUND)
            print("SIGKILL of scripts/run: its children gone %.2f s later" % took)
            ok = True
        finally:
            load.stop()
            r.stop(failed=not ok)


class ClusterRun(RunTestCase):
    """scripts/run --cluster: a local 3-master, 3-replica Redis Cluster of
    its own, supervised like the other children; and a second scripts/run
    that starts no Redis and serves against that cluster
    (DELAYQ_REDIS_CLUSTER)."""

    ARGS = ("--cluster",)

    def nodes(self):
        return {n: p for n, p in self.run_.pids().items() if n.startswith("redis-")}

    def test_a_serves_on_its_cluster(self):
        r = self.run_
        nodes = self.nodes()
        self.assertEqual(len(nodes), 6, nodes)
        self.assertIsNone(r.pids()["redis"], "no single Redis beside the cluster")
        info = Resp(r.redis_port)("CLUSTER", "INFO").decode()
        self.assertIn("cluster_state:ok", info)
        self.assertIn("cluster_size:3", info)
        ids = ["c-%d" % i for i in range(60)]
        st, a = r.http("add", jobs=[{"topic": "c", "id": i, "body": i} for i in ids])
        self.assertEqual(st, 200, a)
        holders = set()
        for port in range(r.redis_port, r.redis_port + 6):
            node = Resp(port)
            # Replicas hold copies: count the masters only.
            if node("ROLE")[0] in (b"master", "master") and node("KEYS", "*:j:c-*"):
                holders.add(port)
        self.assertEqual(len(holders), 3, "jobs on every master (shards unset: spread)")
        st, p = r.http("pop", topic="c", count=100)
        self.assertEqual(sorted(j["id"] for j in p["jobs"]), sorted(ids))
        self.assertIn("Redis Cluster on ports %d-%d" % (r.redis_port, r.redis_port + 5),
                      r.output())

    def test_b_another_run_uses_the_cluster(self):
        first = self.run_
        # shards unset: the second run reads the count the first one chose
        second = Run(env={"DELAYQ_REDIS_CLUSTER": "127.0.0.1:%d" % first.redis_port})
        try:
            second.start()
            self.assertFalse([n for n, p in second.pids().items() if n.startswith("redis") and p],
                             "it started a Redis of its own")
            st, a = second.http("add", topic="both", id="both-1", body="x")
            self.assertEqual(st, 200, a)
            st, p = first.http("pop", topic="both")
            self.assertEqual((st, p.get("id")), (200, "both-1"), p)
            self.assertIn("the cluster at 127.0.0.1:%d" % first.redis_port, second.output())
        except BaseException:
            second.stop(failed=True)
            raise
        second.stop()

    def test_c_a_killed_node_is_restarted(self):
        r = self.run_
        name, pid = sorted(self.nodes().items())[0]
        r.kill9(name)
        r.new_pid(name, pid, timeout=10)
        self.assertEqual(r.wait_healthy(30) >= 0, True)
        st, a = r.http("add", topic="after", body=1)
        self.assertEqual(st, 200, a)
        self.assertNoSanitizerReports()


def main():
    # SIGTERM (e.g. a test driver's timeout): exit through _stop_leftovers,
    # which stops the runs this process started.
    def on_term(*_):
        _stop_leftovers()
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()

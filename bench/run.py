#!/usr/bin/env python3
"""delayq benchmarks: one subcommand per workload, or `all` for one run of
everything (figures and ratios measured in the same run).

    bench/run.py [--quick] all|ceiling|w1|w2|w3|w4|w5|w6|w7|beanstalkd|bullmq|bullmq_http [options]
    bench/run.py [--quick] --stack both w1 w2 w3  # also on the stack scripts/run starts
    bench/run.py [--quick] bullmq_http  # BullMQ behind an HTTP front, driven by loadgen
    bench/run.py [--quick] cluster   # batch add, batch drain, W3 on a Cluster vs one Redis (1 and 6 shards)
    bench/run.py [--quick] w3stages  # W3 lateness per stage: timer, ready message, delayq-fcgi
    bench/run.py [--quick] group     # single add and finish-and-pop with group commit on and off
    bench/run.py [--quick] moves     # Redis time of the move function alone, per job
    bench/run.py [--quick] pops      # Redis time per pop: unlimited vs `rate` (and `concurrency`)
    bench/run.py [--quick] adds      # Redis time and commands per job of the add function alone
    bench/run.py [--quick] push      # callbacks/s, due -> POST lateness, pusher CPU
    bench/run.py [--quick] jobs      # a GET /jobs page with 10k and with 1M jobs stored
    bench/run.py [--quick] purge     # purge of 1M jobs: each step's Redis time (SLOWLOG)
    bench/run.py [--quick] keys      # finish-and-pop with and without per-key limits

Each run starts its own redis-server, delayq-fcgi, delayq-timer, nginx (and
the peers: beanstalkd, BullMQ with its own redis-server, and for bullmq_http
bench/peers/bullmq/front.js) in a temp dir on 127.0.0.1, stops them by pid,
and prints one line per figure:

    FIGURE <key> <value> <unit>

`--stack run` runs w1, w2 and w3 against the stack `scripts/run` starts from
--build's checkout instead (`--stack both`: against both), with its defaults
(delayq.conf, Redis with AOF everysec, two timers, the pusher), in a temp
var dir on free ports; its figures are named `delayq_run` beside bench's
`delayq`. scripts/run runs `make` in that checkout and serves its binaries
(not the copies bench's stack takes at start). W3 adds
each job with its own `at` (its due time), so lateness counts from the due
time delayq recorded. bench/w3trace.py follows W3's wake-ups through
delayq-fcgi's system calls.

`--json FILE` also writes every figure as JSON (docs/PERFORMANCE.md and the
plots are made from it by bench/report.py). `--quick` is the smoke profile
(small counts); the default is the full profile.

Builds: the delayq binaries come from the top directory (make there first);
bench/loadgen and bench/ceiling/ceiling-fcgi are built by `make -C bench`.
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# A tool, not a test module: it finds the shared test package itself.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
TOP = os.path.dirname(HERE)
from dqtest import Resp, free_port, read_text  # noqa: E402
from dqtest.redis_cluster import RedisCluster  # noqa: E402

# The idle backend connections per nginx worker that delayq ships with.
SHIPPED_KEEPALIVE = int(re.search(r"\bkeepalive (\d+);",
                                  open(os.path.join(TOP, "nginx", "delayq-upstream.conf")).read()).group(1))

LOADGEN = os.path.join(HERE, "loadgen")
# The delayq binaries are copied here at start, so that a rebuild in the
# tree during a run cannot mix two versions in one set of figures.
BIN_DIR = TOP
CEILING = os.path.join(HERE, "ceiling", "ceiling-fcgi")
BULLMQ_DIR = os.path.join(HERE, "peers", "bullmq")
CLK_TCK = os.sysconf("SC_CLK_TCK")

FULL = dict(w1_jobs=100000, w2_jobs=50000, w3_jobs=10000, w3_spread=10, big=1000000,
            idle_s=30, idle_settle_s=33, w7_base=10000000, ceil_reqs=100000, tune_jobs=40000,
            jobs_small=10000, jobs_big=1000000, purge_jobs=1000000)
QUICK = dict(w1_jobs=10000, w2_jobs=5000, w3_jobs=2000, w3_spread=4, big=100000,
             idle_s=5, idle_settle_s=3, w7_base=100000, ceil_reqs=10000, tune_jobs=5000,
             jobs_small=10000, jobs_big=100000, purge_jobs=100000)

FIGS = {}
LOADS = {}  # workload -> (1-min load average at its start, at its end)
ARGS = None


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def timed(name, fn, *a):
    """Runs one workload, noting the machine's load average around it (other
    work on a shared machine shows up there)."""
    l0 = loadavg()
    try:
        return fn(*a)
    finally:
        LOADS[name] = (l0, loadavg())
        note("%s: load average %.2f -> %.2f" % (name, l0, LOADS[name][1]))


def fig(key, value, unit=""):
    FIGS[key] = {"value": value, "unit": unit}
    if isinstance(value, float):
        v = "%.4g" % value if abs(value) < 1000 else "%.0f" % value
    else:
        v = str(value)
    print("FIGURE %s %s %s" % (key, v, unit), flush=True)


def note(msg):
    print("# " + msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def cpu_seconds(pid):
    """CPU time of a process (all its live threads), in seconds: the sum of
    /proc/<pid>/task/*/schedstat run times (nanoseconds), or utime + stime
    from /proc/<pid>/stat (10 ms ticks) where schedstat is missing."""
    try:
        total = 0
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid):
    kids = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def tree_cpu(pid):
    return cpu_seconds(pid) + sum(cpu_seconds(k) for k in children(pid))


def wait_port(port, proc, what, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("%s did not listen on %d" % (what, port))


class RedisOfStack:
    """A stack's Redis (self.redis_port, self._r: its connection once made):
    commands, a flush between workloads, a topic's counter."""

    def redis(self, *args):
        if self._r is None:
            self._r = Resp(self.redis_port, timeout=60)
        return self._r(*args)

    def flush(self):
        self.redis("FLUSHALL")

    def stat(self, topic, field):
        v = self.redis("HGET", "{dq}:s:%s" % topic, field)
        return int(v) if v else 0


class Stack(RedisOfStack):
    """redis-server + delayq-fcgi + delayq-timer(s) + nginx (with a static
    `return 200` location and the one-EVALSHA ceiling backend) in a temp dir."""

    def __init__(self, workers=4, threads=32, timers=1, redis_unix=False, nginx_workers=2,
                 keepalive=None, with_ceiling=True, group_commit=None):
        self.workers, self.threads = workers, threads
        self.group_commit = group_commit  # None: the shipped default
        self.n_timers = timers
        self.redis_unix = redis_unix
        self.nginx_workers = nginx_workers
        self.keepalive = SHIPPED_KEEPALIVE if keepalive is None else keepalive
        self.with_ceiling = with_ceiling
        self.dir = tempfile.mkdtemp(prefix="delayq-bench-")
        os.chmod(self.dir, 0o755)
        self.procs = []
        self.timers = []
        self.redis_port = free_port()
        self.http_port = free_port()
        self.redis_sock = os.path.join(self.dir, "redis.sock")
        self._r = None

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def popen(self, argv, log):
        out = open(self.path(log), "ab")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, cwd=self.dir,
                                 preexec_fn=lambda: os.umask(0))
        finally:
            out.close()
        self.procs.append(p)
        return p

    def start(self):
        self.start_redis()
        self.fcgi = self.popen(self.fcgi_argv(), "fcgi.log")
        for _ in range(self.n_timers):
            self.start_timer()
        if self.with_ceiling:
            argv = [CEILING, "--listen", self.path("ceil.sock"), "--workers", str(self.workers),
                    "--threads", str(self.threads)]
            argv += (["--redis-socket", self.redis_sock] if self.redis_unix
                     else ["--redis-port", str(self.redis_port)])
            self.ceiling = self.popen(argv, "ceiling.log")
        self.start_nginx()
        self.wait_healthy()
        return self

    def redis_argv(self, extra=()):
        argv = ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--appendonly", "no", "--daemonize", "no"]
        if self.redis_unix:
            argv += ["--unixsocket", self.redis_sock, "--unixsocketperm", "777"]
        return argv + list(extra)

    def start_redis(self):
        self.redis_proc = self.popen(self.redis_argv(), "redis.log")
        wait_port(self.redis_port, self.redis_proc, "redis-server")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if Resp(self.redis_port)("PING") == "PONG":
                    return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("redis did not answer PING")

    def redis_flags(self):
        if self.redis_unix:
            return ["--redis-socket=%s" % self.redis_sock]
        return ["--redis-port=%d" % self.redis_port]

    def fcgi_argv(self):
        return ["%s/delayq-fcgi" % BIN_DIR, "--listen=%s" % self.path("fcgi.sock"),
                "--workers=%d" % self.workers, "--threads=%d" % self.threads, "--prefix=dq",
                "--log-level=warn", "--push-allow=*,loopback"] + self.redis_flags() + (
                    ["--group-commit=%d" % self.group_commit] if self.group_commit else [])

    def start_pusher(self, **flags):
        argv = ["%s/delayq-push" % BIN_DIR, "--prefix=dq", "--log-level=warn",
                "--push-allow=*,loopback"] + self.redis_flags()
        argv += ["--%s=%s" % (k.replace("_", "-"), v) for k, v in flags.items()]
        self.pusher = self.popen(argv, "push.log")
        return self.pusher

    def start_timer(self):
        p = self.popen(["%s/delayq-timer" % BIN_DIR, "--prefix=dq", "--log-level=warn"] +
                       self.redis_flags(), "timer%d.log" % len(self.timers))
        self.timers.append(p)
        return p

    def timer_pids(self):
        return [p.pid for p in self.timers]

    def stop_timers(self):
        for p in self.timers:
            stop_proc(p)
        self.timers = []

    def start_nginx(self):
        nd = self.path("nginx")
        subprocess.run([os.path.join(TOP, "scripts", "nginx-conf"), "--dir", nd, "--port",
                        str(self.http_port), "--backend", "unix:%s" % self.path("fcgi.sock")],
                       check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(nd, "nginx.conf")
        text = open(conf).read()
        text = text.replace("worker_processes 2;", "worker_processes %d;" % self.nginx_workers)
        text = text.replace("access_log %s/access.log;" % nd, "access_log off;")
        up = open(os.path.join(nd, "delayq-upstream.conf")).read()
        up = re.sub(r"\bkeepalive \d+;", "keepalive %d;" % self.keepalive, up)
        open(os.path.join(nd, "delayq-upstream.conf"), "w").write(up)
        extra_http = ""
        extra_loc = ("    location = /static {\n        default_type application/json;\n"
                     "        return 200 '{\"success\":true}';\n    }\n")
        if self.with_ceiling:
            # The ceiling gets the same FastCGI settings as delayq's location /.
            loc = open(os.path.join(nd, "delayq-locations.conf")).read()
            start = loc.index("location / {")
            block = loc[start:loc.index("\n}\n", start) + 2]
            block = block.replace("location / {", "location /ceil/ {")
            block = block.replace("fastcgi_pass delayq_backends;", "fastcgi_pass ceiling_backends;")
            extra_loc += block + "\n"
            extra_http = ("    upstream ceiling_backends {\n        server unix:%s;\n"
                          "        keepalive %d;\n        keepalive_timeout 30s;\n    }\n"
                          % (self.path("ceil.sock"), self.keepalive))
        inc = "include %s/delayq-locations.conf;" % nd
        text = text.replace(inc, inc + "\n" + extra_loc)
        upinc = "include %s/delayq-upstream.conf;" % nd
        text = text.replace(upinc, upinc + "\n" + extra_http)
        # Long benchmark connections: do not close them every 1000 requests.
        text = text.replace("keepalive_timeout 75s;", "keepalive_timeout 75s;\n    keepalive_requests 1000000;")
        open(conf, "w").write(text)
        self.nginx = self.popen(["nginx", "-p", nd, "-c", conf, "-e", os.path.join(nd, "error.log"),
                                 "-g", "daemon off;"], "nginx.log")
        wait_port(self.http_port, self.nginx, "nginx")

    def wait_healthy(self, timeout=15):
        import http.client
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=2)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("delayq /health did not answer 200; see %s" % self.dir)


    def used_memory(self):
        info = self.redis("INFO", "memory").decode()
        for line in info.splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":")[1])
        return 0


    def stop(self):
        if self._r:
            self._r.close()
        for p in reversed(self.procs):
            stop_proc(p)
        if ARGS and ARGS.keep:
            note("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class ClusterStack(Stack):
    """The same stack on a local Redis Cluster: 3 masters with a replica
    each (no AOF, like Stack's Redis), delayq with shards = 6."""

    SHARDS = 6

    def __init__(self, shards=SHARDS, **kw):
        super().__init__(redis_unix=False, with_ceiling=False, **kw)
        self.cluster = None
        self.shards = shards

    def start_redis(self):
        self.cluster = RedisCluster(self.dir, masters=3, replicas=1,
                                    args=["--appendonly", "no", "--save", ""]).start()

    def redis_flags(self):
        return ["--redis-cluster=%s" % self.cluster.seeds, "--shards=%d" % self.shards]

    def redis(self, *args):
        return self.cluster(*args)

    def used_memory(self):
        return sum(int(re.search(rb"used_memory:(\d+)", m("INFO", "memory")).group(1))
                   for m in self.cluster.masters())

    def stat(self, topic, field):
        tags = ["{dq}"] if self.shards == 1 else ["{dq:%d}" % i for i in range(self.shards)]
        return sum(int(self.cluster("HGET", "%s:s:%s" % (tag, topic), field) or 0) for tag in tags)

    def redis_pids(self):
        """(masters, replicas) pids."""
        masters = self.cluster.masters()
        return ([m.proc.pid for m in masters],
                [r.proc.pid for r in self.cluster.servers if r not in masters])

    def stop(self):
        procs, self.procs = self.procs, []
        for p in reversed(procs):
            stop_proc(p)
        self.cluster.stop()
        super().stop()


class RunStack(RedisOfStack):
    """The stack `scripts/run` starts, as a new user gets it (delayq.conf,
    Redis with AOF everysec, two timers, the pusher, the shipped nginx
    config), from --build's checkout, with its own var dir and free ports.
    It runs in a session of its own with SIGINT at its default (as in a
    terminal); stop() sends SIGTERM to that process group, which scripts/run
    stops in order (nginx first, Redis last)."""

    TIMERS = ("delayq-timer-1", "delayq-timer-2")
    # Settings meant for scripts/run's own environment only: the bench gives
    # it the defaults (a `make` jobserver, a user's DELAYQ_* choices).
    DROP_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")

    def __init__(self):
        # Short: the FastCGI socket goes to <dir>/run/delayq-fcgi.sock.
        self.dir = tempfile.mkdtemp(prefix="dq-brun-")
        self.http_port = free_port()
        self.redis_port = free_port()
        while self.redis_port == self.http_port:
            self.redis_port = free_port()
        self.out_path = os.path.join(self.dir, "run.out")
        self.proc = None
        self._r = None

    def output(self):
        return read_text(self.out_path)

    def start(self, timeout=300):
        env = {k: v for k, v in os.environ.items()
               if k not in self.DROP_ENV and not k.startswith("DELAYQ_")}
        env.update(DELAYQ_VAR_DIR=self.dir, DELAYQ_HTTP_PORT=str(self.http_port),
                   DELAYQ_REDIS_PORT=str(self.redis_port))
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(
                [os.path.join(ARGS.build, "scripts", "run")], stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.dir,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + timeout  # it runs `make` first
        while "delayq is running at" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("scripts/run did not start (exit %s):\n%s"
                                   % (self.proc.returncode, self.output()[-3000:]))
            time.sleep(0.1)
        return self

    def pid(self, name):
        with open(os.path.join(self.dir, "run", name + ".pid")) as f:
            return int(f.read().strip())

    def timer_pids(self):
        return [self.pid(n) for n in self.TIMERS]

    def redis_pid(self):
        return self.pid("redis")



    def stop(self):
        if self._r:
            self._r.close()
            self._r = None
        p = self.proc
        if p and p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)  # its own session: pgid == pid
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                note("scripts/run (pid %d) ignored SIGTERM for 60 s; SIGKILL to its group" % p.pid)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if ARGS and ARGS.keep:
            note("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def stop_proc(p, grace=20):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def loadgen(port, mode, **kw):
    argv = [LOADGEN, "--mode", mode, "--port", str(port)]
    for k, v in kw.items():
        k = "--" + k.replace("_", "-")
        if v is True:
            argv.append(k)
        elif v is not None and v is not False:
            argv += [k, str(v)]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("loadgen failed: %s\n%s" % (" ".join(argv), r.stderr.decode()))
    err = r.stderr.decode().strip()
    if err:
        note("loadgen: " + err[:400])
    out = {}
    for tok in r.stdout.decode().split():
        k, _, v = tok.partition("=")
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    note("%s -> %s" % (" ".join(argv[1:]), r.stdout.decode().strip()))
    return out


# --------------------------------------------------------------------------
# delayq workloads
# --------------------------------------------------------------------------

def ceiling(s, P):
    n = P["ceil_reqs"]
    r = loadgen(s.http_port, "fixed", conns=32, jobs=n, method="GET", path="/static")
    fig("ceiling.static200.req_s", r["req_per_s"], "req/s")
    body = json.dumps({"topic": "w1", "id": "ceil-0000001", "delay": 1800.5, "ttr": 60,
                       "body": "x" * 198})
    r = loadgen(s.http_port, "fixed", conns=32, jobs=n, method="POST", path="/ceil/add", body=body)
    fig("ceiling.evalsha.req_s", r["req_per_s"], "req/s")


def w1(s, P, prefix="w1", topic="w1", who="delayq"):
    """who: the name of the stack in the figures (delayq: bench's Stack,
    delayq_run: the stack scripts/run starts)."""
    n = P["w1_jobs"]
    s.flush()
    r = loadgen(s.http_port, "add", conns=32, jobs=n, delay_min=600, delay_max=3600, ttr=60,
                body_size=200, topic=topic, tag="a")
    fig("%s.%s.add.jobs_s" % (prefix, who), r["jobs_per_s"], "jobs/s")
    fig("%s.%s.add.p99_ms" % (prefix, who), r["req_p99_ms"], "ms")
    check_errors(r, "w1 single")
    s.flush()
    r = loadgen(s.http_port, "add", conns=32, jobs=n, batch=100, delay_min=600, delay_max=3600,
                ttr=60, body_size=200, topic=topic, tag="b")
    fig("%s.%s.add_batch100.jobs_s" % (prefix, who), r["jobs_per_s"], "jobs/s")
    check_errors(r, "w1 batch")
    s.flush()


def check_errors(r, what):
    if r.get("errors", 0):
        note("WARNING: %s had %d errors" % (what, r["errors"]))


def preload_ready(s, n, topic, tag):
    r = loadgen(s.http_port, "add", conns=8, jobs=n, batch=500, delay_min=0, delay_max=0,
                ttr=60, body_size=200, topic=topic, tag=tag)
    check_errors(r, "preload")
    ready = s.stat(topic, "ready")
    if ready != n:
        note("WARNING: preloaded %d ready jobs, wanted %d" % (ready, n))


def w2(s, P, who="delayq"):
    n = P["w2_jobs"]
    s.flush()
    preload_ready(s, n, "w2", "p")
    r = loadgen(s.http_port, "drain", conns=32, jobs=n, topic="w2")
    fig("w2.%s.drain.jobs_s" % who, r["jobs_per_s"], "jobs/s")
    fig("w2.%s.drain.req_s" % who, r["req_per_s"], "req/s")
    check_errors(r, "w2 single")
    s.flush()
    # finish-and-pop: each pop finishes the job before it, one request per job
    preload_ready(s, n, "w2", "f")
    r = loadgen(s.http_port, "drain", conns=32, jobs=n, topic="w2", finish_and_pop=True)
    fig("w2.%s.drain_fap.jobs_s" % who, r["jobs_per_s"], "jobs/s")
    fig("w2.%s.drain_fap.req_s" % who, r["req_per_s"], "req/s")
    check_errors(r, "w2 finish-and-pop")
    if s.stat("w2", "reserved") or s.stat("w2", "ready"):
        note("WARNING: finish-and-pop drain left jobs: reserved %d, ready %d"
             % (s.stat("w2", "reserved"), s.stat("w2", "ready")))
    s.flush()
    preload_ready(s, n, "w2", "q")
    r = loadgen(s.http_port, "drain", conns=32, jobs=n, topic="w2", count=100, batch_finish=True)
    fig("w2.%s.drain_count100.jobs_s" % who, r["jobs_per_s"], "jobs/s")
    check_errors(r, "w2 batch")
    s.flush()


def post_json(port, path, obj):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", path, json.dumps(obj))
        r = c.getresponse()
        answer = json.loads(r.read())
    finally:
        c.close()
    if r.status != 200 or not answer.get("success"):
        raise RuntimeError("%s: %s %r" % (path, r.status, answer))
    return answer


def keys(s, P):
    """The cost of per-key limits on pop: finish-and-pop drains of one
    topic whose jobs have 1000 keys (in turn), without a policy, with a
    key_concurrency it never reaches (the counting alone), and with serial
    keys (key_concurrency 1: consumers meet busy keys and set jobs aside)."""
    n = P["w2_jobs"]
    for name, limit in (("unlimited", None), ("key_concurrency_1000", 1000), ("serial", 1)):
        s.flush()
        if limit:
            post_json(s.http_port, "/policy", {"topic": "wk", "key_concurrency": limit})
        for i in range(0, n, 1000):
            post_json(s.http_port, "/add", {"jobs": [
                {"topic": "wk", "body": "x" * 200, "ttr": 60, "key": "k%d" % ((i + j) % 1000)}
                for j in range(min(1000, n - i))]})
        c0 = script_calls(commandstats(s))
        r = loadgen(s.http_port, "drain", conns=32, jobs=n, topic="wk", finish_and_pop=True)
        c1 = script_calls(commandstats(s))
        fig("keys.%s.drain_fap.jobs_s" % name, r["jobs_per_s"], "jobs/s")
        # Redis time per function call (finish-and-pop: one call per job)
        calls = c1[0] - c0[0]
        fig("keys.%s.redis_us_per_call" % name, (c1[1] - c0[1]) / calls if calls else 0, "us")
        if r.get("jobs", n) < n:
            note("WARNING: keys %s drained %d of %d jobs" % (name, r["jobs"], n))
        check_errors(r, "keys " + name)
    s.flush()


def late_figs(name, r):
    fig("w3.%s.late_p50_ms" % name, r["late_p50_ms"], "ms")
    fig("w3.%s.late_p99_ms" % name, r["late_p99_ms"], "ms")
    fig("w3.%s.late_max_ms" % name, r["late_max_ms"], "ms")
    fig("w3.%s.missed" % name, int(r["missed"]), "jobs")


def w3(s, P, outdir, who="delayq"):
    """Lateness: each job is added with its own `at` (the due time its body
    carries), so that it counts from the due time delayq recorded, not
    from when the load generator sent the add."""
    s.flush()
    time.sleep(2)  # the timer takes its bucket locks again after the flush
    timers = s.timer_pids()
    c0 = sum(cpu_seconds(t) for t in timers)
    r = loadgen(s.http_port, "late", conns=20, producers=4, jobs=P["w3_jobs"], spread=P["w3_spread"],
                delay_min=2, ttr=60, topic="w3", tag="l", finish_and_pop=True, late_at=True,
                lateness_out=os.path.join(outdir, "lateness-%s.txt" % who))
    late_figs(who, r)
    fig("w3.%s.timer_cpu_s" % who, sum(cpu_seconds(t) for t in timers) - c0, "CPU-s")
    s.flush()


class ReadyWatcher(threading.Thread):
    """One more subscriber of delayq's ready messages (`P:ready`, sharded
    pub/sub), as a worker's subscriber thread gets them: notes when each
    arrived (realtime ms) with the time of the move call that published it
    (ms, after the `@`) and its count, for the topic given."""

    def __init__(self, port, topic, prefix="{dq}"):
        super().__init__(daemon=True)
        self.r = Resp(port, timeout=None)
        self.r("SSUBSCRIBE", prefix + ":ready")
        self.topic = topic.encode()
        self.seen = []  # (arrived_ms, call_ms, count)

    def run(self):
        try:
            while True:
                m = self.r._reply()  # pushes: ["smessage", channel, payload]
                t = time.time() * 1000.0
                text, _, msg_id = m[2].partition(b"\0")
                count, _, topic = text.partition(b":")
                if topic == self.topic:
                    self.seen.append((t, int(msg_id.rpartition(b"@")[2]), int(count)))
        except (OSError, ConnectionError, TypeError, IndexError):
            return  # closed by stop()

    def stop(self):
        self.r.close()


def w3_stages(P, outdir):
    """W3 lateness taken apart, per job (jobs added with their own `at`):
    timer = the move call's time - the due time (ms resolution: Redis'
    clock in the message); deliver = a subscriber's receipt of the ready
    message - the move call's time; fcgi = the consumer's receipt of the job
    - the subscriber's receipt (delayq-fcgi's subscriber thread, wake-up
    table, eventfd, request thread, pop, answer through nginx). On bench's
    stack with --workers (every worker's subscriber gets every message),
    with one worker, and on a Cluster with --workers, in one run. A job is
    matched with the first move of its own shard at or after its due time."""
    import bisect
    import zlib
    passes = [("workers%d" % w, Stack, dict(workers=w, with_ceiling=False))
              for w in sorted({ARGS.workers, 1}, reverse=True)]
    passes.append(("cluster", ClusterStack, dict(workers=ARGS.workers, shards=ARGS.cluster_shards)))
    for name, cls, kw in passes:
        s = cls(threads=ARGS.threads, nginx_workers=ARGS.nginx_workers, keepalive=ARGS.keepalive, **kw)
        try:
            s.start()
            time.sleep(2)  # the timer takes its bucket locks
            shards = getattr(s, "shards", 1)
            if shards == 1:
                watches = [ReadyWatcher(s.redis_port, "w3")]
            else:
                watches = [ReadyWatcher(s.cluster.master_of("{dq:%d}" % k).port, "w3",
                                        prefix="{dq:%d}" % k) for k in range(shards)]
            for w in watches:
                w.start()
            jobs_out = os.path.join(outdir, "w3-jobs-%s.txt" % name)
            cpu0 = tree_cpu(s.fcgi.pid)
            r = loadgen(s.http_port, "late", conns=20, producers=4, jobs=P["w3_jobs"],
                        spread=P["w3_spread"], delay_min=2, ttr=60, topic="w3", tag="l",
                        finish_and_pop=True, late_at=True, jobs_out=jobs_out)
            # delayq-fcgi's CPU (every worker's subscriber gets every message)
            fig("w3.stages.%s.fcgi_cpu_us_per_job" % name,
                (tree_cpu(s.fcgi.pid) - cpu0) * 1e6 / max(1, r["received"]), "us")
            for w in watches:
                w.stop()
            late_figs("stages.%s" % name, r)
            msgs = [sorted(w.seen, key=lambda m: m[1]) for w in watches]
            calls = [[m[1] for m in ms] for ms in msgs]
            stages = {"timer": [], "deliver": [], "fcgi": []}
            per_job = open(os.path.join(outdir, "w3-stages-%s.txt" % name), "w")
            per_job.write("# index late_ms timer_ms deliver_ms fcgi_ms\n")
            for line in open(jobs_out):
                index, due, got = line.split()
                due, got = float(due), float(got)
                k = zlib.crc32(b"l-" + index.encode()) % shards  # the job's shard (its id's)
                j = bisect.bisect_left(calls[k], due)  # its shard's first move at or after due
                if j == len(calls[k]):
                    continue
                arrived, call, _ = msgs[k][j]
                stages["timer"].append(call - due)
                stages["deliver"].append(arrived - call)
                stages["fcgi"].append(got - arrived)
                per_job.write("%s %.3f %.3f %.3f %.3f\n" % (index, got - due, call - due,
                                                           arrived - call, got - arrived))
            per_job.close()
            for stage, xs in stages.items():
                for q, label in ((0.5, "p50"), (0.99, "p99"), (1.0, "max")):
                    fig("w3.stages.%s.%s.%s_ms" % (name, stage, label), pctl(xs, q), "ms")
            fig("w3.stages.%s.messages_per_job" % name,
                sum(len(ms) for ms in msgs) / max(1, r["received"]), "msgs")
        finally:
            s.stop()


def redis_cpu(s):
    """CPU seconds of Redis: [per master], [per replica]."""
    if isinstance(s, ClusterStack):
        masters, replicas = s.redis_pids()
    else:
        masters, replicas = [s.redis_proc.pid], []
    return [cpu_seconds(p) for p in masters], [cpu_seconds(p) for p in replicas]


def masters_commandstats(s):
    """INFO commandstats of each master."""
    nodes = ([s.cluster.client(m.port) for m in s.cluster.masters()]
             if isinstance(s, ClusterStack) else [s.redis])
    return [commandstats_of(node) for node in nodes]


def calls_and_messages(s):
    """(Redis function calls (FCALL, FCALL_RO), messages published by them
    (SPUBLISH: ready messages, wake-ups)) so far, over the masters."""
    stats = masters_commandstats(s)
    return (sum(script_calls(cs)[0] for cs in stats),
            sum(cs.get("spublish", (0, 0.0))[0] for cs in stats))


def w3_cpu_parts(s):
    """{part: CPU seconds so far} of a stack's processes, for W3's CPU per
    job: nginx, delayq-fcgi, the timers, Redis' masters and replicas."""
    return {"nginx": lambda: tree_cpu(s.nginx.pid),
            "fcgi": lambda: tree_cpu(s.fcgi.pid),
            "timer": lambda: sum(cpu_seconds(p) for p in s.timer_pids()),
            "redis_masters": lambda: sum(redis_cpu(s)[0]),
            "redis_replicas": lambda: sum(redis_cpu(s)[1])}


class ShardedStack(Stack):
    """Bench's stack on one Redis with several shards (as many as the
    Cluster's): delayq's multi-shard path (shard hints, a finish and a pop
    as two calls, counts) without the Cluster's several redis-servers."""

    def __init__(self, shards=ClusterStack.SHARDS, **kw):
        super().__init__(with_ceiling=False, **kw)
        self.shards = shards

    def redis_flags(self):
        return super().redis_flags() + ["--shards=%d" % self.shards]

    def stat(self, topic, field):
        return sum(int(self.redis("HGET", "{dq:%d}:s:%s" % (k, topic), field) or 0)
                   for k in range(self.shards))


def cluster_vs_single(P, outdir):
    """Batch add, batch drain and W3 lateness on one Redis (shards = 1), on
    one Redis with the Cluster's shards (which tells delayq's multi-shard
    path from the Cluster's own cost), and on a 3-master Cluster with a
    replica each (shards = 6, or --cluster-shards), one after the other in
    one run, with Redis' CPU per job: summed over the masters, on the
    busiest master, and on the replicas; and per W3 job the CPU of each process,
    the function calls and the messages they publish (SPUBLISH)."""
    for name, cls in (("single", Stack), ("sharded", ShardedStack), ("cluster", ClusterStack)):
        kw = dict(workers=ARGS.workers, threads=ARGS.threads, nginx_workers=ARGS.nginx_workers,
                  keepalive=ARGS.keepalive)
        if cls is Stack:
            kw["with_ceiling"] = False
        else:
            kw["shards"] = ARGS.cluster_shards
        s = cls(**kw)
        try:
            s.start()
            n = P["w1_jobs"]

            def measured(phase, fn):
                m0, r0 = redis_cpu(s)
                r = fn()
                m1, r1 = redis_cpu(s)
                per_master = [(b - a) * 1e6 / n for a, b in zip(m0, m1)]
                fig("cluster.%s.%s.jobs_s" % (name, phase), r["jobs_per_s"], "jobs/s")
                fig("cluster.%s.%s.redis_cpu_us_per_job" % (name, phase), sum(per_master), "us")
                fig("cluster.%s.%s.busiest_master_cpu_us_per_job" % (name, phase),
                    max(per_master), "us")
                if r0:
                    fig("cluster.%s.%s.replica_cpu_us_per_job" % (name, phase),
                        sum(b - a for a, b in zip(r0, r1)) * 1e6 / n, "us")
                check_errors(r, "%s %s" % (name, phase))

            s.flush()
            measured("add_batch100", lambda: loadgen(
                s.http_port, "add", conns=32, jobs=n, batch=100, delay_min=0, delay_max=0,
                ttr=60, body_size=200, topic="cb", tag="a"))
            ready = s.stat("cb", "ready")
            if ready != n:
                note("WARNING: %s: %d ready after the adds, wanted %d" % (name, ready, n))
            measured("drain_count100", lambda: loadgen(
                s.http_port, "drain", conns=32, jobs=n, topic="cb", count=100, batch_finish=True))
            s.flush()
            time.sleep(2)  # the timer takes its bucket locks again after the flush
            parts = w3_cpu_parts(s)
            cpu0 = {k: f() for k, f in parts.items()}
            calls0 = calls_and_messages(s)
            r = loadgen(s.http_port, "late", conns=20, producers=4, jobs=P["w3_jobs"],
                        spread=P["w3_spread"], delay_min=2, ttr=60, topic="w3", tag="l",
                        finish_and_pop=True, late_at=True,
                        lateness_out=os.path.join(outdir, "lateness-%s.txt" % name))
            for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"):
                fig("cluster.%s.w3.%s" % (name, k), r[k], "ms")
            for k, f in parts.items():
                fig("cluster.%s.w3.%s_cpu_us_per_job" % (name, k),
                    (f() - cpu0[k]) * 1e6 / max(1, r["received"]), "us")
            calls1 = calls_and_messages(s)
            fig("cluster.%s.w3.function_calls_per_job" % name,
                (calls1[0] - calls0[0]) / max(1, r["received"]), "calls")
            fig("cluster.%s.w3.published_per_job" % name,
                (calls1[1] - calls0[1]) / max(1, r["received"]), "messages")
            fig("cluster.%s.w3.missed" % name, int(r["missed"]), "jobs")
        finally:
            s.stop()


class PushReceiver:
    """A fast local receiver for callbacks: nginx answering 204, logging
    `$msec $http_webhook_id` per request (arrival time, the job's id)."""

    def __init__(self, workers=1):
        self.dir = tempfile.mkdtemp(prefix="delayq-bench-rx-")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.log = os.path.join(self.dir, "arrivals.log")
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("worker_processes %d;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
                    "events { worker_connections 1024; }\nhttp {\n"
                    "  log_format arrivals '$msec $http_webhook_id';\n"
                    "  access_log %s arrivals;\n  client_body_temp_path %s;\n"
                    "  server {\n    listen 127.0.0.1:%d;\n    keepalive_requests 1000000;\n"
                    "    location / { return 204; }\n  }\n}\n"
                    % (workers, self.dir, self.dir, self.log, self.dir, self.port))
        out = open(os.path.join(self.dir, "nginx.out"), "ab")
        self.proc = subprocess.Popen(["nginx", "-p", self.dir, "-c", conf, "-e",
                                      os.path.join(self.dir, "error.log"), "-g", "daemon off;"],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        wait_port(self.port, self.proc, "receiver nginx")

    def url(self):
        return "http://127.0.0.1:%d/hook" % self.port

    def arrivals(self):
        """{webhook-id: first arrival, Unix ms}"""
        out = {}
        try:
            with open(self.log) as f:
                for line in f:
                    t, _, wid = line.strip().partition(" ")
                    if wid and wid not in out:
                        out[wid] = float(t) * 1000.0
        except OSError:
            pass
        return out

    def stop(self):
        stop_proc(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def add_callbacks(s, ids_at, url, conns=4):
    """Adds callback jobs {id: due Unix ms} in batches of 1000 over a few
    connections at once."""
    import http.client
    import threading
    items = list(ids_at.items())
    chunks = [items[i:i + 1000] for i in range(0, len(items), 1000)]
    errors = []

    def run(part):
        c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=60)
        for chunk in part:
            body = json.dumps({"jobs": [{"topic": "push", "id": i, "at": at / 1000.0, "url": url,
                                         "body": {"n": i}} for i, at in chunk]})
            c.request("POST", "/add", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200 or b'"success":false' in data:
                errors.append(data[:200])
        c.close()
    threads = [threading.Thread(target=run, args=(chunks[k::conns],)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        note("WARNING: %d add batches failed: %r" % (len(errors), errors[:2]))


def wait_arrivals(rx, n, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = rx.arrivals()
        if len(got) >= n:
            return got
        time.sleep(0.2)
    return rx.arrivals()


def pctl(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def push(P):
    """Callbacks to a local nginx answering 204: (1) a burst, every job due
    at the same instant: callbacks/s from the due time to the last arrival,
    and the pusher's CPU per callback; (2) paced jobs (due times spread
    evenly): lateness from the due time to the POST's arrival; (3) an idle
    pusher's CPU."""
    n_burst = P["w1_jobs"] // 5
    n_paced, spread = P["w3_jobs"] // 2, P["w3_spread"]
    s = Stack(workers=ARGS.workers, threads=ARGS.threads, nginx_workers=ARGS.nginx_workers,
              keepalive=ARGS.keepalive, with_ceiling=False)
    rx = PushReceiver()
    try:
        s.start()
        pusher = s.start_pusher()
        time.sleep(1.0)
        c0 = cpu_seconds(pusher.pid)
        time.sleep(10)
        fig("push.idle_pusher_cpu_s", (cpu_seconds(pusher.pid) - c0) * 3.0, "CPU-s/30s")
        # (1) burst
        due = int(time.time() * 1000) + 4000 + n_burst // 20
        add_callbacks(s, {"b%d" % i: due for i in range(n_burst)}, rx.url())
        slack = due - time.time() * 1000
        if slack < 500:
            note("WARNING: the burst's adds ended %.0f ms before its due time" % slack)
        time.sleep(max(0, (due - time.time() * 1000) / 1000.0 - 0.5))
        c0, r0 = cpu_seconds(pusher.pid), cpu_seconds(s.redis_proc.pid)
        got = wait_arrivals(rx, n_burst, 120)
        c1, r1 = cpu_seconds(pusher.pid), cpu_seconds(s.redis_proc.pid)
        burst = [got["b%d" % i] for i in range(n_burst) if "b%d" % i in got]
        took = (max(burst) - due) / 1000.0
        fig("push.burst.jobs", len(burst), "jobs")
        fig("push.burst.callbacks_s", len(burst) / took, "callbacks/s")
        fig("push.burst.first_ms", min(burst) - due, "ms")
        fig("push.burst.p50_ms", pctl([t - due for t in burst], 0.5), "ms")
        fig("push.burst.last_ms", max(burst) - due, "ms")
        fig("push.burst.pusher_cpu_us_per_callback", (c1 - c0) * 1e6 / max(1, len(burst)), "us")
        fig("push.burst.redis_cpu_us_per_callback", (r1 - r0) * 1e6 / max(1, len(burst)), "us")
        # (2) paced
        start = int(time.time() * 1000) + 3000
        ats = {"l%d" % i: start + int(spread * 1000 * i / n_paced) for i in range(n_paced)}
        add_callbacks(s, ats, rx.url())
        got = wait_arrivals(rx, n_burst + n_paced, spread + 60)
        late = [got[i] - at for i, at in ats.items() if i in got]
        fig("push.paced.jobs", len(late), "jobs")
        fig("push.paced.late_p50_ms", pctl(late, 0.5), "ms")
        fig("push.paced.late_p99_ms", pctl(late, 0.99), "ms")
        fig("push.paced.late_max_ms", max(late) if late else float("nan"), "ms")
        fig("push.missed", n_burst + n_paced - len(got), "jobs")
        # Deliveries beyond one per job: failed attempts (their backoff step
        # shows in the lateness figures).
        fig("push.extra_attempts", s.stat("push", "popped") - (n_burst + n_paced), "attempts")
    finally:
        s.stop()
        rx.stop()


def load_delayed(s, n, topic, tag, delay=3600, at=None):
    t0 = time.monotonic()
    r = loadgen(s.http_port, "add", conns=16, jobs=n, batch=1000, delay_min=delay,
                delay_max=delay, ttr=60, body_size=200, topic=topic, tag=tag, at=at)
    check_errors(r, "load")
    return time.monotonic() - t0, r


def idle_cpu(pids_fn, seconds):
    a = pids_fn()
    time.sleep(seconds)
    b = pids_fn()
    return {k: b[k] - a[k] for k in a}


def w4_w6(s, P):
    """W6 memory and W4 idle CPU share one load of `big` delayed jobs."""
    n = P["big"]
    s.flush()
    time.sleep(2)
    m0 = s.used_memory()
    secs, r = load_delayed(s, n, "w4", "i")
    fig("w4.delayq.load_batch1000.jobs_s", r["jobs_per_s"], "jobs/s")
    m1 = s.used_memory()
    per_job = (m1 - m0) / n
    fig("w6.delayq.bytes_per_job", per_job, "bytes")
    fig("w6.delayq.bytes_per_job_minus_body", per_job - 200, "bytes")
    # Idle means after the load's aftermath: nginx closes the kept-alive
    # backend connections the load used after 30 s idle (keepalive_timeout
    # in the upstream block), and delayq-fcgi's workers handle each close.
    # The full profile waits for that; the quick one (a smoke run) does not.
    time.sleep(P["idle_settle_s"])

    def pids():
        return {"timer": sum(cpu_seconds(p.pid) for p in s.timers),
                "fcgi": tree_cpu(s.fcgi.pid), "redis": cpu_seconds(s.redis_proc.pid)}
    d = idle_cpu(pids, P["idle_s"])
    scale = 30.0 / P["idle_s"]
    fig("w4.delayq.idle_timer_cpu_s", d["timer"] * scale, "CPU-s/30s")
    fig("w4.delayq.idle_fcgi_cpu_s", d["fcgi"] * scale, "CPU-s/30s")
    fig("w4.delayq.idle_timer_plus_fcgi_cpu_s", (d["timer"] + d["fcgi"]) * scale, "CPU-s/30s")
    fig("w4.delayq.idle_redis_cpu_s", d["redis"] * scale, "CPU-s/30s")
    s.flush()
    # The same load with job hashes small enough for Redis' compact listpack
    # encoding (the 200-byte body is above the default 64-byte limit).
    old = s.redis("CONFIG", "GET", "hash-max-listpack-value")[1]
    s.redis("CONFIG", "SET", "hash-max-listpack-value", "1024")
    time.sleep(1)
    m0 = s.used_memory()
    load_delayed(s, n, "w4", "j")
    per_job = (s.used_memory() - m0) / n
    fig("w6.delayq_listpack1024.bytes_per_job", per_job, "bytes")
    fig("w6.delayq_listpack1024.bytes_per_job_minus_body", per_job - 200, "bytes")
    s.redis("CONFIG", "SET", "hash-max-listpack-value", old)
    s.flush()
    return n / secs


def page_latency(s, query, n=300):
    """Median and p99 of n sequential GET /jobs requests on one keep-alive
    connection, in ms; and the size of the last page."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=30)
    xs, got = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        c.request("GET", "/jobs?" + query)
        r = c.getresponse()
        body = r.read()
        xs.append((time.perf_counter() - t0) * 1000)
        if r.status != 200:
            raise RuntimeError("GET /jobs?%s: %d %s" % (query, r.status, body[:200]))
        got = json.loads(body)
    c.close()
    xs.sort()
    return pctl(xs, 0.5), pctl(xs, 0.99), len(got["jobs"])


def purge_big(s, P):
    """A purge of purge_jobs jobs of one topic (1M full; half delayed, half
    ready), one state at a time: how long it takes, its steps' mean Redis
    time (commandstats), and from SLOWLOG every call of 1 ms or more (Redis
    logs the commands a function runs too, so logging every call would
    need millions of entries): the longest step, the steps of 10 ms or
    more, and the longest other call meanwhile."""
    import http.client
    n, topic = P["purge_jobs"], "pg"
    s.flush()
    load_delayed(s, n // 2, topic, "d")
    load_delayed(s, n - n // 2, topic, "r", delay=0)
    time.sleep(3)  # let the load's aftermath settle
    saved = {k: s.redis("CONFIG", "GET", k)[1] for k in ("slowlog-log-slower-than", "slowlog-max-len")}
    s.redis("CONFIG", "SET", "slowlog-max-len", "100000")
    s.redis("CONFIG", "SET", "slowlog-log-slower-than", "1000")
    s.redis("SLOWLOG", "RESET")
    s.redis("CONFIG", "RESETSTAT")
    t0 = time.monotonic()
    try:
        for state in ("delay", "ready"):
            c = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=600)
            c.request("POST", "/purge", json.dumps({"topic": topic, "state": state}))
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status != 200:  # nginx gave up waiting (504): the purge goes on
                note("purge %s: %d %s" % (state, r.status, body[:200]))
        while s.stat(topic, "deleted") < n and time.monotonic() - t0 < 1200:
            time.sleep(0.2)
        took = time.monotonic() - t0
        log = s.redis("SLOWLOG", "GET", "-1")
        stats = s.redis("INFO", "commandstats").decode()
    finally:
        for k, v in saved.items():
            s.redis("CONFIG", "SET", k, v)
    if s.stat(topic, "deleted") != n:
        raise RuntimeError("purged %d of %d jobs" % (s.stat(topic, "deleted"), n))
    m = re.search(r"cmdstat_fcall:calls=(\d+),usec=(\d+)", stats)
    calls, usec = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    steps = [e[2] for e in log if e[3][0].upper() == b"FCALL" and e[3][1].endswith(b"_purge")]
    other = [e[2] for e in log if e[3][0].upper() == b"FCALL" and not e[3][1].endswith(b"_purge")]
    slow = sorted(((e[2], e[1], e[3][3:]) for e in log
                   if e[3][0].upper() == b"FCALL" and e[3][1].endswith(b"_purge")), reverse=True)[:8]
    note("purge: the longest steps (us, unix s, their arguments): %s" % [
        (us, at, [a.decode(errors="replace")[:24] for a in argv]) for us, at, argv in slow])
    fig("purge.jobs", n, "jobs")
    fig("purge.seconds", took, "s")
    fig("purge.jobs_s", n / took, "jobs/s")
    # Every FCALL meanwhile: the purge's steps and the timer's few calls.
    fig("purge.fcalls", calls, "calls")
    fig("purge.fcall_mean_us", usec / calls if calls else float("nan"), "us")
    fig("purge.step_max_us", max(steps) if steps else 0, "us (0: none reached 1 ms)")
    fig("purge.steps_10ms_or_more", sum(1 for us in steps if us >= 10000), "calls")
    fig("purge.other_call_max_us", max(other) if other else 0, "us (0: none reached 1 ms)")
    s.flush()


def jobs_pages(s, P):
    """A page of 50 delayed jobs of one topic, from the start and from a
    cursor in the middle of the topic's index, with jobs_small and then
    jobs_big jobs stored in that topic (the loads add 1000 a batch with one
    delay, so many jobs share a due ms: the cursor lands inside such a run).
    The Redis time of one page is read from commandstats (FCALL_RO)."""
    s.flush()
    topic = "jl"
    stored = 0
    out = {}
    for size in (P["jobs_small"], P["jobs_big"]):
        load_delayed(s, size - stored, topic, "j%d" % size)
        stored = size
        time.sleep(3)  # let the load's aftermath settle
        key = "{dq}:d:" + topic
        n = int(s.redis("ZCARD", key))
        if n != size:
            raise RuntimeError("%s holds %d jobs, expected %d" % (key, n, size))
        mid = s.redis("ZRANGE", key, n // 2, n // 2, "WITHSCORES")
        cursor = "%s:%s" % (mid[1].decode(), mid[0].decode())
        same = int(s.redis("ZCOUNT", key, mid[1], mid[1]))
        note("jobs: %d stored; the middle cursor's due ms is shared by %d jobs" % (n, same))
        for where, q in (("first", "topic=%s&state=delay&limit=50" % topic),
                         ("middle", "topic=%s&state=delay&limit=50&cursor=%s" % (topic, cursor))):
            s.redis("CONFIG", "RESETSTAT")
            p50, p99, got = page_latency(s, q)
            if got != 50:
                raise RuntimeError("a page of %d jobs, expected 50" % got)
            stats = s.redis("INFO", "commandstats").decode()
            m = re.search(r"cmdstat_fcall_ro:calls=(\d+),usec=(\d+)", stats)
            redis_us = int(m.group(2)) / int(m.group(1)) if m else float("nan")
            tag = "jobs.page50_%s.%d" % (where, size)
            fig(tag + ".http_p50_ms", p50, "ms")
            fig(tag + ".http_p99_ms", p99, "ms")
            fig(tag + ".redis_us", redis_us, "us")
            out[(where, size)] = (p50, redis_us)
    for where in ("first", "middle"):
        small, big = out[(where, P["jobs_small"])], out[(where, P["jobs_big"])]
        fig("jobs.page50_%s.http_p50_ratio_big_small" % where, big[0] / small[0], "x")
        fig("jobs.page50_%s.redis_us_ratio_big_small" % where, big[1] / small[1], "x")
    s.flush()


def w5(s, P, load_rate):
    n = P["big"]
    for ntimers in (1, 2):
        s.stop_timers()
        s.flush()
        for _ in range(ntimers):
            s.start_timer()
        # Let the timers settle their fair shares (maintain every lease/3).
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            owners = {}
            for k in range(16):
                o = s.redis("GET", "{dq}:lock:%d" % k)
                owners[o] = owners.get(o, 0) + 1
            if None not in owners and len(owners) == ntimers and max(owners.values()) <= 16 // ntimers:
                break
            time.sleep(0.2)
        note("w5: bucket owners %s" % sorted(owners.values()))
        est = n / load_rate
        at = time.time() + est * 1.5 + 5
        load_delayed(s, n, "w5", "u%d" % ntimers, at=at)
        if time.time() > at:
            note("WARNING: w5 load finished after the due time")
        ready_early = s.stat("w5", "ready")
        while time.time() < at:
            time.sleep(0.001)
        rc0 = cpu_seconds(s.redis_proc.pid)
        tc0 = sum(cpu_seconds(p.pid) for p in s.timers)
        t_end = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if s.stat("w5", "ready") >= n:
                t_end = time.time()
                break
            time.sleep(0.005)
        if t_end is None:
            note("WARNING: w5 not all ready in 300 s")
            t_end = time.time()
        secs = t_end - at
        fig("w5.delayq.timers%d.redis_cpu_us_per_job" % ntimers,
            (cpu_seconds(s.redis_proc.pid) - rc0) * 1e6 / n, "us")
        fig("w5.delayq.timers%d.timer_cpu_us_per_job" % ntimers,
            (sum(cpu_seconds(p.pid) for p in s.timers) - tc0) * 1e6 / n, "us")
        fig("w5.delayq.timers%d.seconds" % ntimers, secs, "s")
        fig("w5.delayq.timers%d.jobs_s" % ntimers, n / secs, "jobs/s")
        if ready_early:
            note("w5: %d jobs were ready before their due time" % ready_early)
    s.stop_timers()
    s.flush()
    s.start_timer()


def w7(s, P):
    base = P["w7_base"]
    small = 10000
    n1 = P["w1_jobs"]
    n2 = P["w2_jobs"]
    res = {}
    # About 1.2 kB of Redis memory per stored job (W6): fall back to 1M jobs
    # rather than push a shared machine into swap or the OOM killer.
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    if base * 1200 * 1.5 > avail and base > 1000000:
        note("w7: %d stored jobs need ~%.1f GB, %.1f GB available: using 1M" %
             (base, base * 1200 / 1e9, avail / 1e9))
        base = 1000000
    for label, stored in (("10k", small), ("big", base)):
        s.flush()
        time.sleep(2)
        load_delayed(s, stored, "w7base", "z")
        r = loadgen(s.http_port, "add", conns=32, jobs=n1, delay_min=600, delay_max=3600, ttr=60,
                    body_size=200, topic="w7", tag="a")
        res[label, "add"] = r["jobs_per_s"]
        preload_ready(s, n2, "w7d", "p")
        r = loadgen(s.http_port, "drain", conns=32, jobs=n2, topic="w7d")
        res[label, "drain"] = r["jobs_per_s"]
        note("w7 %s stored: used_memory %.0f MB" % (label, s.used_memory() / 1e6))
    fig("w7.stored_big", base, "jobs")
    for w in ("add", "drain"):
        fig("w7.delayq.%s.jobs_s_10k" % w, res["10k", w], "jobs/s")
        fig("w7.delayq.%s.jobs_s_big" % w, res["big", w], "jobs/s")
        fig("w7.delayq.%s.ratio_big_to_10k" % w, res["big", w] / res["10k", w], "")
    s.flush()


# --------------------------------------------------------------------------
# beanstalkd
# --------------------------------------------------------------------------

class Beanstalkd:
    """A fresh beanstalkd on 127.0.0.1 in a temp dir (binlog in it with -b)."""

    def __init__(self, binlog):
        self.dir = tempfile.mkdtemp(prefix="delayq-bench-bs-")
        self.port = free_port()
        argv = ["beanstalkd", "-l", "127.0.0.1", "-p", str(self.port)]
        if binlog:
            os.makedirs(os.path.join(self.dir, "binlog"))
            argv += ["-b", os.path.join(self.dir, "binlog")]
        log = open(os.path.join(self.dir, "beanstalkd.log"), "ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()

    def __enter__(self):
        wait_port(self.port, self.proc, "beanstalkd")
        return self

    def __exit__(self, *exc):
        stop_proc(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def beanstalkd(P, binlog, outdir):
    """Each workload on a fresh beanstalkd, as delayq's run on a flushed Redis."""
    name = "beanstalkd_binlog" if binlog else "beanstalkd"
    with Beanstalkd(binlog) as b:
        r = loadgen(b.port, "bs-put", conns=32, jobs=P["w1_jobs"], delay_min=600, delay_max=3600,
                    ttr=60, body_size=200, topic="w1")
        fig("w1.%s.add.jobs_s" % name, r["jobs_per_s"], "jobs/s")
    with Beanstalkd(binlog) as b:
        loadgen(b.port, "bs-put", conns=8, jobs=P["w2_jobs"], delay_min=0, delay_max=0, ttr=60,
                body_size=200, topic="w2")
        r = loadgen(b.port, "bs-drain", conns=32, jobs=P["w2_jobs"], topic="w2")
        fig("w2.%s.drain.jobs_s" % name, r["jobs_per_s"], "jobs/s")
    with Beanstalkd(binlog) as b:
        c0 = cpu_seconds(b.proc.pid)
        r = loadgen(b.port, "bs-late", conns=20, producers=4, jobs=P["w3_jobs"], spread=P["w3_spread"],
                    delay_min=2, ttr=60, topic="w3",
                    lateness_out=os.path.join(outdir, "lateness-%s.txt" % name))
        late_figs(name, r)
        fig("w3.%s.server_cpu_s" % name, cpu_seconds(b.proc.pid) - c0, "CPU-s")
    with Beanstalkd(binlog) as b:
        loadgen(b.port, "bs-put", conns=16, jobs=P["big"], delay_min=3600, delay_max=3600, ttr=60,
                body_size=200, topic="w4")
        time.sleep(3)
        c0 = cpu_seconds(b.proc.pid)
        time.sleep(P["idle_s"])
        fig("w4.%s.idle_cpu_s" % name, (cpu_seconds(b.proc.pid) - c0) * 30.0 / P["idle_s"],
            "CPU-s/30s")


# --------------------------------------------------------------------------
# BullMQ
# --------------------------------------------------------------------------

def bullmq(P, outdir):
    if not bullmq_installed():
        return
    d = tempfile.mkdtemp(prefix="delayq-bench-bull-")
    port = free_port()
    rp = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                           "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        wait_port(port, rp, "redis-server (BullMQ)")
        r = Resp(port)

        def node(cmd, **kw):
            argv = ["node", os.path.join(BULLMQ_DIR, "bench.js"), cmd, "--port", str(port)]
            for k, v in kw.items():
                argv += ["--" + k, str(v)]
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800)
            if res.returncode != 0:
                raise RuntimeError("bullmq %s failed: %s" % (cmd, res.stderr.decode()[-2000:]))
            out = json.loads(res.stdout.decode().strip().splitlines()[-1])
            note("bullmq %s -> %s" % (cmd, out))
            return out
        o = node("add", jobs=P["w1_jobs"], conc=32)
        fig("w1.bullmq.add.jobs_s", o["jobs_per_s"], "jobs/s")
        r("FLUSHALL")
        o = node("drain", jobs=P["w2_jobs"], conc=32)
        fig("w2.bullmq.drain.jobs_s", o["jobs_per_s"], "jobs/s")
        r("FLUSHALL")
        c0 = cpu_seconds(rp.pid)
        o = node("late", jobs=P["w3_jobs"], spread=P["w3_spread"], conc=16,
                 out=os.path.join(outdir, "lateness-bullmq.txt"))
        late_figs("bullmq", o)
        fig("w3.bullmq.redis_cpu_s", cpu_seconds(rp.pid) - c0, "CPU-s")
        fig("w3.bullmq.worker_cpu_s", o["cpu_s"], "CPU-s")
        r("FLUSHALL")
        o = node("idle", jobs=P["big"], idle=P["idle_s"], redispid=rp.pid)
        fig("w4.bullmq.idle_worker_cpu_s", o["worker_cpu_s"] * 30.0 / P["idle_s"], "CPU-s/30s")
        fig("w4.bullmq.idle_redis_cpu_s", o["redis_cpu_s"] * 30.0 / P["idle_s"], "CPU-s/30s")
        fig("w6.bullmq.bytes_per_job", o["bytes_per_job"], "bytes")
        r.close()
    finally:
        stop_proc(rp)
        shutil.rmtree(d, ignore_errors=True)


def bullmq_installed():
    if os.path.isdir(os.path.join(BULLMQ_DIR, "node_modules", "bullmq")):
        return True
    note("BullMQ not installed: run `npm ci` in bench/peers/bullmq; skipping")
    return False


def bullmq_http(P):
    """BullMQ behind an HTTP front (bench/peers/bullmq/front.js, node:http),
    driven by the same loadgen as delayq: the fair peer for one job per
    request (delayq's single add and finish-and-pop each pay an HTTP hop,
    which BullMQ's direct client does not)."""
    if not bullmq_installed():
        return
    with bare_redis("bullhttp", "--maxmemory-policy", "noeviction") as (rp, r):
        port = free_port()
        log = tempfile.NamedTemporaryFile(prefix="delayq-bench-front-", suffix=".log", delete=False)
        front = subprocess.Popen(["node", os.path.join(BULLMQ_DIR, "front.js"), "--port", str(port),
                                  "--redis-port", str(r.addr[1])],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            wait_port(port, front, "BullMQ's HTTP front")
            n = P["w1_jobs"]
            c0 = cpu_seconds(front.pid)
            o = loadgen(port, "add", conns=32, jobs=n, delay_min=600, delay_max=3600, ttr=60,
                        body_size=200, topic="w1", tag="a")
            fig("w1.bullmq_http.add.jobs_s", o["jobs_per_s"], "jobs/s")
            fig("w1.bullmq_http.add.p99_ms", o["req_p99_ms"], "ms")
            fig("w1.bullmq_http.front_cpu_us_per_job", (cpu_seconds(front.pid) - c0) * 1e6 / n, "us")
            check_errors(o, "bullmq_http add")
            r("FLUSHALL")
            n = P["w2_jobs"]
            for name, kw in (("drain", {}), ("drain_fap", {"finish_and_pop": True})):
                o = loadgen(port, "add", conns=8, jobs=n, batch=500, delay_min=0, delay_max=0, ttr=60,
                            body_size=200, topic="w2", tag=name)
                check_errors(o, "bullmq_http preload")
                c0 = cpu_seconds(front.pid)
                o = loadgen(port, "drain", conns=32, jobs=n, topic="w2", **kw)
                fig("w2.bullmq_http.%s.jobs_s" % name, o["jobs_per_s"], "jobs/s")
                fig("w2.bullmq_http.%s.front_cpu_us_per_job" % name,
                    (cpu_seconds(front.pid) - c0) * 1e6 / n, "us")
                check_errors(o, "bullmq_http " + name)
                if o["jobs"] < n:
                    note("WARNING: bullmq_http %s drained %d of %d jobs" % (name, o["jobs"], n))
                r("FLUSHALL")
        finally:
            stop_proc(front)
            if ARGS and ARGS.keep:
                note("kept %s" % log.name)
            else:
                os.unlink(log.name)


@contextlib.contextmanager
def bare_redis(what, *extra):
    """An idle redis-server of its own (no persistence; extra: more of its
    flags) in a temp dir, for timing functions alone or for a peer: yields
    its process and a client (its port in client.addr[1]); stops it."""
    d = tempfile.mkdtemp(prefix="delayq-bench-%s-" % what)
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                             "--save", "", "--appendonly", "no"] + list(extra),
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc, "redis-server")
        yield proc, Resp(port, timeout=60)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def move_cost(P, library=None):
    """The move function alone, on an otherwise idle Redis: big / 5 delayed
    jobs (200-byte bodies, 16 buckets, one topic) added by calling the add
    function directly, all due at once, then moved by calling the move
    function bucket by bucket (1000 a call) as the timer does. Redis' own
    time per moved job comes from INFO commandstats. library: a
    src/store/lua_library.lua (default: the one of --build)."""
    n = P["big"] // 5
    lib = open(library or os.path.join(ARGS.build, "src", "store", "lua_library.lua")).read()
    ver = re.search(r"name=delayq_(\w+)", lib).group(1)
    with bare_redis("moves") as (proc, r):
        r("FUNCTION", "LOAD", "REPLACE", lib)
        fn = lambda name: "dq_%s_%s" % (ver, name)  # noqa: E731
        body = json.dumps("x" * 198)
        # A job's arguments as this library declares them; the fields that
        # came after the first 11 (key, trace context) are left empty.
        m = re.search(r"run_add\(KEYS, ARGV\)\n[^\n]*\nlocal ARG_JOB, ARG_JOB_FIELDS = \{[^}]*\}, (\d+)",
                      lib)
        stride = int(m.group(1)) if m else 11
        for start in range(0, n, 1000):
            args = []
            for i in range(start, min(start + 1000, n)):
                args += ["mv-%d" % i, "m", body, 60000, -1, 50, -1, i % 16, "", "", 0]
                args += [""] * (stride - 11)
            r("FCALL", fn("add"), 1, "{dq}", "", 16, 1, len(args) // stride, *args)
        time.sleep(0.2)  # every job is due
        r("CONFIG", "RESETSTAT")
        moved = 0
        for k in range(16):
            while True:
                got = r("FCALL", fn("move"), 1, "{dq}", k, 1000, "")
                moved += got[0]
                if got[0] < 1000:
                    break
        calls, usec = script_calls(commandstats_of(r))
        if moved != n:
            note("WARNING: moved %d of %d" % (moved, n))
        fig("moves.redis_usec_per_job", usec / n, "us")
        fig("moves.calls", calls, "calls")


def pop_cost(P, library=None, baseline=None):
    """The pop function alone, on an otherwise idle Redis: the same number
    of ready jobs (200-byte bodies) in a topic without a policy, one with a
    `rate` (high enough never to hold a job back, so every pop reads and
    writes its token bucket), and one with a `rate` and a `concurrency`;
    each popped one job per call, as a single-job pop does. baseline:
    another build's lua_library.lua, loaded beside it (two versions share
    one Redis), whose pop of a topic without a policy is measured in the
    same rounds (unlimited_baseline): the A/B of an unlimited pop. Figures:
    Redis' own time in the function per pop (INFO commandstats: wall time,
    so a preempted Redis counts its wait) and the redis-server process's
    CPU time per pop (the call's network and parsing included, a
    preemption not). library: as move_cost's."""
    n = P["big"] // 10
    lib = open(library or os.path.join(ARGS.build, "src", "store", "lua_library.lua")).read()
    libs = {"new": lib}
    if baseline:
        libs["base"] = open(baseline).read()
    ver = {k: re.search(r"name=delayq_(\w+)", v).group(1) for k, v in libs.items()}
    # the reply's fields before its jobs: finished (and token_wait_ms)
    head = {k: 2 if "token_wait_ms" in v else 1 for k, v in libs.items()}
    with bare_redis("pops") as (proc, r):
        for v in libs.values():
            r("FUNCTION", "LOAD", "REPLACE", v)
        fn = lambda name, which="new": "dq_%s_%s" % (ver[which], name)  # noqa: E731
        body = json.dumps("x" * 198)
        m = re.search(r"run_add\(KEYS, ARGV\)\n[^\n]*\nlocal ARG_JOB, ARG_JOB_FIELDS = \{[^}]*\}, (\d+)",
                      lib)
        stride = int(m.group(1)) if m else 11
        # topic -> (library, policy's concurrency rate period_ms; '' unset)
        cases = {"unlimited": ("new", None), "rate": ("new", ("", 1000000, 1000)),
                 "rate_concurrency": ("new", (10 * n, 1000000, 1000))}
        if baseline:
            cases["unlimited_baseline"] = ("base", None)
        for topic, (_, pol) in cases.items():
            if pol:  # argv: topic concurrency rate period_ms key_concurrency key_rate key_period_ms keep_ms
                r("FCALL", fn("policy"), 1, "{dq}", topic, pol[0], pol[1], pol[2], "", "", "", "")
            for start in range(0, n, 1000):
                args = []
                for i in range(start, min(start + 1000, n)):
                    args += ["%s-%d" % (topic, i), topic, body, 600000, -1, 0, -1, i % 16, "", "", 0]
                    args += [""] * (stride - 11)
                r("FCALL", fn("add"), 1, "{dq}", "", 16, 1, len(args) // stride, *args)
        # Rounds interleave the cases, each round starting with another, so
        # that a busy spell of the machine (other processes) weighs on all
        # alike; each figure is the case's median round.
        rounds = 6
        usec, cpu = {t: [] for t in cases}, {t: [] for t in cases}
        names = list(cases)
        for rnd in range(rounds):
            at = rnd % len(names)
            for topic in names[at:] + names[:at]:
                which = cases[topic][0]
                r("CONFIG", "RESETSTAT")
                cpu0 = cpu_seconds(proc.pid)
                popped = 0
                for _ in range(n // rounds):
                    got = r("FCALL", fn("pop", which), 1, "{dq}", "", 1, 0, topic)
                    popped += len(got) - head[which]
                cpu[topic].append((cpu_seconds(proc.pid) - cpu0) * 1e6 / (n // rounds))
                calls, us = script_calls(commandstats_of(r))
                usec[topic].append(us / calls)
                if popped != n // rounds:
                    note("WARNING: %s: popped %d of %d" % (topic, popped, n // rounds))

        def median(xs):
            return sorted(xs)[len(xs) // 2]

        for topic in cases:
            fig("pops.%s_redis_usec_per_pop" % topic, median(usec[topic]), "us")
            fig("pops.%s_redis_cpu_usec_per_pop" % topic, median(cpu[topic]), "us")
        for topic in names[1:]:
            fig("pops.%s_vs_unlimited" % topic, median(usec[topic]) / median(usec["unlimited"]), "x")
            fig("pops.%s_vs_unlimited_cpu" % topic, median(cpu[topic]) / median(cpu["unlimited"]), "x")


def add_cost(P, library=None, baseline=None):
    """The add function alone, on an otherwise idle Redis: W1's jobs
    (200-byte bodies, due in 600 to 3600 s, 16 buckets, one topic, a
    new id each) added by calls of one job and of 100 (a group-committed
    single add and a batch send these). baseline: another build's
    lua_library.lua, loaded beside it, measured in the same rounds (which
    alternate the libraries), so the two are an A/B in one run. Figures per
    job: Redis' own time in the function (INFO commandstats: FCALL's
    usec, wall time, so a preempted Redis counts its wait), the
    redis-server process's CPU time (the call's network and parsing
    included, a preemption not) and the Redis commands the function ran
    (every other command's calls), each the median of the rounds (each
    round's are noted). library: as move_cost's."""
    n = P["tune_jobs"]
    libs = {"new": open(library or os.path.join(ARGS.build, "src", "store", "lua_library.lua")).read()}
    if baseline:
        libs["base"] = open(baseline).read()
    ver = {k: re.search(r"name=delayq_(\w+)", v).group(1) for k, v in libs.items()}
    stride = {k: int(re.search(r"run_add\(KEYS, ARGV\)\n[^\n]*\nlocal ARG_JOB, ARG_JOB_FIELDS = "
                               r"\{[^}]*\}, (\d+)", v).group(1)) for k, v in libs.items()}
    body = json.dumps("x" * 198)
    rounds = 8
    usec, cpu, cmds = {}, {}, {}
    with bare_redis("adds") as (proc, r):
        for v in libs.values():
            r("FUNCTION", "LOAD", "REPLACE", v)
        seq = 0
        for rnd in range(rounds):
            order = list(libs) if rnd % 2 == 0 else list(libs)[::-1]
            for which in order:
                # each library on its own data: two stored layouts cannot
                # share a Redis (each refuses the other's)
                r("FLUSHALL")
                for per_call in (1, 100):
                    r("CONFIG", "RESETSTAT")
                    cpu0 = cpu_seconds(proc.pid)
                    for start in range(0, n // rounds, per_call):
                        args = []
                        for i in range(per_call):
                            seq += 1
                            args += ["ad-%d" % seq, "a", body, 60000, -1, 600000 + seq * 29 % 3000000,
                                     -1, seq % 16, "", "", 0]
                            args += [""] * (stride[which] - 11)
                        got = r("FCALL", "dq_%s_add" % ver[which], 1, "{dq}", "", 16, 1, per_call, *args)
                        if got != [b"ok"] * per_call:
                            raise RuntimeError("add answered %r" % got[:3])
                    jobs = n // rounds // per_call * per_call
                    cpu.setdefault((which, per_call), []).append((cpu_seconds(proc.pid) - cpu0) * 1e6 / jobs)
                    cs = commandstats_of(r)
                    calls, us = script_calls(cs)
                    inner = sum(c for name, (c, _) in cs.items()
                                if name not in ("fcall", "fcall_ro", "config", "info"))
                    usec.setdefault((which, per_call), []).append(us / jobs)
                    cmds.setdefault((which, per_call), []).append(inner / jobs)

    def median(xs):
        return sorted(xs)[len(xs) // 2]

    for (which, per_call), v in sorted(usec.items()):
        name = "adds.%s.per_call_%d" % (which, per_call)
        fig(name + ".redis_usec_per_job", median(v), "us")
        fig(name + ".redis_cpu_usec_per_job", median(cpu[which, per_call]), "us")
        fig(name + ".redis_commands_per_job", median(cmds[which, per_call]), "commands")
        note("%s: usec per job by round %s, CPU %s" % (name, " ".join("%.1f" % x for x in v),
                                                        " ".join("%.1f" % x for x in cpu[which, per_call])))
    if baseline:
        for per_call in (1, 100):
            fig("adds.new_vs_base.per_call_%d" % per_call,
                median(usec["new", per_call]) / median(usec["base", per_call]), "x")
            fig("adds.new_vs_base.per_call_%d_cpu" % per_call,
                median(cpu["new", per_call]) / median(cpu["base", per_call]), "x")


def group_commit_ab(P):
    """Group commit on (the shipped 64) and off (1): single-job W1 add and
    W2 finish-and-pop drain, each in a fresh stack, two rounds interleaved."""
    n = P["tune_jobs"]
    res = {}
    for rnd in range(2):
        for gc in (64, 1):
            s = Stack(group_commit=gc, with_ceiling=False)
            try:
                s.start()
                r1 = loadgen(s.http_port, "add", conns=32, jobs=n, delay_min=600, delay_max=3600,
                             ttr=60, body_size=200, topic="t", tag="a")
                preload_ready(s, n // 2, "d", "p")
                r2 = loadgen(s.http_port, "drain", conns=32, jobs=n // 2, topic="d",
                             finish_and_pop=True)
                res.setdefault((gc, "w1_add"), []).append(r1["jobs_per_s"])
                res.setdefault((gc, "w2_fap"), []).append(r2["jobs_per_s"])
            finally:
                s.stop()
    for (gc, k), v in sorted(res.items()):
        fig("group.gc%d.%s.jobs_s" % (gc, k), sum(v) / len(v),
            "jobs/s (mean of %s)" % ", ".join("%.0f" % x for x in v))
    for k in ("w1_add", "w2_fap"):
        a, b = res[64, k], res[1, k]
        fig("ratio.group_on_to_off.%s" % k, (sum(a) / len(a)) / (sum(b) / len(b)), "x")


def tune(P):
    """Knobs that need no code change, each in a fresh stack: single-job W1
    and W2 and the ceiling, as ratios within each stack."""
    settings = [
        ("default 4x32 nginx2 ka%d tcp" % SHIPPED_KEEPALIVE, {}),
        ("redis unix socket", dict(redis_unix=True)),
        ("workers 2 x threads 32", dict(workers=2)),
        ("workers 8 x threads 16", dict(workers=8, threads=16)),
        ("nginx worker_processes 1", dict(nginx_workers=1)),
        ("upstream keepalive 32", dict(keepalive=32, workers=4, threads=32)),
        ("unix + nginx 1 + workers 2", dict(redis_unix=True, nginx_workers=1, workers=2)),
    ]
    n = P["tune_jobs"]
    # Two rounds, settings interleaved, so that a burst of load from other
    # work on the machine does not land on one setting only.
    res = {}
    for rnd in range(2):
        for i, (label, kw) in enumerate(settings):
            s = Stack(**kw)
            try:
                s.start()
                r1 = loadgen(s.http_port, "add", conns=32, jobs=n, delay_min=600, delay_max=3600,
                             ttr=60, body_size=200, topic="t", tag="a")
                preload_ready(s, n // 2, "d", "p")
                r2 = loadgen(s.http_port, "drain", conns=32, jobs=n // 2, topic="d")
                body = json.dumps({"topic": "w1", "id": "ceil-0000001", "delay": 1800.5,
                                   "ttr": 60, "body": "x" * 198})
                r3 = loadgen(s.http_port, "fixed", conns=32, jobs=n, method="POST",
                             path="/ceil/add", body=body)
                for k, r, f in (("w1_add_jobs_s", r1, "jobs_per_s"), ("w2_drain_jobs_s", r2, "jobs_per_s"),
                                ("ceiling_req_s", r3, "req_per_s")):
                    res.setdefault((i, k), []).append(r[f])
            finally:
                s.stop()
    for i, (label, kw) in enumerate(settings):
        for k, unit in (("w1_add_jobs_s", "jobs/s"), ("w2_drain_jobs_s", "jobs/s"),
                        ("ceiling_req_s", "req/s")):
            v = res[i, k]
            fig("tune.%d.%s" % (i, k), sum(v) / len(v),
                "%s  [%s] (mean of %s)" % (unit, label, ", ".join("%.0f" % x for x in v)))


def script_calls(cs):
    """(calls, usec) of script calls: EVALSHA (the ceiling) and FCALL (delayq)."""
    calls = usec = 0
    for name in ("evalsha", "fcall", "fcall_ro"):
        c, u = cs.get(name, (0, 0.0))
        calls, usec = calls + c, usec + u
    return calls, usec


def commandstats(s):
    return commandstats_of(s.redis)


def commandstats_of(redis):
    out = {}
    for line in redis("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_"):
            name, _, rest = line.partition(":")
            kv = dict(x.split("=") for x in rest.split(","))
            out[name[8:]] = (int(kv["calls"]), float(kv["usec"]))
    return out


def profile(P):
    """Where a request's time goes: per phase, Redis-side microseconds per
    script call (INFO commandstats) and CPU microseconds per request of each
    process (nginx, delayq-fcgi or the ceiling, Redis, timer), from
    /proc/<pid>/stat. Each phase mostly runs one script."""
    n = P["tune_jobs"]
    s = Stack()
    try:
        s.start()
        nginx_pids = lambda: [s.nginx.pid] + children(s.nginx.pid)  # noqa: E731

        def cpu():
            return {"nginx": sum(cpu_seconds(p) for p in nginx_pids()),
                    "fcgi": tree_cpu(s.fcgi.pid), "ceiling": tree_cpu(s.ceiling.pid),
                    "redis": cpu_seconds(s.redis_proc.pid),
                    "timer": sum(cpu_seconds(p.pid) for p in s.timers)}

        def phase(name, fn, units):
            s.redis("CONFIG", "RESETSTAT")
            c0 = cpu()
            fn()
            c1 = cpu()
            calls, usec = script_calls(commandstats(s))
            fig("profile.%s.redis_usec_per_evalsha" % name, usec / calls if calls else 0.0, "us")
            fig("profile.%s.evalsha_per_unit" % name, calls / units, "calls")
            for k in c0:
                fig("profile.%s.%s_cpu_us_per_unit" % (name, k), (c1[k] - c0[k]) * 1e6 / units, "us")
        body = json.dumps({"topic": "w1", "id": "ceil-0000001", "delay": 1800.5, "ttr": 60,
                           "body": "x" * 198})
        phase("ceiling_req", lambda: loadgen(s.http_port, "fixed", conns=32, jobs=n, method="POST",
                                             path="/ceil/add", body=body), n)
        phase("add_job", lambda: loadgen(s.http_port, "add", conns=32, jobs=n, delay_min=600,
                                         delay_max=3600, ttr=60, body_size=200, topic="p", tag="a"), n)
        phase("add_batch100_job", lambda: loadgen(s.http_port, "add", conns=32, jobs=n, batch=100,
                                                  delay_min=600, delay_max=3600, ttr=60,
                                                  body_size=200, topic="p", tag="b"), n)
        s.flush()
        preload_ready(s, n, "d", "p")
        phase("drain_job", lambda: loadgen(s.http_port, "drain", conns=32, jobs=n, topic="d"), n)
        s.flush()
        preload_ready(s, n, "d", "f")
        phase("drain_fap_job", lambda: loadgen(s.http_port, "drain", conns=32, jobs=n, topic="d",
                                               finish_and_pop=True), n)
        s.flush()
        time.sleep(2)
        nl = P["w3_jobs"] // 2
        phase("late_job", lambda: loadgen(s.http_port, "late", conns=20, producers=4, jobs=nl,
                                          spread=P["w3_spread"] / 2, delay_min=2, ttr=60,
                                          topic="l", tag="l", finish_and_pop=True), nl)
        s.flush()
        time.sleep(2)
        # A burst: jobs due a few seconds after the load, moved by the timer.
        at = time.time() + 8
        load_delayed(s, n, "m", "m", at=at)
        s.redis("CONFIG", "RESETSTAT")
        c0 = cpu()
        while time.time() < at + 0.5 or s.stat("m", "ready") < n:
            time.sleep(0.01)
            if time.time() > at + 60:
                break
        c1 = cpu()
        calls, usec = script_calls(commandstats(s))
        fig("profile.move_job.redis_usec_per_job", usec / n, "us")
        fig("profile.move_job.timer_cpu_us_per_job", (c1["timer"] - c0["timer"]) * 1e6 / n, "us")
        fig("profile.move_job.redis_cpu_us_per_job", (c1["redis"] - c0["redis"]) * 1e6 / n, "us")
    finally:
        s.stop()


def perf_report(data, out):
    """Samples by process, then by shared object and by symbol within
    delayq-fcgi, redis-server, nginx and delayq-timer."""
    reports = [["--sort", "comm", "--percent-limit", "0.5"]]
    for comm in ("delayq-fcgi", "redis-server", "nginx", "delayq-timer"):
        reports.append(["--comms", comm, "--percentage", "relative", "--sort", "dso",
                        "--percent-limit", "0.5"])
        reports.append(["--comms", comm, "--percentage", "relative", "--sort", "dso,sym",
                        "--percent-limit", "1"])
    with open(out, "w") as f:
        for extra in reports:
            f.write("==== perf report %s\n" % " ".join(extra))
            r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g",
                                "none"] + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               timeout=300)
            f.write("\n".join(line for line in r.stdout.decode("utf-8", "replace").splitlines()
                              if line.strip() and not line.startswith("#")) + "\n")
    os.unlink(data)


def perf_profile(P, outdir):
    """perf record (cpu-clock) of nginx, delayq-fcgi, Redis and the timer
    while a workload runs; reports by process and by symbol go to
    outdir/perf-<phase>.txt."""
    if shutil.which("perf") is None:
        note("perf not installed; skipping")
        return
    n = P["tune_jobs"] * 2
    s = Stack(with_ceiling=False)
    try:
        s.start()

        def pids():
            ps = [s.nginx.pid] + children(s.nginx.pid) + [s.fcgi.pid] + children(s.fcgi.pid)
            return ps + [s.redis_proc.pid] + [t.pid for t in s.timers]

        def record(name, argv_kw, secs):
            data = os.path.join(outdir, "perf-%s.data" % name)
            kw = dict(argv_kw)
            mode = kw.pop("mode")
            argv = [LOADGEN, "--mode", mode, "--port", str(s.http_port)]
            for k, v in kw.items():
                argv += ["--" + k.replace("_", "-")] + ([] if v is True else [str(v)])
            lg = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-o", data, "-p",
                            ",".join(str(p) for p in pids()), "--", "sleep", str(secs)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            lg.wait(600)
            perf_report(data, os.path.join(outdir, "perf-%s.txt" % name))
            note("perf %s: see %s" % (name, os.path.join(outdir, "perf-%s.txt" % name)))
        record("add", dict(mode="add", conns=32, jobs=n, delay_min=600, delay_max=3600, ttr=60,
                           body_size=200, topic="p", tag="a"), 3)
        s.flush()
        preload_ready(s, n, "d", "p")
        record("drain", dict(mode="drain", conns=32, jobs=n, topic="d"), 3)
        s.flush()
        time.sleep(2)
        at = time.time() + 6
        load_delayed(s, P["big"] // 5, "m", "m", at=at)
        while time.time() < at - 0.2:
            time.sleep(0.01)
        data = os.path.join(outdir, "perf-move.data")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-o", data, "-p",
                        ",".join(str(p) for p in pids()), "--", "sleep", "2"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        perf_report(data, os.path.join(outdir, "perf-move.txt"))
    finally:
        s.stop()


def syscalls(P, outdir):
    """System calls per request of delayq-fcgi (one worker, strace -c -f)
    and of the ceiling backend, for single add, pop + finish and the ceiling
    request. Tables go to outdir/syscalls-<phase>.txt."""
    if shutil.which("strace") is None:
        note("strace not installed; skipping")
        return
    n = 5000
    s = Stack(workers=1, threads=32)
    try:
        s.start()

        def traced(name, pid, fn, units):
            out = os.path.join(outdir, "syscalls-%s.txt" % name)
            tr = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            fn()
            time.sleep(0.3)
            tr.send_signal(signal.SIGINT)
            tr.wait(30)
            total = 0
            for line in open(out):
                f = line.split()
                if f and f[-1] == "total":
                    total = int(f[3])
            fig("syscalls.%s.per_unit" % name, total / units, "syscalls")
        worker = children(s.fcgi.pid)[0]
        traced("add", worker, lambda: loadgen(s.http_port, "add", conns=32, jobs=n, delay_min=600,
                                              delay_max=3600, ttr=60, body_size=200, topic="p",
                                              tag="a"), n)
        preload_ready(s, n, "d", "p")
        traced("pop_finish", worker, lambda: loadgen(s.http_port, "drain", conns=32, jobs=n,
                                                     topic="d"), n)
        body = json.dumps({"topic": "w1", "id": "ceil-0000001", "delay": 1800.5, "ttr": 60,
                           "body": "x" * 198})
        cw = children(s.ceiling.pid)[0]
        traced("ceiling", cw, lambda: loadgen(s.http_port, "fixed", conns=32, jobs=n, method="POST",
                                              path="/ceil/add", body=body), n)
    finally:
        s.stop()


# --------------------------------------------------------------------------
# Ratios and main
# --------------------------------------------------------------------------

def ratios():
    def v(k):
        return FIGS.get(k, {}).get("value")

    def ratio(name, a, b):
        if v(a) and v(b):
            fig(name, v(a) / v(b), "x")
    ratio("ratio.w1_single_to_ceiling", "w1.delayq.add.jobs_s", "ceiling.evalsha.req_s")
    ratio("ratio.w2_single_to_ceiling", "w2.delayq.drain.jobs_s", "ceiling.evalsha.req_s")
    ratio("ratio.w2_single_req_to_ceiling", "w2.delayq.drain.req_s", "ceiling.evalsha.req_s")
    ratio("ratio.w2_fap_to_ceiling", "w2.delayq.drain_fap.jobs_s", "ceiling.evalsha.req_s")
    ratio("ratio.ceiling_to_static", "ceiling.evalsha.req_s", "ceiling.static200.req_s")
    for peer in ("beanstalkd", "beanstalkd_binlog", "bullmq"):
        ratio("ratio.w1_single_to_%s" % peer, "w1.delayq.add.jobs_s", "w1.%s.add.jobs_s" % peer)
        ratio("ratio.w1_batch_to_%s" % peer, "w1.delayq.add_batch100.jobs_s", "w1.%s.add.jobs_s" % peer)
        ratio("ratio.w2_single_to_%s" % peer, "w2.delayq.drain.jobs_s", "w2.%s.drain.jobs_s" % peer)
        ratio("ratio.w2_batch_to_%s" % peer, "w2.delayq.drain_count100.jobs_s",
              "w2.%s.drain.jobs_s" % peer)
        ratio("ratio.w2_fap_to_%s" % peer, "w2.delayq.drain_fap.jobs_s", "w2.%s.drain.jobs_s" % peer)
        ratio("ratio.w3_p99_to_%s" % peer, "w3.delayq.late_p99_ms", "w3.%s.late_p99_ms" % peer)
    # BullMQ behind HTTP: the same hop per request as delayq's
    ratio("ratio.w1_single_to_bullmq_http", "w1.delayq.add.jobs_s", "w1.bullmq_http.add.jobs_s")
    ratio("ratio.w2_single_to_bullmq_http", "w2.delayq.drain.jobs_s", "w2.bullmq_http.drain.jobs_s")
    ratio("ratio.w2_fap_to_bullmq_http", "w2.delayq.drain_fap.jobs_s",
          "w2.bullmq_http.drain_fap.jobs_s")
    # the stack scripts/run starts, against bench's tuned one
    for k in ("w1.%s.add.jobs_s", "w1.%s.add_batch100.jobs_s", "w2.%s.drain.jobs_s",
              "w2.%s.drain_fap.jobs_s", "w2.%s.drain_count100.jobs_s", "w3.%s.late_p99_ms"):
        ratio("ratio.run_to_bench." + k.replace("%s.", ""), k % "delayq_run", k % "delayq")
    ratio("ratio.w3_timer_cpu_to_beanstalkd", "w3.delayq.timer_cpu_s", "w3.beanstalkd.server_cpu_s")
    ratio("ratio.w5_two_timers_to_one", "w5.delayq.timers2.jobs_s", "w5.delayq.timers1.jobs_s")
    for phase in ("add_batch100", "drain_count100"):
        ratio("ratio.cluster_to_single.%s.jobs_s" % phase, "cluster.cluster.%s.jobs_s" % phase,
              "cluster.single.%s.jobs_s" % phase)
        ratio("ratio.cluster_to_single.%s.redis_cpu" % phase,
              "cluster.cluster.%s.redis_cpu_us_per_job" % phase,
              "cluster.single.%s.redis_cpu_us_per_job" % phase)
        # With Redis the bound, each master gives one CPU-s per second, so N
        # masters sustain about N / (busiest master's share of a job's cost).
        if v("cluster.cluster.%s.busiest_master_cpu_us_per_job" % phase):
            for masters in (3, 6, 12):
                fig("projection.cluster.%s.masters%d.jobs_s" % (phase, masters),
                    1e6 * masters / (3 * v("cluster.cluster.%s.busiest_master_cpu_us_per_job"
                                           % phase)), "jobs/s")
        if v("cluster.single.%s.redis_cpu_us_per_job" % phase):
            fig("projection.single.%s.jobs_s" % phase,
                1e6 / v("cluster.single.%s.redis_cpu_us_per_job" % phase), "jobs/s")


# The workloads that also run against the stack scripts/run starts (the
# others need bench's Stack: its ceiling backend, its process handles).
RUN_STACK_WORKLOADS = {"w1", "w2", "w3"}


def run_stack(P, what, outdir):
    """w1, w2, w3 (those asked for) against the stack scripts/run starts,
    as figures 'delayq_run'."""
    s = RunStack().start()
    try:
        if "w1" in what:
            timed("w1_run", w1, s, P, "w1", "w1", "delayq_run")
        if "w2" in what:
            timed("w2_run", w2, s, P, "delayq_run")
        if "w3" in what:
            timed("w3_run", w3, s, P, outdir, "delayq_run")
    finally:
        s.stop()


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="+",
                    help="all, ceiling, w1..w7, beanstalkd, bullmq, bullmq_http; cluster, w3stages, "
                         "push, tune, group, moves, pops, adds, profile, perf, syscalls, jobs, purge, "
                         "keys (these fourteen are not in all)")
    ap.add_argument("--quick", action="store_true", help="smoke profile: small counts")
    ap.add_argument("--stack", choices=("bench", "run", "both"), default="bench",
                    help="which delayq stack w1, w2, w3 run against: bench's own tuned one "
                         "(figures 'delayq'), the one scripts/run starts with its defaults "
                         "(figures 'delayq_run'; the other workloads need bench's), or both")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--nginx-workers", type=int, default=2)
    ap.add_argument("--keepalive", type=int, default=SHIPPED_KEEPALIVE,
                    help="idle nginx-to-backend connections per nginx worker "
                         "(default: the shipped nginx/delayq-upstream.conf, %d)" % SHIPPED_KEEPALIVE)
    ap.add_argument("--redis-unix", action="store_true", help="delayq talks to Redis on a unix socket")
    ap.add_argument("--cluster-shards", type=int, default=ClusterStack.SHARDS,
                    help="cluster: delayq's shards on the Cluster (default %d)" % ClusterStack.SHARDS)
    ap.add_argument("--w7-base", type=int, help="jobs stored for W7's large case (default 10M full, 100k quick)")
    ap.add_argument("--big", type=int, help="jobs for W4/W5/W6 (default 1M full, 100k quick)")
    ap.add_argument("--jobs-big", type=int, help="jobs stored for the jobs workload's large case (default 1M full)")
    ap.add_argument("--json", help="write the figures as JSON here")
    ap.add_argument("--outdir", default=os.path.join(HERE, "out"), help="lateness samples go here")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs")
    ap.add_argument("--library", help="moves, pops, adds: this src/store/lua_library.lua instead of --build's")
    ap.add_argument("--baseline", help="pops, adds: also an unlimited pop of this (another build's) "
                                       "src/store/lua_library.lua, in the same Redis and rounds")
    ap.add_argument("--build", default=TOP,
                    help="take delayq-fcgi and delayq-timer from this build dir (another "
                         "checkout, to compare two versions in one run); default the top dir")
    ARGS = ap.parse_args()
    P = dict(QUICK if ARGS.quick else FULL)
    if ARGS.w7_base:
        P["w7_base"] = ARGS.w7_base
    if ARGS.big:
        P["big"] = ARGS.big
    if ARGS.jobs_big:
        P["jobs_big"] = ARGS.jobs_big
    os.makedirs(ARGS.outdir, exist_ok=True)
    what = set(ARGS.what)
    if "all" in what:
        what |= {"ceiling", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "beanstalkd", "bullmq",
                 "bullmq_http"}
    for b in (LOADGEN, CEILING):
        if not os.path.exists(b):
            sys.exit("missing %s: run make -C bench" % b)
    started = time.time()
    global BIN_DIR
    BIN_DIR = tempfile.mkdtemp(prefix="delayq-bench-bin-")
    build = {}
    for b in ("delayq-fcgi", "delayq-timer", "delayq-push"):
        shutil.copy2(os.path.join(ARGS.build, b), os.path.join(BIN_DIR, b))
        import hashlib
        with open(os.path.join(BIN_DIR, b), "rb") as f:
            build[b] = hashlib.sha256(f.read()).hexdigest()[:16]
    git = subprocess.run(["git", "-C", ARGS.build, "log", "-1", "--format=%h %ad %s", "--date=iso"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode().strip()
    build["git_head"] = git
    note("binaries: %s" % build)
    note("profile %s, settings: workers=%d threads=%d nginx_workers=%d keepalive=%d redis_unix=%s"
         % ("quick" if ARGS.quick else "full", ARGS.workers, ARGS.threads, ARGS.nginx_workers,
            ARGS.keepalive, ARGS.redis_unix))
    need_stack = what & {"ceiling", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "jobs", "purge", "keys"}
    if ARGS.stack == "run":
        need_stack -= RUN_STACK_WORKLOADS
    if ARGS.stack in ("run", "both") and what & RUN_STACK_WORKLOADS:
        timed("run_stack", run_stack, P, what, ARGS.outdir)
    if need_stack:
        s = Stack(workers=ARGS.workers, threads=ARGS.threads, redis_unix=ARGS.redis_unix,
                  nginx_workers=ARGS.nginx_workers, keepalive=ARGS.keepalive)
        try:
            s.start()
            if "ceiling" in what:
                timed("ceiling", ceiling, s, P)
            if "w1" in what:
                timed("w1", w1, s, P)
            if "w2" in what:
                timed("w2", w2, s, P)
            if "w3" in what:
                timed("w3", w3, s, P, ARGS.outdir)
            rate = None
            if what & {"w4", "w6", "w5"}:
                rate = timed("w4_w6", w4_w6, s, P)
            if "w5" in what:
                timed("w5", w5, s, P, rate)
            if "w7" in what:
                timed("w7", w7, s, P)
            if "jobs" in what:
                timed("jobs", jobs_pages, s, P)
            if "purge" in what:
                timed("purge", purge_big, s, P)
            if "keys" in what:
                timed("keys", keys, s, P)
        finally:
            s.stop()
    if "beanstalkd" in what:
        timed("beanstalkd", beanstalkd, P, False, ARGS.outdir)
        timed("beanstalkd_binlog", beanstalkd, P, True, ARGS.outdir)
    if "bullmq" in what:
        timed("bullmq", bullmq, P, ARGS.outdir)
    if "bullmq_http" in what:
        timed("bullmq_http", bullmq_http, P)
    if "cluster" in what:
        timed("cluster", cluster_vs_single, P, ARGS.outdir)
    if "w3stages" in what:
        timed("w3stages", w3_stages, P, ARGS.outdir)
    if "push" in what:
        timed("push", push, P)
    if "tune" in what:
        timed("tune", tune, P)
    if "group" in what:
        timed("group", group_commit_ab, P)
    if "moves" in what:
        timed("moves", move_cost, P, ARGS.library)
    if "pops" in what:
        timed("pops", pop_cost, P, ARGS.library, ARGS.baseline)
    if "adds" in what:
        timed("adds", add_cost, P, ARGS.library, ARGS.baseline)
    if "profile" in what:
        timed("profile", profile, P)
    if "perf" in what:
        timed("perf_profile", perf_profile, P, ARGS.outdir)
    if "syscalls" in what:
        timed("syscalls", syscalls, P, ARGS.outdir)
    shutil.rmtree(BIN_DIR, ignore_errors=True)
    ratios()
    note("total %.0f s" % (time.time() - started))
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"profile": "quick" if ARGS.quick else "full", "params": P,
                       "settings": {k: getattr(ARGS, k) for k in
                                    ("workers", "threads", "nginx_workers", "keepalive", "redis_unix")},
                       "argv": sys.argv, "build": build, "load_average": LOADS, "figures": FIGS}, f, indent=1)


if __name__ == "__main__":
    main()

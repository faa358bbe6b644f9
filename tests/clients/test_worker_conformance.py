#!/usr/bin/env python3
"""The Worker conformance suite: every client's Worker (Python, PHP, Java, Node.js)
runs the same scenarios against the real service (dqtest.Deployment), and
each must leave its job finished, released or reserved (left to its TTR)
exactly as the clients' READMEs document.

A client takes part through a driver: a small program that runs its Worker
once per scenario and prints one JSON line per run (see DRIVERS below and
tests/clients/conformance/worker_driver.py for the protocol):

    driver TOKEN BEHAVIOUR TOPIC URL [BEHAVIOUR TOPIC URL ...]
    -> {"behaviour", "topic", "run": "returned" | "raised:<type>", "seconds", "calls"}

Every behaviour but raise:<type> is the same for every client; the kinds of
exception are each language's own (RAISES). The scenarios:

- a stop at each point of the loop: before the first pop, during a
  long-poll (run() returns at once), while the handler runs, as the pop
  returns (before the worker clears its interrupt: the timing is forced
  where the driver can hook the client), and after the handler returned
  (the finish rides on the next pop, which the stop cuts short);
- a handler that throws each kind of exception its language has: the job is
  released; a kind that means "stop the program" (Python's KeyboardInterrupt,
  SystemExit; Java's Error) also stops the worker, and run() raises it;
- a timeout before the request was sent (the service cannot be reached
  after the pop: the finish or release never arrives, the job is left to
  its TTR), and after it was sent, without (a request that hangs: left to
  the TTR) or with its effect (the answer is lost: finished or released).
  These go through FaultProxy, a forwarder in front of the service.

A new client adds a driver, a DRIVERS entry and its RAISES.
Without php-cli, a JDK (>= 17) or node (>= 18) the test skips (exit 77, dqtest.tools)
naming the package, or fails under DQTEST_REQUIRE_ALL=1 (CI); naming
clients on the command line runs only those.

Run: DELAYQ_SRC_DIR=$PWD DELAYQ_BUILD_DIR=$PWD PYTHONPATH=tests:clients/python \\
     python3 tests/clients/test_worker_conformance.py [python php java]
"""

import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import dqtest
from dqtest import tools
import delayq
import test_java_client

TOKEN = "worker-conformance-token-0123456789"
DRIVER_TIMEOUT = 240

# The exceptions each driver's handler can throw, and what the Worker does
# after releasing the job: "continues" (run() goes on) or "stops" (run()
# raises it). The handler asks for a stop before it throws, so that run()
# returns after that one job either way.
RAISES = {
    "python": {"ValueError": "continues", "KeyboardInterrupt": "stops", "SystemExit": "stops",
               "GeneratorExit": "stops", "CustomBaseException": "stops"},
    "php": {"Exception": "continues", "RuntimeException": "continues", "Error": "continues",
            "TypeError": "continues", "DivisionByZeroError": "continues",
            "ErrorException": "continues"},
    "java": {"Exception": "continues", "RuntimeException": "continues",
             "InterruptedException": "continues", "AssertionError": "stops",
             "StackOverflowError": "stops", "OutOfMemoryError": "stops"},
    # JavaScript throws any value; none of them means "stop the program".
    "node": {"Error": "continues", "TypeError": "continues", "RangeError": "continues",
             "AbortError": "continues", "rejection": "continues", "string": "continues",
             "undefined": "continues"},
}

# name: (driver behaviour, FaultProxy mode or None, the job's end, run() ends by)
# The job's end: "untouched" (still delayed: never popped), "finished",
# "released" (delayed again by the backoff, attempts 1), "reserved" (left to
# its TTR). run(): "returned", or "raised" (the kind thrown).
SCENARIOS = {
    "stop-before-pop": ("stop-before-pop", None, "ready", "returned"),
    "stop-during-poll": ("stop-during-poll", None, "untouched", "returned"),
    "stop-in-handler": ("stop-in-handler", None, "finished", "returned"),
    "stop-as-pop-returns": ("stop-as-pop-returns", None, "finished", "returned"),
    "stop-after-handler": ("stop-after-handler", None, "finished", "returned"),
    "finish-cannot-connect": ("stop-in-handler", "refuse-after-pop", "reserved", "returned"),
    "finish-no-answer": ("stop-in-handler", "hang", "reserved", "returned"),
    "finish-answer-lost": ("stop-in-handler", "drop-answer", "finished", "returned"),
    "release-cannot-connect": ("stop-in-handler-then-raise", "refuse-after-pop", "reserved",
                               "returned"),
    "release-no-answer": ("stop-in-handler-then-raise", "hang", "reserved", "returned"),
    "release-answer-lost": ("stop-in-handler-then-raise", "drop-answer", "released", "returned"),
}

# Scenarios a driver cannot force, with the reason (the README says so too).
NOT_FORCED = {
    ("php", "stop-before-pop"): "run() starts afresh (a PHP Worker may run again): a stop() "
                                "before it is not a stop of that run",
    ("php", "stop-as-pop-returns"): "PHP runs one thread: a signal is only handled between "
                                    "statements, where the Worker checks for it",
    ("java", "stop-as-pop-returns"): "Client is final: the driver cannot hook the pop; the "
                                     "Worker orders stop() and the end of a pop under one lock",
}


def log(msg):
    print("test_worker_conformance: %s" % msg, flush=True)


# ---------------------------------------------------------------- the drivers

def python_driver(build_dir):
    env = {"PYTHONPATH": os.path.join(SRC_DIR, "clients", "python")}
    return [sys.executable, os.path.join(HERE, "conformance", "worker_driver.py")], env


def php_driver(build_dir):
    needs = tools.Needs("test_worker_conformance (php)")
    php = needs.program("php", "php-cli")
    needs.settle()
    return [php, os.path.join(HERE, "conformance", "worker_driver.php")], {}


def java_driver(build_dir):
    test_java_client.check_tools()
    classpath = test_java_client.build(build_dir)
    # One JVM runs every scenario; the quick compiler and the serial
    # collector halve its start on two shared cores.
    return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-cp", classpath,
            "io.delayq.ConformanceDriver"], {}


def node_driver(build_dir):
    needs = tools.Needs("test_worker_conformance (node)")
    node = needs.program("node", "nodejs")
    needs.settle()
    return [node, os.path.join(HERE, "conformance", "worker_driver.mjs")], {}


DRIVERS = {"python": python_driver, "php": php_driver, "java": java_driver, "node": node_driver}


# ---------------------------------------------------------------- FaultProxy

def brought_a_job(pop_answer):
    """A pop's answer holds a job: its fields (count 1) or "jobs"."""
    try:
        a = json.loads(pop_answer)
    except ValueError:
        return False
    return bool(a.get("id") or a.get("jobs"))


class FaultProxy:
    """An HTTP forwarder to the service that fails /finish and /release (a
    pop is always forwarded):
    - "hang": reads the request and never answers it (the client's timeout
      after the request was sent; the service never saw it);
    - "drop-answer": forwards it, then closes the connection without the
      answer (the service acted; the client cannot know);
    - "refuse-after-pop": after relaying a pop that brought a job, stops
      listening and closes its connections, so the next connect is refused
      (nothing is sent)."""

    def __init__(self, upstream_port, mode):
        self.mode = mode
        self.closed = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                faulty = self.path.rstrip("/").rsplit("/", 1)[-1] in ("finish", "release")
                if faulty and proxy.mode == "hang":
                    proxy.closed.wait(30)
                    self.close_connection = True
                    return
                status, headers, data = proxy.forward(self.command, self.path, self.headers, body)
                if faulty and proxy.mode == "drop-answer":
                    self.close_connection = True
                    return
                if proxy.mode == "refuse-after-pop" and self.path.endswith("/pop") and \
                        brought_a_job(data):
                    self.close_connection = True
                    proxy.stop_listening()
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            do_GET = do_POST = do_any

            def log_message(self, *args):
                pass

        self.upstream_port = upstream_port
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, method, path, headers, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            keep = {k: v for k, v in headers.items() if k.lower() not in ("connection", "host")}
            conn.request(method, path, body=body, headers=keep)
            r = conn.getresponse()
            return r.status, r.getheaders(), r.read()
        finally:
            conn.close()

    def stop_listening(self):
        """Refuses connects from now on (a listening socket shut down is
        closed to new connections at once); the server's loop ends on a
        thread of its own, since shutdown() waits for it."""
        try:
            self.server.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        threading.Thread(target=self.close, daemon=True).start()

    def close(self):
        if not self.closed.is_set():
            self.closed.set()
            self.server.shutdown()
            self.server.server_close()


# ---------------------------------------------------------------- the runs

def scenarios_for(client):
    out = dict(SCENARIOS)
    for kind, after in RAISES[client].items():
        out["raise:" + kind] = ("raise:" + kind, None, "released",
                                "returned" if after == "continues" else "raised")
    return out


def job_state(c, id):
    """The job's end as SCENARIOS names it."""
    try:
        info = c.get(id)
    except delayq.NotFound:
        return "gone"
    if info.state == "finished":
        return "finished"
    if info.state == "delay" and info.attempts == 1:
        return "released"
    if info.state == "delay" and info.attempts == 0:
        return "untouched"
    return info.state


def run_client(name, d, c, build_dir):
    argv, env_extra = DRIVERS[name](build_dir)
    scenarios = scenarios_for(name)
    stamp = dqtest.unique("wc")
    specs, proxies, jobs = [], [], {}
    for scenario, (behaviour, mode, _, _) in scenarios.items():
        topic = "%s-%s-%s" % (stamp, name, scenario.replace(":", "-"))
        c.policy(topic, keep=600)
        id = topic + "-1"
        delay = 600 if scenario == "stop-during-poll" else 0
        c.add(topic, {"scenario": scenario}, id=id, ttr=60, delay=delay)
        jobs[scenario] = id
        url = "http://127.0.0.1:%d" % d.http_port
        if mode:
            proxy = FaultProxy(d.http_port, mode)
            proxies.append(proxy)
            url = proxy.url
        specs += [behaviour, topic, url]
    env = dict(os.environ, **env_extra)
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv + [TOKEN] + specs, env=env, stdout=subprocess.PIPE,
                           timeout=DRIVER_TIMEOUT, cwd=tempfile.gettempdir())
    finally:
        for proxy in proxies:
            proxy.close()
    log("%s: driver exit %d in %.1f s" % (name, r.returncode, time.monotonic() - t0))
    runs = {}
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("{"):
            one = json.loads(line)
            runs[one["topic"]] = one
    failures = []
    for scenario, (behaviour, mode, want_state, want_run) in scenarios.items():
        topic = jobs[scenario][:-2]
        got = runs.get(topic)
        if got is None:
            failures.append("%s %s: the driver printed nothing" % (name, scenario))
            continue
        if got.get("skipped"):
            if (name, scenario) not in NOT_FORCED:
                failures.append("%s %s: skipped (%s)" % (name, scenario, got["skipped"]))
            continue
        state = job_state(c, jobs[scenario])
        run = got["run"] if got["run"] == "returned" else "raised"
        problems = []
        if state != want_state:
            problems.append("job %s, want %s" % (state, want_state))
        if run != want_run:
            problems.append("run() %s, want %s" % (got["run"], want_run))
        elif want_run == "raised" and got["run"] != "raised:" + behaviour.split(":", 1)[1]:
            problems.append("run() %s, want it to raise %s" % (got["run"], behaviour))
        if scenario == "stop-during-poll" and got["seconds"] > 5 * dqtest.SLOW:
            problems.append("run() took %.1f s to return after a stop during a 20 s poll"
                            % got["seconds"])
        want_calls = 0 if want_state in ("ready", "untouched") else 1
        if got["calls"] != want_calls:
            problems.append("the handler ran %d time(s), want %d" % (got["calls"], want_calls))
        log("%s %-28s %s" % (name, scenario, "; ".join(problems) or "ok (%s, %s, %.1f s)"
                             % (state, got["run"], got["seconds"])))
        if problems:
            failures.append("%s %s: %s" % (name, scenario, "; ".join(problems)))
    return failures


def main(argv):
    dqtest.require_build()
    dqtest.stop_on_sigterm()
    clients = argv[1:] or list(DRIVERS)
    tmp, tokens = test_java_client.temp_dir_with_token("delayq-conformance-", TOKEN,
                                                       "the conformance suite")
    failures = []
    try:
        with dqtest.Deployment(workers=1, threads=8, fcgi_flags={"auth_file": tokens}) as d:
            c = delayq.Client("http://127.0.0.1:%d" % d.http_port, token=TOKEN)
            for name in clients:
                failures += run_client(name, d, c, os.path.join(tmp, "build-" + name))
            if failures:
                d.failed = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        log("FAIL: " + f)
    log("PASS" if not failures else "FAIL (%d)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

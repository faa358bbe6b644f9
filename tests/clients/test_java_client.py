#!/usr/bin/env python3
"""The Java client (clients/java) against a real deployment (dqtest.Deployment,
with bearer-token auth on and one delayq-push signing callbacks): builds it
with its Makefile (javac, jar) into a temp dir, runs its test programs (the
JSON reader/writer, the webhook verifier, every Client command, the Worker's
concurrency, touch heartbeats and failures, the receiver example taking
real signed callbacks), then runs a Java worker process and stops it with
SIGTERM while a job is in hand (the job must end and be finished, the
process exit promptly), then stops Redis and checks that every command is
a 503 UnavailableException.

A JDK (javac, jar, java >= 17) and make are needed: without them this test
skips (exit 77) naming the Debian package, or fails under
DQTEST_REQUIRE_ALL=1 (scripts/test, CI); a JDK older than 17 fails.

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. PYTHONPATH=tests:clients/python \
     python3 tests/clients/test_java_client.py
"""

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

import dqtest
from dqtest import tools
import delayq

TOKEN = "java-client-test-token-0123456789"
SECRET = "whsec_" + base64.b64encode(b"the java client tests' secret!!!").decode()
BUILD_TIMEOUT = 180
TESTS_TIMEOUT = 300
# DQTEST_JAVA_TESTS="ClientTest.testUpsert WorkerTest" runs only those.
TEST_CLASSES = os.environ.get("DQTEST_JAVA_TESTS", "JsonTest WebhookVerifierTest ClientTest WorkerTest PushReceiverTest DelayQueueTest").split()


# What clients/java/pom.xml builds with, from Debian's repository (the
# versions it names).
MAVEN_REPO = "/usr/share/maven-repo"
MAVEN_PLUGINS = [("maven-resources-plugin/3.3.0", "libmaven-resources-plugin-java"),
                 ("maven-compiler-plugin/3.10.1", "libmaven-compiler-plugin-java"),
                 ("maven-surefire-plugin/2.22.3", "libsurefire-java"),
                 ("maven-jar-plugin/3.3.0", "libmaven-jar-plugin-java"),
                 ("maven-source-plugin/3.2.1", "libmaven-source-plugin-java"),
                 ("maven-javadoc-plugin/3.4.1", "libmaven-javadoc-plugin-java"),
                 ("maven-install-plugin/3.1.0", "libmaven-install-plugin-java")]


def log(msg):
    print("test_java_client: %s" % msg, flush=True)


def fail(msg):
    print("test_java_client: FAIL: %s" % msg, file=sys.stderr, flush=True)
    sys.exit(1)


def check_tools():
    needs = tools.Needs("test_java_client")
    for tool in ("javac", "jar", "java"):
        needs.program(tool, "openjdk-17-jdk-headless")
    needs.program("make", "make")
    needs.program("mvn", "maven")
    for plugin, package in MAVEN_PLUGINS:
        needs.path(os.path.join(MAVEN_REPO, "org/apache/maven/plugins", plugin), package,
                   "Maven's %s" % plugin.split("/")[0])
    needs.settle()
    r = subprocess.run(["javac", "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode("utf-8", "replace").strip()
    try:
        major = int(out.split()[1].split(".")[0])
    except (IndexError, ValueError):
        major = 0
    if major < 17:
        fail("javac >= 17 needed, found %r" % out)


def build(build_dir):
    """The client, its examples and its tests, with the client's own Makefile."""
    argv = ["make", "-s", "--no-print-directory", "-C", os.path.join(SRC_DIR, "clients", "java"),
            "BUILD=" + build_dir, "tests"]
    log("build: %s" % " ".join(argv))
    # Not the variables of a make check that runs this (TESTS=... would
    # reach the client's Makefile through MAKEFLAGS).
    env = dict((k, v) for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"))
    t0 = time.monotonic()
    r = subprocess.run(argv, env=env, timeout=BUILD_TIMEOUT)
    if r.returncode != 0:
        fail("the Java client did not build (make exit %d)" % r.returncode)
    log("built in %.1f s" % (time.monotonic() - t0))
    with zipfile.ZipFile(os.path.join(build_dir, "delayq.jar")) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    if "Automatic-Module-Name: io.delayq.client" not in manifest.splitlines():
        fail("the jar's manifest names no module: %r" % manifest)
    return ":".join(os.path.join(build_dir, p) for p in ("delayq.jar", "examples", "tests"))


def maven_install(tmp):
    """The Maven build, offline, as the client's README gives it: the jar
    (naming its module), its sources and javadoc jars, installed as
    io.delayq:delayq-client into a local repository."""
    java_dir = os.path.join(SRC_DIR, "clients", "java")
    out, repo = os.path.join(tmp, "maven"), os.path.join(tmp, "m2")
    argv = ["mvn", "-q", "-B", "-Dstyle.color=never", "-s", os.path.join(java_dir, "maven-settings.xml"),
            "-Dmaven.repo.local=" + repo, "-Ddelayq.build=" + out, "-f",
            os.path.join(java_dir, "pom.xml"), "install"]
    log("maven: %s" % " ".join(argv))
    t0 = time.monotonic()
    r = subprocess.run(argv, timeout=BUILD_TIMEOUT)
    if r.returncode != 0:
        fail("mvn install failed (exit %d)" % r.returncode)
    installed = os.path.join(repo, "io", "delayq", "delayq-client", "0.1.0")
    for kind in ("", "-sources", "-javadoc"):
        if not os.path.exists(os.path.join(installed, "delayq-client-0.1.0%s.jar" % kind)):
            fail("mvn install did not install delayq-client-0.1.0%s.jar" % kind)
    with zipfile.ZipFile(os.path.join(installed, "delayq-client-0.1.0.jar")) as jar:
        if "Automatic-Module-Name: io.delayq.client" not in jar.read(
                "META-INF/MANIFEST.MF").decode().splitlines():
            fail("the Maven jar's manifest names no module")
        if "io/delayq/DelayQueue.class" not in jar.namelist():
            fail("the Maven jar lacks the client's classes")
    log("maven: installed in %.1f s" % (time.monotonic() - t0))


def java(classpath, args, env, label, timeout=TESTS_TIMEOUT):
    argv = ["java", "-cp", classpath] + args
    log("%s: %s" % (label, " ".join(argv)))
    p = subprocess.Popen(argv, env=env, cwd=tempfile.gettempdir())
    try:
        return p.wait(timeout * dqtest.SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        log("%s: did not finish within %d s" % (label, timeout))
        return 1


def sigterm_worker(classpath, env, client):
    """A Java worker process handling a 2-second job gets SIGTERM mid-job: it
    ends the job, finishes it, cancels its other thread's 20 s long-poll and
    exits. Returns a failure message or None."""
    topic = dqtest.unique("sigterm")
    out = tempfile.TemporaryFile()
    p = subprocess.Popen(["java", "-cp", classpath, "io.delayq.SignalWorker", topic, "2"], env=env,
                         stdout=out, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())

    def output():
        out.seek(0)
        return out.read().decode("utf-8", "replace")

    try:
        deadline = time.monotonic() + 20 * dqtest.SLOW
        while "running" not in output():
            if p.poll() is not None or time.monotonic() > deadline:
                return "the worker did not start:\n" + output()
            time.sleep(0.05)
        job = topic + "-1"
        client.add(topic, {"n": 1}, id=job)
        while "start " + job not in output():
            if p.poll() is not None or time.monotonic() > deadline:
                return "the worker did not take the job:\n" + output()
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGTERM)
        t0 = time.monotonic()
        try:
            rc = p.wait(15 * dqtest.SLOW)
        except subprocess.TimeoutExpired:
            return "the worker did not exit within 15 s of SIGTERM:\n" + output()
        took = time.monotonic() - t0
        text = output()
        log("SIGTERM: exit %d after %.1f s; output:\n%s" % (rc, took, text.rstrip()))
        lines = text.split()
        # ("stopped 1", printed after run() returned, may be cut short: the
        # JVM exits as soon as run() returned on SIGTERM)
        if "end " + job not in text:
            return "the job in hand did not end before the worker stopped"
        if rc not in (0, 143):
            return "exit status %d" % rc
        if took > 2 + 5 * dqtest.SLOW:
            return "the worker took %.1f s to stop (its other thread's long-poll was not cancelled?)" % took
        try:
            info = client.get(job)
            return "the job was not finished: %r" % (info,)
        except delayq.NotFound:
            pass
        if lines.count("start") != 1:
            return "the job was handled %d times" % lines.count("start")
        return None
    finally:
        if p.poll() is None:
            p.kill()  # by its Popen, i.e. its pid
            p.wait()
        out.close()


def temp_dir_with_token(prefix, token, whose):
    """A new temp dir (readable by the deployment's processes) holding a
    tokens file with token; returns (dir, the file's path)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("# %s' token\n%s\n" % (whose, token))
    os.chmod(tmp, 0o755)
    return tmp, tokens


def main():
    check_tools()
    dqtest.require_build()
    dqtest.stop_on_sigterm()

    tmp, tokens = temp_dir_with_token("delayq-java-", TOKEN, "the Java client tests")
    failures = []
    try:
        classpath = build(os.path.join(tmp, "build"))
        maven_install(tmp)
        with dqtest.Deployment(workers=1, threads=8, fcgi_flags={"auth_file": tokens}, n_pushers=1,
                               push_allow="*,loopback", push_grace_ms=1000,
                               push_flags={"push_secret": SECRET}) as c:
            env = dict(os.environ)
            env["DELAYQ_URL"] = "http://127.0.0.1:%d" % c.http_port
            env["DELAYQ_TOKEN"] = TOKEN
            env["DELAYQ_TEST_PUSH_SECRET"] = SECRET
            env["DELAYQ_TEST_SLOW"] = str(dqtest.SLOW)
            if java(classpath, ["io.delayq.RunTests"] + TEST_CLASSES, env, "tests"):
                failures.append("the Java tests")
            problem = sigterm_worker(classpath, env, delayq.Client(env["DELAYQ_URL"], token=TOKEN))
            if problem:
                failures.append("SIGTERM: " + problem)
            c.stop_redis()
            if java(classpath, ["io.delayq.RunTests", "RedisDownTest"], env, "redis down"):
                failures.append("the redis-down test")
            if failures:
                c.failed = True  # keep the deployment's logs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        log("FAIL: " + "; ".join(failures))
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Upgrade test: for each commit of tests/upgrade/layouts (every commit that
changed delayq's stored layout), build that commit from this repository's
own history (a git worktree, an autotools build of its daemons), start it,
fill every state it knows (delayed for an hour and due in seconds, ready,
reserved, buried, a batch, callbacks mid-retry, schedules, a paused topic,
a 20-digit integer, a 60 KB body and odd escapes), stop it, and start the
build under test on the same Redis. Then:
  - before `delayq-fcgi --migrate`, a layout that needs it answers 503
    naming the step (and /health says the layout), logged once; a
    migration killed (-9) mid-way leaves the data refused, and the next
    run finishes it with every job of 60,000 more kept;
  - after it, every job is in the state it should be and is delivered
    byte for byte as the old release stored it; stats, /metrics, pop,
    kick, add, GET /jobs, schedules and resume work on the old topics; and
    the stored structures pass the invariants (tests/dqtest/invariants.py).
A layout marked side-by-side also runs old and new processes together
(docs/OPERATIONS.md allows it there) under a mixed load first.

usage: tests/upgrade/run.py [--only COMMIT ...] [--keep-builds DIR]
  DELAYQ_BUILD_DIR  the build under test (default: the repository's top)
Old builds go to a temp dir (or DIR, kept and reused) and skip their tests.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests"))

from dqtest import Resp, invariants  # noqa: E402
from dqtest.deployment import BUILD_DIR, Deployment  # noqa: E402
from dqtest.receiver import Receiver  # noqa: E402

NEW_BUILD = BUILD_DIR
SOON_S = 6  # the "due soon" job becomes due after the upgrade
LAYOUT = 9  # the stored layout of the build under test
READ_AS_IS = 9  # data of this layout on is read as it is: no --migrate
B_INT = "12345678901234567890"
B_OBJ = '{"order":42,"items":["a","b"],"nested":{"z":1,"a":[]}}'
B_ODD = '{"s":"\\u0000\\u00e9\\ud83d\\ude00\\"q\\\\","n":[1.0e+2,-0,1E-7,true,null]}'
B_BIG = '"' + "x" * 60000 + '"'
BULK = 60000  # jobs of the interrupted migration, half ready, half delayed


def log(msg):
    print("upgrade: %s" % msg, flush=True)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# ------------------------------------------------------------------ raw JSON

def raw_json(text, i=0):
    """Parses JSON text keeping each value's exact text: returns (node, end)
    where node is (raw text, children): a dict of member -> node for an
    object, a list of nodes for an array, None for a scalar."""
    ws = " \t\r\n"
    while text[i] in ws:
        i += 1
    start = i
    c = text[i]
    if c == "{" or c == "[":
        kids = {} if c == "{" else []
        i += 1
        while True:
            while text[i] in ws + ",":
                i += 1
            if text[i] in "}]":
                i += 1
                break
            if c == "{":
                key_node, i = raw_json(text, i)
                while text[i] in ws + ":":
                    i += 1
                val, i = raw_json(text, i)
                kids[json.loads(key_node[0])] = val
            else:
                val, i = raw_json(text, i)
                kids.append(val)
        return (text[start:i], kids), i
    if c == '"':
        i += 1
        while text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        return (text[start:i + 1], None), i + 1
    while i < len(text) and text[i] not in ws + ",]}":
        i += 1
    return (text[start:i], None), i


def raw(body):
    return raw_json(body.decode("utf-8"))[0]


def val(node, *path):
    for p in path:
        node = node[1][p]
    return json.loads(node[0])


# ------------------------------------------------------------------ builds

def build(commit, into):
    """The commit's daemons (not its tests, nor its command-line client),
    built in a worktree of this repository at `into`."""
    if os.path.exists(os.path.join(into, "delayq-fcgi")):
        return into
    drop_worktree(into)  # what a build that failed or was stopped left
    if subprocess.run(["git", "-C", TOP, "cat-file", "-e", commit + "^{commit}"],
                      stderr=subprocess.DEVNULL).returncode != 0:
        raise Failure("commit %s is not in this clone's history (a shallow clone?)" % commit)
    targets = ["delayq-fcgi", "delayq-timer"]
    # The pusher's main, in the flat src/ of older commits or in src/push/.
    if any(subprocess.run(["git", "-C", TOP, "cat-file", "-e", commit + ":" + path],
                          stderr=subprocess.DEVNULL).returncode == 0
           for path in ("src/push_main.c", "src/push/push_main.c")):
        targets.append("delayq-push")
    subprocess.run(["git", "-C", TOP, "worktree", "add", "--force", "--detach", into, commit],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The daemons only, after the generated sources they include; configure's
    # answers are shared by the builds (one cache file).
    cache = os.path.join(os.path.dirname(into), "config.cache")
    steps = ("mkdir -p m4 && autoreconf -fi && ./configure -q -C --cache-file=%s && "
             "printf 'built-sources: $(BUILT_SOURCES)\\n' | make -f Makefile -f - built-sources && "
             "make -j2 %s") % (cache, " ".join(targets))
    r = subprocess.run(["sh", "-c", steps], cwd=into, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise Failure("building %s failed:\n%s" % (commit, r.stdout.decode()[-3000:]))
    return into


def drop_worktree(path):
    subprocess.run(["git", "-C", TOP, "worktree", "remove", "--force", path],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(path, ignore_errors=True)


def use_build(d, build_dir):
    d.fcgi_bin = os.path.join(build_dir, "delayq-fcgi")
    d.timer_bin = os.path.join(build_dir, "delayq-timer")
    d.push_bin = os.path.join(build_dir, "delayq-push")
    d.nginx_conf_script = os.path.join(build_dir, "scripts", "nginx-conf")


# ------------------------------------------------------------------ requests

def call(d, cmd, raw_fields="", **fields):
    """POST / in the command form every release serves -> (status, body
    bytes). raw_fields: JSON members written as given (exact bodies)."""
    obj = json.dumps(dict(command=cmd, **fields))
    if raw_fields:
        obj = obj[:-1] + "," + raw_fields + "}"
    st, _, body = d.post_raw("/", obj.encode("utf-8"),
                             {"Content-Type": "application/json"})
    return st, body


def ok(d, cmd, raw_fields="", **fields):
    st, body = call(d, cmd, raw_fields, **fields)
    check(st == 200, "%s %r answered %d: %s" % (cmd, fields, st, body[:300]))
    return raw(body)


def add(d, topic, jid, body, **fields):
    return ok(d, "add", '"body":' + body, topic=topic, id=jid, **fields)


def wait_for(what, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = pred()
        if r:
            return r
        time.sleep(0.1)
    raise Failure("timed out waiting for " + what)


# ------------------------------------------------------------------ the old release

def fill(d, features, receiver):
    """Jobs in every state the old release knows. Returns the ids of the
    jobs that must still exist."""
    add(d, "up", "d1", B_OBJ, delay=3600)
    add(d, "up", "d2", B_INT, delay=SOON_S)
    add(d, "up", "r1", B_INT)
    add(d, "up", "r2", B_ODD)
    add(d, "up", "r3", B_BIG)
    # Stale queue entries for layout 1: a deleted id added again, a finished one.
    add(d, "up", "again", '"first"')
    ok(d, "delete", id="again")
    add(d, "up", "again", '"second"')
    add(d, "up", "gone", '"done"')
    ok(d, "finish", id="gone")
    add(d, "res", "x1", B_ODD, ttr=2)
    check(val(ok(d, "pop", topic="res"), "id") == "x1", "pop of res gave x1")
    for jid in ("y1", "y2"):
        add(d, "bur", jid, B_INT if jid == "y1" else B_OBJ, retries=0)
        check(val(ok(d, "pop", topic="bur"), "id") == jid, "pop of bur gave " + jid)
        ok(d, "bury", id=jid)
    ok(d, "add", '"jobs":[{"topic":"bat","id":"b1","delay":3600,"body":%s},'
       '{"topic":"bat","id":"b2","body":%s}]' % (B_ODD, B_INT))
    ids = ["d1", "d2", "r1", "r2", "r3", "again", "x1", "y1", "y2", "b1", "b2"]
    if "push" in features:
        cb = {"url": receiver.url(), "timeout": 2}
        add(d, "hook", "h1", B_ODD, callback=cb, backoff=[3600])
        add(d, "hook", "h2", B_INT, callback=cb, delay=3600)
        wait_for("the first callback of h1", lambda: receiver.requests, 15)
        wait_for("h1 back in delay", lambda: val(ok(d, "get", id="h1"), "state") == "delay", 10)
        ids += ["h1", "h2"]
    if "schedule" in features:
        ok(d, "schedule", '"body":' + B_OBJ, id="nightly", topic="sch", every=3600)
    if "pause" in features:
        add(d, "held", "p1", B_OBJ)
        ok(d, "pause", topic="held")
        ids.append("p1")
    return ids


def fill_bulk(d):
    """Enough jobs that --migrate takes many steps (1,000 entries each):
    k0, k2, ... ready in that order, k1, k3, ... delayed an hour."""
    for start in range(0, BULK, 500):
        jobs = ",".join('{"topic":"bulk","id":"k%d","body":%d%s}' % (
            i, i, ',"delay":3600' if i % 2 else "") for i in range(start, start + 500))
        ok(d, "add", '"jobs":[%s]' % jobs)


def check_bulk(d):
    """Every bulk job survived the interrupted migration: counted, listed,
    and the ready ones popped once each in the order they came."""
    row = val(raw(call(d, "stats", topic="bulk")[1]), "topics", "bulk")
    check((row["ready"], row["delay"]) == (BULK // 2, BULK // 2), "stats of bulk: %s" % row)
    got = []
    while True:
        jobs = ok(d, "pop", topic="bulk", count=100)[1]["jobs"][1]
        if not jobs:
            break
        got += [val(j, "id") for j in jobs]
        ok(d, "finish", ids=[val(j, "id") for j in jobs])
    check(got == ["k%d" % i for i in range(0, BULK, 2)],
          "bulk: %d ready jobs popped, in order: %s" % (len(got), got == sorted(got)))


def snapshot(d, ids):
    """What the old release answers for each job: (state, exact body)."""
    out = {}
    for jid in ids:
        r = ok(d, "get", id=jid)
        out[jid] = (val(r, "state"), r[1]["value"][0])
    return out


def stop_delayq(d, fcgis=None, timers=True):
    """SIGTERMs the delayq-fcgi instances listed (all, and nginx, by
    default) and the timers and pushers (when timers), leaving Redis; each
    must exit 0, as a graceful stop does."""
    procs = [("nginx", d.nginx_proc)] if d.nginx_proc and fcgis is None else []
    if timers:
        procs += [("timer", t) for t in d.timers if t] + [("push", p) for p in d.pushers]
    for i in (range(len(d.fcgis)) if fcgis is None else fcgis):
        procs.append(("fcgi%d" % i, d.fcgis[i]))
    for _, p in procs:
        p.send_signal(signal.SIGTERM)
    for name, p in procs:
        rc = p.wait(30)
        check(rc == 0 or name == "nginx", "old %s exited with %s" % (name, rc))
    if d.nginx_proc in [p for _, p in procs]:
        d.nginx_proc = None
    if timers:
        d.timers, d.pushers = [], []
    for i in (range(len(d.fcgis)) if fcgis is None else fcgis):
        d.fcgis[i] = None


# ------------------------------------------------------------------ side by side

def side_by_side(d, new_build):
    """Instance 1 and one timer of the new build join the old instance 0
    and old timer behind one nginx (a rolling upgrade); a load that adds,
    pops and finishes goes through both."""
    old_fcgi, old_timer = d.fcgi_bin, d.timer_bin
    stop_delayq(d, fcgis=[1], timers=False)
    use_build(d, new_build)
    d.start_fcgi(1)
    d.start_timer()
    d.fcgi_bin, d.timer_bin = old_fcgi, old_timer
    bodies = {}
    for i in range(30):
        body = [B_INT, B_ODD, '{"i":%d}' % i][i % 3]
        add(d, "sbs", "s%d" % i, body, delay=(1 if i % 2 else 0))
        bodies["s%d" % i] = body
    got = {}
    deadline = time.monotonic() + 20
    while len(got) < len(bodies) and time.monotonic() < deadline:
        r = ok(d, "pop", topic="sbs", count=10, timeout=1)
        for j in r[1]["jobs"][1]:
            jid = val(j, "id")
            check(jid not in got, "side by side: %s delivered twice" % jid)
            got[jid] = j[1]["value"][0]
            ok(d, "finish", id=jid)
    check(got == bodies, "side by side: delivered %d of %d jobs exactly" %
          (sum(got.get(k) == v for k, v in bodies.items()), len(bodies)))


# ------------------------------------------------------------------ the new release

def expect_503_until_migrated(d, layout):
    st, _, body = d.request("GET", "/health")
    h = json.loads(body)
    # Layouts 2-5 differ only by keys each added, which data may not hold:
    # /health names the oldest layout the data matches; data of 6 and 7,
    # which recorded no layout, counts as 8.
    told = h.get("layout") == layout or 2 <= h.get("layout", 0) <= layout or (
        6 <= layout <= 8 and h.get("layout") == 8)
    check(st == 200 and told and h.get("layout_known") == LAYOUT,
          "/health before the migration: %s" % body)
    for cmd, fields in (("stats", {}), ("pop", {"topic": "up"}), ("add", {"topic": "up"}),
                        ("kick", {"topic": "bur", "count": 1})):
        extra = '"body":1' if cmd == "add" else ""
        st, body = call(d, cmd, extra, **fields)
        check(st == 503 and b"delayq-fcgi --migrate" in body,
              "%s before the migration answered %d: %s" % (cmd, st, body[:300]))
    with open(d.fcgi_log(0), "rb") as f:
        n = f.read().count(b"Redis refuses delayq's functions")
    check(1 <= n <= d.workers, "the layout error is logged once per process (%d times)" % n)


def migrate_argv(d, new_build):
    return ([os.path.join(new_build, "delayq-fcgi"), "--migrate"] + d.redis_flags() +
            ["--prefix=dq", "--log-level=info"])


def migrate_killed(d, new_build):
    """kill -9 of --migrate once its first step left progress in Redis:
    the data stays refused (503), and the next run goes on from there."""
    r = Resp(d.redis_port)
    p = subprocess.Popen(migrate_argv(d, new_build), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        progress = ["{dq}:migrate:topics", "{dq}:migrate:at"]
        while not r("EXISTS", *progress) and p.poll() is None:
            time.sleep(0.001)
    finally:
        p.kill()
        p.wait()
    left = r("EXISTS", *progress)
    r.close()
    check(left, "--migrate was killed mid-way (it finished first: raise BULK)")
    st, body = call(d, "pop", topic="bulk")
    check(st == 503, "a half-migrated shard is still refused: pop answered %d" % st)
    log("  --migrate killed mid-way; the data is still refused")


def migrate(d, new_build):
    t0 = time.monotonic()
    r = subprocess.run(migrate_argv(d, new_build), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    check(r.returncode == 0, "--migrate failed: %s" % r.stdout.decode())
    log("  migrated in %.2f s: %s" % (time.monotonic() - t0,
                                     r.stdout.decode().strip().splitlines()[-1]))


def verify(d, before, old_stats, features, receiver):
    h = json.loads(d.request("GET", "/health")[2])
    check(h.get("layout") == LAYOUT and "layout_error" not in h, "/health after: %s" % h)
    for jid, (state, body) in before.items():
        r = ok(d, "get", id=jid)
        check(r[1]["value"][0] == body, "%s: body changed" % jid)
        now = val(r, "state")
        check(now == state or (jid == "x1" and now in ("reserved", "ready")) or
              (jid == "d2" and now in ("delay", "ready")),
              "%s: state %s, was %s" % (jid, now, state))
    stats = raw(call(d, "stats")[1])
    for topic, row in old_stats.items():
        for field, v in row.items():
            if field == "paused" or field not in stats[1]["topics"][1][topic][1]:
                continue
            now = val(stats, "topics", topic, field)
            moved = topic in ("res", "up") and field in ("delay", "reserved", "ready",
                                                        "redelivered")
            check(now == v or moved, "stats %s.%s: %s, was %s" % (topic, field, now, v))
    total = val(stats, "total")
    check(total["ready"] >= 3 and total["buried"] == 2, "stats total: %s" % total)
    metrics = d.request("GET", "/metrics")
    check(metrics[0] == 200 and b"delayq_layout_stored %d" % LAYOUT in metrics[2] and
          b'delayq_jobs{topic="bur",state="buried"} 2' in metrics[2],
          "/metrics after: %d" % metrics[0])
    page = ok(d, "jobs", topic="up", state="delay")
    listed = [val(j, "id") for j in page[1]["jobs"][1]]
    check(listed[:1] == ["d1"] or listed[:1] == ["d2"], "GET /jobs delay of up: %s" % listed)
    check("d1" in listed, "d1 listed as delayed: %s" % listed)
    # pop: the ready jobs in the order they came, exactly as stored.
    r = ok(d, "pop", topic="up", count=4)
    got = [(val(j, "id"), j[1]["value"][0]) for j in r[1]["jobs"][1]]
    want = [(k, before[k][1]) for k in ("r1", "r2", "r3", "again")]
    check(got == want, "pop of up: %s" % [g[0] for g in got])
    # The reserved job comes back after its TTR, counted as delivered twice.
    r = ok(d, "pop", topic="res", timeout=10)
    check(val(r, "id") == "x1" and val(r, "attempts") == 2 and
          r[1]["value"][0] == before["x1"][1], "x1 redelivered after its TTR")
    check(val(ok(d, "kick", topic="bur", count=1), "kicked") == 1, "kick of bur")
    r = ok(d, "pop", topic="bur")
    check(val(r, "id") == "y1" and r[1]["value"][0] == before["y1"][1], "kicked y1 popped")
    check(val(ok(d, "kick", id="y2"), "success"), "kick of y2 by id")
    r = ok(d, "pop", topic="bat")
    check(val(r, "id") == "b2" and r[1]["value"][0] == before["b2"][1], "b2 of the batch popped")
    # A new job of an old topic, and the one that became due meanwhile.
    add(d, "up", "new1", B_ODD)
    want = {"new1": B_ODD, "d2": before["d2"][1]}
    got = {}
    deadline = time.monotonic() + SOON_S + 10
    while len(got) < 2 and time.monotonic() < deadline:
        r = ok(d, "pop", topic="up", timeout=1)
        if val(r, "id"):
            got[val(r, "id")] = r[1]["value"][0]
    check(got == want, "new1 and d2 popped from up: %s" % sorted(got))
    if "push" in features:
        receiver.answer = lambda req: (200, {}, b"ok")
        n = len(receiver.requests)
        ok(d, "reschedule", id="h1", delay=0)
        req = wait_for("h1 delivered", lambda: receiver.requests[n:], 15)[0]
        check(req.body == before["h1"][1].encode(), "h1 delivered byte for byte")
        wait_for("h1 finished", lambda: call(d, "get", id="h1")[0] == 404, 10)
    if "schedule" in features:
        s = json.loads(d.request("GET", "/schedules")[2])
        check([x["id"] for x in s["schedules"]] == ["nightly"], "schedules: %s" % s)
    if "pause" in features:
        check(val(raw(call(d, "stats", topic="held")[1]), "topics", "held", "paused"),
              "held still paused")
        check(val(ok(d, "pop", topic="held"), "id") is None, "a paused topic gives nothing")
        ok(d, "resume", topic="held")
        check(val(ok(d, "pop", topic="held"), "id") == "p1", "p1 popped after resume")
    inv = invariants.check_deployment(d)
    check(inv["nproblems"] == 0, "invariants: %s" % inv["problems"][:10])


def one_layout(layout, commit, features, builds):
    t0 = time.monotonic()
    old = build(commit, os.path.join(builds, commit))
    log("layout %d (%s): built in %.0f s" % (layout, commit, time.monotonic() - t0))
    receiver = None
    if "push" in features:
        receiver = Receiver(lambda req: (500, {}, b"down for now"))
        receiver.start()
    n_fcgi = 2 if "side-by-side" in features else 1
    flags = {"push_allow": "loopback"} if "push" in features else {}
    d = Deployment(n_fcgi=n_fcgi, n_pushers=1 if "push" in features else 0, workers=2,
                   threads=4, **flags)
    use_build(d, old)
    try:
        d.start()
        ids = fill(d, features, receiver)
        if layout < READ_AS_IS:
            fill_bulk(d)
        before = snapshot(d, ids)
        old_stats = {t: {f: val(n) for f, n in row[1].items()}
                     for t, row in raw(call(d, "stats")[1])[1]["topics"][1].items()}
        if "side-by-side" in features:
            side_by_side(d, NEW_BUILD)
        stop_delayq(d)
        use_build(d, NEW_BUILD)
        d.nginx_conf_script = os.path.join(TOP, "scripts", "nginx-conf")
        for i in range(n_fcgi):
            d.start_fcgi(i)
        d._start_nginx_on_a_free_port()
        d._local.http = None  # its keep-alive connection went to the old nginx
        d.wait_healthy(15)
        if layout < READ_AS_IS:
            expect_503_until_migrated(d, layout)
            migrate_killed(d, NEW_BUILD)
            migrate(d, NEW_BUILD)
        d.start_timer()
        if "push" in features:
            d.start_pusher()
        verify(d, before, old_stats, features, receiver)
        if layout < READ_AS_IS:
            check_bulk(d)
    except BaseException:
        d.failed = True
        raise
    finally:
        d.stop()
        if receiver:
            receiver.stop()
    log("layout %d (%s): passed in %.0f s" % (layout, commit, time.monotonic() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", help="test only this commit (repeatable)")
    ap.add_argument("--keep-builds", help="build old commits here and keep them")
    args = ap.parse_args()
    rows = []
    with open(os.path.join(HERE, "layouts")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                rows.append((int(line[0]), line[1], set(line[2].split(",")) - {"-"}))
    builds = args.keep_builds or tempfile.mkdtemp(prefix="dq-upgrade-")
    os.makedirs(builds, exist_ok=True)
    t0 = time.monotonic()
    try:
        for layout, commit, features in rows:
            if args.only and commit not in args.only:
                continue
            one_layout(layout, commit, features, builds)
            if not args.keep_builds:
                drop_worktree(os.path.join(builds, commit))
    except Failure as e:
        log("FAILED: %s" % e)
        return 1
    finally:
        if not args.keep_builds:
            for commit in os.listdir(builds):
                drop_worktree(os.path.join(builds, commit))
            shutil.rmtree(builds, ignore_errors=True)
    log("all layouts passed in %.0f s" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""delayq fault-injection suite.

Runs a mixed producer/consumer load through nginx against two delayq-fcgi
instances, two timers and an AOF Redis, injects process kills, Redis stalls,
restarts and outages at random moments, keeps a client-side ledger of every
acknowledged answer, lets the system drain, and checks the ledger and Redis:
no acknowledged job lost, no job handed out twice within its TTR, no job in
two states or buckets, no keys left behind, stats equal to what Redis holds.

    tests/faults/run.py [--profile short|long] [--seed N] [--keep]

Exit status: 0 when every check passed, 1 on any loss, duplicate or broken
invariant, 2 when the run itself could not be carried out. See README.md.
Standard library only.
"""

import argparse
import collections
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True
# An entry point, not a test module: it finds the shared test package itself.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dqtest  # noqa: E402
from dqtest import (Deployment, DeploymentError, Http, RedisError, Resp, invariants, job_keys,  # noqa: E402
                    kill_pid, parse_body, pid_alive)
import proc_faults  # noqa: E402

PROFILES = {
    # fault window (s), minimum jobs, target add rate (jobs/s), gap between faults (s)
    "short": dict(window=150.0, min_jobs=20000, rate=165.0, gap=(2.0, 5.0), drain=90.0),
    "long": dict(window=630.0, min_jobs=60000, rate=150.0, gap=(3.0, 8.0), drain=120.0),
}

FAULT_KINDS = [
    "worker_kill9",          # kill -9 one or two workers of one instance
    "master_kill9",          # kill -9 an instance's master; restart it (supervisor)
    "timer_kill9_single",    # kill -9 the only running timer; restart it
    "timer_kill9_of_two",    # kill -9 one of two running timers; restart it
    "redis_stall",           # DEBUG SLEEP 3
    "redis_shutdown",        # SHUTDOWN, then start on the same port and dir
    "redis_kill9",           # kill -9 redis-server, then start it again
    "redis_down_10s",        # SIGTERM redis-server, 10 s down, start again
    "backend_stop",          # SIGTERM one of the two delayq-fcgi instances, 2-5 s down
]

TOPICS = ["fa.orders", "fa.mail", "fa.sms", "fa.batch"]
PLANS = [("finish", 70), ("delete", 8), ("abandon", 8), ("release", 6), ("predelete", 8)]
TTRS = [1.0, 1.5, 2.0]
EPS = 0.003  # Redis' ms rounding plus slack, in seconds


def weighted(rng, table):
    total = sum(w for _, w in table)
    x = rng.uniform(0, total)
    for v, w in table:
        x -= w
        if x <= 0:
            return v
    return table[-1][0]


class Job:
    __slots__ = ("id", "topic", "plan", "ttr", "delay", "body", "acked", "ack_t", "ack_how",
                 "uncertain", "had503", "readd", "deliveries", "releases", "removed",
                 "delete_ok", "attempts_sent", "first_sent", "remove_unknown")

    def __init__(self, jid, topic, plan, ttr, delay, body):
        self.id, self.topic, self.plan, self.ttr, self.delay, self.body = \
            jid, topic, plan, ttr, delay, body
        self.acked = False
        self.ack_t = None
        self.ack_how = None
        self.uncertain = 0     # add attempts with unknown outcome (504, error)
        self.had503 = 0        # add attempts answered 503
        self.readd = False     # an add answered 200 after an unknown-outcome one
        self.deliveries = []   # (t_send, t_recv, attempts, consumer, ttr)
        self.releases = []     # (t_send, attempts, certain)
        self.removed = None    # (kind, t_recv, status)
        self.delete_ok = False
        self.attempts_sent = 0
        self.first_sent = None
        self.remove_unknown = 0  # finish/delete attempts of ours with an unknown outcome

    def spec(self):
        d = {"topic": self.topic, "id": self.id, "ttr": self.ttr, "body": self.body}
        if self.delay:
            d["delay"] = self.delay
        return d


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}
        self.acked = 0
        self.removed = 0
        self.outstanding = set()   # acked and not yet known removed
        self.violations = []       # (kind, text)
        self.counts = collections.Counter()
        self.status = collections.Counter()     # (fault or '-', cmd, status)
        self.latency = collections.defaultdict(lambda: [0, 0.0, 0.0])  # cmd -> n, sum, max
        self.slow = []
        self.current_fault = "-"
        self.unknown_pop_jobs = 0  # upper bound of jobs reserved by pops with no answer

    def violation(self, kind, text):
        with self.lock:
            self.violations.append((kind, text))
        print("VIOLATION %s: %s" % (kind, text), flush=True)

    def observe(self, cmd, st, dt, timeout_budget=0.0):
        with self.lock:
            self.status[(self.current_fault, cmd, st)] += 1
            lat = self.latency[cmd]
            lat[0] += 1
            lat[1] += dt
            lat[2] = max(lat[2], dt)
            if dt - timeout_budget > 10.0:
                self.slow.append((cmd, st, round(dt, 2), self.current_fault))

    def new_job(self, job):
        with self.lock:
            self.jobs[job.id] = job

    def ack(self, job, how, t):
        with self.lock:
            if how == "200" and job.uncertain:
                # an earlier attempt may have created the job, and it may have
                # been delivered and finished before this one created it again
                job.readd = True
            if job.acked:
                return False
            job.acked = True
            job.ack_t = t
            job.ack_how = how
            self.acked += 1
            if job.removed is None:
                self.outstanding.add(job.id)
            return True

    def mark_readd(self, job):
        with self.lock:
            job.readd = True

    def deliver(self, jid, t_send, t_recv, attempts, consumer, ttr, topic, value):
        with self.lock:
            job = self.jobs.get(jid)
            if job is None:
                self.violations.append(("unknown_job", "delivered id %r that no add of this run "
                                        "named" % jid))
                return None
            job.deliveries.append((t_send, t_recv, attempts, consumer, ttr))
            self.counts["deliveries"] += 1
            if attempts > 1:
                self.counts["redeliveries"] += 1
            bad = None
            if topic != job.topic or value != job.body:
                bad = "delivered %s with topic %r value %r, added with %r %r" % (
                    jid, topic, value, job.topic, job.body)
            if abs(ttr - job.ttr) > 0.0005:
                bad = "delivered %s with ttr %r, added with %r" % (jid, ttr, job.ttr)
        if bad:
            self.violation("wrong_content", bad)
        return job

    def release(self, job, t_send, attempts, certain):
        with self.lock:
            job.releases.append((t_send, attempts, certain))
            self.counts["releases"] += 1

    def removed_ack(self, job, kind, t, status):
        with self.lock:
            if job.removed is None:
                job.removed = (kind, t, status)
                self.removed += 1
            if kind == "delete" and (status == 200 or job.remove_unknown):
                # a 404 after our own delete had an unknown outcome: that delete took
                job.delete_ok = True
            if status == 200:
                self.counts[kind + "_200"] += 1
            else:
                self.counts[kind + "_404"] += 1
            self.outstanding.discard(job.id)


class Ctx:
    def __init__(self, args, prof, cluster, ledger):
        self.args = args
        self.prof = prof
        self.c = cluster
        self.L = ledger
        self.run_id = "r%d" % args.seed
        self.seq = 0
        self.seq_lock = threading.Lock()
        self.stop_adding = threading.Event()
        self.stop_lazy = threading.Event()
        self.stop_consumers = threading.Event()
        self.stop_faults = threading.Event()
        self.t0 = time.time()
        self.faults = []  # (t_rel, kind, detail, seconds)
        self.fault_counts = collections.Counter()
        self.invariant_runs = []
        self.errors = []  # exceptions in threads

    def next_ids(self, n):
        with self.seq_lock:
            first = self.seq
            self.seq += n
        return ["%s-%d" % (self.run_id, i) for i in range(first, first + n)]

    def rel(self):
        return time.time() - self.t0


def call(ctx, conn, cmd, fields, timeout_budget=0.0):
    """POST /cmd -> (status or None for a transport error, parsed body)."""
    body = json.dumps(fields).encode("utf-8")
    t = time.time()
    try:
        st, h, data = conn.request("POST", "/" + cmd, body)
        r = parse_body(data, h)
    except Exception as e:  # noqa: BLE001 (any transport failure: outcome unknown)
        conn.close()
        st, r = None, repr(e)
    tag = st
    if st in (503, 504) and isinstance(r, dict):
        # who answered: nginx's rewritten errors name the backend
        tag = "%d/%s" % (st, "nginx" if "backend" in str(r.get("error")) else "delayq")
    ctx.L.observe(cmd, tag, time.time() - t, timeout_budget)
    return st, r


def is_code(r, code):
    return isinstance(r, dict) and r.get("success") is False and r.get("code") == code


# --------------------------------------------------------------------------
# producers
# --------------------------------------------------------------------------

def producer(ctx, idx):
    L = ctx.L
    rng = random.Random(ctx.args.seed * 7919 + idx)
    conn = Http(ctx.c.http_port, timeout=30)
    per_thread = ctx.prof["rate"] / ctx.args.producers
    next_at = time.monotonic()
    retry = []     # heap (when, seq, job)
    predel = []    # heap (when, seq, job)
    seqn = 0
    hard_end = None

    def handle_single(job, st, r, t):
        nonlocal seqn
        if st == 200 and isinstance(r, dict) and r.get("success") is True:
            if L.ack(job, "200", t) and job.plan == "predelete":
                seqn += 1
                heapq.heappush(predel, (time.monotonic() + rng.uniform(0, min(0.5, job.delay / 2)),
                                        seqn, job))
            return
        if st == 409 and is_code(r, "conflict"):
            if not job.uncertain:
                L.violation("add_503_took_effect" if job.had503 else "add_conflict_fresh_id",
                            "add %s answered 409 %r although no earlier attempt had an unknown "
                            "outcome (%d attempts answered 503)" % (job.id, r, job.had503))
            L.ack(job, "409", t)
            return
        if st == 503 and is_code(r, "unavailable"):
            job.had503 += 1
        elif st == 504 and is_code(r, "timeout") or st is None or st == 502:
            job.uncertain += 1
        else:
            L.violation("unexpected_answer", "add %s: %s %r" % (job.id, st, r))
            job.uncertain += 1
        seqn += 1
        heapq.heappush(retry, (time.monotonic() + 0.1 + 0.1 * min(job.attempts_sent, 8),
                               seqn, job))

    def send(jobs):
        for j in jobs:
            j.attempts_sent += 1
        if len(jobs) == 1:
            st, r = call(ctx, conn, "add", jobs[0].spec())
            handle_single(jobs[0], st, r, time.time())
            return
        st, r = call(ctx, conn, "add", {"jobs": [j.spec() for j in jobs]})
        t = time.time()
        if st == 200 and isinstance(r, dict) and isinstance(r.get("results"), list) and \
                len(r["results"]) == len(jobs):
            for j, res in zip(jobs, r["results"]):
                if res.get("id") != j.id:
                    L.violation("unexpected_answer", "batch result %r for job %s" % (res, j.id))
                if res.get("success") is True:
                    handle_single(j, 200, {"success": True}, t)
                elif res.get("code") == "conflict":
                    handle_single(j, 409, {"success": False, "code": "conflict"}, t)
                else:
                    handle_single(j, -1, res, t)
            return
        for j in jobs:
            handle_single(j, st, r, t)

    def do_predeletes(now):
        nonlocal seqn
        while predel and predel[0][0] <= now:
            _, _, job = heapq.heappop(predel)
            st, r = call(ctx, conn, "delete", {"id": job.id})
            if st == 200 and isinstance(r, dict) and r.get("success"):
                L.removed_ack(job, "delete", time.time(), 200)
            elif st == 404 and is_code(r, "not_found"):
                L.removed_ack(job, "delete", time.time(), 404)
            else:
                if st != 503:
                    job.remove_unknown += 1
                seqn += 1
                heapq.heappush(predel, (now + 0.2, seqn, job))

    try:
        while True:
            now = time.monotonic()
            if ctx.stop_adding.is_set():
                if hard_end is None:
                    hard_end = now + ctx.prof["drain"]
                if not retry and not predel:
                    break
                if now > hard_end:
                    ctx.errors.append("producer %d: %d adds and %d deletes still unresolved at "
                                      "the deadline" % (idx, len(retry), len(predel)))
                    break
            do_predeletes(now)
            if retry and retry[0][0] <= now:
                _, _, job = heapq.heappop(retry)
                send([job])
                continue
            if ctx.stop_adding.is_set() or now < next_at:
                time.sleep(min(0.02, max(0.0, next_at - now)) if not ctx.stop_adding.is_set()
                           else 0.02)
                continue
            n = 1 if rng.random() < 0.85 else rng.randint(2, 20)
            ids = ctx.next_ids(n)
            jobs = []
            for jid in ids:
                plan = weighted(rng, PLANS)
                if plan == "predelete":
                    delay = round(rng.uniform(1.0, 3.0), 3)
                else:
                    delay = 0 if rng.random() < 0.35 else round(rng.uniform(0.0, 3.0), 3)
                topic = "fa.batch" if n > 1 else rng.choice(TOPICS[:3])
                job = Job(jid, topic, plan, rng.choice(TTRS), delay, {"p": plan, "i": jid})
                L.new_job(job)
                jobs.append(job)
            send(jobs)
            next_at = max(next_at + n / per_thread, now - 1.0)
    except Exception:  # noqa: BLE001
        ctx.errors.append("producer %d crashed:\n%s" % (idx, traceback.format_exc()))
    finally:
        conn.close()


# --------------------------------------------------------------------------
# consumers
# --------------------------------------------------------------------------

def remove(ctx, conn, kind, jobs, rng):
    """finish/delete jobs, retrying until each is answered 200 or 404."""
    L = ctx.L
    pending = list(jobs)
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        if len(pending) > 1 and rng.random() < 0.6:
            st, r = call(ctx, conn, kind, {"ids": [j.id for j in pending]})
            t = time.time()
            if st == 200 and isinstance(r, dict) and isinstance(r.get("results"), list):
                left = []
                for j, res in zip(pending, r["results"]):
                    if res.get("success") is True:
                        L.removed_ack(j, kind, t, 200)
                    elif res.get("code") == "not_found":
                        L.removed_ack(j, kind, t, 404)
                    else:
                        L.violation("unexpected_answer", "%s %s: %r" % (kind, j.id, res))
                        left.append(j)
                pending = left
                continue
        else:
            j = pending[0]
            st, r = call(ctx, conn, kind, {"id": j.id})
            t = time.time()
            if st == 200 and isinstance(r, dict) and r.get("success") is True:
                L.removed_ack(j, kind, t, 200)
                pending.pop(0)
                continue
            if st == 404 and is_code(r, "not_found"):
                L.removed_ack(j, kind, t, 404)
                pending.pop(0)
                continue
        if st not in (503, 504, 502, None):
            L.violation("unexpected_answer", "%s: %s %r" % (kind, st, r))
        if st != 503:
            for j in pending:
                j.remove_unknown += 1
        time.sleep(0.05)
    if pending:
        ctx.errors.append("%s of %d jobs unanswered for 60 s" % (kind, len(pending)))


def consumer(ctx, idx, lazy=False):
    L = ctx.L
    rng = random.Random(ctx.args.seed * 104729 + idx + (1000 if lazy else 0))
    conn = Http(ctx.c.http_port, timeout=30)
    name = ("lazy%d" if lazy else "c%d") % idx
    stop = ctx.stop_lazy if lazy else ctx.stop_consumers
    try:
        while not stop.is_set():
            fields = {}
            form = rng.random()
            if lazy:
                fields["topic"] = rng.choice(TOPICS)
                want = 1
            else:
                if rng.random() < 0.5:
                    fields["topic"] = rng.choice(TOPICS)
                elif rng.random() < 0.5:
                    fields["topics"] = rng.sample(TOPICS, rng.randint(2, 4))
                else:
                    fields["topic"] = ",".join(rng.sample(TOPICS, rng.randint(2, 4)))
                want = 1
                if form < 0.35:
                    fields["timeout"] = round(rng.uniform(0.3, 2.0), 2)
                elif form < 0.7:
                    want = rng.randint(2, 10)
                    fields["count"] = want
                    if rng.random() < 0.3:
                        fields["timeout"] = round(rng.uniform(0.2, 1.0), 2)
            t_send = time.time()
            st, r = call(ctx, conn, "pop", fields, fields.get("timeout", 0.0))
            t_recv = time.time()
            got = []
            if st == 200 and isinstance(r, dict) and r.get("success") is True:
                if "jobs" in r:
                    got = r["jobs"]
                elif r.get("id") is not None:
                    got = [r]
            elif st == 503 and is_code(r, "unavailable"):
                time.sleep(0.05)
                continue
            else:
                if st not in (504, 502, None):
                    L.violation("unexpected_answer", "pop %r: %s %r" % (fields, st, r))
                with L.lock:
                    L.unknown_pop_jobs += want
                    L.counts["pops_unknown_outcome"] += 1
                time.sleep(0.05)
                continue
            if not got:
                if "timeout" not in fields:
                    time.sleep(0.03 if not lazy else 0.2)
                continue
            finish, delete = [], []
            for jd in got:
                job = L.deliver(jd.get("id"), t_send, t_recv, jd.get("attempts"), name,
                                jd.get("ttr"), jd.get("topic"), jd.get("value"))
                if job is None or lazy:
                    continue
                a = jd.get("attempts")
                if job.plan == "abandon" and a == 1:
                    continue
                if job.plan == "release" and a == 1:
                    ts = time.time()
                    st2, r2 = call(ctx, conn, "release", {"id": job.id, "delay": 0})
                    if st2 == 200:
                        L.release(job, ts, a, True)
                    elif st2 in (504, None, 502):
                        L.release(job, ts, a, False)
                    continue
                (delete if job.plan == "delete" else finish).append(job)
            if finish:
                remove(ctx, conn, "finish", finish, rng)
            if delete:
                remove(ctx, conn, "delete", delete, rng)
            if lazy:
                time.sleep(0.25)
    except Exception:  # noqa: BLE001
        ctx.errors.append("consumer %s crashed:\n%s" % (name, traceback.format_exc()))
    finally:
        conn.close()


# --------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------

class Injector:
    def __init__(self, ctx):
        self.ctx = ctx
        self.c = ctx.c
        self.rng = random.Random(ctx.args.seed)
        self.old_workers = []  # (pids, since, why)
        self.log_lock = threading.Lock()

    def note(self, kind, detail, seconds):
        self.ctx.faults.append((round(self.ctx.rel() - seconds, 2), kind, detail, round(seconds, 2)))
        self.ctx.fault_counts[kind] += 1
        print("[%7.2f] fault %-20s %s (%.2f s)" % (self.ctx.rel() - seconds, kind, detail, seconds),
              flush=True)

    def expect_gone(self, pids, why):
        if pids:
            self.old_workers.append((list(pids), time.monotonic(), why))

    def check_old_workers(self, final=False):
        keep = []
        for pids, since, why in self.old_workers:
            alive = [p for p in pids if pid_alive(p)]
            waited = time.monotonic() - since
            limit = 2.0 + 5.0 + 5.0  # redis_timeout_ms + the worker's 5 s grace + slack
            if alive and waited > limit:
                self.ctx.L.violation("hung_worker", "workers %s still alive %.1f s after %s" %
                                     (alive, waited, why))
                for p in alive:
                    kill_pid(p)
            elif alive:
                keep.append((pids, since, why))
        self.old_workers = keep

    def run_one(self, kind):
        c, rng, L = self.c, self.rng, self.ctx.L
        t = time.monotonic()
        L.current_fault = kind
        detail = ""
        try:
            if kind in ("worker_kill9", "master_kill9"):
                detail = getattr(proc_faults, kind)(c, rng, self.expect_gone)
            elif kind == "timer_kill9_single":
                live = c.live_timers()
                for i in live[1:]:
                    c.kill_timer(i, signal.SIGTERM)
                if not live:
                    c.start_timer()
                    live = c.live_timers()
                victim = live[0]
                pid = c.timers[victim].pid
                c.kill_timer(victim, signal.SIGKILL)
                pause = rng.uniform(0.2, 2.0)
                time.sleep(pause)
                c.start_timer()
                detail = "only timer (pid %d) killed (others stopped first: %d), restarted " \
                         "after %.2f s" % (pid, len(live) - 1, pause)
            elif kind == "timer_kill9_of_two":
                detail = proc_faults.timer_kill9_of_two(c, rng, self.expect_gone)
            elif kind == "redis_stall":
                r = Resp(c.redis_port, timeout=10)
                try:
                    r("DEBUG", "SLEEP", "3")
                finally:
                    r.close()
                detail = "DEBUG SLEEP 3"
            elif kind == "redis_shutdown":
                c.redis_server.shutdown()
                c.start_redis()
                detail = "SHUTDOWN, restarted"
            elif kind == "redis_kill9":
                pid = c.redis_proc.pid
                c.redis_server.kill9()
                c.start_redis()
                detail = "kill -9 %d, restarted" % pid
            elif kind == "redis_down_10s":
                c.stop_redis()
                time.sleep(10)
                c.start_redis()
                detail = "SIGTERM, 10 s down, restarted"
            elif kind == "backend_stop":
                i = rng.randrange(c.n_fcgi)
                master, workers = c.fcgi_pids(i)
                c.fcgis[i].send_signal(signal.SIGTERM)
                try:
                    rc = c.fcgis[i].wait(30)
                except subprocess.TimeoutExpired:
                    L.violation("hung_worker", "instance %d (master %d) did not exit within 30 s "
                                "of SIGTERM" % (i + 1, master))
                    kill_pid(master)
                    c.fcgis[i].wait(10)
                    rc = "killed"
                c.retire(i, "stopped%d" % master)
                self.expect_gone(workers, "SIGTERM of their master %d" % master)
                pause = rng.uniform(2.0, 5.0)
                time.sleep(pause)
                c.start_fcgi(i)
                detail = "instance %d stopped (exit %s), down %.2f s" % (i + 1, rc, pause)
            else:
                raise AssertionError(kind)
        finally:
            dt = time.monotonic() - t
        self.note(kind, detail, dt)
        # let the dust settle a little before the status counters leave the fault
        time.sleep(1.0)
        L.current_fault = "-"

    def invariant_check(self, tag):
        try:
            r = Resp(self.c.redis_port, timeout=30)
            try:
                res = invariants.check(r)
            finally:
                r.close()
        except (OSError, ConnectionError, RedisError) as e:
            print("invariant check %s skipped: %r" % (tag, e), flush=True)
            return None
        self.ctx.invariant_runs.append((round(self.ctx.rel(), 1), tag, res["jobs"],
                                        res["nproblems"]))
        for p in res["problems"]:
            self.ctx.L.violation("invariant", "%s: %s" % (tag, p))
        return res

    def loop(self):
        ctx = self.ctx
        kinds = list(FAULT_KINDS)
        self.rng.shuffle(kinds)
        n = 0
        try:
            time.sleep(3.0)
            while not ctx.stop_faults.is_set():
                kind = kinds[n] if n < len(kinds) else self.rng.choice(FAULT_KINDS)
                n += 1
                self.run_one(kind)
                self.check_old_workers()
                self.invariant_check("after %s #%d" % (kind, n))
                gap = self.rng.uniform(*ctx.prof["gap"])
                ctx.stop_faults.wait(gap)
        except Exception:  # noqa: BLE001
            ctx.errors.append("fault injector crashed:\n%s" % traceback.format_exc())
            ctx.stop_faults.set()

    def restore(self):
        """After the fault window: every process up, two timers."""
        c = self.c
        if c.redis_proc.poll() is not None:
            c.start_redis()
        for i in range(c.n_fcgi):
            if c.fcgis[i].poll() is not None:
                c.start_fcgi(i)
        while len(c.live_timers()) < 2:
            c.start_timer()


# --------------------------------------------------------------------------
# analysis
# --------------------------------------------------------------------------

def analyse(ctx, final):
    """Ledger checks. Returns a dict of figures; violations go to the ledger."""
    L = ctx.L
    fig = collections.Counter()
    losses, dups = [], []
    for job in L.jobs.values():
        if not job.acked:
            if job.deliveries:
                fig["delivered_without_ack"] += 1
            continue
        fig["acked"] += 1
        if job.uncertain:
            fig["acked_after_unknown_outcome"] += 1
        if job.readd:
            fig["readded_by_retry"] += 1
        if not job.deliveries and not job.delete_ok:
            losses.append(job)
        if job.deliveries:
            fig["delivered_jobs"] += 1
        elif job.delete_ok:
            fig["deleted_before_delivery"] += 1
            if job.remove_unknown:
                fig["deleted_by_unknown_outcome_delete"] += 1
        # duplicates: deliveries grouped by incarnation (a new one starts only
        # when a retried add may have created the job again), ordered by attempts
        if job.readd and sum(1 for d in job.deliveries if d[2] == 1) > 1:
            fig["created_twice"] += 1
        if job.readd:
            incarnations = [[]]
            for d in sorted(job.deliveries, key=lambda d: d[1]):
                if incarnations[-1] and d[2] == 1:
                    incarnations.append([])
                incarnations[-1].append(d)
        else:
            incarnations = [job.deliveries]
        for inc in incarnations:
            inc = sorted(inc, key=lambda d: (d[2], d[1]))
            for a, b in zip(inc, inc[1:]):
                if a[2] == b[2]:
                    dups.append((job, "attempts %d delivered twice: to %s at %.3f and to %s at "
                                 "%.3f" % (a[2], a[3], a[1] - ctx.t0, b[3], b[1] - ctx.t0)))
                    continue
                if b[1] >= a[0] + a[4] - EPS:
                    continue
                if [r for r in job.releases if r[1] == a[2] and r[0] <= b[1]]:
                    continue
                dups.append((job, "attempts %d at %.3f (%s) and attempts %d at %.3f (%s): %.3f s "
                             "apart, ttr %.1f s, not released" % (
                                 a[2], a[0] - ctx.t0, a[3], b[2], b[1] - ctx.t0, b[3],
                                 b[1] - a[0], a[4])))
        # resurrection: delivered after a finish/delete of it was acknowledged
        if job.removed and job.removed[2] == 200 and not job.readd:
            late = [d for d in job.deliveries if d[0] > job.removed[1]]
            if late:
                L.violation("resurrected", "%s delivered at %.3f after its %s was acknowledged "
                            "at %.3f" % (job.id, late[0][0] - ctx.t0, job.removed[0],
                                         job.removed[1] - ctx.t0))
    fig["losses"] = len(losses)
    fig["duplicates_within_ttr"] = len(dups)
    if final:
        for job, text in dups[:50]:
            L.violation("duplicate", "%s: %s" % (job.id, text))
        for job in losses[:50]:
            where = ctx.where(job.id)
            L.violation("loss", "%s (plan %s, topic %s, delay %s, acked %s at %.3f, %d add "
                        "attempts, %d unknown, %d 503): never delivered nor deleted; in Redis: %s"
                        % (job.id, job.plan, job.topic, job.delay, job.ack_how,
                           (job.ack_t or 0) - ctx.t0, job.attempts_sent, job.uncertain,
                           job.had503, where))
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="short")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=6)
    ap.add_argument("--window", type=float, default=None, help="override the fault window (s)")
    ap.add_argument("--min-jobs", type=int, default=None, help="override the job minimum")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir even on success")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(3), "big")
    prof = dict(PROFILES[args.profile])
    if args.window is not None:
        prof["window"] = args.window
    if args.min_jobs is not None:
        prof["min_jobs"] = args.min_jobs
    print("delayq fault suite: profile %s, seed %d, fault window %.0f s, >= %d jobs" %
          (args.profile, args.seed, prof["window"], prof["min_jobs"]), flush=True)

    for b in ("delayq-fcgi", "delayq-timer"):
        if not os.path.exists(os.path.join(dqtest.BUILD_DIR, b)):
            print("missing %s in %s (build first)" % (b, dqtest.BUILD_DIR), file=sys.stderr)
            return 2

    # appendfsync always: with everysec a kill -9 of Redis on a busy disk may
    # lose its last seconds of answers (docs/OPERATIONS.md), and this suite
    # counts any acknowledged job lost as delayq's fault.
    cluster = Deployment(workers=3, threads=24, n_timers=2, n_fcgi=2, appendonly=True,
                         appendfsync="always", redis_args=["--enable-debug-command", "yes"],
                           timer_lease_ms=2000, fcgi_flags=dict(redis_timeout_ms=2000,
                                                                redis_connect_timeout_ms=300))
    ledger = Ledger()
    failed = True
    try:
        cluster.start()
        ctx = Ctx(args, prof, cluster, ledger)
        rc = run(ctx)
        failed = rc != 0
        return rc
    except (DeploymentError, OSError) as e:
        print("the run could not be carried out: %s" % e, file=sys.stderr)
        traceback.print_exc()
        return 2
    finally:
        print("cluster dir: %s%s" % (cluster.dir, "" if (failed or args.keep) else " (removed)"),
              flush=True)
        dqtest.deployment.KEEP = args.keep
        cluster.stop(failed=failed)


def run(ctx):
    c, L, prof = ctx.c, ctx.L, ctx.prof

    def where(jid):
        try:
            r = Resp(c.redis_port, timeout=5)
            try:
                j = job_keys.read(r, "{dq}", jid)
            finally:
                r.close()
            j.pop("body", None)
            return j or "no job"
        except Exception as e:  # noqa: BLE001
            return "unknown (%r)" % e
    ctx.where = where

    threads = []
    for i in range(ctx.args.producers):
        threads.append(threading.Thread(target=producer, args=(ctx, i), daemon=True))
    consumers = [threading.Thread(target=consumer, args=(ctx, i), daemon=True)
                 for i in range(ctx.args.consumers)]
    lazy = threading.Thread(target=consumer, args=(ctx, 0, True), daemon=True)
    inj = Injector(ctx)
    injt = threading.Thread(target=inj.loop, daemon=True)
    for t in threads + consumers + [lazy, injt]:
        t.start()

    # load + fault window
    t_start = time.monotonic()
    hard = prof["window"] * 2 + 60
    last_print = 0
    while True:
        el = time.monotonic() - t_start
        if el - last_print >= 15:
            last_print = el
            with L.lock:
                print("[%7.2f] jobs %d acked %d delivered %d removed %d outstanding %d faults %d" % (
                    ctx.rel(), ctx.seq, L.acked, L.counts["deliveries"], L.removed,
                    len(L.outstanding), sum(ctx.fault_counts.values())), flush=True)
        if el >= prof["window"] and ctx.seq >= prof["min_jobs"] and \
                len(ctx.fault_counts) == len(FAULT_KINDS):
            break
        if el > hard:
            ctx.errors.append("load did not reach %d jobs (or every fault kind) in %.0f s" %
                              (prof["min_jobs"], hard))
            break
        if ctx.errors:
            break
        time.sleep(0.5)
    ctx.stop_faults.set()
    injt.join(60)
    if injt.is_alive():
        ctx.errors.append("fault injector still busy 60 s after the window")
    ctx.stop_adding.set()
    ctx.stop_lazy.set()
    t_load_end = ctx.rel()
    inj.restore()
    print("[%7.2f] faults stopped; draining" % ctx.rel(), flush=True)

    # drain: keep consuming until every acknowledged job is finished/deleted
    drain_end = time.monotonic() + prof["drain"]
    while time.monotonic() < drain_end:
        with L.lock:
            left = len(L.outstanding)
        if left == 0 and not any(t.is_alive() for t in threads):
            break
        time.sleep(0.25)
    for t in threads:
        t.join(max(1.0, drain_end - time.monotonic()))
    lazy.join(30)
    ctx.stop_consumers.set()
    for t in consumers:
        t.join(40)
    drained_at = ctx.rel()
    with L.lock:
        unresolved = sorted(L.outstanding)
    print("[%7.2f] drain finished (%.1f s), %d acknowledged jobs unresolved" %
          (ctx.rel(), drained_at - t_load_end, len(unresolved)), flush=True)
    inj.check_old_workers()
    time.sleep(0.5)

    # pop away stale list entries; anything delivered now was never resolved
    conn = Http(c.http_port, timeout=30)
    leftovers = []
    for _ in range(50):
        r = Resp(c.redis_port, timeout=10)
        try:
            lists = [k.decode() for k in r("KEYS", "{dq}:r:*")]
        finally:
            r.close()
        if not lists:
            break
        for lk in lists:
            topic = lk[len("{dq}:r:"):]
            st, ans = call(ctx, conn, "pop", {"topic": topic, "count": 1000})
            if st == 200:
                leftovers += [j["id"] for j in ans.get("jobs", [])]
        time.sleep(0.05)
    conn.close()
    if leftovers:
        L.violation("leftover_job", "after the drain, pop still delivered %d jobs: %s" %
                    (len(leftovers), leftovers[:20]))

    # checks
    final = inj.invariant_check("final")
    fig = analyse(ctx, final=True)
    r = Resp(c.redis_port, timeout=10)
    try:
        keys = sorted(k.decode() for k in r("KEYS", "*"))
    finally:
        r.close()
    # The deployment's layout (buckets, shards, the stored layout's version)
    # and the timers' bookkeeping (leases, locks, the lag each reports)
    # stay; nothing of any job does.
    allowed_exact = {"{dq}:topics", "{dq}:idle", "{dq}:totals", "{dq}:seq", "{dq}:buckets",
                     "{dq}:shards", "{dq}:layout", "{dq}:timers", "{dq}:timerlag",
                     "{dq}:leases", "{dq}:horizon"}
    allowed_prefix = ("{dq}:s:", "{dq}:lock:")
    extra = [k for k in keys if k not in allowed_exact and not k.startswith(allowed_prefix)]
    if extra:
        L.violation("leftover_keys", "%d keys besides stats/topics/idle/totals/seq/buckets/"
                    "shards/layout/lock/timers/timerlag/leases/horizon: %s" %
                    (len(extra), extra[:30]))
    # stats over HTTP equal the Redis hashes, and the counters agree with the ledger
    conn = Http(c.http_port, timeout=30)
    st, stats = call(ctx, conn, "stats", {})
    conn.close()
    totals = collections.Counter()
    if final is not None:
        for t, row in final["stats"].items():
            for f, v in row.items():
                totals[f] += v
            # GET stats adds whether the topic is paused (no job counter).
            shown = {f: v for f, v in (stats["topics"].get(t) or {}).items() if f != "paused"}
            if st == 200 and shown != row:
                L.violation("stats", "GET stats for %s = %r, Redis holds %r" %
                            (t, stats["topics"].get(t), row))
        if st != 200:
            L.violation("stats", "stats answered %s %r" % (st, stats))
        elif stats["total"] != dict(totals):
            L.violation("stats", "stats total %r, Redis sums %r" % (stats["total"], dict(totals)))
    with L.lock:
        deliveries = L.counts["deliveries"]
        unknown_pops = L.unknown_pop_jobs
        uncertain_adds = sum(j.uncertain for j in L.jobs.values())
        fin200, del200 = L.counts["finish_200"], L.counts["delete_200"]
    if totals:
        if totals["popped"] < deliveries:
            L.violation("stats", "Redis counted %d pops, clients received %d deliveries" %
                        (totals["popped"], deliveries))
        if totals["popped"] - deliveries > unknown_pops:
            L.violation("stats", "Redis counted %d pops, clients received %d deliveries and at "
                        "most %d more could be in pops with an unknown outcome (a 503 pop "
                        "reserved a job?)" % (totals["popped"], deliveries, unknown_pops))
        if totals["added"] < fig["acked"]:
            L.violation("stats", "Redis counted %d adds, %d were acknowledged" %
                        (totals["added"], fig["acked"]))
        if totals["added"] > fig["acked"] + fig["readded_by_retry"] + uncertain_adds:
            L.violation("stats", "Redis counted %d adds; acknowledged %d (+%d re-added, %d "
                        "unknown outcomes)" % (totals["added"], fig["acked"],
                                               fig["readded_by_retry"], uncertain_adds))
        if totals["finished"] < fin200 or totals["deleted"] < del200:
            L.violation("stats", "Redis counted finished %d deleted %d; acknowledged %d and %d" %
                        (totals["finished"], totals["deleted"], fin200, del200))

    # figures
    with L.lock:
        counts = dict(L.counts)
        status = dict(L.status)
        lat = {k: (v[0], round(v[1] / max(1, v[0]) * 1000, 1), round(v[2], 3))
               for k, v in L.latency.items()}
        violations = list(L.violations)
    print()
    print("==== figures (profile %s, seed %d) ====" % (ctx.args.profile, ctx.args.seed))
    print("run: %.0f s of load and faults, drain %.1f s, total %.0f s" %
          (t_load_end, drained_at - t_load_end, ctx.rel()))
    print("jobs added (ids): %d, acknowledged: %d (%d after an attempt with an unknown outcome:"
          " %d answered 200, possibly a second creation, %d answered 409)" % (
              ctx.seq, fig["acked"], fig["acked_after_unknown_outcome"], fig["readded_by_retry"],
              fig["acked_after_unknown_outcome"] - fig["readded_by_retry"]))
    print("jobs created twice by the retry of an add answered 504 (the first creation was "
          "already delivered and finished when the retry answered 200): %d" % fig["created_twice"])
    print("deliveries: %d, redeliveries (attempts > 1): %d, releases: %d, jobs delivered: %d, "
          "deleted before delivery: %d (%d of them by a delete answered 504 then 404)" % (
              counts.get("deliveries", 0), counts.get("redeliveries", 0),
              counts.get("releases", 0), fig["delivered_jobs"],
              fig["deleted_before_delivery"], fig["deleted_by_unknown_outcome_delete"]))
    print("finish 200/404: %d/%d, delete 200/404: %d/%d, pops with unknown outcome: %d" % (
        counts.get("finish_200", 0), counts.get("finish_404", 0), counts.get("delete_200", 0),
        counts.get("delete_404", 0), counts.get("pops_unknown_outcome", 0)))
    print("Redis counters: %s" % dict(totals))
    print("faults injected (%d): %s" % (sum(ctx.fault_counts.values()),
                                        ", ".join("%s %d" % kv for kv in
                                                  sorted(ctx.fault_counts.items()))))
    by_cmd = collections.defaultdict(collections.Counter)
    for (fault, cmd, st), n in status.items():
        by_cmd[cmd][str(st).split("/")[0] if st is not None else "conn-error"] += n
    print("answers by command: %s" % "; ".join(
        "%s %s" % (cmd, dict(sorted(v.items(), key=str))) for cmd, v in sorted(by_cmd.items())))
    during = collections.defaultdict(collections.Counter)
    for (fault, cmd, st), n in status.items():
        if st != 200 and st != 404:
            during[fault][st if st is not None else "conn-error"] += n
    print("non-200 answers by fault in progress: %s" % "; ".join(
        "%s %s" % (f, dict(v)) for f, v in sorted(during.items())))
    print("  (503/nginx: nginx found no backend to connect to; 503/delayq: delayq found Redis "
          "unavailable; 504/nginx: a backend failed after receiving the request)")
    nolive = sum(n for (fault, cmd, st), n in status.items() if st == "503/nginx")
    if nolive:
        print("availability: %d requests answered 503 by nginx (no backend reachable) although "
              "at most one of the two backends was ever stopped; nginx marks a backend down for "
              "fail_timeout after one failed request (max_fails=1 by default)" % nolive)
    print("latency (n, mean ms, max s): %s" % lat)
    if L.slow:
        print("requests slower than 10 s beyond their long-poll: %s" % L.slow[:20])
    print("invariant checks: %d runs, %d with problems" % (
        len(ctx.invariant_runs), sum(1 for r in ctx.invariant_runs if r[3])))
    if final:
        print("final Redis: %d jobs, %d bucket entries, stale entries ready %d buried %d" % (
            final["jobs"], final["bucket_entries"], final["stale_ready"], final["stale_buried"]))
    print("keys left: %d (%s)" % (len(keys), ", ".join(
        sorted({k.split(":")[1] if k.count(":") > 1 else k for k in keys}))))
    print("losses: %d, duplicates within TTR: %d, unresolved after drain: %d, invariant "
          "violations: %d" % (fig["losses"], fig["duplicates_within_ttr"], len(unresolved),
                              sum(1 for v in violations if v[0] == "invariant")))
    print("fault sequence:")
    for f in ctx.faults:
        print("  %8.2f s %-20s %s (%.2f s)" % f)
    problems = list(violations)
    if unresolved and not fig["losses"]:
        problems.append(("unresolved", "%d acknowledged jobs neither finished nor deleted by the "
                         "drain deadline: %s" % (len(unresolved), [
                             (j, where(j)) for j in unresolved[:10]])))
    if ctx.errors:
        problems += [("run", e) for e in ctx.errors]
    if ctx.seq < prof["min_jobs"]:
        problems.append(("run", "only %d jobs (< %d)" % (ctx.seq, prof["min_jobs"])))
    if problems:
        print("\nFAILED: %d problems (seed %d)" % (len(problems), ctx.args.seed))
        kinds = collections.Counter(k for k, _ in problems)
        print("by kind: %s" % dict(kinds))
        for k, text in problems[:80]:
            print("  %s: %s" % (k, text))
        return 1
    print("\nPASSED (seed %d)" % ctx.args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

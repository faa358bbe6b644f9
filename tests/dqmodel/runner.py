"""The stateful random tester: drives delayq with random command sequences
from several connections, checks every answer against the reference model
(model.py), and after each step the jobs it touched (get), its topics'
gauges (stats) and, every few steps, the deployment's invariants; at the
end, liveness: every job that has not ended is delivered.

A sequence is a list of symbolic operations (topic and job numbers, not
names), so it replays anywhere under a fresh name prefix; a failing one is
shrunk to a minimal sequence that still fails, to keep under regressions/.

By hand (builds in the checkout, a private deployment):
  PYTHONPATH=tests python3 -m dqmodel.runner --seconds 600 [--seed N]
      [--redis cluster] [--shards 4] [--save FILE]
  PYTHONPATH=tests python3 -m dqmodel.runner --replay FILE
"""

import argparse
import json
import os
import random
import sys
import time

from dqmodel.model import STATES, Model
from dqtest import SLOW

SHORT_TTR = 1.0      # seconds: a TTR the run lets run out
LONG = 3600          # seconds: a delay or TTR that never runs out in a run
SETTLE_SLACK = 0.15  # seconds after the latest possible deadline before looking
SETTLE_LIMIT = 10.0 * SLOW  # seconds the service may take to expire or move a job


class Divergence(Exception):
    """The service answered or held what the model does not allow."""

    def __init__(self, step, kind, message):
        super().__init__("step %d (%s): %s" % (step, kind, message))
        self.step = step
        self.kind = kind


# ---------------------------------------------------------------- names


class Names:
    """Concrete names for a run: topics and job ids under one prefix. Job
    slot j has key number j % 3 (0: no key); a keyed job's id is
    <key>@<j>, which keeps it in its key's shard."""

    def __init__(self, prefix):
        self.prefix = prefix

    def topic(self, t):
        return "%s-t%d" % (self.prefix, t)

    def key(self, j):
        k = j % 3
        return None if k == 0 else "%s-k%d" % (self.prefix, k)

    def job(self, j):
        key = self.key(j)
        return "%s@%d" % (key, j) if key else "%s-j%d" % (self.prefix, j)


# ---------------------------------------------------------------- generation


# What a command that names a job acts on (the others answer 404 or 409).
TARGETS = {"finish": None, "delete": None, "get": None, "release": ("reserved",),
           "bury": ("reserved",), "touch": ("reserved",), "kick": ("buried",),
           "reschedule": ("delay", "ready", "buried")}
# The commands above that end or move a job from more than one state.
LEAVE_ANY_STATE = ("finish", "delete", "reschedule")


# How often each command comes, in a sequence of either profile.
WEIGHTS = {"add": 24, "pop": 22, "finish": 8, "delete": 5, "release": 6, "bury": 4, "kick": 4,
           "kick_topic": 2, "touch": 3, "reschedule": 4, "purge": 1, "pause": 2, "policy": 3,
           "get": 2, "redeploy": 1}
# A redeploy's bucket counts, and its shard counts as multiples of the
# deployment's own: two of each, so that a later redeploy meets shards and
# buckets an earlier one used under other counts.
REDEPLOY_BUCKETS = (4, 16)
REDEPLOY_SHARDS = (1, 2, 4)


def generate(rng, n_ops, live=None, n_topics=2, n_jobs=12):
    """Yields n_ops random symbolic operations. live(), when given, is read
    before each one: the model's live jobs as {slot: state}. So that
    sequences reach deep states (a key's third job, a kicked job's
    redelivery, a key's turn let back) within a short run:
    - a command that names a job mostly names one it acts on, often one of
      the key the command before named;
    - a command that ends or moves a job in any state names a ready one
      half the time: a job leaving the queue other than by a pop is where
      the queue's bookkeeping (a key's turn, its room) is easiest to forget;
    - most sequences begin with a key limit on topic 0: limits only matter
      once set, and a policy set late leaves few operations to meet it;
    - half the sequences (swarm testing: a run that leaves features out
      goes deeper into the others) keep to one key of topic 0, under a key
      limit of 1 set first and never changed, with no short TTR or delay,
      so that key's set-aside jobs pile up and are let back under every
      command;
    - now and then (not in the one-key profile) the deployment is
      redeployed under other bucket and shard counts: its keys removed,
      Redis and its loaded library kept, as an operator would."""
    n = 0
    one_key = rng.random() < 0.5
    if one_key or rng.random() < 0.7:
        n += 1
        yield {"op": "policy", "t": 0, "concurrency": rng.choice([None, None, 2]),
               "key_concurrency": 1 if one_key else rng.choice([1, 2]),
               "keep": rng.choice([None, LONG])}
    weights = dict(WEIGHTS, policy=0, redeploy=0) if one_key else WEIGHTS
    key_slots = [j for j in range(n_jobs) if j % 3 == 1]
    last = None  # the slot the operation before named

    def job(kind):
        states = TARGETS[kind]
        if kind in LEAVE_ANY_STATE and rng.random() < 0.5:
            states = ("ready",)
        slots = sorted(slot for slot, state in (live() if live else {}).items()
                       if states is None or state in states)
        same_key = [s for s in slots if last is not None and s % 3 == last % 3 != 0]
        if same_key and rng.random() < 0.4:
            return rng.choice(same_key)
        if slots and rng.random() < 0.85:
            return rng.choice(slots)
        return rng.randrange(n_jobs)

    for _ in range(n_ops - n):
        t = rng.randrange(n_topics)
        kind = rng.choices(list(weights), list(weights.values()))[0]
        op = {"op": kind}
        if kind in TARGETS:
            op.update(j=job(kind))
        if kind == "add":
            focus = one_key and rng.random() < 0.85
            op.update(t=0 if focus or rng.random() < 0.6 else t,
                      j=rng.choice(key_slots) if focus else rng.randrange(n_jobs),
                      delay=rng.choice(["0", "0", "long"] if one_key else ["0", "0", "short", "long"]),
                      ttr="long" if one_key else rng.choice(["short", "long", "long"]),
                      retries=rng.choice([None, 0, 1, 2]), replace=rng.random() < 0.25,
                      backoff=rng.random() < 0.25)
        elif kind == "pop":
            ts = [t] if rng.random() < 0.7 else list(range(n_topics))
            op.update(ts=ts, count=rng.choice([None, None, 2, 5]))
        elif kind == "release":
            op.update(delayed=rng.random() < 0.3)
        elif kind == "reschedule":
            op.update(delayed=rng.random() < 0.4)
        elif kind == "kick_topic":
            op.update(t=t)
        elif kind == "purge":
            op.update(t=t, state=rng.choice([None, "delay", "ready", "reserved", "buried"]))
        elif kind == "pause":
            op.update(t=t, on=rng.random() < 0.6)
        elif kind == "redeploy":
            op.update(buckets=rng.choice(REDEPLOY_BUCKETS), shards=rng.choice(REDEPLOY_SHARDS))
        elif kind == "policy":
            op.update(t=t, concurrency=rng.choice([None, None, 1, 2, 3]),
                      key_concurrency=rng.choice([None, 1, 1, 2]),
                      keep=rng.choice([None, None, LONG]))
        last = op.get("j")
        yield op


# ---------------------------------------------------------------- the run


class Run:
    """One sequence against one deployment, under one name prefix."""

    def __init__(self, deployment, prefix, n_conns=3, invariants_every=10, log=None):
        self.d = deployment
        self.names = Names(prefix)
        self.model = Model(deployment.shard_of, deployment.shards)
        self.conns = [deployment.new_http() for _ in range(n_conns)]
        self.invariants_every = invariants_every
        self.log = log
        self.step = 0
        self.topics_used = set()
        self.slots_used = set()
        # id -> (kind "ttr" | "due", earliest, latest): a job whose timing
        # is the service's, between the earliest and latest time it can fall.
        self.pending = {}
        self.margin = 0.5  # grows with the slowest request seen
        self.last_popped = []
        self.done = []
        # the counts a redeploy multiplies, and the run's end restores
        self.base = {"buckets": int(deployment.flags.get("buckets", 16)),
                     "shards": deployment.shards}
        self.redeployed = False

    # ---- requests

    def _req(self, cmd, **fields):
        conn = self.conns[self.step % len(self.conns)]
        t0 = time.monotonic()
        st, r = self.d.req(cmd, conn=conn, **fields)
        self.margin = max(self.margin, 3 * (time.monotonic() - t0))
        if self.log:
            self.log("  %s %s -> %s %s" % (cmd, json.dumps(fields)[:200], st, json.dumps(r)[:300]))
        return st, r

    def _get(self, path):
        conn = self.conns[self.step % len(self.conns)]
        return self.d.get(path, conn=conn)

    def fail(self, kind, message):
        raise Divergence(self.step, kind, message)

    def expect(self, what, outcome, st, r):
        if st != outcome.status:
            self.fail("answer", "%s: model says %d %s, service %d %r"
                      % (what, outcome.status, outcome.code or "", st, r))
        if st != 200:
            if not isinstance(r, dict) or r.get("code") != outcome.code:
                self.fail("answer", "%s: model says code %s, service %r" % (what, outcome.code, r))
            return
        for k, v in outcome.fields.items():
            if r.get(k) != v:
                self.fail("answer", "%s: model says %s=%r, service %r" % (what, k, v, r))

    # ---- the service's own timing

    def _note_pending(self, jid, kind, t_send, t_recv, seconds):
        self.pending[jid] = (kind, t_send + seconds, t_recv + seconds)

    def settle(self, everything=False):
        """Lets the service expire the TTRs and move the short delays that
        are due or nearly so, and applies each to the model once seen."""
        now = time.monotonic()
        due = [(jid, p) for jid, p in self.pending.items()
               if everything or now > p[1] - self.margin]
        if not due:
            return
        latest = max(p[2] for _, p in due)
        time.sleep(max(0.0, latest + SETTLE_SLACK - time.monotonic()))
        for jid, (kind, lo, _) in due:
            del self.pending[jid]
            leaving = "reserved" if kind == "ttr" else "delay"
            deadline = time.monotonic() + SETTLE_LIMIT
            while True:
                st, r = self._get("/get?id=" + jid)
                if st == 200 and r.get("state") != leaving:
                    break
                if st != 200 or time.monotonic() > deadline:
                    self.fail("timing", "%s: %s job not moved by the service in time: %d %r"
                              % (jid, leaving, st, r))
                time.sleep(0.05)
            if kind == "ttr":
                if self.model.expire(jid) == "delay":  # its backoff step, from the expiry
                    if r.get("state") == "ready":
                        self.model.fall_due(jid)  # (seen only after the step too)
                    else:
                        self._note_pending(jid, "due", lo, time.monotonic(), SHORT_TTR)
            else:
                self.model.fall_due(jid)
            self.check_job(jid, "after %s" % ("its TTR" if kind == "ttr" else "its delay"))

    # ---- checks

    def check_job(self, jid, what):
        want = self.model.view(jid)
        st, r = self._get("/get?id=" + jid)
        if want is None:
            if st != 404:
                self.fail("state", "%s %s: model says gone, service %d %r" % (what, jid, st, r))
            return
        if st != 200:
            self.fail("state", "%s %s: model says %r, service %d %r" % (what, jid, want, st, r))
        for k, v in want.items():
            if r.get(k) != v:
                self.fail("state", "%s %s: model says %s=%r, service %r" % (what, jid, k, v, r))

    def check_topic(self, t):
        topic = self.names.topic(t)
        st, r = self._get("/stats?topic=" + topic)
        if st != 200:
            self.fail("stats", "stats %s: %d %r" % (topic, st, r))
        row = r["topics"][topic]
        want = self.model.counts(topic)
        got = {s: row[s] for s in STATES}
        if got != want:
            self.fail("stats", "stats %s: model says %r, service %r" % (topic, want, got))

    def check_invariants(self):
        from dqtest import invariants
        problems = invariants.check_deployment(self.d)["problems"]
        if problems:
            self.fail("invariants", "; ".join(problems[:5]))

    def check_all(self):
        for j in sorted(self.slots_used):
            self.check_job(self.names.job(j), "check")
        for t in sorted(self.topics_used):
            self.check_topic(t)
        self.check_invariants()

    # ---- operations

    def live_slots(self):
        """The model's live jobs as {slot: state} (generate's live)."""
        return {self._slot_of(jid): j.state for jid, j in self.model.jobs.items()}

    def run(self, ops):
        """Runs ops (a list, or generate's operations as they come); the
        ones run so far are in self.done."""
        for op in ops:
            self.done.append(op)
            self.settle()
            self.apply(op)
            self.step += 1
            if self.invariants_every and self.step % self.invariants_every == 0:
                self.check_invariants()
        self.check_all()
        self.drain()

    def apply(self, op):
        kind = op["op"]
        if "t" in op:
            self.topics_used.add(op["t"])
        if "j" in op:
            self.slots_used.add(op["j"])
        getattr(self, "op_" + kind)(op)
        if "j" in op:
            self.check_job(self.names.job(op["j"]), "after %s" % kind)
            jid = self.names.job(op["j"])
            if jid in self.model.jobs:
                self.topics_used.add(int(self.model.jobs[jid].topic.rsplit("-t", 1)[1]))
        for t in sorted(self.topics_used):
            self.check_topic(t)

    def _job_left(self, jid):
        """A job left the state whose timing the service decides."""
        self.pending.pop(jid, None)

    def op_add(self, op):
        n = self.names
        jid, topic, key = n.job(op["j"]), n.topic(op["t"]), n.key(op["j"])
        body = "b%d.%d-\u00e9" % (op["j"], self.step)
        fields = {"topic": topic, "id": jid, "body": body,
                  "ttr": SHORT_TTR if op["ttr"] == "short" else LONG}
        delay = {"0": 0, "short": SHORT_TTR, "long": LONG}[op["delay"]]
        if delay:
            fields["delay"] = delay
        if op["retries"] is not None:
            fields["retries"] = op["retries"]
        if key:
            fields["key"] = key
        if op["replace"]:
            fields["replace"] = True
        backoff = op.get("backoff", False)
        if backoff:
            fields["backoff"] = [SHORT_TTR]
        want = self.model.add(jid, topic, key, delay > 0, op["retries"], op["ttr"] == "short",
                              body, op["replace"], backoff)
        t0 = time.monotonic()
        st, r = self._req("add", **fields)
        t1 = time.monotonic()
        self.expect("add %s" % jid, want, st, r)
        if st == 200:
            self._job_left(jid)
            if op["delay"] == "short":
                self._note_pending(jid, "due", t0, t1, delay)

    def op_pop(self, op):
        topics = [self.names.topic(t) for t in op["ts"]]
        count = op["count"]
        fields = {"topics": topics}
        if count:
            fields["count"] = count
        expected = self.model.pop_expected(topics, count or 1)
        t0 = time.monotonic()
        st, r = self._req("pop", **fields)
        t1 = time.monotonic()
        if st != 200:
            self.fail("answer", "pop %s: %d %r" % (topics, st, r))
        answers = r["jobs"] if count else ([r] if r.get("id") is not None else [])
        ids = [a["id"] for a in answers]
        complaint = self.model.pop_check(topics, ids)
        if complaint:
            self.fail("pop", complaint)
        if len(ids) != expected:
            self.fail("pop", "pop %s count %s: model says %d jobs may be taken, service took %r"
                      % (topics, count, expected, ids))
        for a in answers:
            j = self.model.jobs[a["id"]]
            if a.get("value") != j.body or a.get("attempts") != j.attempts + 1:
                self.fail("pop", "pop gave %r; model says value %r attempts %d"
                          % (a, j.body, j.attempts + 1))
        self.model.pop_apply(ids)
        self.last_popped = ids
        for jid in ids:
            if self.model.jobs[jid].short_ttr:
                self._note_pending(jid, "ttr", t0, t1, SHORT_TTR)
            self.check_job(jid, "after pop")

    def _by_id(self, cmd, op, model_call, **extra):
        jid = self.names.job(op["j"])
        want = model_call(jid)
        st, r = self._req(cmd, id=jid, **extra)
        self.expect("%s %s" % (cmd, jid), want, st, r)
        return jid, st

    def op_finish(self, op):
        jid, st = self._by_id("finish", op, lambda i: self.model.remove(i, "finished"))
        self._job_left(jid)

    def op_delete(self, op):
        jid, st = self._by_id("delete", op, lambda i: self.model.remove(i, "deleted"))
        self._job_left(jid)

    def op_touch(self, op):
        jid = self.names.job(op["j"])
        t0 = time.monotonic()
        _, st = self._by_id("touch", op, self.model.touch)
        if st == 200 and self.model.jobs[jid].short_ttr:
            self._note_pending(jid, "ttr", t0, time.monotonic(), SHORT_TTR)

    def op_release(self, op):
        extra = {"delay": LONG} if op["delayed"] else {}
        t0 = time.monotonic()
        jid, st = self._by_id("release", op, lambda i: self.model.release(i, op["delayed"]),
                              **extra)
        if st == 200:
            self._job_left(jid)
            if not op["delayed"] and self.model.jobs[jid].state == "delay":  # its backoff step
                self._note_pending(jid, "due", t0, time.monotonic(), SHORT_TTR)

    def op_bury(self, op):
        jid, st = self._by_id("bury", op, self.model.bury)
        if st == 200:
            self._job_left(jid)

    def op_kick(self, op):
        self._by_id("kick", op, self.model.kick_id)

    def op_reschedule(self, op):
        extra = {"delay": LONG if op["delayed"] else 0}
        jid, st = self._by_id("reschedule", op,
                              lambda i: self.model.reschedule(i, op["delayed"]), **extra)
        if st == 200:
            self._job_left(jid)

    def op_get(self, op):
        pass  # apply() checks the job after every operation that names one

    def op_kick_topic(self, op):
        topic = self.names.topic(op["t"])
        want = self.model.kick_topic(topic, 10000)
        st, r = self._req("kick", topic=topic, count=10000)
        self.expect("kick %s" % topic, want, st, r)

    def op_purge(self, op):
        topic = self.names.topic(op["t"])
        gone = [j.id for j in self.model.jobs.values()
                if j.topic == topic and (op["state"] is None or j.state == op["state"])]
        want = self.model.purge(topic, op["state"])
        fields = {"topic": topic}
        if op["state"]:
            fields["state"] = op["state"]
        st, r = self._req("purge", **fields)
        self.expect("purge %s" % topic, want, st, r)
        for jid in gone:
            self._job_left(jid)

    def op_pause(self, op):
        topic = self.names.topic(op["t"])
        want = self.model.pause(topic, op["on"])
        st, r = self._req("pause" if op["on"] else "resume", topic=topic)
        self.expect("pause %s" % topic, want, st, r)

    def op_policy(self, op):
        topic = self.names.topic(op["t"])
        concurrency = op.get("concurrency")
        if concurrency is not None:  # at least one job per shard (PROTOCOL: else 400)
            concurrency = max(concurrency, self.model.shards)
        want = self.model.policy(topic, concurrency, op["key_concurrency"], op["keep"])
        st, r = self._req("policy", topic=topic, concurrency=concurrency,
                          key_concurrency=op["key_concurrency"], keep=op["keep"])
        self.expect("policy %s" % topic, want, st, r)

    def op_redeploy(self, op):
        """Every job and policy is gone with the keys; the model starts
        afresh under the new counts (its shares split over the new
        shards)."""
        self.d.redeploy(buckets=op["buckets"], shards=self.base["shards"] * op["shards"])
        self.redeployed = True
        self.model = Model(self.d.shard_of, self.d.shards)
        self.pending.clear()
        self.last_popped = []

    def restore(self):
        """The deployment as the run found it, for the next run: its counts,
        and a library that remembers nothing of this run's redeploys (so a
        sequence fails alone, as it will when replayed, or not at all)."""
        if self.redeployed:
            self.d.redeploy(**self.base)
            self.d.reload_functions()
            self.redeployed = False

    # ---- liveness

    def drain(self, rounds=40):
        """Brings every job that has not ended to delivery: resume the
        topics, give reserved, buried and delayed jobs back to ready, and
        pop and finish until none is left. A job the service will not
        deliver while the model says it may is a divergence (liveness)."""
        for t in sorted(self.topics_used):
            if self.names.topic(t) in self.model.paused:
                self.apply({"op": "pause", "t": t, "on": False})
        self.settle(everything=True)
        for _ in range(rounds):
            if not self.model.jobs:
                self.check_all()
                return
            for jid, j in sorted(self.model.jobs.items()):
                slot = {"j": self._slot_of(jid)}
                if j.state == "reserved":
                    self.apply(dict(slot, op="release", delayed=False))
                elif j.state == "buried":
                    self.apply(dict(slot, op="kick"))
                elif j.state == "delay":
                    self.apply(dict(slot, op="reschedule", delayed=False))
            for t in sorted(self.topics_used):
                while True:
                    before = len(self.model.jobs)
                    self.apply({"op": "pop", "ts": [t], "count": 100})
                    for jid in self.last_popped:
                        self.apply({"op": "finish", "j": self._slot_of(jid)})
                    if len(self.model.jobs) == before:
                        break
            self.settle(everything=True)
        self.fail("liveness", "jobs not delivered after %d rounds: %r"
                  % (rounds, sorted(self.model.jobs)))

    def _slot_of(self, jid):
        return int(jid.rsplit("@", 1)[1]) if "@" in jid else int(jid.rsplit("-j", 1)[1])


# ---------------------------------------------------------------- shrinking


def replay(deployment, ops, prefix, log=None, rng=None, n_ops=0):
    """Runs ops under prefix (or, with rng, n_ops that generate makes as
    the run goes); returns the Divergence, or None. A divergence's
    sequence is its `ops`."""
    run = Run(deployment, prefix, log=log)
    try:
        run.run(generate(rng, n_ops, run.live_slots) if rng else ops)
    except Divergence as e:
        e.ops = run.done
        return e
    finally:
        for conn in run.conns:
            conn.close()
        run.restore()
    return None


def shrink(deployment, ops, first, seconds, prefix, say=print):
    """ddmin: the smallest sequence found within seconds that still fails
    with the same kind of divergence as first, and the name prefix it
    failed under (placement hashes the names: a sequence may fail only
    when its topic falls in some bucket, its job in some shard)."""
    deadline = time.monotonic() + seconds
    ops = ops[:first.step + 1]
    tries = [0]
    failed_under = [prefix]

    def fails(candidate):
        tries[0] += 1
        under = "%s-s%d" % (prefix, tries[0])
        e = replay(deployment, candidate, under)
        if e is not None and e.kind == first.kind:
            failed_under[0] = under
            return True
        return False

    n = 2
    while len(ops) >= 2 and time.monotonic() < deadline:
        chunk = max(1, len(ops) // n)
        reduced = False
        for i in range(0, len(ops), chunk):
            if time.monotonic() >= deadline:
                break
            candidate = ops[:i] + ops[i + chunk:]
            if candidate and fails(candidate):
                ops, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(ops), n * 2)
    say("shrunk to %d operations in %d replays" % (len(ops), tries[0]))
    return ops, failed_under[0]


# ---------------------------------------------------------------- driving


def explore(deployment, seed, seconds, ops_per_run=60, shrink_seconds=120, say=print):
    """Random sequences from seed until seconds pass or one fails. Returns
    None, or (divergence, minimal ops, the name prefix they fail under)."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < deadline:
        prefix = "m%d-%d" % (seed, runs)
        e = replay(deployment, None, prefix, rng=rng, n_ops=ops_per_run)
        runs += 1
        if e is not None:
            say("seed %d, run %d: %s" % (seed, runs, e))
            return (e, *shrink(deployment, e.ops, e, shrink_seconds, prefix, say))
    say("seed %d: %d runs of %d operations, no divergence" % (seed, runs, ops_per_run))
    return None


def kept(seed, divergence, ops, prefix):
    """A failing sequence as regressions/ keeps it; replay it under its
    prefix (the names it failed under)."""
    return {"seed": seed, "divergence": str(divergence), "prefix": prefix, "ops": ops}


def save(path, seed, divergence, ops, prefix):
    with open(path, "w") as f:
        json.dump(kept(seed, divergence, ops, prefix), f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--ops", type=int, default=60, help="operations per sequence")
    ap.add_argument("--redis", default=None, help="single, cluster or sentinel")
    ap.add_argument("--shards", type=int, default=None)
    ap.add_argument("--save", help="where to write a failing sequence")
    ap.add_argument("--shrink-seconds", type=float, default=120,
                    help="how long to shrink a failing sequence (0: not at all)")
    ap.add_argument("--replay", help="a saved sequence to run, verbosely")
    a = ap.parse_args()
    from dqtest import Deployment, require_build, stop_on_sigterm
    require_build()
    stop_on_sigterm()  # a SIGTERM (putback.py's, a driver's timeout) stops the deployment
    kw = {}
    if a.shards:
        kw["shards"] = a.shards
    with Deployment(redis_mode=a.redis, **kw) as d:
        if a.replay:
            with open(a.replay) as f:
                data = json.load(f)
            e = replay(d, data["ops"], data.get("prefix", "replay"), log=print)
            print("divergence: %s" % e if e else "no divergence")
            return 1 if e else 0
        seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
        print("seed %d" % seed, flush=True)
        found = explore(d, seed, a.seconds, a.ops, a.shrink_seconds)
        if found and a.save:
            save(a.save, seed, *found)
        return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

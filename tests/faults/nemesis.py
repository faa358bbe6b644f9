#!/usr/bin/env python3
"""The nemesis: Redis faults that are never healed for delayq, on a real
Redis Cluster (3 masters, a replica each, cluster-node-timeout 2000) or
behind real Sentinels (a primary, two replicas, three sentinels), under a
ledger load with pull consumers and push receivers, while delayq's own
processes are killed at random between them.

Redis faults (each held past the time a failover takes):
  kill_forever  kill -9 of a master (primary), never restarted; a fresh
                node joins as the promoted one's replica; the promoted one
                is killed the same way (the second failover) and another
                fresh node joins
  kill_orphan   a master (primary) with one replica lost for good, and no
                node joins while it is watched: the promoted replica serves
                alone (behind Sentinel a replica is lost first, so the
                primary has one). Its shards' adds must be refused at once
                (503, "shard N has no replica"), which counts as serving;
                every job acknowledged before the kill must be delivered
                within 15 s of the promotion (or of its due time). Then
                fresh nodes join, as an operator would add them, and the
                run goes on
  freeze        SIGSTOP of a master past the node timeout until its replica
                is promoted, then SIGCONT: it wakes up stale
  cut_delayq    a partition between delayq and one master, 10 s, healed
  cut_replica   a partition between a master and its replica, 10 s, healed
  slow          CLIENT PAUSE past redis_timeout_ms
  reshard       (Cluster) a shard's slots move to another master under load
  remove_node   (Cluster) a fresh master takes a shard's slots, gives them
                to another master and is removed (del-node)
Process faults, between them: kill -9 of an fcgi worker, of an fcgi master,
of a timer, of a pusher, each started again as a supervisor would.

Checks: no acknowledged job lost; none delivered twice within its TTR; no
callback sent twice within delayq-push's window; no finished job back;
every shard consistent at the end and nothing left; every delayq process
(each fcgi instance, each timer, each pusher) serves again within 15 s of
each Redis fault's start without being restarted and without /health
(after cut_replica: or within 5 s of the replica's link being up again,
when Redis' replication takes longer than 10 s to resume).

  tests/faults/nemesis.py --redis cluster --profile short    # CI
  tests/faults/nemesis.py --redis sentinel --profile short   # CI
  tests/faults/nemesis.py --redis cluster --profile long     # 30 minutes
  tests/faults/nemesis.py --redis cluster --seed 7           # replays seed 7
  tests/faults/nemesis.py --redis cluster --faults kill_forever --observe 60

Partitions need root, iproute2 and iptables (network namespaces, a bridge,
DROP rules; see dqtest/netlab.py); without them use --net loopback, which
leaves the cut_* faults out. Exit status: 0 when every check passed, 1 on a
violation, 2 when the run could not be carried out.
"""

import argparse
import atexit
import json
import os
import random
import re
import sys
import threading
import time
import traceback
import types

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dqtest  # noqa: E402
from dqtest import (Deployment, Resp, fcgi_client, invariants, job_keys,  # noqa: E402
                    netlab)
from dqtest.ledger import LedgerLoad  # noqa: E402
from dqtest.receiver import Receiver  # noqa: E402
from dqtest.redis_cluster import key_slot  # noqa: E402
import proc_faults  # noqa: E402
import redis_faults  # noqa: E402
from redis_faults import ClusterFaults, SentinelFaults  # noqa: E402

SERVE_WITHIN = 15.0      # every process serves again within this of a fault's start
DELIVER_WITHIN = 15.0    # kill_orphan: every acknowledged job delivered within this of the promotion
NO_REPLICA = "no replica"  # a probe's add refused at once on a shard short of replicas
# ... or, after a master/replica partition, within this of the replica's
# link being up again: until then no write can be confirmed (WAIT), and how
# soon Redis' replication resumes after a heal is TCP's back-off, not delayq.
AFTER_REPLICATION = 5.0
CUT_SECONDS = 10.0       # how long a partition is held
PAUSE_MS = 3000          # slow: longer than redis_timeout_ms
REDIS_TIMEOUT_MS = 2000
LEASE_MS = 2000
PUSH_GRACE_MS = 3000
CALLBACK_TIMEOUT = 1.0
ACT_MARGIN = 0.5         # what a timer or pusher did this soon after a fault's start does not count

PROFILES = {
    # rounds: every Redis fault kind this many times (shuffled), or as many
    # shuffled rounds as fit in `duration` seconds; kills: process faults
    # between two Redis faults; observe: how long recovery is watched.
    "short": dict(rounds=1, duration=None, kills=(1, 2), gap=(1.0, 3.0), observe=20.0,
                  rate=50.0, drain=90.0),
    "long": dict(rounds=None, duration=1800.0, kills=(1, 3), gap=(2.0, 6.0), observe=30.0,
                 rate=50.0, drain=120.0),
}
KINDS = {
    "cluster": ["kill_forever", "kill_orphan", "freeze", "cut_delayq", "cut_replica", "slow",
                "reshard", "remove_node"],
    "sentinel": ["kill_forever", "kill_orphan", "freeze", "cut_delayq", "cut_replica", "slow"],
}
PROC_KINDS = ["worker_kill9", "master_kill9", "timer_kill9_of_two", "pusher_kill9"]


class Violations:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def add(self, kind, text):
        with self.lock:
            self.items.append((kind, text))
        print("VIOLATION %s: %s" % (kind, text), flush=True)


def socket_owner(port, pids):
    """The pid among pids whose TCP socket has local port `port` (the
    sender of a request our receiver is answering), or None."""
    for pid in pids:
        try:
            with open("/proc/%d/net/tcp" % pid) as f:
                rows = [r.split() for r in f.read().splitlines()[1:]]
            inodes = {r[9] for r in rows if int(r[1].split(":")[1], 16) == port}
            if not inodes:
                continue
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return pid
        except (OSError, ValueError, IndexError):
            continue
    return None


class Observer:
    """What each delayq process does, recorded as it happens:
    - probes: one thread per delayq-fcgi instance adds jobs straight to
      its socket (FastCGI, no nginx), cycling over the shards, into the
      ledger: (time answered, instance, shard, status);
    - heartbeats: every timer's registration in each shard's
      <prefix>:timers, read from whichever node serves the shard now:
      {(token, shard): set of heartbeat times};
    - callbacks: who (pusher pid) sent which job's attempt, when."""

    def __init__(self, d, load, net):
        self.d, self.load, self.net = d, load, net
        self.lock = threading.Lock()
        self.probes = []
        self.heartbeats = {}
        self.callbacks = []  # (time, pid, job id, attempt)
        self.ports = {}      # sender port -> pid
        self.stop = threading.Event()
        self.threads = []
        self.clock = time.time() - time.monotonic()
        self._resps = {}

    def start(self):
        for i in range(self.d.n_fcgi):
            self.threads.append(threading.Thread(target=self._probe, args=(i,), daemon=True))
        self.threads.append(threading.Thread(target=self._watch, daemon=True))
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)

    # ---- probes

    def _probe(self, i):
        ids = {}  # shard -> next id number
        n = 0

        refused = threading.Event()  # this add was refused for want of a replica
        # the add's stop: the run's end, or a refusal (the probe goes on to
        # the next shard)
        give_up = types.SimpleNamespace(is_set=lambda: self.stop.is_set() or refused.is_set())

        def post(cmd, fields):
            try:
                st, body = fcgi_client.request(self.d.sock(i), "POST", "/" + cmd,
                                               json.dumps(fields).encode(), timeout=10)
            except OSError:
                st, body = 0, b""
            if st == 503 and b"has no replica" in body:
                st = NO_REPLICA
                refused.set()
            with self.lock:
                self.probes.append((time.monotonic(), i, self.d.shard_of(fields["id"]), st))
            return st, {}

        while not self.stop.is_set():
            shard = n % self.d.shards
            n += 1
            while True:
                k = ids.get(shard, 0)
                ids[shard] = k + 1
                jid = "%s-q%d-%d-%d" % (self.load.topic, i, shard, k)
                if self.d.shard_of(jid) == shard:
                    break
            fields = {"topic": self.load.topic, "id": jid, "body": jid, "ttr": self.load.ttr}
            if (n // self.d.shards) % 2:  # every other round: callback jobs for every shard
                fields["callback"] = {"url": self.load.callback_url,
                                      "timeout": self.load.callback_timeout}
            refused.clear()
            self.load.add(post, fields, stop=give_up)
            time.sleep(0.1)

    # ---- timers' heartbeats

    def _node_for(self, shard):
        """(host, port) of the node serving shard now, as the harness knows."""
        rs = self.d.redis_server
        if self.d.redis_mode == "cluster":
            port = rs.port_of_slot(key_slot(self.d.tag(shard)))
            return rs.server(port).host, port
        if self.d.redis_mode == "sentinel":
            p = rs.primary()
            return p.host, p.port
        return "127.0.0.1", rs.port

    def _watch(self):
        while not self.stop.is_set():
            for shard in range(self.d.shards):
                addr = None
                try:
                    addr = self._node_for(shard)
                    r = self._resps.get(addr)
                    if r is None:
                        r = self._resps[addr] = Resp(addr[1], host=addr[0], timeout=1.0)
                    rows = r("ZRANGE", self.d.tag(shard) + ":timers", 0, -1, "WITHSCORES")
                except Exception:  # noqa: BLE001 (a node down or moving: next round)
                    r = self._resps.pop(addr, None)
                    if r:
                        r.close()
                    continue
                with self.lock:
                    for tok, score in zip(rows[::2], rows[1::2]):
                        hb = (float(score) - LEASE_MS) / 1000.0 - self.clock
                        self.heartbeats.setdefault((dqtest.text(tok), shard), set()).add(hb)
            time.sleep(0.25)

    # ---- callbacks

    def answer(self, req):
        """The receiver's answer to every callback (200), noting it."""
        now = time.monotonic()
        jid = req.headers.get("webhook-id", "").replace("%2E", ".")
        attempt = int(req.headers.get("delayq-attempt") or 0)
        port = req.peer[1]
        with self.lock:
            pid = self.ports.get(port)
        if pid is None:
            pid = socket_owner(port, [p.pid for p in self.d.pushers if p.poll() is None])
            if pid:
                with self.lock:
                    self.ports[port] = pid
        with self.lock:
            self.callbacks.append((now, pid, jid, attempt))
        self.load.note_callback(jid, attempt, now)
        return 200, {}, b"ok"

    # ---- figures

    def live_timers(self, t0):
        """Tokens of the timers that were alive at t0 (a heartbeat in the
        lease before it)."""
        with self.lock:
            return sorted({tok for (tok, _), hbs in self.heartbeats.items()
                           if any(t0 - LEASE_MS / 1000.0 - 1.0 <= h <= t0 for h in hbs)})

    def recovery(self, ev, t_end):
        """{process: seconds from ev's start until it served again, or None}
        and notes. fcgi: the first add answered 200 after the last one that
        was not (an add for every shard in turn; after kill_orphan a refusal
        for want of a replica is an answer too); timer: its first
        heartbeat after the start on every shard the fault hit; pusher: its
        first callback after the start of a job of those shards."""
        t0, shards = ev["t0"], ev["shards"] or list(range(self.d.shards))
        # A timer's heartbeat or a callback in the first moments may have
        # been written or sent before the fault took hold.
        settled = t0 + ACT_MARGIN
        out, notes = {}, []
        with self.lock:
            probes = [p for p in self.probes if t0 <= p[0] <= t_end]
            callbacks = [c for c in self.callbacks if t0 <= c[0] <= t_end]
            heartbeats = {k: sorted(v) for k, v in self.heartbeats.items()}
        served = (200, NO_REPLICA) if ev.get("orphan") else (200,)
        for i in range(self.d.n_fcgi):
            mine = [(t, st) for t, inst, _, st in probes if inst == i]
            bad = [t for t, st in mine if st not in served]
            good = [t for t, st in mine if st in served and (not bad or t > bad[-1])]
            out["fcgi%d" % (i + 1)] = (good[0] - t0) if good else None
        for tok in ev["timers"]:
            firsts = []
            for k in shards:
                after = [h for h in heartbeats.get((tok, k), []) if settled < h <= t_end]
                firsts.append(after[0] if after else None)
            out["timer %s" % tok[:8]] = (None if None in firsts else max(firsts) - t0)
        callbacks = [c for c in callbacks if c[0] > settled]
        for pid in ev["pushers"]:
            mine = [t for t, p, jid, _ in callbacks if p == pid and self.d.shard_of(jid) in shards]
            if mine:
                out["push %d" % pid] = mine[0] - t0
                continue
            others = [t for t, p, jid, _ in callbacks
                      if p != pid and self.d.shard_of(jid) in shards]
            own = [t for t, p, _, _ in callbacks if p == pid]
            if others and own:
                notes.append("push %d: sent callbacks (+%.1f s) but none of the shards hit; the "
                             "other pusher took those" % (pid, own[0] - t0))
            else:
                out["push %d" % pid] = None
        with self.load.lock:
            due = [(self.load.due[j], min(d[0] for d in self.load.deliveries[j]))
                   for j in self.load.delays
                   if j in self.load.deliveries and self.d.shard_of(j) in shards and
                   t0 <= self.load.due.get(j, 0) <= t_end]
        if due:
            notes.append("delayed jobs of those shards due after the start: first delivered "
                         "+%.1f s, the latest %.1f s after its due time" %
                         (min(d for _, d in due) - t0, max(d - u for u, d in due)))
        return out, notes


def fmt(v):
    return "never" if v is None else "%.1f s" % v


class Nemesis:
    def __init__(self, args, prof):
        self.args, self.prof = args, prof
        self.v = Violations()
        self.lab = None
        self.d = None
        self.receiver = None
        self.events = []   # the Redis faults: dicts (t0, what, shards, recovery, ...)
        self.old_workers = []
        self.closed = False
        self.n_due = 0     # due_callbacks' calls, for unique ids
        self.t_start = time.monotonic()

    def rel(self, t=None):
        return (t if t is not None else time.monotonic()) - self.t_start

    def log(self, msg):
        print("[%7.1f] %s" % (self.rel(), msg), flush=True)

    # ---- set-up

    def setup(self):
        a = self.args
        redis_kw, prefix = {}, []
        host = "127.0.0.1"
        if a.net == "ns":
            self.lab = netlab.NetLab().start()
            host = self.lab.host_ip
            redis_kw["place"] = self.lab.place
            prefix = self.lab.place("delayq")[1]
            self.log("network: bridge %s, subnet %s.0/24, delayq at %s" % (
                self.lab.bridge, self.lab.subnet, self.lab.ip("delayq")))
        # On a signal (exit_on_signals runs the atexit handlers, newest
        # first): the processes stop while the network they talk over is
        # still there, then the network goes (NetLab's own handler, which
        # ran register() before this, is a no-op by then).
        atexit.register(self.close, True)
        shards = {}
        if a.redis == "cluster":
            redis_kw["node_timeout_ms"] = 2000
            shards["shards"] = "auto"  # unset: delayq spreads over every master
        else:
            # Failure detection as slow as the Cluster's node timeout: with
            # 1 s, a loaded machine once made the sentinels fail a primary
            # over again 1 s after its promotion, onto the replica they had
            # not yet re-pointed (with WAIT 1 of 2 replicas, what the other
            # one had acknowledged was lost: docs/OPERATIONS.md).
            redis_kw["down_after_ms"] = 2000
            redis_kw["failover_timeout_ms"] = 4000  # a second failover may follow 8 s later
        self.d = Deployment(
            redis_mode=a.redis, workers=3, threads=16, n_fcgi=2, n_timers=2, n_pushers=2,
            timer_lease_ms=LEASE_MS, redis_timeout_ms=REDIS_TIMEOUT_MS,
            redis_connect_timeout_ms=300, redis_wait_replicas=1, redis_wait_timeout_ms=500,
            push_grace_ms=PUSH_GRACE_MS,
            push_allow="*,private" if a.net == "ns" else "*,loopback",
            redis_kw=redis_kw, exec_prefix=prefix, start_timeout=30.0, **shards)
        self.load = LedgerLoad(self.d, "nm%d" % a.seed, producers=3, consumers=3, ttr=3.0,
                               rate=self.prof["rate"], delayed=0.4, max_delay=3.0,
                               push_share=0.25, callback_timeout=CALLBACK_TIMEOUT, seed=a.seed)
        self.obs = Observer(self.d, self.load, self.lab)
        self.receiver = Receiver(answer=self.obs.answer, host=host).start()
        self.load.callback_url = self.receiver.url()
        self.d.start()
        self.faults = (ClusterFaults if a.redis == "cluster" else SentinelFaults)(
            self.d, random.Random(a.seed))
        self.load.start()
        self.obs.start()

    # ---- the schedule

    def schedule(self):
        """[(kind, seed of its own choices)]: the Redis faults in shuffled
        rounds, process faults between them."""
        a, p = self.args, self.prof
        rng = random.Random(a.seed)
        kinds = [k for k in KINDS[a.redis] if a.net == "ns" or not k.startswith("cut_")]
        if a.faults:
            kinds = [k for k in a.faults.split(",")]
        rounds = p["rounds"] or 1000
        out = []
        for _ in range(rounds):
            r = list(kinds)
            rng.shuffle(r)
            for k in r:
                for _ in range(rng.randint(*p["kills"]) if not a.no_kills else 0):
                    out.append((rng.choice(PROC_KINDS), rng.randrange(1 << 30)))
                out.append((k, rng.randrange(1 << 30)))
        return out

    # ---- Redis faults

    def _place(self, server):
        return self.lab.name_of(server.host)

    def _master_and_replica(self, rng):
        """(shards, master, a replica of it) to cut apart."""
        if self.args.redis == "cluster":
            shard, m = self.faults.pick_master()
            return self.faults.shards_on(m), m, rng.choice(self.d.redis_server.replicas_of(m))
        g = self.d.redis_server
        m = g.primary()
        reps = [s for s in g.servers if s is not m and s.running()]
        return list(range(self.d.shards)), m, rng.choice(reps)

    def cut(self, rng, between_replica):
        shards, m, r = self._master_and_replica(rng)
        a, b = self._place(m), (self._place(r) if between_replica else "delayq")
        t0 = time.monotonic()
        self.lab.cut(a, b)
        try:
            time.sleep(CUT_SECONDS)
        finally:
            self.lab.heal(a, b)
        ev = {"t0": t0, "shards": shards,
              "what": "partition between %s (port %d) and %s for %.0f s, healed" % (
                  "the master", m.port, "its replica (port %d)" % r.port if between_replica
                  else "delayq", CUT_SECONDS)}
        if between_replica:
            ev["replicating"] = self._replication_resumed(m, r) - t0
            ev["what"] += "; replication resumed %.1f s after the start" % ev["replicating"]
        if self.args.redis == "cluster":
            self.d.redis_server.wait_ok(60)
        return ev

    @staticmethod
    def _replication_resumed(master, replica, timeout=60):
        """When the replica had acknowledged everything the master held at
        the heal (its link looks up all along: the partition was shorter
        than repl-timeout; what lags is TCP's retransmission)."""
        r = Resp(master.port, host=master.host, timeout=2)
        try:
            def info():
                return dqtest.text(r("INFO", "replication"))
            held = int(re.search(r"^master_repl_offset:(\d+)", info(), re.M).group(1))

            def caught_up():
                for line in re.findall(r"^slave\d+:(.*)$", info(), re.M):
                    f = dict(kv.split("=", 1) for kv in line.strip().split(","))
                    if int(f["port"]) == replica.port:
                        return int(f["offset"]) >= held
                return False
            redis_faults.wait_until("replication resuming", caught_up, timeout, every=0.1)
        finally:
            r.close()
        return time.monotonic()

    def redis_fault(self, kind, rng):
        """Runs one Redis fault; returns the list of events to measure."""
        f = self.faults
        f.rng = rng
        if kind == "kill_forever":
            evs = []
            first = f.kill()
            self.log(first["what"])
            self.log(f.replace_lost(first["shard"])["what"])
            evs.append(self.observe(first))
            # The second failover: the promoted master, whose replica is now
            # the fresh node, is lost too (sentinels wait 2 x failover-timeout
            # before they fail the same master over again).
            if self.args.redis == "sentinel":
                time.sleep(max(0.0, first["t0"] + 9.0 - time.monotonic()))
            second = f.kill(shard=first["shard"])
            self.log(second["what"])
            self.log(f.replace_lost(second["shard"])["what"])
            evs.append(self.observe(second))
            return evs
        if kind == "kill_orphan":
            self.due_callbacks([6.0 + 0.25 * k for k in range(17)])  # after the promotion
            ev = dict(f.orphan(), orphan=True)
            self.log(ev["what"])
            ev = self.observe(ev)
            for _ in range(2 if self.args.redis == "sentinel" else 1):  # as before the fault
                self.log(f.replace_lost(ev["shard"])["what"])
            return [ev]
        if kind == "freeze":
            ev = f.freeze()
        elif kind == "slow":
            ev = f.slow(PAUSE_MS)
        elif kind in ("cut_delayq", "cut_replica"):
            ev = self.cut(rng, kind == "cut_replica")
        elif kind == "reshard":
            ev = f.reshard()
        elif kind == "remove_node":
            ev = f.remove_node()
        else:
            raise AssertionError(kind)
        self.log(ev["what"])
        return [self.observe(ev)]

    def due_callbacks(self, delays):
        """Callback jobs on every shard, due these many seconds from now:
        once a fault leaves a shard refusing adds, the pushers still have
        work of it to show that they serve."""
        self.n_due += 1
        for shard in range(self.d.shards):
            base = "%s-due%d" % (self.load.topic, self.n_due)
            for jid, delay in zip(self.d.one_shard_ids(base, len(delays), shard), delays):
                fields = {"topic": self.load.topic, "id": jid, "body": jid, "ttr": self.load.ttr,
                          "delay": delay, "callback": {"url": self.load.callback_url,
                                                       "timeout": self.load.callback_timeout}}
                self.load.add(self.post_to_fcgi, fields)

    def post_to_fcgi(self, cmd, fields):
        try:
            st, _ = fcgi_client.request(self.d.sock(0), "POST", "/" + cmd,
                                        json.dumps(fields).encode(), timeout=10)
        except OSError:
            st = 0
        return st, {}

    def observe(self, ev):
        """Until every delayq process served again after ev, or the
        profile's observation time; then its figures."""
        ev = dict(ev)
        ev["timers"] = self.obs.live_timers(ev["t0"])
        ev["pushers"] = [p.pid for p in self.d.pushers if p.poll() is None]
        limit = ev["t0"] + self.args.observe
        while True:
            self.check_processes()
            rec, notes = self.obs.recovery(ev, time.monotonic())
            if time.monotonic() >= limit or all(v is not None for v in rec.values()):
                break
            time.sleep(0.5)
        # a last look, for the figures: what came after the first success
        time.sleep(1.0)
        rec, notes = self.obs.recovery(ev, time.monotonic())
        ev["recovery"], ev["notes"] = rec, notes
        self.log("  serves again after the fault's start: " +
                 ", ".join("%s %s" % (k, fmt(v)) for k, v in rec.items()))
        for n in notes:
            self.log("  " + n)
        def bound(k):
            b = self.args.pushers_within if k.startswith("push ") else SERVE_WITHIN
            return max(b, ev.get("replicating", 0.0) + AFTER_REPLICATION)
        late = {k: v for k, v in rec.items() if v is None or v > bound(k)}
        if late:
            self.v.add("slow_recovery", "%s: %s" % (ev["what"], ", ".join(
                "%s %s" % (k, fmt(v)) for k, v in late.items())))
        self.events.append(ev)
        self.invariant_check(ev["what"])
        return ev

    # ---- process faults

    def expect_gone(self, pids, why):
        if pids:
            self.old_workers.append((list(pids), time.monotonic(), why))

    def check_processes(self):
        """No delayq process exits by itself; workers of a killed master are
        gone within 12 s."""
        keep = []
        for pids, since, why in self.old_workers:
            alive = [p for p in pids if dqtest.pid_alive(p)]
            if alive and time.monotonic() - since > 12.0:
                self.v.add("hung_worker", "workers %s alive 12 s after %s" % (alive, why))
                for p in alive:
                    dqtest.kill_pid(p)
            elif alive:
                keep.append((pids, since, why))
        self.old_workers = keep
        d = self.d
        for name, p in ([("delayq-fcgi %d" % (i + 1), p) for i, p in enumerate(d.fcgis)] +
                        [("timer %d" % i, p) for i, p in enumerate(d.timers)
                         if p and "timer%d" % i not in d.expected_exits] +
                        [("push %d" % i, p) for i, p in enumerate(d.pushers)
                         if "push%d" % i not in d.expected_exits]):
            if p.poll() is not None:
                self.v.add("process_exit", "%s (pid %d) exited with %s by itself" % (
                    name, p.pid, p.returncode))
                raise RuntimeError("%s exited" % name)

    def proc_fault(self, kind, rng):
        detail = getattr(proc_faults, kind)(self.d, rng, self.expect_gone)
        self.log("%s: %s" % (kind, detail))

    def invariant_check(self, tag):
        try:
            r = invariants.check_deployment(self.d)
        except Exception as e:  # noqa: BLE001 (reported, the run goes on)
            self.log("  invariant check after %s could not run: %r" % (tag, e))
            return None
        if r["nproblems"]:
            self.v.add("invariant", "after %s: %s" % (tag, r["problems"][:5]))
        return r

    # ---- the run

    def run(self):
        a, p = self.args, self.prof
        plan = self.schedule()
        redis_plan = [k for k, _ in plan if k not in PROC_KINDS]
        self.log("schedule: " + ", ".join(redis_plan[:21]) + (", ..." if len(redis_plan) > 21
                                                              else ""))
        time.sleep(3.0)
        deadline = self.t_start + p["duration"] if p["duration"] else None
        for kind, seed in plan:
            if deadline and time.monotonic() > deadline:
                break
            rng = random.Random(seed)
            self.check_processes()
            if kind in PROC_KINDS:
                self.proc_fault(kind, rng)
                time.sleep(rng.uniform(*p["gap"]))
            else:
                time.sleep(2.0)  # let the process faults' restarts settle
                self.redis_fault(kind, rng)
        self.log("faults over; draining")
        self.obs.finish()
        self.load.stop(drain_timeout=p["drain"])
        self.check_processes()
        return self.verdict()

    def left_behind(self, inv):
        """Jobs still in Redis after the drain. Two are delayq keeping its
        word; any other is a violation:
        - a callback job the receiver got, waiting for its next try because
          its outcome did not reach Redis (its pusher was killed, or Redis
          was cut off): at-least-once delivery at work. One still reserved
          may be an attempt whose outcome is on its way (the receiver notes
          a callback before it answers): it must be done with, or waiting
          for its next try, once its reservation has run out;
        - a job delivered and finished, then created again, never delivered,
          by an attempt of its add that was answered with an unknown outcome
          (504) and ran late (PROTOCOL: a retried add may create a job
          twice)."""
        pushed_again, late_adds, in_flight = [], [], {}
        for shard in range(self.d.shards):
            host, port = self.obs._node_for(shard)
            r = Resp(port, host=host, timeout=5)
            try:
                prefix = self.d.tag(shard)
                for key in r("KEYS", prefix + ":j:*"):
                    jid = dqtest.text(key)[len(prefix) + 3:]
                    j = job_keys.read(r, prefix, jid)
                    j.pop("body", None)
                    delivered = jid in self.load.deliveries
                    pushed = jid in self.load.push_ids and delivered and int(j.get("n", 0)) >= 1
                    if pushed and j.get("s") == "delay":
                        pushed_again.append(jid)
                    elif pushed and j.get("s") == "reserved":
                        in_flight[jid] = int(j["d"]) / 1000.0
                    elif (jid in self.load.uncertain and jid in self.load.finished and
                          int(j.get("n", 0)) == 0):
                        late_adds.append(jid)
                    else:
                        self.v.add("left_behind", "%s still in Redis after the drain: %s" % (
                            jid, j))
            finally:
                r.close()
        if in_flight:
            # the reservation's end plus the timer's lag behind it
            time.sleep(min(15.0, max(0.0, max(in_flight.values()) - time.time()) + 2.0))
            for jid, ends in sorted(in_flight.items()):
                j = self.where(jid)
                if isinstance(j, dict) and j.get("s") == "reserved":
                    self.v.add("left_behind", "%s still reserved %.1f s after its reservation "
                               "ran out: %s" % (jid, time.time() - ends, j))
                elif isinstance(j, dict):
                    pushed_again.append(jid)
        if pushed_again:
            print("callback jobs delivered and scheduled again after their outcome did not "
                  "reach Redis (at least once): %s" % pushed_again)
        if late_adds:
            print("jobs finished, then created again by a late attempt of an add answered "
                  "with an unknown outcome: %s" % late_adds)

    def late_after_orphan(self, ev):
        """Jobs of the orphaned shards acknowledged before the kill and not
        yet delivered then: each must be delivered within DELIVER_WITHIN of
        the promotion, or of its due time if later."""
        L, t0 = self.load, ev["t0"]
        promoted = t0 + ev["promoted"]
        waiting, late = 0, []
        with L.lock:
            for j, acked in L.acked.items():
                if acked >= t0 or self.d.shard_of(j) not in ev["shards"] or j in L.uncertain:
                    continue
                ds = sorted(d[0] for d in L.deliveries.get(j, []))
                if ds and ds[0] < t0:
                    continue
                waiting += 1
                bound = max(promoted, L.due.get(j, acked)) + DELIVER_WITHIN
                if not ds or ds[0] > bound:
                    late.append((j, round(self.rel(ds[0]), 2) if ds else None,
                                 round(self.rel(bound), 2)))
        print("%s: %d jobs acknowledged before it and not yet delivered; %d delivered later "
              "than %.0f s after the promotion (or their due time)" % (
                  ev["what"], waiting, len(late), DELIVER_WITHIN))
        for j, at, bound in late[:10]:
            self.v.add("late_delivery", "%s (delivered at %s, due by %s)" % (
                j, "+%.1f s" % at if at is not None else "never", "+%.1f s" % bound))

    def where(self, jid):
        """What the node serving jid's shard holds for it (no body)."""
        try:
            host, port = self.obs._node_for(self.d.shard_of(jid))
            r = Resp(port, host=host, timeout=5)
            try:
                j = job_keys.read(r, self.d.tag(self.d.shard_of(jid)), jid)
            finally:
                r.close()
            j.pop("body", None)
            return j or "no job"
        except Exception as e:  # noqa: BLE001 (evidence only)
            return "unknown (%r)" % e

    def verdict(self):
        L = self.load
        lost, dups = L.lost(), L.duplicates()
        pdups, back = L.push_duplicates(PUSH_GRACE_MS / 1000.0), L.resurrected()
        summ = L.summary()
        print("\nledger: acknowledged %d, delivered %d (pulled and pushed; %d acknowledged after "
              "an unknown outcome), callbacks %d" % (summ["acked"], summ["delivered"],
                                                     summ["acked after an unknown outcome"],
                                                     len(self.obs.callbacks)))
        print("answers: %s" % summ["statuses"])
        for j in lost[:20]:
            self.v.add("lost", "%s (shard %d, acknowledged at +%.1f s); Redis holds: %s" % (
                j, self.d.shard_of(j), self.rel(L.acked[j]), self.where(j)))
        if len(lost) > 20:
            self.v.add("lost", "... %d lost in all" % len(lost))
        for j, ds in dups[:10]:
            self.v.add("duplicate", "%s delivered twice within its TTR: %s (received, attempts, "
                       "pop sent at); its adds were answered %s" % (
                           j, [(round(self.rel(t), 2), n, round(self.rel(u), 2)) for t, n, u in ds],
                           [(round(self.rel(t), 2), st) for t, st in L.add_answers.get(j, [])]))
        for j, ds in pdups[:10]:
            senders = [(round(self.rel(t), 2), pid, n) for t, pid, jid, n in self.obs.callbacks
                       if jid == j]
            self.v.add("push_duplicate", "%s sent again within the window: %s; (received, "
                       "pusher pid, attempt): %s" % (j, ds, senders))
        for j, t, ds in back[:10]:
            self.v.add("resurrected", "%s delivered after its finish at +%.1f s: %s" % (
                j, self.rel(t), ds))
        for ev in self.events:
            if ev.get("orphan"):
                self.late_after_orphan(ev)
        inv = self.invariant_check("the drain")
        if inv is not None and inv["jobs"]:
            self.left_behind(inv)
        print("\nRedis faults and the time each delayq process took to serve again:")
        worst = {}
        for ev in self.events:
            print("  [%7.1f] %s" % (self.rel(ev["t0"]), ev["what"]))
            print("            " + ", ".join("%s %s" % (k, fmt(v))
                                             for k, v in ev["recovery"].items()))
            for k, v in ev["recovery"].items():
                kind = k.split()[0].rstrip("0123456789")
                w = worst.get(kind, 0.0)
                worst[kind] = None if (v is None or w is None) else max(w, v)
        print("worst per kind of process: " + ", ".join("%s %s" % (k, fmt(v))
                                                      for k, v in worst.items()))
        print("\nseed %d; %d violations" % (self.args.seed, len(self.v.items)))
        for kind, text in self.v.items:
            print("  %s: %s" % (kind, text))
        return 1 if self.v.items else 0

    def close(self, failed):
        if self.closed:
            return
        self.closed = True
        try:
            self.obs.finish() if hasattr(self, "obs") else None
        finally:
            try:
                if self.d:
                    dqtest.deployment.KEEP = self.args.keep
                    self.d.stop(failed=failed)
            finally:
                if self.receiver:
                    self.receiver.stop()
                if self.lab:
                    self.lab.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--redis", choices=("cluster", "sentinel"), required=True)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="short")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--net", choices=("ns", "loopback"), default=None,
                    help="ns (default when possible): Redis and delayq in network namespaces, "
                         "partitions included; loopback: no partitions")
    ap.add_argument("--faults", help="only these Redis faults (comma-separated)")
    ap.add_argument("--no-kills", action="store_true", help="no process faults")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of every Redis fault kind (the profile's default)")
    ap.add_argument("--observe", type=float, default=None,
                    help="seconds to watch for recovery after a fault (profile's default)")
    ap.add_argument("--pushers-within", type=float, default=SERVE_WITHIN,
                    help="the bound for delayq-push instead of %.0f s (see tests/faults/README.md: "
                         "pushers are known to need up to about 16 s after a master/replica "
                         "partition or a frozen Sentinel primary)" % SERVE_WITHIN)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    prof = PROFILES[args.profile]
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(3), "big")
    if args.rounds is not None:
        prof = dict(prof, rounds=args.rounds, duration=None)
    if args.observe is None:
        args.observe = prof["observe"]
    why = netlab.available()
    if args.net is None:
        args.net = "ns" if why is None else "loopback"
    if args.net == "ns" and why:
        print("--net ns: %s" % why, file=sys.stderr)
        return 2
    if args.faults:
        unknown = set(args.faults.split(",")) - set(KINDS[args.redis])
        if unknown or (args.net != "ns" and any(k.startswith("cut_") for k in
                                                args.faults.split(","))):
            print("--faults: not for %s/%s: %s" % (args.redis, args.net, args.faults),
                  file=sys.stderr)
            return 2
    dqtest.exit_on_signals()
    print("nemesis: %s, profile %s, net %s, seed %d (replay: --seed %d)" % (
        args.redis, args.profile, args.net, args.seed, args.seed), flush=True)
    if args.net != "ns":
        print("partitions left out (--net loopback)", flush=True)
    n = Nemesis(args, prof)
    failed = True
    try:
        n.setup()
        rc = n.run()
        failed = rc != 0
        print("RESULT: %s (seed %d, %.0f s)" % ("FAILED" if failed else "ok", args.seed,
                                               n.rel()), flush=True)
        return rc
    except Exception as e:  # noqa: BLE001 (whatever stopped the run is reported)
        print("the run could not be carried out: %s" % e, file=sys.stderr)
        traceback.print_exc()
        for kind, text in n.v.items:
            print("  %s: %s" % (kind, text))
        return 1 if n.v.items else 2
    finally:
        n.close(failed)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""delayq on a real Redis Cluster (3 masters, a replica each, on loopback
ports), whatever DQTEST_REDIS says: a hot topic spreads over every master,
pops find jobs in every shard, long-polls wake for any shard, a live slot
migration under load and a master killed with -9 under load lose nothing
acknowledged, a process laid out differently does not start, and writes to
every shard with one master refusing or silent answer what they did."""

import re
import signal
import subprocess
import threading
import time

from dqtest import SLOW, Deployment, DeploymentTestCase, log_time, main, text, unique
from dqtest.ledger import LedgerLoad
from dqtest.redis_cluster import key_slot


class ClusterTestCase(DeploymentTestCase):
    DEPLOYMENT_KW = dict(redis_mode="cluster", workers=2, threads=8, n_timers=2)

    @property
    def cluster(self):
        return self.c.redis_server

    def shard_master(self, shard):
        return self.cluster.master_of(self.c.tag(shard))

    def node_id(self, server):
        return self.cluster.client(server.port)("CLUSTER", "MYID").decode()

    def wait_replicated(self, master, timeout=30):
        """Until a replica of master has acknowledged everything master holds
        now. Without WAIT, Redis' replication is asynchronous: a master
        killed a moment after a write may take it along (a replica still
        finishing its first sync once took every job of a test with it),
        which is Redis' documented loss, not delayq's."""
        c = self.cluster.client(master.port)

        def info():
            return text(c("INFO", "replication"))
        held = int(re.search(r"^master_repl_offset:(\d+)", info(), re.M).group(1))
        deadline = time.monotonic() + timeout * SLOW
        while time.monotonic() < deadline:
            acked = [int(o) for o in re.findall(r"^slave\d+:.*state=online,offset=(\d+)", info(),
                                                re.M)]
            if any(o >= held for o in acked):
                return
            time.sleep(0.05)
        self.fail("no replica of %d acknowledged offset %d: %s" % (master.port, held, info()))

    def start_moving(self, shard, target=None):
        """Starts moving the shard's slot to another master (target, or the
        first other one), by hand as redis-cli does it; move_keys() moves
        some keys, end_moving() the rest and hands the slot over."""
        slot = key_slot(self.c.tag(shard))
        source = self.shard_master(shard)
        target = target or next(m for m in self.cluster.masters() if m is not source)
        mv = dict(shard=shard, slot=slot, target=target, dst_id=self.node_id(target),
                  src=self.cluster.client(source.port), dst=self.cluster.client(target.port))
        mv["dst"]("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        mv["src"]("CLUSTER", "SETSLOT", slot, "MIGRATING", mv["dst_id"])
        return mv

    def move_keys(self, mv, n):
        """Moves up to n keys of the slot; False when none were left."""
        keys = mv["src"]("CLUSTER", "GETKEYSINSLOT", mv["slot"], n)
        if keys:
            mv["src"]("MIGRATE", "127.0.0.1", mv["target"].port, "", 0, 5000, "KEYS", *keys)
        return bool(keys)

    def end_moving(self, mv):
        while self.move_keys(mv, 100):
            pass
        for c in (mv["src"], mv["dst"]):
            c("CLUSTER", "SETSLOT", mv["slot"], "NODE", mv["dst_id"])
        self.cluster.wait_ok()


class Spread(ClusterTestCase):
    def test_hot_topic_lands_on_every_master(self):
        t = unique("hot")
        n = 600
        for start in range(0, n, 200):
            st, r = self.c.req("add", jobs=[{"topic": t, "id": "%s-%d" % (t, i), "body": i}
                                            for i in range(start, start + 200)])
            self.assertOk(st, r)
        per_master = {m.port: len(self.cluster.client(m.port)("KEYS", "*:j:%s-*" % t))
                      for m in self.cluster.masters()}
        print("jobs of one topic per master: %s" % per_master)
        self.assertEqual(len(per_master), 3)
        self.assertEqual(sum(per_master.values()), n)
        for port, k in per_master.items():
            self.assertGreater(k, n / 6, "master %d holds too few: %s" % (port, per_master))
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["ready"], n, "stats sum every shard")
        popped = []
        while True:
            st, r = self.c.req("pop", topic=t, count=50)
            self.assertOk(st, r)
            if not r["jobs"]:
                break
            popped += [j["id"] for j in r["jobs"]]
        self.assertEqual(sorted(popped), sorted("%s-%d" % (t, i) for i in range(n)))
        ids = ["%s-%d" % (t, i) for i in range(n)]
        self.assertEqual(self.c.fifo_by_shard(popped), self.c.fifo_by_shard(ids),
                         "FIFO within each shard")
        for start in range(0, n, 200):
            self.assertOk(*self.c.req("finish", ids=popped[start:start + 200]))

    def test_long_poll_wakes_for_every_shard(self):
        t = unique("wake")
        for shard in range(self.c.shards):
            jid = next(i for i in ("%s-%d-%d" % (t, shard, k) for k in range(1000))
                       if self.c.shard_of(i) == shard)
            result = []
            th = threading.Thread(target=lambda: result.append(
                self.c.req("pop", conn=self.c.new_http(), topic=t, timeout=10)))
            th.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            self.assertOk(*self.c.req("add", topic=t, id=jid, body=shard))
            th.join(10)
            waited = time.monotonic() - t0
            self.assertEqual(result[0][1]["id"], jid)
            self.assertLess(waited, 0.9 * SLOW, "shard %d woke the long-poll after %.2f s" %
                            (shard, waited))
            self.assertOk(*self.c.req("finish", id=jid))

    def test_batches_across_shards(self):
        t = unique("batch")
        ids = ["%s-%d" % (t, i) for i in range(40)]
        st, r = self.c.req("add", jobs=[{"topic": t, "id": i, "body": i} for i in ids])
        self.assertOk(st, r)
        self.assertEqual([x["id"] for x in r["results"]], ids, "results in request order")
        self.assertEqual(len({self.c.shard_of(i) for i in ids}), self.c.shards)
        st, r = self.c.req("delete", ids=ids[:20] + [t + "-missing"])
        self.assertOk(st, r)
        self.assertEqual([x["success"] for x in r["results"]], [True] * 20 + [False])
        st, r = self.c.req("kick", topic=t, count=5)  # nothing buried: 0 from every shard
        self.assertEqual(r["kicked"], 0)
        for i in ids[20:30]:
            st, p = self.c.req("pop", topic=t)
            self.assertOk(*self.c.req("bury", id=p["id"]))
        st, r = self.c.req("kick", topic=t, count=7)
        self.assertEqual(r["kicked"], 7, "kick gathers from several shards")
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["buried"], s["topics"][t]["ready"]), (3, 17))

    def test_finish_and_pop_across_shards(self):
        """pop with finish on several shards: each id is finished in its own
        shard; a shard that cannot be reached (its slot half moved) answers
        'unavailable' for its ids while the others are finished and a job
        is popped."""
        t = unique("fap")
        ids = {}
        for k in range(200):
            jid = "%s-%d" % (t, k)
            ids.setdefault(self.c.shard_of(jid), []).append(jid)
        ids = {shard: got[:2] for shard, got in ids.items()}
        self.assertEqual(len(ids), self.c.shards)
        every = [i for got in ids.values() for i in got]
        self.assertOk(*self.c.req("add", jobs=[{"topic": t, "id": i, "body": 1} for i in every]))
        st, r = self.c.req("pop", topic=t, count=len(every))
        self.assertEqual(sorted(j["id"] for j in r["jobs"]), sorted(every))
        mine = [got[0] for got in ids.values()]
        st, r = self.c.req("pop", topic=t, finish=mine)
        self.assertOk(st, r)
        self.assertEqual(r["finished"], [{"id": i, "success": True} for i in mine])
        self.assertIsNone(r["id"], "every job is reserved")
        # one shard half moved: its calls answer 503; the others go on
        self.assertOk(*self.c.req("add", topic=t, id=t + "-next", body=2))
        shard = next(k for k in ids if k != self.c.shard_of(t + "-next"))
        home = self.shard_master(shard)
        mv = self.start_moving(shard)
        try:
            self.move_keys(mv, 1)
            rest = [got[1] for got in ids.values()]
            st, r = self.c.req("pop", topic=t, finish=rest)
            self.assertOk(st, r)
            want = [(i, "unavailable" if self.c.shard_of(i) == shard else None) for i in rest]
            self.assertEqual([(f["id"], f.get("code")) for f in r["finished"]], want)
            self.assertEqual(r["id"], t + "-next")
        finally:
            self.end_moving(mv)
            # back where it was: the other tests of the class count on two
            # shards per master
            self.end_moving(self.start_moving(shard, target=home))
        st, r = self.c.req("get", id=ids[shard][1])
        self.assertEqual(r["state"], "reserved", "the unreachable shard's job was not finished")

    def test_another_layout_does_not_start(self):
        d = self.c
        log = d.path("misfit-timer.log")
        p = d.popen([d.timer_bin] + d.redis_flags() + ["--prefix=dq", "--shards=3"], log)
        self.assertEqual(p.wait(20), 1)
        with open(log) as f:
            text = f.read()
        self.assertIn("shards = 6", text)
        self.assertIn("not starting", text)


class LongPollsTrustCountedHints(ClusterTestCase):
    """A long-poll that finds no job parks until a ready message wakes it,
    so once a worker process has counted a topic's ready jobs in every
    shard (its hints are then kept whole by the messages), its long-polls
    pop where the messages say without counting every shard again. A
    consumer that finish-and-pops jobs as they become due costs a count per
    job otherwise: a call to every master."""

    def ready_counts(self, masters):
        """The count calls (the `ready` function) each master ran since the
        last call, read from SLOWLOG, which logs every call here."""
        n = 0
        for m in masters:
            c = self.cluster.client(m.port)
            for entry in c("SLOWLOG", "GET", "-1"):
                args = entry[3]
                n += len(args) > 1 and text(args[0]).upper() in ("FCALL", "FCALL_RO") and \
                    text(args[1]).endswith("_ready")
            c("SLOWLOG", "RESET")
        return n

    def test_a_consumer_of_due_jobs_counts_once_per_process(self):
        d, t = self.c, unique("counted")
        masters = self.cluster.masters()
        for m in masters:
            c = self.cluster.client(m.port)
            c("CONFIG", "SET", "slowlog-log-slower-than", "0")
            c("CONFIG", "SET", "slowlog-max-len", "100000")
            self.addCleanup(c, "CONFIG", "SET", "slowlog-log-slower-than", "10000")
            c("SLOWLOG", "RESET")
        jobs = 20
        self.ready_counts(masters)
        st, r = d.req("pop", topic=t)  # timeout 0: counts in the worker that answers
        self.assertOk(st, r)
        self.assertGreater(self.ready_counts(masters), 0, "a pop that may not wait counts")
        got, last = [], None
        for i in range(jobs):
            self.assertOk(*d.req("add", topic=t, id="%s-%d" % (t, i), delay=0.2, body=i))
            fields = dict(topic=t, timeout=5 * SLOW)
            if last:
                fields["finish"] = [last]
            st, r = d.req("pop", **fields)
            self.assertOk(st, r)
            got.append(r["id"])
            last = r["id"]
        self.assertOk(*d.req("finish", id=last))
        self.assertEqual(got, ["%s-%d" % (t, i) for i in range(jobs)])
        counts = self.ready_counts(masters)
        calls_per_count = d.shards  # one call per shard, sent together
        print("%d finish-and-pops of jobs due 0.2 s later: %d count calls (%d per count)" %
              (jobs, counts, calls_per_count))
        # At most a count per worker process, and one for a recheck here
        # or there (a waiter is woken each second); a count per pop would
        # be `jobs` counts.
        self.assertLessEqual(counts, (d.workers + 3) * calls_per_count)


class SlotMigration(ClusterTestCase):
    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, buckets=4)

    def test_reshard_busy_slots_under_load(self):
        """redis-cli --cluster reshard moves a range of slots holding a
        shard (the slot of its hash tag) to another master while jobs are
        added, popped and finished: nothing acknowledged is lost, nothing
        is delivered twice within its TTR."""
        shard = min(range(self.c.shards), key=lambda k: key_slot(self.c.tag(k)) % 5461)
        slot = key_slot(self.c.tag(shard))
        source = self.shard_master(shard)
        target = next(m for m in self.cluster.masters() if m is not source)
        first = min(s for s, _, p in self.cluster._slots if p == source.port)
        load = LedgerLoad(self.c, unique("mig"), producers=2, consumers=2, rate=150).start()
        time.sleep(2.0)
        t0 = time.monotonic()
        r = subprocess.run(
            ["redis-cli", "--cluster", "reshard", "127.0.0.1:%d" % source.port,
             "--cluster-from", self.node_id(source), "--cluster-to", self.node_id(target),
             "--cluster-slots", str(slot - first + 1), "--cluster-yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stdout.decode()[-2000:])
        self.cluster.wait_ok()
        self.assertEqual(self.shard_master(shard).port, target.port, "the shard moved")
        time.sleep(2.0)
        load.stop()
        print("reshard of %d slots (shard %d, slot %d) took %.1f s under load: %s, longest "
              "gap between acknowledged adds %.2f s" % (slot - first + 1, shard, slot, took,
                                                        load.summary(), load.longest_add_gap()))
        self.assertEqual(load.lost(), [])
        self.assertEqual(load.duplicates(), [])
        self.assertGreater(len(load.acked), 300)

    def test_slow_migration_of_a_shard_refuses_then_serves(self):
        """The shard's keys moved a few at a time, by hand as redis-cli does
        it, with pauses: calls for that shard answer 503 while it is split
        (none runs on half a shard), and the shard works on its new master
        afterwards with every job intact."""
        t = unique("slow")
        shard = 1
        ids = [i for i in ("%s-%d" % (t, k) for k in range(400)) if self.c.shard_of(i) == shard]
        st, r = self.c.req("add", jobs=[{"topic": t, "id": i, "body": i} for i in ids])
        self.assertOk(st, r)
        mv = self.start_moving(shard)
        answers = []
        while self.move_keys(mv, 5):
            st, r = self.c.req("get", id=ids[len(answers) % len(ids)])
            answers.append(st)
        self.end_moving(mv)
        print("answers while the shard was split: %s" %
              {st: answers.count(st) for st in set(answers)})
        self.assertEqual(set(answers), {503}, "a call ran on half a shard")
        for i in ids:
            st, r = self.c.req("get", id=i)
            self.assertOk(st, r)
            self.assertEqual(r["value"], i)
        popped = []
        while True:
            st, r = self.c.req("pop", topic=t, count=100)
            if not r["jobs"]:
                break
            popped += [j["id"] for j in r["jobs"]]
        self.assertEqual(popped, ids, "FIFO kept through the move")


class MasterFailover(ClusterTestCase):
    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, redis_wait_replicas=1,
                         redis_wait_timeout_ms=2000)

    def test_kill9_master_under_load_loses_nothing(self):
        """kill -9 of the master of a shard under load, with every write
        confirmed by a replica (redis_wait_replicas = 1): its replica takes
        over; the killed node comes back (as a process supervisor would
        restart it) and replicates the new master; no acknowledged job is
        lost or delivered twice within its TTR."""
        load = LedgerLoad(self.c, unique("fo"), producers=3, consumers=2, rate=150).start()
        time.sleep(2.0)
        victim = self.shard_master(0)
        t0 = time.monotonic()
        self.cluster.kill9(victim)
        deadline = time.monotonic() + 30
        while self.shard_master_after_failover(victim) is None:
            self.assertLess(time.monotonic(), deadline, "no failover")
            time.sleep(0.1)
        promoted = time.monotonic() - t0
        time.sleep(1.0)
        self.cluster.restart(victim)
        self.cluster.wait_ok()
        time.sleep(3.0)
        load.stop()
        back = load.outage_after(t0)
        print("kill -9 of a master: replica promoted after %.1f s; the longest a producer waited "
              "for an add to be acknowledged: %.1f s; %s" % (promoted, back, load.summary()))
        self.assertEqual(load.lost(), [])
        self.assertEqual(load.duplicates(), [])
        self.assertLess(back, 30)

    def shard_master_after_failover(self, victim):
        self.cluster.refresh()
        try:
            m = self.shard_master(0)
        except (RuntimeError, StopIteration):
            return None
        return m if m is not victim else None



class DefaultSpread(ClusterTestCase):
    """shards unset: the first process picks a count that spreads over every
    master, records it, and every later process reads it."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, shards="auto")

    def test_every_master_gets_jobs(self):
        st, h = self.c.get("/health")
        self.assertEqual(st, 200, h)
        print("/health with shards unset: %s" % h)
        self.assertGreaterEqual(h["shards"], 12, "about 4 shards per master")
        self.assertEqual((h["masters"], h["masters_used"]), (3, 3))
        self.assertNotIn("warning", h)
        self.assertEqual(self.cluster("GET", "{dq:0}:shards"), str(h["shards"]).encode())
        per_master = {m.port: 0 for m in self.cluster.masters()}
        for k in range(self.c.shards):
            per_master[self.shard_master(k).port] += 1
        self.assertGreaterEqual(min(per_master.values()), 2, per_master)
        t = unique("spread")
        self.assertOk(*self.c.req("add", jobs=[{"topic": t, "id": "%s-%d" % (t, i), "body": i}
                                               for i in range(300)]))
        held = {m.port: len(self.cluster.client(m.port)("KEYS", "*:j:%s-*" % t))
                for m in self.cluster.masters()}
        print("jobs of one topic per master: %s" % held)
        self.assertEqual(sum(held.values()), 300)
        self.assertGreater(min(held.values()), 300 / 10, held)
        st, _, body = self.c.request("GET", "/metrics")
        self.assertIn(b"\ndelayq_cluster_masters_unused 0\n", body)
        self.assertIn(("\ndelayq_shards %d\n" % h["shards"]).encode(), body)

    def test_later_process_reads_the_count(self):
        d = self.c
        log = d.path("late-timer.log")
        p = d.popen([d.timer_bin] + d.redis_flags() + ["--log-level=debug"], log)
        try:
            deadline = time.monotonic() + 20
            while "started" not in open(log).read():
                self.assertLess(time.monotonic(), deadline, open(log).read())
                self.assertIsNone(p.poll(), open(log).read())
                time.sleep(0.1)
            text = open(log).read()
            self.assertIn("shards = %d (recorded by this deployment's Redis)" % d.shards, text)
        finally:
            p.terminate()
            p.wait(20)

    def test_one_shard_is_warned_of(self):
        """A deployment of one shard on a 3-master cluster says two masters
        hold none of its jobs."""
        d = self.c
        log = d.path("narrow-timer.log")
        p = d.popen([d.timer_bin] + d.redis_flags() + ["--prefix=narrow", "--shards=1"], log)
        try:
            deadline = time.monotonic() + 20
            while "started" not in open(log).read():
                self.assertLess(time.monotonic(), deadline, open(log).read())
                time.sleep(0.1)
            self.assertIn("shards use 1 of the Redis Cluster's 3 masters", open(log).read())
        finally:
            p.terminate()
            p.wait(20)


class MasterLost(ClusterTestCase):
    """A master killed with -9 and never started again, as when a machine is
    lost: its replica takes over, and every process finds it by itself, with
    nobody calling /health: delayed jobs of every shard are moved and
    delivered, adds to the lost master's shards work again, callbacks go
    out."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, n_pushers=1, push_allow="*,loopback",
                         redis_args=("--cluster-node-timeout", "2000"))

    def test_kill9_master_for_good(self):
        from dqtest.receiver import Receiver
        rcv = Receiver().start()
        try:
            self.run_kill(rcv)
        finally:
            rcv.stop()

    def run_kill(self, rcv):
        d, t = self.c, unique("lost")
        victim = self.shard_master(0)
        lost_shards = [k for k in range(d.shards) if self.shard_master(k) is victim]
        ids = ["%s-%d" % (t, i) for i in range(400)]
        for i in range(0, len(ids), 100):
            self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "delay": 4, "ttr": 30,
                                                "body": j} for j in ids[i:i + 100]]))
        hooks = d.one_shard_ids(t + "-hook", 3, shard=lost_shards[0])
        for j in hooks:
            self.assertOk(*d.req("add", topic=t + "-hook", id=j, delay=4, body=j,
                                 url=rcv.url()))
        self.wait_replicated(victim)
        t0 = time.monotonic()
        self.cluster.kill9(victim)
        probes = iter(d.one_shard_ids(t + "-probe", 2000, shard=lost_shards[0]))
        add_back = None
        got = set()
        window = 60 * SLOW
        while time.monotonic() - t0 < window and (len(got) < len(ids) or add_back is None):
            if add_back is None:
                st, r = d.req("add", topic=t + "-probe", id=next(probes), body=1)
                if st == 200:
                    add_back = time.monotonic() - t0
            st, r = d.req("pop", topic=t, count=100, timeout=0.2)
            if st == 200 and r["jobs"]:
                got.update(j["id"] for j in r["jobs"])
                d.req("finish", ids=[j["id"] for j in r["jobs"]])
            else:
                time.sleep(0.05)
        delivered = time.monotonic() - t0
        try:
            hooked = rcv.wait_for(lambda reqs: len(reqs) >= len(hooks),
                                  timeout=max(1.0, window - (time.monotonic() - t0)))
        except AssertionError:
            hooked = list(rcv.requests)
        print("master %d lost for good (shards %s): %d of %d delayed jobs delivered in %.1f s; "
              "an add to its shard answered 200 after %s s; %d of %d callbacks received" %
              (victim.port, lost_shards, len(got), len(ids), delivered,
               "%.1f" % add_back if add_back is not None else "never", len(hooked), len(hooks)))
        self.assertEqual(sorted(got), sorted(ids))
        self.assertIsNotNone(add_back)
        self.assertLess(add_back, 15 * SLOW)
        self.assertEqual(len(hooked), len(hooks))



class OneMasterRefusesWrites(ClusterTestCase):
    """One master refuses writes (maxmemory 1, noeviction: OOM) while the
    others serve. Every command that writes to several shards goes on in
    the healthy ones and says exactly what it did (504 `timeout`,
    `partial`, `failed_shards`), which is compared with what Redis holds;
    sent again once the master is back, each converges."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, shards=12, n_timers=1,
                         redis_timeout_ms=500, redis_kw=dict(replicas=0))

    def refuse(self, master, on):
        self.cluster.client(master.port)("CONFIG", "SET", "maxmemory", "1" if on else "0")

    def in_shards(self, key_of, shards):
        """{shard: value} of a key of each shard (key_of(tag) -> command)."""
        return {k: self.shard_client(k)(*key_of(self.c.tag(k))) for k in shards}

    def shard_client(self, k):
        return self.cluster.client(self.shard_master(k).port)

    def assertPartial(self, st, r, failed, **counts):
        self.assertError(st, r, 504, "timeout")
        self.assertEqual((r["partial"], r["shards"], r["failed_shards"]),
                         (True, self.c.shards, failed), r)
        for f, v in counts.items():
            self.assertEqual(r[f], v, r)

    def split(self):
        """The shards of shard 0's master (bad) and the others (good)."""
        sick = self.shard_master(0)
        bad = [k for k in range(self.c.shards) if self.shard_master(k) is sick]
        return sick, bad, [k for k in range(self.c.shards) if k not in bad]

    def until_ok(self, *req, **fields):
        """Sends a request again until it answers 200 (a store backs off
        from a node that timed out for a moment)."""
        deadline = time.monotonic() + 10 * SLOW
        while True:
            st, r = self.c.req(*req, **fields)
            if st == 200 or time.monotonic() > deadline:
                self.assertOk(st, r)
                return r
            time.sleep(0.2)

    def test_a_silent_master_is_named_among_the_failed_shards(self):
        """A master that does not answer within redis_timeout_ms (its
        writes paused): the write may or may not have happened there, and
        the answer says which shards those are; sent again, it converges."""
        d, t = self.c, unique("silent")
        sick, bad, good = self.split()
        everywhere = list(range(d.shards))
        self.cluster.client(sick.port)("CLIENT", "PAUSE", 5000, "WRITE")
        try:
            st, r = d.req("policy", topic=t, concurrency=12)
            self.assertPartial(st, r, bad)
            pol = self.in_shards(lambda p: ("HGET", "%s:pol:%s" % (p, t), "concurrency"), good)
            self.assertEqual(set(pol.values()), {b"12"})
        finally:
            self.cluster.client(sick.port)("CLIENT", "UNPAUSE")
        self.assertEqual(self.until_ok("policy", topic=t, concurrency=12)["policy"]["concurrency"],
                         12)
        pol = self.in_shards(lambda p: ("HGET", "%s:pol:%s" % (p, t), "concurrency"), everywhere)
        self.assertEqual(set(pol.values()), {b"12"})

    def test_the_worst_failure_is_answered(self):
        """Shard 0's master refuses (nothing changed there), the others do
        not answer (unknown outcome): the answer is the worse, 504, never
        the first shard's 503 "nothing was changed"."""
        d, t = self.c, unique("worst")
        sick, bad, good = self.split()
        silent = [m for m in self.cluster.masters() if m is not sick]
        self.cluster.client(sick.port)("CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.refuse(sick, True)
        for m in silent:
            self.cluster.client(m.port)("CLIENT", "PAUSE", 5000, "WRITE")
        try:
            st, r = d.req("policy", topic=t, concurrency=12)
            self.assertError(st, r, 504, "timeout")
        finally:
            for m in silent:
                self.cluster.client(m.port)("CLIENT", "UNPAUSE")
            self.refuse(sick, False)
        self.assertEqual(self.until_ok("policy", topic=t, concurrency=12)["policy"]["concurrency"],
                         12)

    def test_multi_shard_writes_answer_what_they_did(self):
        d, t = self.c, unique("refused")
        sick, bad, good = self.split()
        self.assertTrue(good and bad)
        self.cluster.client(sick.port)("CONFIG", "SET", "maxmemory-policy", "noeviction")
        ids = [i for k in range(d.shards) for i in d.one_shard_ids(t, 2, shard=k)]
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": i, "body": 1} for i in ids]))
        popped = []
        while len(popped) < len(ids):
            st, r = d.req("pop", topic=t, count=100)
            self.assertOk(st, r)
            popped += [j["id"] for j in r["jobs"]]
        for i in popped:
            self.assertOk(*d.req("bury", id=i))
        on_bad = sum(1 for i in ids if d.shard_of(i) in bad)
        everywhere = list(range(d.shards))
        # More than one purge step (100 jobs) in a healthy shard.
        many = d.one_shard_ids(t + "-many", 150, shard=good[0])
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": i, "body": 1} for i in many]))

        self.refuse(sick, True)
        try:
            st, r = d.req("policy", topic=t, concurrency=12)
            self.assertPartial(st, r, bad)
            st, r = d.req("pause", topic=t)
            self.assertPartial(st, r, bad)
            st, r = d.req("kick", topic=t, count=1000)
            self.assertPartial(st, r, bad, kicked=len(ids) - on_bad)
            st, r = d.req("purge", topic=t, state="ready")
            self.assertPartial(st, r, bad, purged=len(ids) - on_bad + len(many))
            # A single-shard write in the refusing shard changes nothing.
            sched = d.one_shard_ids(t + "-s", 1, shard=bad[0])[0]
            st, r = d.req("schedule", id=sched, topic=t, every=3600, body=1)
            self.assertError(st, r, 503, "unavailable")
        finally:
            self.refuse(sick, False)
        pol = self.in_shards(lambda p: ("HGET", "%s:pol:%s" % (p, t), "concurrency"), everywhere)
        self.assertEqual({k for k, v in pol.items() if v == b"12"}, set(good))
        paused = self.in_shards(lambda p: ("SISMEMBER", p + ":paused", t), everywhere)
        self.assertEqual({k for k, v in paused.items() if v == 1}, set(good))
        buried = self.in_shards(lambda p: ("ZCARD", "%s:x:%s" % (p, t)), everywhere)
        self.assertEqual({k: v for k, v in buried.items() if v}, {k: 2 for k in bad})
        self.assertEqual(self.in_shards(lambda p: ("ZCARD", "%s:r:%s" % (p, t)), good),
                         {k: 0 for k in good})
        self.assertEqual(self.in_shards(lambda p: ("EXISTS", "%s:sch:%s" % (p, sched)), bad),
                         {k: 0 for k in bad})

        # Sent again, each converges.
        st, r = d.req("policy", topic=t, concurrency=12)
        self.assertOk(st, r)
        self.assertEqual(r["policy"]["concurrency"], 12)
        self.assertOk(*d.req("pause", topic=t))
        st, r = d.req("kick", topic=t, count=1000)
        self.assertOk(st, r)
        self.assertEqual(r["kicked"], on_bad)
        st, r = d.req("purge", topic=t, state="ready")
        self.assertOk(st, r)
        self.assertEqual(r["purged"], on_bad)
        pol = self.in_shards(lambda p: ("HGET", "%s:pol:%s" % (p, t), "concurrency"), everywhere)
        self.assertEqual(set(pol.values()), {b"12"})
        self.assertEqual(set(self.in_shards(lambda p: ("SISMEMBER", p + ":paused", t),
                                            everywhere).values()), {1})

        # A resume that fails in one master resumes the others, and says so.
        self.refuse(sick, True)
        try:
            st, r = d.req("resume", topic=t)
            self.assertPartial(st, r, bad)
        finally:
            self.refuse(sick, False)
        paused = self.in_shards(lambda p: ("SISMEMBER", p + ":paused", t), everywhere)
        self.assertEqual({k for k, v in paused.items() if v == 1}, set(bad))
        self.assertOk(*d.req("resume", topic=t))
        self.assertEqual(set(self.in_shards(lambda p: ("SISMEMBER", p + ":paused", t),
                                            everywhere).values()), {0})


def unconfirmed_writes(d):
    st, m = d.get("/metrics")
    return int(re.search(r"^delayq_unconfirmed_writes_total (\d+)$", m, re.M).group(1))


class DemotedMasterIsNotShort(ClusterTestCase):
    """With redis_wait_replicas = 1, a master that became a replica (here a
    CLUSTER FAILOVER by hand: no connection breaks, so delayq's slot map is
    still the old one) has no replicas of its own. That says nothing about
    the shard: an add there is sent, gets MOVED and is confirmed on the new
    master, instead of being refused as if the shard had lost its replica."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, workers=1, threads=1,
                         redis_wait_replicas=1, redis_wait_timeout_ms=2000)

    def test_an_add_after_a_manual_failover_is_confirmed(self):
        d, t = self.c, unique("demoted")
        ids = iter(d.one_shard_ids(t, 10, shard=0))
        self.assertOk(*d.req("add", topic=t, id=next(ids), body=1))  # replicas counted
        old = self.shard_master(0)
        new = self.cluster.replicas_of(old)[0]
        self.assertEqual(text(self.cluster.client(new.port)("CLUSTER", "FAILOVER")), "OK")
        deadline = time.monotonic() + 30 * SLOW
        while text(self.cluster.client(old.port)("ROLE")[0]) != "slave":
            self.assertLess(time.monotonic(), deadline, "the failover did not happen")
            time.sleep(0.1)
        self.cluster.wait_ok(30 * SLOW)
        time.sleep(1.5)  # the replicas' count is older than a second: counted again
        st, r = d.req("add", topic=t, id=next(ids), body=2)
        self.assertOk(st, r)
        st, h = d.get("/health")
        self.assertEqual(h.get("short_of_replicas", []), [], h)


class UnconfirmedDeliveries(ClusterTestCase):
    """With redis_wait_replicas = 1 and a master's replica frozen (online to
    its master, acknowledging nothing), pops and the pusher's takes there
    wait out WAIT's bound, then answer what they did: the jobs go out, each
    such write counted as unconfirmed. Adds there answer 504: an add is
    acknowledged only once confirmed."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, n_pushers=1, push_allow="*,loopback",
                         redis_wait_replicas=1, redis_wait_timeout_ms=300)

    def frozen_replica(self, shard):
        replica = self.cluster.replicas_of(self.shard_master(shard))[0]
        replica.signal(signal.SIGSTOP)
        self.addCleanup(lambda: replica.frozen and replica.signal(signal.SIGCONT))
        return replica

    def test_pop_without_confirmation_delivers(self):
        d, t = self.c, unique("unconfpop")
        ids = d.one_shard_ids(t, 4, shard=0)
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "body": j} for j in ids[:3]]))
        before = unconfirmed_writes(d)
        self.frozen_replica(0)
        t0 = time.monotonic()
        st, r = d.req("pop", topic=t, count=3)
        took = time.monotonic() - t0
        self.assertEqual(st, 200, r)
        self.assertEqual([(j["id"], j["attempts"]) for j in r["jobs"]], [(j, 1) for j in ids[:3]])
        self.assertGreaterEqual(took, 0.3, "waited out WAIT's bound")
        self.assertOk(*d.req("finish", ids=ids[:3]))
        self.assertGreaterEqual(unconfirmed_writes(d), before + 2, "the pop and the finish")
        st, r = d.req("add", topic=t, id=ids[3], body=1)
        self.assertEqual((st, r.get("code")), (504, "timeout"), r)

    def test_take_without_confirmation_is_sent(self):
        from dqtest.receiver import Receiver
        rcv = Receiver().start()
        self.addCleanup(rcv.stop)
        d, t = self.c, unique("unconf")
        ids = d.one_shard_ids(t, 3, shard=0)
        for j in ids:
            self.assertOk(*d.req("add", topic=t, id=j, delay=1, body=j, url=rcv.url(),
                                 retries=1))
        self.frozen_replica(0)
        reqs = rcv.wait_for(lambda reqs: len(reqs) >= len(ids), timeout=15 * SLOW)
        self.assertEqual(sorted(q.headers["webhook-id"] for q in reqs), sorted(ids))
        self.assertEqual({q.headers["delayq-attempt"] for q in reqs}, {"1"})


class FailingTakesBackOff(ClusterTestCase):
    """While a shard's takes keep failing (its master refuses writes:
    maxmemory 1, noeviction), the pusher backs off from that shard (200 ms
    doubling to 2 s) instead of trying it every round; once the master
    takes writes again, its jobs go out."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, n_pushers=0, push_allow="*,loopback")

    def test_a_failing_shard_is_asked_less_and_less_often(self):
        from dqtest.receiver import Receiver
        rcv = Receiver().start()
        self.addCleanup(rcv.stop)
        d, t = self.c, unique("backoff")
        ids = d.one_shard_ids(t, 2, shard=0)
        for j in ids:
            self.assertOk(*d.req("add", topic=t, id=j, body=j, url=rcv.url()))
        master = self.cluster.client(self.shard_master(0).port)
        master("CONFIG", "SET", "maxmemory", "1")
        self.addCleanup(lambda: master("CONFIG", "SET", "maxmemory", "0"))
        pusher = d.start_pusher()  # finds the jobs ready, and their shard refusing writes
        time.sleep(6.0)
        master("CONFIG", "SET", "maxmemory", "0")
        reqs = rcv.wait_for(lambda reqs: len(reqs) >= len(ids), timeout=15 * SLOW)
        self.assertEqual(sorted(q.headers["webhook-id"] for q in reqs), sorted(ids))
        with open(d.path("push%d.log" % pusher)) as f:
            # a refused take may be logged more than once per attempt
            times = sorted({round(log_time(line), 1) for line in f if "push_take: OOM" in line})
        gaps = [b - a for a, b in zip(times, times[1:])]
        print("takes refused while the master refused writes: %d, gaps %s" %
              (len(times), ["%.2f" % g for g in gaps]))
        self.assertGreaterEqual(len(gaps), 3, "the pusher kept trying the shard")
        self.assertGreater(gaps[-1], 1.2, "backed off")
        self.assertLess(len(times), 10, "not every round")


class PopUnknownOutcome(ClusterTestCase):
    """A pop over several shards whose call to one shard gets no answer
    (that master is paused past redis_timeout_ms) answers the jobs the
    other shards gave: one silent shard holds no other shard's deliveries
    hostage. That shard may have reserved jobs: they come back after their
    TTR."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, redis_timeout_ms=500)

    def test_pop_with_a_silent_shard_answers_the_others(self):
        d, t = self.c, unique("silent")
        slow = self.shard_master(0)
        other = next(k for k in range(d.shards) if self.shard_master(k) is not slow)
        ids = d.one_shard_ids(t, 1, shard=0) + d.one_shard_ids(t, 1, shard=other)
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "ttr": 2, "body": j}
                                          for j in ids]))
        self.cluster.client(slow.port)("CLIENT", "PAUSE", 1500, "WRITE")
        st, r = d.req("pop", topic=t, count=2)
        print("pop with shard 0's master paused: %s %r" % (st, r))
        self.assertEqual(st, 200, r)
        self.assertEqual([j["id"] for j in r["jobs"]], [ids[1]])
        self.assertOk(*d.req("finish", ids=[ids[1]]))
        time.sleep(2.0)  # the pause ends; the silent shard's reservation's TTR runs out
        got = []
        deadline = time.monotonic() + 15 * SLOW
        while not got and time.monotonic() < deadline:
            st, r = d.req("pop", topic=t, count=2, timeout=1)
            self.assertEqual(st, 200, r)
            got += r["jobs"]
        self.assertEqual([j["id"] for j in got], [ids[0]])
        self.assertOk(*d.req("finish", ids=[ids[0]]))


def p99(samples):
    return sorted(samples)[max(0, int(len(samples) * 0.99) - 1)]


class MasterLostWithWait(ClusterTestCase):
    """With redis_wait_replicas = 1, a master lost for good (kill -9, no node
    joins) leaves its promoted replica without a replica. Deliveries there
    go on unconfirmed, and are counted: every acknowledged job, ready or
    delayed, popped or called back, is delivered within 15 s of the
    promotion. Adds to its shards answer 503 at once, naming the shard; an
    add with no id lands on another shard; adds to the other shards keep
    their latency. /health and /metrics name the shards, the log says so
    once, and the timers (whose writes do not WAIT) move its due jobs
    without failing moves."""

    # The adds before the kill must be confirmed: a replica busy on a
    # loaded machine may take more than half a second to answer WAIT.
    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, n_pushers=1, push_allow="*,loopback",
                         redis_wait_replicas=1, redis_wait_timeout_ms=2000,
                         redis_args=("--cluster-node-timeout", "2000"))

    def add_latencies(self, t, ids):
        out = []
        for j in ids:
            t0 = time.monotonic()
            self.assertOk(*self.c.req("add", topic=t, id=j, body=1))
            out.append(time.monotonic() - t0)
        return out

    def promoted(self, victim, lost_shards):
        self.cluster.refresh()
        return all(self.shard_master(k) is not victim for k in lost_shards)

    def test_master_lost_for_good_keeps_delivering(self):
        from dqtest.receiver import Receiver
        rcv = Receiver().start()
        self.addCleanup(rcv.stop)
        d, t = self.c, unique("waitlost")
        victim = self.shard_master(0)
        lost_shards = [k for k in range(d.shards) if self.shard_master(k) is victim]
        other = next(k for k in range(d.shards) if k not in lost_shards)
        ready = ["%s-%d" % (t, i) for i in range(300)]
        delayed = d.one_shard_ids(t + "-later", 40, shard=0)
        hooks = d.one_shard_ids(t + "-hook", 3, shard=0)
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "body": j} for j in ready]))
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "delay": 3, "body": j}
                                          for j in delayed]))
        for j in hooks:
            self.assertOk(*d.req("add", topic=t + "-hook", id=j, delay=3, body=j, url=rcv.url()))
        cancelled = d.one_shard_ids(t + "-cancel", 1, shard=lost_shards[0])[0]
        self.assertOk(*d.req("add", topic=t + "-cancel", id=cancelled, delay=3600, body=1))
        # left ready for the second failure, below
        seconds = d.one_shard_ids(t + "-2nd", 30, shard=lost_shards[0])
        self.assertOk(*d.req("add", jobs=[{"topic": t + "-2nd", "id": j, "body": j, "ttr": 60}
                                          for j in seconds]))
        acked = set(ready) | set(delayed)
        probes = iter(d.one_shard_ids(t + "-p", 400, shard=other))
        before = self.add_latencies(t + "-p", [next(probes) for _ in range(100)])
        self.wait_replicated(victim)
        t0 = time.monotonic()
        self.cluster.kill9(victim)
        promoted_at = None
        got, answers, produced = {}, {}, 0

        def tally(what, st):
            answers[what + " %d" % st] = answers.get(what + " %d" % st, 0) + 1
        # A producer adds a job to any shard, a consumer pops and finishes,
        # until every job acknowledged is delivered, 3 s past the promotion.
        while time.monotonic() - t0 < 40 * SLOW:
            now = time.monotonic()
            if promoted_at is None and self.promoted(victim, lost_shards):
                promoted_at = now
            if promoted_at and now - promoted_at > 3 and set(got) >= acked:
                break
            j = "%s-prod-%d" % (t, produced)
            produced += 1
            st, r = d.req("add", topic=t, id=j, body=j)
            tally("add", st)
            if st == 200:
                acked.add(j)
            st, r = d.req("pop", topic=t, count=100, timeout=0.2)
            tally("pop", st)
            if st == 200 and r["jobs"]:
                got.update((j["id"], time.monotonic()) for j in r["jobs"])
                tally("finish", d.req("finish", ids=[j["id"] for j in r["jobs"]])[0])
        self.assertIsNotNone(promoted_at, "the replica was promoted")
        last = max(got[j] for j in acked if j in got) - promoted_at if got else -1
        try:
            hooked = rcv.wait_for(lambda reqs: len(reqs) >= len(hooks), timeout=15 * SLOW)
        except AssertionError:
            hooked = list(rcv.requests)
        lost_id = d.one_shard_ids(t + "-lost", 1, shard=lost_shards[0])[0]
        t1 = time.monotonic()
        st, r = d.req("add", topic=t, id=lost_id, body=1)
        took = time.monotonic() - t1
        print("master %d lost for good (shards %s), promoted after %.1f s: %d of %d acknowledged "
              "jobs delivered, the last %.1f s after the promotion; answers %s; %d of %d "
              "callbacks; then an add to shard %d: %d %r in %.3f s" %
              (victim.port, lost_shards, promoted_at - t0, len(set(got) & acked), len(acked),
               last, answers, len(hooked), len(hooks), lost_shards[0], st, r, took))
        self.assertEqual(set(got) & acked, acked)
        self.assertLess(last, 15 * SLOW)
        self.assertEqual(len(hooked), len(hooks))
        self.assertEqual((st, r.get("code")), (503, "unavailable"), r)
        self.assertIn("shard %d has no replica" % lost_shards[0], r["error"])
        self.assertLess(took, 0.4, "answered at once, not after the WAIT timeout")
        # A delete is answered like an add: one that a second failure could
        # undo would deliver a job its producer cancelled.
        st, r = d.req("delete", id=cancelled)
        self.assertEqual((st, r.get("code")), (503, "unavailable"), r)
        self.assertEqual(d.req("get", id=cancelled)[1].get("state"), "delay")
        for _ in range(20):
            st, r = d.req("add", topic=t + "-anyid", body=1)
            self.assertEqual(st, 200, r)
            self.assertNotIn(d.shard_of(r["id"]), lost_shards, "placed where it is confirmed")
        after = self.add_latencies(t + "-p", [next(probes) for _ in range(100)])
        print("adds to shard %d: p99 %.1f ms before the kill, %.1f ms after" %
              (other, p99(before) * 1000, p99(after) * 1000))
        self.assertLess(p99(after), 2 * max(p99(before), 0.01))

        st, h = d.get("/health")
        self.assertEqual(st, 200, h)
        self.assertEqual(h["short_of_replicas"], [{"shard": k, "replicas": 0} for k in lost_shards])
        self.assertIn("replicas_warning", h)
        st, m = d.get("/metrics")
        self.assertIn("delayq_shards_short_of_replicas %d\n" % len(lost_shards), m)
        unconfirmed = unconfirmed_writes(d)
        st, stats = d.req("stats")
        print("writes answered unconfirmed: %d (stats %d)" % (unconfirmed,
                                                                stats["unconfirmed_writes"]))
        self.assertGreater(unconfirmed, 0)
        with open(d.fcgi_log()) as f:
            said = f.read()
        for k in lost_shards:
            self.assertEqual(said.count("shard %d has 0 of the 1 replicas" % k), 1, "said once")
        for log in d.timer_logs:  # moves fail while the master is unreachable, not after
            with open(log) as f:
                self.assertNotIn("replicas confirmed", f.read(), log)
        self.second_failure(self.shard_master(lost_shards[0]), t + "-2nd", seconds)

    def second_failure(self, alone, topic, ids):
        """The master serving alone crashes (kill -9) and is started again
        from its AOF (appendfsync always), as a machine that reboots: what
        it undoes of the deliveries answered unconfirmed since it serves
        alone is counted, and is never more than what was counted."""
        d = self.c
        before = unconfirmed_writes(d)
        taken = []
        for _ in range(10):  # reservations, one write each
            st, r = d.req("pop", topic=topic)
            self.assertOk(st, r)
            taken.append(r["id"])
        for j in taken[:5]:  # and finishes
            self.assertOk(*d.req("finish", id=j))
        counted = unconfirmed_writes(d) - before
        self.cluster.kill9(alone)
        self.cluster.restart(alone)
        self.cluster.wait_ok(60 * SLOW)
        states = {}
        deadline = time.monotonic() + 30 * SLOW
        for j in ids:
            while True:
                st, r = d.req("get", id=j)
                if st in (200, 404) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            states[j] = r.get("state") if st == 200 else st
        undone = ([j for j in taken[:5] if states[j] != 404] +
                  [j for j in taken[5:] if states[j] != "reserved"])
        lost = [j for j in ids if j not in taken[:5] and states[j] == 404]
        print("second failure: the master serving alone killed and started again from its "
              "AOF: %d deliveries (%d writes) answered unconfirmed before it, %d undone, "
              "%d jobs lost" % (len(taken) + 5, counted, len(undone), len(lost)))
        self.assertEqual(lost, [])
        self.assertEqual(counted, len(taken) + 5, "each write counted")
        self.assertLessEqual(len(undone), counted)


class SpareReplicaHeals(ClusterTestCase):
    """3 masters and 4 replicas (one master has a spare), with
    cluster-migration-barrier 1 and redis_wait_replicas 1: after kill -9 of
    a master that has one replica, Redis' replica migration hands the
    orphaned promoted master the spare, and adds to its shards answer 200
    again, with no operator and no restart of delayq."""

    DEPLOYMENT_KW = dict(ClusterTestCase.DEPLOYMENT_KW, redis_wait_replicas=1,
                         redis_wait_timeout_ms=500,
                         redis_args=("--cluster-node-timeout", "2000",
                                     "--cluster-migration-barrier", "1"))

    def test_spare_replica_migrates_to_the_orphan(self):
        d, t = self.c, unique("spare")
        victim = self.shard_master(0)
        lost_shards = [k for k in range(d.shards) if self.shard_master(k) is victim]
        donor = next(m for m in self.cluster.masters() if m is not victim)
        self.cluster.add_replica(donor)
        ids = d.one_shard_ids(t, 20, shard=lost_shards[0])
        self.assertOk(*d.req("add", jobs=[{"topic": t, "id": j, "body": j} for j in ids[:10]]))
        self.wait_replicated(victim)
        t0 = time.monotonic()
        self.cluster.kill9(victim)
        answers, back, probe = {}, None, iter(ids[10:] + d.one_shard_ids(t + "-x", 500,
                                                                        shard=lost_shards[0]))
        while time.monotonic() - t0 < 45 * SLOW:
            st, r = d.req("add", topic=t, id=next(probe), body=1)
            answers[st] = answers.get(st, 0) + 1
            if st == 200:
                back = time.monotonic() - t0
                break
            time.sleep(0.1)
        st, h = d.get("/health")
        print("master %d killed, a spare replica of %d migrated: adds to shard %d answered 200 "
              "again after %s s; answers before: %s; /health then: %s" %
              (victim.port, donor.port, lost_shards[0],
               "%.1f" % back if back is not None else "never", answers,
               h.get("short_of_replicas")))
        self.assertIsNotNone(back, "full service returned")
        self.assertEqual(h.get("short_of_replicas"), [])
        got = []
        deadline = time.monotonic() + 10 * SLOW
        while len(got) < 10 and time.monotonic() < deadline:
            st, r = d.req("pop", topic=t, count=20, timeout=0.5)
            got += [j["id"] for j in r.get("jobs", [])]
        self.assertEqual(sorted(set(got) & set(ids[:10])), sorted(ids[:10]))


if __name__ == "__main__":
    main()

"""Redis faults the failover and nemesis suites share, on a Redis Cluster
(ClusterFaults) or behind Sentinel (SentinelFaults), both on the
deployment's redis_server (dqtest.redis_cluster / dqtest.redis_sentinel).

Every fault returns once Redis itself has settled from it (a replica
promoted, a node back in sync); none restarts what it killed unless told
(`restart=True`, failover.py's supervisor). Each returns a dict:
  t0:     monotonic time the fault began (the kill, the SIGSTOP, ...)
  what:   one line for the report
  shards: the deployment's shards whose master the fault hit
and, where it applies, `promoted` (seconds from t0 to the promotion)."""

import signal
import subprocess
import time

from dqtest.redis_cluster import key_slot
from dqtest.resp import RedisError, text


def wait_until(what, pred, timeout, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception:  # noqa: BLE001 (Redis settling)
            pass
        time.sleep(every)
    raise RuntimeError("%s did not happen within %.0f s" % (what, timeout))


def redis_cli(*args, timeout=600):
    r = subprocess.run(["redis-cli"] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("redis-cli %s failed:\n%s" % (" ".join(map(str, args[:3])),
                                                        r.stdout.decode()[-2000:]))
    return r.stdout.decode("utf-8", "replace")


class ClusterFaults:
    def __init__(self, d, rng):
        self.d, self.rng, self.cl = d, rng, d.redis_server

    def shards_on(self, server):
        return [k for k in range(self.d.shards) if self.cl.master_of(self.d.tag(k)) is server]

    def pick_master(self, shard=None):
        """(shard, its master): the shard given, or a random shard that has
        a replica to take over (after a lost machine a master may have none
        yet)."""
        shards = list(range(self.d.shards))
        self.rng.shuffle(shards)
        if shard is not None:
            shards = [shard]
        for k in shards:
            m = self.cl.master_of(self.d.tag(k))
            if self.cl.replicas_of(m):
                return k, m
        raise RuntimeError("no master has a replica")

    def _wait_promotion(self, shard, victim, t0, timeout=60):
        def promoted():
            self.cl.refresh()
            return self.cl.master_of(self.d.tag(shard)) is not victim
        wait_until("a replica taking over shard %d" % shard, promoted, timeout)
        return time.monotonic() - t0

    def kill(self, restart=False, shard=None):
        """kill -9 of the master of a random shard (or of `shard`); its
        replica takes over. restart: start the killed node again 1 s later
        (it rejoins as a replica), else it stays dead, as a lost machine."""
        shard, victim = self.pick_master(shard)
        hit = self.shards_on(victim)
        self.cl.kill9(victim)
        t0 = time.monotonic()
        took = self._wait_promotion(shard, victim, t0)
        if restart:
            time.sleep(1.0)
            self.cl.restart(victim)
            self.cl.wait_ok(60)
        return {"t0": t0, "shards": hit, "promoted": took, "victim": victim, "shard": shard,
                "what": "kill -9 of the master of shard %d (port %d)%s: replica promoted "
                        "after %.1f s" % (shard, victim.port, "" if restart else ", never restarted",
                                          took)}

    def orphan(self):
        """kill -9 of a master, never restarted, and no node joins: its
        promoted replica serves alone (each master has one replica)."""
        return self.kill()

    def replace_lost(self, shard):
        """A fresh node joins as a replica of shard's master (which lost its
        replica to a promotion)."""
        master = self.cl.master_of(self.d.tag(shard))
        t0 = time.monotonic()
        node = self.cl.add_replica(master)
        return {"t0": t0, "shards": [], "what": "a fresh node (port %d) joined as a replica of "
                "port %d, in sync after %.1f s" % (node.port, master.port, time.monotonic() - t0)}

    def freeze(self, extra=1.0):
        """SIGSTOP of a master past cluster-node-timeout until its replica is
        promoted, `extra` seconds more, then SIGCONT: it comes back stale and
        must turn into a replica of the new master."""
        shard, victim = self.pick_master()
        hit = self.shards_on(victim)
        victim.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            took = self._wait_promotion(shard, victim, t0)
            time.sleep(extra)
        finally:
            victim.signal(signal.SIGCONT)
        held = time.monotonic() - t0
        self.cl._drop_client(victim)

        def demoted():
            return text(self.cl.client(victim.port)("ROLE")[0]) == "slave"
        wait_until("the woken master turning replica", demoted, 60)
        self.cl.wait_ok(60)
        return {"t0": t0, "shards": hit, "promoted": took,
                "what": "SIGSTOP of the master of shard %d (port %d) for %.1f s: replica promoted "
                        "after %.1f s, the old master a replica %.1f s after SIGCONT" %
                        (shard, victim.port, held, took, time.monotonic() - t0 - held)}

    def slow(self, ms):
        """CLIENT PAUSE ALL on a random shard's master for ms (longer than
        redis_timeout_ms, shorter than a failover; the cluster bus is no
        client, so the node stays healthy for the cluster)."""
        shard = self.rng.randrange(self.d.shards)
        m = self.cl.master_of(self.d.tag(shard))
        t0 = time.monotonic()
        self.cl.client(m.port)("CLIENT", "PAUSE", ms, "ALL")
        time.sleep(ms / 1000.0)
        return {"t0": t0, "shards": self.shards_on(m),
                "what": "CLIENT PAUSE %d ALL on the master of shard %d (port %d)" % (
                    ms, shard, m.port)}

    def reshard(self):
        """Moves a random shard's slot, with its keys, to another master
        under load (one slot: what redis-cli --cluster reshard does for each
        slot it moves)."""
        shard = self.rng.randrange(self.d.shards)
        slot = key_slot(self.d.tag(shard))
        source = self.cl.master_of(self.d.tag(shard))
        target = self.rng.choice([m for m in self.cl.masters() if m is not source])
        t0 = time.monotonic()
        self.cl.move_slot(slot, source, target)
        return {"t0": t0, "shards": [shard],
                "what": "shard %d's slot %d moved from %d to %d under load: %.1f s" % (
                    shard, slot, source.port, target.port, time.monotonic() - t0)}

    def reshard_upto(self):
        """Moves the slots up to and including a random shard's slot from its
        master to another one under load (redis-cli --cluster reshard)."""
        shard = self.rng.randrange(self.d.shards)
        slot = key_slot(self.d.tag(shard))
        source = self.cl.master_of(self.d.tag(shard))
        target = self.rng.choice([m for m in self.cl.masters() if m is not source])
        ranges = sorted((a, b) for a, b, p in self.cl._slots if p == source.port)
        count = sum(min(b, slot) - a + 1 for a, b in ranges if a <= slot)
        ids = [self.cl.node_id(s) for s in (source, target)]
        t0 = time.monotonic()
        redis_cli("--cluster", "reshard", self.cl.addr(source), "--cluster-from", ids[0],
                  "--cluster-to", ids[1], "--cluster-slots", count, "--cluster-yes")
        self.cl.wait_ok(60)
        return {"t0": t0, "shards": [shard],
                "what": "reshard of %d slots from %d with shard %d's slot %d to %d: %.1f s" % (
                    count, source.port, shard, slot, target.port, time.monotonic() - t0)}

    def remove_node(self):
        """A fresh master joins, takes a random shard's slot under load,
        gives it to another master and is removed (redis-cli --cluster
        del-node: forgotten by the others), then stopped, as the machine
        would be."""
        shard = self.rng.randrange(self.d.shards)
        slot = key_slot(self.d.tag(shard))
        source = self.cl.master_of(self.d.tag(shard))
        node = self.cl.add_master()
        t0 = time.monotonic()
        self.cl.move_slot(slot, source, node)
        moved_in = time.monotonic() - t0
        target = self.rng.choice([m for m in self.cl.masters() if m is not node])
        self.cl.move_slot(slot, node, target)
        redis_cli("--cluster", "del-node", self.cl.addr(target), self.cl.node_id(node))
        self.cl.forget(node)
        node.stop()
        self.cl.wait_ok(60)
        return {"t0": t0, "shards": [shard],
                "what": "node %d added, shard %d's slot %d moved to it from %d (%.1f s), then to "
                        "%d, node removed and stopped: %.1f s" % (
                            node.port, shard, slot, source.port, moved_in, target.port,
                            time.monotonic() - t0)}


class SentinelFaults:
    def __init__(self, d, rng):
        self.d, self.rng, self.group = d, rng, d.redis_server

    def all_shards(self):
        return list(range(self.d.shards))

    def kill(self, restart=False, shard=None):
        victim = self.group.primary()
        victim.kill9()
        t0 = time.monotonic()
        self.group.wait_failover(victim, 60)
        took = time.monotonic() - t0
        if restart:
            time.sleep(1.0)
            victim.start()
        return {"t0": t0, "shards": self.all_shards(), "promoted": took, "victim": victim,
                "shard": 0, "what": "kill -9 of the primary (port %d)%s: a replica promoted after %.1f s" % (
                    victim.port, "" if restart else ", never restarted", took)}

    def orphan(self):
        """A primary with one replica lost for good: kill -9 of a replica
        first (the primary still has the one redis_wait_replicas asks
        for), then of the primary; the last replica is promoted and serves
        alone. Neither is restarted, and no server joins."""
        gone = self.rng.choice([s for s in self.group.servers
                                if s.running() and s is not self.group.primary()])
        gone.kill9()
        ev = self.kill()
        ev["what"] = "kill -9 of a replica (port %d), then of %s" % (
            gone.port, ev["what"][len("kill -9 of "):])
        return ev

    def replace_lost(self, shard=None):
        t0 = time.monotonic()
        node = self.group.add_replica()
        return {"t0": t0, "shards": [], "what": "a fresh server (port %d) joined as a replica, "
                "in sync after %.1f s" % (node.port, time.monotonic() - t0)}

    def freeze(self, extra=1.0):
        victim = self.group.primary()
        victim.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            self.group.wait_failover(victim, 60)
            took = time.monotonic() - t0
            time.sleep(extra)
        finally:
            victim.signal(signal.SIGCONT)
        held = time.monotonic() - t0
        victim.close_resp()

        def demoted():
            return text(victim("ROLE")[0]) == "slave"
        wait_until("the woken primary turning replica", demoted, 60)
        return {"t0": t0, "shards": self.all_shards(), "promoted": took,
                "what": "SIGSTOP of the primary (port %d) for %.1f s: a replica promoted after "
                        "%.1f s, the old primary a replica %.1f s after SIGCONT" %
                        (victim.port, held, took, time.monotonic() - t0 - held)}

    def slow(self, ms):
        """CLIENT PAUSE WRITE on the primary for ms: writes wait longer than
        redis_timeout_ms; the sentinels' PINGs are still answered (with
        ALL they would fail the primary over)."""
        p = self.group.primary()
        t0 = time.monotonic()
        try:
            p("CLIENT", "PAUSE", ms, "WRITE")
        except RedisError as e:
            raise RuntimeError("CLIENT PAUSE: %s" % e)
        time.sleep(ms / 1000.0)
        return {"t0": t0, "shards": self.all_shards(),
                "what": "CLIENT PAUSE %d WRITE on the primary (port %d)" % (ms, p.port)}

    reshard = reshard_upto = remove_node = None

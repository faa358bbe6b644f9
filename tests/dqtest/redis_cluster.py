"""A private Redis Cluster for a test: `masters` masters with `replicas`
replicas each, redis-server processes on loopback ports in directories of
their own, joined with `redis-cli --cluster create`. Tests inspect it
through a small client that sends each command to the master of its key's
slot (and fans KEYS out to every master), the way delayq's store does."""

import os
import re
import subprocess
import time

from .procs import free_cluster_ports, tail
from .redis_server import RedisServer
from .resp import RedisError, Resp, text


def crc16(data):
    """CRC16-CCITT (XMODEM), Redis Cluster's key hash."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key):
    """The hash slot of key (bytes or str), hash tags honoured."""
    k = key.encode("utf-8") if isinstance(key, str) else key
    start = k.find(b"{")
    if start >= 0:
        end = k.find(b"}", start + 1)
        if end > start + 1:
            k = k[start + 1:end]
    return crc16(k) % 16384


# Commands sent to every master (their answers joined or the first kept).
_FAN_OUT = {"KEYS", "FLUSHALL", "DBSIZE", "FUNCTION", "CONFIG", "INFO", "SCRIPT", "CLIENT"}


class RedisCluster:
    """RedisCluster(dir, masters=3, replicas=1).start(); calling it runs a
    command on the right master; servers, masters(), master_of(key), kill9,
    restart(server) for failure tests; seeds for delayq's redis_cluster."""

    def __init__(self, dir, masters=3, replicas=1, node_timeout_ms=1000, args=(), place=None):
        """place(name) -> (host, argv prefix): where a node runs (default:
        127.0.0.1 here; dqtest.netlab.NetLab.place puts each node in a
        network namespace of its own)."""
        self.dir = dir
        self.place = place or (lambda name: ("127.0.0.1", []))
        self.nmasters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.args = list(args)
        self.servers = []
        self._clients = {}
        self._slots = None  # [(first, last, port)]

    def _node(self, port):
        ndir = os.path.join(self.dir, "cluster", str(port))
        os.makedirs(ndir, exist_ok=True)
        host, prefix = self.place("redis%d" % port)
        args = ["--cluster-announce-ip", host] if host != "127.0.0.1" else []
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-replica-validity-factor", "0", "--appendonly", "yes",
                "--appendfsync", "always", "--repl-diskless-sync-delay", "0"] + self.args
        return RedisServer(ndir, port=port, args=args, log_name="redis.log", host=host,
                           prefix=prefix)

    def start(self):
        n = self.nmasters * (1 + self.replicas)
        base = free_cluster_ports(n)  # together: no node takes another's bus port
        self.servers = [self._node(base + i) for i in range(n)]
        for s in self.servers:
            s.start()
        argv = ["redis-cli", "--cluster", "create"]
        argv += [self.addr(s) for s in self.servers]
        argv += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with open(os.path.join(self.dir, "cluster-create.log"), "wb") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed:\n" +
                               r.stdout.decode("utf-8", "replace"))
        self.wait_ok()
        return self

    @property
    def seeds(self):
        """host:port,... of the nodes running now (at most 16, what delayq
        accepts), for redis_cluster: a process started after machines were
        lost and replaced is configured with the ones there now, as an
        operator would keep the list."""
        return ",".join(self.addr(s) for s in self.running()[:16])

    @staticmethod
    def addr(server):
        return "%s:%d" % (server.host, server.port)

    def server(self, port):
        return next(s for s in self.servers if s.port == port)

    def client(self, port):
        c = self._clients.get(port)
        if c is None:
            c = Resp(port, host=self.server(port).host, timeout=5)
            self._clients[port] = c
        return c

    def running(self):
        """The nodes that can answer (alive, not frozen)."""
        return [s for s in self.servers if s.running() and not s.frozen]

    def wait_ok(self, timeout=30):
        """Until every running node says cluster_state:ok and agrees on who
        serves every slot, and every running replica is in sync."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                states = set()
                maps = set()
                for s in self.running():
                    info = text(self.client(s.port)("CLUSTER", "INFO"))
                    states.add("cluster_state:ok" in info)
                    maps.add(tuple(self._read_slots(s.port)))
                if states == {True} and len(maps) == 1:
                    self._slots = list(maps.pop())
                    if self._replicas_online():
                        return
                    last = "replicas not in sync yet"
                last = (states, len(maps))
            except (OSError, ConnectionError, RedisError) as e:
                last = repr(e)
            time.sleep(0.1)
        raise RuntimeError("the cluster did not settle (last: %r)" % (last,))

    def _replicas_online(self):
        """Every running replica is in sync with its master."""
        for s in self.running():
            info = text(self.client(s.port)("INFO", "replication"))
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
            replicas = re.findall(r"^slave\d+:.*$", info, re.M)
            if any("state=online" not in r for r in replicas):
                return False
        return True

    def _read_slots(self, port):
        out = []
        for entry in self.client(port)("CLUSTER", "SLOTS"):
            out.append((entry[0], entry[1], entry[2][1]))
        return sorted(out)

    def refresh(self):
        for s in self.running():
            try:
                self._slots = self._read_slots(s.port)
                return
            except (OSError, ConnectionError, RedisError):
                continue

    def port_of_slot(self, slot):
        if self._slots is None:
            self.refresh()
        for first, last, port in self._slots:
            if first <= slot <= last:
                return port
        raise RuntimeError("no node serves slot %d" % slot)

    def master_of(self, key):
        """The RedisServer that serves key's slot now."""
        port = self.port_of_slot(key_slot(key))
        return next(s for s in self.servers if s.port == port)

    def masters(self):
        """The RedisServers that are masters of some slots now."""
        self.refresh()
        ports = {p for _, _, p in self._slots}
        return [s for s in self.servers if s.port in ports]

    def __call__(self, *args):
        cmd = str(args[0]).upper()
        if cmd in _FAN_OUT:
            replies = [self.client(s.port)(*args) for s in self.masters()]
            if cmd == "KEYS":
                return [k for r in replies for k in r]
            if cmd == "DBSIZE":
                return sum(replies)
            return replies[0]
        key = args[1]
        for _ in range(10):
            port = self.port_of_slot(key_slot(key))
            try:
                return self.client(port)(*args)
            except RedisError as e:
                msg = str(e)
                if msg.startswith("MOVED"):
                    self.refresh()
                    continue
                if msg.startswith("ASK"):
                    target = int(msg.split()[2].rsplit(":", 1)[1])
                    c = self.client(target)
                    c("ASKING")
                    return c(*args)
                if msg.startswith(("TRYAGAIN", "CLUSTERDOWN")):
                    time.sleep(0.2)
                    continue
                raise
            except (OSError, ConnectionError):
                time.sleep(0.2)
                self.refresh()
        raise RuntimeError("no answer for %r" % (args,))

    def kill9(self, server):
        self._drop_client(server)
        server.kill9()

    def restart(self, server):
        server.start()

    def node_id(self, server):
        return text(self.client(server.port)("CLUSTER", "MYID"))

    def add_node(self, replica_of=None, timeout=60):
        """A fresh node (new port, dir and place, empty) joins, as a replica
        of replica_of (a lost machine replaced) or as a master without
        slots; until the cluster agrees and it is in sync."""
        node = self._node(free_cluster_ports(1))
        node.start()
        self.servers.append(node)
        argv = ["redis-cli", "--cluster", "add-node", self.addr(node), self.addr(
            replica_of or self.masters()[0])]
        if replica_of:
            argv += ["--cluster-slave", "--cluster-master-id", self.node_id(replica_of)]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster add-node failed:\n" +
                               r.stdout.decode("utf-8", "replace")[-2000:])
        self.wait_ok(timeout)
        nid = self.node_id(node)
        deadline = time.monotonic() + timeout
        while not all(nid in text(self.client(s.port)("CLUSTER", "NODES")) for s in self.running()):
            if time.monotonic() > deadline:
                raise RuntimeError("not every node learnt of node %d" % node.port)
            time.sleep(0.1)
        return node

    def add_replica(self, master, timeout=60):
        return self.add_node(master, timeout)

    def add_master(self, timeout=60):
        return self.add_node(None, timeout)

    def move_slot(self, slot, source, target, batch=100):
        """Moves one slot and its keys from source to target under load, the
        way redis-cli --cluster reshard moves each slot: IMPORTING on the
        target, MIGRATING on the source, MIGRATE the keys in batches, then
        SETSLOT NODE on both and on every other master."""
        src, dst = self.client(source.port), self.client(target.port)
        sid, tid = self.node_id(source), self.node_id(target)
        dst("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
        src("CLUSTER", "SETSLOT", slot, "MIGRATING", tid)
        while True:
            keys = src("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            src("MIGRATE", target.host, target.port, "", 0, 10000, "REPLACE", "KEYS", *keys)
        dst("CLUSTER", "SETSLOT", slot, "NODE", tid)
        try:
            src("CLUSTER", "SETSLOT", slot, "NODE", tid)
        except RedisError as e:
            # A master that gave its last slot away turns replica of the
            # taker at once (cluster-allow-replica-migration); redis-cli
            # passes over this error the same way.
            if "only with masters" not in str(e):
                raise
        for m in self.running():  # the other masters (the replicas follow theirs)
            if m is source or m is target:
                continue
            c = self.client(m.port)
            if text(c("ROLE")[0]) == "master":
                c("CLUSTER", "SETSLOT", slot, "NODE", tid)
        self.wait_ok(60)

    def forget(self, server):
        """server left the cluster for good (del-node): no client kept."""
        self._drop_client(server)

    def replicas_of(self, master):
        """The running servers that replicate master now."""
        out = []
        for s in self.running():
            if s is master:
                continue
            try:
                role = self.client(s.port)("ROLE")
            except (OSError, ConnectionError, RedisError):
                continue
            if text(role[0]) == "slave" and int(role[2]) == master.port and \
                    text(role[1]) == master.host:
                out.append(s)
        return out

    def _drop_client(self, server):
        c = self._clients.pop(server.port, None)
        if c:
            c.close()

    def stop(self):
        for c in self._clients.values():
            c.close()
        self._clients = {}
        for s in self.servers:
            if s.running():
                s.stop()

    def log_tails(self):
        return "\n".join("--- redis %d\n%s" % (s.port, tail(s.log, 10)) for s in self.servers)

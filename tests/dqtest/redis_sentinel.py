"""A private Redis behind Redis Sentinel for a test: a primary, replicas
and sentinels, redis-server processes on loopback ports in directories of
their own. Calling it runs a command on whichever server the sentinels
name primary now."""

import os
import time

from .procs import free_port, tail
from .redis_server import RedisServer
from .resp import RedisError, Resp, text

MASTER_NAME = "dqmaster"


class RedisSentinelGroup:
    """RedisSentinelGroup(dir, replicas=2, sentinels=3).start();
    sentinel_addrs for redis_sentinels, primary() for failure tests."""

    def __init__(self, dir, replicas=2, sentinels=3, down_after_ms=1000, args=(), place=None,
                 failover_timeout_ms=10000):
        """place(name) -> (host, argv prefix): where a server or sentinel
        runs (default: 127.0.0.1 here; see dqtest.netlab)."""
        self.dir = dir
        self.place = place or (lambda name: ("127.0.0.1", []))
        self.failover_timeout_ms = failover_timeout_ms
        self.nadded = 0
        self.nreplicas = replicas
        self.nsentinels = sentinels
        self.down_after_ms = down_after_ms
        self.args = list(args)
        self.servers = []
        self.sentinels = []
        self._clients = {}

    def _server(self, name, extra=()):
        sdir = os.path.join(self.dir, "sentinel-group", name)
        os.makedirs(sdir, exist_ok=True)
        host, prefix = self.place(name)
        # No 5 s wait for more replicas before a full sync (Redis' default).
        args = ["--appendonly", "yes", "--appendfsync", "always",
                "--replica-announce-ip", host, "--repl-diskless-sync-delay", "0"]
        args += self.args + list(extra)
        return RedisServer(sdir, args=args, log_name="redis.log", host=host, prefix=prefix)

    def start(self):
        primary = self._server("primary")
        primary.start()
        self.servers = [primary]
        for i in range(self.nreplicas):
            r = self._server("replica%d" % i, ["--replicaof", primary.host, str(primary.port)])
            r.start()
            self.servers.append(r)
        self._wait_replicas(primary)
        for i in range(self.nsentinels):
            self.sentinels.append(self._start_sentinel(i, primary))
        self.wait_primary_known()
        return self

    def _wait_replicas(self, primary, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = text(primary("INFO", "replication"))
            if info.count("state=online") == self.nreplicas:
                return
            time.sleep(0.05)
        raise RuntimeError("replicas did not connect:\n" + info)

    def _start_sentinel(self, i, primary):
        port = free_port()
        name = "sentinel%d" % i
        sdir = os.path.join(self.dir, "sentinel-group", name)
        os.makedirs(sdir, exist_ok=True)
        host, prefix = self.place(name)
        conf = os.path.join(sdir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind %s\ndir %s\n" % (port, host, sdir))
            if host != "127.0.0.1":  # a test network's address (dqtest.netlab)
                f.write("protected-mode no\nsentinel announce-ip %s\n" % host)
            f.write("sentinel monitor %s %s %d 2\n" % (MASTER_NAME, primary.host, primary.port))
            f.write("sentinel down-after-milliseconds %s %d\n" % (MASTER_NAME,
                                                                  self.down_after_ms))
            f.write("sentinel failover-timeout %s %d\n" % (MASTER_NAME,
                                                           self.failover_timeout_ms))
            f.write("sentinel parallel-syncs %s 1\n" % MASTER_NAME)
        s = RedisServer(sdir, port=port, log_name="sentinel.log", host=host, prefix=prefix)
        s.argv = lambda: ["redis-server", conf, "--sentinel"]
        s.start()
        return s

    @property
    def sentinel_addrs(self):
        return ",".join("%s:%d" % (s.host, s.port) for s in self.sentinels)

    def primary_port(self):
        """The port the sentinels name primary now (the first that answers)."""
        for s in self.sentinels:
            if not s.running():
                continue
            try:
                r = Resp(s.port, host=s.host, timeout=2)
                addr = r("SENTINEL", "get-master-addr-by-name", MASTER_NAME)
                r.close()
                if addr:
                    return int(addr[1])
            except (OSError, ConnectionError, RedisError):
                continue
        raise RuntimeError("no sentinel answered")

    def add_replica(self, timeout=60):
        """A fresh server (new port, dir and place, empty) replicates the
        primary, as when a lost machine is replaced; until it is in sync.
        The sentinels find it through the primary."""
        self.nadded += 1
        p = self.primary()
        r = self._server("added%d" % self.nadded, ["--replicaof", p.host, str(p.port)])
        r.start()
        self.servers.append(r)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = text(r("INFO", "replication"))
            if "master_link_status:up" in info:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("the added replica did not sync:\n" + info)
        self._wait_sentinels_know(r, deadline)
        return r

    def _wait_sentinels_know(self, replica, deadline):
        """Until every live sentinel lists replica as a healthy replica.
        Sentinels learn of replicas from the primary's INFO, every 10 s: a
        failover before that can neither promote the new replica nor point
        it at the new primary (it would go on replicating the old one), as
        an operator who adds a replica must wait for too."""
        want = (replica.host, str(replica.port))
        while time.monotonic() < deadline:
            if all(self._sentinel_lists(s, want) for s in self.sentinels if s.running()):
                return
            time.sleep(0.2)
        raise RuntimeError("the sentinels did not learn of the replica %s:%s" % want)

    @staticmethod
    def _sentinel_lists(sentinel, want):
        try:
            c = Resp(sentinel.port, host=sentinel.host, timeout=2)
            try:
                rows = c("SENTINEL", "REPLICAS", MASTER_NAME)
            finally:
                c.close()
        except (OSError, ConnectionError, RedisError):
            return False
        for row in rows:
            f = {text(k): text(v) for k, v in zip(row[::2], row[1::2])}
            if (f.get("ip"), f.get("port")) == want:
                return f.get("flags") == "slave" and f.get("master-link-status") == "ok"
        return False

    def primary(self):
        port = self.primary_port()
        return next(s for s in self.servers if s.port == port)

    def wait_primary_known(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.primary().running():
                    return self.primary()
            except (RuntimeError, StopIteration):
                pass
            time.sleep(0.1)
        raise RuntimeError("the sentinels name no live primary")

    def wait_failover(self, old, timeout=30):
        """Until the sentinels name a live primary other than old, and it
        says it is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                p = self.primary()
                if p is not old and p.running():
                    role = p("ROLE")
                    if text(role[0]) == "master":
                        return p
            except (RuntimeError, StopIteration, OSError, ConnectionError, RedisError):
                pass
            time.sleep(0.1)
        raise RuntimeError("no failover within %d s" % timeout)

    def __call__(self, *args):
        for _ in range(20):
            try:
                return self.primary()(*args)
            except RedisError as e:
                if not str(e).startswith(("READONLY", "LOADING")):
                    raise
            except (OSError, ConnectionError):
                pass
            time.sleep(0.2)
        raise RuntimeError("no primary answered %r" % (args,))

    def running(self):
        return [s for s in self.servers + self.sentinels if s.running()]

    def stop(self):
        for s in self.sentinels + self.servers:
            if s.running():
                s.stop()

    def log_tails(self):
        return "\n".join("--- %s\n%s" % (s.dir, tail(s.log, 10))
                         for s in self.servers + self.sentinels)

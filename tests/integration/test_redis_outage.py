"""Redis outages and Redis authentication.

- Redis stopped: every command answers 503 `unavailable` within
  redis_connect_timeout_ms (plus a margin), changes nothing, no worker
  hangs, and service resumes when Redis is back without restarting delayq.
- Redis "black-holed": a TCP proxy this test controls sits where delayq
  expects Redis. Once it stops answering (accepts, never replies), a write
  already sent answers 504 `timeout` and a read 503 after redis_timeout_ms;
  a new connection answers 503 after at most redis_connect_timeout_ms +
  redis_timeout_ms. Once it stops accepting (full backlog: the kernel drops
  the SYNs), connects answer 503 after redis_connect_timeout_ms.
- Redis AUTH: requirepass with --redis-password, and an ACL user (default
  user off) with --redis-username/--redis-password: every command works. A
  wrong password: 503 on requests, a log line naming the AUTH failure.
"""

import json
import os
import selectors
import socket
import sys
import threading
import time

import dqtest
from dqtest import (SLOW, Deployment, DeploymentError, DeploymentTestCase, RedisError, Resp,
                    free_port, main, raw_http, single_redis_only, tail, unique)

CONNECT_MS = 300
TIMEOUT_MS = 700
MARGIN = 0.6 * SLOW  # scheduling, nginx, HTTP


def parallel(fn, n):
    """Runs fn(i) in n threads; returns the results in order."""
    out = [None] * n

    def run(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001
            out[i] = e

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def timed(c, method, path, body=None):
    """One request on its own connection -> (status, parsed, seconds)."""
    t0 = time.monotonic()
    st, h, data = raw_http(c.http_port, method, path, body if body is not None else b"",
                           timeout=30)
    dt = time.monotonic() - t0
    return st, dqtest.parse_body(data, h), dt


def post(c, cmd, fields):
    return timed(c, "POST", "/" + cmd, json.dumps(fields).encode())


def wait_health(tc, timeout=15.0):
    t0 = time.monotonic()
    while True:
        st, r, _ = timed(tc.c, "GET", "/health")
        if st == 200:
            return time.monotonic() - t0
        tc.assertLess(time.monotonic() - t0, timeout * SLOW, "health never came back: %r" % (r,))
        time.sleep(0.1)


def roundtrip_burst(tc, n, topic):
    """n parallel add/pop/finish round trips, each on its own connection;
    all must succeed; returns the slowest one in seconds."""
    def one(i):
        t0 = time.monotonic()
        st, r, _ = post(tc.c, "add", dict(topic="%s-%d" % (topic, i), id="%s-%d" % (topic, i),
                                          body=i))
        assert st == 200, (st, r)
        st, r, _ = post(tc.c, "pop", dict(topic="%s-%d" % (topic, i)))
        assert st == 200 and r["id"] == "%s-%d" % (topic, i), (st, r)
        st, r, _ = post(tc.c, "finish", dict(id="%s-%d" % (topic, i)))
        assert st == 200, (st, r)
        return time.monotonic() - t0
    res = parallel(one, n)
    errs = [r for r in res if not isinstance(r, float)]
    tc.assertEqual(errs, [], "parallel round trips after the outage failed")
    return max(res)


# The commands, each as (name, method, path, body, is_read).
def command_table(t, ids):
    j = lambda **kw: json.dumps(kw).encode()  # noqa: E731
    return [
        ("add", "POST", "/add", j(topic=t, id=t + "-new", body=1), False),
        ("add batch", "POST", "/add", j(jobs=[dict(topic=t, id=t + "-b1", body=1),
                                              dict(topic=t, id=t + "-b2", body=2)]), False),
        ("add delayed", "POST", "/", j(command="add", topic=t, id=t + "-d", body=1, delay=5), False),
        ("pop", "POST", "/pop", j(topic=t), False),
        ("pop count", "POST", "/pop", j(topic=t, count=5), False),
        ("pop long-poll", "POST", "/pop", j(topic=t, timeout=3), False),
        ("finish", "POST", "/finish", j(id=ids["ready"]), False),
        ("delete", "POST", "/delete", j(ids=[ids["delay"], ids["ready"]]), False),
        ("touch", "POST", "/touch", j(id=ids["reserved"]), False),
        ("release", "POST", "/release", j(id=ids["reserved"]), False),
        ("bury", "POST", "/bury", j(id=ids["reserved"]), False),
        ("kick", "POST", "/kick", j(topic=t), False),
        ("get", "GET", "/get?id=" + ids["ready"], None, True),
        ("get POST", "POST", "/get", j(id=ids["delay"]), True),
        ("stats", "GET", "/stats?topic=" + t, None, True),
        ("stats all", "POST", "/stats", b"", True),
        ("health", "GET", "/health", None, True),
        ("metrics", "GET", "/metrics", None, True),
    ]


def setup_jobs(tc, t):
    """One job in each state; returns their ids."""
    c = tc.c
    ids = {s: "%s-%s" % (t, s) for s in ("ready", "delay", "reserved", "buried")}
    tc.assertOk(*c.req("add", topic=t + "-r", id=ids["reserved"], body="r", ttr=3600))
    tc.assertOk(*c.req("pop", topic=t + "-r"))
    tc.assertOk(*c.req("add", topic=t + "-x", id=ids["buried"], body="x"))
    tc.assertOk(*c.req("pop", topic=t + "-x"))
    tc.assertOk(*c.req("bury", id=ids["buried"]))
    tc.assertOk(*c.req("add", topic=t, id=ids["ready"], body="a"))
    tc.assertOk(*c.req("add", topic=t, id=ids["delay"], body="d", delay=3600))
    return ids


@single_redis_only
class RedisStoppedTest(DeploymentTestCase):
    """Redis stopped (connection refused): 503 at once, nothing changed."""

    # threads: nginx keeps up to 2 x 16 idle connections, each holding a
    # thread, plus the parallel requests below (docs/DESIGN.md, limits)
    DEPLOYMENT_KW = dict(workers=2, threads=32, appendonly=True,
                      fcgi_flags=dict(redis_connect_timeout_ms=CONNECT_MS,
                                      redis_timeout_ms=TIMEOUT_MS))

    def test_stopped_redis(self):
        c = self.c
        t = unique("stop")
        ids = setup_jobs(self, t)
        pids = c.fcgi_pids()
        before = c.snapshot()
        c.stop_redis()
        worst = {}
        for rnd in range(3):
            for name, method, path, body, _ in command_table(t, ids):
                st, r, dt = timed(c, method, path, body)
                worst[name] = max(worst.get(name, 0), dt)
                if name == "metrics" and st == 200:
                    # /metrics is served from the workers' shared counters;
                    # its per-topic gauges need Redis
                    self.fail("/metrics answered 200 while Redis was down: %r" % (r,))
                self.assertError(st, r, 503, "unavailable", "%s (round %d)" % (name, rnd))
                self.assertLess(dt, CONNECT_MS / 1000.0 + MARGIN,
                                "%s took %.3f s with Redis stopped" % (name, dt))
                if name == "health":
                    self.assertEqual(r.get("redis"), "down")
        burst = parallel(lambda i: post(c, "get", dict(id=ids["ready"])), 24)
        slow = max(b[2] for b in burst)
        self.assertEqual(sorted({b[0] for b in burst}), [503], burst)
        print("Redis stopped, connect timeout %d ms: slowest answer per command (s): %s; "
              "24 parallel gets: all 503, slowest %.3f s" %
              (CONNECT_MS, {k: round(v, 3) for k, v in worst.items()}, slow))
        self.assertLess(slow, CONNECT_MS / 1000.0 + MARGIN)
        c.start_redis()
        back = wait_health(self)
        after = c.snapshot()
        self.assertEqual(after, before, "a request answered 503 changed Redis")
        self.assertEqual(c.fcgi_pids(), pids, "delayq-fcgi processes changed")
        # A thread whose last connect failed retries once its back-off (at
        # most 250 ms) has passed, or as soon as another thread reconnected.
        time.sleep(0.3 * SLOW)
        slowest = roundtrip_burst(self, 24, unique("after"))
        print("service back %.2f s after Redis started; 24 parallel round trips, slowest "
              "%.3f s; worker pids unchanged" % (back, slowest))
        self.assertLess(slowest, 5 * SLOW)
        # the timer resumed as well
        self.assertOk(*c.req("add", topic=t + "-due", id=t + "-due", body=1, delay=0.3))
        st, r = c.req("pop", topic=t + "-due", timeout=5)
        self.assertEqual(r.get("id"), t + "-due", r)


# --------------------------------------------------------------------------
# black hole
# --------------------------------------------------------------------------

class RedisProxy:
    """A TCP proxy on 127.0.0.1:port in front of the private Redis, with three
    modes: forward, blackhole (accepts, reads and discards, never answers) and
    deaf (a listener whose accept queue is full, so connects hang); and
    connections silenced one by one (silence_existing: what passes through
    them is dropped for good, with no EOF, while new ones forward)."""

    def __init__(self):
        self.port = free_port()
        self.target = None
        self.mode = "forward"
        self.sel = selectors.DefaultSelector()
        self.peer = {}
        self.lsock = None
        self.deaf = []
        self.silent = set()
        self.clients = set()
        self.ends = {"reset": 0, "closed": 0}  # how delayq's connections ended
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self._listen(128)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _listen(self, backlog):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(backlog)
        self.lsock = s
        if backlog:
            self.sel.register(s, selectors.EVENT_READ)
        return s

    def _drop(self, s):
        for x in (s, self.peer.pop(s, None)):
            if x is None:
                continue
            self.peer.pop(x, None)
            self.clients.discard(x)
            try:
                self.sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    def _loop(self):
        while not self.stop_ev.is_set():
            with self.lock:
                events = self.sel.select(0.02)
                for key, _ in events:
                    s = key.fileobj
                    if s is self.lsock:
                        try:
                            cl, _ = s.accept()
                        except OSError:
                            continue
                        if self.mode == "forward":
                            try:
                                up = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                            except OSError:
                                cl.close()
                                continue
                            self.peer[cl], self.peer[up] = up, cl
                            self.sel.register(up, selectors.EVENT_READ)
                        else:
                            self.peer[cl] = None
                        self.sel.register(cl, selectors.EVENT_READ)
                        self.clients.add(cl)
                        continue
                    try:
                        data = s.recv(65536)
                        end = "closed"
                    except OSError:
                        data, end = b"", "reset"
                    if not data:
                        if s in self.clients:
                            self.ends[end] += 1
                        self._drop(s)
                        continue
                    p = self.peer.get(s)
                    if self.mode == "forward" and p is not None and s not in self.silent:
                        try:
                            p.sendall(data)
                        except OSError:
                            self._drop(s)
                    # blackhole: swallowed

    def _close_all(self):
        self.silent.clear()
        for s in list(self.peer):
            if s in self.peer:
                self._drop(s)

    def silence_existing(self):
        """Every open connection goes silent both ways and stays open, as
        a connection cut off by a partition does; new ones still forward."""
        with self.lock:
            self.silent.update(self.peer)

    def blackhole(self):
        with self.lock:
            self.mode = "blackhole"

    def make_deaf(self):
        """Closes every connection and listens with a full accept queue."""
        with self.lock:
            self.mode = "deaf"
            self._close_all()
            self.sel.unregister(self.lsock)
            self.lsock.close()
            self._listen(0)
            # fill the accept queue (backlog 0 holds one connection)
            for _ in range(3):
                x = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                x.setblocking(False)
                try:
                    x.connect(("127.0.0.1", self.port))
                except (BlockingIOError, OSError):
                    pass
                self.deaf.append(x)
            time.sleep(0.2)

    def forward(self):
        with self.lock:
            self._close_all()
            for x in self.deaf:
                x.close()
            self.deaf = []
            if self.mode == "deaf":
                self.lsock.close()
                self._listen(128)
            self.mode = "forward"

    def close(self):
        self.stop_ev.set()
        self.thread.join(5)
        with self.lock:
            self._close_all()
            for x in self.deaf:
                x.close()
            try:
                self.lsock.close()
            except OSError:
                pass


class ProxiedDeployment(Deployment):
    """delayq-fcgi reaches Redis through a RedisProxy; the timers and this
    test's own RESP client go to Redis directly."""

    def __init__(self, proxy, **kw):
        self.proxy = proxy
        kw.setdefault("fcgi_flags", {})["redis_port"] = proxy.port
        super().__init__(**kw)

    def start_redis(self):
        super().start_redis()
        self.proxy.target = self.redis_port


@single_redis_only
class ProxiedTestCase(DeploymentTestCase):
    """delayq-fcgi reaches Redis through this class' RedisProxy."""

    @classmethod
    def setUpClass(cls):
        cls.proxy = RedisProxy()
        try:
            super().setUpClass()
        except BaseException:
            cls.proxy.close()
            raise

    @classmethod
    def make_deployment(cls):
        return ProxiedDeployment(cls.proxy, **{k: (dict(v) if isinstance(v, dict) else v)
                                               for k, v in cls.DEPLOYMENT_KW.items()})

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.proxy.close()


@single_redis_only
class BlackHoleTest(ProxiedTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=32,
                      fcgi_flags=dict(redis_connect_timeout_ms=CONNECT_MS,
                                      redis_timeout_ms=TIMEOUT_MS))

    def test_black_holed_redis(self):
        c = self.c
        t = unique("bh")
        ids = setup_jobs(self, t)
        # Most request threads get their Redis connection: while Redis holds
        # every client for a moment, each of many parallel reads keeps a
        # thread waiting on its own connection (reads are not grouped, and
        # long-polls hold no thread while they wait).
        c.redis("CLIENT", "PAUSE", str(TIMEOUT_MS * 6 // 10), "ALL")
        # Under valgrind on a busy machine a get can outlast the pause plus
        # the reply timeout; that thread simply starts without a connection.
        warm = parallel(lambda i: post(c, "get", dict(id=ids["ready"])), 96)
        warm_status = [w[0] if isinstance(w, tuple) else repr(w) for w in warm]
        self.assertTrue(set(warm_status) <= {200, 503, 504}, warm)
        self.assertGreater(warm_status.count(200), len(warm) // 2, warm_status)
        pids = c.fcgi_pids()
        before = c.snapshot()
        bound = (CONNECT_MS + TIMEOUT_MS) / 1000.0 + MARGIN

        ends_before = dict(self.proxy.ends)
        self.proxy.blackhole()
        seen = []
        written = []
        for rnd in range(2):
            for name, method, path, body, is_read in command_table(t, ids):
                st, r, dt = timed(c, method, path, body)
                seen.append((name, st, round(dt, 3)))
                if is_read:
                    self.assertError(st, r, 503, "unavailable", "%s (black hole)" % name)
                else:
                    self.assertIn(st, (503, 504), "%s: %s %r" % (name, st, r))
                    self.assertError(st, r, st, "unavailable" if st == 503 else "timeout", name)
                    if st == 504:
                        written.append(name)
                self.assertLess(dt, bound, "%s took %.3f s with Redis black-holed" % (name, dt))
        burst = parallel(lambda i: post(c, "add", dict(topic=t, id="%s-p%d" % (t, i), body=i)), 24)
        print("black hole, timeouts connect %d ms / reply %d ms: %s; 24 parallel adds: %s, "
              "slowest %.3f s" % (CONNECT_MS, TIMEOUT_MS, seen,
                                  sorted({b[0] for b in burst}), max(b[2] for b in burst)))
        self.assertLess(max(b[2] for b in burst), bound)
        self.assertTrue(set(b[0] for b in burst) <= {503, 504}, burst)
        # Which thread takes a request is the kernel's choice; among the
        # rounds and the burst at least one write lands on a thread that
        # still had its connection, sends, and cannot know the outcome.
        written += ["add (burst)" for b in burst if b[0] == 504]
        self.assertTrue(written, "no write answered 504 although its thread had a connection "
                                 "whose send went out: %s; warm-up %s" % (seen, warm_status))
        self.assertGreater(max(d for n, s, d in seen), TIMEOUT_MS / 1000.0 * 0.9,
                           "no request waited for the reply timeout: was the proxy in the way?")
        # A connection given up on is reset, which discards what the kernel
        # still holds for it: a write answered 504 cannot be retransmitted
        # into Redis after a partition heals.
        ends = {k: self.proxy.ends[k] - ends_before[k] for k in ends_before}
        print("connections delayq gave up on during the black hole: %s" % ends)
        self.assertGreater(ends["reset"], 0, ends)
        self.assertEqual(ends["closed"], 0, "closed with a FIN after their queued bytes: %s" % ends)

        # connect timeout: a listener that never completes the handshake
        self.proxy.make_deaf()
        time.sleep(0.5)  # let every thread's back-off (<= 250 ms) lapse
        deaf = []
        for name, method, path, body, is_read in command_table(t, ids)[:8]:
            st, r, dt = timed(c, method, path, body)
            deaf.append((name, st, round(dt, 3)))
            self.assertError(st, r, 503, "unavailable", "%s (no handshake)" % name)
            self.assertLess(dt, CONNECT_MS / 1000.0 + MARGIN,
                            "%s took %.3f s although connects time out after %d ms" %
                            (name, dt, CONNECT_MS))
        print("listener that never accepts: %s" % deaf)

        self.proxy.forward()
        back = wait_health(self)
        after = c.snapshot()
        self.assertEqual(after, before, "requests answered 503/504 by a black hole changed Redis")
        # the 504 writes went into the black hole: retrying them is safe
        st, r = c.req("add", topic=t, id=t + "-new", body=1)
        self.assertOk(st, r, "the add answered 504 never reached Redis: a retry answers 200")
        self.assertEqual(c.fcgi_pids(), pids, "delayq-fcgi processes changed")
        # A thread whose last connect failed retries once its back-off (at
        # most 250 ms) has passed, or as soon as another thread reconnected.
        time.sleep(0.3 * SLOW)
        slowest = roundtrip_burst(self, 24, unique("bhafter"))
        print("service back %.2f s after the proxy forwards again; 24 parallel round trips, "
              "slowest %.3f s; worker pids unchanged" % (back, slowest))
        self.assertLess(slowest, 5 * SLOW)



@single_redis_only
class SilentSubscriptionTest(ProxiedTestCase):
    """A subscription whose connection goes silent without an EOF (a
    partition) is noticed by its PING and made again: a long-poll parked
    on it still gets its job, although rechecks of parked long-polls are
    off, so only a ready message can wake it."""

    DEPLOYMENT_KW = dict(workers=1, threads=8,
                         fcgi_flags=dict(redis_connect_timeout_ms=CONNECT_MS,
                                         redis_timeout_ms=TIMEOUT_MS,
                                         longpoll_recheck_ms=600000))

    def test_silenced_subscription_is_made_again(self):
        c, t = self.c, unique("silent")
        result = {}
        wait_s = min(60, 8 * SLOW)
        # a PING after 1 s of silence, unanswered for redis_timeout_ms
        bound = (1.0 + TIMEOUT_MS / 1000.0 + 1.0) * SLOW

        def long_poll():
            result["answer"] = c.req("pop", conn=c.new_http(), topic=t, timeout=wait_s)
            result["at"] = time.monotonic()

        poller = threading.Thread(target=long_poll)
        poller.start()
        time.sleep(0.5 * SLOW)  # parked
        self.proxy.silence_existing()
        added = None
        deadline = time.monotonic() + 5 * SLOW
        while added is None and time.monotonic() < deadline:
            st, r = c.req("add", topic=t, id=t + "-1", body=1)
            if st == 200 or (st == 409 and r.get("code") == "conflict"):
                added = time.monotonic()
        self.assertIsNotNone(added, "no add got through new connections")
        poller.join(wait_s + 5 * SLOW)
        st, r = result["answer"]
        print("parked long-poll with its subscription silenced: %s %r, %.2f s after the add" %
              (st, r, result["at"] - added))
        self.assertLess(result["at"] - added, bound, "woken only by the long-poll's end")
        retries = 0
        while st == 504 and retries < 8:  # one per thread of the worker
            # Woken in time, but the pop ran on a thread whose own connection
            # was silenced too: the command never reached Redis, so a retry,
            # as PROTOCOL tells clients to make after a 504, gets the job.
            self.assertEqual(r.get("code"), "timeout", r)
            st, r = c.req("pop", topic=t, timeout=1)
            retries += 1
        self.assertEqual((st, r.get("id")), (200, t + "-1"), r)
        with open(c.fcgi_log()) as f:
            self.assertIn("did not answer a PING", f.read())
        self.assertOk(*c.req("finish", id=t + "-1"))


# --------------------------------------------------------------------------
# AUTH
# --------------------------------------------------------------------------

class AuthTestBase(DeploymentTestCase):
    AUTH = {}        # Redis' side: redis_auth=(user or None, password), allow_unhealthy
    DELAYQ = {}      # delayq flags (both binaries)
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    @classmethod
    def make_deployment(cls):
        return Deployment(**cls.DEPLOYMENT_KW, **cls.AUTH, **cls.DELAYQ)


class AuthWorksMixin:
    def test_all_commands_work(self):
        c = self.c
        t = unique("auth")
        self.assertOk(*c.req("add", topic=t, id=t + "-1", body={"a": 1}, delay=0.3, ttr=30))
        st, r = c.req("pop", topic=t, timeout=5)  # moved by the (authenticated) timer
        self.assertOk(st, r)
        self.assertEqual(r["id"], t + "-1")
        self.assertOk(*c.req("touch", id=t + "-1"))
        st, r = c.req("release", id=t + "-1")
        self.assertEqual((st, r.get("state")), (200, "ready"), r)
        self.assertOk(*c.req("pop", topic=t))
        self.assertOk(*c.req("bury", id=t + "-1"))
        st, r = c.req("kick", topic=t)
        self.assertEqual((st, r.get("kicked")), (200, 1), r)
        st, r = c.get("/get?id=" + t + "-1")
        self.assertEqual((st, r.get("state")), (200, "ready"), r)
        self.assertOk(*c.req("finish", id=t + "-1"))
        self.assertOk(*c.req("add", jobs=[dict(topic=t, id=t + "-2", body=2)]))
        self.assertOk(*c.req("delete", ids=[t + "-2"]))
        st, r = c.get("/stats?topic=" + t)
        self.assertOk(st, r)
        self.assertEqual(r["topics"][t]["finished"], 1)
        self.assertEqual(r["topics"][t]["deleted"], 1)
        st, r = c.get("/health")
        self.assertEqual((st, r), (200, self.deployment.health_answer()))
        st, h, body = c.request("GET", "/metrics")
        self.assertEqual(st, 200, body[:300])
        self.assertIn(b"delayq_jobs_added_total", body)
        # the Redis side really enforces authentication
        plain = Resp(c.redis_port)
        try:
            with self.assertRaises(RedisError) as e:
                plain("GET", "{dq}:buckets")
        finally:
            plain.close()
        print("unauthenticated RESP client: %s" % e.exception)
        self.assertEqual(c.redis("GET", "{dq}:buckets"), b"16")


@single_redis_only
class RequirepassTest(AuthWorksMixin, AuthTestBase):
    AUTH = dict(redis_auth=(None, "pw-0123456789"))
    DELAYQ = dict(redis_password="pw-0123456789")


@single_redis_only
class AclUserTest(AuthWorksMixin, AuthTestBase):
    AUTH = dict(redis_auth=("dq", "acl-pw-9876"))
    DELAYQ = dict(redis_username="dq", redis_password="acl-pw-9876")

    def test_default_user_is_off(self):
        r = Resp(self.c.redis_port, auth=(None, ""))
        try:
            with self.assertRaises(RedisError) as e:
                r("PING")
        finally:
            r.close()
        print("default user: %s" % e.exception)


class WrongPasswordMixin:
    CAUSE = "WRONGPASS"  # what Redis answers, named in answers and logs

    def test_wrong_password(self):
        """Wrong (or missing) credentials are not "Redis is unreachable": the
        cause is in every 503 and in /health, and logged once."""
        c = self.c
        t = unique("wp")
        for name, method, path, body, is_read in command_table(
                t, dict(ready=t + "-a", delay=t + "-b", reserved=t + "-c")):
            st, r, dt = timed(c, method, path, body)
            self.assertError(st, r, 503, "unavailable", "%s with a wrong Redis password" % name)
            self.assertIn("AUTH failed", r["error"], name)
            self.assertIn(self.CAUSE, r["error"], name)
            self.assertLess(dt, 2.0 * SLOW, name)
        st, r = c.get("/health")
        self.assertError(st, r, 503, "unavailable")
        self.assertIn(self.CAUSE, r["error"])
        self.assertEqual(r["redis"], "down")
        self.assertEqual(c.redis("KEYS", "*"), [], "something was written")
        deadline = time.monotonic() + 5 * SLOW
        want = [b"AUTH failed", self.CAUSE.encode()]
        while True:
            with open(c.path("fcgi.log"), "rb") as f:
                fl = f.read()
            with open(c.timer_logs[0], "rb") as f:
                tl = f.read()
            if all(w in fl for w in want) and all(w in tl for w in want):
                break
            self.assertLess(time.monotonic(), deadline,
                            "no AUTH failure in the logs:\n%s\n%s" % (fl[-1500:], tl[-1500:]))
            time.sleep(0.1)
        time.sleep(1.0)  # the timer retries meanwhile: the cause must not be logged again
        with open(c.path("fcgi.log"), "rb") as f:
            fl = f.read()
        with open(c.timer_logs[0], "rb") as f:
            tl = f.read()
        lines = [x for x in fl.splitlines() if self.CAUSE.encode() in x]
        tlines = [x for x in tl.splitlines() if self.CAUSE.encode() in x]
        print("fcgi log: %s\ntimer log: %s" % (lines[0].decode(), tlines[0].decode()))
        self.assertEqual(len(tlines), 1, "a state is logged once, not on every retry")
        self.assertLessEqual(len(lines), c.workers, "once per worker process")
        self.assertNotIn(self.DELAYQ.get("redis_password") or "\0", fl.decode() + tl.decode(),
                         "the password appears in a log")


@single_redis_only
class RequirepassWrongTest(WrongPasswordMixin, AuthTestBase):
    AUTH = dict(redis_auth=(None, "right-password-1"), allow_unhealthy=True)
    DELAYQ = dict(redis_password="wrong-password-1")


@single_redis_only
class AclUserWrongTest(WrongPasswordMixin, AuthTestBase):
    AUTH = dict(redis_auth=("dq", "right-password-2"), allow_unhealthy=True)
    DELAYQ = dict(redis_username="dq", redis_password="wrong-password-2")


@single_redis_only
class MissingPasswordTest(WrongPasswordMixin, AuthTestBase):
    CAUSE = "NOAUTH"
    AUTH = dict(redis_auth=(None, "right-password-3"), allow_unhealthy=True)
    DELAYQ = {}


if __name__ == "__main__":
    main()

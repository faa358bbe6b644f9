"""delayq-fcgi process model: dead workers are replaced, SIGTERM drains
in-flight long-polls and exits 0, Redis outages give quick 503s."""

import json
import os
import signal
import sys
import threading
import time

from dqtest import SLOW, DeploymentTestCase, main, single_redis_only, unique


class WorkersTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=3, threads=8)

    def roundtrips(self, n=20):
        t = unique("rt")
        for i in range(n):
            st, r = self.c.req("add", topic=t, body=i)
            self.assertOk(st, r, "add %d" % i)
            st, p = self.c.req("pop", topic=t)
            self.assertOk(st, p)
            self.assertEqual(p["id"], r["id"])
            self.assertOk(*self.c.req("finish", id=r["id"]))

    def test_a_worker_kill9_replaced(self):
        master, workers = self.c.fcgi_pids()
        print("master %d, workers %s" % (master, workers))
        self.assertEqual(len(workers), 3, "configured 3 workers")
        self.roundtrips(5)
        victim = workers[1]
        os.kill(victim, signal.SIGKILL)
        t0 = time.monotonic()
        while True:
            _, now = self.c.fcgi_pids()
            if len(now) == 3 and victim not in now:
                break
            self.assertLess(time.monotonic() - t0, 5 * SLOW,
                            "workers after kill -9 of %d: %s" % (victim, now))
            time.sleep(0.05)
        print("worker %d replaced after %.0f ms: %s" % (victim, (time.monotonic() - t0) * 1000,
                                                      now))
        self.assertEqual(self.c.fcgi_proc.poll(), None, "master died")
        self.roundtrips(30)
        # kill them all
        for w in now:
            os.kill(w, signal.SIGKILL)
        t0 = time.monotonic()
        while True:
            _, again = self.c.fcgi_pids()
            if len(again) == 3 and not set(again) & set(now):
                break
            self.assertLess(time.monotonic() - t0, 5 * SLOW, "after killing all: %s" % again)
            time.sleep(0.05)
        self.roundtrips(10)

    def test_b_redis_stop_start(self):
        self.c.skip_unless_single_redis(self)
        t = unique("rs")
        self.roundtrips(3)
        self.c.stop_redis()
        figures = []
        for cmd, fields in (("add", dict(topic=t, body=1)), ("pop", dict(topic=t)),
                            ("stats", dict(topic=t)), ("get", dict(id="x")),
                            ("finish", dict(id="x")), ("health", {})) * 2:
            t0 = time.monotonic()
            st, r = self.c.req(cmd, **fields)
            dt = time.monotonic() - t0
            figures.append("%s %d %.0fms" % (cmd, st, dt * 1000))
            self.assertError(st, r, 503, "unavailable", cmd)
            self.assertLess(dt, 2.5 * SLOW, cmd)
        st, r = self.c.get("/health")
        self.assertEqual(st, 503)
        print("while Redis is down: " + ", ".join(figures))
        self.c.start_redis()
        t0 = time.monotonic()
        while True:
            st, r = self.c.req("add", topic=t, body="back")
            if st == 200:
                break
            self.assertEqual(st, 503, r)
            self.assertLess(time.monotonic() - t0, 10 * SLOW, "no recovery: %r" % (r,))
            time.sleep(0.05)
        print("first successful add %.0f ms after Redis restart" % ((time.monotonic() - t0) * 1000))
        # every worker reconnects: enough requests to hit them all
        for _ in range(3):
            self.roundtrips(10)
        st, r = self.c.get("/health")
        self.assertEqual((st, r), (200, self.c.health_answer()))
        _, workers = self.c.fcgi_pids()
        self.assertEqual(len(workers), 3)


class WorkerCrashUnderLoadTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8)

    _run = None

    def run_load(self):
        """Once per class: 4 producers add for ~1.7 s while a worker is
        killed with SIGKILL every 0.3 s. Returns {status: [ids]}."""
        if type(self)._run is not None:
            return type(self)._run
        t = unique("crash")
        answers = {}
        stop = threading.Event()

        def producer(k):
            conn = self.c.new_http()
            i = 0
            while not stop.is_set():
                jid = "%s-%d-%d" % (t, k, i)
                i += 1
                try:
                    st, r = self.c.req("add", conn=conn, topic=t, id=jid, body=jid)
                except Exception as e:  # noqa: BLE001 - connection cut: outcome unknown
                    st, r = None, repr(e)
                    conn.close()
                answers[jid] = (st, r)
            conn.close()

        ths = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
        for th in ths:
            th.start()
        kills = 0
        for _ in range(4):
            time.sleep(0.3)
            _, workers = self.c.fcgi_pids()
            if workers:
                os.kill(workers[0], signal.SIGKILL)
                kills += 1
        time.sleep(0.5)
        stop.set()
        for th in ths:
            th.join(30)
        t0 = time.monotonic()
        while len(self.c.fcgi_pids()[1]) != 2:  # the pool is whole again
            self.assertLess(time.monotonic() - t0, 5 * SLOW)
            time.sleep(0.05)
        by_status = {}
        for jid, (st, r) in answers.items():
            by_status.setdefault(st, []).append(jid)
        print("adds during %d worker kills: %s" %
              (kills, {k: len(v) for k, v in by_status.items()}))
        type(self)._run = (t, answers, by_status)
        return type(self)._run

    def test_acknowledged_adds_survive_worker_kills(self):
        """Every add answered 200 while workers were being killed is stored."""
        t, answers, by_status = self.run_load()
        # Enough adds to mean something (valgrind makes each one ~20x slower).
        self.assertGreater(len(by_status.get(200, [])), 100 if SLOW == 1 else 10)
        lost = []
        for jid in by_status.get(200, []):
            st, r = self.c.req("get", id=jid)
            if st != 200 or r.get("value") != jid:
                lost.append((jid, st))
        self.assertEqual(lost, [], "acknowledged adds lost")
        # failures are JSON protocol errors
        for st, jids in by_status.items():
            if st in (200, None):
                continue
            for jid in jids:
                self.assertIsInstance(answers[jid][1], dict, "non-JSON error %r" % (answers[jid],))
                self.assertIn(answers[jid][1].get("code"), ("unavailable", "timeout"))

    def test_failed_adds_wrote_nothing(self):
        """A request that fails (other than 504 timeout) changes nothing: an
        add cut off by a worker's death must not be answered 503 if stored."""
        t, answers, by_status = self.run_load()
        written_on_failure = []
        for st, jids in by_status.items():
            if st in (200, 504, None):
                continue
            for jid in jids:
                if self.c.req("get", id=jid)[0] == 200:
                    written_on_failure.append((jid, st, answers[jid][1].get("error")))
        print("failed adds that were stored anyway: %s" % written_on_failure)
        self.assertEqual(written_on_failure, [],
                         "a failed (non-504) add was stored anyway")


@single_redis_only
class PersistenceTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8, appendonly=True)

    def test_jobs_survive_redis_restart(self):
        t = unique("aof")
        self.assertOk(*self.c.req("add", topic=t, id=t + "-ready", body={"r": 1}))
        self.assertOk(*self.c.req("add", topic=t, id=t + "-delay", body="d", delay=1.5))
        self.assertOk(*self.c.req("add", topic=t, id=t + "-res", body="x", ttr=1.5))
        self.assertOk(*self.c.req("add", topic=t, id=t + "-res2", body="y", ttr=1.5))
        st, r = self.c.req("pop", topic=t, count=3)
        self.assertEqual([j["id"] for j in r["jobs"]], [t + "-ready", t + "-res", t + "-res2"])
        self.assertOk(*self.c.req("release", id=t + "-ready"))
        t_stop = time.monotonic()
        self.c.stop_redis()
        self.c.start_redis()
        t0 = time.monotonic()
        while self.c.get("/health")[0] != 200:
            self.assertLess(time.monotonic() - t0, 10 * SLOW)
            time.sleep(0.05)
        st, g = self.c.req("get", id=t + "-delay")
        self.assertEqual(g["state"], "delay")
        st, g = self.c.req("get", id=t + "-res")
        self.assertEqual(g["state"], "reserved")
        st, r = self.c.req("pop", topic=t)
        self.assertEqual((r["id"], r["value"], r["attempts"]), (t + "-ready", {"r": 1}, 2))
        self.assertOk(*self.c.req("finish", id=t + "-ready"))
        self.assertOk(*self.c.req("finish", id=t + "-res2"))
        # the delayed job and the TTR redelivery still happen after the restart
        got = {}
        while len(got) < 2 and time.monotonic() - t_stop < 6 * SLOW:
            st, r = self.c.req("pop", topic=t, timeout=1)
            if r.get("id"):
                got[r["id"]] = (r["attempts"], time.monotonic() - t_stop)
                self.assertOk(*self.c.req("finish", id=r["id"]))
        print("after a Redis restart with AOF: %s" % got)
        self.assertEqual(sorted(got), [t + "-delay", t + "-res"])
        self.assertEqual(got[t + "-res"][0], 2)
        st, s = self.c.req("stats", topic=t)
        s = s["topics"][t]
        self.assertEqual((s["ready"], s["reserved"], s["delay"], s["finished"]), (0, 0, 0, 4))


class MasterSigtermTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8)

    def test_sigterm_drains_long_poll(self):
        t = unique("drain")
        out = {}

        def waiter():
            conn = self.c.new_http()
            t0 = time.monotonic()
            try:
                out["res"] = self.c.req("pop", conn=conn, topic=t, timeout=10)
            except Exception as e:  # noqa: BLE001
                out["res"] = (None, repr(e))
            out["dt"] = time.monotonic() - t0
            conn.close()

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.7)
        self.assertNotIn("res", out)
        master, workers = self.c.fcgi_pids()
        t0 = time.monotonic()
        os.kill(master, signal.SIGTERM)
        th.join(15 * SLOW)
        self.assertFalse(th.is_alive(), "long-poll never answered")
        st, r = out["res"]
        print("after SIGTERM the long-poll was answered %.2f s later (%.2f s after it started): "
              "%s %r" % (time.monotonic() - t0, out["dt"], st, r))
        self.assertEqual(st, 200, r)
        self.assertEqual(r, {"success": True, "id": None, "value": None})
        rc = self.c.fcgi_proc.wait(20 * SLOW)
        dt = time.monotonic() - t0
        print("master exited with %d %.2f s after SIGTERM" % (rc, dt))
        self.assertEqual(rc, 0)
        self.c.exit_codes["delayq-fcgi"] = rc
        # nginx without a backend: its 502 reaches the client as JSON 503
        st, h, data = self.c.request("GET", "/health")
        print("with delayq-fcgi gone: %s %r" % (st, data[:200]))
        self.assertError(st, json.loads(data), 503, "unavailable")
        st, r = self.c.req("add", topic=t, body=1)
        self.assertError(st, r, 503, "unavailable")
        for w in workers:
            self.assertFalse(os.path.exists("/proc/%d" % w) and
                             open("/proc/%d/stat" % w).read().rsplit(")", 1)[1].split()[0] != "Z",
                             "worker %d still running" % w)


if __name__ == "__main__":
    main()

"""Durability across Redis restarts (docs/OPERATIONS.md, "what survives what").

With AOF `appendfsync everysec` and with `always`: several threads add jobs
(and a consumer pops and finishes some) while redis-server is killed with -9
in the middle; Redis is started again from the same dir. Then:
  - every add answered 200 is stored, and every finish answered 200 stays
    finished (the job is not back). With `always` that holds for every
    one: Redis write()s the AOF before it replies, and the page cache
    survives a process crash. With `everysec` it holds for all but what
    Redis answered in the last POSTPONE_S before a kill -9: while a
    background fsync is still running (a busy disk), Redis holds its AOF
    write back for up to 2 s and keeps answering (OPERATIONS.md, "what
    survives what"). So the everysec load runs well past that window, and
    a loss from before it fails the test;
  - every add answered 503 wrote nothing; adds answered 504 may or may not
    be stored (counted);
  - no job is in two states or two buckets, and the stats gauges equal the
    job hashes by state (tests/dqtest/invariants.py).
The same after a clean SHUTDOWN. The figures are printed.
"""

import os
import sys
import threading
import time

from dqtest import (SLOW, Deployment, DeploymentTestCase, Resp, invariants, job_keys, main,
                    single_redis_only, unique)


# Redis postpones an everysec AOF write while the last fsync runs, until
# its clock's second has moved on twice: up to about 3 s of answers.
POSTPONE_S = 3.0
# A break with fewer acknowledged adds before it proves little.
MIN_ACKED = 200


def first_ok_at(attempts):
    """When the first of a job's attempts, (status, time, ...) each, was
    answered 200."""
    return min(a[1] for a in attempts if a[0] == 200)


class DurabilityBase(DeploymentTestCase):
    FSYNC = "everysec"
    DEPLOYMENT_KW = dict(workers=2, threads=32)
    PRODUCERS = 6

    @classmethod
    def make_deployment(cls):
        return Deployment(appendonly=True, appendfsync=cls.FSYNC, **cls.DEPLOYMENT_KW)

    def load_and_break(self, how):
        """Adds from PRODUCERS threads and pops/finishes from one consumer;
        breaks Redis (`how`: kill9 or shutdown) ~1 s in; stops the load; starts
        Redis again. Returns the ledger."""
        c = self.c
        t = unique("dur")
        stop = threading.Event()
        broken = threading.Event()
        lock = threading.Lock()
        adds = {}      # id -> list of (status, t_recv)
        finishes = {}  # id -> statuses of its finish attempts
        pops = []      # ids delivered

        def producer(p):
            conn = c.new_http()
            n = 0
            while not stop.is_set():
                jid = "%s-%d-%d" % (t, p, n)
                n += 1
                delay = (0, 0, 0, 0.5, 3600)[n % 5]
                fields = dict(topic=t, id=jid, body={"n": n}, delay=delay, ttr=60)
                try:
                    st, r = c.req("add", conn=conn, **fields)
                except Exception as e:  # noqa: BLE001  transport error: outcome unknown
                    st, r = None, repr(e)
                    conn.close()
                with lock:
                    adds.setdefault(jid, []).append((st, time.monotonic(), broken.is_set()))
                if st != 200:
                    time.sleep(0.02)
            conn.close()

        def consumer():
            conn = c.new_http()
            while not stop.is_set():
                try:
                    st, r = c.req("pop", conn=conn, topic=t, count=5)
                except Exception:  # noqa: BLE001
                    conn.close()
                    continue
                if st != 200:
                    time.sleep(0.02)
                    continue
                for j in r["jobs"]:
                    with lock:
                        pops.append(j["id"])
                    if j["id"].endswith(("0", "2", "4", "6")):
                        try:
                            st2, r2 = c.req("finish", conn=conn, id=j["id"])
                        except Exception:  # noqa: BLE001
                            st2 = None
                            conn.close()
                        with lock:
                            finishes.setdefault(j["id"], []).append((st2, time.monotonic()))
            conn.close()

        ths = [threading.Thread(target=producer, args=(p,)) for p in range(self.PRODUCERS)]
        ths.append(threading.Thread(target=consumer))
        for th in ths:
            th.start()
        # Twice the window a break may undo, so losses from before it show,
        # and enough acknowledged adds to mean something (a loaded machine
        # makes them slowly).
        time.sleep(max(1.2, 2 * self.undo_window(how)) * SLOW)
        deadline = time.monotonic() + 20 * SLOW
        while time.monotonic() < deadline:
            with lock:
                acked = sum(1 for a in adds.values() if any(st == 200 for st, _, _ in a))
            if acked > MIN_ACKED:
                break
            time.sleep(0.1)
        t_break = time.monotonic()
        if how == "kill9":
            c.redis_server.kill9()
        else:
            c.redis_server.shutdown()
        broken.set()
        time.sleep(0.5)
        stop.set()
        for th in ths:
            th.join(30)
        down_for = time.monotonic() - t_break
        c.start_redis()
        t0 = time.monotonic()
        while c.get("/health")[0] != 200:
            self.assertLess(time.monotonic() - t0, 10 * SLOW, "health did not come back")
            time.sleep(0.05)
        return t, adds, finishes, pops, down_for, t_break

    def undo_window(self, how):
        """Seconds of answers before the break that it may undo: POSTPONE_S
        for a kill -9 with everysec (see the module's text), else none."""
        return POSTPONE_S if self.FSYNC == "everysec" and how == "kill9" else 0

    def check(self, how):
        c = self.c
        t, adds, finishes, pops, down_for, t_break = self.load_and_break(how)
        acked = [j for j, a in adds.items() if any(st == 200 for st, _, _ in a)]
        unknown = [j for j, a in adds.items() if j not in acked and
                   any(st not in (200, 503) for st, _, _ in a)]
        refused = [j for j, a in adds.items() if all(st == 503 for st, _, _ in a)]
        present = {}
        for jid in list(adds):
            present[jid] = job_keys.read(c.redis, c.tag(c.shard_of(jid)), jid).get("s")
        # gone legitimately: a finish answered 200, or one with an unknown outcome
        lost_all = [j for j in acked if present[j] is None and
                    not {st for st, _ in finishes.get(j, [])} - {503}]
        window = self.undo_window(how)

        def undoable(t_ack):
            return window > 0 and t_ack >= t_break - window

        lost = [j for j in lost_all if not undoable(first_ok_at(adds[j]))]
        finished_ok = [j for j, fs in finishes.items() if any(st == 200 for st, _ in fs)]
        back_all = [j for j in finished_ok if present[j] is not None]
        resurrected = [j for j in back_all if not undoable(first_ok_at(finishes[j]))]
        written_on_503 = [j for j in refused if present[j] is not None]
        unknown_stored = [j for j in unknown if present[j] is not None]
        states = {}
        for j in acked:
            s = present[j]
            k = s or "gone"
            states[k] = states.get(k, 0) + 1
        r = Resp(c.redis_port, timeout=30)
        try:
            inv = invariants.check(r)
        finally:
            r.close()
        print("AOF appendfsync %s, %s of redis-server (down %.2f s): %d adds answered 200 "
              "before it, %d stored after the restart, %d lost (%d beyond what a break may undo, "
              "%.0f s); by state %s; %d finishes answered 200, %d came back (%d beyond); %d adds with an unknown outcome (%d stored); %d "
              "answered 503 (%d stored); %d deliveries; invariants: %d jobs, %d problems" %
              (self.FSYNC, how, down_for, len(acked), len(acked) - len(lost_all), len(lost_all),
               len(lost), window, states, len(finished_ok), len(back_all), len(resurrected),
               len(unknown), len(unknown_stored), len(refused), len(written_on_503),
               len(pops), inv["jobs"], inv["nproblems"]))
        self.assertGreater(len(acked), MIN_ACKED, "too little load to mean anything")
        self.assertTrue(adds and any(a[-1][2] for a in adds.values()),
                        "no add was attempted after the break")
        self.assertEqual(lost, [], "acknowledged adds lost by a %s of redis-server" % how)
        self.assertEqual(resurrected, [], "acknowledged finishes undone by a %s" % how)
        self.assertEqual(written_on_503, [], "adds answered 503 were stored")
        self.assertEqual(inv["problems"], [], "a job in two states/buckets, or stats off")
        # service works on the restarted Redis
        jid = unique("after")
        self.assertOk(*c.req("add", topic=jid, id=jid, body=1))
        st, r = c.req("pop", topic=jid)
        self.assertEqual(r.get("id"), jid)
        self.assertOk(*c.req("finish", id=jid))

    def test_kill9(self):
        self.check("kill9")

    def test_shutdown(self):
        self.check("shutdown")


@single_redis_only
class EverysecTest(DurabilityBase):
    FSYNC = "everysec"


@single_redis_only
class AlwaysTest(DurabilityBase):
    FSYNC = "always"


del DurabilityBase

if __name__ == "__main__":
    main()

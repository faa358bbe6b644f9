"""Concurrency: many consumers never share a job and lose none; long-polling
consumers do not starve producers."""

import os
import statistics
import sys
import threading
import time

from dqtest import DeploymentTestCase, SLOW, main, run_threads, unique
from dqtest.resp import Resp, raw_command


class ConsumersTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=16)

    def test_16_consumers_2000_jobs(self):
        t = unique("many")
        all_ids = ["%s-%04d" % (t, i) for i in range(2000)]
        t0 = time.monotonic()
        for b in range(0, 2000, 100):
            st, r = self.c.req("add", jobs=[{"topic": t, "id": j, "body": {"n": j}}
                                            for j in all_ids[b:b + 100]])
            self.assertOk(st, r)
            self.assertTrue(all(x["success"] for x in r["results"]), r)
        t_add = time.monotonic() - t0
        st, s = self.c.req("stats", topic=t)
        self.assertEqual(s["topics"][t]["ready"], 2000)

        got = [[] for _ in range(16)]
        errors = []

        def consumer(k):
            conn = self.c.new_http()
            try:
                while True:
                    st, r = self.c.req("pop", conn=conn, topic=t)
                    if st != 200 or not r.get("success"):
                        errors.append(("pop", st, r))
                        return
                    if r["id"] is None:
                        return
                    if r["value"] != {"n": r["id"]}:
                        errors.append(("value", r))
                    got[k].append(r["id"])
                    st, f = self.c.req("finish", conn=conn, id=r["id"])
                    if st != 200:
                        errors.append(("finish", r["id"], st, f))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(("exception", repr(e)))
            finally:
                conn.close()

        t0 = time.monotonic()
        ths = [threading.Thread(target=consumer, args=(k,)) for k in range(16)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120)
        dt = time.monotonic() - t0
        print("added 2000 jobs in %.2f s; 16 consumers popped+finished them in %.2f s "
              "(%.0f jobs/s); per consumer: %s" % (t_add, dt, 2000 / dt,
                                                  sorted(len(g) for g in got)))
        self.assertEqual(errors, [])
        flat = [j for g in got for j in g]
        self.assertEqual(len(flat), len(set(flat)), "some job was delivered twice")
        self.assertEqual(set(flat), set(all_ids), "some job was lost")
        st, s = self.c.req("stats", topic=t)
        s = s["topics"][t]
        self.assertEqual((s["ready"], s["reserved"], s["delay"], s["buried"], s["finished"]),
                         (0, 0, 0, 0, 2000))
        left = [k for k in self.c.redis("KEYS", "*%s*" % t) if b":s:" not in k]  # stats stay
        self.assertEqual(left, [], "keys left behind by finished jobs")

    def test_concurrent_batch_pops(self):
        t = unique("cnt")
        ids = ["%s-%d" % (t, i) for i in range(500)]
        for b in range(0, 500, 100):
            self.assertOk(*self.c.req("add", jobs=[{"topic": t, "id": j, "body": 1}
                                                   for j in ids[b:b + 100]]))
        got = []
        lock = threading.Lock()

        def consumer():
            conn = self.c.new_http()
            while True:
                st, r = self.c.req("pop", conn=conn, topic=t, count=7)
                if st != 200 or not r["jobs"]:
                    break
                mine = [j["id"] for j in r["jobs"]]
                with lock:
                    got.extend(mine)
                self.c.req("finish", conn=conn, ids=mine)
            conn.close()

        run_threads(consumer, 8, 60)
        self.assertEqual(len(got), len(set(got)))
        self.assertEqual(set(got), set(ids))


class RedeliveryRaceTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=16)

    def test_never_two_consumers_within_ttr(self):
        """8 consumers, ttr 0.5 s; the first delivery of every third job is
        abandoned, so TTR redeliveries race with pops and finishes. Every
        job must be finished exactly once, and no two deliveries of a job
        may overlap within one TTR window."""
        t = unique("race")
        ttr = 0.5
        ids = ["%s-%03d" % (t, i) for i in range(300)]
        for b in range(0, 300, 100):
            self.assertOk(*self.c.req("add", jobs=[{"topic": t, "id": j, "body": j, "ttr": ttr}
                                                   for j in ids[b:b + 100]]))
        log = []  # (id, attempts, request start, response time)
        finished = []
        errors = []
        lock = threading.Lock()
        stop = time.monotonic() + 15 * SLOW

        def consumer():
            conn = self.c.new_http()
            try:
                while time.monotonic() < stop:
                    with lock:
                        if len(finished) >= len(ids):
                            return
                    s0 = time.monotonic()
                    st, r = self.c.req("pop", conn=conn, topic=t, timeout=0.2)
                    s1 = time.monotonic()
                    if st != 200:
                        errors.append((st, r))
                        continue
                    if r["id"] is None:
                        continue
                    with lock:
                        log.append((r["id"], r["attempts"], s0, s1))
                    abandon = r["attempts"] == 1 and int(r["id"].rsplit("-", 1)[1]) % 3 == 0
                    if not abandon:
                        st, f = self.c.req("finish", conn=conn, id=r["id"])
                        if st == 200:
                            with lock:
                                finished.append(r["id"])
                        else:
                            errors.append(("finish", r["id"], st, f))
            finally:
                conn.close()

        run_threads(consumer, 8, 60)
        self.assertEqual(errors, [])
        self.assertEqual(sorted(finished), sorted(ids), "each job finished exactly once")
        by_id = {}
        for jid, att, s0, s1 in log:
            by_id.setdefault(jid, []).append((s0, s1, att))
        overlaps = []
        for jid, ds in by_id.items():
            ds.sort()
            self.assertEqual([d[2] for d in ds], list(range(1, len(ds) + 1)), jid)
            for (a0, a1, _), (b0, b1, _) in zip(ds, ds[1:]):
                # the later delivery was answered at b1; the earlier one was
                # made no earlier than a0: the gap must cover the TTR
                if b1 - a0 < ttr * 0.95:
                    overlaps.append((jid, round(b1 - a0, 3)))
        redelivered = sum(1 for ds in by_id.values() if len(ds) > 1)
        print("race: %d deliveries of %d jobs, %d redelivered after TTR" %
              (len(log), len(ids), redelivered))
        self.assertEqual(overlaps, [], "delivered twice within one TTR window")
        self.assertEqual(redelivered, len([j for j in ids if int(j.rsplit("-", 1)[1]) % 3 == 0]))
        st, s = self.c.req("stats", topic=t)
        s = s["topics"][t]
        self.assertEqual((s["ready"], s["reserved"], s["delay"], s["finished"], s["redelivered"]),
                         (0, 0, 0, 300, redelivered))


class StarvationTest(DeploymentTestCase):
    # The herd test counts Redis calls, so nothing else may make them at
    # moments it does not control: parked long-polls try again only when a
    # message wakes them (not once a second), and no timer runs (its bucket
    # locks call ZCARD; the jobs here are added ready). CI met both.
    DEPLOYMENT_KW = dict(workers=2, threads=64, n_timers=0, longpoll_recheck_ms=600000)

    def add_pop_latencies(self, n=200):
        t = unique("busy")
        conn = self.c.new_http()
        lat = []
        for i in range(n):
            t0 = time.monotonic()
            st, r = self.c.req("add", conn=conn, topic=t, body=i)
            st2, p = self.c.req("pop", conn=conn, topic=t)
            lat.append(time.monotonic() - t0)
            self.assertOk(st, r)
            self.assertOk(st2, p)
            self.assertEqual(p["id"], r["id"])
            self.c.req("finish", conn=conn, id=r["id"])
        conn.close()
        return statistics.median(lat), max(lat)

    def test_long_polls_do_not_starve_producers(self):
        idle = unique("idle")
        self.add_pop_latencies(20)  # warm up
        base_med, base_max = self.add_pop_latencies()
        results = [None] * 50
        started = threading.Barrier(51)

        def waiter(k):
            conn = self.c.new_http()
            started.wait()
            t0 = time.monotonic()
            try:
                results[k] = self.c.req("pop", conn=conn, topic=idle, timeout=30) + \
                    (time.monotonic() - t0,)
            except Exception as e:  # noqa: BLE001
                results[k] = (None, repr(e), time.monotonic() - t0)
            conn.close()

        ths = [threading.Thread(target=waiter, args=(k,)) for k in range(50)]
        for th in ths:
            th.start()
        started.wait()
        time.sleep(1.0)  # let all 50 long-polls reach the workers
        self.assertEqual([r for r in results if r is not None], [],
                         "long-polls answered before any job existed")
        with_med, with_max = self.add_pop_latencies()
        print("add+pop median latency: %.2f ms without waiters, %.2f ms with 50 long-polls "
              "(max %.1f / %.1f ms)" % (base_med * 1000, with_med * 1000, base_max * 1000,
                                       with_max * 1000))
        self.assertEqual([r for r in results if r is not None], [],
                         "long-polls answered early")
        self.assertLess(with_med, 3 * base_med + 0.005)
        # now feed the waiters: each gets exactly one job
        ids = ["%s-%d" % (idle, i) for i in range(50)]
        t0 = time.monotonic()
        st, r = self.c.req("add", jobs=[{"topic": idle, "id": j, "body": j} for j in ids])
        self.assertOk(st, r)
        for th in ths:
            th.join(15 * SLOW)
        dt = time.monotonic() - t0
        self.assertFalse(any(th.is_alive() for th in ths), "some waiter never returned")
        got = []
        for res in results:
            st, r, _ = res
            self.assertEqual(st, 200, r)
            self.assertIsNotNone(r["id"], "a waiter got nothing: %r" % (r,))
            self.assertEqual(r["value"], r["id"])
            got.append(r["id"])
        print("50 waiters all served %.0f ms after the batch add" % (dt * 1000))
        self.assertEqual(sorted(got), sorted(ids))
        st, s = self.c.req("stats", topic=idle)
        self.assertEqual(s["topics"][idle]["reserved"], 50)
        self.assertEqual(s["topics"][idle]["ready"], 0)

    def calls(self, command):
        """How often Redis ran command, summed over its masters."""
        n = 0
        for stats in self.c.redis_all("INFO", "commandstats"):
            for line in stats.decode().splitlines():
                if line.startswith("cmdstat_%s:" % command):
                    n += int(line.split("calls=")[1].split(",")[0])
        return n

    def pop_calls(self):
        """ZPOPMINs Redis has run: each pop function call makes one per
        topic, whether or not it finds a job, and nothing else here uses
        ZPOPMIN."""
        return self.calls("zpopmin")

    def empty_pops(self):
        """Calls an empty pop makes: one pop function call with one shard;
        with several, a count of every shard's ready jobs (ZCARD, one per
        shard and topic: with no timer, nothing else here uses ZCARD)."""
        return self.pop_calls() if self.c.shards == 1 else self.calls("zcard") // self.c.shards

    def test_ready_job_wakes_one_pop_per_worker(self):
        """One job made ready wakes one waiting pop, whichever worker process
        it waits in: not one per waiting request, nor one per process (the
        processes share a message's wake-ups)."""
        t = unique("herd")
        waiters = 16
        timeout = 4 * SLOW
        results = []

        def waiter():
            conn = self.c.new_http()
            try:
                results.append(self.c.req("pop", conn=conn, topic=t, timeout=timeout))
            except Exception as e:  # noqa: BLE001 (after a failed assertion, the
                results.append((None, {"error": repr(e)}))  # deployment is gone)
            conn.close()

        before = self.empty_pops()
        ths = [threading.Thread(target=waiter) for _ in range(waiters)]
        for th in ths:
            th.start()
        # Every waiter has made its first (empty) pop, and parked, once the
        # pop calls stop growing (pops of one worker may share a call: group
        # commit).
        limit = time.monotonic() + timeout / 2
        last, still_since = -1, time.monotonic()
        while time.monotonic() < limit:
            n = self.empty_pops() - before
            if n != last:
                last, still_since = n, time.monotonic()
            elif n > 0 and time.monotonic() - still_since > 0.2:
                break
            time.sleep(0.01)
        self.assertGreater(last, 0, "waiters did not start in time")
        self.assertLessEqual(last, waiters, "more empty pops than waiters")
        before = self.pop_calls()
        st, r = self.c.req("add", topic=t, id=t + "-1", body=1)
        self.assertOk(st, r)
        limit = time.monotonic() + timeout / 2
        while not results and time.monotonic() < limit:
            time.sleep(0.005)
        time.sleep(0.1)  # let the other woken pops finish
        pops = self.pop_calls() - before
        answered = list(results)
        for th in ths:
            th.join(timeout + 10 * SLOW)
        workers = self.DEPLOYMENT_KW["workers"]
        print("one ready job, %d waiters, %d workers: %d pop script calls" %
              (waiters, workers, pops))
        self.assertEqual(len(answered), 1, "expected exactly one waiter answered: %r" % answered)
        self.assertEqual(answered[0][1]["id"], t + "-1")
        self.assertEqual(pops, 1, "pop calls for one ready job")
        self.assertEqual(sum(1 for st, r in results if r.get("id")), 1)



class GroupCommitTest(DeploymentTestCase):
    """Single-job requests that arrive while a call of their kind is on its
    way to Redis go together in the next call (group commit), and each
    request still gets its own answer."""
    # Redis is paused for a moment while the requests arrive: the first call
    # waits out the pause, which must not count as Redis not answering
    # (under valgrind the pause is long).
    DEPLOYMENT_KW = dict(workers=1, threads=16, redis_timeout_ms=30000)

    def redis_ports(self):
        c = self.c
        if c.redis_mode == "cluster":
            return [m.port for m in c.redis_server.masters()]
        if c.redis_mode == "sentinel":
            return [c.redis_server.primary_port()]
        return [c.redis_port]

    def calls_while_paused(self, function, requests):
        """Runs the requests (each (command, fields)) at once while every
        Redis is paused for a moment, so that they all reach the worker
        while its first call waits. Returns the answers and how many calls
        of the function Redis then ran (read with MONITOR)."""
        monitors = []
        for port in self.redis_ports():
            m = Resp(port, timeout=0.2)
            self.assertEqual(m("MONITOR"), "OK")
            monitors.append(m)
        answers = [None] * len(requests)

        def run(i):
            conn = self.c.new_http()
            answers[i] = self.c.req(requests[i][0], conn=conn, **requests[i][1])
            conn.close()

        pause_ms = int(600 * SLOW)
        for port in self.redis_ports():
            self.assertEqual(raw_command(port, "CLIENT", "PAUSE", pause_ms, "ALL"), "+OK")
        ths = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for th in ths:
            th.start()
        for th in ths:
            th.join(10 * SLOW)
        calls = 0
        for m in monitors:
            while True:
                try:
                    line = m._line()
                except (OSError, ConnectionError):
                    break
                calls += b'"FCALL"' in line and line.split(b'"')[3].endswith(b"_" + function.encode())
            m.close()
        return answers, calls

    def test_single_adds_share_calls(self):
        t = unique("gc")
        ids = ["%s-%d" % (t, i) for i in range(11)]
        requests = [("add", dict(topic=t, id=i, body={"n": i})) for i in ids]
        requests.append(("add", dict(topic=t, id=ids[0], body="again")))  # one conflict
        answers, calls = self.calls_while_paused("add", requests)
        print("%d single adds while Redis was paused: %d add calls" % (len(requests), calls))
        # alone, then together; with several shards a grouped add is one
        # call per shard, so fewer calls than requests is what tells
        if self.c.shards == 1:
            self.assertLessEqual(calls, 3, "the adds did not share calls")
        else:
            self.assertLess(calls, len(requests), "the adds did not share calls")
        statuses = [st for st, r in answers]
        self.assertEqual(sorted(statuses), [200] * 11 + [409], answers)
        for (st, r), (cmd, fields) in zip(answers, requests):
            if st == 200:
                self.assertEqual(r["id"], fields["id"])
            else:
                self.assertEqual(r["code"], "conflict")
                self.assertIn("state ready", r["error"])
        for i in ids[1:]:
            st, r = self.c.req("get", id=i)
            self.assertEqual((st, r["value"]), (200, {"n": i}))
        first_won = answers[0][0] == 200
        st, r = self.c.req("get", id=ids[0])
        self.assertEqual(r["value"], {"n": ids[0]} if first_won else "again",
                         "the job of the request that was answered 200 is stored")

    def test_single_finishes_and_pops_share_calls(self):
        t = unique("gcp")
        ids = ["%s-%d" % (t, i) for i in range(20)]
        self.assertOk(*self.c.req("add", jobs=[{"topic": t, "id": i, "body": i} for i in ids]))
        st, r = self.c.req("pop", topic=t, count=10)
        taken = [j["id"] for j in r["jobs"]]
        self.assertEqual(len(taken), 10)
        # finish-and-pop of the ten taken, plus a plain finish of an unknown id
        requests = [("pop", dict(topic=t, finish=i)) for i in taken]
        requests.append(("finish", dict(id=t + "-nope")))
        answers, calls = self.calls_while_paused("pop", requests)
        print("%d finish-and-pops while Redis was paused: %d pop calls" % (len(taken), calls))
        if self.c.shards == 1:  # (with several shards a pop goes where the hints say, alone)
            self.assertLessEqual(calls, 3, "the pops did not share calls")
        self.assertEqual(answers[-1][0], 404)
        popped = []
        for (st, r), (cmd, fields) in zip(answers[:-1], requests):
            self.assertOk(st, r)
            self.assertEqual(r["finished"], [{"id": fields["finish"], "success": True}])
            popped.append(r["id"])
            self.assertEqual(r["value"], r["id"])
        self.assertEqual(sorted(popped), sorted(set(ids) - set(taken)), "each got a job of its own")
        st, s = self.c.req("stats", topic=t)
        self.assertEqual((s["topics"][t]["finished"], s["topics"][t]["reserved"]), (10, 10))

if __name__ == "__main__":
    main()

"""Tests of the delayq Python client and Worker.

Most run against a real deployment (tests/dqtest, the project's shared test
package: Redis, delayq-fcgi, delayq-timer and nginx in a temp dir,
bearer-token auth on), one Deployment for the whole module. What the real server cannot be made to do
on demand (504, 500, a page that is not JSON, a keep-alive connection
dropped under a request) comes from a small scripted HTTP server.

Run from the repository top:
  PYTHONPATH=tests:clients/python python3 tests/clients/test_python_client.py
or on its own:
  PYTHONPATH=tests:clients/python python3 clients/python/tests/test_client.py [Class.test ...]
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timedelta

import delayq
from delayq import (BadRequest, Client, ClientError, Conflict, ConnectFailed, ConnectionLost,
                    Job, JobInfo, NotFound, Result, ServerError, Timeout, TooLarge, Unauthorized,
                    Unavailable, Worker)
from dqtest import SLOW, Deployment, KeepOnFailure, free_port, job_keys, unique

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.dirname(HERE)

TOKEN = "client-test-token-0123456789"

DEPLOYMENT = None  # type: Deployment | None
URL = ""
_TOKEN_DIR = ""


def setUpModule():
    global DEPLOYMENT, URL, _TOKEN_DIR
    _TOKEN_DIR = tempfile.mkdtemp(prefix="delayq-pyclient-")
    os.chmod(_TOKEN_DIR, 0o755)
    tokens = os.path.join(_TOKEN_DIR, "tokens")
    with open(tokens, "w") as f:
        f.write("%s\n" % TOKEN)
    DEPLOYMENT = Deployment(workers=1, threads=8,
                      fcgi_flags={"auth_file": tokens, "redis_connect_timeout_ms": 300})
    DEPLOYMENT.start()
    URL = "http://127.0.0.1:%d" % DEPLOYMENT.http_port


def tearDownModule():
    global DEPLOYMENT
    c, DEPLOYMENT = DEPLOYMENT, None
    if c is not None:
        c.stop(failed=KeepOnFailure.any_failed)
    shutil.rmtree(_TOKEN_DIR, ignore_errors=True)


class Base(KeepOnFailure):
    def setUp(self):
        self.client = Client(URL, token=TOKEN, timeout=10)
        self.addCleanup(self.client.close)


    def assertGone(self, id):
        with self.assertRaises(NotFound):
            self.client.get(id)


# --------------------------------------------------------------------------
# every command against the real server
# --------------------------------------------------------------------------

class Commands(Base):
    def test_schedules(self):
        c = self.client
        sid, t = unique("sch").replace("-", "_"), unique("scht")
        r = c.schedule(sid, t, {"n": 1}, cron="0 3 * * *", tz="Asia/Shanghai", ttr=30)
        self.assertEqual((r["id"], r["replaced"]), (sid, False))
        one = c.schedules(sid, preview=2)
        self.assertEqual(len(one), 1)
        self.assertEqual((one[0]["cron"], one[0]["tz"], len(one[0]["upcoming"])),
                         ("0 3 * * *", "Asia/Shanghai", 2))
        self.assertEqual(one[0]["upcoming"][0] % 86400000, 19 * 3600000, "03:00 in UTC+8")
        self.assertIn(sid, [s["id"] for s in c.schedules()])
        self.assertTrue(c.schedule(sid, t, 1, every=60)["replaced"])
        c.unschedule(sid)
        with self.assertRaises(NotFound):
            c.unschedule(sid)

    def test_add_with_backoff(self):
        c = self.client
        t, id = unique("bo"), unique("bo-id")
        c.add(t, 1, id=id, delay=60, backoff=[1.5, 30])
        self.assertEqual(job_keys.read(DEPLOYMENT.redis, "{dq}", id)["bo"], "1500,30000")
        c.delete(id)

    def test_key(self):
        c = self.client
        t = unique("key")
        keyed = c.add(t, {"n": 1}, key="merchant-42")
        plain = c.add(t, {"n": 2})
        self.assertEqual(c.get(keyed).key, "merchant-42")
        self.assertIsNone(c.get(plain).key)
        results = c.add_many([{"topic": t, "body": 3, "key": "m/7"}])
        self.assertTrue(results[0].success, results)
        self.assertEqual(c.get(results[0].id).key, "m/7")
        jobs = c.pop_many(t, 3)
        self.assertEqual({j.id: j.key for j in jobs},
                         {keyed: "merchant-42", plain: None, results[0].id: "m/7"})
        with self.assertRaises(BadRequest) as cm:
            c.add(t, 1, key="a b")
        self.assertIn("'key'", cm.exception.message)
        c.finish_many([j.id for j in jobs])

    def test_trace_context(self):
        c = self.client
        t = unique("trace")
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        traced = c.add(t, {"n": 1}, traceparent=tp, tracestate="rojo=00f067aa0ba902b7")
        plain = c.add(t, {"n": 2})
        info = c.get(traced)
        self.assertEqual((info.traceparent, info.tracestate), (tp, "rojo=00f067aa0ba902b7"))
        self.assertEqual((c.get(plain).traceparent, c.get(plain).tracestate), (None, None))
        results = c.add_many([{"topic": t, "body": 3, "traceparent": tp2}])
        self.assertTrue(results[0].success, results)
        jobs = c.pop_many(t, 3)
        self.assertEqual({j.id: (j.traceparent, j.tracestate) for j in jobs},
                         {traced: (tp, "rojo=00f067aa0ba902b7"), plain: (None, None),
                          results[0].id: (tp2, None)})
        with self.assertRaises(BadRequest) as cm:
            c.add(t, 1, traceparent=tp.upper())
        self.assertIn("'traceparent'", cm.exception.message)
        with self.assertRaises(BadRequest) as cm:
            c.add(t, 1, traceparent=tp, tracestate="a\nb")
        self.assertIn("'tracestate'", cm.exception.message)
        c.finish_many([j.id for j in jobs])

    def test_policy(self):
        c = self.client
        t = unique("pol")
        got = c.policy(t, concurrency=5, period=timedelta(milliseconds=500), key_concurrency=1)
        self.assertEqual(got, {"concurrency": 5, "rate": None, "period": 0.5, "key_concurrency": 1,
                               "key_rate": None, "key_period": None, "keep": None})
        self.assertEqual(c.policy(t, period=None)["period"], None)
        self.assertEqual(c.policies(t)[t]["concurrency"], 5)
        self.assertIn(t, c.policies())
        self.assertEqual(c.policies(t)[t]["reserved"], 0)
        self.assertIsNone(c.policies(t)[t]["tokens"], "no rate")
        c.policy(t, rate=12, period=timedelta(minutes=1))  # 12 a minute
        self.assertEqual((c.policies(t)[t]["rate"], c.policies(t)[t]["tokens"]), (12, 12))
        c.policy(t, rate=None, period=None)
        with self.assertRaises(BadRequest) as cm:
            c.policy(t, rate=0)
        self.assertIn("'rate'", cm.exception.message)
        with self.assertRaises(TypeError):
            c.policy(t, burst=1)
        c.policy(t, concurrency=None, key_concurrency=None)
        self.assertEqual(c.policies(t), {})

    def test_kept_history(self):
        c = self.client
        t = unique("kept")
        self.assertEqual(c.policy(t, keep=timedelta(minutes=1))["keep"], 60)
        jid = c.add(t, {"n": 1}, key="merchant-1")
        job = c.pop(t)
        self.assertEqual(job.id, jid)
        self.assertFalse(c.get(jid).kept)
        self.assertIsNotNone(c.get(jid).first_delivered)
        c.finish(jid)
        rec = c.get(jid)
        self.assertTrue(rec.kept)
        self.assertEqual((rec.state, rec.attempts, rec.key, rec.body, rec.ttr, rec.retries),
                         ("finished", 1, "merchant-1", None, None, None))
        self.assertLessEqual(rec.created, rec.first_delivered)
        self.assertLessEqual(rec.first_delivered, rec.ended)
        other = c.add(t, 2)
        c.delete(other)
        self.assertEqual([j.id for j in c.iter_jobs(t, "finished")], [jid])
        self.assertEqual([(j.id, j.state) for j in c.iter_jobs(t, "deleted")], [(other, "deleted")])
        # The idempotency window: the add is refused, naming the outcome.
        with self.assertRaises(Conflict) as cm:
            c.add(t, {"n": 1}, id=jid, key="merchant-1")
        self.assertIn("was finished at", cm.exception.message)
        results = c.add_many([{"topic": t, "id": other, "body": 2}])
        self.assertEqual((results[0].success, results[0].code), (False, "conflict"))
        self.assertIn("was deleted at", results[0].error)

    def test_add_get_and_conflict(self):
        c = self.client
        t, id = unique("add"), unique("add-id")
        before = time.time()
        self.assertEqual(c.add(t, {"n": 1}, id=id, delay=30, ttr=12.5, retries=3), id)
        info = c.get(id)
        self.assertIsInstance(info, JobInfo)
        self.assertEqual((info.id, info.topic, info.state, info.body, info.ttr, info.attempts,
                          info.retries), (id, t, "delay", {"n": 1}, 12.5, 0, 3))
        self.assertAlmostEqual(info.due / 1000.0, before + 30, delta=5)
        self.assertAlmostEqual(info.created / 1000.0, before, delta=5)
        with self.assertRaises(Conflict) as cm:
            c.add(t, "again", id=id)
        e = cm.exception
        self.assertEqual((e.code, e.status), ("conflict", 409))
        self.assertIn(id, e.message)
        self.assertIsInstance(e, ClientError)
        self.assertNotIsInstance(e, ServerError)
        self.assertEqual(c.get(id).body, {"n": 1}, "a conflicting add changed the job")
        gen = c.add(t, "no id")
        self.assertRegex(gen, r"^[0-9a-f]{24}$")
        info = c.get(gen)
        self.assertEqual((info.state, info.retries, info.due), ("ready", None, None))
        # a finished id may be used again
        c.finish(id)
        self.assertEqual(c.add(t, 2, id=id), id)

    def test_upsert(self):
        c = self.client
        t, id = unique("ups"), unique("ups-id")
        self.assertIs(c.upsert(t, id, {"v": 1}, delay=30), False, "none: created")
        self.assertIs(c.upsert(t, id, {"v": 2}, ttr=5), True, "delayed: replaced")
        info = c.get(id)
        self.assertEqual((info.state, info.body, info.ttr), ("ready", {"v": 2}, 5))
        self.assertEqual(c.add(t, {"v": 3}, id=id, replace=True), id)
        job = c.pop(t)
        self.assertEqual((job.id, job.body), (id, {"v": 3}))
        with self.assertRaises(Conflict) as cm:
            c.upsert(t, id, {"v": 4})
        self.assertIn("reserved", cm.exception.message)
        with self.assertRaises(BadRequest) as cm:
            c.add(t, 1, replace=True)
        self.assertIn("'replace'", cm.exception.message)
        results = c.add_many([{"topic": t, "body": 5, "id": id, "replace": True},
                              {"topic": t, "body": 6, "id": unique("ups-id"), "replace": True},
                              {"topic": t, "body": 7}])
        self.assertEqual([(r.success, r.code, r.replaced) for r in results],
                         [(False, "conflict", None), (True, None, False), (True, None, None)])
        c.finish(id)

    def test_bodies_round_trip(self):
        c = self.client
        t = unique("bodies")
        bodies = ["plain text", "", '{"looks":"like json"}', "42", "h\u00e9llo \u2713 \U0001f600",
                  {"a": [1, 2.5, None, True, {"b": "c"}]}, [1, "two"], 7, -1.25, 0, True, False,
                  None, {}, []]
        ids = [c.add(t, b) for b in bodies]
        jobs = c.pop_many(t, 100)
        self.assertEqual([j.id for j in jobs], ids)
        for b, j in zip(bodies, jobs):
            self.assertEqual(j.body, b)
            self.assertIs(type(j.body), type(b), "body %r came back as %r" % (b, j.body))
            self.assertEqual(j.value, b)
        self.assertEqual(c.get(ids[2]).body, '{"looks":"like json"}')
        self.assertEqual(c.get(ids[5]).body, bodies[5])
        self.assertEqual(c.finish_many(ids), [Result(id=i, success=True) for i in ids])

    def test_delay_at_and_timedelta(self):
        c = self.client
        t = unique("when")
        now = time.time()
        a = c.add(t, "a", delay=timedelta(minutes=2))
        b = c.add(t, "b", at=datetime.fromtimestamp(now + 3600))
        d = c.add(t, "d", at=now - 10)  # in the past: ready now
        self.assertAlmostEqual(c.get(a).due / 1000.0, now + 120, delta=3)
        self.assertAlmostEqual(c.get(b).due / 1000.0, now + 3600, delta=3)
        self.assertEqual(c.get(d).state, "ready")
        e = c.add(t, "e", delay=0.3)
        self.assertEqual(c.pop(t).id, d)
        job = c.pop(t, timeout=5 * SLOW)
        self.assertEqual(job.id, e)
        self.assertGreaterEqual(time.time() - now, 0.3)
        with self.assertRaises(BadRequest):
            c.add(t, "x", delay=1, at=now)
        c.delete_many([a, b, d, e])

    def test_pop_forms(self):
        c = self.client
        t1, t2 = unique("p1"), unique("p2")
        self.assertIsNone(c.pop(t1))
        self.assertEqual(c.pop_many([t1, t2], 10), [])
        ids2 = [c.add(t2, i) for i in range(2)]
        ids1 = [c.add(t1, i, ttr=7) for i in range(2)]
        job = c.pop("%s,%s" % (t1, t2))
        self.assertIsInstance(job, Job)
        self.assertEqual((job.id, job.topic, job.body, job.attempts, job.ttr), (ids1[0], t1, 0, 1, 7))
        jobs = c.pop_many([t2, t1], 2)
        self.assertEqual([j.id for j in jobs], ids2)
        jobs = c.pop_many((t1,), 1)
        self.assertEqual([j.id for j in jobs], ids1[1:])
        self.assertEqual(c.get(ids1[1]).state, "reserved")
        c.finish_many(ids1 + ids2)

    def test_finish_and_pop(self):
        c = self.client
        t = unique("fap")
        a, b, d = c.add(t, "a"), c.add(t, "b"), c.add(t, "d")
        self.assertEqual(c.pop(t).id, a)
        # the previous job is finished and the next one comes, in one request
        job, finished = c.pop(t, finish=a)
        self.assertEqual(job.id, b)
        self.assertEqual(finished, [Result(id=a, success=True)])
        self.assertGone(a)
        self.assertEqual(c.get(b).state, "reserved")
        # pop_many: an entry per id in request order, a known and an unknown one
        unknown = unique("nope")
        jobs, finished = c.pop_many([t], 5, finish=[b, unknown])
        self.assertEqual([j.id for j in jobs], [d])
        self.assertEqual(len(finished), 2)
        self.assertEqual(finished[0], Result(id=b, success=True))
        self.assertEqual((finished[1].id, finished[1].success, finished[1].code),
                         (unknown, False, "not_found"))
        self.assertIsInstance(finished[1].error, str)
        self.assertIsInstance(finished[1].exception(), NotFound)
        self.assertGone(b)
        # nothing left: an empty pop still answers the finishes (a generator is fine)
        job, finished = c.pop(t, finish=iter([d]))
        self.assertIsNone(job)
        self.assertEqual(finished, [Result(id=d, success=True)])
        jobs, finished = c.pop_many(t, 2, finish=[d])
        self.assertEqual((jobs, [(r.id, r.code) for r in finished]), ([], [(d, "not_found")]))
        # an empty list sends no `finish`: the answer is still a pair
        self.assertEqual(c.pop(t, finish=[]), (None, []))
        self.assertEqual(c.pop_many(t, 2, finish=()), ([], []))
        st = c.stats(t)["topics"][t]
        self.assertEqual((st["popped"], st["finished"], st["reserved"]), (3, 3, 0))

    def test_finish_and_pop_bad_finish_does_nothing(self):
        c = self.client
        t = unique("fap-bad")
        a = c.add(t, "a")
        b = c.add(t, "b")
        self.assertEqual(c.pop(t).id, a)
        for bad in ("bad id", [a, "bad id"], ["x"] * 1001):
            with self.assertRaises(BadRequest) as cm:
                c.pop(t, finish=bad)
            self.assertRegex(cm.exception.message, r"field 'finish(\[\d+\])?'")
        # neither finished nor popped
        self.assertEqual(c.get(a).state, "reserved")
        self.assertEqual(c.get(b).state, "ready")
        c.delete_many([a, b])

    def test_finish_and_pop_long_poll_finishes_at_once(self):
        c = self.client
        t = unique("fap-lp")
        a = c.add(t, "a")
        self.assertEqual(c.pop(t).id, a)
        other = Client(URL, token=TOKEN)
        self.addCleanup(other.close)
        seen = {}

        def producer():
            # the finish is done before the long-poll waits
            wait_for(lambda: other.stats(t)["topics"][t]["finished"] == 1, 5, "the finish")
            try:
                other.get(a)
            except NotFound:
                seen["gone"] = True
            other.add(t, "b", id=t + "-b")

        th = threading.Thread(target=producer)
        th.start()
        t0 = time.monotonic()
        job, finished = c.pop(t, timeout=20, finish=a)
        th.join(10)
        self.assertLess(time.monotonic() - t0, 5 * SLOW)
        self.assertIs(seen.get("gone"), True, "the finish waited for the long-poll")
        self.assertEqual(job.id, t + "-b")
        self.assertEqual(finished, [Result(id=a, success=True)])
        # a long-poll that times out answers the finishes too
        t0 = time.monotonic()
        self.assertEqual(c.pop(t, timeout=0.3, finish=job.id),
                         (None, [Result(id=job.id, success=True)]))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)

    def test_long_poll_times_out_and_wakes(self):
        c = self.client
        t = unique("poll")
        t0 = time.monotonic()
        self.assertIsNone(c.pop(t, timeout=0.5))
        self.assertGreaterEqual(time.monotonic() - t0, 0.45)
        self.assertEqual(c.pop_many(t, 3, timeout=0.3), [])
        other = Client(URL, token=TOKEN)
        self.addCleanup(other.close)
        timer = threading.Timer(0.5, lambda: other.add(t, {"woke": True}, id=t + "-w"))
        timer.start()
        self.addCleanup(timer.cancel)
        t0 = time.monotonic()
        job = c.pop(t, timeout=30)  # longer than the client's own 10 s timeout
        waited = time.monotonic() - t0
        self.assertEqual(job.id, t + "-w")
        self.assertGreaterEqual(waited, 0.4)
        self.assertLess(waited, 3 * SLOW, "the long-poll did not wake up when the job came")
        # a delayed job wakes it too, through the timer
        other.add(t, 2, id=t + "-d", delay=0.4)
        t0 = time.monotonic()
        jobs = c.pop_many([t], 5, timeout=30)
        self.assertEqual([j.id for j in jobs], [t + "-d"])
        self.assertLess(time.monotonic() - t0, 3 * SLOW)
        c.finish_many([t + "-w", t + "-d"])

    def test_touch_release_bury_kick(self):
        c = self.client
        t = unique("life")
        id = c.add(t, "x", ttr=100)
        with self.assertRaises(Conflict):
            c.touch(id)  # ready, not reserved
        with self.assertRaises(Conflict):
            c.release(id)
        with self.assertRaises(Conflict):
            c.bury(id)
        job = c.pop(t)
        due = c.touch(id)
        self.assertIsInstance(due, int)
        self.assertAlmostEqual(due / 1000.0, time.time() + 100, delta=5)
        self.assertEqual(c.release(id), "ready")
        job = c.pop(t)
        self.assertEqual(job.attempts, 2)
        self.assertEqual(c.release(id, delay=60), "delay")
        self.assertAlmostEqual(c.get(id).due / 1000.0, time.time() + 60, delta=5)
        self.assertIsNone(c.pop(t))
        # bury and kick
        b = c.add(t + "-b", "b")
        self.assertEqual(c.pop(t + "-b").id, b)
        self.assertIsNone(c.bury(b))
        self.assertEqual(c.get(b).state, "buried")
        self.assertIsNone(c.pop(t + "-b"))
        self.assertEqual(c.kick(t + "-b", count=10), 1)
        self.assertEqual(c.kick(t + "-b"), 0)
        self.assertEqual(c.pop(t + "-b").attempts, 2)
        # retries used up: release buries
        r = c.add(t + "-r", "r", retries=0)
        c.pop(t + "-r")
        self.assertEqual(c.release(r, delay=1), "buried")
        for unknown in (c.touch, c.release, c.bury, c.finish, c.delete, c.get):
            with self.assertRaises(NotFound):
                unknown(unique("nope"))
        c.delete_many([id, b, r])

    def test_jobs_listing(self):
        c = self.client
        t = unique("list")
        ids = [c.add(t, {"n": i}, id="%s-%d" % (t, i), delay=100 + i, ttr=7) for i in range(5)]
        jobs, cursor = c.jobs(t, "delay", limit=2)
        self.assertEqual([j.id for j in jobs], ids[:2])
        self.assertIsInstance(jobs[0], JobInfo)
        self.assertEqual((jobs[0].topic, jobs[0].state, jobs[0].body, jobs[0].ttr),
                         (t, "delay", {"n": 0}, 7))
        self.assertAlmostEqual(jobs[1].due / 1000.0, time.time() + 101, delta=5)
        self.assertIsInstance(cursor, str)
        jobs, cursor = c.jobs(t, "delay", limit=2, cursor=cursor)
        self.assertEqual([j.id for j in jobs], ids[2:4])
        jobs, cursor = c.jobs(t, "delay", limit=2, cursor=cursor)
        self.assertEqual(([j.id for j in jobs], cursor), (ids[4:], None))
        self.assertEqual([j.id for j in c.iter_jobs(t, "delay", page=2)], ids)
        self.assertEqual([j.id for j in c.jobs(t, "delay")[0]], ids)  # server default 50
        self.assertEqual(c.jobs(t, "ready"), ([], None))
        self.assertEqual(list(c.iter_jobs(t, "buried")), [])
        with self.assertRaises(BadRequest) as cm:
            c.jobs(t, "done")
        self.assertIn("state", cm.exception.message)
        c.delete_many(ids)

    def test_reschedule(self):
        c = self.client
        t = unique("resched")
        id = c.add(t, "x", delay=100)
        state, due = c.reschedule(id, delay=3600)
        self.assertEqual(state, "delay")
        self.assertAlmostEqual(due / 1000.0, time.time() + 3600, delta=5)
        self.assertEqual(c.get(id).due, due)
        at = time.time() + 60
        state, due = c.reschedule(id, at=datetime.fromtimestamp(at))
        self.assertEqual(state, "delay")
        self.assertAlmostEqual(due / 1000.0, at, delta=1)
        self.assertEqual(c.reschedule(id, delay=timedelta(0)), ("ready", None))
        self.assertEqual(c.pop(t).id, id)
        with self.assertRaises(Conflict):
            c.reschedule(id, delay=5)  # reserved
        c.bury(id)
        self.assertEqual(c.reschedule(id, at=0), ("ready", None))  # a buried job too
        self.assertEqual(c.get(id).state, "ready")
        with self.assertRaises(NotFound):
            c.reschedule(unique("nope"), delay=1)
        for bad in ({}, {"delay": 1, "at": 5}):
            with self.assertRaises(ValueError):
                c.reschedule(id, **bad)
        c.delete(id)

    def test_purge(self):
        c = self.client
        t, other = unique("purge"), unique("purgeother")
        delayed = [c.add(t, i, delay=600) for i in range(3)]
        ready = [c.add(t, i) for i in range(2)]
        kept = c.add(other, "x", delay=600)
        self.assertEqual(c.purge(t, "delay"), 3)
        with self.assertRaises(NotFound):
            c.get(delayed[0])
        self.assertEqual(c.get(ready[0]).state, "ready")
        self.assertEqual(c.purge(t), 2)
        self.assertEqual(c.purge(t), 0)
        self.assertEqual(c.stats(t)["topics"][t]["deleted"], 5)
        self.assertEqual(c.get(kept).state, "delay")
        with self.assertRaises(BadRequest):
            c.purge(t, "done")
        c.delete(kept)

    def test_pause_resume(self):
        c = self.client
        t = unique("pause")
        self.assertIsNone(c.pause(t))
        self.assertIsNone(c.pause(t))  # idempotent
        id = c.add(t, "x")
        self.assertIs(c.stats(t)["topics"][t]["paused"], True)
        self.assertIsNone(c.pop(t))
        other = Client(URL, token=TOKEN)
        self.addCleanup(other.close)
        timer = threading.Timer(0.5, lambda: other.resume(t))
        timer.start()
        self.addCleanup(timer.cancel)
        t0 = time.monotonic()
        job = c.pop(t, timeout=20)  # keeps waiting while paused; resume wakes it
        waited = time.monotonic() - t0
        self.assertEqual(job.id, id)
        self.assertGreaterEqual(waited, 0.4)
        self.assertLess(waited, 3 * SLOW)
        self.assertIs(c.stats(t)["topics"][t]["paused"], False)
        self.assertIsNone(c.resume(t))
        c.finish(id)

    def test_batches(self):
        c = self.client
        t = unique("batch")
        taken = c.add(t, "first", id=t + "-2")
        self.assertEqual(c.add_many([]), [])
        results = c.add_many([
            {"topic": t, "body": "one", "id": t + "-1", "ttr": 5},
            {"topic": t, "body": "two", "id": taken},
            {"topic": t, "body": {"three": 3}, "delay": timedelta(seconds=30)},
        ])
        self.assertEqual(len(results), 3)
        self.assertEqual(results[0], Result(id=t + "-1", success=True))
        self.assertEqual((results[1].id, results[1].success, results[1].code),
                         (taken, False, "conflict"))
        self.assertIsInstance(results[1].error, str)
        self.assertIsInstance(results[1].exception(), Conflict)
        self.assertIsNone(results[0].exception())
        self.assertTrue(results[2].success)
        self.assertRegex(results[2].id, r"^[0-9a-f]{24}$")
        self.assertEqual(c.get(taken).body, "first")
        self.assertEqual(c.get(results[2].id).state, "delay")
        # an invalid job: 400 naming it, nothing added
        with self.assertRaises(BadRequest) as cm:
            c.add_many([{"topic": t, "body": 1, "id": t + "-x"}, {"topic": "bad topic", "body": 2}])
        self.assertIn("jobs[1]", cm.exception.message)
        self.assertGone(t + "-x")
        with self.assertRaises(TypeError):
            c.add_many([{"topic": t, "body": 1, "colour": "red"}])
        # finish_many / delete_many
        fin = c.finish_many([t + "-1", "nope-" + t])
        self.assertEqual(fin[0], Result(id=t + "-1", success=True))
        self.assertEqual((fin[1].success, fin[1].code), (False, "not_found"))
        self.assertIsInstance(fin[1].exception(), NotFound)
        dele = c.delete_many([taken, results[2].id, taken])
        self.assertEqual([r.success for r in dele], [True, True, False])
        self.assertEqual(c.finish_many([]), [])
        self.assertEqual(c.delete_many(iter([])), [])
        with self.assertRaises(BadRequest):
            c.finish_many(["ok", "bad id"])
        st = c.stats(t)["topics"][t]
        self.assertEqual((st["added"], st["finished"], st["deleted"]), (3, 1, 2))

    def test_finish_and_delete_count_separately(self):
        c = self.client
        t = unique("fd")
        a, b = c.add(t, "a"), c.add(t, "b", delay=100)
        c.pop(t)
        self.assertIsNone(c.finish(a))
        self.assertIsNone(c.delete(b))  # any state
        self.assertGone(a)
        self.assertGone(b)
        with self.assertRaises(NotFound) as cm:
            c.finish(a)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        st = c.stats(t)
        self.assertEqual(set(st), {"topics", "total", "unconfirmed_writes"})
        self.assertEqual((st["topics"][t]["finished"], st["topics"][t]["deleted"]), (1, 1))

    def test_stats_health_metrics(self):
        c = self.client
        t = unique("st")
        c.add(t, 1, delay=100)
        c.add(t, 2)
        st = c.stats(t)["topics"][t]
        for k in ("delay", "ready", "reserved", "buried", "finished", "deleted", "redelivered"):
            self.assertIn(k, st)
        self.assertEqual((st["delay"], st["ready"]), (1, 1))
        everything = c.stats()
        self.assertIn(t, everything["topics"])
        self.assertGreaterEqual(everything["total"]["delay"], 1)
        self.assertIs(c.health(), True)
        self.assertIs(Client(URL).health(), True)  # needs no token
        text = c.metrics()
        self.assertIsInstance(text, str)
        self.assertIn('delayq_jobs{topic="%s",state="delay"} 1' % t, text)

    def test_command_errors(self):
        c = self.client
        with self.assertRaises(BadRequest) as cm:
            c.add("bad topic", 1)
        e = cm.exception
        self.assertEqual((e.status, e.code), (400, "bad_request"))
        self.assertIn("topic", e.message)
        self.assertEqual(e.response["success"], False)
        self.assertIn("bad_request", str(e))
        for bad in (lambda: c.add("t", 1, ttr=0), lambda: c.add("t", 1, retries=-1),
                    lambda: c.pop("t", timeout=61), lambda: c.pop_many("t", 0),
                    lambda: c.kick("t", count=0), lambda: c.get("x" * 300)):
            with self.assertRaises(BadRequest):
                bad()
        with self.assertRaises(ValueError):
            c.add("t", float("nan"))  # not JSON: refused before sending
        # too large: the job body (delayq's limit) and the whole request (nginx's)
        t = unique("big")
        with self.assertRaises(TooLarge) as cm:
            c.add(t, "x" * (65 * 1024))
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "too_large"))
        self.assertIn("body", cm.exception.message)
        with self.assertRaises(TooLarge):
            c.add_many([{"topic": t, "body": "y" * 60000} for _ in range(20)])
        self.assertEqual(c.stats(t)["topics"][t]["added"], 0)
        self.assertEqual(c.add(t, "fits"), c.pop(t).id)  # the connection still works

    def test_unauthorized(self):
        t = unique("auth")
        for token in ("wrong-token-0123456789", None):
            with Client(URL, token=token) as bad:
                with self.assertRaises(Unauthorized) as cm:
                    bad.add(t, 1)
                self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
                self.assertIsInstance(cm.exception, ClientError)
                with self.assertRaises(Unauthorized):
                    bad.metrics()
        self.assertEqual(self.client.stats(t)["topics"][t]["added"], 0)

    def test_env_defaults(self):
        old = {k: os.environ.get(k) for k in ("DELAYQ_URL", "DELAYQ_TOKEN")}
        self.addCleanup(lambda: [os.environ.pop(k, None) if v is None else
                                 os.environ.__setitem__(k, v) for k, v in old.items()])
        os.environ["DELAYQ_URL"] = URL
        os.environ["DELAYQ_TOKEN"] = TOKEN
        with Client() as c:
            self.assertEqual(c.url, URL)
            t = unique("env")
            self.assertEqual(c.pop(t, timeout=0.1), None)
        os.environ.pop("DELAYQ_URL")
        self.assertEqual(Client().url, delayq.DEFAULT_URL)
        self.assertEqual(Client("127.0.0.1:1").url, "http://127.0.0.1:1")
        with self.assertRaises(ValueError):
            Client("ftp://example.com/")

    def test_connect_failed(self):
        c = Client("http://127.0.0.1:%d" % free_port(), timeout=2)
        with self.assertRaises(ConnectFailed) as cm:
            c.add("t", 1)
        e = cm.exception
        self.assertIsInstance(e, Unavailable)
        self.assertIsInstance(e, ServerError)
        self.assertIsNone(e.status)
        self.assertIs(c.health(), False)

    def test_redis_down_is_unavailable(self):
        c = self.client
        t = unique("down")
        id = c.add(t, "kept?")
        DEPLOYMENT.stop_redis()
        try:
            for call in (lambda: c.add(t, 1), lambda: c.pop(t), lambda: c.get(id),
                         lambda: c.finish(id), lambda: c.stats(t), lambda: c.finish_many([id])):
                with self.assertRaises(Unavailable) as cm:
                    call()
                e = cm.exception
                self.assertEqual((e.status, e.code), (503, "unavailable"))
                self.assertIsInstance(e, ServerError)
                self.assertNotIsInstance(e, ClientError)
                self.assertNotIsInstance(e, Timeout)
            self.assertIs(c.health(), False)
        finally:
            DEPLOYMENT.start_redis()
        deadline = time.monotonic() + 15 * SLOW
        while not c.health():
            self.assertLess(time.monotonic(), deadline, "health never came back")
            time.sleep(0.1)
        # the same client (and its connection) carries on
        self.assertEqual(c.add(t, "after", id=t + "-after"), t + "-after")
        self.assertEqual(c.pop(t).id, t + "-after")
        c.finish(t + "-after")


# --------------------------------------------------------------------------
# the Worker against the real server
# --------------------------------------------------------------------------

def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout * SLOW
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def request_counts():
    """delayq_requests_total of the deployment's one delayq-fcgi, by
    (command, code)."""
    with Client(URL, token=TOKEN) as c:
        text = c.metrics()
    counts = {}
    for cmd, code, v in re.findall(r'^delayq_requests_total\{command="([^"]*)",code="([^"]*)"\} '
                                   r'([0-9.e+]+)$', text, re.M):
        counts[(cmd, code)] = counts.get((cmd, code), 0) + int(float(v))
    return counts


def requests_between(before, after, command, code=None):
    """How many `command` requests (with `code`, or any) were answered
    between two request_counts()."""
    return sum(n - before.get(k, 0) for k, n in after.items()
               if k[0] == command and (code is None or k[1] == code))


class Workers(Base):
    def start(self, worker):
        th = threading.Thread(target=worker.run, daemon=True)
        th.start()

        def stop():
            worker.stop()
            th.join(10)
            worker.client.close()
        self.addCleanup(stop)
        return th

    def test_success_path(self):
        t = unique("w-ok")
        seen = []
        w = Worker(Client(URL, token=TOKEN), t, lambda job: seen.append((job.id, job.body)),
                   poll_timeout=5)
        th = self.start(w)
        ids = [self.client.add(t, {"n": i}) for i in range(3)]
        wait_for(lambda: len(seen) == 3, 10, "3 jobs handled")
        self.assertEqual(seen, [(ids[i], {"n": i}) for i in range(3)])
        wait_for(lambda: self.client.stats(t)["topics"][t]["finished"] == 3, 5, "3 finished")
        # stop() cuts the 5 s long-poll short
        time.sleep(0.2)
        t0 = time.monotonic()
        w.stop()
        th.join(10)
        self.assertFalse(th.is_alive())
        self.assertLess(time.monotonic() - t0, 2 * SLOW)
        self.assertTrue(w.stopping)
        for id in ids:
            self.assertGone(id)
        # nothing was reserved by the cut-short poll
        self.assertEqual(self.client.stats(t)["topics"][t]["reserved"], 0)

    def test_release_with_backoff(self):
        t = unique("w-retry")
        times = []

        def handler(job):
            times.append((job.attempts, time.monotonic()))
            if job.attempts < 3:
                raise RuntimeError("simulated failure %d" % job.attempts)

        w = Worker(Client(URL, token=TOKEN), [t], handler, backoff=[0.2, 0.4], poll_timeout=5)
        self.assertEqual([w.backoff_for(n) for n in (1, 2, 3, 9)], [0.2, 0.4, 0.4, 0.4])
        self.start(w)
        id = self.client.add(t, "flaky", ttr=30)
        wait_for(lambda: len(times) == 3, 10, "3 attempts")
        wait_for(lambda: self.client.stats(t)["topics"][t]["finished"] == 1, 5, "finished")
        self.assertEqual([a for a, _ in times], [1, 2, 3])
        gaps = [times[1][1] - times[0][1], times[2][1] - times[1][1]]
        for gap, step in zip(gaps, (0.2, 0.4)):
            self.assertGreaterEqual(gap, step - 0.02, gaps)
            self.assertLess(gap, step + 0.5 * SLOW, gaps)
        self.assertGone(id)
        st = self.client.stats(t)["topics"][t]
        self.assertEqual((st["redelivered"], st["popped"]), (0, 3))  # releases, not TTR expiries

    def test_last_step_repeats_and_max_attempts_buries(self):
        t = unique("w-bury")
        attempts = []

        def handler(job):
            attempts.append(job.attempts)
            raise ValueError("always")

        w = Worker(Client(URL, token=TOKEN), t, handler, backoff=[0.1], max_attempts=3,
                   poll_timeout=5)
        self.start(w)
        id = self.client.add(t, "doomed")
        wait_for(lambda: self.client.get(id).state == "buried", 10, "the job buried")
        self.assertEqual(attempts, [1, 2, 3])
        self.assertEqual(self.client.get(id).attempts, 3)
        self.assertEqual(Worker(self.client, t, handler, backoff=[]).backoff_for(4), 0.0)
        self.client.delete(id)

    def test_one_log_line_per_outcome(self):
        # The PHP Worker logs the same sentences (clients/php/tests/WorkerTest.php).
        def handler(job):
            raise RuntimeError("boom")

        for add_kw, worker_kw, level, tail in (
                ({}, {}, "WARNING", "; retry in 30 s"),
                ({"retries": 0}, {}, "ERROR", "; buried: its retries are used up"),
                ({}, {"max_attempts": 1}, "ERROR", "; buried after 1 attempts")):
            t = unique("w-log")
            id = self.client.add(t, "x", **add_kw)
            w = Worker(self.client, t, handler, backoff=[30], poll_timeout=1, **worker_kw)
            with self.assertLogs("delayq.worker", "DEBUG") as logs:
                self.assertTrue(w.run_once())
            self.assertEqual(logs.output, ["%s:delayq.worker:job %s failed on attempt 1 "
                                           "(RuntimeError: boom)%s" % (level, id, tail)])
            self.assertEqual(self.client.get(id).state, "delay" if level == "WARNING" else "buried")
            self.client.delete(id)

    def test_base_exception_releases_the_job_and_stops(self):
        # The second job's KeyboardInterrupt stops the worker: the first is
        # finished (by the pop that brought the second), the second
        # released, and run() raises the interrupt.
        t = unique("w-base")
        first = self.client.add(t, 1, id=t + "-1")
        second = self.client.add(t, 2, id=t + "-2")

        def handler(job):
            if job.id == second:
                raise KeyboardInterrupt

        w = Worker(Client(URL, token=TOKEN), t, handler, backoff=[600], poll_timeout=1,
                   handle_signals=False)
        self.assertRaises(KeyboardInterrupt, w.run)
        w.client.close()
        self.assertRaises(NotFound, self.client.get, first)
        released = self.client.get(second)
        self.assertEqual((released.state, released.attempts), ("delay", 1))
        self.client.delete(second)

    def test_run_once(self):
        t = unique("w-once")
        got = []
        w = Worker(self.client, t, got.append, poll_timeout=0.2)
        self.assertFalse(w.run_once())
        self.client.add(t, "x", id=t + "-1")
        self.assertTrue(w.run_once())
        self.assertEqual([j.id for j in got], [t + "-1"])
        self.assertGone(t + "-1")

    def test_one_request_per_job(self):
        # N jobs: N pops, each carrying the previous job's finish, and one
        # finish of the last job when run() returns; a Worker that finished
        # each job with a request of its own would make N finishes.
        t = unique("w-fap")
        n = 5
        ids = [self.client.add(t, i) for i in range(n)]
        seen, previous = [], []

        def handler(job):
            if seen:  # the pop that brought this job finished the one before
                try:
                    previous.append(self.client.get(seen[-1]).state)
                except NotFound:
                    previous.append("gone")
            seen.append(job.id)
            if len(seen) == n:
                w.stop()

        w = Worker(Client(URL, token=TOKEN), t, handler, poll_timeout=1, handle_signals=False)
        self.addCleanup(w.client.close)
        before = request_counts()
        with self.assertLogs("delayq.worker", "DEBUG") as logs:
            w.run()
        after = request_counts()
        self.assertEqual(seen, ids)
        self.assertEqual(previous, ["gone"] * (n - 1))
        self.assertEqual(requests_between(before, after, "pop"), n)
        self.assertEqual(requests_between(before, after, "finish"), 1,
                         "one finish: the last job's, sent when run() returned")
        self.assertEqual(requests_between(before, after, "finish", "ok"), 1)
        for id in ids:
            self.assertGone(id)
        st = self.client.stats(t)["topics"][t]
        self.assertEqual((st["finished"], st["reserved"], st["popped"]), (n, 0, n))
        for id in ids:
            self.assertIn("DEBUG:delayq.worker:job %s finished (attempt 1)" % id, logs.output)
        self.assertEqual([l for l in logs.output if not l.startswith(("DEBUG", "INFO"))], [])

    def test_stop_while_polling_flushes_the_carried_finish(self):
        # The finish rides on the next long-poll and is done at once, before
        # the wait; stop() cuts that poll short, so the worker cannot know
        # and finishes again on its own: not_found, which is no news.
        t = unique("w-stop")
        handled = []
        w = Worker(Client(URL, token=TOKEN), t, lambda job: handled.append(job.id),
                   poll_timeout=10)
        with self.assertLogs("delayq.worker", "DEBUG") as logs:
            th = self.start(w)
            id = self.client.add(t, "x")
            wait_for(lambda: self.client.stats(t)["topics"][t]["finished"] == 1, 5, "the finish")
            self.assertGone(id)
            before = request_counts()
            time.sleep(0.2)
            self.assertTrue(th.is_alive(), "the worker is not in its long-poll")
            w.stop()
            th.join(10)
            self.assertFalse(th.is_alive())
        after = request_counts()
        self.assertEqual(handled, [id])
        self.assertEqual(requests_between(before, after, "finish", "not_found"), 1)
        self.assertEqual(requests_between(before, after, "finish"), 1)
        self.assertIn("DEBUG:delayq.worker:job %s was finished already (by a request whose "
                      "answer was lost)" % id, logs.output)
        self.assertEqual([l for l in logs.output if l.startswith(("WARNING", "ERROR"))], [])
        self.assertEqual(self.client.stats(t)["topics"][t]["reserved"], 0)

    def test_carried_finish_survives_an_outage(self):
        # The handler makes Redis read-only (a replica of a dead primary):
        # the next pops, carrying the finish, answer 503 and changed
        # nothing; once Redis takes writes again, a pop carries it again and
        # it is done, with no finish request of its own.
        t = unique("w-outage")
        dead = str(free_port())

        def handler(job):
            DEPLOYMENT.redis("REPLICAOF", "127.0.0.1", dead)

        self.addCleanup(DEPLOYMENT.redis, "REPLICAOF", "NO", "ONE")
        w = Worker(Client(URL, token=TOKEN), t, handler, poll_timeout=1, error_pause=0.05)
        id = self.client.add(t, "x")
        before = request_counts()
        with self.assertLogs("delayq.worker", "DEBUG") as logs:
            self.start(w)
            wait_for(lambda: sum("pop failed" in l for l in logs.output) >= 2, 15, "2 failed pops")
            self.assertEqual(self.client.get(id).state, "reserved")  # reads still work
            DEPLOYMENT.redis("REPLICAOF", "NO", "ONE")
            done = "DEBUG:delayq.worker:job %s finished (attempt 1)" % id
            wait_for(lambda: done in logs.output, 15, "the answer of the pop that finished it")
            w.stop()
        after = request_counts()
        self.assertGone(id)
        self.assertGreaterEqual(requests_between(before, after, "pop", "unavailable"), 2)
        self.assertEqual(requests_between(before, after, "finish"), 0)
        failed = [l for l in logs.output if "pop failed" in l]
        self.assertTrue(all(l.startswith("WARNING:") and "unavailable" in l for l in failed),
                        failed)
        self.assertFalse([l for l in logs.output if "gone" in l or l.startswith("ERROR")])

    def test_poll_errors_pause_and_continue(self):
        w = Worker(Client("http://127.0.0.1:%d" % free_port()), "t", lambda j: None,
                   error_pause=0.05)
        t0 = time.monotonic()
        self.assertFalse(w.run_once())  # ConnectFailed: logged, paused
        self.assertFalse(w.run_once())
        self.assertGreaterEqual(time.monotonic() - t0, 0.1)
        with self.assertRaises(ValueError):
            Worker(self.client, "t", lambda j: None, poll_timeout=61)
        bad = Worker(self.client, "bad topic", lambda j: None)
        with self.assertRaises(BadRequest):
            bad.run()


# The worker of the signal tests, run as its own process.
CHILD = r"""
import logging, sys, time
sys.path.insert(0, sys.argv[1])
from delayq import Client, Worker
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
mode = sys.argv[3]

def handler(job):
    print("handling", job.id, flush=True)
    time.sleep(1.0)
    if mode == "fail":
        raise RuntimeError("handler failed")
    print("handled", job.id, flush=True)

Worker(Client(), sys.argv[2], handler, backoff=[30], poll_timeout=5).run()
print("exited cleanly", flush=True)
"""


class WorkerSignals(Base):
    def child(self, topic, mode):
        env = dict(os.environ, DELAYQ_URL=URL, DELAYQ_TOKEN=TOKEN, PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.Popen([sys.executable, "-c", CHILD, CLIENT_DIR, topic, mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        return p

    def wait_line(self, p, prefix):
        line = p.stdout.readline().decode()
        self.assertTrue(line.startswith(prefix), "child said %r, stderr: %s" %
                        (line, p.stderr.read().decode() if p.poll() is not None else ""))
        return line

    def finish(self, p, sig, within):
        t0 = time.monotonic()
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=10 * SLOW)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("the worker did not exit on %s: %s" % (sig, err.decode()))
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, err.decode())
        self.assertLess(took, within * SLOW, "took %.2f s to stop" % took)
        return out.decode(), err.decode()

    def test_sigterm_mid_job_finishes_it(self):
        t = unique("sig-ok")
        p = self.child(t, "ok")
        id = self.client.add(t, "in flight")
        self.wait_line(p, "handling " + id)
        out, err = self.finish(p, signal.SIGTERM, 3)
        self.assertIn("handled " + id, out)
        self.assertIn("exited cleanly", out)
        self.assertGone(id)
        self.assertEqual(self.client.stats(t)["topics"][t]["finished"], 1)

    def test_sigterm_mid_job_failure_releases_it(self):
        t = unique("sig-fail")
        p = self.child(t, "fail")
        id = self.client.add(t, "in flight", ttr=60)
        self.wait_line(p, "handling " + id)
        out, err = self.finish(p, signal.SIGTERM, 3)
        self.assertIn("exited cleanly", out)
        info = self.client.get(id)
        self.assertEqual((info.state, info.attempts), ("delay", 1), err)
        self.assertAlmostEqual(info.due / 1000.0, time.time() + 30, delta=5)
        self.client.delete(id)

    def test_signal_while_polling_stops_at_once(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            t = unique("sig-idle")
            p = self.child(t, "ok")
            # wait until it is in its long-poll: a job added now is handled
            id = self.client.add(t, "first")
            self.wait_line(p, "handling " + id)
            self.wait_line(p, "handled " + id)
            wait_for(lambda: self.client.stats(t)["topics"][t]["finished"] == 1, 5, "finish")
            time.sleep(0.3)
            out, err = self.finish(p, sig, 1.0)
            self.assertIn("exited cleanly", out)
            self.assertEqual(self.client.stats(t)["topics"][t]["reserved"], 0)


# --------------------------------------------------------------------------
# transport details against a scripted server
# --------------------------------------------------------------------------

class Scripted(http.server.ThreadingHTTPServer):
    """Answers each request with script(conn_no, n_in_conn, method, path,
    body): (status, body bytes, close_after) or None to drop the connection
    without answering. Records every request it read."""

    daemon_threads = True

    def __init__(self, script):
        self.script = script
        self.requests = []
        self.conns = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.url = "http://127.0.0.1:%d" % self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def paths(self):
        return [(c, r["path"]) for c, r in self.requests]

    def handle_error(self, request, client_address):
        pass  # a client that gave up (timeout tests) breaks the pipe: expected


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.conns += 1
            self.conn_no = self.server.conns
        self.n = 0

    def _any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.n += 1
        with self.server.lock:
            self.server.requests.append((self.conn_no, {
                "method": self.command, "path": self.path, "body": body,
                "headers": {k.lower(): v for k, v in self.headers.items()}}))
        action = self.server.script(self.conn_no, self.n, self.command, self.path, body)
        if action is None:
            self.close_connection = True
            return
        status, data, close = action
        if isinstance(data, float):  # a pause before answering
            time.sleep(data)
            data = b'{"success":true,"id":null,"value":null}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if close:  # close without saying so (an idle timeout)
            self.close_connection = True

    do_GET = do_POST = _any


OK = b'{"success":true,"id":"j1"}'
POPPED = b'{"success":true,"id":"j1","topic":"t","value":"v","attempts":1,"ttr":60}'


class Transport(unittest.TestCase):
    def serve(self, script):
        s = Scripted(script)
        self.addCleanup(s.server_close)
        self.addCleanup(s.shutdown)
        return s

    def test_request_shape(self):
        s = self.serve(lambda c, n, m, p, b: (200, OK, False))
        with Client(s.url + "/prefix/", token="tok") as c:
            self.assertEqual(c.add("t", {"b": "\u00e9"}, id="j1", delay=1.5, ttr=timedelta(seconds=2)),
                             "j1")
            c.finish("j1")
        (conn, r), (conn2, r2) = s.requests
        self.assertEqual(conn, conn2, "not one keep-alive connection")
        self.assertEqual((r["method"], r["path"], r2["path"]), ("POST", "/prefix/add",
                                                                "/prefix/finish"))
        self.assertEqual(r["headers"]["authorization"], "Bearer tok")
        self.assertEqual(r["headers"]["content-type"], "application/json")
        self.assertEqual(json.loads(r["body"].decode("utf-8")),
                         {"topic": "t", "body": {"b": "\u00e9"}, "id": "j1", "delay": 1.5, "ttr": 2.0})
        with Client(s.url) as c:
            c.health()
        self.assertNotIn("authorization", s.requests[-1][1]["headers"])
        self.assertEqual(s.requests[-1][1]["method"], "GET")

    def test_server_errors(self):
        answers = {
            "/add": (504, b'{"success":false,"code":"timeout","error":"no answer from redis"}'),
            "/get": (500, b'{"success":false,"code":"internal","error":"impossible state"}'),
            "/stats": (502, b"<html>Bad Gateway</html>"),
            "/finish": (200, b"not json"),
            "/delete": (418, b'{"success":false,"code":"teapot","error":"short and stout"}'),
            "/touch": (503, b""),
        }
        s = self.serve(lambda c, n, m, p, b: answers[p] + (False,))
        c = Client(s.url)
        with self.assertRaises(Timeout) as cm:
            c.add("t", 1, id="x")
        self.assertEqual((cm.exception.status, cm.exception.code), (504, "timeout"))
        self.assertIsInstance(cm.exception, ServerError)
        with self.assertRaises(ServerError) as cm:
            c.get("x")
        self.assertEqual((type(cm.exception), cm.exception.code), (ServerError, "internal"))
        with self.assertRaises(ServerError) as cm:
            c.stats()
        self.assertEqual((cm.exception.status, cm.exception.code), (502, "http_502"))
        self.assertIn("Bad Gateway", cm.exception.message)
        with self.assertRaises(ServerError):
            c.finish("x")
        with self.assertRaises(ClientError) as cm:
            c.delete("x")
        self.assertEqual((type(cm.exception), cm.exception.code), (ClientError, "teapot"))
        with self.assertRaises(Unavailable):
            c.touch("x")
        self.assertEqual(len({conn for conn, _ in s.requests}), 1)

    def test_idle_connection_closed_by_server(self):
        # every answer is followed by a silent close, as an idle timeout does
        s = self.serve(lambda c, n, m, p, b: (200, POPPED if p == "/pop" else OK, True))
        c = Client(s.url)
        for _ in range(3):
            self.assertEqual(c.pop("t").id, "j1")
            time.sleep(0.2)  # the close has arrived by now
        self.assertEqual(s.paths(), [(1, "/pop"), (2, "/pop"), (3, "/pop")])

    def test_dropped_under_a_request(self):
        # the 2nd request of every connection is read and then dropped
        s = self.serve(lambda c, n, m, p, b: None if n == 2 else
                       (200, POPPED if p == "/pop" else OK, False))
        c = Client(s.url)

        def fresh():
            c.close()
            c.health()  # request 1 of a new connection
            del s.requests[:]

        # read-only or idempotent: sent once more on a new connection
        fresh()
        self.assertEqual(c.stats(), {"id": "j1"})
        self.assertEqual([p for _, p in s.paths()], ["/stats", "/stats"])
        for call, path in ((lambda: c.jobs("t", "ready"), "/jobs"),
                           (lambda: c.pause("t"), "/pause"), (lambda: c.resume("t"), "/resume")):
            fresh()
            call()
            self.assertEqual([p for _, p in s.paths()], [path, path])
        # add with an explicit id: resent (and a 409 then means it took)
        fresh()
        self.assertEqual(c.add("t", 1, id="j1"), "j1")
        self.assertEqual([p for _, p in s.paths()], ["/add", "/add"])
        # pop, add without id, finish, release, reschedule: never sent twice
        for call in (lambda: c.pop("t"), lambda: c.add("t", 1), lambda: c.finish("j1"),
                     lambda: c.release("j1"), lambda: c.kick("t"),
                     lambda: c.pop("t", finish="j0"), lambda: c.reschedule("j1", delay=1)):
            fresh()
            with self.assertRaises(ConnectionLost) as cm:
                call()
            self.assertIsInstance(cm.exception, Timeout)
            self.assertIsNone(cm.exception.status)
            self.assertEqual(len(s.requests), 1, s.paths())

    def test_resent_add_conflict_means_it_took(self):
        def script(c, n, m, p, b):
            if c == 3:
                return (409, b'{"success":false,"code":"conflict","error":"exists"}', False)
            if n == 2:
                return None
            return (200, OK, False)
        s = self.serve(script)
        c = Client(s.url)
        c.health()  # connection 1
        c.close()
        c.health()  # connection 2; its 2nd request is dropped, the resend gets 409
        self.assertEqual(c.add("t", 1, id="k1"), "k1")
        self.assertEqual([p for _, p in s.paths()], ["/health", "/health", "/add", "/add"])
        with self.assertRaises(Conflict):
            c.add("t", 1, id="k1")  # a first send answered 409 is a real conflict

    def test_pop_finish_field(self):
        empty = b'{"success":true,"id":null,"value":null,"finished":[]}'
        s = self.serve(lambda c, n, m, p, b: (200, empty, False))
        c = Client(s.url)
        self.assertEqual(c.pop("t", finish="j1"), (None, []))
        c.pop(["t", "u"], timeout=2, finish=["a", "b"])
        self.assertEqual(c.pop_many("t", 3, finish=("c",)), ([], []))
        self.assertEqual(c.pop("t", finish=[]), (None, []))
        self.assertIsNone(c.pop("t", finish=None))
        self.assertEqual([json.loads(r["body"].decode()) for _, r in s.requests], [
            {"topic": "t", "finish": "j1"},
            {"topics": ["t", "u"], "timeout": 2, "finish": ["a", "b"]},
            {"topic": "t", "count": 3, "finish": ["c"]},
            {"topic": "t"},
            {"topic": "t"},
        ])

    def test_pop_finish_answer_without_finished(self):
        s = self.serve(lambda c, n, m, p, b: (200, POPPED, False))
        with self.assertRaises(ServerError) as cm:
            Client(s.url).pop("t", finish="j0")
        self.assertIn("'finished'", cm.exception.message)

    def run_worker(self, script, handler=lambda job: None, until=None):
        """A Worker against a scripted server, until `until(requests)` holds
        (or the handler stops it); returns the requests as (path, fields)
        and the log lines."""
        s = self.serve(script)
        w = Worker(Client(s.url), "t", handler, poll_timeout=1, error_pause=0.01,
                   handle_signals=False)
        self.worker = w
        th = threading.Thread(target=w.run, daemon=True)
        with self.assertLogs("delayq.worker", "DEBUG") as logs:
            th.start()
            if until is not None:
                wait_for(lambda: until(s.requests), 10, "the requests")
                w.stop()
            th.join(10)
        self.assertFalse(th.is_alive())
        return ([(r["path"], json.loads(r["body"].decode()) if r["body"] else None)
                 for _, r in s.requests], logs.output)

    def test_worker_carries_the_finish_again_after_504_and_503(self):
        answers = [
            (200, POPPED),  # j1
            (504, b'{"success":false,"code":"timeout","error":"no answer from redis"}'),
            (503, b'{"success":false,"code":"unavailable","error":"redis is down"}'),
            (200, b'{"success":true,"id":null,"value":null,"finished":[{"id":"j1",'
                  b'"success":false,"code":"not_found","error":"no job with this id"}]}'),
        ]
        pops = []

        def script(c, n, m, p, b):
            if p != "/pop":
                return (200, OK, False)
            pops.append(p)
            if len(pops) <= len(answers):
                return answers[len(pops) - 1] + (False,)
            return (200, 0.05, False)  # empty, carrying nothing

        reqs, logs = self.run_worker(script, until=lambda r: len(pops) >= 6)
        self.assertEqual([p for p, _ in reqs], ["/pop"] * len(reqs), "a request other than pop")
        self.assertEqual([f.get("finish") for _, f in reqs[:6]],
                         [None, ["j1"], ["j1"], ["j1"], None, None])
        self.assertEqual(len([l for l in logs if "pop failed" in l]), 2, logs)
        # the finish after the 504 may have been done: its not_found is no news
        self.assertIn("DEBUG:delayq.worker:job j1 was finished already (by a request whose "
                      "answer was lost)", logs)
        self.assertFalse([l for l in logs if "gone" in l], logs)

    def test_worker_with_a_server_without_finish_and_pop(self):
        refused = (400, b'{"success":false,"code":"bad_request",'
                        b'"error":"field \'finish\' is not a field of pop"}', False)
        jobs = [POPPED, POPPED.replace(b'"j1"', b'"j2"')]

        def script(c, n, m, p, b):
            fields = json.loads(b.decode())
            if p == "/finish":
                return (200, json.dumps({"success": True, "id": fields["id"]}).encode(), False)
            if "finish" in fields:
                return refused
            return (200, jobs.pop(0), False) if jobs else (200, 0.05, False)

        handled = []

        def handler(job):
            handled.append(job.id)
            if len(handled) == 2:
                self.worker.stop()

        reqs, logs = self.run_worker(script, handler)
        self.assertEqual(handled, ["j1", "j2"])
        self.assertEqual(reqs, [("/pop", {"topic": "t", "timeout": 1}),
                                ("/pop", {"topic": "t", "timeout": 1, "finish": ["j1"]}),
                                ("/finish", {"id": "j1"}),
                                ("/pop", {"topic": "t", "timeout": 1}),
                                ("/finish", {"id": "j2"})])
        self.assertEqual([l for l in logs if l.startswith("WARNING")], [
            "WARNING:delayq.worker:the server does not take finish on pop (field 'finish' is not "
            "a field of pop); finishing each job with a request of its own"])

    def test_http_timeout_covers_the_long_poll(self):
        s = self.serve(lambda c, n, m, p, b: (200, 0.8, False))
        c = Client(s.url, timeout=0.4)
        t0 = time.monotonic()
        self.assertIsNone(c.pop("t", timeout=1))  # waits 0.8 s: within 1 + 0.4
        self.assertGreaterEqual(time.monotonic() - t0, 0.75)
        with self.assertRaises(ConnectionLost) as cm:
            c.get("x")  # 0.8 s is over the 0.4 s timeout
        self.assertIsInstance(cm.exception, Timeout)


# --------------------------------------------------------------------------
# installing the package offline
# --------------------------------------------------------------------------

def _build_tools(python):
    """None when `python` can build this package without an index (setuptools
    >= 61 for [project] in pyproject.toml, and wheel, which setuptools before
    70.1 needs for bdist_wheel), else what is missing."""
    r = subprocess.run([python, "-c",
                        "import setuptools, wheel; "
                        "print(setuptools.__version__.split('.')[0])"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        return "setuptools or wheel not importable"
    if int(r.stdout.decode().strip()) < 61:
        return "setuptools %s < 61" % r.stdout.decode().strip()
    return None


class OfflineInstall(unittest.TestCase):
    """The README's offline route: `pip install --no-index
    --no-build-isolation ./clients/python` with the build tools Debian 12
    ships (python3-setuptools 66, python3-wheel 0.38), here into a venv that
    sees them (--system-site-packages). The network is out of reach: pip's
    proxies point at a closed loopback port. Each Python that has the build
    tools is tried: the one running the tests and Debian's /usr/bin/python3."""

    def pythons(self):
        found, missing = [], []
        for py in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
            if not os.path.exists(py):
                continue
            why = _build_tools(py)
            (missing if why else found).append((py, why))
        if not found:
            self.skipTest("no Python with setuptools >= 61 and wheel: %r" % missing)
        return [py for py, _ in found]

    def test_pip_install_offline_into_a_venv(self):
        for py in self.pythons():
            with self.subTest(python=py):
                self.install(py)

    def install(self, python):
        work = tempfile.mkdtemp(prefix="delayq-pip-")
        self.addCleanup(shutil.rmtree, work, True)
        # a copy: setuptools writes build/ and *.egg-info next to the sources
        src = os.path.join(work, "src")
        shutil.copytree(CLIENT_DIR, src, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "build", "*.egg-info"))
        venv = os.path.join(work, "venv")
        r = subprocess.run([python, "-m", "venv", "--system-site-packages", venv],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(r.returncode, 0, r.stdout.decode("utf-8", "replace"))
        vpy = os.path.join(venv, "bin", "python")
        dead = "http://127.0.0.1:%d" % free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PIP_") and k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(PIP_FIND_LINKS="", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1",
                   http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead,
                   PIP_CONFIG_FILE=os.devnull)
        r = subprocess.run([vpy, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                            src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           cwd=work, timeout=300)
        out = r.stdout.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, out)
        self.assertIn("Successfully installed delayq-%s" % delayq.__version__, out)
        # the installed copy, not this checkout, answers a real delayq
        probe = ("import delayq, os, sys; c = delayq.Client(sys.argv[1], token=sys.argv[2]); "
                 "print(delayq.__file__); "
                 "print(os.path.exists(os.path.join(os.path.dirname(delayq.__file__), "
                 "'py.typed'))); print(c.health())")
        r = subprocess.run([vpy, "-c", probe, URL, TOKEN], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=env, cwd=work, timeout=60)
        lines = r.stdout.decode("utf-8", "replace").splitlines()
        self.assertEqual(r.returncode, 0, lines)
        self.assertTrue(lines[0].startswith(os.path.realpath(venv)) or
                        lines[0].startswith(venv), lines)
        self.assertEqual(lines[1:], ["True", "True"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""Job lifecycle over time: TTR redelivery, retries -> buried -> kick,
release with delay, touch, delay precision and long-polling."""

import json
import os
import socket
import sys
import threading
import time

from dqtest import DeploymentTestCase, SLOW, fcgi_client, main, unique


def now_ms():
    return int(time.time() * 1000)


class LifecycleTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=16)

    def pop(self, topic, **kw):
        st, r = self.c.req("pop", topic=topic, **kw)
        self.assertOk(st, r)
        return r

    def get(self, jid):
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        return r

    def stats(self, topic):
        st, r = self.c.req("stats", topic=topic)
        self.assertOk(st, r)
        return r["topics"][topic]

    def sleep_until(self, t):
        d = t - time.monotonic()
        if d > 0:
            time.sleep(d)

    # ------------------------------------------------------------ TTR

    def test_ttr_redelivery(self):
        t = unique("ttr")
        jid = self.add(t, {"v": 1}, ttr=1)
        t_pop = time.monotonic()
        r = self.pop(t)
        self.assertEqual((r["id"], r["attempts"], r["ttr"]), (jid, 1, 1))
        # never to two consumers within one TTR window
        self.assertIsNone(self.pop(t)["id"])
        self.sleep_until(t_pop + 0.7)
        self.assertIsNone(self.pop(t)["id"], "redelivered before its TTR passed")
        self.assertEqual(self.get(jid)["state"], "reserved")
        self.sleep_until(t_pop + 1.3)
        r = self.pop(t)
        self.assertEqual(r["id"], jid, "not redelivered 1.3 s after a pop with ttr 1")
        self.assertEqual(r["attempts"], 2)
        self.assertEqual(r["value"], {"v": 1})
        s = self.stats(t)
        self.assertEqual((s["redelivered"], s["reserved"]), (1, 1))
        self.assertOk(*self.c.req("finish", id=jid))
        st, r = self.c.req("get", id=jid)
        self.assertError(st, r, 404, "not_found")

    def test_late_finish_prevents_further_delivery(self):
        t = unique("late")
        jid = self.add(t, "x", ttr=0.5)
        t_pop = time.monotonic()
        self.assertEqual(self.pop(t)["id"], jid)
        self.sleep_until(t_pop + 0.9)
        r = self.pop(t)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2))
        # the first consumer's late finish removes the job
        self.assertOk(*self.c.req("finish", id=jid))
        time.sleep(0.9)
        self.assertIsNone(self.pop(t)["id"])
        s = self.stats(t)
        self.assertEqual((s["ready"], s["reserved"], s["delay"], s["finished"]), (0, 0, 0, 1))

    def test_retries_bury_kick(self):
        t = unique("retry")
        jid = self.add(t, "r", ttr=0.5, retries=1)
        t0 = time.monotonic()
        r = self.pop(t)
        self.assertEqual((r["id"], r["attempts"]), (jid, 1))
        self.sleep_until(t0 + 0.85)
        r = self.pop(t)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2), "the one allowed redelivery")
        t1 = time.monotonic()
        self.sleep_until(t1 + 0.85)
        r = self.pop(t)
        self.assertIsNone(r["id"], "delivered a third time despite retries 1: %r" % r)
        g = self.get(jid)
        self.assertEqual(g["state"], "buried")
        self.assertEqual(g["attempts"], 2)
        s = self.stats(t)
        self.assertEqual((s["buried"], s["ready"], s["reserved"], s["redelivered"]), (1, 0, 0, 1))
        st, r = self.c.req("kick", topic=t, count=10)
        self.assertOk(st, r)
        self.assertEqual(r["kicked"], 1)
        self.assertEqual(self.get(jid)["state"], "ready")
        r = self.pop(t)
        self.assertEqual(r["id"], jid)
        print("attempts after kick: %s" % r["attempts"])
        self.assertOk(*self.c.req("finish", id=jid))

    def test_release_after_last_retry_buries(self):
        t = unique("relbury")
        jid = self.add(t, "r", retries=0)
        self.assertEqual(self.pop(t)["id"], jid)
        st, r = self.c.req("release", id=jid)
        self.assertOk(st, r)
        self.assertEqual(r["state"], "buried")
        self.assertEqual(self.get(jid)["state"], "buried")
        self.assertIsNone(self.pop(t)["id"])

    # ------------------------------------------------------------ release / touch

    def test_release_with_delay(self):
        t = unique("rel")
        jid = self.add(t, "v", ttr=30)
        self.assertEqual(self.pop(t)["id"], jid)
        t0 = time.monotonic()
        st, r = self.c.req("release", id=jid, delay=0.5)
        self.assertOk(st, r)
        self.assertEqual(r["state"], "delay")
        g = self.get(jid)
        self.assertEqual(g["state"], "delay")
        self.assertLessEqual(abs(g["due"] - (now_ms() + 500)), 150, g)
        self.assertIsNone(self.pop(t)["id"])
        self.sleep_until(t0 + 0.35)
        self.assertIsNone(self.pop(t)["id"], "released job ready before its delay")
        r = self.pop(t, timeout=2)
        dt = time.monotonic() - t0
        print("released with delay 0.5 s, popped after %.3f s" % dt)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2))
        self.assertLess(dt, 0.8)
        st, r = self.c.req("release", id=jid, delay=0)
        self.assertEqual(r["state"], "ready")
        self.assertEqual(self.pop(t)["id"], jid)
        self.assertOk(*self.c.req("finish", id=jid))

    def test_touch_extends(self):
        t = unique("touch")
        jid = self.add(t, "v", ttr=1)
        t0 = time.monotonic()
        self.assertEqual(self.pop(t)["id"], jid)
        d0 = self.get(jid)["due"]
        self.sleep_until(t0 + 0.7)
        st, r = self.c.req("touch", id=jid)
        self.assertOk(st, r)
        t_touch = time.monotonic()
        self.assertGreaterEqual(r["due"] - d0, 600, "touch moved the deadline by %d ms" %
                                (r["due"] - d0))
        self.assertLessEqual(abs(r["due"] - (now_ms() + 1000)), 150)
        # past the original deadline (t0+1), before the new one (t_touch+1)
        self.sleep_until(t0 + 1.35)
        self.assertIsNone(self.pop(t)["id"], "redelivered despite touch")
        self.assertEqual(self.get(jid)["state"], "reserved")
        self.sleep_until(t_touch + 1.3)
        r = self.pop(t)
        self.assertEqual((r["id"], r["attempts"]), (jid, 2), "not redelivered after touched TTR")
        self.assertOk(*self.c.req("finish", id=jid))

    # ------------------------------------------------------------ delay precision

    def test_delay_precision(self):
        conn = self.c.new_http()
        figures = []
        for run in range(2):
            t = unique("prec")
            st, r = self.c.req("add", conn=conn, topic=t, body=run, delay=1)
            t_add = time.monotonic()  # the add response time
            self.assertOk(st, r)
            jid = r["id"]
            last_empty_start = None
            got = None
            while time.monotonic() - t_add < 3:
                s0 = time.monotonic()
                st, p = self.c.req("pop", conn=conn, topic=t)
                s1 = time.monotonic()
                self.assertOk(st, p)
                if p["id"] is not None:
                    got = (s0 - t_add, s1 - t_add, p["id"])
                    break
                last_empty_start = s0 - t_add
                time.sleep(0.02)
            self.assertIsNotNone(got, "job with delay 1 s never became ready")
            figures.append("run %d: last empty pop sent at %.3f s, first hit sent %.3f answered "
                           "%.3f s" % (run, last_empty_start, got[0], got[1]))
            self.assertEqual(got[2], jid)
            self.assertGreaterEqual(got[1], 0.9, "ready too early")
            self.assertLess(last_empty_start, 1.1, "still not ready 1.1 s after the add")
            self.c.req("finish", conn=conn, id=jid)
        conn.close()
        print("delay precision: " + "; ".join(figures))

    # ------------------------------------------------------------ long-poll

    def test_long_poll_wakes_on_add(self):
        t = unique("lp")
        out = {}

        def waiter():
            conn = self.c.new_http()
            s0 = time.monotonic()
            out["res"] = self.c.req("pop", conn=conn, topic=t, timeout=5)
            out["t_end"] = time.monotonic()
            out["t_start"] = s0
            conn.close()

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.5)
        self.assertNotIn("res", out, "pop with timeout 5 answered before any job existed")
        t_add0 = time.monotonic()
        jid = self.add(t, {"lp": 1})
        t_add = time.monotonic()
        th.join(10)
        self.assertFalse(th.is_alive())
        st, r = out["res"]
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["value"]), (jid, {"lp": 1}))
        lat = out["t_end"] - t_add
        print("long-poll woke %.1f ms after the add response (add took %.1f ms)" %
              (lat * 1000, (t_add - t_add0) * 1000))
        self.assertGreater(out["t_end"], t_add0)
        self.assertLess(lat, 0.2 * SLOW)

    def test_long_poll_wakes_on_due(self):
        t = unique("lpd")
        out = {}

        def waiter():
            conn = self.c.new_http()
            out["res"] = self.c.req("pop", conn=conn, topic=t, timeout=5)
            out["t_end"] = time.monotonic()
            conn.close()

        jid = self.add(t, "due", delay=0.5)
        t_add = time.monotonic()
        th = threading.Thread(target=waiter)
        th.start()
        th.join(10)
        st, r = out["res"]
        self.assertEqual(r["id"], jid)
        dt = out["t_end"] - t_add
        print("long-poll on a delayed job (0.5 s) answered after %.3f s" % dt)
        self.assertGreaterEqual(dt, 0.4)
        self.assertLess(dt, 0.7 * SLOW)

    def test_abandoned_long_poll_takes_no_job(self):
        """A client that disconnects during a long-poll leaves no waiting pop
        behind to reserve a job for nobody."""
        t = unique("ghost")
        s = socket.create_connection(("127.0.0.1", self.c.http_port))
        body = json.dumps({"topic": t, "timeout": 5}).encode()
        s.sendall(b"POST /pop HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" %
                  (len(body), body))
        time.sleep(0.3)
        s.close()
        time.sleep(1.5 * SLOW)  # a waiting pop notices within a second
        self.assertOk(*self.c.req("add", topic=t, id=t, body=1))
        time.sleep(0.2)
        st, r = self.c.req("get", id=t)
        self.assertOk(st, r)
        self.assertEqual(r["state"], "ready", "an abandoned long-poll reserved the job")
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r.get("id"), t)

    def test_connections_closed_as_asked_are_no_error(self):
        """A FastCGI client that does not ask to keep its connection (nginx
        without fastcgi_keep_conn) has it closed after each answer: no
        warning for that."""
        for i in range(3):
            st, body = fcgi_client.request(self.c.sock(), "POST", "/add",
                                           b'{"topic":"kc","id":"kc%d","body":1}' % i,
                                           keep_conn=False)
            self.assertEqual(st, 200, body)
        with open(self.c.fcgi_log()) as f:
            self.assertNotIn("libfcgi saw an error", f.read())

    def test_long_poll_empty_timeout(self):
        t = unique("lpe")
        t0 = time.monotonic()
        r = self.pop(t, timeout=1)
        dt = time.monotonic() - t0
        print("empty long-poll with timeout 1 took %.3f s" % dt)
        self.assertEqual(r, {"success": True, "id": None, "value": None})
        self.assertGreaterEqual(dt, 0.9)
        self.assertLessEqual(dt, 2.5)
        t0 = time.monotonic()
        r = self.pop(t, timeout=0.3, count=5)
        dt = time.monotonic() - t0
        self.assertEqual(r, {"success": True, "jobs": []})
        self.assertGreaterEqual(dt, 0.25)
        self.assertLessEqual(dt, 1.5)


    # ------------------------------------------------------------ finish-and-pop

    def test_finish_and_pop(self):
        """pop with finish: the jobs named are finished before the next is
        taken, in one request; each id has its outcome, in request order."""
        t = unique("fap")
        ids = [self.add(t, {"n": i}) for i in range(3)]
        # (jobs of one topic come in order only within a shard)
        r = self.pop(t)
        first = r["id"]
        self.assertIn(first, ids)
        self.assertNotIn("finished", r, "a pop without finish answers as before")
        r = self.pop(t, finish=first)
        second = r["id"]
        self.assertIn(second, set(ids) - {first})
        self.assertEqual(r["value"], {"n": ids.index(second)})
        self.assertEqual(r["finished"], [{"id": first, "success": True}])
        st, g = self.c.req("get", id=first)
        self.assertError(st, g, 404, "not_found")
        # a list, with an unknown id and one already finished; count form
        r = self.pop(t, finish=[second, "fap-nope", first], count=5)
        [third] = set(ids) - {first, second}
        self.assertEqual([j["id"] for j in r["jobs"]], [third])
        self.assertEqual([(f["id"], f["success"], f.get("code")) for f in r["finished"]],
                         [(second, True, None), ("fap-nope", False, "not_found"),
                          (first, False, "not_found")])
        # the last one, with nothing left to take
        r = self.pop(t, finish=[third])
        self.assertEqual((r["id"], r["value"], r["finished"]),
                         (None, None, [{"id": third, "success": True}]))
        s = self.stats(t)
        self.assertEqual((s["finished"], s["reserved"], s["ready"]), (3, 0, 0))

    def test_finish_and_pop_bad_finish_changes_nothing(self):
        t = unique("fapbad")
        jid = self.add(t, "x")
        self.assertEqual(self.pop(t)["id"], jid)
        other = self.add(t, "y")
        for bad, rule in ((5, "must be an id or an array"), ([], "array of 1 to 1000 ids"),
                          ([jid, 7], "'finish[1]' must be a string"),
                          ([jid, "a b"], "'finish[1]' must be 1 to 256 characters"),
                          ("", "'finish' must be 1 to 256 characters"),
                          ([jid] * 1001, "array of 1 to 1000 ids")):
            st, r = self.c.req("pop", topic=t, finish=bad)
            self.assertError(st, r, 400, "bad_request")
            self.assertIn(rule, r["error"])
        self.assertEqual(self.get(jid)["state"], "reserved")
        self.assertEqual(self.get(other)["state"], "ready")

    def test_finish_and_pop_long_poll(self):
        """With a timeout, the finish happens at once; the answer, with its
        outcome, comes with the next job."""
        t = unique("faplp")
        jid = self.add(t, "first")
        self.assertEqual(self.pop(t)["id"], jid)
        out = {}

        def waiter():
            conn = self.c.new_http()
            out["res"] = self.c.req("pop", conn=conn, topic=t, timeout=5, finish=jid)
            conn.close()

        th = threading.Thread(target=waiter)
        th.start()
        deadline = time.monotonic() + 3 * SLOW
        while time.monotonic() < deadline:
            st, g = self.c.req("get", id=jid)
            if st == 404:
                break
            time.sleep(0.02)
        self.assertEqual(st, 404, "the finish waited for the long-poll to end")
        self.assertNotIn("res", out)
        nxt = self.add(t, "second")
        th.join(10)
        self.assertFalse(th.is_alive())
        st, r = out["res"]
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["value"]), (nxt, "second"))
        self.assertEqual(r["finished"], [{"id": jid, "success": True}])
        self.assertEqual(self.stats(t)["finished"], 1, "finished once, not on every wake-up")

if __name__ == "__main__":
    main()

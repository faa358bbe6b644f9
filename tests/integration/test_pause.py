"""pause / resume through nginx (docs/PROTOCOL.md, "pause / resume") and the
metrics an operator alerts on (docs/OPERATIONS.md, "Monitoring"): a paused
topic gives pop nothing in any shard while other topics work, a parked
long-poll on it keeps waiting and gets its job as soon as the topic resumes,
its callback jobs reach a real local receiver only after resume, stats and
/metrics say it is paused, and the age of the oldest ready job, the oldest
overdue job and the timer's lag move as jobs wait (a killed timer makes jobs
overdue)."""

import re
import time

from dqtest import SLOW, LongPoll, main, unique
from dqtest.receiver import ReceiverTestCase


def metrics(d):
    """/metrics as {(name, labels text): value}."""
    st, _, data = d.request("GET", "/metrics")
    assert st == 200, (st, data)
    out = {}
    for line in data.decode().splitlines():
        m = re.match(r"^([a-z_]+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


class Pause(ReceiverTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_pushers=1, push_allow="*,loopback",
                         timer_lease_ms=2000)

    def pause(self, topic, cmd="pause"):
        st, r = self.c.req(cmd, topic=topic)
        self.assertOk(st, r)
        self.assertEqual(r, {"success": True, "topic": topic, "paused": cmd == "pause"})

    def test_pop_of_a_paused_topic_is_empty_while_others_work(self):
        a, b = unique("pa"), unique("pb")
        self.pause(a)
        ja = [self.add(topic=a, body=i) for i in range(4)]  # spread over the shards
        jb = self.add(topic=b, body=1)
        st, r = self.c.req("pop", topic=a, count=10)
        self.assertOk(st, r)
        self.assertEqual(r["jobs"], [], "a paused topic gives nothing")
        st, r = self.c.req("pop", topics=[a, b], count=10)
        self.assertEqual([j["id"] for j in r["jobs"]], [jb], "other topics work")
        st, r = self.c.req("stats", topic=a)
        self.assertOk(st, r)
        self.assertIs(r["topics"][a]["paused"], True)
        self.assertEqual(r["topics"][a]["ready"], 4, "due jobs still become ready")
        st, r = self.c.req("stats", topic=b)
        self.assertIs(r["topics"][b]["paused"], False)
        self.pause(a, "pause")  # idempotent
        self.pause(a, "resume")
        st, r = self.c.req("stats", topic=a)
        self.assertIs(r["topics"][a]["paused"], False)
        st, r = self.c.req("pop", topic=a, count=10)
        self.assertEqual(sorted(j["id"] for j in r["jobs"]), sorted(ja))

    def test_parked_long_poll_waits_and_gets_the_job_right_after_resume(self):
        t = unique("pl")
        self.pause(t)
        jid = self.add(topic=t, body={"n": 1})
        poll = LongPoll(self.c, topic=t, timeout=20).start()
        time.sleep(2.5)  # two wake-ups a second at least: each must find nothing
        self.assertIsNone(poll.answer, "a long-poll on a paused topic took a job")
        t0 = time.monotonic()
        self.pause(t, "resume")
        st, r = poll.wait(10 * SLOW)
        self.assertOk(st, r)
        self.assertEqual(r["id"], jid)
        waited = poll.answered_at - t0
        print("long-poll answered %.1f ms after the resume was sent" % (waited * 1000))
        # Woken by resume's ready message, not the once-a-second re-pop.
        self.assertLess(waited, 0.3 * SLOW)

    def test_paused_callback_jobs_are_delivered_only_after_resume(self):
        t, other = unique("pp"), unique("po")
        path, opath = "/" + t, "/" + other
        self.pause(t)
        ids = [self.add(topic=t, body={"n": i}, callback={"url": self.rx.url(path)})
               for i in range(3)]
        oid = self.add(topic=other, body=1, callback={"url": self.rx.url(opath)})
        self.rx.wait_for(lambda qs: any(q.path == opath for q in qs), 10 * SLOW, opath)
        time.sleep(1.5)  # the pusher's rescan runs every second
        self.assertEqual([q for q in self.rx.requests if q.path == path], [],
                         "a paused topic's callback was sent")
        st, r = self.c.req("get", id=ids[0])
        self.assertEqual(r["state"], "ready")
        t0 = time.monotonic()
        self.pause(t, "resume")
        qs = self.rx.wait_for(lambda qs: len([q for q in qs if q.path == path]) >= 3,
                              10 * SLOW, path)
        print("callbacks sent %.1f ms after the resume" % ((time.monotonic() - t0) * 1000))
        got = [q.headers["webhook-id"] for q in qs if q.path == path]
        self.assertEqual(sorted(got), sorted(ids))
        self.assertNotIn(oid, got)

    def test_metrics_show_paused_and_the_age_of_ready_jobs(self):
        t, other = unique("pm"), unique("pn")
        self.pause(t)
        self.add(topic=t, body=1)
        self.add(topic=other, body=1)
        time.sleep(1.2)
        m = metrics(self.c)
        self.assertEqual(m[("delayq_topic_paused", '{topic="%s"}' % t)], 1)
        self.assertEqual(m[("delayq_topic_paused", '{topic="%s"}' % other)], 0)
        self.assertGreaterEqual(m[("delayq_topics_paused", "")], 1)
        for topic in (t, other):
            age = m[("delayq_oldest_ready_age_seconds", '{topic="%s"}' % topic)]
            self.assertGreaterEqual(age, 1.0, topic)
            self.assertLess(age, 30, topic)
        st, r = self.c.req("pop", topic=other)
        self.assertOk(st, r)
        m = metrics(self.c)
        self.assertEqual(m[("delayq_oldest_ready_age_seconds", '{topic="%s"}' % other)], 0)
        self.pause(t, "resume")
        m = metrics(self.c)
        self.assertEqual(m[("delayq_topic_paused", '{topic="%s"}' % t)], 0)

    def test_overdue_and_timer_lag_when_the_timer_stops(self):
        d = self.c
        i = d.live_timers()[0]
        m = metrics(d)
        self.assertLess(m[("delayq_oldest_overdue_seconds", "")], 0.5)
        d.kill_timer(i)
        try:
            t = unique("pt")
            jid = self.add(topic=t, body=1, delay=0.2)
            time.sleep(1.5)
            m = metrics(d)
            overdue = m[("delayq_oldest_overdue_seconds", "")]
            self.assertGreaterEqual(overdue, 1.2)
            self.assertLess(overdue, 30)
        finally:
            d.start_timer()
        deadline = time.monotonic() + 15 * SLOW
        while time.monotonic() < deadline:
            st, r = d.req("get", id=jid)
            if r.get("state") == "ready":
                break
            time.sleep(0.05)
        self.assertEqual(r["state"], "ready")
        m = metrics(d)
        self.assertLess(m[("delayq_oldest_overdue_seconds", "")], 0.5)
        lags = {k[1]: v for k, v in m.items() if k[0] == "delayq_timer_lag_seconds"}
        self.assertTrue(lags, "no timer lag series")
        self.assertGreaterEqual(max(lags.values()), 1.2, lags)


if __name__ == "__main__":
    main()

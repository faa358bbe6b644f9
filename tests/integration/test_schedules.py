"""Schedules (periodic jobs) against the real stack: fires are ordinary
jobs '<id>@<T>' that pop hands out, each fire time once however many
timers run, replace and unschedule, validation, previews across a DST
change (expected instants worked out here with zoneinfo), missed fires
while no timer ran collapsing into one, and bodies kept byte for byte."""

import datetime
import json
import os
import re
import signal
import time
import tempfile
from zoneinfo import ZoneInfo

from dqtest import SLOW, DeploymentTestCase, main, unique

UTC = datetime.timezone.utc

ADMIN = "admin-token-0123456789"
LIMITED = "limited-token-abcdef"  # schedules on order.* only
TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-sched-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("%s\n%s topics=order. commands=schedule,unschedule,schedules\n" % (ADMIN, LIMITED))
os.chmod(TOKENS_DIR, 0o755)


def fire_time(job_id, sched_id):
    m = re.fullmatch(re.escape(sched_id) + r"@([0-9]+)", job_id)
    assert m, "not a fire of %s: %r" % (sched_id, job_id)
    return int(m.group(1))


def first_instant_showing(zone, wall):
    """The first instant (whole minute) at which the wall clock in zone
    shows `wall` or later: a time skipped by a spring-forward change maps to
    the end of the gap, a time that happens twice to its first occurrence."""
    lo = int(wall.replace(tzinfo=UTC).timestamp()) - 15 * 3600
    for t in range(lo, lo + 31 * 3600, 60):
        local = datetime.datetime.fromtimestamp(t, zone).replace(tzinfo=None)
        if local >= wall:
            return t
    raise AssertionError("no instant found for %s" % wall)


class ScheduleTestBase(DeploymentTestCase):
    def schedule(self, **kw):
        st, r = self.c.req("schedule", **kw)
        self.assertOk(st, r)
        return r

    def listing(self, sched_id=None, preview=None):
        path = "/schedules"
        if sched_id:
            path += "?id=" + sched_id + ("&preview=%d" % preview if preview else "")
        st, r = self.c.get(path)
        self.assertOk(st, r)
        return r["schedules"]

    def entry(self, sched_id):
        found = [s for s in self.listing() if s["id"] == sched_id]
        return found[0] if found else None

    def drain(self, topic, timeout=0):
        """Pops (and finishes) every job of the topic; returns their ids."""
        ids = []
        while True:
            st, r = self.c.req("pop", topic=topic, count=100, timeout=timeout)
            self.assertOk(st, r)
            if not r["jobs"]:
                return ids
            for j in r["jobs"]:
                ids.append(j["id"])
                self.assertOk(*self.c.req("finish", id=j["id"]))
            timeout = 0


class ScheduleTest(ScheduleTestBase):
    DEPLOYMENT_KW = dict(workers=2, threads=8, n_timers=2)

    def test_every_second_fires_jobs_pop_gets(self):
        t, sid = unique("every"), unique("s")
        r = self.schedule(id=sid, topic=t, every=1, body={"n": 1}, ttr=30, retries=2)
        self.assertEqual((r["id"], r["replaced"]), (sid, False))
        self.assertEqual(r["next"] % 1000, 0)
        lateness = []
        got = []
        deadline = time.monotonic() + 3.6
        while time.monotonic() < deadline:
            st, j = self.c.req("pop", topic=t, timeout=2)
            self.assertOk(st, j)
            if j["id"]:
                lateness.append(time.time() - fire_time(j["id"], sid))
                got.append(j)
        self.assertOk(*self.c.req("unschedule", id=sid))
        times = [fire_time(j["id"], sid) for j in got]
        self.assertGreaterEqual(len(times), 3, times)
        self.assertEqual(times, list(range(times[0], times[0] + len(times))),
                         "one fire a second, none twice, none left out")
        self.assertEqual(times[0] * 1000, r["next"])
        for j in got:
            self.assertEqual((j["value"], j["ttr"], j["attempts"]), ({"n": 1}, 30, 1))
        # Prompt: the timer wakes for the fire, not on a tick.
        self.assertLess(sorted(lateness)[len(lateness) // 2], 0.3 * SLOW, lateness)
        st, g = self.c.req("get", id=got[0]["id"])
        self.assertOk(st, g)
        self.assertEqual((g["topic"], g["retries"], g["state"]), (t, 2, "reserved"))

    def test_two_timers_fire_each_time_once(self):
        t, sid = unique("twice"), unique("s")
        self.assertEqual(len(self.c.live_timers()), 2)
        r = self.schedule(id=sid, topic=t, every=1, body="x")
        time.sleep(2.2)
        # One timer hands its buckets over (SIGTERM); the fires go on.
        i = self.c.live_timers()[0]
        self.c.kill_timer(i, signal.SIGTERM)
        time.sleep(1.5)
        self.c.start_timer()
        self.c.wait_timers_joined(10 * SLOW)
        time.sleep(1.5)
        self.assertOk(*self.c.req("unschedule", id=sid))
        ended = time.time()
        ids = self.drain(t)
        times = sorted(fire_time(x, sid) for x in ids)
        self.assertEqual(len(times), len(set(times)), "a fire time added twice: %r" % times)
        self.assertEqual(times[0] * 1000, r["next"])
        self.assertEqual(times, list(range(times[0], times[-1] + 1)), "a fire left out")
        self.assertGreaterEqual(times[-1], int(ended) - 2)
        st, s = self.c.req("stats", topic=t)
        self.assertOk(st, s)
        self.assertEqual(s["topics"][t]["added"], len(times))

    def test_replace_and_unschedule(self):
        t, t2, sid = unique("repl"), unique("repl2"), unique("s")
        self.schedule(id=sid, topic=t, every=1, body=1)
        time.sleep(1.5)
        r = self.schedule(id=sid, topic=t2, cron="0 0 1 1 *", tz="Europe/Berlin", body=2)
        self.assertIs(r["replaced"], True)
        s = self.entry(sid)
        self.assertEqual((s["topic"], s["cron"], s["tz"]), (t2, "0 0 1 1 *", "Europe/Berlin"))
        self.assertNotIn("every", s)
        self.assertEqual(s["next"], r["next"])
        self.assertIsNotNone(s["last"], "the history of the id is kept")
        jan1 = datetime.datetime(datetime.datetime.now(UTC).year + 1, 1, 1,
                                 tzinfo=ZoneInfo("Europe/Berlin"))
        self.assertEqual(r["next"], int(jan1.timestamp()) * 1000)
        fired = len(self.drain(t))
        time.sleep(1.2)
        self.assertEqual(self.drain(t), [], "the replaced definition fired again")
        self.assertGreaterEqual(fired, 1)
        self.assertOk(*self.c.req("unschedule", id=sid))
        self.assertIsNone(self.entry(sid))
        st, b = self.c.req("unschedule", id=sid)
        self.assertError(st, b, 404, "not_found")
        st, b = self.c.get("/schedules?id=" + sid)
        self.assertError(st, b, 404, "not_found")

    def test_a_replacement_never_makes_a_fire_time_again(self):
        # A fire made on Redis' clock, running ahead of this host's: the
        # timer fired the next minute already, which this host's clock has
        # not reached; a replacement computed on it would fire that again.
        t, sid = unique("refire"), unique("s")
        first = self.schedule(id=sid, topic=t, cron="* * * * *", body="first")["next"]
        key = "%s:sch:%s" % (self.c.tag(self.c.shard_of(sid)), sid)
        self.c.redis("HSET", key, "l", first, "n", first + 60000)
        r = self.schedule(id=sid, topic=t, cron="* * * * *", body="again")
        self.assertGreater(r["next"], first, "the fire time made already is made again")
        self.assertEqual(self.entry(sid)["next"], r["next"])
        self.assertOk(*self.c.req("unschedule", id=sid))

    def test_validation(self):
        t, sid = unique("bad"), unique("s")
        base = dict(id=sid, topic=t, body={"a": 1})
        cases = [
            (dict(cron="61 * * * *"), "cron"),
            (dict(cron="* * *"), "cron"),
            (dict(cron="0 0 30 2 *"), "cron"),
            (dict(cron="0 3 * * *", tz="Mars/Olympus"), "tz"),
            (dict(cron="0 3 * * *", tz="../etc/passwd"), "tz"),
            (dict(every=60, id="a@b"), "id"),
            (dict(cron="* * * * *", every=60), "cron"),
            ({}, "cron"),
            (dict(every=0), "every"),
            (dict(every=0.5), "every"),
            (dict(every=366 * 86400 + 1), "every"),
            (dict(every="60"), "every"),
            (dict(every=60, start=2000, end=1000), "end"),
            (dict(every=60, end=1000), "end"),
            (dict(every=60, ttr=0), "ttr"),
            (dict(every=60, retries=-1), "retries"),
            (dict(every=60, delay=5), "delay"),
            (dict(every=60, body=None, id=sid), "body"),
        ]
        for extra, field in cases:
            fields = dict(base, **extra)
            if fields.get("body", 0) is None:
                del fields["body"]
            st, r = self.c.req("schedule", **fields)
            self.assertError(st, r, 400, "bad_request", extra)
            self.assertIn("'%s'" % field, r["error"], (extra, r))
        st, r = self.c.post("/schedule", dict(base, topic="no spaces", every=1))
        self.assertError(st, r, 400, "bad_request")
        self.assertIsNone(self.entry(sid), "a refused schedule was written")
        self.assertIsNone(self.entry("a@b"))
        st, r = self.c.get("/schedules?preview=3")
        self.assertError(st, r, 400, "bad_request")
        st, r = self.c.get("/schedules?id=x&preview=101")
        self.assertError(st, r, 400, "bad_request")
        st, r = self.c.req("unschedule", id="x@1")
        self.assertError(st, r, 400, "bad_request")
        st, r = self.c.get("/schedule?id=x")
        self.assertError(st, r, 400, "bad_request")  # writes need POST

    def test_preview_across_dst_gap(self):
        ny = ZoneInfo("America/New_York")
        sid = unique("dst")
        start = int(datetime.datetime(2030, 3, 8, tzinfo=UTC).timestamp())
        r = self.schedule(id=sid, topic=unique("dst"), cron="30 2 * * *", tz="America/New_York",
                          start=start, body={})
        want = [first_instant_showing(ny, datetime.datetime(2030, 3, d, 2, 30)) * 1000
                for d in (8, 9, 10, 11, 12)]
        # 2030-03-10 02:30 never happens in New York: the instant the gap ends.
        self.assertEqual(want[2], int(datetime.datetime(2030, 3, 10, 7, 0, tzinfo=UTC).timestamp()) * 1000)
        self.assertEqual(r["next"], want[0])
        [s] = self.listing(sid, preview=5)
        self.assertEqual(s["upcoming"], want)
        self.assertEqual((s["next"], s["start"], s["last"], s["missed"]), (want[0], start, None, 0))
        self.assertEqual(s["body"], {})
        # A fall-back day: 01:30 happens twice; it fires once, the first time.
        fall = int(datetime.datetime(2030, 11, 1, tzinfo=UTC).timestamp())
        self.schedule(id=sid, topic=unique("dst"), cron="30 1 * * *", tz="America/New_York",
                      start=fall, body={})
        [s] = self.listing(sid, preview=4)
        want = [first_instant_showing(ny, datetime.datetime(2030, 11, d, 1, 30)) * 1000
                for d in (1, 2, 3, 4)]
        self.assertEqual(s["upcoming"], want)
        self.assertOk(*self.c.req("unschedule", id=sid))

    def test_body_byte_for_byte(self):
        t, sid = unique("bytes"), unique("s")
        body = '{"big":123456789012345678901234567890,"f":1.50,"u":"\\u0000\\u00e9","k":[true,null]}'
        raw = '{"id":"%s","topic":"%s","every":1,"body":%s}' % (sid, t, body)
        st, _, data = self.c.post_raw("/schedule", raw.encode())
        self.assertEqual(st, 200, data)
        st, _, data = self.c.request("GET", "/schedules?id=" + sid)
        self.assertIn(b'"body":' + body.encode() + b"}", data)
        st, _, data = self.c.post_raw("/pop", json.dumps({"topic": t, "timeout": 3}).encode())
        self.assertOk(*self.c.req("unschedule", id=sid))
        self.assertEqual(st, 200, data)
        self.assertIn(b'"value":' + body.encode() + b",", data)
        # A string body too.
        raw = '{"id":"%s","topic":"%s","every":1,"body":"a\\"b\\u2028"}' % (sid, t)
        st, _, data = self.c.post_raw("/schedule", raw.encode())
        self.assertEqual(st, 200, data)
        st, _, data = self.c.request("GET", "/schedules?id=" + sid)
        self.assertIn(b'"body":"a\\"b\\u2028"', data)
        self.assertOk(*self.c.req("unschedule", id=sid))

    def test_end_stops_fires(self):
        t, sid = unique("end"), unique("s")
        now = int(time.time())
        self.schedule(id=sid, topic=t, every=1, start=now + 1, end=now + 2, body=0)
        time.sleep(3.5)
        times = sorted(fire_time(x, sid) for x in self.drain(t))
        self.assertEqual(times, [now + 1, now + 2])
        s = self.entry(sid)
        self.assertEqual((s["next"], s["last"]), (None, (now + 2) * 1000))
        self.assertOk(*self.c.req("unschedule", id=sid))


class MissedFiresTest(ScheduleTestBase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, n_timers=1)

    def test_stopped_timer_missed_fires_collapse(self):
        t, sid = unique("missed"), unique("s")
        for i in self.c.live_timers():
            self.c.kill_timer(i, signal.SIGTERM)
        r = self.schedule(id=sid, topic=t, every=1, body="m")
        first = r["next"] // 1000
        time.sleep(4.3)
        self.assertEqual(self.drain(t), [], "fired with no timer running")
        restart = time.time()
        self.c.start_timer()
        ids = self.drain(t, timeout=3)
        s = self.entry(sid)
        self.assertOk(*self.c.req("unschedule", id=sid))
        ids += self.drain(t)
        times = sorted(fire_time(x, sid) for x in ids)
        # The first fire made is the latest one that had passed when the
        # timer took over (under valgrind that is a while after `restart`);
        # had the missed fires piled up, `first` itself would be there.
        self.assertTrue(times, "nothing fired after the restart")
        latest = times[0]
        self.assertGreaterEqual(latest, first + 3, "missed fires piled up: %r" % times)
        self.assertGreaterEqual(latest, int(restart) - 1, times)
        self.assertEqual(len(times), len(set(times)), "a fire twice: %r" % times)
        self.assertEqual(s["missed"], latest - first, s)
        self.assertGreaterEqual(s["last"], latest * 1000)


class ScheduleAuthTest(ScheduleTestBase):
    DEPLOYMENT_KW = dict(workers=1, threads=4, fcgi_flags={"auth_file": TOKENS})

    def call(self, method, path, token, fields=None):
        body = json.dumps(fields).encode() if fields is not None else None
        st, _, data = self.c.request(method, path, body, {"Authorization": "Bearer " + token})
        return st, json.loads(data)

    def test_topic_limited_token(self):
        secret = dict(id=unique("sec"), topic="secret", cron="0 0 1 1 *", body=1)
        self.assertOk(*self.call("POST", "/schedule", ADMIN, secret))
        mine = dict(id=unique("mine"), topic="order.a", cron="0 0 1 1 *", body=2)
        self.assertOk(*self.call("POST", "/schedule", LIMITED, mine))
        st, r = self.call("POST", "/schedule", LIMITED, dict(secret, topic="other"))
        self.assertError(st, r, 401, "unauthorized")
        # Another topic's schedule: unknown to this token, and not replaced.
        st, r = self.call("POST", "/schedule", LIMITED, dict(secret, topic="order.b"))
        self.assertError(st, r, 409, "conflict")
        st, r = self.call("POST", "/unschedule", LIMITED, {"id": secret["id"]})
        self.assertError(st, r, 404, "not_found")
        st, r = self.call("GET", "/schedules?id=" + secret["id"], LIMITED)
        self.assertError(st, r, 404, "not_found")
        st, r = self.call("GET", "/schedules", LIMITED)
        self.assertOk(st, r)
        self.assertEqual([s["id"] for s in r["schedules"]], [mine["id"]])
        st, r = self.call("GET", "/schedules", ADMIN)
        self.assertOk(st, r)
        self.assertEqual(sorted(s["id"] for s in r["schedules"]),
                         sorted([secret["id"], mine["id"]]))
        self.assertEqual([s["topic"] for s in r["schedules"] if s["id"] == secret["id"]],
                         ["secret"])
        self.assertOk(*self.call("POST", "/unschedule", LIMITED, {"id": mine["id"]}))
        self.assertOk(*self.call("POST", "/unschedule", ADMIN, {"id": secret["id"]}))


if __name__ == "__main__":
    main()

"""Listing a topic's jobs by state (GET /jobs, paged by cursor), kick by id
or ids, and reschedule: the answers, the order of each state, pages that
stay right while jobs are added, popped, finished, buried and kicked
between them, a token limited to topics, the 400s that name the field, and
the deployment's invariants (tests/dqtest/invariants.py) after each test.
The paging tests run once with the deployment's shard count and once with
four shards on whatever Redis tests/dqtest gives, so pages merge shards."""

import json
import os
import random
import tempfile
import time
import urllib.parse

from dqtest import DeploymentTestCase, invariants, main, unique

HOUR = 3600


def now_ms():
    return int(time.time() * 1000)


class JobsBase(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8)

    CHECK_INVARIANTS = True

    def add(self, topic, jid=None, **kw):
        """The shared add, with the id second and a body that names it."""
        kw.setdefault("body", {"n": jid})
        if jid:
            kw["id"] = jid
        return super().add(topic, **kw)

    def get(self, jid):
        st, r = self.c.req("get", id=jid)
        self.assertOk(st, r)
        return r

    def page(self, topic, state, limit=None, cursor=None, via_get=True):
        q = {"topic": topic, "state": state}
        if limit is not None:
            q["limit"] = limit
        if cursor is not None:
            q["cursor"] = cursor
        if via_get:
            st, r = self.c.get("/jobs?" + urllib.parse.urlencode(q))
        else:
            st, r = self.c.req("jobs", **q)
        self.assertOk(st, r)
        self.assertEqual(set(r), {"success", "jobs", "cursor"})
        return r

    def walk(self, topic, state, limit, between=None):
        """Every page of a state; between(i) runs after page i. Returns the
        ids in the order listed."""
        ids, cursor, i = [], None, 0
        while True:
            r = self.page(topic, state, limit=limit, cursor=cursor)
            self.assertLessEqual(len(r["jobs"]), limit)
            for j in r["jobs"]:
                self.assertEqual(j["topic"], topic)
                self.assertEqual(j["state"], state)
            ids += [j["id"] for j in r["jobs"]]
            cursor = r["cursor"]
            if cursor is None:
                return ids
            self.assertIsInstance(cursor, str)
            if between:
                between(i)
            i += 1
            self.assertLess(i, 10000, "the walk does not end")


class Paging(JobsBase):
    def test_each_entry_is_the_get_answer(self):
        t = unique("shape")
        for i, delay in enumerate((300, 100, 200)):
            self.add(t, "shape-d%d-%s" % (i, t), delay=delay, ttr=5, retries=3,
                     body={"i": i, "s": "x" * i})
        r = self.page(t, "delay")
        self.assertIsNone(r["cursor"])
        self.assertEqual([j["id"] for j in r["jobs"]],
                         ["shape-d1-" + t, "shape-d2-" + t, "shape-d0-" + t])
        for j in r["jobs"]:
            self.assertEqual(j, self.get(j["id"]))
        self.assertEqual(r, self.page(t, "delay", via_get=False), "GET and POST differ")
        # a state with no job, and a topic that never had one
        self.assertEqual(self.page(t, "buried"), {"success": True, "jobs": [], "cursor": None})
        self.assertEqual(self.page(unique("none"), "ready")["jobs"], [])

    def test_order_of_each_state(self):
        t = unique("order")
        ready = self.c.one_shard_ids("ord-r-" + t, 5)
        for jid in ready:
            self.add(t, jid)
        self.assertEqual([j["id"] for j in self.page(t, "ready")["jobs"]], ready)
        # pop order is the listing order: pop two, they are reserved in
        # deadline order (the second popped has the later deadline)
        st, r = self.c.req("pop", topic=t, count=2)
        self.assertOk(st, r)
        self.assertEqual([j["id"] for j in r["jobs"]], ready[:2])
        self.assertEqual([j["id"] for j in self.page(t, "ready")["jobs"]], ready[2:])
        self.assertEqual(sorted(j["id"] for j in self.page(t, "reserved")["jobs"]),
                         sorted(ready[:2]))
        res = self.page(t, "reserved")["jobs"]
        self.assertLessEqual(res[0]["due"], res[1]["due"])
        # buried in bury order
        self.assertOk(*self.c.req("bury", id=ready[1]))
        self.assertOk(*self.c.req("bury", id=ready[0]))
        self.assertEqual([j["id"] for j in self.page(t, "buried")["jobs"]],
                         [ready[1], ready[0]])
        self.assertEqual(self.page(t, "reserved")["jobs"], [])

    def test_pages_cover_a_state_once(self):
        t = unique("pages")
        ids = set()
        for i in range(23):
            ids.add(self.add(t, "pg-%d-%s" % (i, t), delay=HOUR + i % 5))
        for limit in (1, 4, 7, 23, 50):
            listed = self.walk(t, "delay", limit)
            self.assertEqual(len(listed), len(set(listed)), "a job listed twice (limit %d)" % limit)
            self.assertEqual(set(listed), ids, "limit %d" % limit)
            dues = [self.get(j)["due"] for j in listed]
            self.assertEqual(dues, sorted(dues))
        # default limit 50 and the last page's cursor
        self.assertIsNone(self.page(t, "delay")["cursor"])
        r = self.page(t, "delay", limit=23)
        self.assertIsNone(r["cursor"], "a page that ends the state has a cursor")

    def test_a_page_of_expired_records_moves_the_cursor_on(self):
        """The newest deleted record expires before its index entry goes:
        the page that looks at it alone lists nothing, yet its cursor leads
        on to the older records (in every shard)."""
        t = unique("stale")
        self.policy(t, keep=3600)
        # The newest records share the expiring one's shard: a merge of
        # shards that went past that shard's walk would skip them.
        newest = self.c.one_shard_ids("st-" + t, 5)
        kept = []
        for jid in ["st-%d-%s" % (i, t) for i in range(16)] + newest[:4]:
            kept.append(self.add(t, jid))
            self.assertOk(*self.c.req("delete", id=kept[-1]))
        self.policy(t, keep=1)
        gone = self.add(t, newest[4])
        self.assertOk(*self.c.req("delete", id=gone))
        time.sleep(1.3)
        first = self.page(t, "deleted", limit=1)
        self.assertIsNotNone(first["cursor"], first)
        for limit in (1, 3, 50):
            listed = self.walk(t, "deleted", limit)
            self.assertEqual(sorted(listed), sorted(kept), "limit %d" % limit)

    def test_equal_due_times_page_by_id(self):
        """Jobs due at the same ms share a score: the cursor's id orders them,
        also after the job at the cursor has gone."""
        t = unique("tie")
        at = time.time() + HOUR
        ids = ["tie-%02d-%s" % (i, t) for i in range(30)]
        st, r = self.c.req("add", jobs=[{"topic": t, "id": i, "at": at, "body": 1} for i in ids])
        self.assertOk(st, r)
        r = self.page(t, "delay", limit=4)
        first = [j["id"] for j in r["jobs"]]
        # remove the job the cursor names, and one not yet listed
        gone = [first[-1], sorted(set(ids) - set(first))[0]]
        for jid in gone:
            self.assertOk(*self.c.req("delete", id=jid))
        rest, cursor = [], r["cursor"]
        while cursor:
            r = self.page(t, "delay", limit=4, cursor=cursor)
            rest += [j["id"] for j in r["jobs"]]
            cursor = r["cursor"]
        listed = first + rest
        self.assertEqual(len(listed), len(set(listed)))
        self.assertEqual(set(listed), set(ids) - {gone[1]})

    def check_walk_while_moving(self, t, state, stayers, movers, change, limit=5):
        """Walks `state` of t while change(i) runs between pages: every job
        of stayers (in the state throughout) is listed exactly once, no job
        twice, and nothing outside stayers | movers."""
        listed = self.walk(t, state, limit, between=change)
        self.assertEqual(len(listed), len(set(listed)), "a job listed twice")
        self.assertEqual(set(stayers) - set(listed), set(), "jobs skipped")
        self.assertEqual(set(listed) - set(stayers) - set(movers), set(), "unknown jobs listed")

    def test_delay_pages_while_jobs_come_and_go(self):
        t = unique("mvd")
        rnd = random.Random(14)
        jobs = ["mvd-%d-%s" % (i, t) for i in range(40)]
        for i, jid in enumerate(jobs):
            self.add(t, jid, delay=HOUR + rnd.randint(0, 20))
        doomed = set(rnd.sample(jobs, 12))
        stayers = set(jobs) - doomed
        movers = set(doomed)
        queue = sorted(doomed)

        def change(i):
            # delete two jobs not yet listed or listed, add two (some due
            # before the position, some after)
            for _ in range(2):
                if queue:
                    self.assertOk(*self.c.req("delete", id=queue.pop()))
            for k in range(2):
                jid = self.add(t, "mvd-new-%d-%d-%s" % (i, k, t), delay=HOUR + rnd.randint(0, 20))
                movers.add(jid)

        self.check_walk_while_moving(t, "delay", stayers, movers, change)

    def test_ready_pages_while_jobs_are_popped_added_finished(self):
        t = unique("mvr")
        jobs = ["mvr-%d-%s" % (i, t) for i in range(40)]
        for jid in jobs:
            self.add(t, jid, ttr=HOUR)
        popped = set()
        movers = set()

        def change(i):
            st, r = self.c.req("pop", topic=t, count=2)
            self.assertOk(st, r)
            for j in r["jobs"]:
                popped.add(j["id"])
                if i % 2:
                    self.assertOk(*self.c.req("finish", id=j["id"]))
            for k in range(3):
                movers.add(self.add(t, "mvr-new-%d-%d-%s" % (i, k, t)))

        # pop takes the oldest, so what is popped may have been listed or not:
        # only the jobs never popped must each be listed once
        listed = self.walk(t, "ready", 6, between=change)
        self.assertEqual(len(listed), len(set(listed)), "a job listed twice")
        never_popped = set(jobs) - popped
        self.assertEqual(never_popped - set(listed), set(), "jobs skipped")
        st, r = self.c.req("pop", topic=t, count=100)
        for j in r["jobs"]:
            self.assertOk(*self.c.req("finish", id=j["id"]))

    def test_buried_and_reserved_pages_while_moving(self):
        t = unique("mvb")
        jobs = self.c.one_shard_ids("mvb-" + t, 24)
        for jid in jobs:
            self.add(t, jid, ttr=HOUR)
        st, r = self.c.req("pop", topic=t, count=24)
        self.assertOk(st, r)
        self.assertEqual(len(r["jobs"]), 24)
        half = jobs[:12]
        for jid in half:
            self.assertOk(*self.c.req("bury", id=jid))
        kick = list(half[::3])
        stay_buried = set(half) - set(kick)
        to_bury = list(jobs[12:18])

        def change_buried(i):
            if kick:
                st, r = self.c.req("kick", id=kick.pop())
                self.assertOk(st, r)
            if to_bury:
                self.assertOk(*self.c.req("bury", id=to_bury.pop()))

        self.check_walk_while_moving(t, "buried", stay_buried, set(half) | set(jobs[12:18]),
                                     change_buried, limit=3)
        self.assertEqual(kick, [], "the walk ended before every kick")
        for jid in to_bury:
            self.assertOk(*self.c.req("bury", id=jid))
        reserved_now = [j["id"] for j in self.page(t, "reserved", limit=1000)["jobs"]]
        self.assertEqual(set(reserved_now), set(jobs[18:]))
        finish = list(reserved_now[:3])

        def change_reserved(i):
            if finish:
                self.assertOk(*self.c.req("finish", id=finish.pop()))

        self.check_walk_while_moving(t, "reserved", set(reserved_now[3:]), set(reserved_now),
                                     change_reserved, limit=1)

    def test_bad_parameters_name_the_field(self):
        t = unique("bad")
        cases = [
            ("/jobs?state=ready", "'topic'"),
            ("/jobs?topic=%s" % t, "'state'"),
            ("/jobs?topic=%s&state=done" % t, "'state'"),
            ("/jobs?topic=%s&state=finished&cursor=-:a" % t, "'cursor'"),
            ("/jobs?topic=%s&state=finished&cursor=--1:a" % t, "'cursor'"),
            ("/jobs?topic=%s&state=ready&limit=0" % t, "'limit'"),
            ("/jobs?topic=%s&state=ready&limit=1001" % t, "'limit'"),
            ("/jobs?topic=%s&state=ready&limit=x" % t, "'limit'"),
            ("/jobs?topic=%s&state=ready&cursor=abc" % t, "'cursor'"),
            ("/jobs?topic=%s&state=ready&cursor=12:" % t, "'cursor'"),
            ("/jobs?topic=%s&state=ready&cursor=1234567890123456789:a" % t, "'cursor'"),
            ("/jobs?topic=%s&state=ready&count=3" % t, "'count'"),
            ("/jobs?topic=bad%20topic&state=ready", "'topic'"),
        ]
        for path, field in cases:
            st, r = self.c.get(path)
            self.assertError(st, r, 400, "bad_request", path)
            self.assertIn(field, r["error"], path)
        st, r = self.c.req("jobs", topic=t, state="ready", limit="5")
        self.assertError(st, r, 400, "bad_request")
        self.assertIn("'limit'", r["error"])
        self.assertOk(*self.c.get("/jobs?topic=%s&state=ready&limit=1000" % t))


class PagingFourShards(Paging):
    """The same on four shards (one Redis or a Cluster): pages merge shards."""
    DEPLOYMENT_KW = dict(workers=1, threads=8, shards=4)


class KickReschedule(JobsBase):
    def buried(self, t, n=1):
        ids = [self.add(t, "b-%d-%s" % (i, t), ttr=HOUR, retries=1) for i in range(n)]
        st, r = self.c.req("pop", topic=t, count=n)
        self.assertOk(st, r)
        for jid in ids:
            self.assertOk(*self.c.req("bury", id=jid))
        return ids

    def stats(self, t):
        st, r = self.c.req("stats", topic=t)
        self.assertOk(st, r)
        return r["topics"][t]

    def test_kick_by_id_kicks_that_job(self):
        t = unique("kid")
        ids = self.buried(t, 3)
        # the newest burial, not the topic's oldest
        st, r = self.c.req("kick", id=ids[2])
        self.assertOk(st, r)
        self.assertEqual(r, {"success": True, "id": ids[2], "state": "ready"})
        self.assertEqual(self.get(ids[2])["state"], "ready")
        self.assertEqual([self.get(i)["state"] for i in ids[:2]], ["buried", "buried"])
        s = self.stats(t)
        self.assertEqual((s["buried"], s["ready"], s["kicked"]), (2, 1, 1))
        # a kick gives fresh retries: popped again it is reserved, not buried
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], ids[2])
        st, r = self.c.req("release", id=ids[2])
        self.assertOk(st, r)
        self.assertEqual(r["state"], "ready", "retries=1 counts from the kick: one more delivery")
        # not buried: 409 naming its state; unknown: 404; nothing changes
        st, r = self.c.req("kick", id=ids[2])
        self.assertError(st, r, 409, "conflict")
        self.assertIn("ready", r["error"])
        st, r = self.c.req("kick", id="no-such-" + t)
        self.assertError(st, r, 404, "not_found")
        self.assertEqual(self.stats(t)["buried"], 2)

    def test_kick_ids_batch(self):
        t = unique("kids")
        ids = self.buried(t, 2)
        ready = self.add(t, "r-" + t)
        st, r = self.c.req("kick", ids=[ids[0], ready, "none-" + t, ids[1]])
        self.assertOk(st, r)
        res = r["results"]
        self.assertEqual([x["id"] for x in res], [ids[0], ready, "none-" + t, ids[1]])
        self.assertEqual([x["success"] for x in res], [True, False, False, True])
        self.assertEqual((res[1]["code"], res[2]["code"]), ("conflict", "not_found"))
        self.assertIn("ready", res[1]["error"])
        self.assertEqual([self.get(i)["state"] for i in ids], ["ready", "ready"])
        self.assertEqual(self.stats(t)["kicked"], 2)

    def test_kick_fields(self):
        t = unique("kf")
        for body in ({"id": "a", "topic": t}, {"ids": ["a"], "count": 2}, {"id": "a", "ids": ["b"]},
                     {"ids": []}, {"ids": "a"}, {}):
            st, r = self.c.req("kick", **body)
            self.assertError(st, r, 400, "bad_request", body)
        # by topic as before
        self.buried(t, 2)
        st, r = self.c.req("kick", topic=t, count=5)
        self.assertOk(st, r)
        self.assertEqual(r["kicked"], 2)

    def test_reschedule_each_state(self):
        t = unique("rs")
        d = self.add(t, "rs-d-" + t, delay=HOUR)
        before = now_ms()
        st, r = self.c.req("reschedule", id=d, delay=60)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["state"]), (d, "delay"))
        self.assertTrue(before + 59000 <= r["due"] <= now_ms() + 61000, r)
        self.assertEqual(self.get(d)["due"], r["due"])
        self.assertEqual([j["id"] for j in self.page(t, "delay")["jobs"]], [d])
        # delay -> ready now (delay 0), then ready -> delay by `at`
        st, r = self.c.req("reschedule", id=d, delay=0)
        self.assertOk(st, r)
        self.assertEqual((r["state"], r["due"]), ("ready", None))
        self.assertEqual([j["id"] for j in self.page(t, "ready")["jobs"]], [d])
        at = int(time.time()) + 7200
        st, r = self.c.req("reschedule", id=d, at=at)
        self.assertOk(st, r)
        self.assertEqual((r["state"], r["due"]), ("delay", at * 1000))
        st, r = self.c.req("pop", topic=t)
        self.assertIsNone(r["id"], "a rescheduled job is still ready")
        # an `at` in the past: ready
        st, r = self.c.req("reschedule", id=d, at=1)
        self.assertEqual(r["state"], "ready")
        # buried -> delay, with fresh retries
        t2 = unique("rsb")
        b = self.buried(t2, 1)[0]
        st, r = self.c.req("reschedule", id=b, delay=1)
        self.assertOk(st, r)
        self.assertEqual(r["state"], "delay")
        self.assertEqual(self.page(t2, "buried")["jobs"], [])
        self.assertEqual([j["id"] for j in self.page(t2, "delay")["jobs"]], [b])
        s = self.stats(t2)
        self.assertEqual((s["delay"], s["ready"], s["buried"], s["reserved"]), (1, 0, 0, 0))
        # the timer makes it ready when due
        deadline = time.monotonic() + 10
        while self.get(b)["state"] != "ready" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.get(b)["state"], "ready")

    def test_reschedule_refusals(self):
        t = unique("rsx")
        jid = self.add(t, "rsx-" + t, ttr=HOUR)
        st, r = self.c.req("pop", topic=t)
        self.assertEqual(r["id"], jid)
        before = self.get(jid)
        st, r = self.c.req("reschedule", id=jid, delay=5)
        self.assertError(st, r, 409, "conflict")
        self.assertIn("reserved", r["error"])
        self.assertEqual(self.get(jid), before)
        st, r = self.c.req("reschedule", id="none-" + t, delay=5)
        self.assertError(st, r, 404, "not_found")
        for body, field in (({"id": jid}, "'delay'"), ({"id": jid, "delay": 1, "at": 5}, "'delay'"),
                            ({"id": jid, "delay": -1}, "'delay'"), ({"delay": 1}, "'id'"),
                            ({"id": jid, "at": time.time() + 20 * 365 * 86400}, "'at'"),
                            ({"id": jid, "delay": 1, "topic": t}, "'topic'")):
            st, r = self.c.req("reschedule", **body)
            self.assertError(st, r, 400, "bad_request", body)
            self.assertIn(field, r["error"], body)


ADMIN = "jobs-admin-token-0123456789"
ORDERS = "jobs-orders-token-0123456789"  # topics=order.
TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-jobs-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("%s\n%s topics=order.\n" % (ADMIN, ORDERS))
os.chmod(TOKENS_DIR, 0o755)


class TopicLimitedToken(JobsBase):
    DEPLOYMENT_KW = {"workers": 1, "threads": 8, "fcgi_flags": {"auth_file": TOKENS}}

    def call(self, cmd, token, **fields):
        st, h, data = self.c.request("POST", "/" + cmd, json.dumps(fields).encode(),
                                     {"Authorization": "Bearer " + token})
        return st, json.loads(data)

    def test_lists_only_its_topics(self):
        mine, other = unique("order.x"), unique("other")
        for t in (mine, other):
            self.assertOk(*self.call("add", ADMIN, topic=t, id="tok-" + t, body=1))
        st, r = self.call("jobs", ORDERS, topic=mine, state="ready")
        self.assertOk(st, r)
        self.assertEqual([j["id"] for j in r["jobs"]], ["tok-" + mine])
        st, r = self.call("jobs", ORDERS, topic=other, state="ready")
        self.assertError(st, r, 401, "unauthorized")
        # kick and reschedule by id: a job of another topic is not found
        st, r = self.call("reschedule", ORDERS, id="tok-" + other, delay=5)
        self.assertError(st, r, 404, "not_found")
        st, r = self.call("kick", ORDERS, id="tok-" + other)
        self.assertError(st, r, 404, "not_found")
        st, r = self.call("reschedule", ORDERS, id="tok-" + mine, delay=5)
        self.assertOk(st, r)
        self.assertEqual(self.get_admin("tok-" + other)["state"], "ready")

    def get_admin(self, jid):
        st, r = self.call("get", ADMIN, id=jid)
        self.assertOk(st, r)
        return r


if __name__ == "__main__":
    main()

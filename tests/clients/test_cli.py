#!/usr/bin/env python3
"""The delayq command line client against a real deployment (dqtest.Deployment):
every subcommand, human and --json output, the exit status of every error
code, DELAYQ_URL / DELAYQ_TOKEN, --help and --version. Error codes the real
server cannot be made to produce on demand (504 timeout, 500 internal, an
answer that is not JSON) come from a small fake server, which also shows
the exact requests the client sends.

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. python3 tests/clients/test_cli.py
"""

import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))

import dqtest
from dqtest import DeploymentTestCase, free_port, unique

DELAYQ = os.path.join(dqtest.BUILD_DIR, "delayq")

# The exit status of each protocol error code (delayq(1), docs/INSTALL.md).
EXIT = {"ok": 0, "usage": 1, "bad_request": 2, "not_found": 3, "conflict": 4,
        "unauthorized": 5, "too_large": 6, "unavailable": 7, "timeout": 8, "other": 9}


def run_cli(*args, url=None, env=None, stdin=None, timeout=120):
    """Runs ./delayq; returns (exit status, stdout, stderr) as text. url None:
    no --url flag (DELAYQ_URL or the default applies)."""
    argv = [DELAYQ] + (["--url", url] if url else []) + list(args)
    e = dict(os.environ)
    e.pop("DELAYQ_URL", None)
    e.pop("DELAYQ_TOKEN", None)
    e.update(env or {})
    r = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=e, timeout=timeout)
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8")


def fields(text):
    """The "name   value" lines of a job block -> dict."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        out[name] = value.strip()
    return out


class CliTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=1, threads=8, push_allow="*,loopback")

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.c.http_port

    def cli(self, *args, **kw):
        return run_cli(*args, url=self.url, **kw)

    def assertExit(self, result, status, msg=None):
        rc, out, err = result
        self.assertEqual(rc, status, "%s: exit %d, stdout %r, stderr %r" % (msg or "", rc, out, err))

    def add(self, topic, body="1", **extra):
        args = ["add", "--topic", topic, "--body", body]
        for k, v in extra.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        r = self.cli(*args)
        self.assertExit(r, 0, "add")
        return r[1].strip()

    # ------------------------------------------------------------ add / pop / finish

    def test_add_pop_finish_human(self):
        topic, jid = unique("order"), unique("order-id")
        r = self.cli("add", "--topic", topic, "--id", jid, "--ttr", "30",
                     "--body", '{"order":42,"note":"a/b"}')
        self.assertExit(r, 0)
        self.assertEqual(r[1], jid + "\n")
        self.assertEqual(r[2], "")

        r = self.cli("pop", "--topic", topic)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "id        %s\ntopic     %s\nattempts  1\nttr       30\n"
                               "value     {\"order\":42,\"note\":\"a/b\"}\n" % (jid, topic))

        r = self.cli("finish", "--id", jid)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "finished %s\n" % jid)
        self.assertExit(self.cli("get", "--id", jid), EXIT["not_found"])

    def test_add_without_id_prints_the_generated_id(self):
        topic = unique("gen")
        jid = self.add(topic)
        self.assertRegex(jid, r"^[0-9a-f]{24}$")
        st, body = self.c.get("/get?id=" + jid)
        self.assertOk(st, body)
        self.assertEqual(body["topic"], topic)

    def test_add_fields_reach_the_server(self):
        topic, jid = unique("fields"), unique("fields-id")
        r = self.cli("add", "--topic", topic, "--id", jid, "--delay", "100", "--ttr", "1.5",
                     "--retries", "3", "--body", "[1,2.50,null]")
        self.assertExit(r, 0)
        st, body = self.c.get("/get?id=" + jid)
        self.assertOk(st, body)
        self.assertEqual(body["state"], "delay")
        self.assertEqual(body["ttr"], 1.5)
        self.assertEqual(body["retries"], 3)
        self.assertEqual(body["value"], [1, 2.5, None])
        self.assertAlmostEqual(body["due"] - body["created"], 100000, delta=2000)
        # --at: an absolute time in the past means ready now
        jid2 = unique("at")
        self.assertExit(self.cli("add", "--topic", topic, "--id", jid2, "--at", "1", "--body", "0"), 0)
        self.assertEqual(self.c.get("/get?id=" + jid2)[1]["state"], "ready")

    def test_add_replace(self):
        topic, jid = unique("upsert"), unique("upsert-id")
        r = self.cli("add", "--topic", topic, "--id", jid, "--replace", "--delay", "60", "--body", "1")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "added %s\n" % jid)
        r = self.cli("add", "--topic", topic, "--id", jid, "--replace", "--body", '{"v":2}')
        self.assertExit(r, 0)
        self.assertEqual(r[1], "replaced %s\n" % jid)
        st, body = self.c.get("/get?id=" + jid)
        self.assertEqual((body["state"], body["value"]), ("ready", {"v": 2}))
        r = self.cli("add", "--topic", topic, "--id", jid, "--replace", "--body", "3", "--json")
        self.assertEqual(json.loads(r[1]), {"success": True, "id": jid, "replaced": True})
        self.assertExit(self.cli("pop", "--topic", topic), 0)
        r = self.cli("add", "--topic", topic, "--id", jid, "--replace", "--body", "4")
        self.assertExit(r, EXIT["conflict"])
        self.assertIn("reserved", r[2])
        r = self.cli("add", "--topic", topic, "--id", jid, "--replace=yes", "--body", "4")
        self.assertExit(r, EXIT["usage"])
        self.assertIn("--replace takes no value", r[2])
        r = self.cli("add", "--topic", topic, "--replace", "--body", "4")
        self.assertExit(r, EXIT["bad_request"])
        self.assertIn("'replace'", r[2])
        self.assertNotEqual(self.cli("pop", "--topic", topic, "--replace")[0], 0,
                            "only add takes --replace")
        self.cli("finish", "--id", jid)

    def test_add_backoff_and_url(self):
        topic, j1, j2 = unique("bo"), unique("bo-id"), unique("cb-id")
        self.assertExit(self.cli("add", "--topic", topic, "--id", j1, "--delay", "100",
                                 "--backoff", "1.5,30", "--body", "1"), 0)
        self.assertEqual(self.c.get("/get?id=" + j1)[1]["backoff"], [1.5, 30])
        self.assertExit(self.cli("add", "--topic", topic, "--id", j2, "--delay", "100",
                                 "--backoff", "stepped", "--callback", "http://127.0.0.1:9/h",
                                 "--body", "1"), 0)
        g = self.c.get("/get?id=" + j2)[1]
        self.assertEqual((g["callback"]["url"], g["backoff"][0], g["retries"]),
                         ("http://127.0.0.1:9/h", 15, 9))
        r = self.cli("add", "--topic", topic, "--backoff", "1,x", "--body", "1")
        self.assertExit(r, EXIT["usage"])
        self.assertIn("--backoff needs a number of seconds", r[2])

    def test_schedule_commands(self):
        sid, topic = unique("cs").replace("-", "_"), unique("cst")
        r = self.cli("schedule", "--id", sid, "--topic", topic, "--cron", "30 2 * * *",
                     "--tz", "America/New_York", "--body", '{"r":1}')
        self.assertExit(r, 0)
        self.assertEqual(r[1], "scheduled %s\n" % sid)
        r = self.cli("schedules", "--id", sid, "--preview", "2")
        self.assertExit(r, 0)
        lines = r[1].splitlines()
        self.assertRegex(lines[0], r"^%s  %s  cron 30 2 \* \* \*  America/New_York  next "
                                   r"\d{4}-\d\d-\d\dT(06|07):30:00Z  missed 0$" % (sid, topic))
        self.assertEqual(len(lines), 3, r[1])
        self.assertExit(self.cli("unschedule", "--id", sid), 0)
        self.assertExit(self.cli("unschedule", "--id", sid), EXIT["not_found"])
        r = self.cli("schedule", "--id", sid, "--topic", topic, "--every", "0", "--body", "1")
        self.assertExit(r, EXIT["bad_request"])

    def test_body_kinds(self):
        topic = unique("bodies")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write('{"from":"file"}\n')
            path = f.name
        try:
            cases = [
                (["--body", '"a string"'], None, "a string"),
                (["--body", "null"], None, None),
                (["--body-string", "plain text, not JSON"], None, "plain text, not JSON"),
                (["--body-string", "--looks-like-a-flag"], None, "--looks-like-a-flag"),
                (["--body-file", path], None, {"from": "file"}),
                (["--body-file", "-"], b'{"from":"stdin"}', {"from": "stdin"}),
                (["--body-string-file", "-"], "héllo\nworld\n".encode(), "héllo\nworld\n"),
            ]
            for args, stdin, want in cases:
                jid = unique("body")
                r = self.cli("add", "--topic", topic, "--id", jid, *args, stdin=stdin)
                self.assertExit(r, 0, repr(args))
                r = self.cli("--json", "pop", "--topic", topic)
                self.assertExit(r, 0)
                job = json.loads(r[1])
                self.assertEqual((job["id"], job["value"]), (jid, want), repr(args))
                self.assertExit(self.cli("finish", "--id", jid), 0)
        finally:
            os.unlink(path)

    def test_pop_empty_is_no_job(self):
        topic = unique("empty")
        r = self.cli("pop", "--topic", topic)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "no job\n")
        t0 = time.monotonic()
        r = self.cli("pop", "--topic", topic, "--timeout", "0.5", "--json")
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r[1]), {"success": True, "id": None, "value": None})
        r = self.cli("pop", "--topic", topic, "--count", "3")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "no job\n")

    def test_pop_long_poll_gets_a_job_added_meanwhile(self):
        topic = unique("lp")
        result = {}

        def popper():
            result["r"] = self.cli("--json", "pop", "--topic", topic, "--timeout", "10")

        t = threading.Thread(target=popper)
        t.start()
        time.sleep(0.5)
        jid = self.add(topic, '"wake"')
        t.join(15)
        self.assertExit(result["r"], 0)
        self.assertEqual(json.loads(result["r"][1])["id"], jid)

    def test_pop_count_and_several_topics(self):
        t1, t2 = unique("ta"), unique("tb")
        a1 = self.add(t1, "1")
        b1 = self.add(t2, "2")
        b2 = self.add(t2, "3")
        r = self.cli("pop", "--topic", "%s,%s" % (t1, t2), "--count", "10")
        self.assertExit(r, 0)
        blocks = [fields(b) for b in r[1].strip().split("\n\n")]
        self.assertEqual([b["id"] for b in blocks], [a1, b1, b2])
        self.assertEqual([b["topic"] for b in blocks], [t1, t2, t2])
        self.assertEqual([b["value"] for b in blocks], ["1", "2", "3"])
        r = self.cli("--json", "pop", "--topic", t2, "--count", "1")
        self.assertEqual(json.loads(r[1]), {"success": True, "jobs": []})

    def test_pop_finish(self):
        topic = unique("fap")
        a, b, d = self.add(topic, "1"), self.add(topic, "2"), self.add(topic, "3")
        self.assertEqual(fields(self.cli("pop", "--topic", topic)[1])["id"], a)
        # the previous job is finished and the next one taken, in one request
        r = self.cli("pop", "--topic", topic, "--finish", a)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "finished %s\nid        %s\ntopic     %s\nattempts  1\nttr       60\n"
                               "value     2\n" % (a, b, topic))
        self.assertExit(self.cli("get", "--id", a), EXIT["not_found"])
        # a list with an unknown id: a line per id, in order, then the jobs;
        # the exit status is 0: the jobs printed are reserved, to be handled
        missing = unique("missing")
        r = self.cli("pop", "--topic", topic, "--count", "5", "--finish", "%s,%s" % (b, missing))
        self.assertExit(r, 0)
        lines = r[1].splitlines()
        self.assertEqual(lines[0], "finished %s" % b)
        self.assertTrue(lines[1].startswith("failed %s: " % missing), lines)
        self.assertTrue(lines[1].endswith("(not_found)"), lines)
        self.assertEqual(fields("\n".join(lines[2:]))["id"], d)
        self.assertEqual(self.c.get("/get?id=" + d)[1]["state"], "reserved")
        # --json: the answer as it came, and the same exit status
        r = self.cli("--json", "pop", "--topic", topic, "--finish", "%s,%s" % (d, missing))
        self.assertExit(r, 0)
        ans = json.loads(r[1])
        self.assertEqual((ans["id"], [(f["id"], f["success"]) for f in ans["finished"]]),
                         (None, [(d, True), (missing, False)]))
        # a long-poll finishes first and answers the outcome with its (empty) pop
        e = self.add(topic, "4")
        self.assertEqual(fields(self.cli("pop", "--topic", topic)[1])["id"], e)
        t0 = time.monotonic()
        r = self.cli("--json", "pop", "--topic", topic, "--timeout", "0.5", "--finish", e)
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r[1]), {"success": True, "id": None, "value": None,
                                            "finished": [{"id": e, "success": True}]})
        st = self.c.get("/stats?topic=" + topic)[1]["topics"][topic]
        self.assertEqual((st["popped"], st["finished"], st["reserved"]), (4, 4, 0))
        # a bad id: 400 naming the field, nothing done
        f = self.add(topic, "5")
        r = self.cli("pop", "--topic", topic, "--finish", "bad id")
        self.assertExit(r, EXIT["bad_request"])
        self.assertIn("'finish'", r[2])
        self.assertEqual(self.c.get("/get?id=" + f)[1]["state"], "ready")

    # ------------------------------------------------------------ the other commands

    def test_get_touch_release_bury_kick_delete(self):
        topic, jid = unique("life"), unique("life-id")
        self.add(topic, '{"x":1}', id=jid, ttr=60, retries=5)
        r = self.cli("get", "--id", jid)
        self.assertExit(r, 0)
        g = fields(r[1])
        self.assertEqual(g["id"], jid)
        self.assertEqual(g["topic"], topic)
        self.assertEqual(g["state"], "ready")
        self.assertEqual(g["attempts"], "0")
        self.assertEqual(g["retries"], "5")
        self.assertEqual(g["ttr"], "60")
        self.assertEqual(g["due"], "-")
        self.assertRegex(g["created"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(g["value"], '{"x":1}')

        # touch on a ready job: 409
        r = self.cli("touch", "--id", jid)
        self.assertExit(r, EXIT["conflict"])
        self.assertIn("(conflict)", r[2])

        self.assertExit(self.cli("pop", "--topic", topic), 0)
        r = self.cli("touch", "--id", jid)
        self.assertExit(r, 0)
        self.assertRegex(r[1], r"^touched %s, deadline \d{4}-.*Z\n$" % re.escape(jid))

        r = self.cli("release", "--id", jid, "--delay", "0")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "released %s, now ready\n" % jid)

        self.assertExit(self.cli("pop", "--topic", topic), 0)
        r = self.cli("bury", "--id", jid)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "buried %s\n" % jid)
        self.assertEqual(fields(self.cli("get", "--id", jid)[1])["state"], "buried")

        r = self.cli("kick", "--topic", topic, "--count", "10")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "kicked 1\n")
        r = self.cli("--json", "kick", "--topic", topic)
        self.assertEqual(json.loads(r[1]), {"success": True, "kicked": 0})

        r = self.cli("delete", "--id", jid)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "deleted %s\n" % jid)
        self.assertExit(self.cli("delete", "--id", jid), EXIT["not_found"])

    def test_jobs_kick_by_id_reschedule(self):
        topic = unique("list")
        ids = ["%s-%d" % (topic, i) for i in range(3)]
        for i, jid in enumerate(ids):
            self.add(topic, '{"n":%d}' % i, id=jid, delay=3600 + i)
        r = self.cli("jobs", "--topic", topic, "--state", "delay", "--limit", "2")
        self.assertExit(r, 0)
        lines = r[1].splitlines()
        self.assertEqual(len(lines), 3, r[1])
        self.assertRegex(lines[0], r"^%s  delay  due \d{4}-.*Z  attempts 0  value \{\"n\":0\}$"
                         % re.escape(ids[0]))
        self.assertTrue(lines[1].startswith(ids[1] + "  delay"), lines[1])
        self.assertTrue(lines[2].startswith("cursor "), lines[2])
        cursor = lines[2][len("cursor "):]
        r = self.cli("jobs", "--topic", topic, "--state", "delay", "--limit", "2",
                     "--cursor", cursor)
        self.assertExit(r, 0)
        self.assertEqual([l.split("  ")[0] for l in r[1].splitlines()], [ids[2]])
        r = self.cli("--json", "jobs", "--topic", topic, "--state", "delay")
        self.assertExit(r, 0)
        ans = json.loads(r[1])
        self.assertEqual(([j["id"] for j in ans["jobs"]], ans["cursor"]), (ids, None))
        self.assertEqual(self.cli("jobs", "--topic", topic, "--state", "buried")[1], "no job\n")
        self.assertExit(self.cli("jobs", "--topic", topic, "--state", "gone"),
                        EXIT["bad_request"])

        r = self.cli("reschedule", "--id", ids[2], "--delay", "0")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "rescheduled %s, now ready\n" % ids[2])
        at = int(time.time()) + 7200
        r = self.cli("reschedule", "--id", ids[2], "--at", str(at))
        self.assertExit(r, 0)
        self.assertEqual(r[1], "rescheduled %s, now delay, due %s.000Z\n"
                         % (ids[2], time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))))
        self.assertExit(self.cli("reschedule", "--id", "nope-" + topic, "--delay", "1"),
                        EXIT["not_found"])

        # kick by id: only that job; a job that is not buried: conflict
        self.assertExit(self.cli("reschedule", "--id", ids[0], "--delay", "0"), 0)
        self.assertExit(self.cli("reschedule", "--id", ids[1], "--delay", "0"), 0)
        for _ in range(2):
            self.assertExit(self.cli("pop", "--topic", topic), 0)
            jid = json.loads(self.cli("--json", "jobs", "--topic", topic, "--state",
                                      "reserved", "--limit", "1")[1])["jobs"][0]["id"]
            self.assertExit(self.cli("bury", "--id", jid), 0)
        r = self.cli("kick", "--id", ids[1])
        self.assertExit(r, 0)
        self.assertEqual(r[1], "kicked %s\n" % ids[1])
        self.assertEqual(fields(self.cli("get", "--id", ids[0])[1])["state"], "buried")
        self.assertExit(self.cli("kick", "--id", ids[1]), EXIT["conflict"])
        r = self.cli("kick", "--ids", "%s,%s" % (ids[0], ids[1]))
        self.assertExit(r, EXIT["conflict"])
        self.assertEqual(r[1].splitlines()[0], "kicked %s" % ids[0])
        self.assertTrue(r[1].splitlines()[1].startswith("failed %s: " % ids[1]), r[1])

    def test_json_is_the_answer_verbatim(self):
        topic, jid = unique("verbatim"), unique("verbatim-id")
        self.add(topic, '{"k":[1,"two",{"three":3.0}]}', id=jid)
        st, _, raw = self.c.request("GET", "/get?id=" + jid)
        self.assertEqual(st, 200)
        r = self.cli("get", "--id", jid, "--json")
        self.assertExit(r, 0)
        self.assertEqual(r[1].rstrip("\n"), raw.decode("utf-8").rstrip("\n"))
        self.assertEqual(r[1].count("\n"), 1)
        r = self.cli("--json", "add", "--topic", topic, "--id", jid, "--body", "1")
        self.assertExit(r, EXIT["conflict"])
        ans = json.loads(r[1])
        self.assertEqual((ans["success"], ans["code"]), (False, "conflict"))
        self.assertEqual(r[2], "")

    def test_batch_finish_and_delete(self):
        topic = unique("batch")
        a, b = self.add(topic), self.add(topic)
        r = self.cli("finish", "--ids", "%s,%s" % (a, b))
        self.assertExit(r, 0)
        self.assertEqual(r[1], "finished %s\nfinished %s\n" % (a, b))
        c = self.add(topic)
        missing = unique("missing")
        r = self.cli("delete", "--ids", "%s,%s" % (missing, c))
        self.assertExit(r, EXIT["not_found"])
        lines = r[1].splitlines()
        self.assertTrue(lines[0].startswith("failed %s: " % missing), lines)
        self.assertTrue(lines[0].endswith("(not_found)"), lines)
        self.assertEqual(lines[1], "deleted %s" % c)
        r = self.cli("--json", "finish", "--ids", missing)
        self.assertExit(r, EXIT["not_found"])
        self.assertEqual(json.loads(r[1])["results"][0]["code"], "not_found")
        # an invalid id anywhere: 400, nothing changed
        d = self.add(topic)
        self.assertExit(self.cli("finish", "--ids", "%s,bad id" % d), EXIT["bad_request"])
        self.assertExit(self.cli("get", "--id", d), 0)

    def test_stats_table(self):
        t1, t2 = unique("st-b"), unique("st-a")
        self.add(t1)
        self.add(t1)
        self.add(t2)
        self.assertExit(self.cli("pop", "--topic", t1), 0)
        r = self.cli("stats")
        self.assertExit(r, 0)
        lines = r[1].splitlines()
        header = lines[0].split()
        self.assertEqual(header[0], "topic")
        self.assertEqual(header[1:], ["delay", "ready", "reserved", "buried", "added", "popped",
                                      "finished", "deleted", "redelivered", "buries", "kicked",
                                      "push_failed"])
        # aligned: every line as long as the header, the numbers right-aligned under it
        self.assertEqual({len(line) for line in lines}, {len(lines[0])})
        rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
        self.assertEqual(lines[-1].split()[0], "total")
        names = [line.split()[0] for line in lines[1:-1]]
        self.assertEqual(names, sorted(names))
        st, js = self.c.get("/stats")
        self.assertOk(st, js)
        for name, counts in list(js["topics"].items()) + [("total", js["total"])]:
            if name not in (t1, t2, "total"):
                continue  # other tests' topics may have changed since
            self.assertEqual(rows[name], [str(counts[h]) for h in header[1:]], name)
        self.assertEqual(rows[t1][:5], ["0", "1", "1", "0", "2"])
        # one topic
        r = self.cli("stats", "--topic", t2)
        lines = r[1].splitlines()
        self.assertEqual([line.split()[0] for line in lines], ["topic", t2, "total"])
        r = self.cli("stats", "--topic", t2, "--json")
        self.assertEqual(list(json.loads(r[1])["topics"]), [t2])

    def test_health(self):
        r = self.cli("health")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "ok (redis ok)\n")
        r = self.cli("health", "--json")
        self.assertEqual(json.loads(r[1]), self.c.health_answer())

    def test_key_and_policy(self):
        topic = unique("flow")
        r = self.cli("add", "--topic", topic, "--key", "merchant-9", "--body", "1")
        self.assertExit(r, 0)
        jid = r[1].strip()
        r = self.cli("get", "--id", jid)
        self.assertIn("key       merchant-9\n", r[1])
        r = self.cli("pop", "--topic", topic)
        self.assertIn("key       merchant-9\n", r[1])
        r = self.cli("add", "--topic", topic, "--key", "a b", "--body", "1")
        self.assertExit(r, 2)
        r = self.cli("policy", "--topic", topic, "--concurrency", "5", "--period", "0.5")
        self.assertExit(r, 0)
        self.assertIn("concurrency 5\n", r[1])
        self.assertIn("period    0.5\n", r[1])
        self.assertIn("rate      -\n", r[1])
        r = self.cli("policy", "--topic", topic, "--period", "none", "--json")
        self.assertEqual(json.loads(r[1])["policy"]["period"], None)
        r = self.cli("policies", "--topic", topic)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "%s  concurrency 5  reserved 1  throttled 0  keys_waiting 0\n" % topic)
        r = self.cli("policy", "--topic", topic, "--rate", "0")
        self.assertExit(r, 2)
        r = self.cli("policy", "--topic", topic, "--rate", "many")
        self.assertExit(r, 1)
        r = self.cli("policy", "--topic", topic, "--rate", "12", "--period", "60")
        self.assertExit(r, 0)
        r = self.cli("policies", "--topic", topic)
        self.assertEqual(r[1], "%s  concurrency 5  rate 12  period 60  reserved 1  throttled 0  "
                               "keys_waiting 0  tokens 12\n" % topic, "tokens: the rate's, left now")
        self.cli("policy", "--topic", topic, "--rate", "none", "--period", "none")
        self.cli("policy", "--topic", topic, "--concurrency", "none")
        r = self.cli("policies", "--topic", topic)
        self.assertEqual(r[1], "no policy\n")
        self.cli("finish", "--id", jid)

    def test_history_records(self):
        topic = unique("kept")
        r = self.cli("policy", "--topic", topic, "--keep", "60")
        self.assertExit(r, 0)
        self.assertIn("keep      60\n", r[1])
        jid = self.add(topic, '{"n":1}')
        self.assertExit(self.cli("pop", "--topic", topic), 0)
        self.assertExit(self.cli("finish", "--id", jid), 0)
        r = self.cli("get", "--id", jid)
        self.assertExit(r, 0)
        f = fields(r[1])
        self.assertEqual((f["state"], f["attempts"]), ("finished", "1"))
        for name in ("due", "created", "delivered", "ended"):
            self.assertRegex(f[name], r"^\d{4}-\d\d-\d\dT.*Z$", name)
        self.assertNotIn("value", f, "a record has no body")
        r = self.cli("jobs", "--topic", topic, "--state", "finished")
        self.assertExit(r, 0)
        self.assertRegex(r[1], r"^%s  finished  ended \d{4}-.*Z  attempts 1\n$" % re.escape(jid))
        r = self.cli("add", "--topic", topic, "--id", jid, "--body", "1")
        self.assertExit(r, EXIT["conflict"])
        self.assertIn("was finished at", r[2])

    def test_trace_context(self):
        topic = unique("trace")
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        r = self.cli("add", "--topic", topic, "--traceparent", tp, "--tracestate", "rojo=1",
                     "--body", "1")
        self.assertExit(r, 0)
        jid = r[1].strip()
        r = self.cli("get", "--id", jid)
        self.assertIn("traceparent %s\n" % tp, r[1])
        self.assertIn("tracestate rojo=1\n", r[1])
        r = self.cli("pop", "--topic", topic, "--json")
        self.assertEqual((json.loads(r[1])["traceparent"], json.loads(r[1])["tracestate"]),
                         (tp, "rojo=1"))
        plain = self.add(topic)
        r = self.cli("pop", "--topic", topic)
        self.assertNotIn("traceparent", r[1])
        self.assertNotIn("tracestate", r[1])
        r = self.cli("add", "--topic", topic, "--traceparent", tp.upper(), "--body", "1")
        self.assertExit(r, 2)
        self.assertIn("'traceparent'", r[2])
        r = self.cli("pop", "--topic", topic, "--tracestate", "a=b")
        self.assertNotEqual(r[0], 0, "pop takes no trace flag")
        self.cli("finish", "--ids", "%s,%s" % (jid, plain))

    def test_pause_resume_and_metrics(self):
        topic = unique("paused")
        jid = self.add(topic)
        r = self.cli("pause", "--topic", topic)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "paused %s\n" % topic)
        r = self.cli("pop", "--topic", topic)
        self.assertExit(r, 0)
        self.assertEqual(r[1], "no job\n", "a paused topic gives no job")
        r = self.cli("stats", "--topic", topic, "--json")
        self.assertIs(json.loads(r[1])["topics"][topic]["paused"], True)
        r = self.cli("metrics")
        self.assertExit(r, 0)
        self.assertIn('delayq_topic_paused{topic="%s"} 1\n' % topic, r[1])
        self.assertIn("# TYPE delayq_oldest_overdue_seconds gauge\n", r[1])
        r = self.cli("resume", "--topic", topic, "--json")
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r[1]), {"success": True, "topic": topic, "paused": False})
        r = self.cli("pop", "--topic", topic)
        self.assertIn("id        %s\n" % jid, r[1])
        self.assertExit(self.cli("pause"), EXIT["usage"])
        self.assertExit(self.cli("resume", "--topic", "a b"), EXIT["bad_request"])
        self.assertExit(self.cli("metrics", "--topic", topic), EXIT["usage"])

    def test_purge(self):
        topic = unique("purged")
        ids = [self.add(topic) for _ in range(2)]
        r = self.cli("add", "--topic", topic, "--delay", "600", "--body", "1")
        self.assertExit(r, 0)
        r = self.cli("purge", "--topic", topic, "--state", "delay")
        self.assertExit(r, 0)
        self.assertEqual(r[1], "purged 1 jobs of %s\n" % topic)
        r = self.cli("purge", "--topic", topic, "--json")
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r[1]), {"success": True, "topic": topic, "purged": 2})
        self.assertExit(self.cli("get", "--id", ids[0]), EXIT["not_found"])
        self.assertExit(self.cli("purge"), EXIT["usage"])
        r = self.cli("purge", "--topic", topic, "--state", "done")
        self.assertExit(r, EXIT["bad_request"])
        self.assertIn("field 'state'", r[2])

    # ------------------------------------------------------------ exit codes

    def test_exit_bad_request(self):
        r = self.cli("add", "--topic", "a b", "--body", "1")
        self.assertExit(r, EXIT["bad_request"])
        self.assertIn("field 'topic'", r[2])
        self.assertIn("(bad_request)", r[2])
        self.assertExit(self.cli("add", "--topic", "t", "--ttr", "0", "--body", "1"), EXIT["bad_request"])
        self.assertExit(self.cli("add", "--topic", "t", "--retries", "2.5", "--body", "1"),
                        EXIT["bad_request"])
        self.assertExit(self.cli("pop", "--topic", "t", "--timeout", "61"), EXIT["bad_request"])

    def test_exit_not_found_and_conflict(self):
        self.assertExit(self.cli("get", "--id", unique("nope")), EXIT["not_found"])
        self.assertExit(self.cli("finish", "--id", unique("nope")), EXIT["not_found"])
        self.assertExit(self.cli("release", "--id", unique("nope")), EXIT["not_found"])
        jid = unique("dup")
        self.add("dup", id=jid)
        r = self.cli("add", "--topic", "dup", "--id", jid, "--body", "1")
        self.assertExit(r, EXIT["conflict"])
        self.assertEqual(r[1], "")
        self.assertExit(self.cli("bury", "--id", jid), EXIT["conflict"])

    def test_exit_too_large(self):
        big = b"x" * (70 * 1024)  # over max_body (64 KiB)
        r = self.cli("add", "--topic", "big", "--body-string-file", "-", stdin=big)
        self.assertExit(r, EXIT["too_large"])
        self.assertIn("(too_large)", r[2])
        # over nginx's 1 MiB request limit: nginx's own 413, rewritten as JSON
        huge = b'"' + b"y" * (1100 * 1024) + b'"'
        r = self.cli("--json", "add", "--topic", "big", "--body-file", "-", stdin=huge)
        self.assertExit(r, EXIT["too_large"])
        self.assertEqual(json.loads(r[1])["code"], "too_large")

    def test_exit_unavailable_when_redis_is_down(self):
        c = self.c
        c.stop_redis()
        try:
            r = self.cli("health")
            self.assertExit(r, EXIT["unavailable"])
            self.assertIn("(unavailable)", r[2])
            r = self.cli("health", "--json")
            self.assertExit(r, EXIT["unavailable"])
            self.assertEqual(json.loads(r[1])["redis"], "down")
            self.assertExit(self.cli("add", "--topic", "down", "--body", "1"), EXIT["unavailable"])
            self.assertExit(self.cli("stats"), EXIT["unavailable"])
        finally:
            c.start_redis()
            c.wait_healthy(15)
        self.assertExit(self.cli("health"), 0)

    def test_exit_transport_error(self):
        url = "http://127.0.0.1:%d" % free_port()
        r = run_cli("health", url=url)
        self.assertExit(r, EXIT["other"])
        self.assertIn("cannot reach", r[2])
        self.assertEqual(r[1], "")
        self.assertExit(run_cli("add", "--topic", "t", "--body", "1", "--json", url=url), EXIT["other"])

    def test_exit_usage(self):
        for args in (
            [],
            ["frobnicate"],
            ["add", "--body", "1"],                         # no --topic
            ["add", "--topic", "t"],                        # no body
            ["add", "--topic", "t", "--body", "1", "--body-string", "x"],
            ["add", "--topic", "t", "--body", "not json"],
            ["add", "--topic", "t", "--body", '{"a":1,"a":2}'],   # strict JSON, as the server
            ["add", "--topic", "t", "--body-string-file", "-"],   # stdin not UTF-8 (below)
            ["add", "--topic", "t", "--body", "1", "--delay", "soon"],
            ["add", "--topic", "t", "--body-file", "/nonexistent/file"],
            ["pop", "--topic", "t", "--ttr", "5"],          # flag not for pop
            ["finish", "--finish", "a"],                    # --finish is pop's
            ["pop", "--topic", "t", "--finish", "a", "--finish", "b"],
            ["pop"],
            ["finish"],
            ["finish", "--id", "a", "--ids", "a,b"],
            ["get", "--id"],                                # missing value
            ["get", "--id", "a", "--id", "b"],
            ["get", "--nope", "1"],
            ["get", "-x"],
            ["get", "--id", "a", "stray"],
            ["--json=yes", "health"],
            ["jobs", "--topic", "t"],                       # no --state
            ["jobs", "--state", "ready"],                   # no --topic
            ["kick"],                                       # neither --topic nor --id
            ["kick", "--topic", "t", "--id", "a"],
            ["kick", "--id", "a", "--count", "2"],
            ["reschedule", "--id", "a"],                    # no --delay or --at
            ["reschedule", "--id", "a", "--delay", "1", "--at", "5"],
            ["reschedule", "--delay", "1"],
        ):
            r = self.cli(*args, stdin=b"\xff\xfe")
            self.assertExit(r, EXIT["usage"], repr(args))
            self.assertTrue(r[2].startswith("delayq: ") or r[2].startswith("usage:"), repr((args, r)))
            self.assertEqual(r[1], "", repr(args))

    # ------------------------------------------------------------ env, help, version

    def test_delayq_url_env(self):
        jid = unique("env")
        r = run_cli("add", "--topic", "env", "--id", jid, "--body", "1",
                    env={"DELAYQ_URL": self.url + "/"})
        self.assertExit(r, 0)
        self.assertEqual(r[1], jid + "\n")
        # --url wins over the environment
        dead = "http://127.0.0.1:%d" % free_port()
        self.assertExit(run_cli("get", "--id", jid, url=self.url, env={"DELAYQ_URL": dead}), 0)
        self.assertExit(run_cli("get", "--id", jid, env={"DELAYQ_URL": dead}), EXIT["other"])

    def test_help_and_version(self):
        for args in (["--help"], ["-h"], ["help"]):
            r = run_cli(*args)
            self.assertExit(r, 0, repr(args))
            for cmd in ("add", "pop", "finish", "delete", "get", "touch", "release", "bury", "kick",
                        "stats", "health"):
                self.assertRegex(r[1], r"\n  %s " % cmd)
            self.assertIn("Exit status", r[1])
            self.assertIn("DELAYQ_URL", r[1])
        for args in (["pop", "--help"], ["help", "pop"], ["--help", "pop"]):
            r = run_cli(*args)
            self.assertExit(r, 0, repr(args))
            self.assertTrue(r[1].startswith("usage: delayq pop"), r[1])
            for flag in ("--topic", "--timeout", "--count", "--url", "--json"):
                self.assertIn(flag, r[1])
            self.assertNotIn("--ttr", r[1])
            # a failed --finish does not set the exit status (see test_pop_finish_requests)
            self.assertIn("a failed finish does not change the\n", r[1])
        r = run_cli("policy", "--help")
        self.assertIn("--keep SECONDS        keep the records of finished and deleted jobs", r[1])
        self.assertNotIn("not kept yet", r[1])
        r = run_cli("add", "--help")
        for flag in ("--topic", "--id", "--delay", "--at", "--ttr", "--retries", "--body ",
                     "--body-string", "--body-file", "--body-string-file"):
            self.assertIn(flag, r[1])
        r = run_cli("--version")
        self.assertExit(r, 0)
        self.assertRegex(r[1], r"^delayq \d+\.\d+\.\d+\n$")


class CliAuthTest(DeploymentTestCase):
    """401 unauthorized, --token and DELAYQ_TOKEN."""

    TOKEN = "cli-test-token-0123456789abcdef"
    ADD_ONLY = "cli-test-add-only-0123456789abcd"

    @classmethod
    def setUpClass(cls):
        cls.tokens = tempfile.NamedTemporaryFile("w", prefix="delayq-cli-tokens-", delete=False)
        cls.tokens.write("%s\n%s commands=add\n" % (cls.TOKEN, cls.ADD_ONLY))
        cls.tokens.close()
        cls.DEPLOYMENT_KW = dict(workers=1, threads=8, fcgi_flags={"auth_file": cls.tokens.name})
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        os.unlink(cls.tokens.name)

    def test_tokens(self):
        url = "http://127.0.0.1:%d" % self.c.http_port
        r = run_cli("stats", url=url)
        self.assertEqual(r[0], EXIT["unauthorized"], r)
        self.assertIn("(unauthorized)", r[2])
        r = run_cli("stats", "--token", "wrong-token-0123456789", url=url)
        self.assertEqual(r[0], EXIT["unauthorized"], r)
        r = run_cli("stats", "--token", self.TOKEN, url=url)
        self.assertEqual(r[0], 0, r)
        r = run_cli("stats", url=url, env={"DELAYQ_TOKEN": self.TOKEN})
        self.assertEqual(r[0], 0, r)
        r = run_cli("add", "--topic", "t", "--body", "1", url=url, env={"DELAYQ_TOKEN": self.ADD_ONLY})
        self.assertEqual(r[0], 0, r)
        r = run_cli("pop", "--topic", "t", url=url, env={"DELAYQ_TOKEN": self.ADD_ONLY})
        self.assertEqual(r[0], EXIT["unauthorized"], r)
        # --token wins over the environment
        r = run_cli("pop", "--topic", "t", "--token", self.TOKEN, url=url,
                    env={"DELAYQ_TOKEN": self.ADD_ONLY})
        self.assertEqual(r[0], 0, r)
        # metrics: text on success, the JSON error otherwise
        r = run_cli("metrics", url=url, env={"DELAYQ_TOKEN": self.ADD_ONLY})
        self.assertEqual(r[0], EXIT["unauthorized"], r)
        r = run_cli("metrics", "--token", self.TOKEN, url=url)
        self.assertEqual(r[0], 0, r)
        self.assertIn("delayq_topics ", r[1])
        # health needs no token (load balancers)
        self.assertEqual(run_cli("health", url=url)[0], 0)


class FakeServer:
    """Answers every request with the canned (status, body) for its path and
    records what it got; a status of None reads the request and closes the
    connection without an answer."""

    def __init__(self):
        self.answers = {}
        self.requests = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.requests.append((self.command, self.path, dict(self.headers), body))
                status, data = fake.answers.get(self.path, (404, b"no"))
                if status is None:
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_any

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class CliFakeServerTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeServer()

    def tearDown(self):
        self.fake.close()

    def answer(self, path, status, obj):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.fake.answers[path] = (status, data)

    def test_every_error_code(self):
        for code, status in (("bad_request", 400), ("unauthorized", 401), ("not_found", 404),
                             ("conflict", 409), ("too_large", 413), ("unavailable", 503),
                             ("timeout", 504), ("internal", 500)):
            self.answer("/get", status, {"success": False, "code": code, "error": "because " + code})
            r = run_cli("get", "--id", "x", url=self.fake.url)
            want = EXIT.get(code, EXIT["other"])
            self.assertEqual(r[0], want, (code, r))
            self.assertEqual(r[2], "delayq: because %s (%s)\n" % (code, code))
            r = run_cli("--json", "get", "--id", "x", url=self.fake.url)
            self.assertEqual(r[0], want, (code, r))
            self.assertEqual(json.loads(r[1])["code"], code)

    def test_answers_that_are_not_the_protocol(self):
        for status, data in ((200, b"<html>hello</html>"), (502, b"Bad Gateway"), (200, b""),
                             (200, b"[1,2]")):
            self.answer("/stats", status, data)
            r = run_cli("stats", url=self.fake.url)
            self.assertEqual(r[0], EXIT["other"], (status, data, r))
            self.assertIn("not a delayq answer", r[2])
        # a failure without a code: the HTTP status decides
        self.answer("/stats", 504, {"success": False, "error": "slow"})
        self.assertEqual(run_cli("stats", url=self.fake.url)[0], EXIT["timeout"])

    def test_no_answer_to_a_sent_request_is_a_timeout(self):
        # The server got the add and may have carried it out: exit 8
        # (outcome unknown), not 9 (which says nothing was done).
        self.answer("/add", None, b"")
        r = run_cli("add", "--topic", "t", "--id", "x", "--body", "1", url=self.fake.url)
        self.assertEqual(r[0], EXIT["timeout"], r)
        self.assertIn("outcome is unknown", r[2])
        self.assertEqual(len(self.fake.requests), 1)

    def test_pop_finish_requests(self):
        self.answer("/pop", 200, {"success": True, "jobs": [], "finished": [
            {"id": "x", "success": True},
            {"id": "y", "success": False, "code": "timeout", "error": "its shard did not answer"}]})
        r = run_cli("pop", "--topic", "t", "--finish", "x", url=self.fake.url)
        r2 = run_cli("pop", "--topic", "t", "--count", "2", "--finish", "x,y", url=self.fake.url)
        bodies = [json.loads(b) for _, _, _, b in self.fake.requests]
        self.assertEqual(bodies, [{"topic": "t", "finish": "x"},
                                  {"topic": "t", "count": 2, "finish": ["x", "y"]}])
        self.assertEqual(r2[1], "finished x\nfailed y: its shard did not answer (timeout)\nno job\n")
        self.assertEqual((r[0], r2[0]), (0, 0), "the pop answered: its jobs are to be handled")

    def test_requests_sent(self):
        self.answer("/add", 200, {"success": True, "id": "j1"})
        self.answer("/pop", 200, {"success": True, "id": None, "value": None})
        self.answer("/finish", 200, {"success": True, "results": []})
        self.answer("/health", 200, {"success": True, "redis": "ok"})
        r = run_cli("add", "--topic", "t", "--id", "j1", "--delay", "1.50", "--ttr", "1e2",
                    "--retries", "3", "--body", ' {"a": [1, 2.0]} ', "--token", "tok-123",
                    url=self.fake.url + "/")
        self.assertEqual(r[0], 0, r)
        run_cli("pop", "--topic", "a,b", "--timeout", "2", "--count", "5", url=self.fake.url)
        run_cli("finish", "--ids", "x,y,z", url=self.fake.url)
        run_cli("health", url=self.fake.url, env={"DELAYQ_TOKEN": "tok-env"})
        (m1, p1, h1, b1), (m2, p2, _, b2), (_, p3, _, b3), (m4, p4, h4, b4) = self.fake.requests
        self.assertEqual((m1, p1), ("POST", "/add"))
        self.assertEqual(h1.get("Authorization"), "Bearer tok-123")
        self.assertEqual(h1.get("Content-Type"), "application/json")
        # numbers and the body go out exactly as typed
        self.assertEqual(b1, b'{"topic":"t","id":"j1","delay":1.50,"ttr":1e2,"retries":3,'
                             b'"body": {"a": [1, 2.0]} }')
        self.assertEqual((m2, p2), ("POST", "/pop"))
        self.assertEqual(json.loads(b2), {"topic": "a,b", "timeout": 2, "count": 5})
        self.assertEqual(json.loads(b3), {"ids": ["x", "y", "z"]})
        self.assertEqual((m4, p4, b4), ("GET", "/health", b""))
        self.assertEqual(h4.get("Authorization"), "Bearer tok-env")


if __name__ == "__main__":
    dqtest.main()

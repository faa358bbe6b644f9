"""Bearer-token access control (config key auth_file) through nginx: 401
`unauthorized` for a missing, wrong or out-of-scope token, nothing written by
a refused request, and tokens limited to topic prefixes and commands."""

import json
import os
import tempfile

from dqtest import DeploymentTestCase, connect_as, main
from dqtest.commands import COMMANDS, FIELD_RIGHTS, RIGHTS, SAMPLES

# A token per right that has every right but that one.
LACKING = {r: "lacks-%s-token-0123456789" % r for r in RIGHTS}

ADMIN = "admin-token-0123456789"
PRODUCER = "producer-token-abcdef"  # may only add (and stats) on order.*
CONSUMER = "consumer-token-abcdef"  # may pop/finish/touch/get on order.*
OPS = "ops-token-abcdef0123"  # may pause/resume/stats on order.*

TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("# test tokens\n%s\n%s topics=order. commands=add,stats\n"
            "%s topics=order. commands=pop,finish,touch,get\n"
            "%s topics=order. commands=pause,resume,stats\n" % (ADMIN, PRODUCER, CONSUMER, OPS))
    for right, token in LACKING.items():
        f.write("%s commands=%s\n" % (token, ",".join(r for r in RIGHTS if r != right)))
os.chmod(TOKENS_DIR, 0o755)


# The batch and by-id forms, which need their command's right alone.
FORMS = [
    ("add", {"jobs": [{"topic": "sample.a", "body": 1}, {"topic": "sample.a", "body": 2}]}),
    ("finish", {"ids": ["sample-1", "sample-2"]}),
    ("delete", {"ids": ["sample-1", "sample-2"]}),
    ("kick", {"id": "sample-1"}),
    ("kick", {"ids": ["sample-1", "sample-2"]}),
    ("purge", {"topic": "sample.p", "state": "buried"}),
]
# Each DQ_FIELD_RIGHT row's field, alone and in its batch form.
FIELD_SAMPLES = {
    ("pop", "finish"): [{"topic": "sample.a", "timeout": 0, "finish": "sample-1"},
                        {"topic": "sample.a", "timeout": 0, "finish": ["sample-1"]}],
    ("add", "replace"): [{"topic": "sample.a", "id": "rights-r", "replace": True, "body": 1},
                         {"jobs": [{"topic": "sample.a", "body": 1},
                                   {"topic": "sample.a", "id": "rights-r2", "replace": True,
                                    "body": 1}]}],
}


class Auth(DeploymentTestCase):
    DEPLOYMENT_KW = {"workers": 1, "threads": 8, "fcgi_flags": {"auth_file": TOKENS}}

    def call(self, cmd, token=None, **fields):
        headers = {"Authorization": "Bearer " + token} if token else {}
        st, h, data = self.c.request("POST", "/" + cmd, json.dumps(fields).encode(), headers)
        return st, json.loads(data) if data.startswith(b"{") else data

    def assertUnauthorized(self, st, body):
        self.assertError(st, body, 401, "unauthorized")

    def unchanged(self, fn):
        before = self.c.snapshot()
        fn()
        self.assertEqual(before, self.c.snapshot(), "a refused request changed Redis")

    def test_missing_and_wrong_tokens(self):
        for token in (None, "wrong-token-0123456789", ADMIN + "x", ADMIN[:-1]):
            self.unchanged(lambda: self.assertUnauthorized(
                *self.call("add", token, topic="order.a", body=1)))
            self.assertUnauthorized(*self.call("stats", token))
        st, h, data = self.c.request("GET", "/metrics")
        self.assertEqual(st, 401)
        st, h, data = self.c.request("POST", "/stats", b"{}", {"Authorization": "Basic " + ADMIN})
        self.assertEqual(st, 401)

    def test_the_socket_is_closed_to_other_local_users(self):
        """A local user who could connect to delayq-fcgi's socket would get
        past every rule of nginx's (allow/deny, limit_req, /metrics kept for
        monitoring). nginx's workers run as this user (scripts/nginx-conf)."""
        sock = self.c.sock(0)
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o660)
        if os.geteuid() != 0:
            self.skipTest("connects as the user nobody: run as root")
        self.assertEqual(connect_as("nobody", sock), "EACCES")

    def test_health_needs_no_token(self):
        st, h, data = self.c.request("GET", "/health")
        self.assertEqual(st, 200, data)
        # A probe's own query string (a cache-buster) is ignored.
        st, h, data = self.c.request("GET", "/health?x=1&probe")
        self.assertEqual(st, 200, data)

    def test_admin_token_does_everything(self):
        self.assertOk(*self.call("add", ADMIN, topic="admin.t", id="adm-1", body=1))
        st, body = self.call("pop", ADMIN, topic="admin.t")
        self.assertOk(st, body)
        self.assertEqual(body["id"], "adm-1")
        self.assertOk(*self.call("finish", ADMIN, id="adm-1"))
        st, h, data = self.c.request("GET", "/metrics", None, {"Authorization": "bearer " + ADMIN})
        self.assertEqual(st, 200)
        self.assertIn(b"delayq_jobs", data)

    def test_producer_limited_to_add_on_its_topics(self):
        self.assertOk(*self.call("add", PRODUCER, topic="order.created", id="ord-1", body=1))
        self.unchanged(lambda: self.assertUnauthorized(
            *self.call("add", PRODUCER, topic="mail.x", body=1)))
        # One job outside the prefix refuses the whole batch.
        self.unchanged(lambda: self.assertUnauthorized(*self.call(
            "add", PRODUCER, jobs=[{"topic": "order.a", "body": 1}, {"topic": "orders", "body": 2}])))
        self.assertUnauthorized(*self.call("pop", PRODUCER, topic="order.created"))
        self.assertUnauthorized(*self.call("stats", PRODUCER))  # must name a topic
        self.assertOk(*self.call("stats", PRODUCER, topic="order.created"))
        st, h, data = self.c.request("GET", "/metrics", None, {"Authorization": "Bearer " + PRODUCER})
        self.assertEqual(st, 401)

    def assertLikeUnknownId(self, cmd, token, jid, **fields):
        """cmd on jid answers exactly as it would for an id that does not
        exist, and changes nothing: a token limited to topics cannot tell
        another topic's job from no job."""
        before = self.c.snapshot()
        st, body = self.call(cmd, token, id=jid, **fields)
        self.assertEqual(before, self.c.snapshot(), "%s of another topic's job changed Redis" % cmd)
        st2, body2 = self.call(cmd, token, id="never-" + jid, **fields)
        self.assertError(st, body, 404, "not_found")
        self.assertEqual((st, body["error"].replace(jid, "X")),
                         (st2, body2["error"].replace("never-" + jid, "X")))

    def test_consumer_checks_the_topic_of_jobs_named_by_id(self):
        self.assertOk(*self.call("add", ADMIN, topic="mail.x", id="mail-9", body=1))
        self.assertOk(*self.call("add", ADMIN, topic="order.paid", id="ord-9", body=1))
        self.assertUnauthorized(*self.call("pop", CONSUMER, topic="mail.x"))
        self.assertLikeUnknownId("finish", CONSUMER, "mail-9")
        self.assertLikeUnknownId("touch", CONSUMER, "mail-9")
        # In a batch, an id of another topic is one more unknown id.
        self.unchanged(lambda: self.assertEqual(
            self.call("finish", CONSUMER, ids=["nope-9", "mail-9"])[1]["results"],
            [{"id": "nope-9", "success": False, "code": "not_found", "error": "no job with this id"},
             {"id": "mail-9", "success": False, "code": "not_found", "error": "no job with this id"}]))
        st, body = self.call("pop", CONSUMER, topic="order.paid")
        self.assertOk(st, body)
        self.assertEqual(body["id"], "ord-9")
        self.assertOk(*self.call("touch", CONSUMER, id="ord-9"))
        self.assertOk(*self.call("finish", CONSUMER, id="ord-9"))
        self.assertError(*self.call("finish", CONSUMER, id="nope-1"), 404, "not_found")
        self.assertUnauthorized(*self.call("delete", CONSUMER, id="mail-9"))  # not its command
        # A conflicting add does not tell a limited producer the other job's state.
        st, body = self.call("add", PRODUCER, topic="order.x", id="mail-9", body=1)
        self.assertError(st, body, 409, "conflict")
        self.assertNotIn("state", body["error"])
        self.assertOk(*self.call("delete", ADMIN, id="mail-9"))

    def test_pause_is_limited_to_the_tokens_topics(self):
        self.unchanged(lambda: self.assertUnauthorized(
            *self.call("pause", OPS, topic="other.x")))
        self.unchanged(lambda: self.assertUnauthorized(
            *self.call("pause", CONSUMER, topic="order.x")))
        st, r = self.call("pause", OPS, topic="order.p")
        self.assertOk(st, r)
        st, r = self.call("stats", OPS, topic="order.p")
        self.assertIs(r["topics"]["order.p"]["paused"], True)
        self.assertUnauthorized(*self.call("resume", OPS, topic="other.x"))
        st, r = self.call("resume", OPS, topic="order.p")
        self.assertOk(st, r)
        self.assertIs(r["paused"], False)

    def test_no_race_between_the_check_and_the_action(self):
        """Ids that do not exist yet pass any check made before the action;
        the action must check the topic itself. A limited token hammers
        finish and get on ids while another client adds them under a topic
        the token may not use: no job may be finished, no body read."""
        import threading
        ids = ["race-%d" % i for i in range(300)]
        stop = threading.Event()
        leaks = []

        def hammer():
            conn = self.c.new_http()
            while not stop.is_set():
                for jid in ids:
                    st, h, data = conn.request("POST", "/finish", json.dumps({"id": jid}).encode(),
                                               {"Authorization": "Bearer " + CONSUMER})
                    if st == 200:
                        leaks.append(("finish", jid))
                    st, h, data = conn.request("GET", "/get?id=" + jid, None,
                                               {"Authorization": "Bearer " + CONSUMER})
                    if st == 200 or b"secret" in data:
                        leaks.append(("get", jid))
            conn.close()

        ths = [threading.Thread(target=hammer) for _ in range(4)]
        for th in ths:
            th.start()
        for jid in ids:
            self.assertOk(*self.call("add", ADMIN, topic="mail.secret", id=jid, body="secret"))
        stop.set()
        for th in ths:
            th.join(60)
        self.assertEqual(leaks, [])
        st, body = self.call("stats", ADMIN, topic="mail.secret")
        self.assertEqual(body["topics"]["mail.secret"]["ready"], 300)
        self.assertOk(*self.call("delete", ADMIN, ids=ids))

    # The rights matrix, generated from commands.def: every command, every
    # form, and every field with a right of its own, tried with a token
    # lacking each right. Refused exactly when a right it needs is missing.

    def right_of(self, cmd):
        return "delete" if "CMDF_DELETE_RIGHT" in COMMANDS[cmd][1] else cmd

    def cases(self):
        missing = sorted(set(COMMANDS) - set(SAMPLES))
        self.assertEqual(missing, [], "commands.def has commands with no sample here")
        for cmd in COMMANDS:
            yield cmd, SAMPLES[cmd], set()
        for cmd, fields in FORMS:
            yield cmd, fields, set()
        for cmd, field, right in FIELD_RIGHTS:
            self.assertIn((cmd, field), FIELD_SAMPLES, "a DQ_FIELD_RIGHT row has no sample")
            for fields in FIELD_SAMPLES[(cmd, field)]:
                yield cmd, fields, {self.right_of(right)}

    def test_every_command_and_field_needs_its_rights(self):
        self.assertIn(("pop", "finish", "finish"), FIELD_RIGHTS)
        tried = 0
        for cmd, fields, extra in self.cases():
            public = "CMDF_PUBLIC" in COMMANDS[cmd][1]
            needed = set() if public else {self.right_of(cmd)} | extra
            st, body = self.call(cmd, ADMIN, **fields)
            self.assertNotIn(st, (400, 401), "the sample %s %s: %r" % (cmd, fields, body))
            for right, token in LACKING.items():
                st, body = self.call(cmd, token, **fields)
                what = "%s %s with a token lacking %s" % (cmd, json.dumps(fields), right)
                if right in needed:
                    self.assertUnauthorized(st, body)
                    if right in extra:
                        self.assertIn("needs the %s right" % right, body["error"], what)
                else:
                    self.assertNotEqual(st, 401, "%s: %r" % (what, body))
                tried += 1
        self.assertGreater(tried, len(COMMANDS) * len(RIGHTS))

    def test_pop_finish_needs_the_finish_right(self):
        """The issue's case: a pop-only token could finish any job, here a
        delayed one, through pop's finish field."""
        popper = LACKING["finish"]
        self.assertOk(*self.call("add", ADMIN, topic="sample.d", id="rights-d", delay=3600, body=1))
        self.unchanged(lambda: self.assertUnauthorized(*self.call(
            "pop", popper, topic="sample.d", timeout=0, finish="rights-d")))
        st, body = self.call("get", ADMIN, id="rights-d")
        self.assertOk(st, body)
        self.assertEqual(body["state"], "delay")
        self.assertOk(*self.call("delete", ADMIN, id="rights-d"))

    def test_replace_needs_the_delete_right(self):
        self.assertOk(*self.call("add", ADMIN, topic="sample.u", id="rights-u", delay=3600, body=1))
        self.unchanged(lambda: self.assertUnauthorized(*self.call(
            "add", LACKING["delete"], topic="sample.u", id="rights-u", replace=True, body=2)))
        st, body = self.call("get", ADMIN, id="rights-u")
        self.assertEqual(body["value"], 1)
        self.assertOk(*self.call("delete", ADMIN, id="rights-u"))


if __name__ == "__main__":
    main()

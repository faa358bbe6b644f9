"""Bearer-token access control (config key auth_file) through nginx: 401
`unauthorized` for a missing, wrong or out-of-scope token, nothing written by
a refused request, and tokens limited to topic prefixes and commands."""

import json
import os
import tempfile

from harness import ClusterTestCase, main

ADMIN = "admin-token-0123456789"
PRODUCER = "producer-token-abcdef"  # may only add (and stats) on order.*
CONSUMER = "consumer-token-abcdef"  # may pop/finish/touch on order.*

TOKENS_DIR = tempfile.mkdtemp(prefix="delayq-auth-")
TOKENS = os.path.join(TOKENS_DIR, "tokens")
with open(TOKENS, "w") as f:
    f.write("# test tokens\n%s\n%s topics=order. commands=add,stats\n"
            "%s topics=order. commands=pop,finish,touch\n" % (ADMIN, PRODUCER, CONSUMER))
os.chmod(TOKENS_DIR, 0o755)


class Auth(ClusterTestCase):
    CLUSTER_KW = {"workers": 1, "threads": 8, "fcgi_flags": {"auth_file": TOKENS}}

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

    def test_health_needs_no_token(self):
        st, h, data = self.c.request("GET", "/health")
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

    def test_consumer_checks_the_topic_of_jobs_named_by_id(self):
        self.assertOk(*self.call("add", ADMIN, topic="mail.x", id="mail-9", body=1))
        self.assertOk(*self.call("add", ADMIN, topic="order.paid", id="ord-9", body=1))
        self.assertUnauthorized(*self.call("pop", CONSUMER, topic="mail.x"))
        self.unchanged(lambda: self.assertUnauthorized(*self.call("finish", CONSUMER, id="mail-9")))
        self.unchanged(lambda: self.assertUnauthorized(
            *self.call("finish", CONSUMER, ids=["ord-9", "mail-9"])))
        st, body = self.call("pop", CONSUMER, topic="order.paid")
        self.assertOk(st, body)
        self.assertEqual(body["id"], "ord-9")
        self.assertOk(*self.call("touch", CONSUMER, id="ord-9"))
        self.assertOk(*self.call("finish", CONSUMER, id="ord-9"))
        # An unknown id is not a topic leak: it is simply not found.
        self.assertError(*self.call("finish", CONSUMER, id="nope-1"), 404, "not_found")
        self.assertUnauthorized(*self.call("delete", CONSUMER, id="mail-9"))
        self.assertOk(*self.call("delete", ADMIN, id="mail-9"))


if __name__ == "__main__":
    main()

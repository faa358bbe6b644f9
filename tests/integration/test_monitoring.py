#!/usr/bin/env python3
"""contrib/'s monitoring against a real deployment: the Grafana dashboard
(contrib/grafana/delayq.json) is well-formed, every alert of the Prometheus
rules (contrib/prometheus/delayq-alerts.yml) is in docs/OPERATIONS.md, and
every metric, label and label value the dashboard and the rules use is one
that /metrics exposes.

The deployment is driven until every series the rules need exists: a
delayed job moved by a timer (timer lag), a buried job, a paused topic, a
request answered 503 unavailable while Redis was stopped, a callback that
failed against a local receiver answering 500, and a topic whose policy's
concurrency holds a ready job back. That the rules fire on such series is
proven by promtool (`make check-alerts`).

Run: DELAYQ_SRC_DIR=. DELAYQ_BUILD_DIR=. PYTHONPATH=tests python3 tests/integration/test_monitoring.py
"""

import json
import os
import re
import time
import unittest

import dqtest
from dqtest import DeploymentTestCase, main, unique
from dqtest.receiver import Receiver

CONTRIB = os.path.join(dqtest.SRC_DIR, "contrib")
DASHBOARD = os.path.join(CONTRIB, "grafana", "delayq.json")
RULES = os.path.join(CONTRIB, "prometheus", "delayq-alerts.yml")

# What Prometheus adds itself: the scrape's own series and target labels.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance", "le"}
METRIC = re.compile(r"\b(delayq_[a-z0-9_]+|up)\b")
GROUPING = re.compile(r"\b(?:by|without|on)\s*\(([^)]*)\)")
MATCHER = re.compile(r'\b([a-z_]+)\s*=~?\s*"([^"$]*)"')


def dashboard_exprs(dash):
    """Every PromQL text of the dashboard: panel targets and variable queries."""
    exprs = []
    for p in dash["panels"]:
        exprs.extend(t["expr"] for t in p.get("targets", []))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            exprs.append(v["definition"])
    return exprs


def rules_text():
    """The rules file without its comments (they name metrics to come)."""
    with open(RULES) as f:
        return "\n".join(line for line in f if not line.lstrip().startswith("#"))


def scrape_samples(text):
    """{metric name: [ {label: value} ... ]} of a /metrics answer."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        samples.setdefault(m.group(1), []).append(dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or "")))
    return samples


class Dashboard(unittest.TestCase):
    def setUp(self):
        with open(DASHBOARD) as f:
            self.dash = json.load(f)

    def test_panels_are_complete(self):
        ids = [p["id"] for p in self.dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        variables = {v["name"] for v in self.dash["templating"]["list"]}
        self.assertEqual(variables, {"datasource", "job", "topic"})
        graphs = [p for p in self.dash["panels"] if p["type"] != "row"]
        self.assertGreater(len(graphs), 10)
        for p in graphs:
            self.assertTrue(p.get("title"), p)
            self.assertEqual(p["datasource"], {"type": "prometheus", "uid": "${datasource}"}, p["title"])
            self.assertTrue(set(p["gridPos"]) >= {"h", "w", "x", "y"}, p["title"])
            self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, p["title"])
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertTrue(METRIC.search(t["expr"]), t["expr"])
                self.assertEqual(t["expr"].count("("), t["expr"].count(")"), t["expr"])
                for used in re.findall(r"\$(\w+)", t["expr"]):
                    self.assertIn(used, variables, t["expr"])


    def test_every_alert_is_in_operations(self):
        with open(os.path.join(dqtest.SRC_DIR, "docs", "OPERATIONS.md")) as f:
            ops = f.read()
        alerts = re.findall(r"^\s*- alert: (\w+)$", rules_text(), re.M)
        self.assertGreaterEqual(len(alerts), 8)
        for name in alerts:
            self.assertIn("| `%s` |" % name, ops, "docs/OPERATIONS.md's table of alerts")


def sample_value(text, name, topic):
    """The value of name{topic="<topic>"} on /metrics, or None."""
    m = re.search(r'^%s\{topic="%s"\} (\S+)$' % (re.escape(name), re.escape(topic)), text, re.M)
    return float(m.group(1)) if m else None


class MetricsUsedExist(DeploymentTestCase):
    # A pusher that may call the loopback receiver below.
    DEPLOYMENT_KW = {"workers": 1, "threads": 8, "n_pushers": 1, "push_allow": "*,loopback"}

    @classmethod
    def setUpClass(cls):
        cls.rx = Receiver(lambda req: (500, {}, b"down")).start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.rx.stop()

    def test_every_metric_label_and_value_used_is_exposed(self):
        with open(DASHBOARD) as f:
            exprs = dashboard_exprs(json.load(f)) + [rules_text()]
        text = self.scrape_after_every_kind_of_event()
        # the callback-failure and throttling series carry real events
        self.assertGreaterEqual(sample_value(text, "delayq_jobs_push_failed_total", self.failing), 1)
        self.assertEqual(sample_value(text, "delayq_topic_throttled", self.throttled), 1)
        samples = scrape_samples(text)
        used = set()
        for e in exprs:
            used.update(METRIC.findall(e))
        self.assertIn("delayq_timer_lag_seconds", used)
        for name in sorted(used - PROMETHEUS_SERIES):
            self.assertTrue(name in samples, "%s is used but /metrics has no such series" % name)
        labels = {k for series in samples.values() for s in series for k in s}
        for e in exprs:
            for group in GROUPING.findall(e):
                for label in filter(None, (x.strip() for x in group.split(","))):
                    self.assertTrue(label in labels | TARGET_LABELS,
                                    "label %s in %s: /metrics has no such label" % (label, e))
            # each fixed label value matched (code="unavailable", state="buried") occurs
            for name, rest in re.findall(r"\b(delayq_[a-z0-9_]+)\{([^}]*)\}", e):
                for label, value in MATCHER.findall(rest):
                    if label in TARGET_LABELS or not value or value == ".*":
                        continue
                    self.assertTrue(any(s.get(label) == value for s in samples[name]),
                                    "%s{%s=\"%s\"} never occurs on /metrics" % (name, label, value))

    def scrape_after_every_kind_of_event(self):
        # Redis stopped first (it keeps nothing: its series start afresh): a
        # request answers 503 unavailable, and so does /metrics itself.
        self.c.stop_redis()
        self.assertEqual(self.c.get("/stats")[0], 503)
        self.assertEqual(self.c.request("GET", "/metrics")[0], 503)
        self.c.start_redis()
        deadline = time.monotonic() + 15 * dqtest.SLOW
        while self.c.get("/health")[0] != 200:
            self.assertLess(time.monotonic(), deadline, "delayq answers again once Redis is back")
            time.sleep(0.1)
        t = unique("mon")
        self.add(t, "moved by a timer", delay=0.2)
        deadline = time.monotonic() + 10 * dqtest.SLOW
        while self.c.get("/stats?topic=" + t)[1]["topics"][t]["ready"] < 1:
            self.assertLess(time.monotonic(), deadline, "the delayed job became ready")
            time.sleep(0.05)
        st, r = self.c.req("pop", topic=t)
        self.assertOk(st, r)
        self.assertOk(*self.c.req("bury", id=r["id"]))
        self.assertOk(*self.c.req("pause", topic=unique("mon-paused")))
        # A callback the receiver answers 500: a failed attempt (push_failed);
        # the 60 s backoff step keeps it from being sent again meanwhile.
        self.failing = unique("mon-push")
        self.add(self.failing, "refused", url=self.rx.url("/fail"), backoff=[60])
        deadline = time.monotonic() + 10 * dqtest.SLOW
        while self.c.get("/stats?topic=" + self.failing)[1]["topics"][self.failing]["push_failed"] < 1:
            self.assertLess(time.monotonic(), deadline, "the callback failed once")
            time.sleep(0.05)
        # Concurrency 1 with one job reserved: the other ready job is held back.
        self.throttled = unique("mon-flow")
        self.assertOk(*self.c.req("policy", topic=self.throttled, concurrency=1))
        self.add(self.throttled, 1)
        self.add(self.throttled, 2)
        self.assertOk(*self.c.req("pop", topic=self.throttled))
        # A timer's lag shows once it is in the live timers again: Redis
        # came back empty, and the timer re-registers when it renews its lease.
        deadline = time.monotonic() + 15 * dqtest.SLOW
        while True:
            st, _, data = self.c.request("GET", "/metrics")
            self.assertEqual(st, 200)
            text = data.decode()
            if "\ndelayq_timer_lag_seconds{" in text or time.monotonic() > deadline:
                return text
            time.sleep(0.2)


if __name__ == "__main__":
    main()

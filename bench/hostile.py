#!/usr/bin/env python3
"""delayq under hostile use: the figures the reliability work is judged by.

    bench/hostile.py [rss|stale|storm|all] [--storm-seconds 60]

Each part starts its own private deployment (tests/dqtest's Deployment:
redis-server, delayq-fcgi, delayq-timer, nginx in a temp dir on 127.0.0.1)
from the binaries in DELAYQ_BUILD_DIR (default: the top directory), so the
same script measures an older build checked out elsewhere:

    DELAYQ_BUILD_DIR=/path/to/old/build bench/hostile.py all

Parts, one FIGURE line per figure (as bench/run.py prints them):
- rss: 20,000 one-off topics (each job added and deleted), then the size of
  /stats and /metrics, the Redis time of the stats script, and the RSS of a
  worker (1 worker x 16 threads) before and after 320 /metrics calls over 16
  connections.
- stale: 25,000 jobs added and deleted without a pop, then one more added:
  does pop return it, and how many bytes do the topic's keys keep.
- storm: 48 clients send pop with timeout 30 and hang up after 0.2 s, for
  --storm-seconds; meanwhile one producer adds a job every 100 ms (its
  latency) and one consumer long-polls another topic (add-to-receive time).
  Counts the storm requests answered 503 before their client hung up.
"""

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# A tool, not a test module: it finds the shared test package itself.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import dqtest  # noqa: E402


def fig(key, value, unit=""):
    v = ("%.4g" % value) if isinstance(value, float) else str(value)
    print("FIGURE %s %s %s" % (key, v, unit), flush=True)


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def commandstats_usec(c):
    """Total usec Redis spent in script calls (EVAL*, FCALL*) so far."""
    info = c.redis("INFO", "commandstats").decode()
    total = 0
    for line in info.splitlines():
        name = line.split(":", 1)[0]
        if name.startswith(("cmdstat_eval", "cmdstat_fcall")):
            for kv in line.split(":", 1)[1].split(","):
                k, v = kv.split("=")
                if k == "usec":
                    total += int(v)
    return total


def part_rss(args):
    with dqtest.Deployment(workers=1, threads=16) as c:
        n_topics = 20000
        for start in range(0, n_topics, 1000):
            jobs = [{"topic": "one.%d" % i, "id": "one-%d" % i, "body": i}
                    for i in range(start, start + 1000)]
            st, b = c.post("/add", {"jobs": jobs})
            assert st == 200, (st, b)
            st, b = c.post("/delete", {"ids": [j["id"] for j in jobs]})
            assert st == 200, (st, b)
        st, h, stats = c.request("GET", "/stats")
        fig("rss.stats_bytes", len(stats), "bytes")
        before = commandstats_usec(c)
        st, h, metrics = c.request("GET", "/metrics")
        fig("rss.stats_script_ms", (commandstats_usec(c) - before) / 1000.0, "ms")
        fig("rss.metrics_bytes", len(metrics), "bytes")
        fig("rss.redis_keys", c.redis("DBSIZE"), "keys")
        _, workers = c.fcgi_pids()
        fig("rss.worker_before_kb", dqtest.rss_kb(workers[0]), "kB")
        calls = 320

        def caller(n):
            conn = c.new_http()
            for _ in range(n):
                conn.request("GET", "/metrics")
            conn.close()

        for rnd in (1, 2, 3):
            threads = [threading.Thread(target=caller, args=(calls // 16,)) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # after 320, 640 and 960 calls: bounded means it stops growing
            fig("rss.worker_after_%d_kb" % (calls * rnd), dqtest.rss_kb(workers[0]), "kB")


def part_stale(args):
    with dqtest.Deployment() as c:
        n = 25000
        for start in range(0, n, 1000):
            ids = ["st-%d" % i for i in range(start, start + 1000)]
            st, b = c.post("/add", {"jobs": [{"topic": "stale", "id": i, "body": 1} for i in ids]})
            assert st == 200, (st, b)
            st, b = c.post("/delete", {"ids": ids})
            assert st == 200, (st, b)
        st, b = c.post("/add", {"topic": "stale", "id": "st-live", "body": 1})
        assert st == 200, (st, b)
        st, b = c.post("/pop", {"topic": "stale"})
        fig("stale.pop_found", 1 if (st == 200 and b.get("id") == "st-live") else 0, "bool")
        # What the topic's keys keep after add + finish without a pop.
        for start in range(0, n, 1000):
            ids = ["fin-%d" % i for i in range(start, start + 1000)]
            c.post("/add", {"jobs": [{"topic": "kept", "id": i, "body": 1} for i in ids]})
            c.post("/finish", {"ids": ids})
        total = 0
        for k in c.redis("KEYS", "*kept*"):
            total += c.redis("MEMORY", "USAGE", k) or 0
        fig("stale.bytes_left_per_job", total / float(n), "bytes")


def part_storm(args):
    seconds = args.storm_seconds
    with dqtest.Deployment(workers=4, threads=32, n_timers=1) as c:
        stop = time.monotonic() + seconds
        counts = {"sent": 0, "answered": 0, "503": 0}
        lock = threading.Lock()
        body = json.dumps({"topic": "storm", "timeout": 30}).encode()

        add_lat, recv_lat = [], []
        sent_at = {}

        def producer():
            conn = c.new_http()
            i = 0
            while time.monotonic() < stop:
                jid = "calm-%d" % i
                t0 = time.monotonic()
                sent_at[jid] = t0
                st, _, _ = conn.request("POST", "/add", json.dumps(
                    {"topic": "calm", "id": jid, "body": i}).encode())
                add_lat.append(time.monotonic() - t0)
                i += 1
                time.sleep(0.1)

        def consumer():
            conn = c.new_http()
            while time.monotonic() < stop + 2:
                st, _, data = conn.request("POST", "/pop", json.dumps(
                    {"topic": "calm", "timeout": 1}).encode())
                now = time.monotonic()
                try:
                    b = json.loads(data)
                except ValueError:
                    continue
                if b.get("id"):
                    recv_lat.append(now - sent_at.get(b["id"], now))
                    conn.request("POST", "/finish", json.dumps({"id": b["id"]}).encode())

        ts = [threading.Thread(target=dqtest.impatient_client,
                               args=(c.http_port, "/pop", body, stop, counts, lock))
              for _ in range(48)]
        ts += [threading.Thread(target=producer), threading.Thread(target=consumer)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        fig("storm.requests", counts["sent"], "requests")
        fig("storm.failed_503", counts["503"], "requests")
        fig("storm.add_p50_ms", percentile(add_lat, 50) * 1000, "ms")
        fig("storm.add_p95_ms", percentile(add_lat, 95) * 1000, "ms")
        fig("storm.add_max_ms", max(add_lat) * 1000, "ms")
        fig("storm.receive_p95_ms", percentile(recv_lat, 95) * 1000, "ms")
        fig("storm.receive_max_ms", max(recv_lat or [0]) * 1000, "ms")
        fig("storm.received", len(recv_lat), "jobs")
        fig("storm.added", len(add_lat), "jobs")


PARTS = {"rss": part_rss, "stale": part_stale, "storm": part_storm}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=sorted(PARTS) + ["all"])
    ap.add_argument("--storm-seconds", type=float, default=60.0)
    args = ap.parse_args()
    for name in (sorted(PARTS) if args.part == "all" else [args.part]):
        PARTS[name](args)


if __name__ == "__main__":
    main()

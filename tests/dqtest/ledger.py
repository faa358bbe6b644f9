"""A steady load with a client-side ledger, for tests that break Redis under
traffic (a master killed, a slot migrated): producers add jobs with ids of
their own and note each acknowledgement; consumers pop, note each delivery
and finish at once. Afterwards the ledger tells what was lost (acknowledged,
never delivered), what was delivered twice within its TTR, and how long the
service answered no add (the longest gap between two acknowledged adds).

An add answered 503 had no effect and is retried; 504, a 502 or a broken
connection is an unknown outcome: it is retried with the same id until 200
or 409 (409: the first one took), as a client should. Such an add may have
taken effect, been delivered and finished before the retry came, which then
adds the job anew (docs/PROTOCOL.md, "Errors from Redis"): for those ids a
second life, deliveries starting again at attempt 1, is not counted as a
duplicate."""

import json
import threading
import time

from .httpconn import Http


class LedgerLoad:
    def __init__(self, deployment, topic, producers=2, consumers=2, ttr=5.0, rate=200.0):
        self.d = deployment
        self.topic = topic
        self.nproducers = producers
        self.nconsumers = consumers
        self.ttr = ttr
        self.rate = rate  # adds per second, all producers together
        self.lock = threading.Lock()
        self.acked = {}       # id -> monotonic time of the acknowledgement
        self.uncertain = set()  # ids acknowledged after an add of unknown outcome
        self.deliveries = {}  # id -> [(monotonic time received, attempts)]
        self.statuses = {}    # (command, status) -> count
        self.ack_times = []
        self.ack_times_by_producer = [[] for _ in range(producers)]
        self.stop_adding = threading.Event()
        self.stop_popping = threading.Event()
        self.threads = []

    def _count(self, cmd, st):
        with self.lock:
            self.statuses[(cmd, st)] = self.statuses.get((cmd, st), 0) + 1

    def _post(self, conn, cmd, fields):
        try:
            st, _, data = conn.request("POST", "/" + cmd, json.dumps(fields).encode())
        except OSError:
            conn.close()
            st, data = 0, b""
        self._count(cmd, st)
        try:
            return st, json.loads(data) if data else {}
        except ValueError:
            return st, {}

    def _producer(self, k):
        conn = Http(self.d.http_port, timeout=30)
        n = 0
        gap = self.nproducers / self.rate
        while not self.stop_adding.is_set():
            jid = "%s-p%d-%d" % (self.topic, k, n)
            n += 1
            unknown = False
            while True:  # until the outcome is known
                st, r = self._post(conn, "add", {"topic": self.topic, "id": jid, "body": jid,
                                                 "ttr": self.ttr})
                if st in (200, 409):
                    with self.lock:
                        now = time.monotonic()
                        if unknown:
                            self.uncertain.add(jid)
                        self.acked[jid] = now
                        self.ack_times.append(now)
                        self.ack_times_by_producer[k].append(now)
                    break
                unknown = unknown or st != 503
                time.sleep(0.05)
            time.sleep(gap)
        conn.close()

    def _consumer(self):
        conn = Http(self.d.http_port, timeout=30)
        while not self.stop_popping.is_set():
            sent = time.monotonic()
            st, r = self._post(conn, "pop", {"topic": self.topic, "count": 10, "timeout": 0.5})
            if st != 200:
                time.sleep(0.05)
                continue
            now = time.monotonic()
            for j in r.get("jobs", []):
                with self.lock:
                    self.deliveries.setdefault(j["id"], []).append((now, j["attempts"], sent))
            ids = [j["id"] for j in r.get("jobs", [])]
            while ids and not self.stop_popping.is_set():
                st, _ = self._post(conn, "finish", {"ids": ids})
                if st == 200:
                    break
                time.sleep(0.05)
        conn.close()

    def start(self):
        self.threads = [threading.Thread(target=self._producer, args=(k,), daemon=True)
                        for k in range(self.nproducers)]
        self.threads += [threading.Thread(target=self._consumer, daemon=True)
                         for _ in range(self.nconsumers)]
        for t in self.threads:
            t.start()
        return self

    def stop(self, drain_timeout=60.0):
        """Stops adding, lets the consumers take what is left, stops them."""
        self.stop_adding.set()
        for t in self.threads[:self.nproducers]:
            t.join(60)  # their last adds are acknowledged (or not) now
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline:
            with self.lock:
                left = [j for j in self.acked if j not in self.deliveries]
            if not left:
                break
            time.sleep(0.2)
        self.stop_popping.set()
        for t in self.threads[self.nproducers:]:
            t.join(60)

    def lost(self):
        """Acknowledged ids never delivered."""
        with self.lock:
            return sorted(j for j in self.acked if j not in self.deliveries)

    def duplicates(self, eps=0.05):
        """(id, deliveries) delivered twice within its TTR (or with the same
        attempts number twice). A delivery's TTR starts when its pop ran in
        Redis, somewhere between the pop's sending and its answer, so the
        bound is conservative: the next delivery arrived before the first
        pop was sent plus the TTR. Deliveries: (received, attempts, sent)."""
        out = []
        with self.lock:
            for jid, ds in self.deliveries.items():
                ds = sorted(ds)
                pairs = list(zip(ds, ds[1:]))
                # An id acknowledged after an unknown outcome may have lived
                # twice: the add that took, then the retry once that job was
                # finished. Its second life starts at the one delivery with
                # attempts 1 that follows another (the first life's own
                # first delivery may have been lost with its pop's answer).
                restarts = [i for i, (_, d) in enumerate(pairs) if d[1] == 1]
                if jid in self.uncertain and len(restarts) == 1:
                    del pairs[restarts[0]]
                for (_, a1, sent1), (t2, a2, _) in pairs:
                    if a1 == a2 or t2 < sent1 + self.ttr - eps:
                        out.append((jid, ds))
                        break
        return out

    def longest_add_gap(self, since=0.0):
        """The longest time (s) from `since` to the last acknowledgement
        with no add acknowledged."""
        with self.lock:
            times = sorted(t for t in self.ack_times if t >= since)
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)

    def every_producer_acked_after(self, t):
        with self.lock:
            return all(any(a > t for a in times) for times in self.ack_times_by_producer)

    def outage_after(self, t, until=None):
        """The longest a producer waited for an add to be acknowledged,
        from its last acknowledgement before t (a failure) to `until`
        (default: now). A producer stuck on a job whose shard is down waits
        exactly as long as that shard is down for it."""
        end = until if until is not None else time.monotonic()
        worst = 0.0
        with self.lock:
            for times in self.ack_times_by_producer:
                before = [a for a in times if a <= t]
                if not before:
                    continue
                after = [a for a in times if t < a <= end]
                if not after:  # still waiting at `end`
                    worst = max(worst, end - before[-1])
                    continue
                seq = [before[-1]] + after
                worst = max(worst, max(b - a for a, b in zip(seq, seq[1:])))
        return worst

    def summary(self):
        with self.lock:
            return {"acked": len(self.acked), "delivered": len(self.deliveries),
                    "acked after an unknown outcome": len(self.uncertain),
                    "statuses": dict(sorted((("%s %s" % k), v)
                                            for k, v in self.statuses.items()))}

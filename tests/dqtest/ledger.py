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
duplicate.

Optionally some adds are delayed (`delayed`: the share, `max_delay`
seconds at most) and some carry a callback (`callback_url`, `push_share`):
those are delivered by delayq-push to a receiver that reports each request
with note_callback(); lost() covers them too, push_duplicates() checks their
attempts against delayq-push's window (the callback's timeout plus
push_grace_ms)."""

import json
import random
import threading
import time

from .httpconn import Http


class LedgerLoad:
    def __init__(self, deployment, topic, producers=2, consumers=2, ttr=5.0, rate=200.0,
                 delayed=0.0, max_delay=3.0, callback_url=None, push_share=0.0,
                 callback_timeout=2.0, seed=0):
        self.d = deployment
        self.delayed = delayed
        self.max_delay = max_delay
        self.callback_url = callback_url
        self.push_share = push_share  # once callback_url is set
        self.callback_timeout = callback_timeout
        self.seed = seed
        self.due = {}         # id -> monotonic time it was due at the earliest
        self.delays = {}      # id -> delay (s) of a delayed job
        self.finished = {}    # id -> monotonic time a finish of it was answered 200
        self.add_answers = {}  # id -> [(monotonic time answered, status)] of every add attempt
        self.push_ids = set()  # ids delivered by callback
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

    def job(self, jid, rng):
        """The add's fields for a new job: immediate or delayed, pulled or
        pushed, as the shares say."""
        fields = {"topic": self.topic, "id": jid, "body": jid, "ttr": self.ttr}
        if rng.random() < self.delayed:
            fields["delay"] = round(rng.uniform(0.2, self.max_delay), 3)
        if self.callback_url and rng.random() < self.push_share:
            fields["callback"] = {"url": self.callback_url, "timeout": self.callback_timeout}
        return fields

    def add(self, post, fields, k=None, stop=None):
        """Adds one job through post(cmd, fields) -> (status, answer) until
        its outcome is known (200 or 409), or `stop` (an Event; default: the
        consumers' end) is set, and notes it; returns the number of
        attempts. The ledger's own producers and probes share it."""
        stop = stop or self.stop_popping
        jid = fields["id"]
        unknown = False
        tries = 0
        with self.lock:
            if "callback" in fields:
                self.push_ids.add(jid)
            if fields.get("delay"):
                self.delays[jid] = fields["delay"]
        first = time.monotonic()  # an attempt of unknown outcome may be the one that took
        while True:
            tries += 1
            st, _ = post("add", fields)
            with self.lock:
                self.add_answers.setdefault(jid, []).append((time.monotonic(), st))
            if st in (200, 409):
                with self.lock:
                    now = time.monotonic()
                    if unknown:
                        self.uncertain.add(jid)
                    self.acked[jid] = now
                    self.due.setdefault(jid, first + fields.get("delay", 0))
                    self.ack_times.append(now)
                    if k is not None:
                        self.ack_times_by_producer[k].append(now)
                return tries
            unknown = unknown or st != 503
            # an add refused with no effect is given up once adding stops
            # (a shard that refuses adds for good would hold stop() forever)
            if stop.is_set() or (not unknown and self.stop_adding.is_set()):
                return tries
            time.sleep(0.05)

    def _producer(self, k):
        conn = Http(self.d.http_port, timeout=30)
        rng = random.Random("%s-%d" % (self.seed, k))
        n = 0
        gap = self.nproducers / self.rate
        while not self.stop_adding.is_set():
            jid = "%s-p%d-%d" % (self.topic, k, n)
            n += 1
            self.add(lambda cmd, f: self._post(conn, cmd, f), self.job(jid, rng), k)
            time.sleep(gap)
        conn.close()

    def note_callback(self, jid, attempt, at):
        """A callback request for jid (delayq-attempt `attempt`) arrived at
        monotonic time `at`."""
        with self.lock:
            self.deliveries.setdefault(jid, []).append((at, attempt, at))

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
                    done = time.monotonic()
                    with self.lock:
                        for j in ids:
                            self.finished.setdefault(j, done)
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
                if jid in self.push_ids:
                    continue
                ds = sorted(ds)
                for (_, a1, sent1), (t2, a2, _) in self._pairs(jid, ds):
                    if a1 == a2 or t2 < sent1 + self.ttr - eps:
                        out.append((jid, ds))
                        break
        return out

    def resurrected(self):
        """(id, finished at, deliveries) of jobs delivered by a pop sent
        after a finish of them was answered 200: a lost finish (a failover
        that dropped it, a stale master that took it). Ids acknowledged
        after an unknown outcome may live twice and are left out."""
        out = []
        with self.lock:
            for jid, t in self.finished.items():
                later = [d for d in self.deliveries.get(jid, []) if d[2] > t]
                if later and jid not in self.uncertain:
                    out.append((jid, t, later))
        return out

    def _pairs(self, jid, ds):
        """Consecutive deliveries of jid (sorted) that must be one life's.
        An id acknowledged after an unknown outcome may have lived more than
        once: each add attempt of unknown outcome may have taken, even
        seconds after it was answered (a request held up by a partition
        reaches Redis when it heals), and an attempt that comes once the
        job before it was finished adds it anew. Each new life starts at a
        delivery with attempts 1 that follows another (a life's own first
        delivery may have been lost with its pop's answer); at most as many
        as there were attempts of unknown outcome."""
        pairs = list(zip(ds, ds[1:]))
        restarts = [i for i, (_, d) in enumerate(pairs) if d[1] == 1]
        unknown = sum(1 for _, st in self.add_answers.get(jid, []) if st not in (200, 409, 503))
        if jid in self.uncertain and len(restarts) <= max(1, unknown):
            for i in reversed(restarts):
                del pairs[i]
        return pairs

    def push_duplicates(self, grace, slack=1.0):
        """(id, deliveries) of callback jobs sent twice with the same
        delayq-attempt, or again sooner than delayq-push's window allows:
        an attempt answered 2xx (this receiver answers every request 200)
        may be sent again only once its reservation ran out, the callback
        timeout plus push_grace_ms after the pusher took it. The take is
        not seen here; it came before the request's arrival by less than
        `slack` seconds, which is the one assumption of this check."""
        window = self.callback_timeout + grace - slack
        out = []
        with self.lock:
            for jid in self.push_ids:
                ds = sorted(self.deliveries.get(jid, []))
                for (t1, a1, _), (t2, a2, _) in self._pairs(jid, ds):
                    if a1 == a2 or t2 < t1 + window:
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

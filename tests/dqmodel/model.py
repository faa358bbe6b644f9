"""A reference model of delayq's job life cycle, written from
docs/PROTOCOL.md (not from the Redis functions): what each command must
answer and what state it leaves, for the jobs of one test run.

Pure: no I/O, no clock. The runner (runner.py) tells it what happened to
the jobs whose timing is the service's to decide (a TTR that ran out, a
short delay that fell due) once it has seen the service settle them.

States: delay, ready, reserved, buried; a job that ended is gone, or kept
as a record (finished / deleted) while its topic's `keep` is set.
"""

STATES = ("delay", "ready", "reserved", "buried")


class Job:
    def __init__(self, jid, topic, key, state, retries, short_ttr, body, backoff=False):
        self.id = jid
        self.topic = topic
        self.key = key
        self.state = state
        self.retries = retries      # None: unlimited
        self.short_ttr = short_ttr  # the runner's short TTR, else a long one
        self.body = body
        self.backoff = backoff      # one short step after every failure
        self.attempts = 0
        self.kicked_at = 0          # attempts when last kicked (retries count afresh)
        self.seq = 0                # when it last entered its state (order of burials)

    def retries_spent(self):
        """PROTOCOL, add: retries N allows N redeliveries after the first."""
        return self.retries is not None and self.attempts - self.kicked_at >= self.retries + 1


class Outcome:
    """What the model says a command must answer: an HTTP status, and for
    a 200 the fields the answer must carry."""

    def __init__(self, status, code=None, **fields):
        self.status = status
        self.code = code
        self.fields = fields

    def __repr__(self):
        return "Outcome(%d, %s, %r)" % (self.status, self.code, self.fields)


OK = 200


def conflict():
    return Outcome(409, "conflict")


def not_found():
    return Outcome(404, "not_found")


class Model:
    """shard_of(id) -> the shard a job lives in, of `shards`: a topic's
    `concurrency` is split between the shards (PROTOCOL, policy)."""

    def __init__(self, shard_of=lambda jid: 0, shards=1):
        self.jobs = {}        # id -> Job
        self.records = {}     # id -> (topic, "finished" | "deleted")
        self.paused = set()
        self.concurrency = {}  # topic -> int
        self.key_concurrency = {}  # topic -> int
        self.keep = {}        # topic -> seconds
        self.shard_of = shard_of
        self.shards = shards
        self._seq = 0

    # ------------------------------------------------------------ helpers

    def _next_seq(self):
        self._seq += 1
        return self._seq

    def _enter(self, j, state):
        j.state = state
        j.seq = self._next_seq()

    def _end(self, j, outcome):
        del self.jobs[j.id]
        if self.keep.get(j.topic):
            self.records[j.id] = (j.topic, outcome)

    def _job_in(self, jid, *states):
        """(job, None) when jid is live in one of states (any state when
        none is named), else (None, the 404 or 409 to answer)."""
        j = self.jobs.get(jid)
        if j is None:
            return None, not_found()
        if states and j.state not in states:
            return None, conflict()
        return j, None

    def reserved_of_key(self, topic, key):
        return sum(1 for j in self.jobs.values()
                   if j.state == "reserved" and j.topic == topic and j.key == key)

    def key_room(self, topic, key):
        """How many more jobs of (topic, key) a pop may take now; None: no limit."""
        kc = self.key_concurrency.get(topic)
        if key is None or kc is None:
            return None
        return max(0, kc - self.reserved_of_key(topic, key))

    def shard_room(self, topic, shard):
        """How many more jobs of topic a pop may take in shard now under
        its `concurrency` (the shard's share of it); None: no limit."""
        limit = self.concurrency.get(topic)
        if limit is None:
            return None
        share = limit // self.shards + (1 if shard < limit % self.shards else 0)
        reserved = sum(1 for j in self.jobs.values() if j.state == "reserved" and j.topic == topic
                       and self.shard_of(j.id) == shard)
        return max(0, share - reserved)

    def takeable(self, topic):
        """How many of topic's ready jobs a pop may take at once now: a
        shard's room caps its jobs, and a key's room its key's."""
        if topic in self.paused:
            return 0
        groups = {}  # shard -> key -> jobs
        for j in self.jobs.values():
            if j.topic == topic and j.state == "ready":
                groups.setdefault(self.shard_of(j.id), {}).setdefault(j.key, []).append(j)
        n = 0
        for shard, by_key in groups.items():
            in_shard = 0
            for key, jobs in by_key.items():
                room = self.key_room(topic, key)
                in_shard += len(jobs) if room is None else min(room, len(jobs))
            room = self.shard_room(topic, shard)
            n += in_shard if room is None else min(room, in_shard)
        return n

    def counts(self, topic):
        c = dict.fromkeys(STATES, 0)
        for j in self.jobs.values():
            if j.topic == topic:
                c[j.state] += 1
        return c

    def view(self, jid):
        """What get must answer: (state, attempts) of a live job, the
        outcome of a kept record, or None (404)."""
        j = self.jobs.get(jid)
        if j:
            return {"state": j.state, "attempts": j.attempts, "topic": j.topic}
        if jid in self.records:
            topic, outcome = self.records[jid]
            return {"state": outcome, "topic": topic}
        return None

    # ------------------------------------------------------------ commands

    def add(self, jid, topic, key, delayed, retries, short_ttr, body, replace, backoff=False):
        old = self.jobs.get(jid)
        if old is not None:
            if not replace:
                return conflict()
            if old.topic != topic or old.state == "reserved":
                return conflict()
            del self.jobs[jid]
            replaced = True
        else:
            if jid in self.records and not replace:
                return conflict()
            self.records.pop(jid, None)
            replaced = False
        j = Job(jid, topic, key, "delay" if delayed else "ready", retries, short_ttr, body, backoff)
        self._enter(j, j.state)
        self.jobs[jid] = j
        if replace:
            return Outcome(OK, replaced=replaced)
        return Outcome(OK)

    def pop_check(self, topics, got_ids):
        """Checks a pop's answer (the ids it took, in order) against what
        may be taken; returns a complaint or None. Does not apply it."""
        taken = {}
        for jid in got_ids:
            j = self.jobs.get(jid)
            if j is None or j.state != "ready" or j.topic not in topics:
                return "pop gave %s, which is %s" % (jid, self.view(jid))
            if j.topic in self.paused:
                return "pop gave %s of paused topic %s" % (jid, j.topic)
            if jid in taken:
                return "pop gave %s twice" % jid
            room = self.key_room(j.topic, j.key)
            already = sum(1 for t in taken.values() if t.topic == j.topic and t.key == j.key)
            if room is not None and already >= room:
                return "pop gave %s beyond key %s's room (%d)" % (jid, j.key, room)
            shard = self.shard_of(jid)
            room = self.shard_room(j.topic, shard)
            already = sum(1 for t in taken.values()
                          if t.topic == j.topic and self.shard_of(t.id) == shard)
            if room is not None and already >= room:
                return "pop gave %s beyond its shard's concurrency room (%d)" % (jid, room)
            taken[jid] = j
        return None

    def pop_expected(self, topics, count):
        """How many jobs a pop of count over topics must take."""
        return min(count, sum(self.takeable(t) for t in topics))

    def pop_apply(self, got_ids):
        for jid in got_ids:
            j = self.jobs[jid]
            j.attempts += 1
            self._enter(j, "reserved")

    def remove(self, jid, outcome):
        j, refused = self._job_in(jid)
        if refused:
            return refused
        self._end(j, outcome)
        return Outcome(OK)

    def touch(self, jid):
        j, refused = self._job_in(jid, "reserved")
        if refused:
            return refused
        return Outcome(OK)

    def _after_failure(self, j):
        """A failed delivery (TTR passed, release without delay): buried
        when its retries are spent, else delayed by its backoff step when
        it has one (the service's timer makes it ready: fall_due), else
        ready at once."""
        if j.retries_spent():
            state = "buried"
        else:
            state = "delay" if j.backoff else "ready"
        self._enter(j, state)
        return state

    def release(self, jid, delayed):
        j, refused = self._job_in(jid, "reserved")
        if refused:
            return refused
        if not delayed or j.retries_spent():
            return Outcome(OK, state=self._after_failure(j))
        self._enter(j, "delay")
        return Outcome(OK, state="delay")

    def expire(self, jid):
        """The service's timer ran out this reserved job's TTR."""
        return self._after_failure(self.jobs[jid])

    def fall_due(self, jid):
        """The service's timer moved this delayed job to ready."""
        self._enter(self.jobs[jid], "ready")

    def bury(self, jid):
        j, refused = self._job_in(jid, "reserved")
        if refused:
            return refused
        self._enter(j, "buried")
        return Outcome(OK)

    def _kick(self, j):
        j.kicked_at = j.attempts
        self._enter(j, "ready")

    def kick_id(self, jid):
        j, refused = self._job_in(jid, "buried")
        if refused:
            return refused
        self._kick(j)
        return Outcome(OK, state="ready")

    def kick_topic(self, topic, count):
        buried = sorted((j for j in self.jobs.values() if j.topic == topic and j.state == "buried"),
                        key=lambda j: j.seq)
        for j in buried[:count]:
            self._kick(j)
        return Outcome(OK, kicked=min(count, len(buried)))

    def reschedule(self, jid, delayed):
        j, refused = self._job_in(jid, "delay", "ready", "buried")
        if refused:
            return refused
        if j.state == "buried":
            j.kicked_at = j.attempts
        self._enter(j, "delay" if delayed else "ready")
        return Outcome(OK, state=j.state)

    def purge(self, topic, state):
        gone = [j for j in self.jobs.values()
                if j.topic == topic and (state is None or j.state == state)]
        for j in gone:
            del self.jobs[j.id]  # a purge keeps no record
        return Outcome(OK, purged=len(gone))

    def pause(self, topic, on):
        (self.paused.add if on else self.paused.discard)(topic)
        return Outcome(OK, paused=on)

    def policy(self, topic, concurrency, key_concurrency, keep):
        for table, v in ((self.concurrency, concurrency), (self.key_concurrency, key_concurrency),
                         (self.keep, keep)):
            if v is None:
                table.pop(topic, None)
            else:
                table[topic] = v
        return Outcome(OK)

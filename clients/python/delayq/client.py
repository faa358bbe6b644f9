"""The delayq HTTP client: one keep-alive connection, every command.

Standard library only. A Client is safe to share between threads (its calls
take turns on the one connection), but a long-poll `pop` holds the
connection for its whole wait: give each consumer thread its own Client.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union, overload)

from .errors import (Conflict, ConnectFailed, ConnectionLost, DelayqError, ServerError,
                     error_for)

__all__ = ["Client", "Job", "JobInfo", "Result", "DEFAULT_URL", "Topics", "Seconds", "When", "Ids"]

DEFAULT_URL = "http://127.0.0.1:8080"
USER_AGENT = "delayq-python/0.1.0"

#: One topic, a comma-separated list ("a,b"), or a sequence of topics.
Topics = Union[str, Sequence[str]]
#: A duration: seconds (fractions allowed) or a timedelta.
Seconds = Union[int, float, timedelta]
#: A point in time: Unix seconds or a datetime (a naive one is local time).
When = Union[int, float, datetime]
#: One job id, or several (any iterable of ids).
Ids = Union[str, Iterable[str]]

#: The most ids one request may finish (batch finish, pop's `finish`).
MAX_IDS = 1000

# Commands whose resend cannot change anything beyond what the first send
# did, and whose answer means the same either way: after a keep-alive
# connection was dropped under a request, these are sent once more.
_RESEND_SAFE = frozenset(["get", "jobs", "stats", "touch", "pause", "resume", "health",
                          "metrics"])


@dataclass(frozen=True)
class Job:
    """A job handed out by pop: it is now reserved for `ttr` seconds."""

    id: str
    topic: str
    body: Any
    """The body exactly as added: a str stays a str, JSON values decoded."""
    attempts: int
    """Deliveries so far, this one included (1 on the first delivery)."""
    ttr: float
    """Seconds to finish, delete, touch or release it before it is
    delivered again."""
    key: Optional[str] = None
    """The job's grouping key (flow limits count by it), None for none."""
    traceparent: Optional[str] = None
    """The W3C trace context the job was added with, None for none."""
    tracestate: Optional[str] = None

    @property
    def value(self) -> Any:
        """The protocol's name for `body`."""
        return self.body


@dataclass(frozen=True)
class JobInfo:
    """What `get` tells about a live job, or about the kept record of a
    finished or deleted one (a topic's `keep`: state "finished" or
    "deleted", `ended` set, no body, ttr or retries)."""

    id: str
    topic: str
    state: str
    """"delay", "ready", "reserved" or "buried"; "finished" or "deleted"
    for a kept record."""
    body: Any
    due: Optional[int]
    """Unix milliseconds: the due time while "delay", the TTR deadline while
    "reserved"; None while "ready" or "buried". A record's: the due time
    the job was added (or last rescheduled) with."""
    ttr: Optional[float]
    """Seconds; None for a record."""
    attempts: int
    retries: Optional[int]
    """The job's redelivery limit; None means unlimited (and for a record)."""
    created: int
    """Unix milliseconds."""
    key: Optional[str] = None
    """The job's grouping key, None for none."""
    traceparent: Optional[str] = None
    """The W3C trace context the job was added with, None for none."""
    tracestate: Optional[str] = None
    first_delivered: Optional[int] = None
    """Unix milliseconds of its first delivery, where the server knows it
    (a topic that keeps history); None otherwise."""
    ended: Optional[int] = None
    """A record's: Unix milliseconds when it was finished or deleted; None
    for a live job."""
    deliveries: Optional[List[Dict[str, Any]]] = None
    """A callback job's attempts, oldest first (as the server answers them:
    at, status, error, ms, response, decision, retry_at); None before any."""

    @property
    def kept(self) -> bool:
        """True for the kept record of a finished or deleted job."""
        return self.ended is not None

    @property
    def value(self) -> Any:
        return self.body


@dataclass(frozen=True)
class Result:
    """One element of a batch answer (add_many, finish_many, delete_many)."""

    id: str
    success: bool
    code: Optional[str] = None
    error: Optional[str] = None
    # add_many with replace: True when the job was replaced, False when
    # created; None for a job added without replace
    replaced: Optional[bool] = None

    def exception(self) -> Optional[DelayqError]:
        """The exception this result stands for, None on success."""
        if self.success:
            return None
        return error_for(None, self.code, self.error or "job %r failed" % self.id)


class _Interrupted(Exception):
    """A request cut short by Client._interrupt() (used by Worker.stop)."""


def _seconds(v: Seconds) -> float:
    if isinstance(v, timedelta):
        return v.total_seconds()
    return v


def _unix(v: When) -> float:
    if isinstance(v, datetime):
        return v.timestamp()
    return v


def _job_fields(topic: str, body: Any, id: Optional[str] = None, delay: Optional[Seconds] = None,
                at: Optional[When] = None, ttr: Optional[Seconds] = None,
                retries: Optional[int] = None, backoff: Any = None,
                callback: Optional[Mapping[str, Any]] = None,
                url: Optional[str] = None, key: Optional[str] = None,
                traceparent: Optional[str] = None,
                tracestate: Optional[str] = None, replace: bool = False) -> Dict[str, Any]:
    job: Dict[str, Any] = {"topic": topic, "body": body}
    if id is not None:
        job["id"] = id
    if replace:
        job["replace"] = True
    if key is not None:
        job["key"] = key
    if traceparent is not None:
        job["traceparent"] = traceparent
    if tracestate is not None:
        job["tracestate"] = tracestate
    if delay is not None:
        job["delay"] = _seconds(delay)
    if at is not None:
        job["at"] = _unix(at)
    if ttr is not None:
        job["ttr"] = _seconds(ttr)
    if retries is not None:
        job["retries"] = retries
    if backoff is not None:
        job["backoff"] = backoff if isinstance(backoff, str) else [_seconds(s) for s in backoff]
    if callback is not None:
        job["callback"] = dict(callback)
    if url is not None:
        job["url"] = url
    return job


def _topic_fields(topics: Topics) -> Dict[str, Any]:
    if isinstance(topics, str):
        return {"topic": topics}
    return {"topics": list(topics)}


def _job(d: Mapping[str, Any]) -> Job:
    return Job(id=d["id"], topic=d["topic"], body=d.get("value"), attempts=d["attempts"],
               ttr=d["ttr"], key=d.get("key"), traceparent=d.get("traceparent"),
               tracestate=d.get("tracestate"))


def _results(answer: Mapping[str, Any], key: str = "results") -> List[Result]:
    return [Result(id=r.get("id"), success=bool(r.get("success")), code=r.get("code"),
                   error=r.get("error"), replaced=r.get("replaced")) for r in answer.get(key, [])]


def _job_info(a: Mapping[str, Any]) -> JobInfo:
    return JobInfo(id=a["id"], topic=a["topic"], state=a["state"], body=a.get("value"),
                   due=a.get("due"), ttr=a.get("ttr"), attempts=a["attempts"],
                   retries=a.get("retries"), created=a["created"], key=a.get("key"),
                   traceparent=a.get("traceparent"), tracestate=a.get("tracestate"),
                   first_delivered=a.get("first_delivered"), ended=a.get("ended"),
                   deliveries=a.get("deliveries"))


def _finish_field(finish: Ids) -> Union[str, List[str]]:
    """pop's `finish` as sent: a str stays one id, anything else is a list."""
    if isinstance(finish, str):
        return finish
    return list(finish)


def _finished(answer: Mapping[str, Any]) -> List[Result]:
    """The `finished` outcomes of a pop that carried `finish`."""
    if not isinstance(answer.get("finished"), list):
        raise ServerError("the server's pop answer has no 'finished' list although 'finish' "
                          "was sent", code="internal", status=200, response=dict(answer))
    return _results(answer, "finished")


def _dropped(sock: socket.socket) -> bool:
    """True when an idle keep-alive socket was closed by the server (it is
    readable: EOF, a reset, or bytes nobody asked for)."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        r, _, _ = select.select([sock], [], [], 0)
        return bool(r)
    except (OSError, ValueError):
        return True


# Failures that mean the server closed the connection before answering.
_DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError,
            BrokenPipeError)


class Client:
    """A delayq client over HTTP/1.1 with one keep-alive connection.

    url:     the server, e.g. "http://127.0.0.1:8080" (a path prefix such as
             "https://host/delayq" is kept); default: $DELAYQ_URL, else
             http://127.0.0.1:8080.
    token:   sent as "Authorization: Bearer <token>"; default:
             $DELAYQ_TOKEN, else none.
    timeout: seconds to wait for connecting and for each answer; a long-poll
             pop waits that long on top of its own timeout.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 30.0) -> None:
        url = url or os.environ.get("DELAYQ_URL") or DEFAULT_URL
        if "://" not in url:
            url = "http://" + url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("delayq url must be http://host[:port][/prefix] or https://..., "
                             "not %r" % url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        if token is None:
            token = os.environ.get("DELAYQ_TOKEN") or None
        self.token = token
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.timeout = float(timeout)
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()
        self._interrupted = False

    def __repr__(self) -> str:
        return "Client(%r)" % self.url

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (the next call opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------ commands

    def add(self, topic: str, body: Any, id: Optional[str] = None,
            delay: Optional[Seconds] = None, at: Optional[When] = None,
            ttr: Optional[Seconds] = None, retries: Optional[int] = None,
            backoff: Any = None, callback: Optional[Mapping[str, Any]] = None,
            url: Optional[str] = None, key: Optional[str] = None,
            traceparent: Optional[str] = None, tracestate: Optional[str] = None,
            replace: bool = False) -> str:
        """Adds a job; returns its id (the server makes one when id is None).

        body: a str or any JSON value; pop returns it as given.
        delay: seconds until it is due (or `at`: when it is due; not both).
        ttr: seconds a consumer has to finish it once popped (server default 60).
        retries: redeliveries allowed before the job is buried (None: no limit).
        backoff: "stepped" or the seconds to wait after each failed delivery.
        url / callback ({"url": ..., "timeout": s}): delayq POSTs the body
        there when the job is due, instead of handing it to pop.
        key: a grouping key (a merchant or user id, 1..128 of A-Z a-z 0-9
        _ . : @ / -) that the topic's per-key flow limits count by. On a
        deployment of several shards the job lives in its key's shard, so
        an id given with a key must be "<key>@<digits>" (or be left out).
        traceparent / tracestate: the W3C trace context to carry with the
        job (traceparent "00-<32 hex>-<16 hex>-<2 hex>"; tracestate up to
        512 printable ASCII bytes, only with a traceparent). Pop and get
        return them and callbacks send them as headers, so the consumer's
        span joins the producer's trace.
        replace: upsert (needs id): a delayed, ready or buried job with this
        id and topic is replaced by this one (body, due time, ttr, retries,
        backoff, callback, key), else the job is created; see upsert() to
        learn which happened.
        Raises Conflict when a live job has this id (with replace: when it
        is reserved, or of another topic).
        """
        fields = _job_fields(topic, body, id, delay, at, ttr, retries, backoff, callback, url,
                             key, traceparent, tracestate, replace)
        return str(self._add(fields)["id"])

    def upsert(self, topic: str, id: str, body: Any, **fields: Any) -> bool:
        """Replaces the job `id` of `topic` (delayed, ready or buried) by
        this one, or creates it (there was none, or only its kept record);
        returns True when it replaced one, False when it created it. The
        other keyword arguments are add's (delay, at, ttr, retries,
        backoff, callback, url, key, traceparent, tracestate); a field left
        out takes add's default, except the trace context, which the job
        keeps unless given. Raises Conflict when the job is reserved (a
        consumer or a callback holds it) or of another topic."""
        answer = self._add(_job_fields(topic, body, id, replace=True, **fields))
        return bool(answer.get("replaced"))

    def _add(self, fields: Dict[str, Any]) -> Dict[str, Any]:
        """One add, resent after a lost connection when it names its id:
        a plain add that meets a conflict after a resend took the first
        time. (An upsert's resend replaces again, to the same job; its
        conflict is a real one.)"""
        jid = fields.get("id")
        status, data, resent = self._send("POST", "add", self._json(fields), resend=jid is not None)
        try:
            return self._decode(status, data)
        except Conflict:
            if resent and jid is not None and not fields.get("replace"):
                # The first send reached the server and took.
                return {"id": jid}
            raise

    def add_many(self, jobs: Iterable[Mapping[str, Any]]) -> List[Result]:
        """Adds 1..1000 jobs in one request. Each job is a mapping with the
        keyword arguments of add (topic and body required). An invalid job
        raises BadRequest naming its index and adds nothing; otherwise every
        job is added on its own and its Result says how it went, in order."""
        batch = [_job_fields(**dict(j)) for j in jobs]
        if not batch:
            return []
        return _results(self._call("add", {"jobs": batch}))

    @overload
    def pop(self, topics: Topics, timeout: Seconds = 0, *, finish: None = None) -> Optional[Job]:
        ...

    @overload
    def pop(self, topics: Topics, timeout: Seconds = 0, *,
            finish: Ids) -> Tuple[Optional[Job], List[Result]]:
        ...

    def pop(self, topics: Topics, timeout: Seconds = 0, *, finish: Optional[Ids] = None
            ) -> Union[Optional[Job], Tuple[Optional[Job], List[Result]]]:
        """Reserves the next ready job of the first non-empty topic, waiting
        up to `timeout` seconds (0..60) for one; None when there is none.

        finish: an id, or 1..1000 ids, of jobs to finish in the same request
        before the pop (finish-and-pop: a consumer loop costs one request
        per job). Then the answer is a tuple (job or None, [Result, ...]):
        one Result per id, in order, as finish_many gives them; a
        `not_found` one means the job was gone (its TTR passed and it was
        delivered again, or it was deleted). The finish happens at once,
        before a long-poll waits. An empty list sends no `finish` and gives
        (job, []). A server without finish-and-pop raises BadRequest
        naming the field 'finish'; a 503 or 504 finished nothing, or it is
        unknown what, like any command.
        """
        answer, finished = self._pop(topics, timeout, finish)
        job = None if answer.get("id") is None else _job(answer)
        return job if finished is None else (job, finished)

    @overload
    def pop_many(self, topics: Topics, count: int, timeout: Seconds = 0, *,
                 finish: None = None) -> List[Job]:
        ...

    @overload
    def pop_many(self, topics: Topics, count: int, timeout: Seconds = 0, *,
                 finish: Ids) -> Tuple[List[Job], List[Result]]:
        ...

    def pop_many(self, topics: Topics, count: int, timeout: Seconds = 0, *,
                 finish: Optional[Ids] = None
                 ) -> Union[List[Job], Tuple[List[Job], List[Result]]]:
        """Reserves up to `count` (1..100) jobs, from the first topic first;
        waits up to `timeout` seconds for the first one.

        finish: as for pop; the answer is then (jobs, [Result, ...])."""
        answer, finished = self._pop(topics, timeout, finish, count)
        jobs = [_job(j) for j in answer.get("jobs", [])]
        return jobs if finished is None else (jobs, finished)

    def _pop(self, topics: Topics, timeout: Seconds, finish: Optional[Ids],
             count: Optional[int] = None) -> Tuple[Dict[str, Any], Optional[List[Result]]]:
        """Sends pop (of `count` jobs when given, as pop_many does): its
        answer, and the outcomes of `finish` (None when it is None)."""
        fields = _topic_fields(topics)
        if count is not None:
            fields["count"] = count
        wait = _seconds(timeout)
        if wait:
            fields["timeout"] = wait
        ids = None if finish is None else _finish_field(finish)
        if ids:
            fields["finish"] = ids
        answer = self._call("pop", fields, wait=wait)
        if ids is None:
            return answer, None
        return answer, (_finished(answer) if ids else [])

    def finish(self, id: str) -> None:
        """Removes a job (done), whatever its state. NotFound if unknown."""
        self._call("finish", {"id": id})

    def finish_many(self, ids: Iterable[str]) -> List[Result]:
        """Finishes 1..1000 jobs; one Result per id, in order."""
        return self._each("finish", ids)

    def delete(self, id: str) -> None:
        """Removes a job (cancelled), whatever its state. NotFound if unknown."""
        self._call("delete", {"id": id})

    def delete_many(self, ids: Iterable[str]) -> List[Result]:
        """Deletes 1..1000 jobs; one Result per id, in order."""
        return self._each("delete", ids)

    def _each(self, command: str, ids: Iterable[str]) -> List[Result]:
        """command (finish or delete) of every id in one request; no
        request for none."""
        ids = list(ids)
        if not ids:
            return []
        return _results(self._call(command, {"ids": ids}))

    def get(self, id: str) -> JobInfo:
        """What the server knows about a live job, or the kept record of a
        finished or deleted one (JobInfo.kept). NotFound if none."""
        return _job_info(self._call("get", {"id": id}))

    def jobs(self, topic: str, state: str, limit: Optional[int] = None,
             cursor: Optional[str] = None) -> Tuple[List[JobInfo], Optional[str]]:
        """One page of the topic's jobs in `state` ("delay", "ready",
        "reserved" or "buried", or the kept records: "finished" or
        "deleted"): ([JobInfo, ...], cursor). `delay` and `reserved` come
        by due time, `ready` in pop order, `buried` in bury order, records
        newest first; `limit` 1..1000 (server default 50). cursor is None on the
        last page, else pass it back for the next one."""
        fields: Dict[str, Any] = {"topic": topic, "state": state}
        if limit is not None:
            fields["limit"] = limit
        if cursor is not None:
            fields["cursor"] = cursor
        answer = self._call("jobs", fields)
        return [_job_info(j) for j in answer.get("jobs", [])], answer.get("cursor")

    def iter_jobs(self, topic: str, state: str, page: int = 100) -> Iterator[JobInfo]:
        """Every job of the topic in `state`, a page of `page` at a time
        (jobs: each job that stays in the state throughout comes once)."""
        cursor: Optional[str] = None
        while True:
            jobs, cursor = self.jobs(topic, state, limit=page, cursor=cursor)
            yield from jobs
            if cursor is None:
                return

    def touch(self, id: str) -> int:
        """Restarts a reserved job's TTR clock; returns the new deadline in
        Unix milliseconds. Conflict if it is not reserved."""
        return int(self._call("touch", {"id": id})["due"])

    def release(self, id: str, delay: Seconds = 0) -> str:
        """Gives a reserved job back, due again in `delay` seconds; returns
        its new state: "ready", "delay", or "buried" (its retries were used
        up). Conflict if it is not reserved."""
        return str(self._call("release", {"id": id, "delay": _seconds(delay)})["state"])

    def bury(self, id: str) -> None:
        """Sets a reserved job aside: pop skips it until kick. Conflict if it
        is not reserved."""
        self._call("bury", {"id": id})

    def kick(self, topic: str, count: int = 1) -> int:
        """Makes up to `count` buried jobs of the topic ready; returns how many."""
        return int(self._call("kick", {"topic": topic, "count": count})["kicked"])

    def reschedule(self, id: str, delay: Optional[Seconds] = None,
                   at: Optional[When] = None) -> Tuple[str, Optional[int]]:
        """Gives a delayed, ready or buried job a new due time: `delay`
        seconds from now, or `at` (one of them); returns (state, due):
        ("delay", Unix ms) or ("ready", None) when the time is now or past. A
        buried job gets its retries afresh. Conflict if the job is reserved,
        NotFound if unknown."""
        if (delay is None) == (at is None):
            raise ValueError("reschedule needs delay or at (one of them)")
        fields: Dict[str, Any] = {"id": id}
        if delay is not None:
            fields["delay"] = _seconds(delay)
        if at is not None:
            fields["at"] = _unix(at)
        answer = self._call("reschedule", fields)
        due = answer.get("due")
        return str(answer["state"]), None if due is None else int(due)

    def pause(self, topic: str) -> None:
        """Pauses a topic: pop takes nothing from it (long-polls keep
        waiting) and no callback of it is sent; due jobs still become ready,
        producers are not affected. Idempotent."""
        self._call("pause", {"topic": topic})

    def resume(self, topic: str) -> None:
        """Lets a paused topic's jobs be popped and sent again; waiting
        long-polls get them at once. Idempotent."""
        self._call("resume", {"topic": topic})

    def purge(self, topic: str, state: Optional[str] = None) -> int:
        """Deletes all of the topic's jobs in `state` ("delay", "ready",
        "reserved" or "buried"), or in every state when None, as delete
        does; returns how many. The server works in short steps, so a big
        topic holds nobody up; jobs added while it runs are kept, and
        schedules stay. Needs a token that may delete."""
        fields: Dict[str, Any] = {"topic": topic}
        if state is not None:
            fields["state"] = state
        return int(self._call("purge", fields)["purged"])

    # ------------------------------------------------------------ flow control

    _POLICY_FIELDS = ("concurrency", "rate", "period", "key_concurrency", "key_rate",
                      "key_period", "keep")

    def policy(self, topic: str, **limits: Any) -> Dict[str, Any]:
        """Sets a topic's flow-control policy and returns it as it now
        stands ({field: value or None}). Each keyword is one of concurrency,
        rate, period (seconds), key_concurrency, key_rate, key_period,
        keep (seconds that a finished or deleted job's record is kept:
        get, jobs(state="finished"/"deleted"), and add of its id raises
        Conflict meanwhile): a limit left out keeps its value, None removes
        it."""
        unknown = set(limits) - set(self._POLICY_FIELDS)
        if unknown:
            raise TypeError("policy() got unknown limits: %s" % ", ".join(sorted(unknown)))
        fields: Dict[str, Any] = {"topic": topic}
        for name, v in limits.items():
            fields[name] = _seconds(v) if isinstance(v, timedelta) else v
        return dict(self._call("policy", fields)["policy"])

    def policies(self, topic: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
        """{topic: {limits..., "reserved": n, "throttled": n, "keys_waiting": n, "tokens":
        n or None (tokens its rate has left now; None without a rate)}} for the topic
        named, or for every topic that has a policy (all pages)."""
        if topic is not None:
            return dict(self._call("policies", {"topic": topic})["policies"])
        out: Dict[str, Dict[str, Any]] = {}
        cursor = None
        while True:
            answer = self._call("policies", {"cursor": cursor} if cursor else {})
            out.update(answer["policies"])
            cursor = answer.get("cursor")
            if not cursor:
                return out

    # ------------------------------------------------------------ periodic jobs

    def schedule(self, id: str, topic: str, body: Any, cron: Optional[str] = None,
                 every: Optional[int] = None, tz: Optional[str] = None,
                 start: Optional[When] = None, end: Optional[When] = None,
                 **job: Any) -> Dict[str, Any]:
        """Creates or replaces the periodic job `id`: each fire time T adds
        the job "<id>@<T>" to `topic` with `body`. Exactly one of `cron`
        (five fields or @daily, ... in zone `tz`, default UTC) or `every`
        (seconds). `job` takes add's ttr, retries, backoff, callback, url.
        Returns {"id", "next" (Unix ms), "replaced"}."""
        fields = _job_fields(topic, body, **job)
        fields["id"] = id
        for k, v in (("cron", cron), ("every", every), ("tz", tz)):
            if v is not None:
                fields[k] = v
        for k, v in (("start", start), ("end", end)):
            if v is not None:
                fields[k] = int(_unix(v))
        answer = self._call("schedule", fields)
        answer.pop("success", None)
        return answer

    def unschedule(self, id: str) -> None:
        """Removes a schedule (the jobs it made stay); NotFound if unknown."""
        self._call("unschedule", {"id": id})

    def schedules(self, id: Optional[str] = None, preview: Optional[int] = None) -> List[Dict[str, Any]]:
        """Every schedule, or one (with its body, and with `preview` its next
        fire times in "upcoming")."""
        fields: Dict[str, Any] = {}
        if id is not None:
            fields["id"] = id
        if preview is not None:
            fields["preview"] = preview
        return list(self._call("schedules", fields)["schedules"])

    def stats(self, topic: Optional[str] = None) -> Dict[str, Any]:
        """Counters: {"topics": {name: {...}}, "total": {...}}, for one topic
        or all of them."""
        answer = self._call("stats", {"topic": topic} if topic is not None else {})
        answer.pop("success", None)
        return answer

    def health(self) -> bool:
        """True when delayq answers and reaches Redis; False when it answers
        503 or cannot be reached at all (any 5xx or connection failure)."""
        try:
            self._decode(*self._send("GET", "health", None)[:2])
        except ServerError:
            return False
        return True

    def metrics(self) -> str:
        """The Prometheus text exposition of /metrics."""
        status, data, _ = self._send("GET", "metrics", None)
        if status != 200:
            self._decode(status, data)
        return data.decode("utf-8")

    # ------------------------------------------------------------ transport

    @staticmethod
    def _json(fields: Mapping[str, Any]) -> bytes:
        return json.dumps(fields, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")

    def _call(self, command: str, fields: Mapping[str, Any], wait: float = 0.0) -> Dict[str, Any]:
        status, data, _ = self._send("POST", command, self._json(fields), wait=wait)
        return self._decode(status, data)

    @staticmethod
    def _decode(status: int, data: bytes) -> Dict[str, Any]:
        try:
            obj = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            obj = None
        if isinstance(obj, dict):
            if obj.get("success") is True and status == 200:
                return obj
            if obj.get("success") is False or status != 200:
                msg = obj.get("error")
                if not isinstance(msg, str) or not msg:
                    msg = "request failed with HTTP %d" % status
                code = obj.get("code")
                raise error_for(status, code if isinstance(code, str) else None, msg, obj)
        text = data[:200].decode("utf-8", "replace").strip()
        if status == 200:
            raise ServerError("the server answered 200 without a delayq JSON object: %r" % text,
                              code="internal", status=status)
        raise error_for(status, None, "HTTP %d: %s" % (status, text or "(empty body)"))

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise ConnectFailed("cannot connect to delayq at %s: %s" % (self.url, e)) from e
        try:
            # Headers and body go out in two writes: do not let Nagle hold
            # the second one back.
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        return conn

    def _send(self, method: str, command: str, body: Optional[bytes], wait: float = 0.0,
              resend: bool = False) -> Tuple[int, bytes, bool]:
        """One request -> (HTTP status, body bytes, whether it was sent twice).

        A keep-alive connection the server closed while idle is noticed
        before sending and replaced. If it still breaks under the request
        (the server closed it at that very moment), the request is sent once
        more on a new connection only when that cannot do harm: the bytes
        never fully left, or the command is read-only/idempotent (or an add
        with an explicit id, `resend`). Otherwise: ConnectionLost."""
        resend = resend or command in _RESEND_SAFE
        path = self._prefix + "/" + command
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        timeout = self.timeout + max(0.0, wait)
        with self._lock:
            resent = False
            for attempt in (0, 1):
                if self._interrupted:
                    raise _Interrupted()
                conn = self._conn
                if conn is not None and (conn.sock is None or _dropped(conn.sock)):
                    self.close()
                    conn = None
                reused = conn is not None
                if conn is None:
                    conn = self._conn = self._connect(timeout)
                else:
                    conn.sock.settimeout(timeout)
                if self._interrupted:
                    raise _Interrupted()
                stage = "send"
                try:
                    conn.request(method, path, body=body, headers=headers)
                    stage = "answer"
                    resp = conn.getresponse()
                    stage = "body"
                    data = resp.read()
                except (OSError, http.client.HTTPException) as e:
                    self.close()
                    if self._interrupted:
                        raise _Interrupted() from e
                    if isinstance(e, socket.timeout):
                        raise ConnectionLost("no answer from delayq within %.1f s; the outcome "
                                             "of the request is unknown" % timeout) from e
                    # Not all of the request left: the server cannot have
                    # acted on it. Nothing answered at all on a reused
                    # connection: the classic keep-alive race.
                    again = stage == "send" or (
                        reused and stage == "answer" and resend and isinstance(e, _DROPPED))
                    if again and attempt == 0:
                        resent = resent or stage != "send"
                        continue
                    if stage == "send" and not reused:
                        raise ConnectFailed("cannot send to delayq at %s: %s"
                                            % (self.url, e)) from e
                    raise ConnectionLost("the connection to delayq failed (%s: %s); the outcome "
                                         "of the request is unknown"
                                         % (type(e).__name__, e)) from e
                if resp.will_close:
                    self.close()
                return resp.status, data, resent
        raise AssertionError("unreachable")

    # Used by Worker.stop() and its signal handlers: never takes the lock.
    def _interrupt(self) -> None:
        self._interrupted = True
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _clear_interrupt(self) -> None:
        self._interrupted = False


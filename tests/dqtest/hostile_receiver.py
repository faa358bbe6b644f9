"""A hostile callback receiver with a ledger of every send, and the checks
a pusher must pass against it.

The receiver (a Receiver, tests/dqtest/receiver.py) answers by the first
part of the path, per attempt (`delayq-attempt`); each behaviour applies to
attempt 1, and later attempts are answered 200, so every job ends:
  /ok                 200 at once
  /slow/<s>           200 after <s> seconds
  /hang               no answer; waits for the sender to give up
  /reset              a TCP reset once the request is read
  /busy/<status>/<v>  <status> (429 or 503) with `Retry-After: <v>` (v is
                      url-quoted: "0", a past HTTP date, a huge number,
                      or text that does not parse)

The ledger holds, per job (webhook-id), each send: its attempt, when its
request was read (`at`), when it ended on the receiver's side (`end`: the
answer written, the reset, or the sender closing a hung request), the
status answered (None: no answer) and the Retry-After given.

check_ledger() asserts what the push protocol promises, given what the
test added (per job: the earliest time its first send may come, its
callback timeout and backoff step):
- no send before the job's time;
- after a busy answer with a Retry-After that parses, the next send waits
  at least 1 s; after any other failed answer, at least the backoff step;
- a hung request is given up `timeout` after it was sent, not sooner or
  much later (the timeout runs from the send);
- no two requests of one job in flight at once;
- the job's delivery log (`get`'s `deliveries`) equals the ledger: one
  entry per send, in order, with the status answered."""

import select
import socket
import struct
import threading
import time
import urllib.parse

from .receiver import Receiver

HANG_MAX_S = 10  # a hung request the sender never gives up ends here


class Send:
    def __init__(self, req):
        self.attempt = int(req.headers["delayq-attempt"])
        self.at = req.at
        self.end = None
        self.status = None
        self.retry_after = None
        self.timestamp = int(req.headers["webhook-timestamp"])

    def __repr__(self):
        return "<attempt %d at %.3f end %.3f status %s retry-after %s>" % (
            self.attempt, self.at, self.end or -1, self.status, self.retry_after)


class HostileReceiver(Receiver):
    def __init__(self):
        self.ledger = {}  # webhook-id -> [Send]
        self.ledger_lock = threading.Lock()
        super().__init__(self._answer)

    def sends(self, wid):
        with self.ledger_lock:
            return list(self.ledger.get(wid, []))

    def _answer(self, req):
        send = Send(req)
        with self.ledger_lock:
            self.ledger.setdefault(req.headers["webhook-id"], []).append(send)
        parts = req.path.split("?")[0].strip("/").split("/")
        kind = parts[0] if send.attempt == 1 else "ok"
        out = None
        if kind == "slow":
            time.sleep(float(parts[1]))
            out = (200, {}, b"ok")
        elif kind == "hang":
            wait_for_close(req.connection, HANG_MAX_S)
        elif kind == "reset":
            req.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      struct.pack("ii", 1, 0))
        elif kind == "busy":
            send.retry_after = urllib.parse.unquote(parts[2])
            out = (int(parts[1]), {"Retry-After": send.retry_after}, b"busy")
        else:
            out = (200, {}, b"ok")
        send.status = out[0] if out else None
        send.end = time.time()
        return out


def wait_for_close(conn, most):
    """Until the peer closes conn (or `most` seconds)."""
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        r, _, _ = select.select([conn], [], [], max(0.0, deadline - time.monotonic()))
        if r:
            try:
                if conn.recv(1, socket.MSG_PEEK) == b"":
                    return
            except OSError:
                return
            time.sleep(0.01)  # bytes we do not read: still open


def busy_retry_after_parses(value):
    """Whether a Retry-After is one the pusher honours (delay-seconds or
    an HTTP date): what does not parse counts as a plain failure."""
    if value is None:
        return False
    return value.strip().isdigit() or value.strip().endswith("GMT")


def check_ledger(tc, rx, jobs, slack=0.15):
    """jobs: webhook-id -> dict(not_before=<Unix s>, timeout=<s>,
    step=<backoff step s>, deliveries=<get's deliveries list>).
    Fails tc with the job and its ledger on any broken promise."""
    for wid, job in jobs.items():
        sends = rx.sends(wid)
        what = "job %s: %r" % (wid, sends)
        tc.assertTrue(sends, "never sent: " + what)
        tc.assertGreaterEqual(sends[0].at, job["not_before"] - slack, "sent early: " + what)
        tc.assertEqual([s.attempt for s in sends], list(range(1, len(sends) + 1)), what)
        for prev, nxt in zip(sends, sends[1:]):
            tc.assertGreaterEqual(nxt.at, prev.end - slack, "two in flight at once: " + what)
            least = job["step"]
            if prev.status in (429, 503) and busy_retry_after_parses(prev.retry_after):
                least = 1.0
            tc.assertGreaterEqual(nxt.at - prev.end, least - slack,
                                  "sent again %.3f s after %r: %s" % (nxt.at - prev.end, prev, what))
        for s in sends:
            if s.status is None and s.end - s.at > job["timeout"] / 2:  # a hung request
                tc.assertAlmostEqual(s.end - s.at, job["timeout"], delta=0.5,
                                     msg="timeout not counted from the send: " + what)
            tc.assertLessEqual(abs(s.timestamp - s.at), 1.5, "webhook-timestamp: " + what)
        log = [d["status"] for d in job["deliveries"]]
        tc.assertEqual(log, [s.status for s in sends],
                       "the delivery log is not the ledger: %s; log %r" % (what, job["deliveries"]))

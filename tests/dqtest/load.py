"""Load shapes that tests and bench/hostile.py share, threads run
together, and a long-poll sent in the background."""

import socket
import threading
import time


def run_threads(target, n, timeout):
    """Runs target in n threads at once and waits for them (each at most
    timeout s)."""
    threads = [threading.Thread(target=target) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)


class LongPoll:
    """A pop sent from a thread of its own on a connection of its own, for a
    test that means to wake it: start() sends it; `answer` is (status,
    parsed) once it came (None while it waits), `took` how long it waited
    and `answered_at` when it came (monotonic seconds)."""

    def __init__(self, deployment, **fields):
        self.deployment, self.fields = deployment, fields
        self.answer = self.took = self.answered_at = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        conn = self.deployment.new_http()
        t0 = time.monotonic()
        try:
            self.answer = self.deployment.req("pop", conn=conn, **self.fields)
        finally:
            conn.close()
        self.answered_at = time.monotonic()
        self.took = self.answered_at - t0

    def wait(self, timeout):
        """The answer, waiting up to timeout s for it (None if none came)."""
        self.thread.join(timeout)
        return self.answer


def impatient_client(port, path, body, stop_at, counts, lock, patience=0.2):
    """Sends POST path with body on a new connection and hangs up after
    `patience` seconds, over and over until monotonic time stop_at (a
    client that gives up on a long-poll). Counts into counts (under lock):
    sent, answered (an answer came before it hung up), and 503."""
    req = (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (path.encode(), len(body), body))
    while time.monotonic() < stop_at:
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(patience)
        data = b""
        try:
            s.sendall(req)
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (socket.timeout, OSError):
            pass
        s.close()
        with lock:
            counts["sent"] = counts.get("sent", 0) + 1
            counts["answered"] = counts.get("answered", 0) + bool(data)
            counts["503"] = counts.get("503", 0) + data.startswith(b"HTTP/1.1 503")

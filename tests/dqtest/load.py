"""Load shapes that tests and bench/hostile.py share."""

import socket
import time


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

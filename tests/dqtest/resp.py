"""A tiny synchronous RESP2 client, enough for tests to inspect and drive a
private Redis (delayq itself speaks to Redis through hiredis)."""

import socket


class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


class Resp:
    """Minimal synchronous RESP2 client: enough to inspect the store."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0, auth=None):
        """auth: (user or None, password) sent with AUTH on every connect."""
        self.addr = (host, port)
        self.timeout = timeout
        self.auth = ([auth[0], auth[1]] if auth[0] else [auth[1]]) if auth else None
        self.sock = None
        self.buf = b""

    def close(self):
        if self.sock:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.buf = b""

    def _connect(self):
        self.close()
        self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        if self.auth:
            self.sock.sendall(self._encode(["AUTH"] + self.auth))
            r = self._reply()
            if isinstance(r, RedisError):
                raise r

    @staticmethod
    def _encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, bytes):
                b = a
            elif isinstance(a, str):
                b = a.encode("utf-8")
            else:
                b = str(a).encode("ascii")
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            return RedisError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("bad RESP reply %r" % line)

    def __call__(self, *args):
        """Sends one command, returns its reply (bytes for bulk strings).
        Raises RedisError for an error reply."""
        for attempt in (0, 1):
            try:
                if self.sock is None:
                    self._connect()
                self.sock.sendall(self._encode(args))
                r = self._reply()
                break
            except (OSError, ConnectionError):
                self.close()
                if attempt:
                    raise
        if isinstance(r, RedisError):
            raise r
        return r


def raw_command(port, *args, timeout=10.0, host="127.0.0.1"):
    """Sends one command on a fresh connection and returns the first reply
    line, or None when the server closed the connection without answering
    (SHUTDOWN does that). Never retries (unlike Resp)."""
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        s.sendall(Resp._encode(list(args)))
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return None
            data += chunk
        return data.split(b"\r\n", 1)[0].decode("utf-8", "replace")
    except (ConnectionError, socket.timeout):
        return None
    finally:
        s.close()


def text(b):
    """A reply's bytes as text (other values as they are)."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b

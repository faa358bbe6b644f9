"""HTTP as delayq's clients speak it: keep-alive connections to nginx, and
single raw requests for what http.client will not send."""

import http.client
import json
import socket


def parse_body(data, headers=None):
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return data.decode("utf-8", "replace")


class Http:
    """One keep-alive HTTP/1.1 connection to nginx (not thread-safe: use one
    per thread)."""

    def __init__(self, port, timeout=90.0):
        self.port = port
        self.timeout = timeout
        self.conn = None

    def close(self):
        if self.conn:
            self.conn.close()
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        """Returns (status, headers dict lower-cased, body bytes)."""
        hdrs = {"Host": "127.0.0.1"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        hdrs = {k: v for k, v in hdrs.items() if v is not None}  # None drops a header
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                # A reused keep-alive connection the server had closed: retry
                # once on a fresh one. A fresh connection failing is real.
                self.close()
                if fresh or attempt:
                    raise
                continue
            except Exception:
                self.close()
                raise
            rh = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                self.close()
            return resp.status, rh, data
        raise AssertionError("unreachable")


def raw_http(port, method, path, body=b"", headers=None, timeout=30.0):
    """One request on its own connection with a plain socket; tolerates the
    server answering (and closing) before the whole body was sent, as nginx
    does for a body over its limit. Returns (status, headers, body bytes)."""
    hdrs = {"Host": "127.0.0.1", "Connection": "close", "Content-Length": str(len(body)),
            "Content-Type": "application/json"}
    if headers:
        hdrs.update(headers)
    hdrs = {k: v for k, v in hdrs.items() if v is not None}  # None drops a header
    head = "%s %s HTTP/1.1\r\n" % (method, path)
    head += "".join("%s: %s\r\n" % kv for kv in hdrs.items()) + "\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(head.encode("latin-1") + body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = http.client.HTTPResponse(s, method=method)
        resp.begin()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        s.close()

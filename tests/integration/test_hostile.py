"""Hostile requests: a table of malformed, mistyped, oversized and abusive
requests, each sent on its own raw connection through nginx. Each must get
the documented status and protocol JSON (`success:false`, `error`, `code`),
write nothing to Redis (snapshot before and after each case), and leave the
server healthy: GET /health 200, a normal add/pop/finish works, and no
delayq-fcgi worker was replaced (no crash).

Answers made by nginx itself: docs/PROTOCOL.md says nginx's own errors are
rewritten as protocol JSON (413 too_large, and 400 bad_request for a
malformed request, method, headers, URI, transfer encoding or HTTP
version), and these cases assert exactly that. One request gets no answer
at all: a body shorter than its Content-Length, the client then
half-closing: nginx closes the connection (it logs "client prematurely
closed connection"), and nothing reaches delayq.
"""

import http.client
import json
import os
import socket
import sys
import time

from dqtest import DeploymentTestCase, main, unique

CLOSED = "closed"         # expected: connection closed without an answer
MAX_BODY = 65536


def request_bytes(method, path, body=b"", headers=None, proto="HTTP/1.1", content_length=True):
    h = {"Host": "127.0.0.1", "Connection": "close", "Content-Type": "application/json"}
    if content_length:
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    head = "%s %s %s\r\n" % (method, path, proto)
    head += "".join("%s: %s\r\n" % kv for kv in h.items() if kv[1] is not None) + "\r\n"
    return head.encode("latin-1") + body


def send_raw(port, data, half_close=False, method="POST", timeout=20.0):
    """-> (status, content type, body bytes), or (CLOSED, None, b"")."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if half_close:
            s.shutdown(socket.SHUT_WR)
        resp = http.client.HTTPResponse(s, method=method)
        try:
            resp.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return CLOSED, None, b""
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        s.close()


def j(obj):
    return json.dumps(obj).encode()


def nested(depth):
    """A request whose body nests `depth` arrays: depth + 1 levels in all."""
    return b'{"topic":"h","body":' + b"[" * depth + b"1" + b"]" * depth + b"}"


BIG40 = "1234567890123456789012345678901234567890"


def cases():
    """(name, bytes, expected status, expected code or CLOSED, options)."""
    P = lambda path, body, **kw: request_bytes("POST", path, body, **kw)  # noqa: E731
    G = lambda path, **kw: request_bytes("GET", path, **kw)  # noqa: E731
    bad = (400, "bad_request")
    unknown = (400, "bad_request")
    out = [
        # --- malformed JSON
        ("truncated object", P("/add", b'{"topic":"h","body":1'), bad),
        ("trailing comma", P("/add", b'{"topic":"h","body":1,}'), bad),
        ("single quotes", P("/add", b"{'topic':'h','body':1}"), bad),
        ("NaN", P("/add", b'{"topic":"h","body":NaN}'), bad),
        ("Infinity", P("/add", b'{"topic":"h","body":-Infinity}'), bad),
        ("leading zero", P("/add", b'{"topic":"h","body":01}'), bad),
        ("raw control char in string", P("/add", b'{"topic":"h","body":"a\x01b"}'), bad),
        ("lone surrogate escape", P("/add", b'{"topic":"h","body":"\\ud800"}'), bad),
        ("bad escape", P("/add", b'{"topic":"h","body":"\\x41"}'), bad),
        ("garbage after object", P("/add", b'{"topic":"h","body":1} {}'), bad),
        ("array, not object", P("/add", b'[{"topic":"h","body":1}]'), bad),
        ("string, not object", P("/add", b'"add"'), bad),
        ("null, not object", P("/add", b"null"), bad),
        ("empty body on POST /", P("/", b""), bad),
        ("UTF-8 BOM", P("/add", b'\xef\xbb\xbf{"topic":"h","body":1}'), bad),
        ("comment", P("/add", b'{"topic":"h",/*x*/"body":1}'), bad),
        # --- wrong types
        ("topic is a number", P("/add", j({"topic": 5, "body": 1})), bad),
        ("delay is a string", P("/add", j({"topic": "h", "body": 1, "delay": "30"})), bad),
        ("ttr is a boolean", P("/add", j({"topic": "h", "body": 1, "ttr": True})), bad),
        ("retries is 2.0", P("/add", b'{"topic":"h","body":1,"retries":2.0}'), bad),
        ("id is an object", P("/add", j({"topic": "h", "id": {"a": 1}, "body": 1})), bad),
        ("jobs is an object", P("/add", j({"jobs": {"topic": "h"}})), bad),
        ("pop count is a string", P("/pop", j({"topic": "h", "count": "3"})), bad),
        ("pop topics is a string", P("/pop", j({"topics": "h"})), bad),
        ("finish ids is a string", P("/finish", j({"ids": "a,b"})), bad),
        ("command is a number", P("/", j({"command": 7})), bad),
        ("unknown command", P("/", j({"command": "drop"})), unknown),
        # --- out of range
        ("delay negative", P("/add", j({"topic": "h", "body": 1, "delay": -1})), bad),
        ("ttr zero", P("/add", j({"topic": "h", "body": 1, "ttr": 0})), bad),
        ("ttr over a day", P("/add", j({"topic": "h", "body": 1, "ttr": 86401})), bad),
        ("delay over ten years", P("/add", j({"topic": "h", "body": 1, "delay": 315532801})), bad),
        ("at over ten years", P("/add", j({"topic": "h", "body": 1, "at": 1e12})), bad),
        ("retries over a million", P("/add", j({"topic": "h", "body": 1, "retries": 1000001})),
         bad),
        ("pop timeout 61", P("/pop", j({"topic": "h", "timeout": 61})), bad),
        ("pop count 0", P("/pop", j({"topic": "h", "count": 0})), bad),
        ("pop 65 topics", P("/pop", j({"topics": ["t%d" % i for i in range(65)]})), bad),
        ("kick count 10001", P("/kick", j({"topic": "h", "count": 10001})), bad),
        ("empty batch", P("/add", j({"jobs": []})), bad),
        ("batch of 1001", P("/add", j({"jobs": [{"topic": "h", "body": i}
                                                for i in range(1001)]})), bad),
        ("batch with one bad job", P("/add", j({"jobs": [{"topic": "h", "id": "ok-1", "body": 1},
                                                         {"topic": "h", "ttr": -1, "body": 2}]})),
         bad),
        ("topic with a space", P("/add", j({"topic": "a b", "body": 1})), bad),
        ("topic of 129 chars", P("/add", j({"topic": "t" * 129, "body": 1})), bad),
        ("id of 10000 chars", P("/add", j({"topic": "h", "id": "i" * 10000, "body": 1})), bad),
        ("NUL escape in topic", P("/add", b'{"topic":"h\\u0000x","body":1}'), bad),
        # --- huge numbers
        ("delay 1e400", P("/add", b'{"topic":"h","body":1,"delay":1e400}'), bad),
        ("body 1e400", P("/add", b'{"topic":"h","body":1e400}'), bad),
        ("ttr 40 digits", P("/add", ('{"topic":"h","body":1,"ttr":%s}' % BIG40).encode()), bad),
        ("count 40 digits", P("/pop", ('{"topic":"h","count":%s}' % BIG40).encode()), bad),
        ("retries -40 digits", P("/add", ('{"topic":"h","body":1,"retries":-%s}' % BIG40).encode()),
         bad),
        # --- deep nesting
        ("33 levels", P("/add", nested(32)), bad),
        ("10000 levels", P("/add", nested(10000)), bad),
        ("10000 levels of objects", P("/add", b'{"topic":"h","body":' + b'{"a":' * 10000 +
                                      b"1" + b"}" * 10000 + b"}"), bad),
        # --- invalid UTF-8
        ("0xff in a key", P("/add", b'{"top\xffic":"h","body":1}'), bad),
        ("0xff in a value", P("/add", b'{"topic":"h","body":"\xff"}'), bad),
        ("overlong slash", P("/add", b'{"topic":"h","body":"\xc0\xaf"}'), bad),
        ("UTF-8 surrogate", P("/add", b'{"topic":"h","body":"\xed\xa0\x80"}'), bad),
        ("truncated sequence", P("/add", b'{"topic":"h","body":"\xe2\x82"}'), bad),
        ("above U+10FFFF", P("/add", b'{"topic":"h","body":"\xf4\x90\x80\x80"}'), bad),
        ("invalid UTF-8 in GET query", G("/get?id=%FF%FE"), bad),
        # --- oversize
        ("job body over 64 KiB", P("/add", j({"topic": "h", "body": "x" * (MAX_BODY + 1)})),
         (413, "too_large")),
        ("batch job body over 64 KiB", P("/add", j({"jobs": [{"topic": "h", "body": 1}, {
            "topic": "h", "body": ["y" * 40000, "z" * 30000]}]})), (413, "too_large")),
        ("request over 1 MiB (nginx)", P("/add", j({"topic": "h", "body": "x" * (1 << 20)})),
         (413, "too_large")),
        # --- duplicate keys
        ("duplicate top-level key", P("/add", b'{"topic":"h","topic":"g","body":1}'), bad),
        ("duplicate key in body", P("/add", b'{"topic":"h","body":{"a":1,"b":{"c":1,"c":2}}}'),
         bad),
        ("duplicate key in a batch job", P("/add", b'{"jobs":[{"topic":"h","body":1,"body":2}]}'),
         bad),
        ("ttr and TTR", P("/add", b'{"topic":"h","body":1,"ttr":5,"TTR":6}'), bad),
        ("repeated query parameter", G("/get?id=a&id=b"), bad),
        # --- header abuse (answered by nginx: rewritten as JSON 400)
        ("huge header", P("/get", j({"id": "nope"}), headers={"X-Big": "a" * 70000}), bad),
        ("3000 headers", P("/get", j({"id": "nope"}),
                           headers={"X-H%d" % i: "v" for i in range(3000)}), bad),
        ("bogus Content-Length", P("/add", j({"topic": "h", "body": 1}),
                                   headers={"Content-Length": "abc"}), bad),
        ("negative Content-Length", P("/add", j({"topic": "h", "body": 1}),
                                      headers={"Content-Length": "-5"}), bad),
        ("Content-Length and chunked", P("/add", j({"topic": "h", "body": 1}),
                                         headers={"Transfer-Encoding": "chunked"}), bad),
        ("missing Host (HTTP/1.1)", P("/get", j({"id": "nope"}), headers={"Host": None}), bad),
        ("URI of 20000 chars", G("/get?id=" + "a" * 20000), bad),
        ("path traversal /../add", P("/../add", j({"topic": "h", "body": 1})), bad),
        ("NUL in the path (%00)", P("/add%00", j({"topic": "h", "body": 1})), bad),
        ("raw NUL in the path", P("/add\x00", j({"topic": "h", "body": 1})), bad),
        ("lower-case method", request_bytes("post", "/add", j({"topic": "h", "body": 1})), bad),
        # --- header abuse answered by delayq
        ("Content-Length shorter than the body", P("/add", b'{"topic":"h","body":1}XYZ',
                                                   headers={"Content-Length": "13"}), bad),
        ("chunked body, invalid JSON", request_bytes(
            "POST", "/add", b"7\r\n{\"topic\r\n0\r\n\r\n",
            headers={"Transfer-Encoding": "chunked"}, content_length=False), bad),
        ("wrong Content-Type, bad body", P("/add", b'{"topic":"h","body":1,}',
                                           headers={"Content-Type": "text/plain"}), bad),
        ("HTTP/1.0 without Host", P("/get", j({"id": "nope"}), proto="HTTP/1.0",
                                    headers={"Host": None, "Connection": None}),
         (404, "not_found")),
        ("PUT", request_bytes("PUT", "/add", j({"topic": "h", "body": 1})), bad),
        ("DELETE", request_bytes("DELETE", "/add", j({"topic": "h", "body": 1})), bad),
        ("PATCH", request_bytes("PATCH", "/add", j({"topic": "h", "body": 1})), bad),
        ("OPTIONS", request_bytes("OPTIONS", "/", b""), bad),
        ("GET of a write command", G("/add?topic=h"), bad),
        ("GET /", G("/"), bad),
        ("//add: nginx merges the slashes", P("//add", j({"topic": "h", "ttr": 0, "body": 1})),
         bad, dict(error_has="ttr")),
        ("/add?x: query ignored on POST", P("/add?x", j({"topic": "h", "ttr": 0, "body": 1})),
         bad, dict(error_has="ttr")),
        ("/a%64d: decoded by nginx", P("/a%64d", j({"topic": "h", "ttr": 0, "body": 1})),
         bad, dict(error_has="ttr")),
        ("/x/../add: resolved by nginx", P("/x/../add", j({"topic": "h", "ttr": 0, "body": 1})),
         bad, dict(error_has="ttr")),
        ("unknown path", P("/add/extra", j({"topic": "h", "body": 1})), unknown),
        ("command/path mismatch", P("/pop", j({"command": "add", "topic": "h", "body": 1})),
         bad),
        ("bearer token junk (auth off)", P("/get", j({"id": "nope"}),
                                           headers={"Authorization": "Bearer \x01\x02"}),
         (404, "not_found")),
        # --- methods, versions and transfer encodings nginx refuses itself
        ("TRACE", request_bytes("TRACE", "/", b""), bad),
        ("TRACE /add", request_bytes("TRACE", "/add", b""), bad),
        ("CONNECT", request_bytes("CONNECT", "127.0.0.1:80", b""), bad),
        ("HTTP/2.0 request line", P("/get", j({"id": "nope"}), proto="HTTP/2.0"), bad),
        ("HTTP/3.0 request line", P("/get", j({"id": "nope"}), proto="HTTP/3.0"), bad),
        ("TE: gzip, chunked", request_bytes("POST", "/add", b"0\r\n\r\n",
                                            headers={"Transfer-Encoding": "gzip, chunked"},
                                            content_length=False), bad),
        ("TE: identity", request_bytes("POST", "/add", b"",
                                       headers={"Transfer-Encoding": "identity"},
                                       content_length=False), bad),
        ("bad chunk size", request_bytes("POST", "/add", b"zz\r\n{}\r\n0\r\n\r\n",
                                         headers={"Transfer-Encoding": "chunked"},
                                         content_length=False), bad),
        ("chunk size overflow", request_bytes(
            "POST", "/add", b"ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
            headers={"Transfer-Encoding": "chunked"}, content_length=False), bad),
        ("POST without a length (HTTP/1.0)", request_bytes(
            "POST", "/add", b"", proto="HTTP/1.0", content_length=False,
            headers={"Connection": None}), bad),
        ("non-ASCII path", P("/\u00e9t\u00e9".encode("utf-8").decode("latin-1"),
                             j({"topic": "h", "body": 1})), unknown),
        ("non-UTF-8 path", P("/%ff%fe", j({"topic": "h", "body": 1})), unknown),
        ("long non-ASCII path", P("/" + "\u00e9".encode("utf-8").decode("latin-1") * 200,
                                  j({"topic": "h", "body": 1})), unknown),
        ("body shorter than Content-Length, half-closed",
         P("/add", j({"topic": "h", "body": 1}), headers={"Content-Length": "100"}),
         (CLOSED, CLOSED), dict(half_close=True)),
    ]
    return out


class HostileTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(workers=2, threads=8)

    def test_hostile_table(self):
        c = self.c
        table = cases()
        self.assertGreaterEqual(len(table), 40)
        st, r = c.get("/health")
        self.assertEqual(st, 200, r)
        pids = c.fcgi_pids()
        results = []
        failures = []
        for case in table:
            name, data, (want_st, want_code) = case[0], case[1], case[2]
            opts = case[3] if len(case) > 3 else {}
            before = c.snapshot()
            t0 = time.monotonic()
            try:
                st, ctype, body = send_raw(c.http_port, data, half_close=opts.get("half_close"))
            except OSError as e:
                st, ctype, body = "error", None, repr(e).encode()
            dt = time.monotonic() - t0
            after = c.snapshot()
            problem = None
            parsed = None
            try:
                parsed = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                pass
            if st != want_st:
                problem = "status %s, expected %s" % (st, want_st)
            elif want_code != CLOSED:
                if not (isinstance(parsed, dict) and parsed.get("success") is False and
                        parsed.get("code") == want_code and isinstance(parsed.get("error"), str)
                        and parsed["error"]):
                    problem = "body %r, expected success:false code %s with an error" % (
                        body[:300], want_code)
                elif not (ctype or "").startswith("application/json"):
                    problem = "Content-Type %r" % ctype
                elif opts.get("error_has") and opts["error_has"] not in parsed["error"]:
                    problem = "error %r does not name %r" % (parsed["error"], opts["error_has"])
            if after != before:
                changed = sorted(set(after) ^ set(before) |
                                 {k for k in after if k in before and after[k] != before[k]})
                problem = (problem + "; " if problem else "") + "Redis changed: %s" % changed
            if dt > 10:
                problem = (problem + "; " if problem else "") + "took %.1f s" % dt
            results.append((name, st, (parsed or {}).get("code") if isinstance(parsed, dict)
                            else None, round(dt * 1000)))
            if problem:
                failures.append("%s: %s" % (name, problem))
        for name, st, code, ms in results:
            print("  %-45s %-6s %-12s %5d ms" % (name, st, code, ms))
        print("%d hostile requests, %d problems" % (len(results), len(failures)))
        # still healthy, nothing crashed
        st, r = c.get("/health")
        self.assertEqual((st, r), (200, self.c.health_answer()))
        t = unique("after")
        self.assertOk(*c.req("add", topic=t, id=t, body={"still": "fine"}))
        st, r = c.req("pop", topic=t)
        self.assertOk(st, r)
        self.assertEqual((r["id"], r["value"]), (t, {"still": "fine"}))
        self.assertOk(*c.req("finish", id=t))
        self.assertEqual(c.fcgi_pids(), pids, "a delayq-fcgi worker was replaced (crashed?)")
        self.assertEqual(failures, [], "\n".join(failures))


if __name__ == "__main__":
    main()

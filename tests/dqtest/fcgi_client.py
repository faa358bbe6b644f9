"""One FastCGI request straight to a delayq-fcgi socket, without nginx, so a
test can tell one delayq-fcgi instance from another (nginx balances over
them). The params are the ones nginx/delayq-locations.conf passes."""

import socket
import struct

BEGIN_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT, STDERR = 1, 3, 4, 5, 6, 7
RESPONDER = 1
KEEP_CONN = 1


def _record(rtype, content, rid=1):
    return struct.pack(">BBHHBB", 1, rtype, rid, len(content), 0, 0) + content


def _pair(name, value):
    out = b""
    for n in (len(name), len(value)):
        out += bytes([n]) if n < 128 else struct.pack(">I", n | 0x80000000)
    return out + name + value


def request(sock_path, method, path, body=b"", timeout=10.0, keep_conn=True):
    """-> (HTTP status, body bytes). Raises OSError on a transport failure
    (refused, timeout, closed before the end of the request). keep_conn:
    ask for FCGI_KEEP_CONN, as nginx with fastcgi_keep_conn does; without
    it the server closes the connection after the answer."""
    params = {"REQUEST_METHOD": method, "DOCUMENT_URI": path, "SCRIPT_NAME": path,
              "REQUEST_URI": path, "QUERY_STRING": "", "CONTENT_TYPE": "application/json",
              "CONTENT_LENGTH": str(len(body)), "SERVER_PROTOCOL": "HTTP/1.1",
              "GATEWAY_INTERFACE": "CGI/1.1", "REMOTE_ADDR": "127.0.0.1"}
    p = b"".join(_pair(k.encode(), v.encode()) for k, v in params.items())
    # With FCGI_KEEP_CONN the request ends with the connection kept, then
    # this client closes it.
    msg = _record(BEGIN_REQUEST, struct.pack(">HB5x", RESPONDER, KEEP_CONN if keep_conn else 0))
    msg += _record(PARAMS, p) + _record(PARAMS, b"")
    for i in range(0, len(body), 32768):
        msg += _record(STDIN, body[i:i + 32768])
    msg += _record(STDIN, b"")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
        s.sendall(msg)
        data, out = b"", b""
        while True:
            while len(data) < 8:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("delayq-fcgi closed the connection")
                data += chunk
            _, rtype, _, clen, plen, _ = struct.unpack(">BBHHBB", data[:8])
            while len(data) < 8 + clen + plen:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("delayq-fcgi closed the connection")
                data += chunk
            content, data = data[8:8 + clen], data[8 + clen + plen:]
            if rtype == STDOUT:
                out += content
            elif rtype == END_REQUEST:
                break
    finally:
        s.close()
    head, _, rest = out.partition(b"\r\n\r\n")
    status = 200
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"status:"):
            status = int(line.split()[1])
    return status, rest

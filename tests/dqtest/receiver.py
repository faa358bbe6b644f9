"""A real HTTP receiver for callback tests: a threaded server on 127.0.0.1
that records every request (method, path, headers, body bytes, time, the
sender's address) and
answers as the test says: `answer(request)` returns (status, headers, body)
or (status, headers, body, delay_s), or None to hang up without answering;
the default answers 200."""

import http.server
import sys
import threading
import time

from .deployment import DeploymentTestCase


class Request:
    def __init__(self, handler, body):
        self.method = handler.command
        self.path = handler.path
        self.headers = {k.lower(): v for k, v in handler.headers.items()}
        self.body = body
        self.at = time.time()
        self.peer = handler.client_address
        self.connection = handler.connection  # to reset or watch it (hostile_receiver)

    def __repr__(self):
        return "<%s %s %s>" % (self.method, self.path, self.headers.get("webhook-id"))


class Receiver:
    def __init__(self, answer=None, host="127.0.0.1"):
        self.answer = answer or (lambda req: (200, {}, b"ok"))
        self.requests = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                req = Request(self, self.rfile.read(n))
                with outer.cond:
                    outer.requests.append(req)
                    outer.cond.notify_all()
                out = outer.answer(req)
                if out is None:  # a receiver that dies once it has read the request
                    self.close_connection = True
                    return
                status, headers, body = out[:3]
                if len(out) > 3 and out[3]:
                    time.sleep(out[3])
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            # Senders open many connections at once (a pusher after an
            # outage): a short accept queue would time their connects out.
            request_queue_size = 512

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], OSError):  # a sender killed mid-request
                    super().handle_error(request, client_address)

        self.server = Server((host, 0), Handler)
        self.server.daemon_threads = True
        self.host, self.port = host, self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def url(self, path="/hook"):
        return "http://%s:%d%s" % (self.host, self.port, path)

    def wait_for(self, pred, timeout, what="requests"):
        """Until pred(requests) is true; returns the requests."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s not seen within %.0f s; got %r" %
                                         (what, timeout, self.requests))
                self.cond.wait(left)
            return list(self.requests)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class ReceiverTestCase(DeploymentTestCase):
    """A deployment and a Receiver (cls.rx) answering with cls.answer(req)
    (200 unless a subclass says otherwise), started before the deployment
    and stopped after it."""

    answer = None

    @classmethod
    def setUpClass(cls):
        cls.rx = Receiver(cls.answer).start()
        try:
            super().setUpClass()
        except BaseException:
            cls.rx.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.rx.stop()

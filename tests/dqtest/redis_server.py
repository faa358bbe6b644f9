"""A private redis-server for a test, in a directory of the test's own, on
a loopback port, started and stopped by pid. Every test that needs a Redis
starts it through this class, so there is one way to do it."""

import os
import signal
import subprocess
import time

from .procs import free_port, stop_process, tail, track, wait_port_closed
from .resp import RedisError, Resp, raw_command


class RedisStartError(Exception):
    pass


class RedisServer:
    """RedisServer(dir, port=None, appendonly=False, appendfsync=None,
    args=[...]).start(); .resp() gives a client; stop()/kill9()/shutdown()
    then start() again reuse the same port and data dir."""

    START_TIMEOUT = 30  # loading a big AOF takes a while

    def __init__(self, dir, port=None, appendonly=False, appendfsync=None, args=None,
                 log_name="redis.log", auth=None, host="127.0.0.1", prefix=()):
        """auth: (None, password) for requirepass, or (user, password) for an
        ACL user with every right while the default user is switched off.
        host: the address it binds and is reached at; prefix: an argv
        prefix that runs it elsewhere (a network namespace, dqtest.netlab)."""
        self.dir = dir
        self.host = host
        self.prefix = list(prefix)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.args = list(args or [])
        self.auth = auth
        self.log = os.path.join(dir, log_name)
        self.proc = None
        self.frozen = False  # SIGSTOPped by signal()
        self._resp = None

    def argv(self):
        argv = ["redis-server", "--port", str(self.port), "--bind", self.host,
                "--dir", self.dir, "--save", "", "--daemonize", "no",
                "--appendonly", "yes" if self.appendonly else "no"]
        if self.host != "127.0.0.1":  # a test network's address (dqtest.netlab)
            argv += ["--protected-mode", "no"]
        if self.appendfsync:
            argv += ["--appendfsync", self.appendfsync]
        if self.auth and not self.auth[0]:
            argv += ["--requirepass", self.auth[1]]
        return argv + self.args

    def start(self):
        """Starts it (or starts it again) and waits until it answers PING
        (not LOADING). Returns self."""
        self.close_resp()
        out = open(self.log, "ab")
        try:
            self.proc = track(subprocess.Popen(self.prefix + self.argv(), stdin=subprocess.DEVNULL,
                                               stdout=out, stderr=subprocess.STDOUT, cwd=self.dir))
        finally:
            out.close()
        deadline = time.monotonic() + self.START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RedisStartError("redis-server exited with %s\n%s" %
                                      (self.proc.returncode, tail(self.log)))
            probe = Resp(self.port, host=self.host, timeout=1)
            try:
                if probe("PING") == "PONG":
                    if self.auth:  # an ACL user; the default user off
                        probe("ACL", "SETUSER", self.auth[0], "on", ">" + self.auth[1], "~*", "&*",
                              "+@all")
                        probe("ACL", "SETUSER", "default", "off")
                    return self
            except RedisError as e:
                if str(e).startswith("NOAUTH"):  # requirepass: up, and asking
                    return self
            except (OSError, ConnectionError):
                pass
            finally:
                probe.close()
            if time.monotonic() > deadline:
                raise RedisStartError("redis-server did not answer PING\n" + tail(self.log))
            time.sleep(0.02)

    def resp(self):
        """This test's client connection (kept; reconnects by itself)."""
        if self._resp is None:
            self._resp = Resp(self.port, host=self.host, auth=self.auth)
        return self._resp

    def __call__(self, *args):
        return self.resp()(*args)

    def close_resp(self):
        if self._resp:
            self._resp.close()
        self._resp = None

    def stop(self):
        """SIGTERM by pid, wait, and until the port is closed."""
        self.close_resp()
        if self.running():
            self.proc.send_signal(signal.SIGCONT)  # a frozen server would not stop
        stop_process(self.proc)
        wait_port_closed(self.port, host=self.host)

    def kill9(self):
        self.close_resp()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def shutdown(self, timeout=20):
        """SHUTDOWN over the protocol (the AOF is flushed and fsynced)."""
        self.close_resp()
        raw_command(self.port, "SHUTDOWN", host=self.host)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RedisStartError("redis-server ignored SHUTDOWN for %d s" % timeout)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig=signal.SIGSTOP):
        self.proc.send_signal(sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            self.frozen = sig == signal.SIGSTOP

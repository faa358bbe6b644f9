"""FaultCluster: the integration harness' Cluster with what the fault suite
needs on top of it:

- Redis with AOF on (appendfsync configurable) and DEBUG enabled, started on
  the same port and dir on every restart;
- two delayq-fcgi instances (fcgi.sock and fcgi2.sock) behind one nginx
  upstream, each of which can be stopped, killed and restarted like a
  supervisor would;
- helpers to kill/restart the timers and Redis by pid.

Standard library only.
"""

import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402
from harness import Cluster, ClusterError, Resp  # noqa: E402


def raw_redis_command(port, *args, timeout=10.0):
    """Sends one command on a fresh connection and returns the first reply
    line, or None when the server closed the connection without answering
    (SHUTDOWN does that). Never retries (unlike harness.Resp)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
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


class FaultCluster(Cluster):
    """Cluster(n_fcgi=2, appendfsync='everysec', redis_args=[...], ...)."""

    def __init__(self, n_fcgi=2, appendfsync="everysec", redis_args=None, **kw):
        kw.setdefault("appendonly", True)
        super().__init__(**kw)
        self.n_fcgi = n_fcgi
        self.appendfsync = appendfsync
        self.redis_args = list(redis_args or [])
        self.fcgis = [None] * n_fcgi
        self.retired = []  # (name, Popen) of killed/stopped instances, for reaping

    # ------------------------------------------------------------ redis

    REDIS_START_TIMEOUT = 30

    def redis_argv(self):
        return super().redis_argv() + ["--appendfsync", self.appendfsync,
                                       "--enable-debug-command", "yes"] + self.redis_args

    def new_resp(self, timeout=10.0):
        return Resp(self.redis_port, timeout=timeout)

    def kill9_redis(self):
        p = self.redis_proc
        p.kill()
        p.wait(10)
        self._resp = None

    def shutdown_redis(self):
        """SHUTDOWN over the protocol (AOF is flushed and fsynced) and wait."""
        raw_redis_command(self.redis_port, "SHUTDOWN")
        try:
            self.redis_proc.wait(20)
        except subprocess.TimeoutExpired:
            self.redis_proc.kill()
            self.redis_proc.wait()
            raise ClusterError("redis-server ignored SHUTDOWN for 20 s")
        self._resp = None

    # ------------------------------------------------------------ delayq-fcgi

    def sock(self, i):
        return self.path("fcgi.sock" if i == 0 else "fcgi%d.sock" % (i + 1))

    def fcgi_log(self, i):
        return self.path("fcgi.log" if i == 0 else "fcgi%d.log" % (i + 1))

    def _start_fcgi(self):
        for i in range(self.n_fcgi):
            self.start_fcgi(i)

    def start_fcgi(self, i):
        argv = [self.fcgi_bin, "--listen=%s" % self.sock(i),
                "--redis-port=%d" % self.redis_port, "--workers=%d" % self.workers,
                "--threads=%d" % self.threads, "--prefix=dq", "--log-level=info"]
        argv += harness._flags(self.flags) + harness._flags(self.fcgi_flags)
        p = self._popen(argv, self.fcgi_log(i), umask=0, valgrind=True)
        self.fcgis[i] = p
        if i == 0:
            self.fcgi_proc = p
        # wait for its socket, so that nginx can reach it when we return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.exists(self.sock(i)) and len(self.children(p.pid)) == self.workers:
                break
            time.sleep(0.01)
        return p

    def instance_pids(self, i):
        p = self.fcgis[i]
        return p.pid, self.children(p.pid)

    def retire(self, i, name):
        self.retired.append((name, self.fcgis[i]))

    def _procs(self):
        out = super()._procs()
        for i in range(1, self.n_fcgi):
            if self.fcgis[i]:
                out.append(("delayq-fcgi%d" % (i + 1), self.fcgis[i]))
        return out

    def logs(self):
        out = super().logs()
        if self.dir:
            out += [self.fcgi_log(i) for i in range(1, self.n_fcgi)]
        return out

    # ------------------------------------------------------------ timers

    def live_timers(self):
        return [i for i, p in enumerate(self.timers) if p.poll() is None]

    # ------------------------------------------------------------ nginx

    def _start_nginx(self):
        ndir = self.path("nginx")
        os.makedirs(ndir, exist_ok=True)
        argv = [self.nginx_conf_script, "--dir", ndir, "--port", str(self.http_port)]
        for i in range(self.n_fcgi):
            argv += ["--backend", "unix:%s" % self.sock(i)]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=self.dir)
        with open(self.path("nginx-conf.log"), "wb") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise ClusterError("scripts/nginx-conf failed (%d):\n%s" %
                               (r.returncode, r.stdout.decode("utf-8", "replace")))
        conf = os.path.join(ndir, "nginx.conf")
        self.nginx_proc = self._popen(
            ["nginx", "-p", ndir, "-c", conf, "-e", os.path.join(ndir, "error.log"),
             "-g", "daemon off;"], self.path("nginx.log"))

    def stop(self, failed=False):
        for _, p in self.retired:
            if p.poll() is None:
                try:
                    p.wait(1)
                except subprocess.TimeoutExpired:
                    pass
        super().stop(failed=failed)


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False

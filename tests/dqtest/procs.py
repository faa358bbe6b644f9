"""Processes the tests start: ports, log tails, children, signals by pid,
and the registry of every process the tests started (track()), which
kill_started() kills by pid at exit, whatever the exit path."""

import atexit
import datetime
import os
import random
import signal
import socket
import subprocess


_STARTED = []  # Popen of every server process the tests started


def track(p):
    """Registers Popen p: killed at exit if it is still running then."""
    _STARTED[:] = [q for q in _STARTED if q.poll() is None]
    _STARTED.append(p)
    return p


@atexit.register
def kill_started():
    """Last resort at exit (atexit runs it after the orderly stops, which
    were registered later): SIGKILL by pid of every tracked process still
    running (SIGCONT first, for one a test froze). Also what a signal
    handler runs (exit_on_signals)."""
    for p in list(_STARTED):
        if p.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                kill_pid(p.pid, sig)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
    _STARTED.clear()


def exit_on_signals(sigs=(signal.SIGTERM, signal.SIGHUP)):
    """A test driver's timeout or a closed terminal signals the test: run
    every atexit handler (the orderly stops, then kill_started) and exit
    128 + the signal. SIGINT stays a KeyboardInterrupt, which unwinds to
    the same handlers."""
    def on_signal(signum, _frame):
        atexit._run_exitfuncs()
        os._exit(128 + signum)

    for sig in sigs:
        signal.signal(sig, on_signal)


def free_port():
    """A TCP port that was free a moment ago on 127.0.0.1."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _ephemeral_low():
    """The first port of the kernel's range for outgoing connections and
    port 0 binds (free_port())."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_ports(n=1):
    """The first of n consecutive ports for Redis Cluster nodes, picked
    together so no node's port is another's cluster bus port (10000 above
    it), and kept with their bus ports below the ephemeral range so
    free_port() and outgoing connections cannot take them meanwhile."""
    low = _ephemeral_low()
    top = low - 10000 - n  # the last bus port stays below the range
    if top < 2048:
        top = 55535 - n  # a range too low to stay under: any free ports
    for _ in range(1000):
        base = random.randint(max(1024, top - 12000), top)
        if all(_port_free(p) and _port_free(p + 10000) for p in range(base, base + n)):
            return base
    raise RuntimeError("no %d free ports for cluster nodes" % n)


def read_text(path):
    """The text of a file so far (a log being written), "" while there is
    none."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def rss_kb(pid):
    """The resident memory of process pid, in kB (0 when it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tail(path, n=40):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


def log_time(line):
    """The unix time of a delayq log line (it starts with its UTC time)."""
    when = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


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


def children(pid):
    """The live (not zombie) child processes of pid, sorted."""
    kids = set()
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                    kids.update(int(x) for x in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    if not kids:
        r = subprocess.run(["pgrep", "-P", str(pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        kids.update(int(x) for x in r.stdout.split())
    return sorted(k for k in kids if pid_alive(k))


def stop_process(p, grace=10.0, sig=signal.SIGTERM):
    """Signals a Popen by pid and waits; SIGKILL after grace. Returns True
    when it had to be killed."""
    if p is None or p.poll() is not None:
        return False
    try:
        p.send_signal(sig)
    except OSError:
        return False
    try:
        p.wait(grace)
        return False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return True


def wait_port_closed(port, timeout=5.0, host="127.0.0.1"):
    """Until nothing accepts on port (a stopped server really let go)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
        except OSError:
            return True
        time.sleep(0.02)
    return False


def connect_as(user, path):
    """What a connect() to the unix socket at path answers a process of that
    local user (run through runuser, so as root only): "ok" or the errno's
    name ("EACCES")."""
    probe = ("import errno, socket\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(%r)\n    print('ok')\n"
             "except OSError as e:\n    print(errno.errorcode[e.errno])\n" % path)
    r = subprocess.run(["runuser", "-u", user, "--", "python3", "-c", probe],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
    return r.stdout.decode().strip()

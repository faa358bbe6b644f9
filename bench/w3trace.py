#!/usr/bin/env python3
"""W3's wake-up path inside delayq-fcgi, hop by hop, from its system calls.

    bench/w3trace.py [--jobs N] [--spread S] [--threads T] [--trace-out FILE]

Starts bench's stack (bench/run.py's Stack) with one worker process, runs
W3 (jobs added with their own `at`, long-polling consumers that finish and
pop), and records the worker's system calls with `perf trace` meanwhile.
For each ready message the worker's subscriber thread passes on, it finds:

  1 subscriber   its poll() returning -> its write to the woken queue's eventfd
  2 handoff      that write -> a request thread reading the eventfd
  3 thread       the eventfd read -> the pop written to Redis
  4 redis        the pop written -> the first bytes of Redis' answer read
  5 answer       Redis' answer -> the answer written to nginx (FastCGI)

and prints `FIGURE w3trace.<hop>.<p50|p99|max>_ms` lines, and how many
wake-ups found no job (the consumer that finished a job took it first) and
parked again. perf trace slows every system call down, so the hops are
longer than without it; compare them with each other, and W3's lateness
(printed too) with the same run's. Needs perf (linux-perf) and root or
perf_event_paranoid <= 1.
"""

import argparse
import bisect
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402

# "  12.345 ( 0.012 ms): delayq-fcgi/123 write(fd: 5, buf: 0x.., count: 8) = 8"; a call
# that blocked shows up as "... [continued]: poll()) = 1" when it returns.
LINE = re.compile(r"\s*([\d.]+) \(\s*([\d.]*)(?: ms)?\s*\): \S+/(\d+) "
                  r"(\s*\.\.\. \[continued\]: )?(\w+)\((.*?)\)\)?\s*(?:= (-?\d+)|\.\.\.)")

Call = collections.namedtuple("Call", "start end name fd ret")


def parse(path):
    """tid -> its calls in order (end None while unfinished)."""
    calls = collections.defaultdict(list)
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        start = float(m.group(1))
        dur = float(m.group(2)) if m.group(2) else None
        fd = re.search(r"fd: (\d+)", m.group(6))
        ret = int(m.group(7)) if m.group(7) is not None else None
        calls[int(m.group(3))].append(Call(start, start + dur if dur is not None else None,
                                           m.group(5), int(fd.group(1)) if fd else None, ret))
    return calls


def hops(calls, efd):
    """Per hop name, its durations (ms), and the count of wake-ups that
    found nothing."""
    writers = collections.Counter(t for t, cs in calls.items() for c in cs
                                  if c.name == "write" and c.fd == efd)
    if not writers:
        raise SystemExit("no eventfd writes in the trace (fd %d)" % efd)
    sub = writers.most_common(1)[0][0]  # the subscriber thread: most wake-ups
    reads = sorted((c.start, t, i) for t, cs in calls.items() if t != sub
                   for i, c in enumerate(cs) if c.name == "read" and c.fd == efd)
    starts = [r[0] for r in reads]
    taken = 0
    out = collections.defaultdict(list)
    empty = 0
    sub_calls = calls[sub]
    for i, c in enumerate(sub_calls):
        if not (c.name == "write" and c.fd == efd):
            continue
        woke = next((p.end for p in reversed(sub_calls[max(0, i - 8):i])
                     if p.name == "poll" and p.end is not None and p.ret == 1), None)
        k = max(bisect.bisect_left(starts, c.start), taken)
        if k == len(reads):
            break
        taken = k + 1  # the eventfd is a semaphore: one read per write, in order
        t_read, tid, j = reads[k]
        sent = answered = replied = None
        redis_fd = None
        for d in calls[tid][j + 1:]:
            if d.name == "epoll_wait":
                break  # the thread is done with this request
            if sent is None and d.name == "write" and d.fd != efd:
                sent, redis_fd = d.start, d.fd
            elif sent is not None and answered is None and d.name == "read" and d.fd == redis_fd \
                    and d.ret and d.ret > 0 and d.end is not None:
                answered = d.end
            elif answered is not None and d.name in ("write", "writev") and d.fd != redis_fd:
                replied = d.start
                break
        if woke is not None:
            out["1_subscriber"].append(c.start - woke)
        out["2_handoff"].append(t_read - c.start)
        if sent is not None:
            out["3_thread"].append(sent - t_read)
        if answered is not None:
            out["4_redis"].append(answered - sent)
        if replied is None:
            empty += 1
            continue
        out["5_answer"].append(replied - answered)
        if woke is not None:
            out["total"].append(replied - woke)
    return out, empty


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--spread", type=float, default=4)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--trace-out", help="keep perf trace's output here")
    a = ap.parse_args()
    bench.ARGS = argparse.Namespace(keep=False, build=bench.TOP)
    s = bench.Stack(workers=1, threads=a.threads, with_ceiling=False)
    out = a.trace_out or tempfile.mktemp(prefix="delayq-w3trace-", suffix=".txt")
    try:
        s.start()
        time.sleep(2)  # the timer takes its bucket locks
        worker = bench.children(s.fcgi.pid)[0]
        efd = next(int(fd) for fd in os.listdir("/proc/%d/fd" % worker)
                   if os.readlink("/proc/%d/fd/%s" % (worker, fd)) == "anon_inode:[eventfd]")
        tr = subprocess.Popen(["perf", "trace", "-p", str(worker), "-o", out, "-e",
                               "read,write,writev,epoll_wait,poll"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.5)  # perf attaches
        if tr.poll() is not None:
            raise SystemExit("perf trace failed: %s" % tr.stderr.read().decode()[-500:])
        r = bench.loadgen(s.http_port, "late", conns=20, producers=4, jobs=a.jobs, spread=a.spread,
                          delay_min=2, ttr=60, topic="w3", tag="l", finish_and_pop=True,
                          late_at=True)
        tr.send_signal(signal.SIGINT)
        tr.wait(60)
    finally:
        s.stop()
    for k in ("late_p50_ms", "late_p99_ms", "late_max_ms"):
        bench.fig("w3trace.w3.%s" % k, r[k], "ms")
    durations, empty = hops(parse(out), efd)
    for name in sorted(durations):
        for q, label in ((0.5, "p50"), (0.99, "p99"), (1.0, "max")):
            bench.fig("w3trace.%s.%s_ms" % (name, label), bench.pctl(durations[name], q), "ms")
    bench.fig("w3trace.wakeups", len(durations["2_handoff"]), "wake-ups")
    bench.fig("w3trace.wakeups_found_nothing", empty, "wake-ups")
    if not a.trace_out:
        os.unlink(out)


if __name__ == "__main__":
    main()

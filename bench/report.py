#!/usr/bin/env python3
"""Plots (gnuplot, PNG) and the figures table from one bench/run.py run.

    bench/report.py bench/out/full.json [--lateness-dir bench/out] [--img docs/img]
        [--round 2|3]

Writes docs/img/throughput.png and docs/img/lateness-cdf.png and prints the
round's targets (default: round three's, issue 26's and issue 20's Cluster
ratio) and every figure as markdown tables on stdout.
"""

import argparse
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


ROUND2_TARGETS = [
    ("batch W1 >= 1.2x beanstalkd W1", ["ratio.w1_batch_to_beanstalkd"], lambda r: r >= 1.2,
     "%.2fx"),
    ("batch W2 >= 1.2x beanstalkd W2", ["ratio.w2_batch_to_beanstalkd"], lambda r: r >= 1.2,
     "%.2fx"),
    ("single W1 >= 0.9x one-EVALSHA ceiling", ["ratio.w1_single_to_ceiling"], lambda r: r >= 0.9,
     "%.2fx"),
    ("single W2 >= 0.9x ceiling (jobs/s; one finish-and-pop request per job)",
     ["ratio.w2_fap_to_ceiling"], lambda r: r >= 0.9, "%.2fx"),
    ("single W1 ahead of BullMQ", ["ratio.w1_single_to_bullmq"], lambda r: r > 1, "%.2fx"),
    ("single W2 (finish-and-pop) ahead of BullMQ", ["ratio.w2_fap_to_bullmq"], lambda r: r > 1,
     "%.2fx"),
    ("W3 p99 <= 2 ms", ["w3.delayq.late_p99_ms"], lambda v: v <= 2, "%.2f ms"),
    ("W3 max <= 20 ms", ["w3.delayq.late_max_ms"], lambda v: v <= 20, "%.2f ms"),
    ("W3 none missed", ["w3.delayq.missed"], lambda v: v == 0, "%d"),
    ("W3 delayq-timer CPU below beanstalkd's",
     ["w3.delayq.timer_cpu_s", "w3.beanstalkd.server_cpu_s"], lambda a, b: a < b,
     "%.3f vs %.3f CPU-s"),
    ("W4 delayq-timer + delayq-fcgi <= 0.01 CPU-s / 30 s",
     ["w4.delayq.idle_timer_plus_fcgi_cpu_s"], lambda v: v <= 0.01, "%.4f CPU-s"),
    ("W5 one timer >= 200,000 jobs/s", ["w5.delayq.timers1.jobs_s"], lambda v: v >= 200000,
     "%.0f jobs/s"),
    ("W5 two timers faster than one", ["ratio.w5_two_timers_to_one"], lambda r: r > 1, "%.2fx"),
    ("W6 <= 150 bytes per job beyond its body", ["w6.delayq.bytes_per_job_minus_body"],
     lambda v: v <= 150, "%.0f bytes"),
    ("W7 add with many stored within 10% of 10k", ["w7.delayq.add.ratio_big_to_10k"],
     lambda r: r >= 0.9, "%.2fx"),
    ("W7 drain with many stored within 10% of 10k", ["w7.delayq.drain.ratio_big_to_10k"],
     lambda r: r >= 0.9, "%.2fx"),
    ("Cluster: batch W1 >= 1.2x beanstalkd W1",
     ["cluster.cluster.add_batch100.jobs_s", "w1.beanstalkd.add.jobs_s"],
     lambda a, b: a >= 1.2 * b, "%.0f vs %.0f jobs/s"),
    ("Cluster: batch W2 >= 1.2x beanstalkd W2",
     ["cluster.cluster.drain_count100.jobs_s", "w2.beanstalkd.drain.jobs_s"],
     lambda a, b: a >= 1.2 * b, "%.0f vs %.0f jobs/s"),
    ("Cluster: W3 p99 <= 2 ms", ["cluster.cluster.w3.late_p99_ms"], lambda v: v <= 2, "%.2f ms"),
    ("Cluster: W3 max <= 20 ms", ["cluster.cluster.w3.late_max_ms"], lambda v: v <= 20, "%.2f ms"),
    ("Cluster: W3 none missed", ["cluster.cluster.w3.missed"], lambda v: v == 0, "%d"),
]

ROUND3_TARGETS = [
    ("batch add >= 1.5x beanstalkd's put", ["ratio.w1_batch_to_beanstalkd"], lambda r: r >= 1.5,
     "%.2fx"),
    ("single add >= 0.9x the one-EVALSHA ceiling", ["ratio.w1_single_to_ceiling"],
     lambda r: r >= 0.9, "%.2fx"),
    ("batch drain >= 2x beanstalkd", ["ratio.w2_batch_to_beanstalkd"], lambda r: r >= 2, "%.2fx"),
    ("W5 one timer >= 200,000 jobs/s", ["w5.delayq.timers1.jobs_s"], lambda v: v >= 200000,
     "%.0f jobs/s"),
    ("W6 <= 200 bytes per delayed job beyond its body", ["w6.delayq.bytes_per_job_minus_body"],
     lambda v: v <= 200, "%.0f bytes"),
    ("W3 one Redis p99 <= 2 ms", ["w3.delayq.late_p99_ms"], lambda v: v <= 2, "%.2f ms"),
    ("W3 one Redis max <= 20 ms", ["w3.delayq.late_max_ms"], lambda v: v <= 20, "%.2f ms"),
    ("W3 3-master Cluster p99 <= 3 ms", ["cluster.cluster.w3.late_p99_ms"], lambda v: v <= 3,
     "%.2f ms"),
    ("W3 Cluster p99 within 1.5x of one Redis in the same part (issue 20)",
     ["cluster.cluster.w3.late_p99_ms", "cluster.single.w3.late_p99_ms"],
     lambda a, b: a <= 1.5 * b, "%.2f vs %.2f ms"),
    ("single add ahead of BullMQ behind HTTP", ["ratio.w1_single_to_bullmq_http"],
     lambda r: r > 1, "%.2fx"),
    ("finish-and-pop ahead of BullMQ behind HTTP", ["ratio.w2_fap_to_bullmq_http"],
     lambda r: r > 1, "%.2fx"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--lateness-dir", default=os.path.join(HERE, "out"))
    ap.add_argument("--img", default=os.path.join(TOP, "docs", "img"))
    ap.add_argument("--round", type=int, choices=(2, 3), default=3)
    a = ap.parse_args()
    targets = ROUND2_TARGETS if a.round == 2 else ROUND3_TARGETS
    data = json.load(open(a.json))
    F = {k: v["value"] for k, v in data["figures"].items()}
    os.makedirs(a.img, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="delayq-report-")

    # Throughput: one group per workload, one bar per system.
    # (a figure the run did not measure is drawn as 0)
    rows = [
        ("W1 add", "w1.delayq.add.jobs_s", "w1.delayq.add_batch100.jobs_s",
         "w1.delayq_run.add_batch100.jobs_s", "cluster.cluster.add_batch100.jobs_s",
         "ceiling.evalsha.req_s", "w1.beanstalkd.add.jobs_s", "w1.beanstalkd_binlog.add.jobs_s",
         "w1.bullmq.add.jobs_s", "w1.bullmq_http.add.jobs_s"),
        ("W2 drain", "w2.delayq.drain_fap.jobs_s", "w2.delayq.drain_count100.jobs_s",
         "w2.delayq_run.drain_count100.jobs_s", "cluster.cluster.drain_count100.jobs_s",
         "ceiling.evalsha.req_s", "w2.beanstalkd.drain.jobs_s", "w2.beanstalkd_binlog.drain.jobs_s",
         "w2.bullmq.drain.jobs_s", "w2.bullmq_http.drain_fap.jobs_s"),
    ]
    dat = os.path.join(tmp, "tp.dat")
    with open(dat, "w") as f:
        f.write("workload delayq delayq-batch delayq-batch-scripts/run delayq-batch-Cluster "
                "ceiling-1-EVALSHA beanstalkd beanstalkd-binlog bullmq bullmq-behind-HTTP\n")
        for r in rows:
            f.write('"%s" %s\n' % (r[0], " ".join("%.0f" % F.get(k, 0) for k in r[1:])))
    gp = """
set terminal pngcairo size 1100,500 noenhanced
set linetype 9 lc rgb '#8c564b'
set output '{out}'
set title 'Throughput, jobs/s (one run; the ceiling is requests/s of one EVALSHA behind nginx)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key outside right top
set ylabel 'jobs/s'
set grid ytics
set yrange [0:*]
plot for [i=2:10] '{dat}' using i:xtic(1) title columnheader(i)
""".format(out=os.path.join(a.img, "throughput.png"), dat=dat)
    run_gnuplot(gp, tmp, "pngcairo")

    # Lateness CDF.
    series = []
    for name, label in (("delayq", "delayq"), ("delayq_run", "delayq (scripts/run)"),
                        ("single", "delayq, cluster part: one Redis"),
                        ("cluster", "delayq, 3-master Cluster"), ("beanstalkd", "beanstalkd"),
                        ("beanstalkd_binlog", "beanstalkd -b"), ("bullmq", "BullMQ")):
        p = os.path.join(a.lateness_dir, "lateness-%s.txt" % name)
        if not os.path.exists(p):
            continue
        vals = sorted(float(x) for x in open(p) if x.strip())
        out = os.path.join(tmp, "cdf-%s.dat" % name)
        with open(out, "w") as f:
            n = len(vals)
            for i, v in enumerate(vals):
                f.write("%.4f %.6f\n" % (max(v, 0.01), (i + 1) / n))
        series.append((out, label))
    plots = ", ".join("'%s' using 1:2 with lines lw 2 title '%s'" % s for s in series)
    if not series:
        plots = None  # no lateness files: no plot
    gp = """
set terminal pngcairo size 900,500 noenhanced
set output '{out}'
set title 'W3 lateness: received - due time, CDF (values <= 0.01 ms drawn at 0.01)'
set logscale x
set xlabel 'lateness, ms (log scale)'
set ylabel 'fraction of jobs received'
set key right bottom
set grid
set yrange [0:1]
plot {plots}
""".format(out=os.path.join(a.img, "lateness-cdf.png"), plots=plots)
    if plots:
        run_gnuplot(gp, tmp, "pngcairo")

    print("| target | measured | met? |")
    print("|---|---|---|")
    for label, keys, test, fmt in targets:
        vals = [F.get(k) for k in keys]
        if any(v is None for v in vals):
            print("| %s | (not measured) | - |" % label)
            continue
        print("| %s | %s | %s |" % (label, fmt % tuple(vals), "met" if test(*vals) else "**missed**"))
    print()
    print("| figure | value | unit |")
    print("|---|---:|---|")
    for k, v in data["figures"].items():
        val = v["value"]
        if isinstance(val, float):
            s = "%.3g" % val if abs(val) < 100 else "%.0f" % val
        else:
            s = str(val)
        print("| `%s` | %s | %s |" % (k, s, v["unit"]))


def run_gnuplot(script, tmp, term):
    r = subprocess.run(["gnuplot"], input=script.encode(), stderr=subprocess.PIPE)
    if r.returncode != 0 and term == "pngcairo":
        # gnuplot-nox may lack cairo: fall back to the gd png terminal.
        r = subprocess.run(["gnuplot"], input=script.replace("pngcairo", "png").encode(),
                           stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise SystemExit("gnuplot failed: %s" % r.stderr.decode())


if __name__ == "__main__":
    main()

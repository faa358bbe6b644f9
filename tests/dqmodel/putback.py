"""Proves the model tester bites: puts a fixed defect back (a patch under
putbacks/) into a copy of the built checkout, rebuilds it, and runs the
tester against it with a fresh seed until it finds a divergence or its
time is up. Then every kept sequence the patch names on its
"Regressions:" line must diverge too.

Fails when the tester, given the time, finds nothing, or a kept sequence
no longer bites; prints the time the search took either way (the figure
docs/DESIGN.md quotes). By hand, or as a CI step:
  python3 tests/dqmodel/putback.py [--seconds 240] [--searchers 2] [PATCH ...]
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def regressions_of(patch):
    """The kept sequences a patch's preamble names (paths under HERE)."""
    with open(patch) as f:
        m = re.search(r"^Regressions:(.*)$", f.read(), re.M)
    return [os.path.join(HERE, "regressions", name) for name in (m.group(1).split() if m else [])]


def copy_with_defect(patch, scratch):
    """A copy of the built checkout with the patch applied, rebuilt (only
    what the patch touches is compiled again)."""
    copy = os.path.join(scratch, os.path.basename(patch)[:-len(".patch")])
    shutil.copytree(TOP, copy, symlinks=True)
    subprocess.run(["git", "apply", os.path.abspath(patch)], cwd=copy, check=True)
    subprocess.run(["make", "-s", "-j2"], cwd=copy, check=True, stdout=subprocess.DEVNULL)
    return copy


def tester(copy, *args):
    """Starts the tester (or a replay) from the copy against the copy's
    build, in a deployment of its own."""
    env = dict(os.environ, PYTHONPATH=os.path.join(copy, "tests"),
               DELAYQ_BUILD_DIR=copy, DELAYQ_SRC_DIR=copy)
    return subprocess.Popen([sys.executable, "-m", "dqmodel.runner", *args],
                            cwd=os.path.join(copy, "tests"), env=env)


def search(copy, seconds, searchers):
    """Random searches side by side, each from a fresh seed, until one
    finds a divergence (exit status 1) or all give up: waiting on the
    service, not on the CPU, most of a search's time, so two searches find
    in about half the time."""
    running = [tester(copy, "--seconds", str(seconds), "--shrink-seconds", "0")
               for _ in range(searchers)]
    found = False
    while running and not found:
        time.sleep(0.2)
        for p in [p for p in running if p.poll() is not None]:
            running.remove(p)
            found = found or p.returncode == 1
    for p in running:  # their deployments are removed as they stop
        p.terminate()
        p.wait()
    return found


def prove(patch, seconds, searchers, scratch):
    name = os.path.basename(patch)
    copy = copy_with_defect(patch, scratch)
    started = time.monotonic()
    found = search(copy, seconds, searchers)
    took = time.monotonic() - started
    print("put-back %s: the tester %s in %.0f s" % (
        name, "found it" if found else "found nothing", took), flush=True)
    stale = [path for path in regressions_of(patch) if tester(copy, "--replay", path).wait() != 1]
    for path in stale:
        print("put-back %s: the kept sequence %s does not diverge" % (name, path))
    shutil.rmtree(copy)
    return found and not stale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=240,
                    help="the random search's budget per patch")
    ap.add_argument("--searchers", type=int, default=2, help="searches side by side")
    ap.add_argument("patches", nargs="*")
    a = ap.parse_args()
    patches = a.patches or sorted(glob.glob(os.path.join(HERE, "putbacks", "*.patch")))
    scratch = tempfile.mkdtemp(prefix="dq-putback-")
    try:
        bad = [p for p in patches if not prove(p, a.seconds, a.searchers, scratch)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if bad:
        print("the tester missed: %s" % ", ".join(os.path.basename(p) for p in bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

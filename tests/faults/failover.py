#!/usr/bin/env python3
"""delayq through Redis failovers, with a ledger.

Runs a steady add/pop/finish load (tests/dqtest/ledger.py) against a private
deployment on a Redis Cluster (3 masters, a replica each) or behind Redis
Sentinel (a primary, two replicas, three sentinels), and kills Redis under
it, round after round:

  cluster:  kill -9 of the master of a random shard; its replica takes over;
            the killed node is started again (it rejoins as a replica), as a
            process supervisor would; with --reshard, every other round
            moves a busy shard's slots to another master instead;
  sentinel: kill -9 of the primary; the sentinels promote a replica; the
            killed server is started again and the sentinels make it a
            replica.

Then it drains the load and checks the ledger and Redis: no acknowledged job
lost, none delivered twice within its TTR, every shard consistent
(dqtest.invariants). Per round it reports how long Redis took to promote and
how long adds went unanswered.

  tests/faults/failover.py --redis cluster --wait-replicas 1   # must lose nothing
  tests/faults/failover.py --redis sentinel --wait-replicas 1
  tests/faults/failover.py --redis cluster --wait-replicas 0   # measures the loss window

With --wait-replicas 0 (delayq's default: acknowledged once the primary has
it) a failover can lose writes the old primary acknowledged but had not yet
sent to its replica: the run then measures, rather than forbids, losses and
duplicates, and reports how long before the kill the lost jobs had been
acknowledged (the loss window). Exit status: 0 when every check passed, 1 on
a violation, 2 when the run could not be carried out.
"""

import argparse
import os
import random
import sys
import time
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dqtest  # noqa: E402
from dqtest import Deployment, DeploymentError, invariants  # noqa: E402
from dqtest.ledger import LedgerLoad  # noqa: E402
from redis_faults import ClusterFaults, SentinelFaults  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--redis", choices=("cluster", "sentinel"), required=True)
    ap.add_argument("--wait-replicas", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reshard", action="store_true", help="cluster: reshard every other round")
    ap.add_argument("--rate", type=float, default=150.0, help="adds per second")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(3), "big")
    rng = random.Random(args.seed)
    print("failover run: %s, redis_wait_replicas %d, %d rounds, seed %d" %
          (args.redis, args.wait_replicas, args.rounds, args.seed), flush=True)
    d = Deployment(redis_mode=args.redis, workers=2, threads=16, n_timers=2, n_fcgi=2,
                   timer_lease_ms=2000, redis_wait_replicas=args.wait_replicas,
                   redis_wait_timeout_ms=500)
    failed = True
    try:
        d.start()
        faults = ClusterFaults(d, rng) if args.redis == "cluster" else SentinelFaults(d, rng)
        load = LedgerLoad(d, "fo", producers=3, consumers=3, ttr=5.0, rate=args.rate).start()
        events = []
        time.sleep(3.0)
        for n in range(args.rounds):
            if args.reshard and faults.reshard_upto and n % 2:
                r = faults.reshard_upto()
            else:  # started again 1 s after the promotion, as a supervisor would
                r = faults.kill(restart=True)
            t0, what = r["t0"], r["what"]
            events.append((t0, what))
            print("round %d: %s" % (n + 1, what), flush=True)
            time.sleep(4.0)
        load.stop(drain_timeout=90)
        for n, (t0, what) in enumerate(events):
            until = events[n + 1][0] if n + 1 < len(events) else None
            print("round %d: the longest a producer waited for an add to be acknowledged: "
                  "%.1f s" % (n + 1, load.outage_after(t0, until)))
        lost, dups = load.lost(), load.duplicates()
        inv = invariants.check_deployment(d)
        print("ledger: %s" % load.summary())
        print("lost %d, delivered twice within the TTR %d, invariant problems %d" %
              (len(lost), len(dups), inv["nproblems"]))
        kills = [t for t, what in events if what.startswith("kill")]
        if lost and kills:
            before = [min((t - load.acked[j] for t in kills if t >= load.acked[j]), default=None)
                      for j in lost]
            before = [b for b in before if b is not None]
            if before:
                print("loss window: the lost jobs were acknowledged %.0f to %.0f ms before a "
                      "kill" % (min(before) * 1000, max(before) * 1000))
        for j in lost[:10]:
            print("  lost %s (shard %d)" % (j, d.shard_of(j)))
        for j, ds in dups[:10]:
            print("  twice %s: %s" % (j, ds))
        for p in inv["problems"][:20]:
            print("  invariant: %s" % p)
        bad = inv["nproblems"] > 0
        if args.wait_replicas >= 1:
            bad = bad or lost or dups
        failed = bool(bad)
        print("RESULT: %s" % ("FAILED" if failed else "ok"), flush=True)
        return 1 if failed else 0
    except (DeploymentError, RuntimeError, OSError) as e:
        print("the run could not be carried out: %s" % e, file=sys.stderr)
        traceback.print_exc()
        return 2
    finally:
        dqtest.deployment.KEEP = args.keep
        d.stop(failed=failed)


if __name__ == "__main__":
    sys.exit(main())

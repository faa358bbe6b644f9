#!/usr/bin/env python3
"""The job life cycle checked against a reference model (tests/dqmodel):
first every kept regression sequence (tests/dqmodel/regressions, each a
minimal sequence the tester once found), then random sequences from a
fresh seed for a bounded time (DQMODEL_SECONDS, default 30; 15 under
valgrind or the sanitizers). The seed is printed; DQMODEL_SEED replays
one. A divergence is shrunk and printed as a sequence to keep under
regressions/. Runs on whatever Redis the deployment gets (DQTEST_REDIS)."""

import glob
import json
import os
import random
import sys
import unittest

from dqmodel import runner
from dqtest import SANITIZED, SRC_DIR, VALGRIND, DeploymentTestCase, main

REGRESSIONS = sorted(glob.glob(os.path.join(SRC_DIR, "tests", "dqmodel", "regressions", "*.json")))


class ModelTest(DeploymentTestCase):
    DEPLOYMENT_KW = dict(n_timers=1)

    def test_kept_regressions(self):
        self.assertTrue(REGRESSIONS, "no regression sequences found")
        for path in REGRESSIONS:
            with open(path) as f:
                data = json.load(f)
            name = os.path.splitext(os.path.basename(path))[0]
            with self.subTest(name):
                e = runner.replay(self.c, data["ops"], data.get("prefix", "r-" + name))
                self.assertIsNone(e, "%s: %s" % (name, e))

    def test_random_sequences(self):
        seconds = float(os.environ.get("DQMODEL_SECONDS") or (15 if VALGRIND or SANITIZED else 30))
        seed = os.environ.get("DQMODEL_SEED")
        seed = int(seed) if seed else random.SystemRandom().randrange(1 << 30)
        print("model tester: seed %d, %.0f s (DQMODEL_SEED=%d replays it)" % (seed, seconds, seed),
              file=sys.stderr, flush=True)
        found = runner.explore(self.c, seed, seconds, shrink_seconds=60,
                               say=lambda m: print(m, file=sys.stderr, flush=True))
        if found:
            e, ops, prefix = found
            self.fail("%s\nminimal sequence (keep it under tests/dqmodel/regressions/):\n%s"
                      % (e, json.dumps(runner.kept(seed, e, ops, prefix))))


if __name__ == "__main__":
    main()

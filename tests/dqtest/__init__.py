"""dqtest: what delayq's tests share, one importable package (make check
puts tests/ on PYTHONPATH; by hand: PYTHONPATH=tests python3 tests/...).

- deployment: a private delayq deployment (Redis, delayq-fcgi, timers,
  nginx) in a temp dir, and DeploymentTestCase;
- redis_server: a private redis-server, the one way tests start Redis;
- resp: a small RESP client to inspect Redis;
- httpconn: keep-alive HTTP to nginx, and raw single requests;
- procs: ports, log tails, children, signals by pid, and the registry of
  started processes that every exit path kills;
- redis_cluster / redis_sentinel: a private Cluster or Sentinel group;
- netlab: network namespaces, a bridge and iptables cuts (partitions);
- fcgi_client: one FastCGI request straight to a delayq-fcgi instance;
- ledger: a load with a client-side ledger of acknowledged jobs;
- receiver: a real HTTP receiver for callbacks;
- hostile_receiver: a receiver that hangs, resets, answers busy, with a
  ledger of every send and the checks of the push protocol against it;
- invariants: the consistency check of a deployment's Redis state;
- load: load shapes tests and benchmarks share, threads run together, a
  long-poll in the background;
- tools: the optional tools a test needs (a SKIP naming the Debian package
  when one is missing, a failure under DQTEST_REQUIRE_ALL=1).
"""

from .deployment import (BUILD_DIR, KEEP, SANITIZED, SANITIZER_MARKS, SLOW, SRC_DIR, VALGRIND,
                         Deployment, DeploymentError, DeploymentTestCase, KeepOnFailure, flags,
                         job_h_int, main, require_build, single_redis_only, stop_leftovers,
                         stop_on_sigterm, unique)
from .httpconn import Http, parse_body, raw_http
from .load import LongPoll, impatient_client, run_threads
from .procs import (children, connect_as, exit_on_signals, free_cluster_ports, free_port, kill_pid,
                    kill_started, log_time, pid_alive, read_text, rss_kb, stop_process, tail,
                    track, wait_port_closed)
from .redis_server import RedisServer, RedisStartError
from .resp import RedisError, Resp, raw_command, text

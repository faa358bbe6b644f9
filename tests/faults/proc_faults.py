"""kill -9 of delayq's own processes, each started again as a supervisor
would; shared by the fault suite (run.py) and the nemesis (nemesis.py).
Each takes the Deployment, a random.Random and expect_gone(pids, why) (the
caller checks that processes which must exit by themselves do) and returns
one line for the report. Processes are signalled by pid only."""

import time

from dqtest import kill_pid


def worker_kill9(c, rng, expect_gone):
    """One or two workers of one delayq-fcgi instance: its master replaces them."""
    i = rng.randrange(c.n_fcgi)
    _, workers = c.fcgi_pids(i)
    victims = rng.sample(workers, min(len(workers), rng.choice([1, 1, 2])))
    for w in victims:
        kill_pid(w)
    return "instance %d workers %s" % (i + 1, victims)


def master_kill9(c, rng, expect_gone):
    """An instance's master: its workers stop by themselves (PDEATHSIG); the
    master is started again on the same socket after 0.1-1 s."""
    i = rng.randrange(c.n_fcgi)
    master, workers = c.fcgi_pids(i)
    kill_pid(master)
    c.fcgis[i].wait(10)
    c.retire(i, "master%d" % master)
    expect_gone(workers, "kill -9 of their master %d" % master)
    pause = rng.uniform(0.1, 1.0)
    time.sleep(pause)
    c.start_fcgi(i)
    return "instance %d master %d (workers %s), restarted after %.2f s -> %d" % (
        i + 1, master, workers, pause, c.fcgis[i].pid)


def _kill9_restart(rng, live, procs, kill, start, pauses):
    """kill(victim) of a random one of the live indexes, start() after a
    pause drawn from `pauses`; (its pid, the pause)."""
    victim = rng.choice(live)
    pid = procs[victim].pid
    kill(victim)
    pause = rng.uniform(*pauses)
    time.sleep(pause)
    start()
    return pid, pause


def timer_kill9_of_two(c, rng, expect_gone):
    """With two timers running, one is killed and started again after 0-3 s."""
    live = c.live_timers()
    while len(live) < 2:
        c.start_timer()
        live = c.live_timers()
    pid, pause = _kill9_restart(rng, live, c.timers, c.kill_timer, c.start_timer, (0.0, 3.0))
    return "timer pid %d of %d killed, restarted after %.2f s" % (pid, len(live), pause)


def pusher_kill9(c, rng, expect_gone):
    """One delayq-push: its reservations come back after the callback
    timeout plus push_grace_ms; it is started again after 0.2-2 s."""
    live = [i for i, p in enumerate(c.pushers) if p.poll() is None]
    pid, pause = _kill9_restart(rng, live, c.pushers, c.kill_pusher, c.start_pusher, (0.2, 2.0))
    return "pusher pid %d killed, restarted after %.2f s" % (pid, pause)

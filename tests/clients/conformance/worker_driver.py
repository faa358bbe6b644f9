#!/usr/bin/env python3
"""The Python client's driver for the Worker conformance suite
(tests/clients/test_worker_conformance.py, which documents the protocol).

    worker_driver.py TOKEN BEHAVIOUR TOPIC URL [BEHAVIOUR TOPIC URL ...]

Runs a Worker (clients/python) once per triple, in order, on TOPIC at URL,
with the handler and the stop that BEHAVIOUR names, and prints one JSON
line for each: {"behaviour", "topic", "run": "returned" | "raised:<type>",
"seconds", "calls"}.
"""

import json
import sys
import threading
import time

import delayq

CLIENT_TIMEOUT = 2.0   # seconds: the suite's "timeout after the request was sent"
SAFETY_STOP = 15.0     # a worker that does not stop by itself is stopped after this


class CustomBaseException(BaseException):
    """A BaseException of the application's own, neither Exception nor an exit."""


RAISES = {
    "ValueError": lambda: ValueError("the handler failed"),
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": GeneratorExit,
    "CustomBaseException": lambda: CustomBaseException("an application's BaseException"),
}


def stop_from_another_thread(worker):
    t = threading.Thread(target=worker.stop)
    t.start()
    t.join()


def force_stop_as_pop_returns(worker):
    """Makes a stop() from another thread land as the pop has returned and
    before the worker cleared the client's interrupt: the stop sees the pop
    in progress, and its interrupt is held back until the worker cleared
    the flag (or 0.5 s passed: a worker that orders the two waits that long)."""
    client = worker.client
    real_pop, real_interrupt, real_clear = client.pop, client._interrupt, client._clear_interrupt
    entered, cleared = threading.Event(), threading.Event()

    def late_interrupt():
        entered.set()
        cleared.wait(0.5)
        real_interrupt()

    def clear():
        real_clear()
        cleared.set()

    def pop(*args, **kwargs):
        answer = real_pop(*args, **kwargs)
        job = answer[0] if isinstance(answer, tuple) else answer
        if job is not None and not entered.is_set():
            threading.Thread(target=worker.stop).start()
            entered.wait(2)
        return answer

    client.pop, client._interrupt, client._clear_interrupt = pop, late_interrupt, clear


def make_worker(behaviour, topic, url, token):
    calls = []
    client = delayq.Client(url, token=token, timeout=CLIENT_TIMEOUT)
    holder = {}

    def handler(job):
        calls.append(job.id)
        worker = holder["worker"]
        if behaviour in ("stop-in-handler", "stop-in-handler-then-raise") or \
                behaviour.startswith("raise:"):
            stop_from_another_thread(worker)
        elif behaviour == "stop-after-handler":
            threading.Timer(0.3, worker.stop).start()
        if behaviour == "stop-in-handler-then-raise":
            raise RAISES["ValueError"]()
        if behaviour.startswith("raise:"):
            raise RAISES[behaviour.split(":", 1)[1]]()

    poll = 20.0 if behaviour == "stop-during-poll" else 2.0
    worker = delayq.Worker(client, [topic], handler, backoff=[600], poll_timeout=poll,
                           handle_signals=False)
    holder["worker"] = worker
    return worker, calls


def run_one(behaviour, topic, url, token):
    worker, calls = make_worker(behaviour, topic, url, token)
    if behaviour == "stop-before-pop":
        worker.stop()
    elif behaviour == "stop-during-poll":
        threading.Timer(0.5, worker.stop).start()
    elif behaviour == "stop-as-pop-returns":
        force_stop_as_pop_returns(worker)
    safety = threading.Timer(SAFETY_STOP, worker.stop)
    safety.start()
    t0 = time.monotonic()
    try:
        worker.run()
        run = "returned"
    except BaseException as e:  # noqa: BLE001 - what run() raised is the result
        run = "raised:" + type(e).__name__
    finally:
        safety.cancel()
        worker.client.close()
    return {"behaviour": behaviour, "topic": topic, "run": run,
            "seconds": round(time.monotonic() - t0, 3), "calls": len(calls)}


def main(argv):
    token = argv[1] if argv[1] != "-" else None
    specs = argv[2:]
    for i in range(0, len(specs), 3):
        behaviour, topic, url = specs[i:i + 3]
        print(json.dumps(run_one(behaviour, topic, url, token)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""A delayq consumer that delivers notifications and retries failures on a
stepped schedule.

Each job of topic `notify` is one notification to send over HTTP. When the
send fails, the job goes back to delayq with the next delay of the schedule
(15 s, 3 min, 10 min, 30 min, 1 h by default); when the last try fails too,
the job is buried for a person to look at (`kick` retries it). SIGTERM or
Ctrl-C stops the consumer after the notification in hand.

The HTTP call is simulated so that the example runs anywhere; the job body
decides how it goes:

    {"to": "ops@example.com", "message": "disk full"}    delivered at once
    {"to": "...", "fail_times": 2}      attempts 1 and 2 fail (HTTP 503), 3 succeeds
    {"to": "...", "fail_rate": 0.5}     each attempt fails with probability 0.5

A body that is a plain string is a message delivered at once. Replace
send_notification() with a real call (urllib.request, requests, ...).

Usage: retry_consumer.py [--url URL] [--backoff 15,180,600,1800,3600]
                         [--topic notify] [--max-attempts N] [--poll-timeout S]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
from typing import Any, List, Optional

try:
    import delayq
except ImportError:  # not installed: use the client next to this example
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "clients", "python"))
    import delayq

log = logging.getLogger("retry_consumer")


class NotificationFailed(Exception):
    """The notification endpoint refused or did not answer: try again later."""


def send_notification(job: delayq.Job) -> None:
    """Sends the notification of one job (simulated), or raises
    NotificationFailed. The job id goes along as an idempotency key: delayq
    delivers at least once, so a receiver may see a notification twice (if
    this process dies between sending and finishing) and should drop
    repeats by that key."""
    body: Any = job.body
    if not isinstance(body, dict):
        body = {"message": body}
    endpoint = body.get("url", "https://hooks.example.com/notify")
    log.info("job %s attempt %d: POST %s (Idempotency-Key: %s)", job.id, job.attempts,
             endpoint, job.id)
    fail_times = body.get("fail_times", 0)
    fail_rate = body.get("fail_rate", 0.0)
    if job.attempts <= fail_times or random.random() < fail_rate:
        raise NotificationFailed("simulated HTTP 503 from %s" % endpoint)
    log.info("job %s delivered on attempt %d", job.id, job.attempts)


def parse_backoff(text: str) -> List[float]:
    try:
        steps = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("--backoff takes seconds separated by commas, "
                                         "e.g. 15,180,600")
    if not steps or any(s < 0 for s in steps):
        raise argparse.ArgumentTypeError("--backoff needs at least one step, none negative")
    return steps


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Deliver the notifications of a delayq topic, "
                                 "retrying failures on a stepped schedule.")
    ap.add_argument("--url", default=None,
                    help="delayq's URL (default: $DELAYQ_URL, else http://127.0.0.1:8080)")
    ap.add_argument("--token", default=None,
                    help="bearer token when delayq has auth on (default: $DELAYQ_TOKEN)")
    ap.add_argument("--topic", default="notify", help="topic to consume (default: notify)")
    ap.add_argument("--backoff", type=parse_backoff, default=parse_backoff("15,180,600,1800,3600"),
                    help="seconds before each retry, comma-separated (default: "
                    "15,180,600,1800,3600, i.e. 15 s, 3 min, 10 min, 30 min, 1 h)")
    ap.add_argument("--max-attempts", type=int, default=None,
                    help="bury a job after this many failed attempts (default: one more "
                    "than the backoff steps; 0: never bury, repeat the last step)")
    ap.add_argument("--poll-timeout", type=float, default=20.0,
                    help="seconds one long-poll waits for a job (default: 20)")
    ap.add_argument("-q", "--quiet", action="store_true", help="log only failures")
    args = ap.parse_args(argv)

    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stdout)
    max_attempts = args.max_attempts
    if max_attempts is None:
        max_attempts = len(args.backoff) + 1
    client = delayq.Client(args.url, token=args.token)
    worker = delayq.Worker(client, args.topic, send_notification, backoff=args.backoff,
                           poll_timeout=args.poll_timeout,
                           max_attempts=max_attempts or None)
    log.info("consuming %r from %s; retries after %s s; %s", args.topic, client.url,
             ", ".join("%g" % s for s in args.backoff),
             "bury after %d attempts" % max_attempts if max_attempts else "never bury")
    try:
        worker.run()  # returns after SIGTERM / Ctrl-C
    except delayq.ClientError as e:
        log.error("delayq refused to serve us: %s", e)
        return 2
    finally:
        client.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

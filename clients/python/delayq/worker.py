"""A consumer loop: long-poll, handle, finish; release with a stepped
backoff when the handler fails; stop cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .client import Client, Job, Topics, _Interrupted
from .errors import ClientError, Conflict, DelayqError, NotFound, ServerError

__all__ = ["Worker", "DEFAULT_BACKOFF"]

#: Seconds before the 2nd, 3rd, 4th, 5th (and every later) delivery.
DEFAULT_BACKOFF = (15.0, 180.0, 600.0, 1800.0)

Handler = Callable[[Job], Any]


class Worker:
    """Runs `handler(job)` for every job of `topics`.

    - The handler returns: the job is finished.
    - The handler raises: the job is released, due again after the backoff
      step for its attempt (`backoff[job.attempts - 1]`, the last step
      repeating), or buried once `max_attempts` deliveries have failed.
    - SIGTERM or SIGINT (handlers installed by run() when it runs in the main
      thread), or stop() from any thread: the job being handled is finished
      or released as usual, then run() returns. A long-poll in progress is
      cut short; a job the server still reserves for it (until the poll's
      own timeout would have ended) is delivered again after its TTR
      (at-least-once).
    - 5xx answers and connection failures while polling are logged and
      retried after `error_pause` seconds (doubling up to 30 s); a 4xx while
      polling (bad topic, token refused) is raised from run().

    The worker owns the client's connection while it runs: do not share that
    Client with other threads.
    """

    def __init__(self, client: Client, topics: Topics, handler: Handler,
                 backoff: Sequence[float] = DEFAULT_BACKOFF, poll_timeout: float = 20.0,
                 max_attempts: Optional[int] = None, handle_signals: bool = True,
                 error_pause: float = 1.0, logger: Optional[logging.Logger] = None) -> None:
        if not 0 <= poll_timeout <= 60:
            raise ValueError("poll_timeout must be 0..60 seconds")
        if any(step < 0 for step in backoff):
            raise ValueError("backoff steps must be >= 0")
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.client = client
        self.topics = topics
        self.handler = handler
        self.backoff = [float(step) for step in backoff]
        self.poll_timeout = poll_timeout
        self.max_attempts = max_attempts
        self.handle_signals = handle_signals
        self.error_pause = error_pause
        self.log = logger or logging.getLogger("delayq.worker")
        self._stopping = False
        self._polling = False
        self._pause = error_pause

    # ------------------------------------------------------------ control

    @property
    def stopping(self) -> bool:
        """True once stop() was called or a stop signal arrived."""
        return self._stopping

    def stop(self) -> None:
        """Asks run() to return after the job in hand (safe from any thread
        and from a signal handler)."""
        self._stopping = True
        if self._polling:
            self.client._interrupt()

    def backoff_for(self, attempts: int) -> float:
        """Seconds to wait before the next delivery of a job that failed on
        delivery number `attempts` (1 = first)."""
        if not self.backoff:
            return 0.0
        return self.backoff[min(max(attempts, 1), len(self.backoff)) - 1]

    # ------------------------------------------------------------ loop

    def run(self) -> None:
        """Handles jobs until stop() or SIGTERM/SIGINT."""
        restore = self._install_signals()
        try:
            self.log.info("worker started on %s", self.topics)
            while not self._stopping:
                self.run_once()
            self.log.info("worker stopped")
        finally:
            for sig, old in restore:
                signal.signal(sig, old)

    def run_once(self) -> bool:
        """One long-poll (up to poll_timeout seconds) and, if it brought a
        job, its handling. Returns True when a job was handled."""
        try:
            job = self._poll()
        except ServerError as e:
            self.log.warning("pop failed: %s; trying again in %.1f s", e, self._pause)
            self._sleep(self._pause)
            self._pause = min(max(self._pause, 0.1) * 2, 30.0)
            return False
        self._pause = self.error_pause
        if job is None:
            return False
        self.handle(job)
        return True

    def handle(self, job: Job) -> None:
        """Runs the handler on a reserved job, then finishes, releases or
        buries it."""
        try:
            self.handler(job)
        except Exception as e:  # noqa: BLE001 - any handler failure means "retry later"
            self._failed(job, e)
            return
        try:
            self.client.finish(job.id)
            self.log.debug("job %s finished (attempt %d)", job.id, job.attempts)
        except NotFound:
            self.log.warning("job %s was gone before it could be finished (deleted, or "
                             "its TTR of %s s had passed and another delivery finished it)",
                             job.id, job.ttr)
        except ClientError:
            raise
        except DelayqError as e:
            self.log.error("finishing job %s failed: %s; it will be delivered again after "
                           "its TTR", job.id, e)

    # ------------------------------------------------------------ internals

    def _poll(self) -> Optional[Job]:
        # stop() and the signal handlers check _polling after setting
        # _stopping; here _polling is set before _stopping is checked and
        # cleared before the interrupt flag, so a stop either prevents the
        # pop, cuts it short, or comes after it and touches nothing else.
        self._polling = True
        try:
            if self._stopping:
                return None
            try:
                return self.client.pop(self.topics, timeout=self.poll_timeout)
            except _Interrupted:
                return None
        finally:
            self._polling = False
            self.client._clear_interrupt()

    def _failed(self, job: Job, exc: Exception) -> None:
        what = "%s: %s" % (type(exc).__name__, exc)
        try:
            if self.max_attempts is not None and job.attempts >= self.max_attempts:
                self.client.bury(job.id)
                self.log.error("job %s failed on attempt %d (%s); buried after %d attempts",
                               job.id, job.attempts, what, job.attempts)
                return
            delay = self.backoff_for(job.attempts)
            state = self.client.release(job.id, delay=delay)
            if state == "buried":
                self.log.error("job %s failed on attempt %d (%s); buried: its retries are "
                               "used up", job.id, job.attempts, what)
            else:
                self.log.warning("job %s failed on attempt %d (%s); retry in %g s",
                                 job.id, job.attempts, what, delay)
        except (Conflict, NotFound):
            self.log.warning("job %s failed on attempt %d (%s) and was no longer reserved "
                             "(its TTR of %s s passed, or it was deleted)", job.id,
                             job.attempts, what, job.ttr)
        except ClientError:
            raise
        except DelayqError as e:
            self.log.error("job %s failed on attempt %d (%s); giving it back failed too (%s): "
                           "it will be delivered again after its TTR", job.id, job.attempts,
                           what, e)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stopping:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def _install_signals(self) -> List[Tuple[int, Any]]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        restore: List[Tuple[int, Any]] = []

        def on_signal(signum: int, frame: Any) -> None:
            if self._stopping and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: give up at once
            self.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            restore.append((sig, signal.signal(sig, on_signal)))
        return restore

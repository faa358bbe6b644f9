"""A consumer loop: long-poll, handle, finish (on the next long-poll:
finish-and-pop); release with a stepped backoff when the handler fails; stop
cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .client import MAX_IDS, Client, Job, Result, Topics, _Interrupted
from .errors import (BadRequest, ClientError, Conflict, DelayqError, NotFound, ServerError,
                     Unavailable)

__all__ = ["Worker", "DEFAULT_BACKOFF"]

#: Seconds before the 2nd, 3rd, 4th, 5th (and every later) delivery.
DEFAULT_BACKOFF = (15.0, 180.0, 600.0, 1800.0)

Handler = Callable[[Job], Any]


class Worker:
    """Runs `handler(job)` for every job of `topics`.

    - The handler returns: the job is finished. In run(), that finish rides
      on the next long-poll (pop's `finish`: one request per job, not two);
      when run() returns, a finish still pending is sent on its own first.
      A server without finish-and-pop (it answers 400 naming 'finish') gets
      a separate finish per job instead, after one warning.
    - The handler raises: the job is released, due again after the backoff
      step for its attempt (`backoff[job.attempts - 1]`, the last step
      repeating), or buried once `max_attempts` deliveries have failed. A
      BaseException that is not an Exception (KeyboardInterrupt,
      SystemExit) releases the job the same way, then stops the worker:
      run() sends the pending finishes and raises it again.
    - SIGTERM or SIGINT (handlers installed by run() when it runs in the main
      thread), or stop() from any thread: the job being handled is finished
      or released as usual, then run() returns. A long-poll in progress is
      cut short; a job the server still reserves for it (until the poll's
      own timeout would have ended) is delivered again after its TTR
      (at-least-once).
    - 5xx answers and connection failures while polling are logged and
      retried after `error_pause` seconds (doubling up to 30 s), carrying
      the pending finish again (after a 504 a repeated finish may answer
      not_found: harmless, logged at debug level); a 4xx while polling (bad
      topic, token refused) is raised from run(), after the pending finish
      was sent.

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
        # Orders stop() against the end of a pop: a stop that saw the pop
        # in progress interrupts it before the interrupt flag is cleared,
        # never after (where it would cut the next request short). Reentrant:
        # stop() also runs from a signal handler on the polling thread.
        self._poll_lock = threading.RLock()
        self._pause = error_pause
        # Jobs handled and not yet finished, by id, in order: their finish
        # rides on the next pop. The flag says a request that may have
        # finished the job already went out (a 504, a lost connection), so
        # a not_found for it is no news.
        self._pending: Dict[str, Tuple[Job, bool]] = {}
        # False once the server refused `finish` on pop (an older server).
        self._carry = True

    # ------------------------------------------------------------ control

    @property
    def stopping(self) -> bool:
        """True once stop() was called or a stop signal arrived."""
        return self._stopping

    def stop(self) -> None:
        """Asks run() to return after the job in hand (safe from any thread
        and from a signal handler)."""
        with self._poll_lock:
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
            try:
                while not self._stopping:
                    self._step()
            except BaseException:
                self._flush()
                raise
            self._flush()
            self.log.info("worker stopped")
        finally:
            for sig, old in restore:
                signal.signal(sig, old)

    def run_once(self) -> bool:
        """One long-poll (up to poll_timeout seconds) and, if it brought a
        job, its handling; a job the handler completed is finished before
        this returns (a request of its own: finish-and-pop needs a next
        pop, which only run() makes). Returns True when a job was handled."""
        try:
            handled = self._step()
        except BaseException:
            self._flush()
            raise
        self._flush()
        return handled

    def handle(self, job: Job) -> None:
        """Runs the handler on a reserved job, then finishes, releases or
        buries it, each with a request of its own."""
        self._handle(job, carry=False)

    def _step(self) -> bool:
        """One long-poll, carrying the pending finishes, and the handling of
        the job it brought; a completed job's finish is left pending."""
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
        self._handle(job, carry=self._carry)
        return True

    def _handle(self, job: Job, carry: bool) -> None:
        try:
            self.handler(job)
        except Exception as e:  # noqa: BLE001 - any handler failure means "retry later"
            self._failed(job, e)
            return
        except BaseException as e:
            # KeyboardInterrupt, SystemExit, GeneratorExit: the job is given
            # back all the same, then the worker stops (run() sends the
            # pending finishes and raises it again).
            self._failed(job, e)
            self._stopping = True
            raise
        if carry:
            self._pending[job.id] = (job, False)
        else:
            self._finish(job, False)

    # ------------------------------------------------------------ internals

    def _poll(self) -> Optional[Job]:
        # stop() sets _stopping and checks _polling under _poll_lock; here
        # _stopping is checked and _polling set under it, and _polling
        # cleared with the interrupt flag under it: a stop either prevents
        # the pop, cuts it short, or comes after it and touches nothing else.
        carried = list(self._pending)[:MAX_IDS] if self._carry else []
        finished: List[Result] = []
        refused: Optional[BadRequest] = None
        with self._poll_lock:
            if self._stopping:
                return None
            self._polling = True
        try:
            try:
                if carried:
                    job, finished = self.client.pop(self.topics, timeout=self.poll_timeout,
                                                    finish=carried)
                else:
                    job = self.client.pop(self.topics, timeout=self.poll_timeout)
            except _Interrupted:
                self._maybe_finished(carried)
                return None
            except Unavailable:
                raise  # nothing was done: carried again as it is
            except ServerError:
                self._maybe_finished(carried)  # a 504, a lost connection: unknown
                raise
            except BadRequest as e:
                if not carried or "'finish'" not in e.message:
                    raise
                refused = e
                job = None
        finally:
            with self._poll_lock:
                self._polling = False
                self.client._clear_interrupt()
        if refused is not None:
            self.log.warning("the server does not take finish on pop (%s); finishing each job "
                             "with a request of its own", refused.message)
            self._carry = False
            self._flush()
            return None
        self._settle(carried, finished)
        return job

    def _maybe_finished(self, ids: List[str]) -> None:
        for id in ids:
            job, _ = self._pending[id]
            self._pending[id] = (job, True)

    def _settle(self, carried: List[str], finished: List[Result]) -> None:
        """Takes the `finished` outcomes of a pop that carried `carried`."""
        outcome = {r.id: r for r in finished}
        for id in carried:
            job, maybe_done = self._pending[id]
            r = outcome.get(id)
            if r is not None and r.code in ("unavailable", "timeout"):
                # That id's shard failed (several shards): carried again.
                self._pending[id] = (job, maybe_done or r.code == "timeout")
                self.log.warning("finishing job %s failed: %s; trying again with the next "
                                 "pop", id, r.exception())
                continue
            del self._pending[id]
            if r is None:
                self.log.error("the server did not say whether job %s was finished; it will "
                               "be delivered again after its TTR if it was not", id)
            elif r.success:
                self.log.debug("job %s finished (attempt %d)", id, job.attempts)
            elif r.code == "not_found":
                self._gone(job, maybe_done)
            else:
                self.log.error("finishing job %s failed: %s; it will be delivered again after "
                               "its TTR", id, r.exception())

    def _flush(self) -> None:
        """Sends the pending finishes, each with a request of its own."""
        while self._pending:
            id = next(iter(self._pending))
            job, maybe_done = self._pending.pop(id)
            try:
                self._finish(job, maybe_done)
            except ClientError as e:
                self.log.error("finishing job %s failed: %s; it will be delivered again after "
                               "its TTR", id, e)

    def _finish(self, job: Job, maybe_done: bool) -> None:
        try:
            self.client.finish(job.id)
            self.log.debug("job %s finished (attempt %d)", job.id, job.attempts)
        except NotFound:
            self._gone(job, maybe_done)
        except ClientError:
            raise
        except DelayqError as e:
            self.log.error("finishing job %s failed: %s; it will be delivered again after "
                           "its TTR", job.id, e)

    def _gone(self, job: Job, maybe_done: bool) -> None:
        if maybe_done:
            self.log.debug("job %s was finished already (by a request whose answer was lost)",
                           job.id)
            return
        self.log.warning("job %s was gone before it could be finished (deleted, or "
                         "its TTR of %s s had passed and another delivery finished it)",
                         job.id, job.ttr)

    def _failed(self, job: Job, exc: BaseException) -> None:
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

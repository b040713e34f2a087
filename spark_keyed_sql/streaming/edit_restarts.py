"""Queued DELETE / UPDATE requests for a query whose engine cannot apply them between its own
batches (``tws``: Spark runs the batches, and its state stores stay loaded on the executors):
the query ``ks.start`` started is stopped at a batch boundary, the requests are applied under
its lease (``engines/edit_pickup.py``), and the query is started again on the same checkpoint.
The user's StreamingQuery handle follows it: its JVM query is swapped for the new one, and its
``awaitTermination`` and ``stop`` span the restart (a thread waiting on it keeps waiting), and its
``isActive`` stays True through it. The restarted query goes on from the last committed batch,
exactly once, as after any restart.

A ``ks.run`` of such an engine applies what is queued when it takes the lease and again when its
run has ended (``apply_queued``). Through Spark Connect the edit cannot be applied from the
client (Spark's state rewriter is a JVM class): a queued request is answered with that error and
the query is left running."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from ..engines import StreamRun
from ..engines.base import StateLayout
from ..engines.edit_pickup import apply_pending
from ..runtime.connect import is_connect
from ..runtime.spec import FunctionSpec
from ..sql.errors import KeyedQueryError
from ..state.edit_queue import EditAnswer, EditQueue, EditRequest
from ..state.filesystems import filesystem
from ..state.fs import join
from ..state.lock import CheckpointLock

__all__ = ["EditRestarts", "apply_queued"]

log = logging.getLogger(__name__)


def apply_queued(
    spark: SparkSession,
    checkpoint: str,
    layout: StateLayout,
    engine: str,
    spec_of: Callable[[str], FunctionSpec | None],
    lock: CheckpointLock | None,
) -> int:
    """The checkpoint's queued edits applied now (the caller holds the lease, no query runs
    on it); on Connect answered with why they cannot be. Returns how many were answered."""
    if is_connect(spark):
        return _refuse_on_connect(spark, checkpoint, engine)
    return apply_pending(spark, checkpoint, layout, engine, spec_of, still_mine=lambda: lock is None or not lock.lost)


def _refuse_on_connect(spark: SparkSession, checkpoint: str, engine: str) -> int:
    queue = EditQueue(checkpoint, spark)
    pending = queue.pending()
    why = (
        f"engine '{engine}' cannot apply it through Spark Connect (Spark's state rewriter is a JVM class the client "
        "cannot reach): run the edit from a classic session"
    )
    _answer_all(queue, pending, checkpoint, why)
    return len(pending)


class EditRestarts:
    """Watches the checkpoint's edit queue beside a running query and restarts the query around
    each set of queued requests (see the module's docstring). ``refused``: why this query cannot
    be restarted (e.g. a ``memory`` sink, which Spark does not recover from a checkpoint): its
    queued requests are answered with that instead."""

    LOOK_S = 1.0  # how often the queue is looked at
    QUIET_S = 10.0  # how long a running trigger is given to end before the query is stopped in it
    BUSY_TRIES = 3  # restarts that found a batch cut short (never a pause between batches): then refused

    def __init__(
        self,
        spark: SparkSession,
        run: StreamRun,
        checkpoint: str,
        lock: CheckpointLock | None,
        layout: StateLayout,
        engine: str,
        spec_of: Callable[[str], FunctionSpec | None],
        relaunch: Callable[[], StreamRun],
        refused: str | None = None,
    ):
        self.spark, self.run, self.checkpoint, self.lock = spark, run, checkpoint, lock
        self.layout, self.engine, self.spec_of, self.relaunch = layout, engine, spec_of, relaunch
        self.refused = refused or (
            f"the query holding it runs engine '{engine}' through Spark Connect, where the edit cannot be applied "
            "(Spark's state rewriter is a JVM class the client cannot reach): stop the query, then run the edit "
            "from a classic session"
            if is_connect(spark)
            else None
        )
        self.handle = run.query
        self.cond = threading.Condition()
        self.swapping = False
        self.generation = 0  # restarts done
        self.user_stopped = False
        self.ended = False  # the query ended during a restart (failed, or its lease went): not started again
        self.failure: BaseException | None = None
        self._tried: set[str] = set()  # requests whose application raised: not restarted for again
        self._busy = 0
        # the handle's own methods (the translating class's: our errors), called across restarts
        self._base_await = self.handle.awaitTermination
        self._base_stop = self.handle.stop
        self._base_process = self.handle.processAllAvailable
        self.handle.awaitTermination = self._await  # type: ignore[method-assign]
        self.handle.stop = self._stop  # type: ignore[method-assign]
        self.handle.processAllAvailable = self._process_all  # type: ignore[method-assign]
        # its isActive (the translating class's, streaming/failures.py) is True while a restart runs
        self.handle._ks_restarting = self._restarting  # type: ignore[attr-defined]
        run.edit_restarts = self  # type: ignore[attr-defined]  # (queries._lock: a restarting query is held)
        self._thread = threading.Thread(target=self._watch, name="spark-keyed-sql edit restarts", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the user's handle
    def _settled(self) -> tuple[int, bool]:
        """(restarts done, the query goes on) once no restart runs."""
        with self.cond:
            while self.swapping:
                self.cond.wait()
            if self.failure is not None:
                raise self.failure
            return self.generation, not (self.user_stopped or self.ended)

    def _await(self, timeout: float | None = None) -> Any:
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            return self._base_await(timeout)  # (pyspark's own error for a timeout it refuses)
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            generation = self.generation
            error: BaseException | None = None
            result = None
            try:
                if deadline is None:
                    result = self._base_await()
                else:
                    result = self._base_await(max(0.001, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001 - raised below unless a restart replaced the query
                error = exc
            now, goes_on = self._settled()
            if now == generation or not goes_on:
                if error is not None:
                    raise error
                return result
            if deadline is not None and time.monotonic() >= deadline:
                return not self.handle.isActive

    def _stop(self) -> None:
        with self.cond:
            self.user_stopped = True
            while self.swapping:  # a restart under way ends first (it starts no query now)
                self.cond.wait()
        self._base_stop()

    def _process_all(self) -> None:
        while True:  # again on the restarted query when a restart cut this one short
            generation, goes_on = self._settled()
            self._base_process()
            now, goes_on = self._settled()
            if now == generation or not goes_on:
                return

    def _restarting(self) -> bool:
        """Is a restart under way that is to start the query again?"""
        return self.swapping and not (self.user_stopped or self.ended) and self.failure is None

    def held(self) -> bool:
        """Is the query running or being restarted (its checkpoint still its own)?"""
        with self.cond:
            if self.swapping:
                return True
            return bool(self.handle.isActive)

    def _lease_lost(self) -> bool:
        """The lease went (taken over, or not renewed): the query ends with that as its failure."""
        if self.lock is None or not self.lock.lost:
            return False
        self.failure = self.lock.failure or KeyedQueryError(
            f"the query on checkpoint {self.checkpoint!r} lost the checkpoint's lease while it applied queued edits"
        )
        return True

    # ------------------------------------------------------------------ the watcher
    def _watch(self) -> None:
        queue = EditQueue(self.checkpoint, self.spark)
        while True:
            time.sleep(self.LOOK_S)
            with self.cond:
                if self.user_stopped or self.ended:
                    return
            try:
                active = self.handle.isActive
            except Exception:  # noqa: BLE001 - the session gone: nothing to watch
                return
            if not active or (self.lock is not None and self.lock.lost):
                return
            try:
                pending = [r for r in queue.pending() if r.id not in self._tried]
            except Exception:  # noqa: BLE001 - a listing that failed: looked at again next time
                log.debug("checkpoint %s: edit queue not readable now", self.checkpoint, exc_info=True)
                continue
            if not pending:
                continue
            if self.refused is not None:
                _answer_all(queue, pending, self.checkpoint, self.refused)
                continue
            if not self._restart(pending):
                return

    def _quiet(self) -> None:
        """Until the running trigger (if any) has ended, at most QUIET_S."""
        until = time.monotonic() + self.QUIET_S
        while time.monotonic() < until and not self.user_stopped:
            try:
                if not self.handle.status.get("isTriggerActive"):
                    return
            except Exception:  # noqa: BLE001 - no status: stopped as it is
                return
            time.sleep(0.05)

    def _cut_short(self) -> bool:
        """Did the stop cut a batch short (started in the offset log, not committed)?"""
        fs = filesystem(self.spark)

        def last(d: str) -> int:
            path = join(self.checkpoint, d)
            names = [int(f) for f in fs.list(path) if f.isdigit()] if fs.exists(path) else []
            return max(names, default=-1)

        return last("offsets") > last("commits")

    def _restart(self, pending: list[EditRequest]) -> bool:
        """Stop, apply, start again; False when the query is not to go on."""
        with self.cond:
            if self.user_stopped:
                return False
            self.swapping = True
        try:
            self._quiet()
            with self.cond:
                if self.user_stopped:  # stopped meanwhile: its own stop ends it, nothing applied
                    return False
            log.info(
                "checkpoint %s: %d queued edit request(s); the query stops at this batch boundary to apply them",
                self.checkpoint,
                len(pending),
            )
            self._base_stop()
            if self.handle.exception() is not None or self._lease_lost():
                self.ended = True  # failed on its own (or lost its lease) before the stop: it stays ended
                return False
            if self._cut_short():  # stopped inside a batch: started again to finish it, the edit left queued
                self._busy += 1
                if self._busy >= self.BUSY_TRIES:
                    self._busy = 0
                    _answer_all(
                        EditQueue(self.checkpoint, self.spark),
                        pending,
                        self.checkpoint,
                        f"the query holding it (engine '{self.engine}') was stopped {self.BUSY_TRIES} times to apply "
                        f"it and each time was inside a batch (no pause between its batches within {self.QUIET_S:g} "
                        "s): give it a processing-time trigger that leaves idle time, or stop it, and run the edit "
                        "again",
                    )
                log.info(
                    "checkpoint %s: the stop cut a batch short; the query goes on, the edit stays queued",
                    self.checkpoint,
                )
            else:
                self._busy = 0
                try:
                    apply_queued(self.spark, self.checkpoint, self.layout, self.engine, self.spec_of, self.lock)
                except Exception:  # noqa: BLE001 - left pending for the lease's next holder; the query goes on
                    log.warning("checkpoint %s: applying queued edits failed", self.checkpoint, exc_info=True)
                    self._tried.update(r.id for r in pending)
            if self.user_stopped or self._lease_lost():
                self.ended = True
                return False
            fresh = self.relaunch()
            self.handle._jsq = fresh.query._jsq  # type: ignore[attr-defined]
            if self.user_stopped or self._lease_lost():  # stopped (or the lease went) while it started
                self._base_stop()  # before anyone waiting is let go (and the lease released)
                self.ended = True
                return False
            log.info("checkpoint %s: the query started again", self.checkpoint)
            return True
        except BaseException as exc:  # noqa: BLE001 - the query cannot go on: its handle says why
            self.ended = True
            self.failure = KeyedQueryError(
                f"the query on checkpoint {self.checkpoint!r} was stopped to apply queued edits and could not start "
                f"again: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}; start it again with "
                "ks.start (its state and the edits are committed)"
            )
            return False
        finally:
            with self.cond:
                self.swapping = False
                self.generation += 1
                self.cond.notify_all()


def _answer_all(queue: EditQueue, pending: list[EditRequest], checkpoint: str, why: str) -> None:
    """Each of ``pending`` answered with the error ``why`` (nothing was written)."""
    for request in pending:
        queue.answer_with(
            request, EditAnswer(None, f"{request.verb} of keyed state on checkpoint {checkpoint!r}: {why}")
        )

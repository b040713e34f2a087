"""Queued DELETE / UPDATE requests for a query whose engine cannot apply them between its own
batches (``tws``: Spark runs the batches, and its state stores stay loaded on the executors):
the query ``ks.start`` started is stopped at a batch boundary, the requests are applied under
its lease (``engines/edit_pickup.py``), and the query is started again on the same checkpoint.
The user's StreamingQuery handle follows it: its JVM query is swapped for the new one, and its
``awaitTermination`` and ``stop`` span the restart (a thread waiting on it keeps waiting). The
restarted query goes on from the last committed batch, exactly once, as after any restart.

A ``ks.run`` of such an engine applies what is queued when it takes the lease and again when its
run has ended (``apply_queued``). Through Spark Connect the edit cannot be applied from the
client (Spark's state rewriter is a JVM class): a queued request is answered with that error and
the query is left running."""

from __future__ import annotations

import functools
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
from ..state.edit_queue import EditAnswer, EditQueue
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
    for request in pending:
        queue.answer_with(
            request,
            EditAnswer(
                None,
                f"{request.verb} of keyed state on checkpoint {checkpoint!r}: the query holding it runs engine "
                f"'{engine}' through Spark Connect, where the edit cannot be applied (Spark's state rewriter is a "
                f"JVM class the client cannot reach): stop the query, then run the {request.verb} from a classic "
                "session",
            ),
        )
    return len(pending)


class EditRestarts:
    """Watches the checkpoint's edit queue beside a running query and restarts the query around
    each set of queued requests (see the module's docstring)."""

    LOOK_S = 1.0  # how often the queue is looked at
    QUIET_S = 10.0  # how long a running trigger is given to end before the query is stopped in it

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
    ):
        self.spark, self.run, self.checkpoint, self.lock = spark, run, checkpoint, lock
        self.layout, self.engine, self.spec_of, self.relaunch = layout, engine, spec_of, relaunch
        self.handle = run.query
        self.cond = threading.Condition()
        self.swapping = False
        self.generation = 0  # restarts done
        self.user_stopped = False
        self.failure: BaseException | None = None
        self._tried: set[str] = set()  # requests whose application raised: not restarted for again
        base = type(self.handle)
        self._base_await = base.awaitTermination
        self._base_stop = base.stop
        self.handle.awaitTermination = functools.partial(self._await)  # type: ignore[method-assign]
        self.handle.stop = functools.partial(self._stop)  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._watch, name="spark-keyed-sql edit restarts", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the user's handle
    def _await(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            generation = self.generation
            if deadline is None:
                result = self._base_await(self.handle)
            else:
                result = self._base_await(self.handle, max(0.0, deadline - time.monotonic()))
            with self.cond:
                while self.swapping:
                    self.cond.wait()
                if self.failure is not None:
                    raise self.failure
                restarted = self.generation != generation and not self.user_stopped
            if not restarted:
                return result
            if deadline is not None and time.monotonic() >= deadline:
                return not self.handle.isActive

    def _stop(self) -> None:
        with self.cond:
            self.user_stopped = True
        self._base_stop(self.handle)

    # ------------------------------------------------------------------ the watcher
    def _active(self) -> bool:
        try:
            return bool(self.handle._jsq.isActive())  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the JVM gone: nothing to watch
            return False

    def _watch(self) -> None:
        queue = EditQueue(self.checkpoint, self.spark)
        while True:
            time.sleep(self.LOOK_S)
            with self.cond:
                if self.user_stopped:
                    return
            if not self._active() or (self.lock is not None and self.lock.lost):
                return
            try:
                pending = [r for r in queue.pending() if r.id not in self._tried]
            except Exception:  # noqa: BLE001 - a listing that failed: looked at again next time
                log.debug("checkpoint %s: edit queue not readable now", self.checkpoint, exc_info=True)
                continue
            if not pending:
                continue
            if is_connect(self.spark):
                _refuse_on_connect(self.spark, self.checkpoint, self.engine)
                continue
            if not self._restart([r.id for r in pending]):
                return

    def _quiet(self) -> None:
        """Until the running trigger (if any) has ended, at most QUIET_S."""
        until = time.monotonic() + self.QUIET_S
        while time.monotonic() < until:
            try:
                if not self.handle.status.get("isTriggerActive"):
                    return
            except Exception:  # noqa: BLE001 - no status: stopped as it is
                return
            time.sleep(0.05)

    def _restart(self, ids: list[str]) -> bool:
        """Stop, apply, start again; False when the query is not to go on."""
        with self.cond:
            self.swapping = True
        try:
            self._quiet()
            log.info(
                "checkpoint %s: %d queued edit request(s); the query stops at this batch boundary to apply them",
                self.checkpoint,
                len(ids),
            )
            self._base_stop(self.handle)
            try:
                apply_queued(self.spark, self.checkpoint, self.layout, self.engine, self.spec_of, self.lock)
            except Exception:  # noqa: BLE001 - left pending for the lease's next holder; the query goes on
                log.warning("checkpoint %s: applying queued edits failed", self.checkpoint, exc_info=True)
                self._tried.update(ids)
            with self.cond:
                if self.user_stopped or (self.lock is not None and self.lock.lost):
                    return False
            fresh = self.relaunch()
            self.handle._jsq = fresh.query._jsq  # type: ignore[attr-defined]
            log.info("checkpoint %s: the query started again after the edits", self.checkpoint)
            return True
        except BaseException as exc:  # noqa: BLE001 - the query cannot go on: its handle says why
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

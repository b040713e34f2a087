"""A bulk stream started from a Spark Connect client: its ``foreachBatch`` function runs on the
server (``ServerStep``), built there from plain values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ...runtime.connect import session_by_id
from ...runtime.plan import KeyedPlan
from ...state.lock import lock_holder
from .step import BulkStream

__all__ = ["ServerStep", "StepArgs"]


@dataclass(frozen=True)
class StepArgs:
    """What a :class:`BulkStream` is built from on the server (pickled to it: plain values)."""

    plan: KeyedPlan
    source_schema: T.StructType
    checkpoint: str
    sink: str
    finish: Callable[[DataFrame], DataFrame]
    function: str
    native: Any = None  # the step planned as Spark SQL (plain strings)

    @classmethod
    def of(cls, stream: BulkStream) -> StepArgs:
        return cls(
            stream.shipped,
            stream.source_schema,
            stream.checkpoint,
            stream.sink,
            stream.finish,
            stream.function,
            stream.native,
        )


class ServerStep:
    """The ``foreachBatch`` function of a bulk stream started from a Spark Connect client.

    Connect runs ``foreachBatch`` in a Python worker on the server, itself a Connect client of
    the query's session: this object is pickled there and builds its :class:`BulkStream` on the
    first batch, from plain values (no session, no lock, no thread travels). The commit protocol
    is the same, with file I/O through ``ConnectFS``. The timer pump runs beside the steps in
    that worker (one process: the step lock holds), and so does the look for queued edits, each
    only while the lease the query's batches run under is the checkpoint's (the worker may
    outlive its query); a pump that keeps failing fails the query at its next batch. A memory
    sink's view is registered in the client's own session."""

    def __init__(self, stream: BulkStream, session_id: str, pump_s: float | None, edit_poll_s: float):
        self.args = StepArgs.of(stream)
        self.session_id, self.pump_s, self.edit_poll_s = session_id, pump_s, edit_poll_s
        self._stream: BulkStream | None = None
        self._failed: BaseException | None = None
        self._owner: str | None = None
        self._superseded = False

    def __getstate__(self) -> dict[str, Any]:
        keep = ("args", "session_id", "pump_s", "edit_poll_s")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _stream=None, _failed=None, _owner=None, _superseded=False)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        if self._failed is not None:
            raise self._failed
        if self._stream is None:
            a = self.args
            views = session_by_id(self.session_id) if a.sink.startswith("memory:") else None
            # (built unprepared: the client checked the checkpoint and the sink, and staged INITIAL STATE)
            self._stream = BulkStream(
                batch_df.sparkSession,
                a.plan,
                a.source_schema,
                a.checkpoint,
                a.sink,
                a.finish,
                a.function,
                views=views,
                native=a.native,
            )
            # the lease this batch runs under (its client's): the worker may outlive its query, so
            # the threads beside the steps work only while that lease is still the checkpoint's
            self._owner = (lock_holder(a.checkpoint, batch_df.sparkSession, beats=False) or {}).get("owner")
            self._stream.lease_guard = self._holds_lease  # an edit commits only under it
            active = lambda: not self._superseded  # noqa: E731 - until another holds the lease
            if self.pump_s is not None:
                self._stream.pump_timers(self.pump_s, active, self._fail, self._holds_lease)
            self._stream.poll_edits(self.edit_poll_s, active, self._holds_lease)  # queued edits, between batches
        self._stream(batch_df, batch_id)

    def _holds_lease(self) -> bool:
        if self._owner is None or self._stream is None:
            return False
        try:
            holder = lock_holder(self.args.checkpoint, self._stream.driver, beats=False)
        except Exception:  # noqa: BLE001 - unreadable now: not this time
            return False
        if holder and holder.get("owner") != self._owner:
            self._superseded = True  # another writer holds it: this worker's threads end
        return bool(holder) and holder.get("owner") == self._owner

    def _fail(self, exc: BaseException, what: str) -> None:
        self._failed = exc  # raised at the next batch: the query fails there

"""Compaction: a version's deltas folded into a new base snapshot, in the background, one at a
time, so reading a version's state (read_state, a rebuild, a migration) never slows with the
number of batches.

A failed compaction changes nothing a reader follows (its base has no marker, and no commit
names it): the deltas stay as they are and it is tried again at a later commit. Each failure is
logged; after ``RETRIES`` failures in a row the next micro-batch raises it (the query fails),
and ``ks.run`` raises one that the run ended on."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ...runtime.faults import crash_point
from ...state.checkpoint import CheckpointError
from ...state.commit_record import BaseMarker, CommitRecord
from ...state.snapshots import SnapshotStore
from ..background import Retrying
from .layout import state_frame, write_base

__all__ = ["COMPACT_DELTAS", "COMPACT_DELTAS_CONF", "COMPACT_MIN_ROWS", "Compactor"]

log = logging.getLogger(__name__)

COMPACT_DELTAS = 100  # deltas since the base that make a compaction due ...
COMPACT_MIN_ROWS = 100_000  # ... or delta rows adding up to this many (and half the base's rows)
COMPACT_DELTAS_CONF = "spark.keyedsql.compactDeltas"  # the deltas that make a compaction due


class Compactor:
    def __init__(self, store: SnapshotStore, spark: Any, every: int | None = None):
        self.store, self.spark = store, spark
        self.every = int(every or spark.conf.get(COMPACT_DELTAS_CONF, None) or COMPACT_DELTAS)
        self.thread: threading.Thread | None = None
        self.retrying = Retrying(f"compaction of checkpoint {store.checkpoint!r}")

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def due(self, commit: CommitRecord) -> bool:
        rows = commit.delta_rows
        return len(commit.deltas) >= self.every or (rows >= COMPACT_MIN_ROWS and rows >= commit.base_rows // 2)

    def maybe_start(self, commit: CommitRecord) -> None:
        if self.running or not self.due(commit):
            return
        self.thread = threading.Thread(target=self._run, args=(commit,), name="spark-keyed-sql compaction", daemon=True)
        self.thread.start()

    def _run(self, commit: CommitRecord) -> None:
        try:
            self.compact(commit)
        except Exception as exc:  # noqa: BLE001 - logged and counted; the deltas stay as they are
            self.retrying.failed(exc)
            return
        self.retrying.succeeded()

    def compact(self, commit: CommitRecord) -> None:
        store, spark = self.store, self.spark
        log.info("compacting version %d of %s (%d deltas)", commit.version, store.checkpoint, len(commit.deltas))
        rel = write_base(store, state_frame(spark, store, commit), commit.version)
        log.info("compacted version %d of %s into %s", commit.version, store.checkpoint, rel)
        crash_point("compaction_written")
        rows = spark.read.parquet(store.path(rel)).count()
        store.mark_base(BaseMarker(commit.version, rel, rows, store.fs.size(store.path(rel))))
        crash_point("after_compaction")

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def check(self, *, finished: bool = False) -> None:
        """Raise the compaction failure that reached the bound (or, ``finished``: that the
        last attempt ended in)."""
        last = self.retrying.last
        if last is None or (not finished and self.retrying.count < self.retrying.bound):
            return
        raise CheckpointError(
            f"compaction of checkpoint {self.store.checkpoint!r} failed {self.retrying.count} time(s) in a row: "
            f"{type(last).__name__}: {last}. Every committed batch's state is intact (in its deltas); a later run "
            "compacts again"
        ) from last

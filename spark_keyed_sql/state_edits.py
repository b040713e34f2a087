"""``ks.delete_state`` / ``ks.update_state`` and ``DELETE`` / ``UPDATE`` of ``keyed_state(...)``
through ``ks.sql``: the checkpoint's function picked, its lease taken (an edit never races a
running query), and the edit handed to the layout of the engine that wrote the checkpoint.
Returns the audit (one row)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .engines import LEGACY_ENGINE, get_engine
from .runtime.spec import FunctionSpec
from .sql.edits import StateEdit, explain_edit
from .state.checkpoint import CheckpointError, read_metadata
from .state.filesystems import filesystem
from .state.lock import CheckpointLock
from .state.reader import pick_operator
from .streaming.checkpoints import engine_of

__all__ = ["AUDIT_COLUMNS", "AUDIT_SCHEMA", "audit_frame", "edit_plan", "edit_result", "edit_state", "state_edit_of"]

log = logging.getLogger(__name__)

# the audit row, in this order (docs/erasure.md)
AUDIT_COLUMNS = (
    "operation",  # 'delete' | 'update'
    "checkpoint",
    "function",
    "keys_matched",  # keys the predicate matched (0: nothing was written)
    "state_rows",  # state rows erased (delete) or changed (update)
    "versions_rewritten",  # committed versions the checkpoint kept before: the newest rewritten, the older dropped
    "files_removed",  # files of the checkpoint (and this host's local state caches) removed
    "batch_id",  # the batch the edit took effect at (its commit); NULL when nothing matched
    "output_batches",  # batches whose output may hold an edited key (see docs/erasure.md)
    "seconds",
)
AUDIT_SCHEMA = (
    "operation string, checkpoint string, function string, keys_matched bigint, state_rows bigint, "
    "versions_rewritten bigint, files_removed bigint, batch_id bigint, output_batches array<bigint>, seconds double"
)


def state_edit_of(
    kind: str, checkpoint: str, where: str, function: str | None, assignments: dict[str, str] | None = None
) -> StateEdit:
    """The edit ``ks.delete_state`` / ``ks.update_state`` ask for, checked as the SQL form is."""
    call = f"ks.{kind}_state"
    if not isinstance(checkpoint, str) or not checkpoint:
        raise CheckpointError(f"{call}: checkpoint must be a path, got {checkpoint!r}")
    if not isinstance(where, str) or not where.strip():
        raise CheckpointError(f"{call}: where= needs a predicate over the key and state columns (all keys: 'true')")
    if kind == "update":
        if not isinstance(assignments, dict) or not assignments:
            raise CheckpointError(f"{call}: set= needs a dict of column -> SQL expression, got {assignments!r}")
        bad = [k for k, v in assignments.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise CheckpointError(f"{call}: set= maps column names to SQL expression text; {bad!r} do not")
    return StateEdit(kind, checkpoint, function, where, tuple((assignments or {}).items()))


def edit_state(spark: SparkSession, edit: StateEdit, registered: Callable[[str], FunctionSpec | None]) -> dict:
    """Run ``edit`` on its checkpoint under the checkpoint's lease; the audit as a dict."""
    fs = filesystem(spark)
    fs.probe(edit.checkpoint)
    if not fs.is_dir(edit.checkpoint):
        raise CheckpointError(f"checkpoint {edit.checkpoint!r} does not exist")
    _, op = pick_operator(read_metadata(edit.checkpoint, spark), edit.function, edit.checkpoint)
    if op is None:
        raise CheckpointError(
            f"{edit.verb} of keyed state: checkpoint {edit.checkpoint!r} has no spark-keyed-sql metadata (not written "
            "by ks.start / ks.run)"
        )
    engine = op.engine_or(LEGACY_ENGINE)
    layout = get_engine(engine).layout
    if not layout.edits_state:  # refused before the lease is taken
        layout.edit(spark, edit.checkpoint, op, edit.kind, edit.where, edit.assignments, None, engine)
    lock = CheckpointLock(edit.checkpoint, spark, query=f"{edit.verb} of keyed state")
    try:
        lock.acquire()
    except CheckpointError as exc:
        raise CheckpointError(
            f"{edit.verb} of keyed state on checkpoint {edit.checkpoint!r}: a query holds its lease (it is running): "
            f"erase on a running query is not built yet; stop the query, then run the {edit.verb} again. ({exc})"
        ) from None
    try:
        return layout.edit(
            spark, edit.checkpoint, op, edit.kind, edit.where, edit.assignments, registered(op.function), engine
        )
    finally:
        lock.release()


def audit_frame(spark: SparkSession, audit: dict[str, Any]) -> DataFrame:
    """The audit as a one-row DataFrame (what ``ks.sql`` returns)."""
    return spark.createDataFrame([tuple(audit[c] for c in AUDIT_COLUMNS)], AUDIT_SCHEMA)


def edit_plan(spark: SparkSession, edit: StateEdit) -> str:
    """EXPLAIN KEYED of an edit: what it would erase or change, on which engine; nothing runs."""
    return explain_edit(edit, engine_of(spark, edit.checkpoint))


def edit_result(
    spark: SparkSession, edit: StateEdit, explain: bool, registered: Callable[[str], FunctionSpec | None]
) -> DataFrame:
    """What ``ks.sql`` returns for an edit: its plan (``explain``), else its audit, one row each."""
    if explain:
        return spark.createDataFrame([(edit_plan(spark, edit),)], "plan string")
    return audit_frame(spark, edit_state(spark, edit, registered))

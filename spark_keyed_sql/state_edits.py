"""``ks.delete_state`` / ``ks.update_state`` and ``DELETE`` / ``UPDATE`` of ``keyed_state(...)``
through ``ks.sql``: the checkpoint's function picked, the edit queued in the checkpoint
(``state/edit_queue.py``) for whoever holds its lease — a running query applies it at its next
batch boundary, else the caller takes the lease and applies it (``engines/edit_pickup.py``) —
and the answer waited for. Returns the audit (one row)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .api.errors import KeyedSQLError
from .api.intervals import parse_interval_ms
from .engines import LEGACY_ENGINE, get_engine
from .engines.edit_pickup import apply_pending
from .runtime.spec import FunctionSpec
from .sql.edits import StateEdit, explain_edit
from .state.checkpoint import CheckpointError, read_metadata
from .state.edit_queue import EditQueue, EditRequest
from .state.faults import crash_point
from .state.filesystems import filesystem
from .state.lock import CheckpointLock, lock_holder
from .state.reader import pick_operator

__all__ = [
    "AUDIT_COLUMNS",
    "AUDIT_SCHEMA",
    "EDIT_TIMEOUT_CONF",
    "audit_frame",
    "edit_plan",
    "edit_result",
    "edit_state",
    "edit_timeout_s",
    "state_edit_of",
]

log = logging.getLogger(__name__)

# how long an edit's caller waits for a running query to apply it
EDIT_TIMEOUT_CONF = "spark.keyedsql.editTimeout"
EDIT_TIMEOUT_DEFAULT = "10 minutes"

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
        bad = [k for k in assignments if not isinstance(k, str)]
        if bad:
            raise CheckpointError(f"{call}: set= maps column names to values; {bad!r} are no column names")
        assignments = {k: _sql_value(v, f"{call}: set= value of {k!r}") for k, v in assignments.items()}
    return StateEdit(kind, checkpoint, function, where, tuple((assignments or {}).items()))


def _sql_value(v: Any, where: str) -> str:
    """A ``set=`` value as SQL: a string is an SQL expression (``"total_value * 2"``, ``"'text'"``);
    None, a bool, a number, a datetime / date or a Decimal is that value (the literals a native
    plan writes for its constants, where it has them)."""
    import datetime as dt
    import decimal

    from .engines.native.ir import Const
    from .engines.native.render import literal

    if type(v).__module__ == "numpy" and hasattr(v, "item"):  # a numpy scalar: its Python value
        v = v.item()
    if isinstance(v, str):
        return v
    if isinstance(v, dt.datetime) and v.tzinfo is not None:  # the instant (state holds the UTC wall clock)
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if v is None:
        return "NULL"
    kinds = ((bool, "bool"), (int, "int"), (float, "float"), (dt.datetime, "datetime"))  # (bool before int)
    ty = next((name for kind, name in kinds if isinstance(v, kind)), None)
    if ty is not None:
        return literal(Const(ty, False, v))
    if isinstance(v, decimal.Decimal):
        return f"{v}BD"
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        return f"DATE '{v.isoformat()}'"
    raise CheckpointError(
        f"{where}: {type(v).__name__} {v!r} is not a value set= takes (a string is an SQL expression; "
        "None, bool, int, float, Decimal, datetime and date are values)"
    )


def edit_timeout_s(spark: SparkSession) -> float:
    return parse_interval_ms(spark.conf.get(EDIT_TIMEOUT_CONF, None) or EDIT_TIMEOUT_DEFAULT) / 1000


def edit_state(
    spark: SparkSession,
    edit: StateEdit,
    registered: Callable[[str], FunctionSpec | None],
    timeout: float | None = None,
) -> dict:
    """Queue ``edit`` in its checkpoint and wait for its answer (``timeout`` seconds; None: the
    session's ``spark.keyedsql.editTimeout``): a running query applies it at its next batch
    boundary; when no query holds the lease, this call takes it and applies the queue itself.
    The audit as a dict."""
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
    reason = layout.edit_unavailable(spark)
    if reason is not None:  # refused before anything is queued
        raise CheckpointError(
            f"{edit.verb} of keyed state (checkpoint {edit.checkpoint!r}, engine '{engine}'): {reason}"
        )
    wait_s = edit_timeout_s(spark) if timeout is None else float(timeout)
    if wait_s < 0:
        raise CheckpointError(f"{edit.verb} of keyed state: timeout must be seconds >= 0, got {timeout!r}")
    queue = EditQueue(edit.checkpoint, spark)
    request = EditRequest.new(edit.kind, op.function, edit.where, edit.assignments)
    path = queue.submit(request)
    crash_point("edit_queued")
    audit = _Waiting(spark, edit, layout, engine, registered, queue, request, path, wait_s).answer()
    if not audit.get("keys_matched"):  # DESIGN: "a predicate that matches nothing says so"
        # (a warning, not only the log: the package's logger is quiet until the application sets logging up)
        warnings.warn(
            f"{edit.verb} of keyed state on {edit.checkpoint}: WHERE {edit.where} matched no key of "
            f"{op.function}; nothing {'erased' if edit.kind == 'delete' else 'updated'}, nothing written",
            stacklevel=4,  # (the caller of ks.delete_state / ks.update_state, past its @quietly wrapper)
        )
    return audit


class _Waiting:
    """The caller of a queued edit, until its answer: it applies the queue itself whenever the
    checkpoint's lease is free (no query runs), else waits for the query holding it."""

    LOOK_S = 0.25  # how often the answer is looked for
    LEASE_S = 2.0  # how often a free lease is tried for

    def __init__(
        self,
        spark: SparkSession,
        edit: StateEdit,
        layout: Any,
        engine: str,
        registered: Callable[[str], FunctionSpec | None],
        queue: EditQueue,
        request: EditRequest,
        path: str,
        wait_s: float,
    ):
        self.spark, self.edit, self.layout, self.engine, self.registered = spark, edit, layout, engine, registered
        self.queue, self.request, self.path, self.wait_s = queue, request, path, wait_s
        self.holder: dict | None = None

    def answer(self) -> dict:
        started = time.monotonic()
        next_try = started
        while True:
            now = time.monotonic()
            if now >= next_try:
                self._apply_if_free()
                next_try = now + self.LEASE_S
            got = self.queue.answer(self.request.id)
            if got is not None:
                self.queue.collect(self.request.id)
                if got.error is not None:
                    raise CheckpointError(got.error)
                assert got.audit is not None
                return dict(got.audit) | {"checkpoint": self.edit.checkpoint}
            if now - started >= self.wait_s:
                raise self._pending()
            time.sleep(self.LOOK_S)

    def _apply_if_free(self) -> None:
        lock = CheckpointLock(self.edit.checkpoint, self.spark, query=f"{self.edit.verb} of keyed state")
        try:
            lock.acquire()
        except KeyedSQLError as exc:  # held (or, on Connect, a listing raced the holder's writes): not now
            try:
                holder = lock_holder(self.edit.checkpoint, self.spark, beats=False)
            except KeyedSQLError:
                holder = None
            log.debug("%s of keyed state on %s: lease not taken (%s)", self.edit.verb, self.edit.checkpoint, exc)
            if not (self.layout.edits_running or self.layout.edits_by_restart) and holder:  # none would apply it
                self.queue.collect(self.request.id)  # withdrawn: nothing would ever pick it up
                who = holder.get("query") or "a query"
                raise CheckpointError(
                    f"{self.edit.verb} of keyed state on checkpoint {self.edit.checkpoint!r}: engine '{self.engine}' "
                    f"applies it on a stopped query only (Spark runs its batches), and {who} (process "
                    f"{holder.get('pid')} on {holder.get('host')}) holds the checkpoint: stop it, then run the "
                    f"{self.edit.verb} again"
                ) from None
            if holder and holder.get("owner") != (self.holder or {}).get("owner"):  # (its heartbeats aside)
                log.info(
                    "%s of keyed state on %s queued (request %s): waiting for %s (process %s on %s) to apply it at "
                    "its next batch boundary",
                    self.edit.verb,
                    self.edit.checkpoint,
                    self.request.id,
                    holder.get("query") or "the query holding the checkpoint",
                    holder.get("pid"),
                    holder.get("host"),
                )
            self.holder = holder or self.holder
            return
        try:
            apply_pending(self.spark, self.edit.checkpoint, self.layout, self.engine, self.registered)
        except Exception as exc:  # noqa: BLE001 - said with what is pending
            pending = self.queue.is_pending(self.request.id) and self.queue.answer(self.request.id) is None
            raise CheckpointError(
                f"{self.edit.verb} of keyed state on checkpoint {self.edit.checkpoint!r}: applying the queued edits "
                f"failed ({type(exc).__name__}: {exc}); "
                + (
                    f"this one is still queued as {self.path} and is applied by the next holder of the lease"
                    if pending
                    else "this one was answered meanwhile"
                )
            ) from exc
        finally:
            lock.release()

    def _pending(self) -> CheckpointError:
        h = self.holder or {}
        who = (
            f"{h.get('query') or 'the query holding the checkpoint'} (process {h.get('pid')} on {h.get('host')})"
            if h
            else "the query holding the checkpoint"
        )
        return CheckpointError(
            f"{self.edit.verb} of keyed state on checkpoint {self.edit.checkpoint!r} is still pending after "
            f"{self.wait_s:g} s: it is queued as {self.path}, for {who} to apply at its next batch boundary. It stays "
            f"queued and is applied then (or by the next ks.start / ks.run / edit that takes the checkpoint's lease); "
            f"its audit is then written to {self.queue.answer_path(self.request.id)}. To withdraw it before that, "
            f"delete {self.path}. A longer wait: timeout= or {EDIT_TIMEOUT_CONF}"
        )


def audit_frame(spark: SparkSession, audit: dict[str, Any]) -> DataFrame:
    """The audit as a one-row DataFrame (what ``ks.sql`` returns)."""
    return spark.createDataFrame([tuple(audit[c] for c in AUDIT_COLUMNS)], AUDIT_SCHEMA)


def edit_plan(spark: SparkSession, edit: StateEdit) -> str:
    """EXPLAIN KEYED of an edit: what it would erase or change, on which engine; nothing runs."""
    try:
        meta = read_metadata(edit.checkpoint, spark)
    except CheckpointError:  # (not a keyed checkpoint: the plan says so)
        meta = None
    ops = meta.operators if meta else []
    engine = ops[0].engine_or(LEGACY_ENGINE) if ops else None
    reason = get_engine(engine).layout.edit_unavailable(spark) if engine else None
    several = edit.function is None and len(ops) > 1  # (the edit itself is refused, naming them)
    if edit.function is None and len(ops) == 1:  # the checkpoint's only function, by name
        edit = replace(edit, function=ops[0].function)
    return explain_edit(edit, engine, reason, several)


def edit_result(
    spark: SparkSession, edit: StateEdit, explain: bool, registered: Callable[[str], FunctionSpec | None]
) -> DataFrame:
    """What ``ks.sql`` returns for an edit: its plan (``explain``), else its audit, one row each."""
    if explain:
        return spark.createDataFrame([(edit_plan(spark, edit),)], "plan string")
    return audit_frame(spark, edit_state(spark, edit, registered))

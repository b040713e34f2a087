"""DELETE / UPDATE of a bulk checkpoint's keyed state, on a stopped query (the caller holds the
lease): the edited newest state is written as a new base snapshot, committed as the next
version with ``erased_before`` set (one create of its commit file: the moment the edit takes
effect), and then the history before it is removed — older commits, snapshots, deltas, the
batches' staged files, and this host's local state caches.

A crash before the commit leaves the state as it was (the new base is a leftover no commit
names, swept later); a crash after it leaves the edit done: readers pass over the older
commits at once, and what is left of their files is removed by the next edit's or the next
batch's cleanup (``SnapshotStore.cleanup``). Nothing written names an edited key or its values
(the predicate is not recorded)."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.state import StateKind
from ...compat.names import named
from ...runtime.clock import now_ms, session_offset_ms
from ...runtime.faults import crash_point
from ...runtime.spec import FunctionSpec
from ...state.checkpoint import CheckpointError, OperatorRecord
from ...state.commit_record import BatchMetrics
from ...state.fs import join
from ...state.reader import null_safe_match
from ...state.snapshots import KEY_PREFIX, SnapshotStore, state_column_names
from ..base import new_audit
from ..edit_values import assigned_values, check_statement
from .layout import DELETED, VERSION, state_frame, write_base
from .local_store import cache_root, remove_store
from .partitioning import PART
from .state_row import HAS_ATTRS, STATE_PREFIX, TIMERS, exp_column
from .step import LOCAL_STATE_DIR_CONF

__all__ = ["edit_state", "finish_erase"]

log = logging.getLogger(__name__)

_MATCH = "__ks_match"


def _files(fs: Any, root: str) -> set[str]:
    """Every file under ``root`` (checksum files aside), by path."""
    out: set[str] = set()
    if not fs.exists(root):
        return out
    for name in fs.list(root):
        path = join(root, name)
        if fs.is_dir(path):
            out |= _files(fs, path)
        elif not name.endswith(".crc"):
            out.add(path)
    return out


def finish_erase(spark: SparkSession, checkpoint: str) -> SnapshotStore:
    """Remove what an erase a crash interrupted left of the history before it (its commit was
    made: the edit holds); the checkpoint's store."""
    store = SnapshotStore(checkpoint, spark)
    if store.erased_history_left():
        _drop_local_caches(spark, store.fs, checkpoint)
        store.cleanup()
    return store


def edit_state(
    spark: SparkSession,
    checkpoint: str,
    op: OperatorRecord,
    kind: str,
    where: str,
    assignments: tuple[tuple[str, str], ...],
    spec: FunctionSpec | None,
    request: str | None = None,
    before_commit: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The edit, committed as a version of its own; ``request``: the queued request it applies
    (recorded in that commit, with the audit's counts). Returns the audit."""
    started = time.time()
    verb = kind.upper()
    what = f"{verb} of keyed state (checkpoint {checkpoint!r}, function '{op.function}')"
    store = finish_erase(spark, checkpoint)
    fs = store.fs
    latest = store.latest()
    if latest is None or latest.schema is None:
        raise CheckpointError(f"{what}: the checkpoint holds no committed state yet")
    schema = T.StructType.fromJson(dict(latest.schema))
    keys = [f"{KEY_PREFIX}{i}" for i in range(len(op.keys))]
    frame = state_frame(spark, store, latest)
    shown = {k: name for k, name in zip(keys, op.keys)} | state_column_names(frame.columns)
    view = frame.select(
        "*", *[F.col(c).alias(n) for c, n in shown.items()], F.lit(latest.version).cast("long").alias("batch_id")
    )
    # analysed now, against the columns read_state shows: a wrong name fails here, before anything is written
    check_statement(view.select(*map(named, shown.values()), "batch_id"), where, assignments, op.keys, what)
    flagged = view.withColumn(_MATCH, F.coalesce(F.expr(where).cast("boolean"), F.lit(False)))
    matched = flagged.where(F.col(_MATCH))
    n = matched.count()
    audit = new_audit(kind, checkpoint, op.function, n)
    if n == 0:
        log.info("%s: WHERE %s matches no key; nothing written", what, where)
        audit["seconds"] = round(time.time() - started, 3)
        return audit
    if kind == "update":
        edited = _updated(flagged, schema, shown, keys, op, assignments, spec, what)
    else:
        edited = flagged.where(~F.col(_MATCH))
    output_batches = _output_batches(spark, store, latest, matched, keys)
    kept_versions = len(store.commits())

    # 1. the edited state, as a base snapshot of the next version (no commit names it yet)
    version = latest.version + 1
    base = write_base(store, edited.select(*schema.names, PART), version)
    crash_point("erase_written")
    written = spark.read.parquet(store.path(base))
    rows = written.count()
    next_timer = written.select(F.min(F.array_min(F.col(TIMERS)))).first()[0] if TIMERS in written.columns else None
    spark_batches = [c.spark_batch for c in store.commits() if c.spark_batch is not None]
    before = _files(fs, store.root)
    if before_commit is not None:
        before_commit()  # e.g. the writer's lease confirmed (raises: nothing committed)
    # 2. the commit: from here on the edit has taken effect and the older history is not read
    store.commit(
        dataclasses.replace(
            latest,
            version=version,
            attempt=f"edited-{uuid.uuid4().hex[:12]}",
            base=base,
            base_version=version,
            base_rows=rows,
            base_bytes=fs.size(store.path(base)),
            deltas=(),
            stores={},  # no local store holds this state: every partition is fed from the checkpoint
            # the Spark batches done so far stay known as done (a restart must not run one again)
            spark_batch=max(spark_batches) if spark_batches else None,
            next_timer_ms=next_timer,
            metrics=BatchMetrics(state_rows=rows),
            erased_before=version,
            edit=None
            if request is None
            else {
                "request": request,
                "operation": kind,
                "function": op.function,
                "keys_matched": n,
                "state_rows": n,
                "versions_rewritten": kept_versions,
                "batch_id": version,
                "output_batches": output_batches,
            },
        )
    )
    crash_point("erase_committed")
    # 3. the history before it, removed: this host's local caches, then older commits, then
    # what they named (finishable: a crash here leaves files no one reads, which the next
    # edit, or the next batch's cleanup, removes)
    cached = _drop_local_caches(spark, fs, checkpoint)
    store.record_erased(version)
    store.cleanup()
    removed = len(before - _files(fs, store.root)) + cached
    audit.update(
        state_rows=n,
        versions_rewritten=kept_versions,
        files_removed=removed,
        batch_id=version,
        output_batches=output_batches,
        seconds=round(time.time() - started, 3),
    )
    log.info(
        "%s: %d key(s) %s at batch %d; %d older version(s) and %d file(s) removed",
        what,
        n,
        "erased" if kind == "delete" else "updated",
        version,
        kept_versions,
        removed,
    )
    return audit


def _updated(
    flagged: DataFrame,
    schema: T.StructType,
    shown: dict[str, str],
    keys: list[str],
    op: OperatorRecord,
    assignments: tuple[tuple[str, str], ...],
    spec: FunctionSpec | None,
    what: str,
) -> DataFrame:
    """The state with ``assignments`` applied to the matched keys (each checked first:
    ``edit_values.assigned_values``). A list or map variable set empty holds none (as the
    class's ``put([])`` / last ``remove`` leaves it, and as engine tws stores it); one with a
    TTL gets its entries' expiries beside them: the TTL from now, as a write now would."""
    processor = HAS_ATTRS not in schema.names
    attributes = set() if processor else {c for c in shown if c not in keys}
    values = assigned_values(flagged, _MATCH, shown, keys, op, assignments, spec, attributes, what)
    now = now_ms(session_offset_ms(flagged.sparkSession))
    out = flagged
    for internal, checked in values.items():
        t = schema[internal].dataType
        exp = exp_column(internal[len(STATE_PREFIX) :])
        var = op.variable(shown[internal]) if processor else None
        # (by its recorded kind: a ValueState may hold an array or a map)
        if var is not None and var.get("kind") in (StateKind.LIST.value, StateKind.MAP.value):
            checked = F.when(F.size(checked) > 0, checked)
            ttl = var.get("ttl_ms")
            if exp in schema.names and ttl is not None:
                every = F.array_repeat(F.lit(now + int(ttl)).cast("long"), F.size(checked))
                expiries = every if isinstance(t, T.ArrayType) else F.map_from_arrays(F.map_keys(checked), every)
                out = out.withColumn(
                    exp, F.when(F.col(_MATCH), F.when(checked.isNotNull(), expiries)).otherwise(F.col(exp))
                )
        out = out.withColumn(internal, F.when(F.col(_MATCH), checked).otherwise(F.col(internal)))
    return out


def _output_batches(
    spark: SparkSession, store: SnapshotStore, latest: Any, matched: DataFrame, keys: list[str]
) -> list[int]:
    """The batches (since the newest base snapshot) whose delta changed a matched key: the
    batches that ran the key, whose output may hold it."""
    if not latest.deltas:
        return []
    deltas = state_frame(spark, store, latest, versions=True, deltas_only=True).select(*keys, VERSION, DELETED)
    m = matched.select(*[F.col(k).alias(f"__m{i}") for i, k in enumerate(keys)])
    cond = null_safe_match((F.col(k), F.col(f"__m{i}")) for i, k in enumerate(keys))
    hits = deltas.join(m, on=cond, how="left_semi") if keys else deltas
    return sorted(int(r[0]) for r in hits.select(VERSION).distinct().collect())


def _drop_local_caches(spark: SparkSession, fs: Any, checkpoint: str) -> int:
    """Remove this host's local state caches of the checkpoint (the files count as removed).
    Caches on other hosts (a cluster's executors) are not reached here: the edit's commit names
    no local store, so each is replaced when the next batch feeds its partitions."""
    try:
        configured = spark.conf.get(LOCAL_STATE_DIR_CONF, None) or None
    except Exception:  # noqa: BLE001 - a session without a readable conf: the default place
        configured = None
    return remove_store(cache_root(configured), fs.qualify(checkpoint, "checkpoint"))

"""DELETE / UPDATE of keyed state on a stopped transformWithState checkpoint (Spark >= 4.2):
Spark's own ``StateRewriter`` reads every column family of the last committed state (value, list, map,
timer and TTL families, all keyed by the grouping key), drops the matched keys' rows, and
writes them as a fresh RocksDB snapshot of the next version (no file shared with the older
versions); the offset and commit logs get one more batch (a copy of the last: no new input),
and then every older state version and every SST file the new snapshot does not name is
removed.

Steps, and what a crash at each leaves:
1. ``offsets/N+1`` = ``offsets/N``. A crash here: Spark reruns batch N+1 with no new input
   (an empty batch) from the old state — the state before the edit; the request stays pending.
2. the rewrite: ``state/<op>/<p>/<N+2>.zip`` for every partition. A crash here leaves those
   files, which the next attempt (or Spark's empty batch N+1, which writes the same version)
   replaces — the state before the edit.
3. ``commits/N+1`` = ``commits/N``: the edit takes effect (one create).
4. ``tws_erased.json`` records the batch before which the history was erased (and the
   request), then the older versions' files go. A crash here leaves files no version reads;
   the next edit finishes removing them.

An UPDATE goes the same way: its SET values, checked as on every engine (``edit_values.py``),
are written over the matched keys' stored values (the StatefulFunction's ``attributes`` value
and typed value-state variables) as Spark's UnsafeRow bytes (``unsafe_row.py``), which the
rewriter stores in the checkpoint's own encoding; a list or map variable's rows of those keys are
replaced by the new value's (``collection_edit.py``); every other row (other keys, timers, TTL
entries) is carried over as it is.

A crash between 3 and the record in 4 leaves the edit done but unrecorded: its request is
applied again and matches no key (the answer then says 0 keys)."""

from __future__ import annotations

import io
import json
import logging
import time
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ...compat.names import named
from ...runtime.connect import is_connect
from ...runtime.spec import FunctionKind, FunctionSpec
from ...state.checkpoint import CheckpointError, OperatorRecord
from ...state.filesystems import filesystem
from ...state.fs import join
from ...state.reader import null_safe_match
from ..base import new_audit
from ..edit_values import assigned_values, check_statement, first_line
from .collection_edit import COLLECTION_KINDS, collection_rows, counted_lists, swapped
from .layout import ADDED, ATTRIBUTES_VAR, HIDDEN, batch_time_ms, operator_info, state_variable, stored_targets
from .unsafe_row import encoded

__all__ = ["ERASED_FILE", "applied", "edit_state", "edit_unavailable", "erased_before", "has_state_rewriter"]

log = logging.getLogger(__name__)

ERASED_FILE = "tws_erased.json"
# how many of the newest batches an edit's audit reads Spark's change feed of for output_batches:
# the read is a pass over those batches' changelogs, so it is bounded: an erase's time grows with
# this, not with the batches Spark retains (100 by default)
OUTPUT_BATCHES_CONF = "spark.keyedsql.editOutputBatches"
OUTPUT_BATCHES_DEFAULT = 20
_REWRITER = "org.apache.spark.sql.execution.streaming.state.StateRewriter"
_MATCH, _FAMILY, _BYTES = "__ks_match", "__ks_family", "__ks_bytes"


def has_state_rewriter(spark: SparkSession) -> bool:
    """Does this (classic) session's Spark have the state rewriter the edits use (Spark 4.2+)?"""
    try:
        spark._jvm.java.lang.Class.forName(_REWRITER)  # type: ignore[attr-defined]
        return True
    except Exception:  # noqa: BLE001 - no such class (or no JVM)
        return False


def edit_unavailable(spark: SparkSession) -> str | None:
    """Why this session cannot rewrite a tws checkpoint's state (None: it can)."""
    if is_connect(spark):
        return (
            "not built through Spark Connect (Spark's state rewriter is a JVM class the client cannot reach); run "
            "the DELETE / UPDATE from a classic session (e.g. the spark-keyed-sql CLI on a host that reaches the "
            "checkpoint)"
        )
    if not has_state_rewriter(spark):
        return "needs Spark 4.2 or newer (its state rewriter); this session's Spark has none"
    return None


def _batches(fs: Any, d: str) -> list[int]:
    return sorted(int(f) for f in fs.list(d) if f.isdigit()) if fs.exists(d) else []


def _record(spark: SparkSession, checkpoint: str) -> dict[str, Any]:
    try:
        d = json.loads(filesystem(spark).read_text(join(checkpoint, ERASED_FILE)))
        return d if isinstance(d, dict) else {}
    except (FileNotFoundError, ValueError, TypeError):
        return {}


def erased_before(spark: SparkSession, checkpoint: str) -> int | None:
    before = _record(spark, checkpoint).get("before")
    return int(before) if isinstance(before, int) else None


def applied(spark: SparkSession, checkpoint: str, request: str) -> dict[str, Any] | None:
    """The audit of the erase that applied ``request`` (the newest one's only), else None."""
    d = _record(spark, checkpoint)
    if d.get("request") != request or not isinstance(d.get("audit"), dict):
        return None
    return dict(d["audit"]) | {"checkpoint": checkpoint, "files_removed": 0, "seconds": None}


class _KeyFilter:
    """The rewriter's transform (a py4j ``scala.Function1``): its frame of every column family's
    rows without the matched keys (a broadcast anti join on ``partition_key``: no shuffle, so
    each row stays in the partition whose store it is written to)."""

    def __init__(self, spark: SparkSession, matched: DataFrame, key_fields: list[str]):
        self.spark, self.matched, self.key_fields = spark, matched, key_fields
        self.error: BaseException | None = None

    def apply(self, jdf: Any) -> Any:
        try:
            df = DataFrame(jdf, self.spark)
            cond = null_safe_match((F.col("partition_key")[f], F.col(f"__m{i}")) for i, f in enumerate(self.key_fields))
            return df.join(F.broadcast(self.matched), on=cond, how="left_anti")._jdf
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller, after the JVM returns
            self.error = exc
            raise

    class Java:
        implements = ["scala.Function1"]


class _ValueSwap(_KeyFilter):
    """The UPDATE's transform: every row kept, the matched keys' value rows of the edited
    families with their new bytes (a value variable set to NULL: its row dropped, unset); a
    broadcast left join on ``partition_key`` and the family: no shuffle, as the DELETE's. The
    edited list and map families' rows of those keys are replaced (collection_edit.py)."""

    def __init__(
        self, spark: SparkSession, values: DataFrame | None, collections: DataFrame | None, key_fields: list[str]
    ):
        super().__init__(spark, values, key_fields)  # type: ignore[arg-type]
        self.collections = collections

    def apply(self, jdf: Any) -> Any:
        try:
            df = DataFrame(jdf, self.spark)
            if self.collections is not None:  # (first: a key's new rows go beside any row of the key,
                df = swapped(df, self.collections, self.key_fields)  # its value rows unset below too)
            if self.matched is not None:
                df = self._values(df)
            return df._jdf
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller, after the JVM returns
            self.error = exc
            raise

    def _values(self, df: DataFrame) -> DataFrame:
        keyed = null_safe_match((F.col("partition_key")[f], F.col(f"__m{i}")) for i, f in enumerate(self.key_fields))
        cond = F.col("column_family_name") == F.col(_FAMILY)
        joined = df.join(F.broadcast(self.matched), on=cond if keyed is None else keyed & cond, how="left")
        unset = F.col(_FAMILY).isNotNull() & F.col(_BYTES).isNull()  # a variable set to NULL
        return joined.where(~unset).select(
            "partition_key",
            "key_bytes",
            F.coalesce(F.col(_BYTES), F.col("value_bytes")).alias("value_bytes"),
            "column_family_name",
        )


def edit_state(
    spark: SparkSession,
    checkpoint: str,
    op: OperatorRecord,
    kind: str,
    where: str,
    read: Callable[[], DataFrame],
    request: str | None = None,
    before_commit: Callable[[], None] | None = None,
    assignments: tuple[tuple[str, str], ...] = (),
    spec: FunctionSpec | None = None,
    op_index: int = 0,
) -> dict[str, Any]:
    started = time.time()
    what = f"{kind.upper()} of keyed state (checkpoint {checkpoint!r}, function '{op.function}', engine 'tws')"
    reason = edit_unavailable(spark)
    if reason is not None:
        raise CheckpointError(f"{what}: {reason}")
    jvm = spark._jvm  # type: ignore[attr-defined]
    fs = filesystem(spark)
    commits, offsets = _batches(fs, join(checkpoint, "commits")), _batches(fs, join(checkpoint, "offsets"))
    if not commits:
        raise CheckpointError(f"{what}: the checkpoint holds no committed batch yet")
    n = commits[-1]
    offset_n = join(checkpoint, "offsets", str(n))
    ours = (
        offsets
        and offsets[-1] == n + 1
        and fs.read_text(join(checkpoint, "offsets", str(n + 1))) == fs.read_text(offset_n)
    )  # an earlier DELETE's empty batch, left by a crash before its commit: taken over
    if offsets and offsets[-1] > n and not ours:
        raise CheckpointError(
            f"{what}: batch {offsets[-1]} was started and not committed; run the query once (ks.run) to finish it, "
            "then the DELETE"
        )
    state = read()
    keys = list(op.keys)
    check_statement(state, where, assignments, op.keys, what)  # a wrong name fails here, before anything is written
    targets = stored_targets(spark, checkpoint, op_index, op) if assignments else {}
    flagged = state.withColumn(_MATCH, F.coalesce(F.expr(where).cast("boolean"), F.lit(False)))
    matched = flagged.where(F.col(_MATCH)).select(*[named(k).alias(f"__m{i}") for i, k in enumerate(keys)])
    matched = matched.localCheckpoint()  # (one pass over the state: counted, joined to the feed, filtered by)
    found = matched.count()
    audit = new_audit(kind, checkpoint, op.function, found, state_rows=found)
    if found == 0:
        audit["seconds"] = round(time.time() - started, 3)
        return audit
    key_fields = [f"__ks_k{i}" for i in range(len(keys))]
    output_batches = _output_batches(spark, fs, checkpoint, op_index, matched, len(keys), n)
    kept = _kept_versions(fs, join(checkpoint, "state"), n + 1)
    if kind == "update":
        values, collections = _new_values(spark, checkpoint, n, op, op_index, targets, flagged, assignments, spec, what)
        try:  # computed (and every value encoded) before anything is written
            values = values.localCheckpoint() if values is not None else None
            collections = collections.localCheckpoint() if collections is not None else None
        except Exception as exc:  # noqa: BLE001 - e.g. a value the encoding refuses
            raise CheckpointError(
                f"{what}: the new values could not be encoded: {first_line(exc)}; nothing was written"
            ) from None
        transform: _KeyFilter = _ValueSwap(spark, values, collections, key_fields)
    else:
        transform = _KeyFilter(spark, matched, key_fields)
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)  # type: ignore[attr-defined]
    some, none = jvm.scala.Some, jvm.scala.Option.empty()
    try:
        rewriter = jvm.org.apache.spark.sql.execution.streaming.state.StateRewriter(
            spark._jsparkSession,  # type: ignore[attr-defined]
            n,
            n + 1,
            fs.qualify(checkpoint, "checkpoint"),
            spark._jsc.hadoopConfiguration(),  # type: ignore[attr-defined]
            none,
            some(transform),
            none,
        )
    except Exception as exc:  # noqa: BLE001 - another Spark's rewriter: said, nothing written
        raise CheckpointError(
            f"{what}: this Spark's state rewriter takes other arguments than Spark 4.3's (tested): "
            f"{str(exc).strip().splitlines()[0]}; nothing was written"
        ) from None
    # 1. one more batch in the offset log: the last one again (no new input)
    if not ours:
        fs.copy(offset_n, join(checkpoint, "offsets", str(n + 1)))
    # 2. the state without the matched keys, as version n + 2 (Spark's state version = batch + 1),
    # over what a crashed attempt may have left of it
    _remove_version(fs, join(checkpoint, "state"), n + 2)
    rewriter.run()
    if transform.error is not None:
        raise transform.error
    if before_commit is not None:
        before_commit()
    # 3. the commit: the edit takes effect
    fs.copy(join(checkpoint, "commits", str(n)), join(checkpoint, "commits", str(n + 1)))
    # 4. the history before it: recorded as erased, then removed
    counts = {k: audit[k] for k in ("operation", "function", "keys_matched", "state_rows")}
    counts |= {"batch_id": n + 1, "output_batches": output_batches}
    record = {"before": n + 1, "request": request, "audit": counts}
    fs.create_text(join(checkpoint, ERASED_FILE), json.dumps(record), overwrite=True)
    removed = _purge(fs, join(checkpoint, "state"), n + 2)
    audit.update(
        versions_rewritten=kept,
        files_removed=removed,
        batch_id=n + 1,
        output_batches=output_batches,
        seconds=round(time.time() - started, 3),
    )
    log.info("%s: %d key(s) erased at batch %d; %d file(s) removed", what, found, n + 1, removed)
    return audit


def _partition_dirs(fs: Any, op_dir: str) -> Iterator[str]:
    """The state partition directories of one operator (``state/<op>/<partition>``)."""
    for part in fs.list(op_dir):
        d = join(op_dir, part)
        if part.isdigit() and fs.is_dir(d):
            yield d


def _all_partition_dirs(fs: Any, state_root: str) -> Iterator[str]:
    """Every operator's state partition directories under ``state_root``."""
    for op_dir in fs.list(state_root):
        yield from _partition_dirs(fs, join(state_root, op_dir))


def _version_of(name: str) -> int | None:
    """The state version a RocksDB store file is of (``12.zip``, ``12.changelog``,
    ``12_<id>.zip``, their ``.crc`` files ``.12.zip.crc``); None: not a version's file."""
    head = name.lstrip(".").split(".", 1)[0].split("_", 1)[0]
    return int(head) if head.isdigit() else None


def _kept_versions(fs: Any, state_root: str, newest: int) -> int:
    """The state versions up to ``newest`` the checkpoint's state files hold (snapshots,
    changelogs, in any partition of any operator): the history an edit rewrites or drops."""
    if not fs.exists(state_root):
        return 0
    versions = {_version_of(name) for d in _all_partition_dirs(fs, state_root) for name in fs.list(d)}
    return len({v for v in versions if v is not None and v <= newest})


def _changelog_start(fs: Any, op_dir: str, n: int) -> int | None:
    """The first batch from which every partition of the operator keeps a changelog of each
    state version up to batch ``n``'s (Spark's state version = batch + 1; a checkpoint written
    with RocksDB changelog checkpointing keeps one per version it retains); None: none kept."""
    if not fs.exists(op_dir):
        return None
    lows = []
    for d in _partition_dirs(fs, op_dir):
        versions = {_version_of(name) for name in fs.list(d) if name.endswith(".changelog")}
        low = n + 1
        if low not in versions:
            return None
        while low - 1 in versions:
            low -= 1
        lows.append(low)
    return max(lows) - 1 if lows else None


def _output_batches(
    spark: SparkSession, fs: Any, checkpoint: str, op_index: int, matched: DataFrame, key_count: int, n: int
) -> list[int]:
    """The batches, among the newest ``spark.keyedsql.editOutputBatches`` as far as the
    checkpoint's changelogs go back, that changed a matched key's state (any of its variables):
    the batches that ran the key with a change, whose output may hold it. Read with Spark's
    change feed of each state variable (``readChangeFeed``), before the edit removes that
    history; none kept (changelog checkpointing off): empty."""
    start = _changelog_start(fs, join(checkpoint, "state", str(op_index)), n)
    try:
        window = int(spark.conf.get(OUTPUT_BATCHES_CONF, None) or OUTPUT_BATCHES_DEFAULT)
    except ValueError:
        raise CheckpointError(
            f"{OUTPUT_BATCHES_CONF} must be a whole number of batches, got {spark.conf.get(OUTPUT_BATCHES_CONF)!r}"
        ) from None
    if start is None or window <= 0:
        return []
    start = max(start, n - window + 1)
    try:
        info = operator_info(spark, checkpoint, op_index)
        families = [v["stateName"] for v in json.loads(info.operatorProperties).get("stateVariables", [])]
    except Exception as exc:  # noqa: BLE001 - the audit says none known, the edit goes on
        log.info("output batches of %s not read: %s", checkpoint, first_line(exc))
        return []
    found: set[int] = set()
    for family in families:
        try:
            feed = (
                spark.read.format("statestore")
                .option("operatorId", op_index)
                .option("stateVarName", family)
                .option("readChangeFeed", "true")
                .option("changeStartBatchId", start)
                .option("changeEndBatchId", n)
                .load(checkpoint)
            )
            names = [f.name for f in feed.schema["key"].dataType.fields][:key_count]
            cond = null_safe_match((F.col("key")[f], F.col(f"__m{i}")) for i, f in enumerate(names))
            hits = feed.join(F.broadcast(matched), on=cond, how="left_semi") if cond is not None else feed
            found |= {int(r[0]) for r in hits.select("batch_id").distinct().collect()}
        except Exception as exc:  # noqa: BLE001 - a variable Spark's feed cannot read: left out, said
            log.info("output batches of %s: state variable %r not read: %s", checkpoint, family, first_line(exc))
    return sorted(found)


def _new_values(
    spark: SparkSession,
    checkpoint: str,
    batch: int,
    op: OperatorRecord,
    op_index: int,
    targets: dict[str, Any],
    flagged: DataFrame,
    assignments: tuple[tuple[str, str], ...],
    spec: FunctionSpec | None,
    what: str,
) -> tuple[DataFrame | None, DataFrame | None]:
    """The matched keys' new stored values: of value families one row a key and family,
    ``__m<i>`` (the key), the family's name and its value as UnsafeRow bytes; of list and map
    families one row a key with all its new rows (collection_edit.py). None where nothing of
    that kind is set. ``targets``: where each state column is stored (``stored_targets``)."""
    keys = list(op.keys)
    shown = {c: c for c in flagged.columns if c not in keys and c not in (_MATCH, "batch_id")}
    function = op.kind == FunctionKind.FUNCTION.value  # (else a variable may be named 'attributes')
    attributes = {c for c, t in targets.items() if function and t.family == ATTRIBUTES_VAR}
    values = assigned_values(flagged, _MATCH, shown, keys, op, assignments, spec, attributes, what)
    edited = flagged.where(F.col(_MATCH)).select(
        *[named(k).alias(f"__m{i}") for i, k in enumerate(keys)], *[v.alias(_set(c)) for c, v in values.items()]
    )
    by_family: dict[str, list[str]] = {}
    collections: dict[str, tuple[str, str, str]] = {}
    for column in values:
        t = targets[column]
        if t.kind in COLLECTION_KINDS:
            collections[column] = (_set(column), t.family, t.kind)
        else:
            by_family.setdefault(t.family, []).append(column)
    rows = None
    if collections:
        rows = collection_rows(
            spark,
            checkpoint,
            batch,
            op,
            op_index,
            edited,
            collections,
            counted_lists(
                filesystem(spark), checkpoint, op_index, [f for _, f, k in collections.values() if k == "ListState"]
            ),
            batch_time_ms(spark, checkpoint, batch),
            what,
        )
    added = set(op.absent_attributes)
    frames = []
    for family, columns in by_family.items():
        raw = state_variable(spark, checkpoint, op_index, family, batch)
        vtype = raw.schema["value"].dataType
        stored = [f.name for f in vtype.fields]
        key_names = [f.name for f in raw.schema["key"].dataType.fields]
        # (an unkeyed function: Spark's key is one constant column, and every row matches)
        cond = null_safe_match((F.col("key")[f], F.col(f"__m{i}")) for i, f in enumerate(key_names[: len(keys)]))
        joined = raw.join(edited, on=cond, how="inner")
        stored_keys = joined.select(*[F.col(f"__m{i}").alias(f"__h{i}") for i in range(len(keys))])
        cond = null_safe_match((F.col(f"__m{i}"), F.col(f"__h{i}")) for i in range(len(keys)))
        lacking = edited.join(stored_keys, on=cond, how="left_anti").limit(1).collect()
        if lacking:
            key = ", ".join(f"{k}={lacking[0][f'__m{i}']!r}" for i, k in enumerate(keys))
            raise CheckpointError(
                f"{what}: SET {', '.join(columns)}: key {key} holds no stored value of '{family}' to set (an UPDATE "
                "changes stored values, it adds none); nothing was written"
            )
        whole = next((c for c in columns if targets[c].field is None), None)  # a struct variable, set whole
        by_field = {targets[c].field: c for c in columns if targets[c].field is not None}
        newly = [str(targets[c].field) for c in columns if c in added]
        if newly and ADDED not in stored:  # rows stored before it was added: NULL reads as its __init__ value
            nulls = edited.where(F.greatest(*[F.col(_set(c)).isNull() for c in columns if c in added], F.lit(False)))
            if nulls.limit(1).count():
                raise CheckpointError(
                    f"{what}: SET {', '.join(c for c in columns if c in added)} = NULL: the attribute was added after "
                    "the state began, and this checkpoint's rows read a NULL there as its __init__ value; set a "
                    "value, or migrate the state (ks.migrate_state); nothing was written"
                )
        parts = []
        for f in stored:
            if f == ADDED and newly:
                held = F.coalesce(F.col("value")[ADDED], F.array().cast("array<string>"))
                parts.append(F.array_union(held, F.array(*[F.lit(x) for x in newly])).alias(f))
            elif f in by_field:
                parts.append(F.col(_set(by_field[f])).alias(f))
            elif whole is not None and f not in HIDDEN:
                parts.append(F.col(_set(whole))[f].alias(f))
            else:
                parts.append(F.col("value")[f].alias(f))
        value = F.struct(*parts).cast(vtype)
        if not (function and family == ATTRIBUTES_VAR):  # a variable set to NULL: unset (its row removed)
            value = F.when(F.col(_set(columns[0])).isNotNull(), value)
        frame = joined.select(*[f"__m{i}" for i in range(len(keys))], value.alias("__v"))
        frames.append(encoded(frame, "__v", vtype, _FAMILY, family, _BYTES))
    out = frames[0] if frames else None
    for f in frames[1:]:
        out = out.unionByName(f)
    return out, rows


def _set(column: str) -> str:
    """A SET value's column beside the stored rows (whose ``key`` / ``value`` a state column
    of that name would clash with)."""
    return f"__ks_set_{column}"


def _remove_version(fs: Any, state_root: str, version: int) -> None:
    """The files of state ``version`` in every partition directory (a crashed attempt's)."""
    for d in _all_partition_dirs(fs, state_root):
        for name in fs.list(d):
            if _version_of(name) == version:
                fs.delete(join(d, name), recursive=False)


def _purge(fs: Any, state_root: str, version: int) -> int:
    """In every partition directory under ``state_root``: remove the files of versions before
    ``version`` and the SST files its snapshot does not name. Returns the files removed."""
    removed = 0
    for d in _all_partition_dirs(fs, state_root):
        names = fs.list(d)
        snapshot = f"{version}.zip"
        if snapshot not in names:
            continue  # not rewritten (e.g. another store of the operator): left as it is
        keep = _snapshot_files(fs.read_bytes(join(d, snapshot)))
        for name in names:
            v = _version_of(name)
            if v is not None and v < version:
                removed += fs.delete(join(d, name), recursive=False)
        sst_dir = join(d, "SSTs")
        if fs.exists(sst_dir):
            for name in fs.list(sst_dir):
                if name.lstrip(".").removesuffix(".crc") not in keep:
                    removed += fs.delete(join(sst_dir, name), recursive=False)
    return removed


def _snapshot_files(data: bytes) -> set[str]:
    """The SST / log file names a RocksDB snapshot zip's ``metadata`` names."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        text = z.read("metadata").decode("utf-8")
    lines = text.splitlines()
    meta = json.loads(lines[-1] if lines and lines[0].startswith("v") else text)
    out = set()
    for entry in meta.get("sstFiles", []) + meta.get("logFiles", []):
        out.add(str(entry.get("dfsSstFileName") or entry.get("dfsLogFileName") or ""))
    return out

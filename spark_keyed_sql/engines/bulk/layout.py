"""How the bulk engine keeps state in a checkpoint: under ``<checkpoint>/bulk``
(``state/snapshots.py``) a base snapshot by state partition and the deltas of the batches
since, one row per key with typed columns (``state_row.py``); read as a table (the newest row
of each key wins, tombstones remove it), written by a migration as a new base."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...compat.names import named, quote
from ...runtime.broadcast import BroadcastState
from ...runtime.spec import FunctionSpec
from ...state.attributes import AttributeLayout
from ...state.checkpoint import CheckpointError, MigrationError, OperatorRecord, read_metadata
from ...state.commit_record import BaseMarker, BatchMetrics, CommitRecord
from ...state.encoding import dumps
from ...state.evolution import StoredField, compare, value_converter
from ...state.filesystems import filesystem
from ...state.fs import join
from ...state.snapshots import KEY_PREFIX, STATE_PREFIX, SnapshotStore, state_column_names
from ..base import Position, StateLayout
from ..broadcast_rows import BROADCAST_FILE, broadcast_frame
from .partitioning import PART, part_column
from .state_row import ATTRS_EXP, HAS_ATTRS, TIMERS, StateRowCodec, exp_column

__all__ = ["BulkLayout", "bulk_partitions", "evolved_commit", "state_frame", "write_base", "DELETED", "VERSION"]

log = logging.getLogger(__name__)

VERSION = "__ks_ver"  # the version a state row comes from (newest wins)
DELETED = "__ks_del"  # a delta row that removes the key's state


def _keys(schema: T.StructType) -> list[str]:
    return [f.name for f in schema.fields if f.name.startswith(KEY_PREFIX)]


def state_frame(
    spark: SparkSession,
    store: SnapshotStore,
    commit: CommitRecord,
    *,
    parts: list[int] | None = None,
    versions: bool = False,
    deltas_only: bool = False,
    since: int = -1,
) -> DataFrame:
    """The state of ``commit``: key columns, state columns and the state partition (``PART``),
    one row per key; ``parts`` keeps only those state partitions. With ``versions`` every stored
    row of those keys comes back, with ``VERSION`` and ``DELETED`` (what a rebuild loads);
    ``deltas_only``: only the rows of the deltas after the base, and after version ``since``
    (what a catch-up loads)."""
    if commit.schema is None:
        raise CheckpointError(f"internal: commit {commit.version} records no state schema")
    schema = T.StructType.fromJson(dict(commit.schema))
    frames = []
    if commit.base and not deltas_only:
        base = spark.read.parquet(store.path(commit.base))
        frames.append(base.withColumn(VERSION, F.lit(commit.base_version)).withColumn(DELETED, F.lit(False)))
    columns = [*schema.names, PART, DELETED]
    for version, rel in commit.delta_dirs:
        if deltas_only and version <= since:
            continue
        delta = spark.read.schema(
            T.StructType(
                [*schema.fields, T.StructField(DELETED, T.BooleanType()), T.StructField(PART, T.IntegerType())]
            )
        ).parquet(store.path(rel))
        frames.append(delta.select(*columns).withColumn(VERSION, F.lit(version)))
    if not frames:
        empty = T.StructType(
            [
                *schema.fields,
                T.StructField(PART, T.IntegerType()),
                T.StructField(DELETED, T.BooleanType()),
                T.StructField(VERSION, T.LongType()),
            ]
        )
        frames.append(spark.createDataFrame([], empty))
    out = frames[0].select(*columns, VERSION)
    for f in frames[1:]:
        out = out.unionByName(f.select(*columns, VERSION))
    if parts is not None:
        out = out.where(F.col(PART).isin(parts))
    if versions or len(frames) == 1 and not commit.deltas:
        return out if versions else out.drop(VERSION, DELETED)
    keys = _keys(schema)
    newest = Window.partitionBy(*keys).orderBy(F.col(VERSION).desc()) if keys else Window.orderBy(F.col(VERSION).desc())
    return (
        out.withColumn("__ks_rank", F.row_number().over(newest))
        .where((F.col("__ks_rank") == 1) & ~F.col(DELETED))
        .drop("__ks_rank", VERSION, DELETED)
    )


def _stored_fields(schema: T.StructType, codec: StateRowCodec) -> tuple[list[StoredField], list[StoredField]]:
    """(attributes, state variables) of a snapshot schema, by the names ``codec`` knows: a
    variable's value column, its kind from its Spark type (the element / value type as the
    layout records it)."""
    attrs, variables = [], []
    for f in schema.fields:
        if not f.name.startswith(STATE_PREFIX) or f.name in (HAS_ATTRS, ATTRS_EXP, TIMERS) or f.name.endswith("__exp"):
            continue
        name = f.name[len(STATE_PREFIX) :]
        if codec.layout is not None:
            attrs.append(StoredField(name, f.dataType))
        elif isinstance(f.dataType, T.ArrayType):
            variables.append(StoredField(name, f.dataType.elementType, kind="list"))
        elif isinstance(f.dataType, T.MapType):
            variables.append(StoredField(name, f.dataType.valueType, kind="map", key_type=f.dataType.keyType))
        else:
            variables.append(StoredField(name, f.dataType, kind="value"))
    return attrs, variables


def _codec_fields(codec: StateRowCodec) -> tuple[list[StoredField], list[StoredField]]:
    """(attributes, state variables) of ``codec``, as ``_stored_fields`` reads a schema."""
    return _stored_fields(codec.schema, codec)


def write_base(store: SnapshotStore, frame: DataFrame, version: int) -> str:
    """``frame`` (state rows with their ``PART``) written as a new base snapshot directory of
    ``version``, one directory per state partition; returns it, relative to bulk/. Marking it
    a base (or not) is the caller's: a compaction, a migration, a class's new layout."""
    base = store.new_base(version)
    frame.repartition(PART).write.partitionBy(PART).parquet(store.path(base))
    return base


def evolved_commit(
    spark: SparkSession, store: SnapshotStore, commit: CommitRecord, codec: StateRowCodec, function: str
) -> CommitRecord | None:
    """``commit``'s state in ``codec``'s layout when the class changed since it was written (None
    when the layout is the same: the fast path). Each stored column reaches the attribute /
    variable of its name (``state/evolution.py``): a new attribute takes its ``__init__`` value
    in keys that hold attributes, a new variable or expiry column is unset, a removed one is
    dropped, a widened one cast. Written as a base snapshot of ``commit.version`` that no
    commit names yet and no marker makes a compaction base (so an older class running on this
    checkpoint never sees it); returned as a commit record to continue from, read only by
    the step that commits next (which names the base: every commit's base and deltas then
    share its schema). Its tokens name no local store, so every partition is fed from it."""
    if commit.schema is None:
        return None
    stored = T.StructType.fromJson(dict(commit.schema))
    if _state_shape(stored) == _state_shape(codec.schema):
        return None
    old_attrs, old_vars = _stored_fields(stored, codec)
    new_attrs, new_vars = _codec_fields(codec)
    renames, converters = codec.spec.renames, codec.spec.converters
    # (refuses what cannot be carried)
    attr_change = compare(function, old_attrs, new_attrs, "state attribute", renames, converters)
    var_change = compare(function, old_vars, new_vars, "state variable", renames, converters)
    # each state column of the new layout -> the stored column its values come from
    source = {f.name: f.name for f in codec.fields}
    for new_name, old_name in {**attr_change.renamed, **var_change.renamed}.items():
        source[STATE_PREFIX + new_name] = STATE_PREFIX + old_name
        source[exp_column(new_name)] = exp_column(old_name)
    was_field = {f.name: f for f in old_attrs + old_vars}
    now_field = {f.name: f for f in new_attrs + new_vars}
    convert = {
        STATE_PREFIX + n: value_converter(function, was_field[change.source(n)], now_field[n], converters[n])
        for change in (attr_change, var_change)
        for n in change.converted
    }
    have = {f.name: f.dataType for f in stored.fields}
    frame = state_frame(spark, store, commit)
    keys = _keys(stored)
    cols: list[Any] = [F.col(k) for k in keys]
    layout = codec.layout
    added = attr_change.added
    if added:  # the __init__ values of the new attributes, as stored (typed, or JSON), in a one-row frame
        assert layout is not None
        fresh = dict(zip(layout.names, layout.fresh_row))
        schema = T.StructType(
            [T.StructField(f"__ks_init_{i}", codec.schema[STATE_PREFIX + n].dataType) for i, n in enumerate(added)]
        )
        init = spark.createDataFrame([tuple(fresh[n] for n in added)], schema)
        frame = frame.crossJoin(F.broadcast(init))
    for f in codec.fields:
        was = source[f.name]
        if f.name in convert:
            col = F.udf(convert[f.name], f.dataType)(F.col(was))
        elif was in have:
            col = F.col(was) if have[was] == f.dataType else F.col(was).cast(f.dataType)
        elif layout is not None and f.name[len(STATE_PREFIX) :] in added:
            i = added.index(f.name[len(STATE_PREFIX) :])
            col = F.when(F.col(HAS_ATTRS), F.col(f"__ks_init_{i}")).otherwise(F.lit(None).cast(f.dataType))
        else:
            col = F.lit(None).cast(f.dataType)
        cols.append(col.alias(f.name))
    base = write_base(store, frame.select(*cols, F.col(PART)), commit.version)
    rows = spark.read.parquet(store.path(base)).count()
    log.info(
        "checkpoint %s: %s's state (version %d, %d keys) rewritten by name for the class's new layout",
        store.checkpoint,
        function,
        commit.version,
        rows,
    )
    key_fields = [f for f in stored.fields if f.name in keys]
    return dataclasses.replace(
        commit,
        attempt=f"evolved-{base.rsplit('-', 1)[-1]}",
        schema=T.StructType(key_fields + codec.fields).jsonValue(),
        base=base,
        base_version=commit.version,
        base_rows=rows,
        base_bytes=store.fs.size(store.path(base)),
        deltas=(),
        stores={},
    )


def _state_shape(schema: T.StructType) -> list[tuple[str, str]]:
    """The state columns of a snapshot schema, in order, by name and type (nullability aside:
    a migration's snapshot records other nullability for the same layout)."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields if not f.name.startswith(KEY_PREFIX)]


def _cast_checked(df: DataFrame, column: str, target: T.DataType, where: str) -> Any:
    """Cast ``column`` to ``target``, refusing a cast that would turn values into NULL."""
    src = df.schema[column].dataType
    if src == target:
        return named(column)
    # SQL's try_cast: Column.try_cast came with Spark 4.0
    converted = F.expr(f"try_cast({quote(column)} AS {target.simpleString()})")
    lost = df.where(named(column).isNotNull() & converted.isNull()).limit(1).collect()
    if lost:
        raise MigrationError(
            f"{where}: column '{column}' is {src.simpleString()}, the new state needs {target.simpleString()}, and "
            f"value {lost[0][column]!r} does not convert; change it in transform="
        )
    return named(column).cast(target)


def bulk_partitions(checkpoint: str, spark: SparkSession | None = None) -> int | None:
    """The partition count a migration chose for a bulk checkpoint (None: the session's)."""
    try:
        meta = read_metadata(checkpoint, spark)
    except CheckpointError:
        return None
    if not meta:
        return None
    return next((o.partitions for o in meta.operators if o.partitions), None)


class BulkLayout(StateLayout):
    edits_state = True

    def _commit(self, spark: SparkSession, checkpoint: str, batch_id: int | None):
        store = SnapshotStore(checkpoint, spark)
        commit = store.get(int(batch_id)) if batch_id is not None else store.latest()
        if commit is None:
            raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
        return store, commit

    def read(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None, batch_id: int | None
    ) -> DataFrame:
        assert op is not None
        store, commit = self._commit(spark, checkpoint, batch_id)
        df = state_frame(spark, store, commit)
        keys = [F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op.keys)]
        cols = [F.col(c).alias(n) for c, n in state_column_names(df.columns).items()]
        return df.select(*keys, *cols, F.lit(commit.version).cast("long").alias("batch_id"))

    def read_broadcast(self, spark: SparkSession, checkpoint: str, name: str, batch_id: int | None) -> DataFrame:
        store, commit = self._commit(spark, checkpoint, batch_id)
        if not commit.broadcast:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} keeps no broadcast state (batch {commit.version}): its query has no "
                "broadcast input"
            )
        text = store.fs.read_bytes(join(store.path(commit.broadcast), BROADCAST_FILE)).decode()
        return broadcast_frame(
            spark, BroadcastState.from_json(text), name, commit.version, f"read_state({checkpoint!r}, broadcast=...)"
        )

    def batch_range(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None
    ) -> tuple[int, int]:
        versions = [c.version for c in SnapshotStore(checkpoint, spark).commits()]
        if not versions:
            raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
        return versions[0], versions[-1]

    def position(self, spark: SparkSession, checkpoint: str, op: OperatorRecord) -> Position:
        store = SnapshotStore(checkpoint, spark)
        latest = store.latest()
        if latest is None:
            raise MigrationError(f"checkpoint {checkpoint!r} holds no committed state to migrate")
        commits = [int(f) for f in filesystem(spark).list(join(checkpoint, "commits")) if f.isdigit()]
        broadcast = None
        if latest.broadcast:  # carried by a migration as it is
            broadcast = store.fs.read_bytes(join(store.path(latest.broadcast), BROADCAST_FILE)).decode()
        return Position(latest.version, max(commits) if commits else None, latest.watermark_ms, broadcast)

    def timers(self, spark: SparkSession, checkpoint: str, op: OperatorRecord, version: int) -> DataFrame | None:
        store = SnapshotStore(checkpoint, spark)
        snap = state_frame(spark, store, store.get(version))
        return snap.select(
            *[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op.keys)], F.col(TIMERS).alias("timers")
        )

    def edit(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: OperatorRecord | None,
        kind: str,
        where: str,
        assignments: tuple[tuple[str, str], ...],
        spec: FunctionSpec | None,
        engine: str,
        request: str | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        from .erase import edit_state  # (it builds on this module)

        if op is None:
            raise CheckpointError(f"checkpoint {checkpoint!r} has no spark-keyed-sql metadata; nothing to edit")
        return edit_state(spark, checkpoint, op, kind, where, assignments, spec, request, before_commit)

    def applied_edit(self, spark: SparkSession, checkpoint: str, request: str) -> dict[str, Any] | None:
        from .erase import finish_erase

        for c in reversed(SnapshotStore(checkpoint, spark).commits()):
            if c.edit is not None and c.edit.get("request") == request:
                finish_erase(spark, checkpoint)  # what its writer, killed after the commit, left
                audit = {k: v for k, v in c.edit.items() if k != "request"}
                return audit | {"checkpoint": checkpoint, "files_removed": 0, "seconds": None}
        return None

    def erased_before(self, spark: SparkSession, checkpoint: str) -> int | None:
        return SnapshotStore(checkpoint, spark).erased_before()

    def preview(
        self, spark: SparkSession, op: OperatorRecord, target: FunctionSpec, state: DataFrame, where: str
    ) -> DataFrame:
        # the snapshot columns write stores (and checks), named back as read names them
        rows = state.select(*_state_columns(state, list(op.keys), StateRowCodec(target), target, where))
        return rows.select(
            *[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op.keys)],
            *[F.col(c).alias(n) for c, n in state_column_names(rows.columns).items()],
        )

    def write(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: OperatorRecord,
        target: FunctionSpec,
        state: DataFrame,
        timers: DataFrame | None,
        position: Position,
        partitions: int | None,
        where: str,
        before_commit: Callable[[], None],
    ) -> dict[str, Any]:
        """The state checked against ``target``'s state row (missing attributes take their
        ``__init__`` value, extra columns are refused, types cast where lossless), written as the
        snapshot of ``position.version`` and committed. No partition count is fixed in the
        snapshot, so any number of partitions can be given."""
        keys = list(op.keys)
        codec = StateRowCodec(target)
        snapshot = _with_timers(state.select(*_state_columns(state, keys, codec, target, where)), keys, timers, codec)
        store = SnapshotStore(checkpoint, spark)
        n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
        marker, next_timer = _write_base(spark, store, snapshot, len(keys), position.version, n)
        broadcast = None
        if position.broadcast is not None:
            broadcast = f"steps/{position.version}-migrated/broadcast"
            store.fs.mkdirs(store.path(broadcast))
            store.fs.create_text(join(store.path(broadcast), BROADCAST_FILE), position.broadcast, overwrite=True)
        before_commit()
        store.commit(
            CommitRecord(
                version=position.version,
                attempt="migrated",
                partitions=n,
                function=target.name,
                schema=snapshot.schema.jsonValue(),
                base=marker.dir,
                base_version=position.version,
                base_rows=marker.rows,
                base_bytes=marker.bytes,
                deltas=(),
                stores={},
                spark_batch=position.spark_batch,
                watermark_ms=position.watermark_ms,
                evict_watermark_ms=position.watermark_ms,
                next_timer_ms=next_timer,
                next_expiry_ms=None,
                metrics=BatchMetrics(state_rows=marker.rows),
                broadcast=broadcast,
            )
        )
        return {"keys": marker.rows, "partitions": n}


def _state_columns(state: DataFrame, keys: list[str], codec: StateRowCodec, target: FunctionSpec, where: str) -> list:
    """Validate ``state`` (a table with ``read_state``'s columns) against ``target``'s state row
    and build the row's columns from it: each by name (case-insensitive), cast where lossless;
    an attribute it lacks takes its ``__init__`` value, a variable it lacks is unset; a column
    that is not state is refused."""
    lower = {c.lower(): c for c in state.columns}
    by_name = {f.name: f.dataType for f in codec.fields}
    cols: list[Any] = [named(lower[k.lower()]).alias(f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)]
    known: set[str] = {k.lower() for k in keys}
    if codec.layout is not None:
        layout: AttributeLayout = codec.layout
        cols.append(F.lit(True).alias(HAS_ATTRS))
        for n in layout.names:
            col = STATE_PREFIX + n
            if n.lower() in lower:
                known.add(n.lower())
                if layout.is_encoded(n) and state.schema[lower[n.lower()]].dataType != T.StringType():
                    raise MigrationError(
                        f"{where}: attribute '{n}' is stored as its JSON encoding (a string column); column "
                        f"'{lower[n.lower()]}' is {state.schema[lower[n.lower()]].dataType.simpleString()}. "
                        "Produce it with to_json or give the attribute a type annotation"
                    )
                cols.append(_cast_checked(state, lower[n.lower()], by_name[col], where).alias(col))
            else:  # a new attribute: the value __init__ gives it
                v = layout.template[n]
                lit = F.lit(dumps(v, f"attribute {n}")) if layout.is_encoded(n) else F.lit(v)
                cols.append(lit.cast(by_name[col]).alias(col))
        if target.ttl_ms is not None:
            cols.append(F.lit(None).cast("long").alias(ATTRS_EXP))
    else:
        for name, d in codec.descriptors.items():
            col = STATE_PREFIX + name
            if name.lower() in lower:
                known.add(name.lower())
                cols.append(_cast_checked(state, lower[name.lower()], by_name[col], where).alias(col))
            else:
                cols.append(F.lit(None).cast(by_name[col]).alias(col))
            if d.ttl_ms is not None:
                cols.append(F.lit(None).cast(by_name[f"{col}__exp"]).alias(f"{col}__exp"))  # the TTL clock restarts
    extra = [c for c in state.columns if c.lower() not in known]
    if extra:
        raise MigrationError(
            f"{where}: column(s) {extra} are not state of {target.cls.__name__} "
            f"(its state: {', '.join(n for n in (codec.layout.names if codec.layout else codec.descriptors))}); "
            "drop or rename them in transform="
        )
    return cols


def _with_timers(snapshot: DataFrame, keys: list[str], timers: DataFrame | None, codec: StateRowCodec) -> DataFrame:
    """The snapshot rows with each key's timers (a table of key columns and ``timers``), in the
    snapshot's column order."""
    key_cols = [f"{KEY_PREFIX}{i}" for i in range(len(keys))]
    if timers is not None:
        renamed = timers.select(
            *[named(k).alias(f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)], F.col("timers").alias(TIMERS)
        )
        snapshot = snapshot.join(renamed, on=key_cols, how="left")
    else:
        snapshot = snapshot.withColumn(TIMERS, F.lit(None).cast("array<bigint>"))
    return snapshot.select(*key_cols, *codec.names)


def _write_base(
    spark: SparkSession, store: SnapshotStore, snapshot: DataFrame, n_keys: int, version: int, partitions: int
) -> tuple[BaseMarker, int | None]:
    """Write ``snapshot`` as the base snapshot of ``version`` (hash-partitioned by key into
    ``partitions``) and mark it; returns its marker and the earliest timer it holds (so a stream
    on it fires them without input)."""
    key_cols = [f"{KEY_PREFIX}{i}" for i in range(n_keys)]
    base = write_base(store, snapshot.withColumn(PART, part_column(key_cols, partitions)), version)
    written = spark.read.parquet(store.path(base))
    marker = BaseMarker(version, base, written.count(), store.fs.size(store.path(base)))
    store.mark_base(marker)
    next_timer = written.select(F.min(F.array_min(F.col(TIMERS)))).first()[0] if TIMERS in written.columns else None
    return marker, next_timer

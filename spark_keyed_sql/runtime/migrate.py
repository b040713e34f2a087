"""``ks.migrate_state``: rewrite a checkpoint's keyed state into a new checkpoint that continues
from the same input position (Flink's State Processor "modify" role).

The state is read as a table (``read_state``), optionally transformed with SQL over a view
named ``state``, checked against the target function's state layout (missing attributes take
their ``__init__`` value, extra columns are refused, types are cast where the cast is lossless),
and written as the bulk engine's snapshot at the source's last committed batch. Spark's own
position files (offsets, commits, sources, metadata) are copied, so the new checkpoint's next
batch is the source checkpoint's next batch: nothing re-read, nothing skipped. The bulk engine
fixes no partition count in its state, so any number of partitions can be given.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..api.errors import KeyedSQLError
from ..state.attributes import AttributeLayout
from ..state.checkpoint import CheckpointError, read_metadata, write_metadata
from ..state.encoding import dumps
from ..state.fs import CheckpointFS, join
from ..state.reader import read_state
from ..state.snapshots import KEY_PREFIX, STATE_PREFIX, SnapshotStore
from .bulk_state import ATTRS_EXP, HAS_ATTRS, TIMERS, StateRowCodec
from .spec import FunctionSpec

__all__ = ["migrate_state", "MigrationError", "SPARK_POSITION_FILES"]

SPARK_POSITION_FILES = ("offsets", "commits", "sources", "metadata")


class MigrationError(KeyedSQLError):
    """State that cannot be moved as asked (the message says what and why)."""


def _source_position(spark: SparkSession, checkpoint: str, op: dict) -> tuple[int, int | None, int | None]:
    """(state batch id, last Spark batch, watermark ms) of the source checkpoint."""
    fs = CheckpointFS(spark)
    commits = [int(f) for f in fs.list(join(checkpoint, "commits")) if f.isdigit()]
    last_spark = max(commits) if commits else None
    if op.get("engine") == "bulk":
        latest = SnapshotStore(checkpoint, spark).latest()
        if latest is None:
            raise MigrationError(f"checkpoint {checkpoint!r} holds no committed state to migrate")
        return latest.version, last_spark, latest.watermark_ms
    if last_spark is None:
        raise MigrationError(f"checkpoint {checkpoint!r} holds no committed batch to migrate")
    watermark = None
    try:
        meta = json.loads(fs.read_text(join(checkpoint, "offsets", str(last_spark))).splitlines()[1])
        watermark = meta.get("batchWatermarkMs") or None
    except (OSError, ValueError, IndexError):
        pass
    return last_spark, last_spark, watermark


def _cast_checked(df: DataFrame, column: str, target: T.DataType, where: str) -> Any:
    """Cast ``column`` to ``target``, refusing a cast that would turn values into NULL."""
    src = df.schema[column].dataType
    if src == target:
        return F.col(column)
    lost = df.where(F.col(column).isNotNull() & F.col(column).try_cast(target).isNull()).limit(1).collect()
    if lost:
        raise MigrationError(
            f"{where}: column '{column}' is {src.simpleString()}, the new state needs {target.simpleString()}, and "
            f"value {lost[0][column]!r} does not convert; change it in transform="
        )
    return F.col(column).cast(target)


def migrate_state(
    spark: SparkSession,
    src: str,
    dst: str,
    target: FunctionSpec,
    *,
    function: str | None = None,
    transform: str | None = None,
    partitions: int | None = None,
) -> dict[str, Any]:
    fs = CheckpointFS(spark)
    fs.probe(src)
    fs.probe(dst, "destination checkpoint")
    meta = read_metadata(src, spark)
    if meta is None:
        raise MigrationError(f"checkpoint {src!r} has no spark-keyed-sql metadata (was it written by ks.start / ks.run?)")
    ops = meta["operators"]
    if function is None and len(ops) > 1:
        raise MigrationError(f"checkpoint {src!r} holds several functions {[o['function'] for o in ops]}; pass function=...")
    op = next((o for o in ops if function is None or o["function"].lower() == function.lower()), None)
    if op is None:
        raise MigrationError(f"checkpoint {src!r} has no function {function!r}")
    if fs.list(dst):
        raise MigrationError(f"destination checkpoint {dst!r} is not empty; migrate into a new directory")
    if partitions is not None and partitions < 1:
        raise MigrationError(f"partitions must be a positive number, got {partitions}")
    where = f"migrate_state({src!r} -> {dst!r}, function '{target.name}')"
    version, last_spark, watermark = _source_position(spark, src, op)

    state = read_state(spark, src, op["function"]).drop("batch_id")
    keys = list(op["keys"])
    src_timers = None
    if op.get("engine") == "bulk":
        snap = spark.read.parquet(SnapshotStore(src, spark).state_dir(version))
        src_timers = snap.select(*[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(keys)], F.col(TIMERS))
    elif target.has_timers:
        raise MigrationError(
            f"{where}: {target.cls.__name__} uses timers, and timers registered in a transformWithState checkpoint "
            "are not readable as a table; let them fire first, or bootstrap a new query with INITIAL STATE FROM"
        )
    if transform:
        state.createOrReplaceTempView("state")
        state = spark.sql(transform)
    lower = {c.lower(): c for c in state.columns}
    missing_keys = [k for k in keys if k.lower() not in lower]
    if missing_keys:
        raise MigrationError(f"{where}: key column(s) {missing_keys} missing from the state (columns: {', '.join(state.columns)})")

    codec = StateRowCodec(target)
    by_name = {f.name: f.dataType for f in codec.fields}
    cols: list[Any] = [F.col(lower[k.lower()]).alias(f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)]
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
                        f"'{lower[n.lower()]}' is {state.schema[lower[n.lower()]].dataType.simpleString()}. Produce it with to_json "
                        "or give the attribute a type annotation"
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
    snapshot = state.select(*cols)
    if src_timers is not None:
        snapshot = snapshot.join(src_timers.select(*[F.col(k).alias(f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)], TIMERS),
                                 on=[f"{KEY_PREFIX}{i}" for i in range(len(keys))], how="left")
    else:
        snapshot = snapshot.withColumn(TIMERS, F.lit(None).cast("array<bigint>"))
    snapshot = snapshot.select(*[f"{KEY_PREFIX}{i}" for i in range(len(keys))], *codec.names)

    # write: snapshot first, then Spark's position files, then the commit and our metadata
    store = SnapshotStore(dst, spark)
    fs.mkdirs(dst)
    state_dir = join(store.attempt_dir(version), "state")
    n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    (snapshot.repartition(n, *[f"{KEY_PREFIX}{i}" for i in range(len(keys))]) if keys else snapshot.coalesce(1)).write.parquet(state_dir)
    for name in SPARK_POSITION_FILES:
        if fs.exists(join(src, name)):
            fs.copy(join(src, name), join(dst, name))
    rows = spark.read.parquet(state_dir).count()
    store.commit(version, {"spark_batch": last_spark, "watermark_ms": watermark, "migrated_from": src, "state_rows": rows,
                           "function": target.name, "input_rows": 0, "output_rows": 0}, state_dir)
    new_op = dict(op) | {"function": target.name, "engine": "bulk", "partitions": partitions,
                         "class": f"{target.cls.__module__}.{target.cls.__qualname__}"}
    write_metadata(dst, [new_op if o is op else o for o in ops], spark)
    return {"keys": rows, "batch_id": version, "spark_batch": last_spark, "partitions": n}


def bulk_partitions(checkpoint: str, spark: SparkSession | None = None) -> int | None:
    """The partition count a migration chose for a bulk checkpoint (None: the session's)."""
    try:
        meta = read_metadata(checkpoint, spark)
    except CheckpointError:
        return None
    if not meta:
        return None
    return next((o.get("partitions") for o in meta["operators"] if o.get("partitions")), None)

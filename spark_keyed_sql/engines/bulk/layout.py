"""How the bulk engine keeps state in a checkpoint: versioned Parquet snapshots under
``<checkpoint>/bulk`` (``state/snapshots.py``), one row per key with typed columns
(``state_row.py``); read as a table, and written by a migration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...runtime.spec import FunctionSpec
from ...state.attributes import AttributeLayout
from ...state.checkpoint import CheckpointError, MigrationError, read_metadata
from ...state.encoding import dumps
from ...state.fs import CheckpointFS, join
from ...state.snapshots import KEY_PREFIX, STATE_PREFIX, SnapshotStore, state_column_names
from ..base import Position, StateLayout
from .state_row import ATTRS_EXP, HAS_ATTRS, TIMERS, StateRowCodec

__all__ = ["BulkLayout", "bulk_partitions"]


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


def bulk_partitions(checkpoint: str, spark: SparkSession | None = None) -> int | None:
    """The partition count a migration chose for a bulk checkpoint (None: the session's)."""
    try:
        meta = read_metadata(checkpoint, spark)
    except CheckpointError:
        return None
    if not meta:
        return None
    return next((o.get("partitions") for o in meta["operators"] if o.get("partitions")), None)


class BulkLayout(StateLayout):
    def _commit(self, spark: SparkSession, checkpoint: str, batch_id: int | None):
        store = SnapshotStore(checkpoint, spark)
        commit = store.get(int(batch_id)) if batch_id is not None else store.latest()
        if commit is None:
            raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
        return store, commit

    def read(self, spark: SparkSession, checkpoint: str, op_index: int, op: dict | None, batch_id: int | None) -> DataFrame:
        assert op is not None
        store, commit = self._commit(spark, checkpoint, batch_id)
        df = spark.read.parquet(store.state_dir(commit.version))
        keys = [F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op["keys"])]
        cols = [F.col(c).alias(n) for c, n in state_column_names(df.columns).items()]
        return df.select(*keys, *cols, F.lit(commit.version).cast("long").alias("batch_id"))

    def batch_range(self, spark: SparkSession, checkpoint: str, op_index: int, op: dict | None) -> tuple[int, int]:
        versions = [c.version for c in SnapshotStore(checkpoint, spark).commits()]
        if not versions:
            raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
        return versions[0], versions[-1]

    def position(self, spark: SparkSession, checkpoint: str, op: dict) -> Position:
        latest = SnapshotStore(checkpoint, spark).latest()
        if latest is None:
            raise MigrationError(f"checkpoint {checkpoint!r} holds no committed state to migrate")
        commits = [int(f) for f in CheckpointFS(spark).list(join(checkpoint, "commits")) if f.isdigit()]
        return Position(latest.version, max(commits) if commits else None, latest.watermark_ms)

    def timers(self, spark: SparkSession, checkpoint: str, op: dict, version: int) -> DataFrame | None:
        snap = spark.read.parquet(SnapshotStore(checkpoint, spark).state_dir(version))
        return snap.select(*[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op["keys"])], F.col(TIMERS).alias("timers"))

    def write(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: dict,
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
        keys = list(op["keys"])
        lower = {c.lower(): c for c in state.columns}
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
                            f"'{lower[n.lower()]}' is {state.schema[lower[n.lower()]].dataType.simpleString()}. Produce it with "
                            "to_json or give the attribute a type annotation"
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
        key_cols = [f"{KEY_PREFIX}{i}" for i in range(len(keys))]
        snapshot = state.select(*cols)
        if timers is not None:
            renamed = timers.select(*[F.col(k).alias(f"{KEY_PREFIX}{i}") for i, k in enumerate(keys)], F.col("timers").alias(TIMERS))
            snapshot = snapshot.join(renamed, on=key_cols, how="left")
        else:
            snapshot = snapshot.withColumn(TIMERS, F.lit(None).cast("array<bigint>"))
        snapshot = snapshot.select(*key_cols, *codec.names)

        store = SnapshotStore(checkpoint, spark)
        state_dir = join(store.attempt_dir(position.version), "state")
        n = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
        (snapshot.repartition(n, *key_cols) if keys else snapshot.coalesce(1)).write.parquet(state_dir)
        rows = spark.read.parquet(state_dir).count()
        before_commit()
        store.commit(position.version, {"spark_batch": position.spark_batch, "watermark_ms": position.watermark_ms,
                                        "state_rows": rows, "function": target.name, "input_rows": 0, "output_rows": 0},
                     state_dir)
        return {"keys": rows, "partitions": n}

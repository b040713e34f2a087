"""Keyed state of a checkpoint as a table: one row per key, one column per state variable or
attribute (lists as arrays, maps as maps), plus the batch id it reflects. Built on Spark's own
``statestore`` and ``state-metadata`` readers."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .checkpoint import CheckpointError, read_metadata
from .fs import CheckpointFS
from .snapshots import KEY_PREFIX, SnapshotStore, state_column_names

__all__ = ["read_state", "read_state_changes"]

ATTRIBUTES_VAR = "attributes"
EXPIRES = "__expires_ms"


def _unwrapper(names: list[str]):
    """Stored element (``struct<value>`` for scalars, the struct itself otherwise, without the
    expiry field) -> the user's value."""
    if names == ["value"]:
        return lambda x: x["value"]
    return lambda x: F.struct(*[x[n].alias(n) for n in names])


def _entry(vfn):
    return lambda e: F.struct(e["key"]["value"].alias("key"), vfn(e["value"]).alias("value"))


def _operator(meta: dict | None, function: str | None, checkpoint: str) -> tuple[int, dict | None]:
    if meta is None:
        if function is not None:
            raise CheckpointError(f"checkpoint {checkpoint!r} has no spark-keyed-sql metadata; cannot pick function {function!r}")
        return 0, None
    ops = meta["operators"]
    if function is None:
        if len(ops) > 1:
            names = [o["function"] for o in ops]
            raise CheckpointError(f"checkpoint {checkpoint!r} holds several functions {names}; pass function=...")
        return 0, ops[0]
    for i, o in enumerate(ops):
        if o["function"].lower() == function.lower():
            return i, o
    raise CheckpointError(f"checkpoint {checkpoint!r} has no function {function!r} (it has {[o['function'] for o in ops]})")


def _is_bulk(op: dict | None) -> bool:
    return bool(op) and op.get("engine") == "bulk"  # type: ignore[union-attr]


def _read_bulk(spark: SparkSession, checkpoint: str, op: dict, batch_id: int | None) -> DataFrame:
    store = SnapshotStore(checkpoint, spark)
    commit = store.get(int(batch_id)) if batch_id is not None else store.latest()
    if commit is None:
        raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
    df = spark.read.parquet(store.state_dir(commit.version))
    keys = [F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(op["keys"])]
    cols = [F.col(c).alias(n) for c, n in state_column_names(df.columns).items()]
    return df.select(*keys, *cols, F.lit(commit.version).cast("long").alias("batch_id"))


def _batch_range(spark: SparkSession, checkpoint: str, op_index: int, op: dict | None) -> tuple[int, int]:
    """The oldest and newest committed batch whose state the checkpoint keeps."""
    if _is_bulk(op):
        versions = [c.version for c in SnapshotStore(checkpoint, spark).commits()]
        if not versions:
            raise CheckpointError(f"checkpoint {checkpoint!r} holds no committed state yet")
        return versions[0], versions[-1]
    md = spark.read.format("state-metadata").load(checkpoint).collect()
    info = next(r for r in md if r.operatorId == op_index)
    return info.minBatchId, info.maxBatchId


def read_state(spark: SparkSession, checkpoint: str, function: str | None = None, batch_id: int | None = None) -> DataFrame:
    fs = CheckpointFS(spark)
    fs.probe(checkpoint)
    if not fs.is_dir(checkpoint):
        raise CheckpointError(f"checkpoint {checkpoint!r} does not exist")
    meta = read_metadata(checkpoint, spark)
    op_index, op = _operator(meta, function, checkpoint)
    if _is_bulk(op):
        return _read_bulk(spark, checkpoint, op, batch_id)  # type: ignore[arg-type]
    try:
        md = spark.read.format("state-metadata").load(checkpoint).collect()
    except Exception as exc:  # noqa: BLE001 - Spark's message is kept, wrapped in ours
        raise CheckpointError(f"checkpoint {checkpoint!r} has no readable state: {str(exc).splitlines()[0]}") from None
    rows = [r for r in md if r.operatorId == op_index]
    if not rows:
        raise CheckpointError(f"checkpoint {checkpoint!r} holds no stateful operator {op_index} (nothing committed yet?)")
    info = rows[0]
    batch = info.maxBatchId if batch_id is None else int(batch_id)
    if not info.minBatchId <= batch <= info.maxBatchId:
        raise CheckpointError(f"checkpoint {checkpoint!r} keeps batches {info.minBatchId}..{info.maxBatchId}; batch {batch} is not among them")
    props = json.loads(info.operatorProperties)
    variables = [v["stateName"] for v in props.get("stateVariables", [])]
    kinds = {v["stateName"]: v["stateVariableType"] for v in props.get("stateVariables", [])}
    key_names = op["keys"] if op else None

    def load(var: str, flatten: bool = True) -> DataFrame:
        reader = spark.read.format("statestore").option("operatorId", op_index).option("stateVarName", var).option("batchId", batch)
        if not flatten:
            reader = reader.option("flattenCollectionTypes", "false")
        return reader.load(checkpoint)

    frames: list[DataFrame] = []
    for var in variables:
        kind = kinds[var]
        if kind == "ValueState":
            df = load(var)
            fields = [f.name for f in df.schema["value"].dataType.fields if f.name != EXPIRES]
            if var == ATTRIBUTES_VAR and (op is None or op.get("kind") == "function"):
                cols = [F.col("value")[f].alias(f) for f in fields]
            elif fields == ["value"]:
                cols = [F.col("value")["value"].alias(var)]
            else:
                cols = [F.struct(*[F.col("value")[f].alias(f) for f in fields]).alias(var)]
            frames.append(df.select("key", *cols))
        elif kind == "ListState":
            df = load(var, flatten=False)
            elem = df.schema["list_value"].dataType.elementType
            fn = _unwrapper([f.name for f in elem.fields if f.name != EXPIRES])
            frames.append(df.select("key", F.transform("list_value", fn).alias(var)))
        elif kind == "MapState":
            df = load(var, flatten=False)
            vtype = df.schema["map_value"].dataType.valueType
            vfn = _unwrapper([f.name for f in vtype.fields if f.name != EXPIRES])
            entries = F.transform(F.map_entries("map_value"), _entry(vfn))
            frames.append(df.select("key", F.map_from_entries(entries).alias(var)))
    if not frames:
        raise CheckpointError(f"checkpoint {checkpoint!r}: operator {op_index} has no state variables")
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on="key", how="full_outer")
    key_fields = out.schema["key"].dataType.fields
    if key_names is None:
        key_names = [f.name for f in key_fields]
    key_cols: list[Any] = [] if op and not op["keys"] else [
        F.col("key")[f.name].alias(n) for f, n in zip(key_fields, key_names)
    ]
    rest = [c for c in out.columns if c != "key"]
    return out.select(*key_cols, *rest, F.lit(batch).cast("long").alias("batch_id"))


def read_state_changes(
    spark: SparkSession,
    checkpoint: str,
    function: str | None = None,
    from_batch: int | None = None,
    to_batch: int | None = None,
) -> DataFrame:
    """The state's change feed (Samza's changelog role) for batches ``from_batch < b <= to_batch``:
    key columns, ``variable``, ``change`` ('upsert' | 'delete'), ``new_value`` (JSON) and
    ``batch_id``. Without ``from_batch``, from the oldest batch the checkpoint keeps (batch 0
    counts as a change from empty state)."""
    latest = read_state(spark, checkpoint, function)  # validates checkpoint/function
    meta = read_metadata(checkpoint, spark)
    op_index, op_ = _operator(meta, function, checkpoint)
    min_batch, max_batch = _batch_range(spark, checkpoint, op_index, op_)
    lo = (min_batch - 1 if min_batch == 0 else min_batch) if from_batch is None else int(from_batch)
    hi = max_batch if to_batch is None else int(to_batch)
    if lo < -1 or hi > max_batch or lo >= hi:
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: cannot read changes for batches ({lo}, {hi}]; it keeps {min_batch}..{max_batch}"
        )
    state_cols = [c for c in latest.columns if c != "batch_id"]
    op = op_
    # without our metadata the key struct has one column per key field; read_state put them first
    n_keys = len(op["keys"]) if op else 1
    keys, variables = state_cols[:n_keys], state_cols[n_keys:]
    frames = []
    for b in range(lo + 1, hi + 1):
        cur = read_state(spark, checkpoint, function, b).drop("batch_id")
        prev = read_state(spark, checkpoint, function, b - 1).drop("batch_id") if b - 1 >= min_batch else None
        for var in variables:
            c = cur.select(*keys, F.to_json(F.struct(F.col(var).alias(var))).alias("__new"), F.col(var).isNull().alias("__cnull"))
            if prev is None:
                frames.append(
                    c.where(~F.col("__cnull")).select(*keys, F.lit(var).alias("variable"), F.lit("upsert").alias("change"),
                                                       F.col("__new").alias("new_value"), F.lit(b).cast("long").alias("batch_id"))
                )
                continue
            p = prev.select(*[F.col(k).alias(f"__p_{k}") for k in keys], F.to_json(F.struct(F.col(var).alias(var))).alias("__old"),
                            F.col(var).isNull().alias("__pnull"))
            cond = None
            for k in keys:
                e = F.col(k).eqNullSafe(F.col(f"__p_{k}"))
                cond = e if cond is None else cond & e
            j = c.join(p, on=cond, how="full_outer") if keys else c.crossJoin(p)
            key_out = [F.coalesce(F.col(k), F.col(f"__p_{k}")).alias(k) for k in keys]
            now_present = F.col("__new").isNotNull() & ~F.coalesce(F.col("__cnull"), F.lit(True))
            was_present = F.col("__old").isNotNull() & ~F.coalesce(F.col("__pnull"), F.lit(True))
            change = (
                F.when(now_present & (~was_present | (F.col("__new") != F.col("__old"))), F.lit("upsert"))
                .when(~now_present & was_present, F.lit("delete"))
            )
            frames.append(
                j.select(*key_out, F.lit(var).alias("variable"), change.alias("change"),
                         F.when(now_present, F.col("__new")).alias("new_value"), F.lit(b).cast("long").alias("batch_id"))
                .where(F.col("change").isNotNull())
            )
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out

"""An UPDATE's SET of a list or map state variable on a ``tws`` checkpoint (erase.py runs the
rewrite): the matched keys' new rows of each edited family, as Spark's state rewriter takes
them, and the pass over the rewriter's rows that puts them in place of the old ones.

A list variable is one row per element (key: the grouping key; Spark writes the first with a
put and merges the rest, in their order) plus, where Spark keeps one, its element count in the
``$rowCounter_<name>`` family; a map variable is one row per entry (key: the grouping key and
the entry's key, one composite row). A SET replaces all of a key's rows of the family: the old
ones are dropped and the new ones written beside the first row of that key the pass meets, in
any family — every family's rows of a key are in the partition whose store holds the key, so no
row moves between partitions (the rewriter writes each partition's rows into that partition's
store). NULL or an empty list / map clears the variable (no row). A value past TTL is stored with
the expiry a write at the edit's batch would give it (its processing time + the variable's TTL)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...compat.names import named
from ...state.checkpoint import CheckpointError, OperatorRecord
from ...state.fs import join
from ...state.reader import null_safe_match
from ..edit_values import key_text
from .layout import EXPIRES, state_variable
from .unsafe_row import encode_row

__all__ = ["COLLECTION_KINDS", "ROWS", "collection_rows", "counted_lists", "row_counter", "swapped"]

COLLECTION_KINDS = ("ListState", "MapState")
ROWS = "__ks_rows"  # a matched key's new rows: array<struct<f family, k key bytes, v value bytes>>
DROP = "__ks_drop"  # the families whose old rows of the key go
_ID, _DROP_ROW = "__ks_cid", "__ks_drop_row"
_ROW_TYPE = T.ArrayType(
    T.StructType(
        [
            T.StructField("f", T.StringType()),
            T.StructField("k", T.BinaryType()),
            T.StructField("v", T.BinaryType()),
        ]
    )
)
_COUNT = T.StructType([T.StructField("count", T.LongType())])


def row_counter(family: str) -> str:
    """Spark's family keeping a list variable's element count per key."""
    return "$rowCounter_" + family


def counted_lists(fs: Any, checkpoint: str, op_index: int, families: list[str]) -> set[str]:
    """Which of the list ``families`` Spark keeps an element count for (Spark 4.3 does, 4.2
    does not): those whose row counter family the operator's newest state schema file names
    (each name there as Java's ``writeUTF``: two bytes of length, then the name)."""
    d = join(checkpoint, "state", str(op_index), "_stateSchema", "default")
    names = [n for n in (fs.list(d) if families and fs.exists(d) else []) if n.split("_", 1)[0].isdigit()]
    if not names:
        return set()
    data = fs.read_bytes(join(d, max(names, key=lambda n: int(n.split("_", 1)[0]))))
    utf = {f: row_counter(f).encode() for f in families}
    return {f for f, name in utf.items() if struct.pack(">H", len(name)) + name in data}


def _stored(x: Column, names: list[str], expiry: int | None) -> Column:
    """A value as read_state shows it -> the stored struct (a scalar is ``struct<value>``)."""
    parts = [x.alias("value")] if names == ["value"] else [x[n].alias(n) for n in names]
    if expiry is not None:
        parts.append(F.lit(expiry).cast("long").alias(EXPIRES))
    return F.struct(*parts)


def _list_column(value: Column, names: list[str], expiry: int | None) -> Column:
    return F.transform(value, lambda x: _stored(x, names, expiry))


def _map_column(value: Column, names: list[str], expiry: int | None) -> Column:
    """A map as read_state shows it -> its entries as stored: ``k`` (``struct<value>``), ``v``."""
    return F.transform(
        F.map_entries(value),
        lambda e: F.struct(F.struct(e["key"].alias("value")).alias("k"), _stored(e["value"], names, expiry).alias("v")),
    )


def collection_rows(
    spark: SparkSession,
    checkpoint: str,
    batch: int,
    op: OperatorRecord,
    op_index: int,
    edited: DataFrame,
    columns: dict[str, tuple[str, str, str]],
    counted: set[str],
    batch_time_ms: int | None,
    what: str,
) -> DataFrame:
    """The matched keys' new rows of the edited collection families, one row a key:
    ``__m<i>`` (the key), ``ROWS`` and ``DROP``. ``edited``: the matched keys (``__m<i>``) with
    each SET column's checked new value under its ``columns`` entry's internal name;
    ``columns``: set column -> (its internal name, the family, the kind); ``counted``: the list
    families whose element count Spark keeps (``counted_lists``)."""
    keys = list(op.keys)
    key_cols = [f"__m{i}" for i in range(len(keys))]
    parts: list[tuple[str, str, str, bool, Any, Any]] = []  # (family, column, kind, counted, key type, value type)
    stored_cols = []
    gk_type: T.StructType | None = None
    for column, (internal, family, kind) in columns.items():
        raw = state_variable(spark, checkpoint, op_index, family, batch, flatten=False)
        gk_type = raw.schema["key"].dataType
        if kind == "ListState":
            vtype, ktype = raw.schema["list_value"].dataType.elementType, None
        else:
            mtype = raw.schema["map_value"].dataType
            vtype, ktype = mtype.valueType, mtype.keyType
        names = [n for n in vtype.names if n != EXPIRES]
        var = op.variable(column) or op.variable(family)  # (the name read_state shows, else the stored one)
        ttl = var.get("ttl_ms") if var is not None else op.ttl_ms
        expiry = None
        if EXPIRES in vtype.names:
            if ttl is None or batch_time_ms is None:
                missing = (
                    "the checkpoint's metadata records no TTL for it"
                    if ttl is None
                    else f"this checkpoint's offset log has no processing time for batch {batch}"
                )
                raise CheckpointError(
                    f"{what}: SET {column}: its entries carry an expiry (a TTL), and {missing}; nothing was written"
                )
            expiry = batch_time_ms + int(ttl)
        value = F.col(internal)
        if kind == "ListState":
            null = F.exists(value, lambda x: x.isNull())
            stored = _list_column(value, names, expiry).cast(T.ArrayType(vtype))
            parts.append((family, column, kind, family in counted, None, vtype))
        else:
            null = F.exists(F.map_values(value), lambda x: x.isNull())
            entry = T.StructType([T.StructField("k", ktype), T.StructField("v", vtype)])
            stored = _map_column(value, names, expiry).cast(T.ArrayType(entry))
            parts.append((family, column, kind, False, ktype, vtype))
        bad = edited.where(F.coalesce(null, F.lit(False))).select(*key_cols).limit(1).collect()
        if bad:
            row = {k: bad[0][c] for k, c in zip(keys, key_cols)}
            raise CheckpointError(
                f"{what}: SET {column}: the new value of key {key_text(op, row, keys)} holds a NULL "
                f"{'element' if kind == 'ListState' else 'map value'}, which Spark's {kind} cannot store; nothing "
                "was written"
            )
        stored_cols.append(stored.alias(f"__ks_c{len(stored_cols)}"))
    assert gk_type is not None
    frame = edited.select(*key_cols, *stored_cols)
    drop = sorted({p[0] for p in parts} | {row_counter(p[0]) for p in parts if p[3]})
    schema = T.StructType(
        [
            *[frame.schema[c] for c in key_cols],
            T.StructField(ROWS, _ROW_TYPE),
            T.StructField(DROP, T.ArrayType(T.StringType())),
        ]
    )
    unkeyed = tuple(0 for _ in gk_type.fields)
    composite: dict[str, T.StructType] = {
        p[0]: T.StructType([T.StructField("key", gk_type), T.StructField("userKey", p[4])])
        for p in parts
        if p[2] == "MapState"
    }

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            # (an unkeyed function's one group: Spark's key is the engine's constant column, 0)
            gks = list(zip(*[b.column(c).to_pylist() for c in key_cols])) if key_cols else [unkeyed] * b.num_rows
            stored = [b.column(f"__ks_c{j}").to_pylist() for j in range(len(parts))]
            out = []
            for i, gk in enumerate(gks):
                key = encode_row(gk_type, list(gk))
                rows = []
                for j, (family, _, kind, counted, _, vtype) in enumerate(parts):
                    items = stored[j][i] or []
                    if kind == "ListState":
                        rows += [(family, key, encode_row(vtype, [e.get(n) for n in vtype.names])) for e in items]
                        if counted and items:
                            rows.append((row_counter(family), key, encode_row(_COUNT, [len(items)])))
                    else:
                        kt = composite[family]
                        for e in items:
                            k = encode_row(kt, [list(gk), e["k"]])
                            rows.append((family, k, encode_row(vtype, [e["v"].get(n) for n in vtype.names])))
                out.append([{"f": f, "k": k, "v": v} for f, k, v in rows])
            yield pa.RecordBatch.from_arrays(
                [
                    *[b.column(c) for c in key_cols],
                    pa.array(out, type=pa.list_(_arrow_row())),
                    pa.array([drop] * len(gks), pa.list_(pa.string())),
                ],
                names=[f.name for f in schema.fields],
            )

    return frame.mapInArrow(encode, schema)


def _arrow_row() -> pa.DataType:
    return pa.struct([("f", pa.string()), ("k", pa.binary()), ("v", pa.binary())])


def swapped(df: DataFrame, collections: DataFrame, key_fields: list[str]) -> DataFrame:
    """The rewriter's rows with the matched keys' rows of the edited collection families
    replaced: a broadcast left join on ``partition_key`` (no shuffle; an unkeyed function's one
    group: every row), then one pass over each partition in Python that drops the old rows and
    writes a key's new rows beside the first row of the key it meets (so once a key, in the key's
    own partition)."""
    marked = collections.withColumn(_ID, F.monotonically_increasing_id())
    cond = null_safe_match((F.col("partition_key")[f], F.col(f"__m{i}")) for i, f in enumerate(key_fields))
    joined = df.join(F.broadcast(marked), on=cond, how="left")
    drop_row = F.col(_ID).isNotNull() & F.coalesce(
        F.array_contains(F.col(DROP), F.col("column_family_name")), F.lit(False)
    )
    names = df.columns
    frame = joined.select(*map(named, names), F.col(_ID), F.col(ROWS), drop_row.alias(_DROP_ROW))

    def swap(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        done: set[int] = set()
        for b in batches:
            kept = b.filter(pc.invert(b.column(_DROP_ROW)))
            if kept.num_rows:
                yield pa.RecordBatch.from_arrays([kept.column(n) for n in names], names=names)
            ids = b.column(_ID)
            if ids.null_count == len(b):
                continue
            first: list[int] = []
            for i, x in enumerate(ids.to_pylist()):
                if x is not None and x not in done:
                    done.add(x)
                    first.append(i)
            at, fam, kb, vb = [], [], [], []
            rows = b.column(ROWS)
            for i in first:
                for r in rows[i].as_py() or []:
                    at.append(i)
                    fam.append(r["f"])
                    kb.append(r["k"])
                    vb.append(r["v"])
            if at:
                cols = {
                    "partition_key": b.column("partition_key").take(pa.array(at, pa.int64())),
                    "key_bytes": pa.array(kb, pa.binary()),
                    "value_bytes": pa.array(vb, pa.binary()),
                    "column_family_name": pa.array(fam, pa.string()),
                }
                yield pa.RecordBatch.from_arrays([cols[n] for n in names], names=names)

    return frame.mapInArrow(swap, df.schema)

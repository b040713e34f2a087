"""The chunked transport of the ``tws`` engine: many rows of a key in one row through
transformWithState, both ways.

Row-based transformWithState turns every input row into a pyspark ``Row`` and every output row
back, in pyspark's own per-row Python code: at few keys and many rows (1k keys, 2M rows) that
conversion, not the state calls, is what the engine costs (BENCHMARKS.md, issue #18). Here a
``mapInArrow`` before the operator packs each key's rows of a partition into one chunk, and one
after it unpacks the chunk of output rows each key call returns into Arrow columns. Spark still
shuffles, groups and checkpoints by the key columns, which travel as plain columns beside the
chunk.

A chunk is a pickled ``(row count, columns)``, one Python list per column. Timestamps and dates
travel as integers (epoch microseconds, epoch days): pickling a ``datetime`` costs ten times an
``int``, and Arrow casts integers to timestamps in C.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from itertools import chain, repeat
from typing import Any

from pyspark.sql import types as T

from ...compat.arrow import to_array
from ..arrow_rows import comparable, concat, event_builder, naive, run_starts

__all__ = [
    "CHUNK_COLUMN",
    "ROWS_COLUMN",
    "ChunkFormat",
    "ChunkPacker",
    "ChunkUnpacker",
    "chunk_schema",
    "column_kinds",
    "encode_columns",
    "pack",
    "row_reader",
    "unpack",
]

CHUNK_COLUMN = "__ks_chunk"  # a key's input rows of one partition
ROWS_COLUMN = "__ks_rows"  # the output rows of one key call

TS, DAY = "ts", "day"  # column kinds that travel as integers

_EPOCH = datetime(1970, 1, 1)
_MICRO = timedelta(microseconds=1)
_EPOCH_ORDINAL = _EPOCH.toordinal()


@dataclass(frozen=True)
class ChunkFormat:
    """What the processor reads from an input chunk and writes to an output chunk."""

    names: list[str]  # input chunk columns (every source column but the keys)
    kinds: list[str | None]  # their kinds (column_kinds): None leaves a column as it travels
    out_kinds: list[str | None]  # kinds of the output columns after the keys (None: as they travel)


def pack(n: int, columns: Sequence[Sequence[Any]]) -> bytes:
    return pickle.dumps((n, columns), protocol=pickle.HIGHEST_PROTOCOL)


def unpack(blob: bytes) -> tuple[int, list]:
    return pickle.loads(blob)  # noqa: S301 - written by this query's own packer or processor


def chunk_schema(key_fields: list[T.StructField], column: str) -> T.StructType:
    return T.StructType([*key_fields, T.StructField(column, T.BinaryType(), False)])


def column_kinds(types: Sequence[T.DataType]) -> list[str | None]:
    return [
        TS if isinstance(t, (T.TimestampType, T.TimestampNTZType)) else DAY if isinstance(t, T.DateType) else None
        for t in types
    ]


def _micros(v: datetime | None) -> int | None:
    if v is None:
        return None
    if v.tzinfo is not None:
        v = v.astimezone(timezone.utc).replace(tzinfo=None)
    return (v - _EPOCH) // _MICRO


def encode_columns(kinds: Sequence[str | None], columns: Sequence[Sequence[Any]]) -> list:
    """Output columns of Python values (what the runner checked against the schema) -> what
    travels: timestamps as epoch microseconds, dates as epoch days."""
    out: list = []
    for kind, col in zip(kinds, columns):
        if kind == TS:
            col = [_micros(v) for v in col]
        elif kind == DAY:
            col = [None if v is None else v.toordinal() - _EPOCH_ORDINAL for v in col]
        out.append(col)
    return out


def _decoded(kind: str | None, col: list) -> list:
    if kind == TS:
        if None in col:
            return [None if v is None else _EPOCH + v * _MICRO for v in col]
        import numpy as np

        return np.array(col, dtype=np.int64).astype("datetime64[us]").astype(object).tolist()  # 5x the loop's speed
    if kind == DAY:
        return [None if v is None else date.fromordinal(_EPOCH_ORDINAL + v) for v in col]
    return col


def row_reader(
    names: list[str], kinds: list[str | None], key_names: list[str]
) -> Callable[[tuple, list[bytes]], list[dict]]:
    """(key values, a key's chunks) -> one fresh dict per row, of the chunk columns and the keys."""
    build = event_builder([*names, *key_names])

    def read(key_values: tuple, chunks: list[bytes]) -> list[dict]:
        rows: list[dict] = []
        for blob in chunks:
            n, cols = unpack(blob)
            cols = [_decoded(k, c) for k, c in zip(kinds, cols)]
            if names or key_names:
                rows.extend(build(*cols, *(repeat(v, n) for v in key_values)))
            else:
                rows.extend(build(n))
        return rows

    return read


class ChunkPacker:
    """``mapInArrow`` function: rows -> one row per key of each group of rows (key columns,
    chunk). Rows are grouped by key here, up to ``group_rows`` at a time, in Arrow (Spark
    refuses a sort on a stream); a key that comes in several groups gets several chunks, which
    transformWithState hands the processor together.

    ``per_row``: one chunk per row, with the ``keep`` columns beside it as they are (a stream
    with an event time on transformWithStateInPandas: Spark's watermark reads each row's)."""

    def __init__(
        self,
        keys: list[str],
        values: list[str],
        schema: T.StructType,
        group_rows: int = 1 << 19,
        *,
        keep: Sequence[str] = (),
        per_row: bool = False,
    ):
        self.keys, self.values, self.schema, self.group_rows = keys, values, schema, group_rows
        self.keep, self.per_row = list(keep), per_row

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from ...compat.arrow import arrow_schema as to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema)
        for rb in batches if self.per_row else self._groups(batches):
            if not rb.num_rows:
                continue
            cols = [_integers(naive(rb.column(c))).to_pylist() for c in self.values]
            if self.per_row:
                blobs = [pack(1, [[v] for v in row]) for row in zip(*cols)] if cols else [pack(1, [])] * rb.num_rows
                arrays = [rb.column(k) for k in [*self.keys, *self.keep]]
                arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, arrow_schema)]
                yield pa.RecordBatch.from_arrays([*arrays, pa.array(blobs, pa.binary())], schema=arrow_schema)
                continue
            starts = run_starts([rb.column(k) for k in self.keys], rb.num_rows)
            bounds = [*(int(s) for s in starts), rb.num_rows]
            blobs = [pack(e - s, [c[s:e] for c in cols]) for s, e in zip(bounds, bounds[1:])]
            first = pa.array(bounds[:-1], pa.int64())
            arrays = [rb.column(k).take(first) for k in self.keys]
            arrays = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, arrow_schema)]
            yield pa.RecordBatch.from_arrays([*arrays, pa.array(blobs, pa.binary())], schema=arrow_schema)

    def _groups(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Batches of up to ``group_rows`` rows, sorted by key when Arrow can sort the key
        types (else as they came: runs of equal keys are still found, only smaller)."""
        import pyarrow.compute as pc

        held: list[Any] = []
        n = 0
        for rb in chain(batches, [None]):
            if rb is not None and rb.num_rows:
                held.append(rb)
                n += rb.num_rows
            if held and (rb is None or n >= self.group_rows):
                group = concat(held)
                held, n = [], 0
                if all(comparable(group.column(k).type) for k in self.keys):
                    order = pc.sort_indices(group, sort_keys=[(k, "ascending") for k in self.keys])
                    group = group.take(order)
                yield group


def _integers(col: Any) -> Any:
    """Timestamps as epoch microseconds, dates as epoch days (see the module docstring)."""
    import pyarrow as pa

    t = col.type
    if pa.types.is_timestamp(t):
        return col.cast(pa.timestamp("us")).cast(pa.int64())
    if pa.types.is_date32(t):
        return col.cast(pa.int32())
    return col


class ChunkUnpacker:
    """``mapInArrow`` function after the operator: (key columns, output chunk) -> output rows."""

    def __init__(self, n_keys: int, schema: T.StructType):
        self.n_keys, self.schema = n_keys, schema

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from ...compat.arrow import arrow_schema as to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema)
        fields = list(arrow_schema)
        kinds = column_kinds([f.dataType for f in self.schema.fields[self.n_keys :]])
        for rb in batches:
            at: list[int] = []
            columns: list[list] = [[] for _ in kinds]
            for i, blob in enumerate(rb.column(self.n_keys).to_pylist()):
                n, cols = unpack(blob)
                for acc, c in zip(columns, cols):
                    acc.extend(c)
                at.extend(repeat(i, n))
            if not at:
                continue
            idx = pa.array(at, pa.int64())
            arrays = []
            for k, f in enumerate(fields[: self.n_keys]):
                col = rb.column(k).take(idx)
                arrays.append(col if col.type == f.type else col.cast(f.type))
            for kind, c, f in zip(kinds, columns, fields[self.n_keys :]):
                if kind == TS:
                    arrays.append(pa.array(c, pa.int64()).cast(f.type))
                elif kind == DAY:
                    arrays.append(pa.array(c, pa.int32()).cast(f.type))
                else:
                    arrays.append(to_array(c, f.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

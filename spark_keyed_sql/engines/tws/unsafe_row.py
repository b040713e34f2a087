"""Spark's ``UnsafeRow`` binary layout, written from Python values: what Spark's state rewriter
takes as a state row's ``value_bytes`` (an UPDATE of a ``tws`` checkpoint hands it the edited
rows this way; Spark then stores them in the checkpoint's own encoding).

A row: a null bit set (one bit a field, in 8-byte words), one 8-byte slot a field (a fixed-size
value little-endian, else ``offset << 32 | size`` of its bytes after the slots, offsets from the
row's start, each padded to 8 bytes). An array: its length (8 bytes), a null bit set, its
elements' slots (1, 2, 4 or 8 bytes by type; 8 for a variable-size one), padded to 8, then the
variable-size elements' bytes. A map: its key array's size (8 bytes), its key array, its value
array. Values are Arrow's Python values (``to_pylist``): a struct a dict, a map a list of pairs,
a timestamp a ``datetime``, a date a ``date``, a decimal a ``Decimal``."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

__all__ = ["encode_row", "encoded"]

_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)
_US = dt.timedelta(microseconds=1)
_MAX_LONG_DIGITS = 18  # a decimal of at most this precision is stored as its unscaled long


def _micros(v: dt.datetime) -> int:
    return (v - (_EPOCH_UTC if v.tzinfo is not None else _EPOCH)) // _US


def _unscaled(v: Decimal, scale: int) -> int:
    """``v * 10**scale`` exactly (Decimal arithmetic would round past its context's 28 digits)."""
    sign, digits, exponent = v.as_tuple()
    n = int("".join(map(str, digits)) or "0")
    shift = int(exponent) + scale
    n = n * 10**shift if shift >= 0 else n // 10**-shift  # (a value of the column's scale: exact)
    return -n if sign else n


# fixed-size types: (struct format, bytes in an array, Python value -> the stored number)
_FIXED: dict[type, tuple[str, int, Any]] = {
    T.BooleanType: ("<?", 1, bool),
    T.ByteType: ("<b", 1, int),
    T.ShortType: ("<h", 2, int),
    T.IntegerType: ("<i", 4, int),
    T.LongType: ("<q", 8, int),
    T.FloatType: ("<f", 4, float),
    T.DoubleType: ("<d", 8, float),
    T.DateType: ("<i", 4, lambda v: (v - _EPOCH_DAY).days),
    T.TimestampType: ("<q", 8, _micros),
    T.TimestampNTZType: ("<q", 8, _micros),
}


def _fixed(t: T.DataType) -> tuple[str, int, Any] | None:
    if isinstance(t, T.DecimalType) and t.precision <= _MAX_LONG_DIGITS:
        return "<q", 8, lambda v: _unscaled(v, t.scale)
    return _FIXED.get(type(t))


def _padded(data: bytes, width: int = 8) -> bytes:
    return data + b"\0" * (-len(data) % width)


def _variable(t: T.DataType, v: Any) -> bytes:
    """A variable-size value's bytes (unpadded)."""
    if isinstance(t, T.StringType):
        return v.encode("utf-8")
    if isinstance(t, T.BinaryType):
        return bytes(v)
    if isinstance(t, T.DecimalType):  # wider than a long: Java's BigInteger.toByteArray, in a 16-byte area
        n = _unscaled(v, t.scale)
        return n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)
    if isinstance(t, T.StructType):
        return encode_row(t, [v.get(f.name) for f in t.fields] if isinstance(v, dict) else list(v))
    if isinstance(t, T.ArrayType):
        return _array(t.elementType, list(v))
    if isinstance(t, T.MapType):
        pairs = list(v.items()) if isinstance(v, dict) else list(v)
        keys = _array(t.keyType, [k for k, _ in pairs])
        return struct.pack("<q", len(keys)) + keys + _array(t.valueType, [x for _, x in pairs])
    raise TypeError(f"a {t.simpleString()} value cannot be written as Spark's UnsafeRow here")


def _set_null(buf: bytearray, base: int, i: int) -> None:
    buf[base + i // 8] |= 1 << (i % 8)


def _put_variable(buf: bytearray, var: bytearray, slot: int, t: T.DataType, v: Any, start: int) -> None:
    data = _variable(t, v)
    offset = start + len(var)
    struct.pack_into("<q", buf, slot, (offset << 32) | len(data))
    var += _padded(data, 16 if isinstance(t, T.DecimalType) else 8)


def encode_row(schema: T.StructType, values: list[Any]) -> bytes:
    n = len(schema.fields)
    bits = (n + 63) // 64 * 8
    head = bytearray(bits + 8 * n)
    var = bytearray()
    for i, (f, v) in enumerate(zip(schema.fields, values)):
        if v is None:
            _set_null(head, 0, i)
            continue
        slot = bits + 8 * i
        fixed = _fixed(f.dataType)
        if fixed is not None:
            struct.pack_into(fixed[0], head, slot, fixed[2](v))
        else:
            _put_variable(head, var, slot, f.dataType, v, len(head))
    return bytes(head + var)


def _array(t: T.DataType, values: list[Any]) -> bytes:
    n = len(values)
    header = 8 + (n + 63) // 64 * 8
    fixed = _fixed(t)
    size = fixed[1] if fixed is not None else 8
    buf = bytearray(header + len(_padded(b"\0" * (n * size))))
    struct.pack_into("<q", buf, 0, n)
    var = bytearray()
    for j, v in enumerate(values):
        if v is None:
            _set_null(buf, 8, j)
            continue
        slot = header + j * size
        if fixed is not None:
            struct.pack_into(fixed[0], buf, slot, fixed[2](v))
        else:
            _put_variable(buf, var, slot, t, v, len(buf))
    return bytes(buf + var)


def encoded(frame: DataFrame, column: str, vtype: T.StructType, name_column: str, name: str, out: str) -> DataFrame:
    """``frame`` with its struct ``column`` (of type ``vtype``) replaced by ``name_column`` =
    ``name`` and ``out`` = its UnsafeRow bytes (NULL for a NULL struct; on the executors, in
    Arrow batches)."""
    rest = [f for f in frame.schema.fields if f.name != column]
    schema = T.StructType([*rest, T.StructField(name_column, T.StringType()), T.StructField(out, T.BinaryType())])
    names = [f.name for f in vtype.fields]

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            rows = [
                None if v is None else encode_row(vtype, [v.get(n) for n in names])
                for v in b.column(column).to_pylist()
            ]
            cols = [b.column(f.name) for f in rest]
            yield pa.RecordBatch.from_arrays(
                [*cols, pa.array([name] * len(rows), pa.string()), pa.array(rows, pa.binary())],
                names=[f.name for f in schema.fields],
            )

    return frame.mapInArrow(encode, schema)

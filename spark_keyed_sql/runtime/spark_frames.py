"""A KeyedProcessor's ``rows`` as PySpark's own pandas functions give them.

``applyInPandas`` converts each group's Arrow columns with ``pyarrow``'s ``to_pandas`` after
casting timestamps to nanoseconds (``pyspark.sql.conversion`` / ``sql.pandas.serializers``), so
a frame's dtypes follow the Spark type of each column and the pandas installed (measured with
PySpark 4.3 on pandas 2.3 and 3.1; docs/api.md has the table):

- ``tinyint`` / ``smallint`` / ``int`` / ``bigint``: ``int8`` / ``int16`` / ``int32`` /
  ``int64``; ``float64`` with NaN when the key has a NULL in the column;
- ``float`` / ``double``: ``float32`` / ``float64`` (NULL as NaN);
- ``boolean``: ``bool``; ``object`` (True / False / None) when the key has a NULL;
- ``string``: pandas 3: its ``str`` dtype, NULL as NaN; pandas 2: ``object``, NULL as None;
- ``timestamp`` / ``timestamp_ntz``: ``datetime64[ns]``, naive (UTC), NULL as NaT;
- ``date``, ``decimal``, ``binary``: ``object`` (``datetime.date``, ``Decimal``, ``bytes``);
- arrays, structs and maps: ``object`` (numpy arrays, dicts, dicts).

Here the conversion is done once per Arrow batch and cut per key (``ArrowColumns``): the
per-key answer is the batch's array, or, for an int or bool column where the key has a NULL,
the batch's alternative array (float64 / object). No PySpark is needed (KeyedTester runs
without it); Arrow types carry the Spark types (``arrow_type``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa

from ..api.types import ArrayType, AtomicType, DecimalType, MapType, SqlType, StructType, parse_schema, parse_type
from ..compat.arrow import has_map

__all__ = ["ArrowColumns", "arrow_type", "arrow_types", "arrow_types_of", "column_ddl", "ddl_of", "infer_arrow_type"]

log = logging.getLogger(__name__)

_ATOMIC = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamp_ntz": pa.timestamp("us"),
}


def arrow_type(t: SqlType | str) -> Any:
    """The Arrow type Spark exchanges a column of Spark type ``t`` as (timestamps naive)."""
    if isinstance(t, str):
        t = parse_type(t)
    if isinstance(t, AtomicType):
        return _ATOMIC[t.name]
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, ArrayType):
        return pa.list_(arrow_type(t.element))
    if isinstance(t, MapType):
        return pa.map_(arrow_type(t.key), arrow_type(t.value))
    if isinstance(t, StructType):
        return pa.struct([(f.name, arrow_type(f.type)) for f in t.fields])
    raise TypeError(f"no Arrow type for {t}")  # pragma: no cover - the parser makes only the above


def arrow_types_of(schema: str | SqlType) -> dict[str, Any]:
    """column name -> Arrow type, from a DDL schema (``"id string, ts timestamp"``)."""
    return {f.name: arrow_type(f.type) for f in parse_schema(schema).fields}


def column_ddl(fields: Any) -> dict[str, str]:
    """column -> its Spark type as DDL, from a pyspark schema's fields (what a plan carries as
    ``arg_types`` and ``arrow_types`` reads)."""
    return {f.name: f.dataType.simpleString() for f in fields}


def arrow_types(ddl: dict[str, str] | None) -> dict[str, Any]:
    """column -> Arrow type, from column -> Spark DDL type (a type this model does not know,
    an interval say, is left out: its values' type is inferred)."""
    out = {}
    for name, t in (ddl or {}).items():
        try:
            out[name] = arrow_type(t)
        except Exception:  # noqa: BLE001 - inferred from the values instead
            continue
    return out


_DDL = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
}


def ddl_of(t: Any) -> str:
    """The Spark DDL of an Arrow type (for saying what was inferred)."""
    if t in _DDL:
        return _DDL[t]
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_map(t):
        return f"map<{ddl_of(t.key_type)},{ddl_of(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{ddl_of(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{ddl_of(f.type)}" for f in t) + ">"
    return str(t)


def infer_arrow_type(values: list) -> Any:
    """The Arrow type Spark would infer for Python values (``createDataFrame``'s rules: int is
    bigint, float double, str string, datetime timestamp, date date, bool boolean, Decimal
    decimal, bytes binary); None when they do not make one type (mixed, or every value None)."""
    if all(v is None for v in values):
        return None
    try:
        t = pa.array(values).type
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp("us")  # (aware datetimes: their UTC instant, naive)
    return t


def _naive_ns(c: Any) -> Any:
    """Timestamps (any unit, aware or naive) as naive nanoseconds: PySpark's
    ``coerce_temporal_nanoseconds``; None when one is outside datetime64[ns] (1677-09-21 to
    2262-04-11), where PySpark's conversion fails."""
    t = c.type
    if t.tz is not None:
        c = c.cast(pa.timestamp(t.unit))
    if t.unit == "ns":
        return c
    try:
        return c.cast(pa.timestamp("ns"))
    except pa.ArrowInvalid:
        return None


_WARNED_RANGE: set[str] = set()


def _out_of_range(name: str) -> None:
    if name not in _WARNED_RANGE:
        _WARNED_RANGE.add(name)
        log.warning(
            "column %r holds a timestamp outside pandas' datetime64[ns] range (1677-09-21 to 2262-04-11), where "
            "PySpark's applyInPandas fails; its rows get the column as Python datetimes (object) instead",
            name,
        )


def _map_to_dict(v: Any, t: Any) -> Any:
    """pyarrow's value of ``t`` (maps as lists of pairs) with maps as dicts, as PySpark gives."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {_map_to_dict(k, t.key_type): _map_to_dict(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _map_to_dict(v.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        out = np.empty(len(v), dtype=object)
        out[:] = [_map_to_dict(x, t.value_type) for x in v]
        return out
    return v


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


# kinds of a converted column: how a key's rows are cut from it
PLAIN = "plain"  # the same dtype whatever the key holds (floats, timestamps, objects, strings)
NULLABLE = "nullable"  # ints and bools: another dtype (float64 / object) when the key has a NULL
STR = "str"  # pandas 3's str dtype: plain in a frame; numpy rows take its to_numpy() (NaN objects)


class Column:
    """One argument column of a batch converted as PySpark converts it."""

    __slots__ = ("prim", "alt", "prefix", "kind", "numpy")

    def __init__(self, c: Any, name: str = ""):
        import pandas as pd

        self.prefix = None
        self.alt = None
        self.kind = PLAIN
        if isinstance(c, np.ndarray):  # values of no one type: objects, as pandas holds them
            self.prim = self.numpy = c
            return
        if isinstance(c, pa.ChunkedArray):
            c = c.combine_chunks()
        t = c.type
        nulls = c.null_count
        if nulls:
            valid = c.is_valid().to_numpy(zero_copy_only=False)
            self.prefix = np.concatenate(([0], np.cumsum(~valid)))
        if pa.types.is_integer(t):
            self.kind = NULLABLE
            self.prim = (c.fill_null(0) if nulls else c).to_numpy(zero_copy_only=False)
            if nulls:  # as pyarrow's to_pandas does: float64, NaN for NULL
                self.alt = c.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        elif pa.types.is_boolean(t):
            self.kind = NULLABLE
            self.prim = c.fill_null(False).to_numpy(zero_copy_only=False)
            if nulls:
                self.alt = _objects(c.to_pylist())
        elif pa.types.is_floating(t):
            self.prim = c.to_numpy(zero_copy_only=False)
        elif pa.types.is_timestamp(t):
            ns = _naive_ns(c)
            if ns is not None:
                self.prim = ns.to_numpy(zero_copy_only=False)
            else:  # (a year 9999 "end of time" say): Python datetimes, naive UTC
                _out_of_range(name)
                self.prim = _objects(c.cast(pa.timestamp(t.unit)).to_pylist())
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            s = c.to_pandas()
            if s.dtype == np.dtype(object):  # pandas 2: objects, NULL as None
                self.prim = s.to_numpy()
            else:  # pandas 3: its str dtype; numpy rows are its to_numpy() (objects, NULL as NaN)
                self.prim, self.alt, self.kind = s.array, s.to_numpy(), STR
        elif pa.types.is_null(t):
            self.prim = _objects([None] * len(c))
        else:  # date, decimal, binary, arrays, structs, maps: objects, as PySpark's legacy path
            values = c.to_pandas(date_as_object=True, integer_object_nulls=True)
            arr = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values, dtype=object)
            if has_map(t):
                arr = _objects([_map_to_dict(v, t) for v in c.to_pylist()])
            self.prim = arr
        if isinstance(self.prim, np.ndarray) and not self.prim.flags.writeable:
            self.prim = self.prim.copy()
        # numpy rows: the frame column's to_numpy()
        self.numpy = self.alt if self.kind == STR else self.prim

    def cut(self, s: int, e: int, numpy: bool = False) -> tuple[Any, bool]:
        """The key's array (rows ``s`` to ``e``), and whether it differs in dtype from a slice
        of the batch's array (an int or bool column where the key has a NULL)."""
        if self.kind == NULLABLE and self.prefix is not None and self.prefix[e] != self.prefix[s]:
            return self.alt[s:e], True
        return (self.numpy if numpy else self.prim)[s:e], False


class ArrowColumns:
    """The argument columns of a batch, converted once, cut per key into ``rows``."""

    def __init__(self, names: list[str], cols: list[Any], n: int):
        import pandas as pd

        self.pd = pd
        self.n = n
        self.names = list(names)
        self.columns = pd.Index(self.names)
        self.cols = [Column(c, name) for c, name in zip(cols, self.names)]
        self.any_nulls = any(c.kind == NULLABLE and c.prefix is not None for c in self.cols)
        self.numpys = [(name, c.numpy) for name, c in zip(self.names, self.cols)]
        simple = getattr(pd.RangeIndex, "_simple_new", None)
        self.index = (lambda m: simple(range(m))) if simple is not None else pd.RangeIndex
        self.fast = hasattr(pd.DataFrame, "_from_mgr") and hasattr(pd.DataFrame, "_from_arrays")
        if self.fast:
            try:
                self.base = pd.DataFrame._from_arrays(
                    [c.prim for c in self.cols], columns=self.columns, index=pd.RangeIndex(n), verify_integrity=False
                )
                self.mgr = self.base._mgr
            except Exception:  # noqa: BLE001 - pandas internals moved: the public way below is correct
                self.fast = False

    def _frame_of(self, arrays: list[Any], m: int) -> Any:
        pd = self.pd
        if self.fast:
            return pd.DataFrame._from_arrays(arrays, columns=self.columns, index=self.index(m), verify_integrity=False)
        return pd.DataFrame(
            {name: pd.Series(a, copy=False) for name, a in zip(self.names, arrays)}, index=pd.RangeIndex(m)
        )

    def frame(self, s: int, e: int) -> Any:
        """The frame of rows ``s`` to ``e`` (one key's), indexed from 0."""
        m = e - s
        if not self.names:
            return self.pd.DataFrame(index=self.pd.RangeIndex(m))
        if self.any_nulls or not self.fast:
            cut = [c.cut(s, e) for c in self.cols]
            if not self.fast or any(special for _, special in cut):
                return self._frame_of([a for a, _ in cut], m)
        # every column a slice of its batch column: a zero-copy slice of the batch's frame
        mgr = self.mgr.get_slice(slice(s, e), axis=1)
        mgr.set_axis(1, self.index(m))
        return self.pd.DataFrame._from_mgr(mgr, axes=mgr.axes)

    def column_rows(self, s: int, e: int) -> Any:
        """Rows ``s`` to ``e`` as numpy columns: each ``frame(s, e)[c].to_numpy()``."""
        from ..api.rows import ColumnRows

        if not self.any_nulls:  # every column a slice of its batch array
            return ColumnRows({name: a[s:e] for name, a in self.numpys}, e - s)
        return ColumnRows({name: c.cut(s, e, numpy=True)[0] for name, c in zip(self.names, self.cols)}, e - s)

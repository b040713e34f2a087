"""The ``tws`` processor on ``transformWithStateInPandas``: Spark 4.0 has no row-based
``transformWithState`` in Python, only the pandas one.

It is the same processor (``processor.py``) with pandas frames at its edges, and the chunked
transport always: a frame would turn an integer column with NULLs into floats and timestamps
into pandas Timestamps, while a chunk keeps each value as every engine gives it. In a stream
with an event time each row is its own chunk, its event-time column beside it for Spark's
watermark. Initial state arrives chunked too."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from ...runtime.faults import crash_point
from ...runtime.keys import user_key
from ...runtime.plan import KeyedPlan
from ...state.binding import Entry
from .chunks import CHUNK_COLUMN, ChunkFormat, row_reader
from .processor import KeyedStatefulProcessor, _naive, _SparkVariable

__all__ = ["PandasKeyedStatefulProcessor", "value_normalizer"]


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)  # NaN, NaT
    except (TypeError, ValueError):  # an array's comparison
        return False


def value_normalizer(t: Any) -> Any:
    """v -> the Python value of Spark type ``t`` that the row-based API gives, from what a
    pandas frame holds (numpy scalars, NaN for NULL, float for an integer column with a NULL,
    Timestamps, numpy arrays, dicts for structs)."""
    from pyspark.sql import types as T

    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return lambda v: None if _missing(v) else int(v)
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return lambda v: None if _missing(v) else float(v)
    if isinstance(t, T.BooleanType):
        return lambda v: None if _missing(v) else bool(v)
    if isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        return lambda v: None if _missing(v) else _plain(v)
    if isinstance(t, T.DateType):
        return lambda v: None if _missing(v) else (v.date() if isinstance(v, datetime) else v)
    if isinstance(t, T.ArrayType):
        element = value_normalizer(t.elementType)
        return lambda v: None if v is None else [element(x) for x in v]
    if isinstance(t, T.MapType):
        k, val = value_normalizer(t.keyType), value_normalizer(t.valueType)
        return lambda v: None if v is None else {k(a): val(b) for a, b in (v.items() if isinstance(v, dict) else v)}
    if isinstance(t, T.StructType):
        fields = [(f.name, value_normalizer(f.dataType)) for f in t.fields]
        return lambda v: (
            None if v is None else tuple(fn(v[n] if isinstance(v, dict) else v[i]) for i, (n, fn) in enumerate(fields))
        )
    return lambda v: None if _missing(v) else (v.item() if type(v).__module__ == "numpy" else v)


class _PandasSparkVariable(_SparkVariable):
    """A Spark state variable under transformWithStateInPandas (Spark 4.0). Single values travel
    pickled (exact); a ListState is read back through a pandas frame (numpy scalars, NaN for
    NULL) and written through one cast to numpy types (which refuses a NULL integer and a
    tz-aware timestamp). So a list is written a value at a time (the pickled path) and what is
    read is put back into the declared types."""

    def __init__(self, handle: Any, desc: Any, stored_name: str | None = None):
        super().__init__(handle, desc, stored_name)
        self.normalize = value_normalizer(self.schema)

    def entries(self) -> list[Entry]:
        return [self._entry(self.normalize(r)) for r in self.var.get()] if self.var.exists() else []

    def put_entries(self, entries: list[Entry]) -> None:
        self.var.clear()
        self.append_entries(entries)

    def append_entries(self, entries: list[Entry]) -> None:
        rows = [self._row(e) for e in entries]
        with self._refused(rows):
            for r in rows:
                self.var.appendValue(r)


def _plain(v: Any) -> Any:
    """A grouping-key value as the other engines give it: numpy scalars as Python ones,
    pandas Timestamps as naive UTC datetimes."""
    if isinstance(v, datetime):
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        return _naive(v)
    item = getattr(v, "item", None)
    return item() if item is not None and type(v).__module__ == "numpy" else v


class PandasKeyedStatefulProcessor(KeyedStatefulProcessor):
    variable_class = _PandasSparkVariable

    def __init__(
        self, plan: KeyedPlan, time_mode: str, out_names: list[str], chunks: ChunkFormat, initial: ChunkFormat | None
    ):
        super().__init__(plan, time_mode, out_names, [], [], chunks=chunks)
        self.initial = initial  # the initial-state chunks' columns (every column but the keys)

    def init(self, handle: Any) -> None:
        super().init(handle)
        if self.initial is not None:
            self.read_initial = row_reader(self.initial.names, self.initial.kinds, [])

    def _frames(self, rows: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        out = [tuple(r) for r in rows]
        if out:
            yield pd.DataFrame.from_records(out, columns=self.out_names)

    def _key(self, key: Any) -> tuple:
        return tuple(_plain(v) for v in key) if self.plan.keyed else tuple(key)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        crash_point("processing")
        kv = self._key(key)
        blobs = [b for frame in rows for b in frame[CHUNK_COLUMN].tolist()]
        return self._frames(self._run(kv, self.read_chunks(kv if self.plan.keyed else (), blobs), timerValues))

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        return self._frames(super().handleExpiredTimer(self._key(key), timerValues, expiredTimerInfo))

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        kv = self._key(key)
        k = self.current_key = user_key(kv, self.plan.keyed)
        for row in self.read_initial((), initialState[CHUNK_COLUMN].tolist()):
            self.runner.initial_state(k, row, self.binding)

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
from ...runtime.plan import KeyedPlan
from ...runtime.runner import user_key
from .chunks import CHUNK_COLUMN, ChunkFormat, row_reader
from .processor import KeyedStatefulProcessor, _naive

__all__ = ["PandasKeyedStatefulProcessor"]


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
    def __init__(self, plan: KeyedPlan, time_mode: str, out_names: list[str], chunks: ChunkFormat, initial: ChunkFormat | None):
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
        k = user_key(kv, self.plan.keyed)
        for row in self.read_initial((), initialState[CHUNK_COLUMN].tolist()):
            self.runner.initial_state(k, row, self.binding)

"""One key's events as the ``rows`` its KeyedProcessor asked for (``rows_format``): the
engine-neutral way, from the events' dicts. The bulk engine cuts the same values from its Arrow
batches instead (``engines/bulk/frames.py``); tests hold the two to the same result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api.rows import ColumnRows

__all__ = ["rows_builder"]


def _frame(events: list[dict], names: list[str]) -> Any:
    import pandas as pd

    if not names:  # from_records drops the row count of a frame without columns
        return pd.DataFrame(index=pd.RangeIndex(len(events)))
    return pd.DataFrame.from_records(events, columns=names)


def rows_builder(fmt: str, names: list[str]) -> Callable[[list[dict]], Any]:
    """events -> ``rows`` in format ``fmt`` ("pandas", "numpy" or "records")."""
    names = list(names)
    if fmt == "records":
        return lambda events: [{c: e.get(c) for c in names} for e in events]
    if fmt == "numpy":

        def numpy(events: list[dict]) -> ColumnRows:
            frame = _frame(events, names)
            return ColumnRows({c: frame[c].to_numpy() for c in names}, len(events))

        return numpy
    return lambda events: _frame(events, names)

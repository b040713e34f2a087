"""One key's events as the ``rows`` its KeyedProcessor asked for (``rows_format``): the
engine-neutral way, from the events' dicts. The bulk engine cuts the same values from its Arrow
batches instead (``engines/bulk/frames.py``); tests hold the two to the same result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api.rows import ColumnRows
from ..compat.pandas import record_dtypes

__all__ = ["rows_builder"]


def _frame(events: list[dict], names: list[str]) -> Any:
    import pandas as pd

    if not names:  # from_records drops the row count of a frame without columns
        return pd.DataFrame(index=pd.RangeIndex(len(events)))
    return pd.DataFrame.from_records(events, columns=names)


_NONE = type(None)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _plain_column(values: list) -> Any:
    """The numpy array pandas' ``from_records`` makes of a column, for the common cases made
    directly (no frame): doubles (NULL as NaN), ints (float64 with NaN when one is NULL),
    bools and strings without NULL... ; None for anything else (pandas then decides)."""
    import numpy as np

    kinds = set(map(type, values))
    if int in kinds and not all(_INT64_MIN <= v <= _INT64_MAX for v in values if type(v) is int):
        return None  # an int beyond int64: pandas' own rules
    try:
        if (
            kinds == {float}
            or kinds == {float, _NONE}
            or kinds == {int, _NONE}
            or kinds == {float, int}
            or kinds == {float, int, _NONE}
        ):
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        if kinds == {int}:
            return np.array(values, dtype=np.int64)
        if kinds == {bool}:
            return np.array(values, dtype=bool)
        if kinds == {str} or kinds == {str, _NONE}:
            out = np.empty(len(values), dtype=object)
            out[:] = (
                values
                if kinds == {str} or record_dtypes().string_is_object
                else [np.nan if v is None else v for v in values]
            )
            return out
    except OverflowError:  # (not expected after the range check)
        return None
    return None


def rows_builder(fmt: str, names: list[str]) -> Callable[[list[dict]], Any]:
    """events -> ``rows`` in format ``fmt`` ("pandas", "numpy" or "records")."""
    names = list(names)
    if fmt == "records":
        return lambda events: [{c: e.get(c) for c in names} for e in events]
    if fmt == "numpy":

        def numpy(events: list[dict]) -> ColumnRows:
            columns = {c: _plain_column([e.get(c) for e in events]) for c in names} if events else {}
            if not events or any(a is None for a in columns.values()):
                frame = _frame(events, names)
                columns = (
                    {c: a if a is not None else frame[c].to_numpy() for c, a in columns.items()}
                    if events
                    else {c: frame[c].to_numpy() for c in names}
                )
            return ColumnRows(columns, len(events))

        return numpy
    return lambda events: _frame(events, names)

"""What a ``KeyedProcessor``'s ``process(key, rows)`` gets as ``rows``, by its class's
``rows_format``: a pandas DataFrame (the default), numpy columns, or records.

pandas costs tens of microseconds per call however short the frame (taking a column as a
Series, reducing it through nanops); with many keys of few rows each that is most of a pass.
``rows_format = "numpy"`` hands the same values as numpy arrays, one per column, without
building a frame; ``"records"`` hands a list of dicts, one per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["ROWS_FORMATS", "ColumnRows", "check_rows_format"]

ROWS_FORMATS = ("pandas", "numpy", "records")


def check_rows_format(cls: type) -> str:
    """The class's ``rows_format``, or a ValueError saying what is allowed."""
    fmt = getattr(cls, "rows_format", "pandas")
    if fmt not in ROWS_FORMATS:
        raise ValueError(
            f"{cls.__name__}.rows_format = {fmt!r} is not one of {', '.join(repr(f) for f in ROWS_FORMATS)}"
        )
    return fmt


class ColumnRows:
    """One key's rows as numpy columns (``rows_format = "numpy"``).

    ``rows["amount"]`` is the column as a numpy array: exactly ``frame["amount"].to_numpy()``
    of the pandas frame the key would get with ``rows_format = "pandas"``, typed as PySpark's
    ``applyInPandas`` types it (docs/api.md, "What a rows frame holds": int32 for an ``int``,
    float64 with NaN when the key has a NULL in it; float32 for a ``float``; datetime64[ns];
    object for strings, NULL as None on pandas 2 and NaN on pandas 3; object for dates,
    decimals, binary and nested values). ``len(rows)`` is the row count, iterating gives the
    column names, as for a DataFrame. The arrays are numpy's: its reductions do not skip NaN
    (``np.nansum`` does, as pandas' ``sum``).
    """

    __slots__ = ("_columns", "_n")

    def __init__(self, columns: dict[str, Any], n: int):
        self._columns = columns
        self._n = n

    def __getitem__(self, name: str) -> Any:
        try:
            return self._columns[name]
        except KeyError:
            raise KeyError(f"no column {name!r} in this key's rows; columns: {list(self._columns)}") from None

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def items(self) -> Iterator[tuple[str, Any]]:
        """(column name, array) pairs, in argument order."""
        return iter(self._columns.items())

    def to_pandas(self) -> Any:
        """The same rows as the pandas DataFrame ``rows_format = "pandas"`` gives."""
        import pandas as pd

        return pd.DataFrame(
            {name: pd.Series(values, copy=False) for name, values in self._columns.items()},
            index=pd.RangeIndex(self._n),
        )

    def __repr__(self) -> str:
        cols = ", ".join(f"{name}: {values.dtype}" for name, values in self._columns.items())
        return f"ColumnRows({self._n} row(s); {cols})"

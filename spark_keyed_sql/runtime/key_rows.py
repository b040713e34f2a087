"""One key's events as the ``rows`` its KeyedProcessor asked for (``rows_format``): the
engine-neutral way, from the events' dicts. Each column becomes an Arrow array of its Spark
type (given, or inferred from the values as Spark infers them) and then what PySpark's
``applyInPandas`` makes of it (``spark_frames``). The bulk engine cuts the same values from its
Arrow batches instead (``engines/bulk/frames.py``); tests hold the two to the same result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..api.errors import SchemaError
from ..compat.arrow import to_array
from .spark_frames import ArrowColumns, infer_arrow_type

__all__ = ["rows_builder", "column_array"]


def column_array(name: str, values: list, t: Any) -> Any:
    """The column's values as an Arrow array of type ``t`` (None: the type Spark would infer;
    values of no one type become an object array, as pandas would hold them)."""
    import numpy as np
    import pyarrow as pa

    if t is None:
        t = infer_arrow_type(values)
        if t is None:
            if all(v is None for v in values):
                return pa.nulls(len(values))
            out = np.empty(len(values), dtype=object)
            out[:] = values
            return out
    try:
        return to_array(values, t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise SchemaError(f"column {name!r}: its values are not all of type {t} ({exc})") from exc


def rows_builder(fmt: str, names: list[str], types: Sequence[Any] | None = None) -> Callable[[list[dict]], Any]:
    """events -> ``rows`` in format ``fmt`` ("pandas", "numpy" or "records"); ``types``: each
    column's Arrow type (None for one: inferred from its values)."""
    names = list(names)
    if fmt == "records":
        return lambda events: [{c: e.get(c) for c in names} for e in events]
    kinds = list(types) if types is not None else [None] * len(names)

    def build(events: list[dict]) -> Any:
        n = len(events)
        cols = [column_array(c, [e.get(c) for e in events], t) for c, t in zip(names, kinds)]
        converted = ArrowColumns(names, cols, n)
        return converted.column_rows(0, n) if fmt == "numpy" else converted.frame(0, n)

    return build

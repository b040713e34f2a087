"""Arrow across the supported versions. Spark schemas as Arrow schemas: ``to_arrow_schema``
takes ``timezone=`` from PySpark 4.2, ``timestamp_utc=`` in 4.0 and 4.1, and only the schema in
3.5; each gives TimestampType as UTC microseconds, which is what ``mapInArrow`` batches carry.
And the two pyarrow features this package uses that older pyarrow lacks (Databricks' Spark 3.5
runtimes ship pyarrow 8): Python dicts as map values, and ``RecordBatch.select``."""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

__all__ = ["arrow_schema", "has_map", "select", "to_array"]


@lru_cache(maxsize=1)
def _converter() -> tuple[Any, dict[str, Any]]:
    from pyspark.sql.pandas.types import to_arrow_schema

    params = inspect.signature(to_arrow_schema).parameters
    if "timezone" in params:
        return to_arrow_schema, {"timezone": "UTC"}
    if "timestamp_utc" in params:
        return to_arrow_schema, {"timestamp_utc": True}
    return to_arrow_schema, {}


def arrow_schema(schema: Any) -> Any:
    """A pyspark StructType -> the pyarrow Schema of the batches ``mapInArrow`` exchanges."""
    convert, kwargs = _converter()
    return convert(schema, **kwargs)


@lru_cache(maxsize=1)
def _dicts_convert_to_maps() -> bool:
    import pyarrow as pa

    try:
        pa.array([{"k": 1}], pa.map_(pa.string(), pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return False
    return True


def has_map(t: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(has_map(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return has_map(t.value_type)
    return False


def _as_pairs(v: Any, t: Any) -> Any:
    """``v`` with every dict that stands for a map of ``t`` as a list of (key, value) pairs."""
    import pyarrow as pa

    if v is None:
        return None
    if pa.types.is_map(t):
        items = v.items() if isinstance(v, dict) else v
        return [(k, _as_pairs(x, t.item_type)) for k, x in items]
    if pa.types.is_struct(t) and isinstance(v, dict):
        return {f.name: _as_pairs(v.get(f.name), f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_as_pairs(x, t.value_type) for x in v]
    return v


def to_array(values: list, t: Any) -> Any:
    """``pa.array(values, type=t)``; where the running pyarrow does not take dicts as map values,
    those of ``t``'s maps (at any depth) are given as pairs."""
    import pyarrow as pa

    if not _dicts_convert_to_maps() and has_map(t):
        values = [_as_pairs(v, t) for v in values]
    return pa.array(values, type=t)


def select(rb: Any, names: list[str]) -> Any:
    """``rb.select(names)`` (pyarrow 13+) on every pyarrow."""
    import pyarrow as pa

    if hasattr(rb, "select"):
        return rb.select(names)
    return pa.RecordBatch.from_arrays([rb.column(rb.schema.get_field_index(n)) for n in names], names=names)

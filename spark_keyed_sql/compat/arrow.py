"""Spark schemas as Arrow schemas, on every supported PySpark: ``to_arrow_schema`` takes
``timezone=`` from 4.2, ``timestamp_utc=`` in 4.0 and 4.1, and only the schema in 3.5; each
gives TimestampType as UTC microseconds, which is what ``mapInArrow`` batches carry."""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

__all__ = ["arrow_schema"]


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

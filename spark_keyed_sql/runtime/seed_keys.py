"""INITIAL STATE's key columns in the source's key types. A seed row meets the source's rows of
its key only when both hold the same value of the same type: an ``int`` seed key beside a
``bigint`` source key went under a key of its own (engine tws: two states for one key) or was
never met (bulk), silently. A narrower integer or float is widened; any other difference is
refused, naming both types and the cast to write."""

from __future__ import annotations

from pyspark.sql import types as T

from ..api.errors import SchemaError

__all__ = ["seed_key_sql"]

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _rank(t: T.DataType) -> int | None:
    return next((i for i, c in enumerate(_INTEGRAL) if isinstance(t, c)), None)


def _widens(seed: T.DataType, key: T.DataType) -> bool:
    a, b = _rank(seed), _rank(key)
    if a is not None and b is not None:
        return a < b
    return isinstance(seed, T.FloatType) and isinstance(key, T.DoubleType)


def seed_key_sql(column_sql: str, seed: T.DataType, key: T.DataType, what: str) -> str:
    """``column_sql`` as the seed key, cast to the source's ``key`` type where that only widens;
    ``what`` names the seed's key column for the error."""
    if seed == key:
        return column_sql
    if _widens(seed, key):
        return f"CAST({column_sql} AS {key.simpleString()})"
    raise SchemaError(
        f"{what} is {seed.simpleString()} and the source's key is {key.simpleString()}: a seed row would never meet "
        f"the source's rows of its key; cast it in the seed's SELECT (CAST(... AS {key.simpleString()}))"
    )

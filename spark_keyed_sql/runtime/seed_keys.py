"""INITIAL STATE's key columns in the source's key types. A seed row meets the source's rows of
its key only when both hold the same value of the same type: an ``int`` seed key beside a
``bigint`` source key went under a key of its own (engine tws: two states for one key) or was
never met (bulk), silently. A narrower integer is widened; any other difference (but the
nullability of nested fields) is refused, naming both types and the cast to write."""

from __future__ import annotations

from pyspark.sql import types as T

from ..api.errors import SchemaError

__all__ = ["seed_key_sql"]

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _rank(t: T.DataType) -> int | None:
    return next((i for i, c in enumerate(_INTEGRAL) if isinstance(t, c)), None)


def _bare(t: T.DataType) -> T.DataType:
    """``t`` without nullability and metadata, which do not change how Spark stores a key (a seed
    read back from Parquet has every nested field nullable)."""
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _bare(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_bare(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(_bare(t.keyType), _bare(t.valueType), True)
    return t


def seed_key_sql(column_sql: str, seed: T.DataType, key: T.DataType, what: str) -> str:
    """``column_sql`` as the seed key, cast to the source's ``key`` type where that only widens
    an integer (exact: a float widened to double is another value than the double written);
    ``what`` names the seed's key column for the error."""
    if _bare(seed) == _bare(key):
        return column_sql
    a, b = _rank(seed), _rank(key)
    if a is not None and b is not None and a < b:
        return f"CAST({column_sql} AS {key.simpleString()})"
    raise SchemaError(
        f"{what} is {seed.simpleString()} and the source's key is {key.simpleString()}: a seed row would never meet "
        f"the source's rows of its key; cast it in the seed's SELECT (CAST(... AS {key.simpleString()}))"
    )

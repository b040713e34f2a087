"""The Spark-free type model (``api.types``) as pyspark DataTypes, and back."""

from __future__ import annotations

from pyspark.sql import types as T

from ..api import types as K

__all__ = ["to_spark", "from_spark", "scalar_wrap"]

_ATOMIC = {
    "boolean": T.BooleanType,
    "byte": T.ByteType,
    "short": T.ShortType,
    "int": T.IntegerType,
    "long": T.LongType,
    "float": T.FloatType,
    "double": T.DoubleType,
    "string": T.StringType,
    "binary": T.BinaryType,
    "date": T.DateType,
    "timestamp": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType,
}
_REVERSE = {v: k for k, v in _ATOMIC.items()}


def to_spark(t: K.SqlType) -> T.DataType:
    if isinstance(t, K.AtomicType):
        return _ATOMIC[t.name]()
    if isinstance(t, K.DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, K.ArrayType):
        return T.ArrayType(to_spark(t.element), True)
    if isinstance(t, K.MapType):
        return T.MapType(to_spark(t.key), to_spark(t.value), True)
    if isinstance(t, K.StructType):
        return T.StructType([T.StructField(f.name, to_spark(f.type), True) for f in t.fields])
    raise TypeError(f"no Spark type for {t!r}")


def from_spark(dt: T.DataType) -> K.SqlType:
    if type(dt) in _REVERSE:
        return K.AtomicType(_REVERSE[type(dt)])
    if isinstance(dt, T.DecimalType):
        return K.DecimalType(dt.precision, dt.scale)
    if isinstance(dt, T.ArrayType):
        return K.ArrayType(from_spark(dt.elementType))
    if isinstance(dt, T.MapType):
        return K.MapType(from_spark(dt.keyType), from_spark(dt.valueType))
    if isinstance(dt, T.StructType):
        return K.StructType(tuple(K.StructField(f.name, from_spark(f.dataType)) for f in dt.fields))
    # types the model does not name (intervals, variant, ...) travel as their DDL
    return K.AtomicType("string")


def scalar_wrap(t: K.SqlType) -> T.StructType:
    """Spark state variables hold rows: a scalar type becomes ``struct<value: t>``."""
    if isinstance(t, K.StructType):
        return to_spark(t)  # type: ignore[return-value]
    return T.StructType([T.StructField("value", to_spark(t), True)])

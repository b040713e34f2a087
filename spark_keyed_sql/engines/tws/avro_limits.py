"""Two things Spark's Avro state encoding (what this project sets for a checkpoint's first run,
docs/state.md) cannot keep, said as this project's errors instead of Spark's: an 8- or 16-bit
integer (``tinyint`` / ``smallint``: Avro has none, and Spark refuses the state variable when it
is created), and a None inside a list or a map (Spark's state server makes their elements
non-nullable, and refuses the write). Engine ``bulk`` keeps both. Only consulted once Spark has
refused: a checkpoint kept in another encoding is not affected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

from ...api.errors import SchemaError, StateEncodingError

__all__ = ["narrow_integer_error", "null_element_error", "refused_as"]

_NARROW = (T.ByteType, T.ShortType)


def _narrow(t: T.DataType) -> bool:
    if isinstance(t, _NARROW):
        return True
    if isinstance(t, T.ArrayType):
        return _narrow(t.elementType)
    if isinstance(t, T.MapType):
        return _narrow(t.keyType) or _narrow(t.valueType)
    if isinstance(t, T.StructType):
        return any(_narrow(f.dataType) for f in t.fields)
    return False


def narrow_integer_error(exc: BaseException, what: str, schema: T.StructType) -> SchemaError | None:
    """Spark refused to create the state variable ``what`` of ``schema``: our error when it is
    for a tinyint / smallint in it, else None (Spark's error stands)."""
    fields = [f"'{f.name}' ({f.dataType.simpleString()})" for f in schema.fields if _narrow(f.dataType)]
    if not fields or "Avro" not in str(exc):
        return None
    return SchemaError(
        f"{what}: engine 'tws' keeps state in Spark's Avro encoding, which has no 8- or 16-bit integers, and "
        f"{', '.join(fields)} holds one; annotate it 'int' (or 'bigint'), or use engine 'bulk'"
    )


def _none_inside(v: Any) -> bool:
    """A None among a list's elements or a map's values, at any depth (a struct's fields may be None)."""
    if isinstance(v, dict):
        return any(x is None or _none_inside(x) for x in v.values())
    if isinstance(v, list):
        return any(x is None or _none_inside(x) for x in v)
    if isinstance(v, tuple):  # a struct (a Row)
        return any(_none_inside(x) for x in v)
    return False


def null_element_error(exc: BaseException, what: str, names: list[str], values: tuple) -> StateEncodingError | None:
    """Spark refused to store ``values`` (fields ``names``) of ``what``: our error when one
    holds a None inside a list or map, else None (Spark's error stands)."""
    if "non-nullable" not in str(exc):
        return None
    holding = [n for n, v in zip(names, values) if _none_inside(v)]
    if not holding:
        return None
    return StateEncodingError(
        f"{what}: {', '.join(repr(n) for n in holding)} holds a None inside a list or map, which engine 'tws' "
        "cannot store (Spark's Avro state encoding keeps their elements non-NULL); keep None out of it, or use "
        "engine 'bulk'"
    )


class refused_as:  # noqa: N801 - used as a context manager, as contextlib's are named
    """``with refused_as(ours): <a write to Spark's state>``: an exception from the block is
    raised as ``ours(exc)`` when that names it (a KeyedSQLError), else as it is."""

    __slots__ = ("ours",)

    def __init__(self, ours: Callable[[BaseException], Exception | None]):
        self.ours = ours

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if not isinstance(exc, Exception):
            return False
        err = self.ours(exc)
        if err is None:
            return False
        raise err from None

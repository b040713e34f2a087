"""Python annotations of typed state (``int``, ``dict[str, float]``, ``"double"``) as Spark SQL
types, and how a stored value becomes the container an annotation says."""

from __future__ import annotations

import datetime as _dt
import decimal
import types
from collections.abc import Callable
from typing import Any

from .errors import SchemaError
from .types import ArrayType, AtomicType, DecimalType, MapType, SqlType, parse_type

__all__ = ["python_container", "python_type_to_sql"]


_PY_TO_SQL: dict[Any, SqlType] = {
    bool: AtomicType("boolean"),
    int: AtomicType("long"),
    float: AtomicType("double"),
    str: AtomicType("string"),
    bytes: AtomicType("binary"),
    _dt.datetime: AtomicType("timestamp"),
    _dt.date: AtomicType("date"),
    decimal.Decimal: DecimalType(38, 18),
}
_PY_NAMES = {
    "bool": bool,
    "int": int,
    "float": float,
    "str": str,
    "bytes": bytes,
    "datetime": _dt.datetime,
    "date": _dt.date,
}


def python_type_to_sql(annotation: Any, where: str = "") -> SqlType:
    """Map an annotation (``int``, ``dict[str, float]``, ``"double"``) to a SqlType."""
    import typing

    if isinstance(annotation, SqlType):
        return annotation
    if isinstance(annotation, str):
        text = annotation.strip()
        if text in _PY_NAMES:
            return _PY_TO_SQL[_PY_NAMES[text]]
        try:
            return parse_type(text)
        except SchemaError as exc:
            raise SchemaError(
                f"{where}: annotation {annotation!r} is neither a Python type nor a DDL type ({exc})"
            ) from None
    if annotation in _PY_TO_SQL:
        return _PY_TO_SQL[annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, set, frozenset, tuple) and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise SchemaError(f"{where}: fixed-length tuple annotations are not typed state; use list[...]")
        return ArrayType(python_type_to_sql(args[0], where))
    if origin is dict and len(args) == 2:
        return MapType(python_type_to_sql(args[0], where), python_type_to_sql(args[1], where))
    if origin is typing.Union or origin is types.UnionType:
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return python_type_to_sql(non_none[0], where)
    raise SchemaError(
        f"{where}: annotation {annotation!r} has no Spark SQL type; use int, float, str, bool, datetime, list[T], "
        "dict[K, V] or a DDL string"
    )


def python_container(annotation: Any) -> Callable[[Any], Any] | None:
    """How a stored value (a list for an array, a dict for a map) becomes what ``annotation``
    says where it says ``set``, ``frozenset`` or ``tuple`` (at any depth); None when the stored
    form already is what it says."""
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        non_none = [a for a in args if a is not type(None)]
        return python_container(non_none[0]) if len(non_none) == 1 else None
    if origin in (list, set, frozenset, tuple) and args:
        inner = python_container(args[0])
        if origin is list and inner is None:
            return None
        make = list if origin is list else origin
        if inner is None:
            return lambda v: None if v is None else make(v)
        return lambda v: None if v is None else make(inner(x) for x in v)
    if origin is dict and len(args) == 2:
        kc, vc = python_container(args[0]), python_container(args[1])
        if kc is None and vc is None:
            return None
        k_of = kc or (lambda x: x)
        v_of = vc or (lambda x: x)
        return lambda v: None if v is None else {k_of(k): v_of(x) for k, x in v.items()}
    return None

"""A Spark-free model of Spark SQL types: DDL parsing and Python value checking.

KeyedTester and the state descriptors must work without a SparkContext, and pyspark's
``_parse_datatype_string`` needs one, so DDL strings are parsed here.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SchemaError, StateTypeError

__all__ = [
    "SqlType",
    "AtomicType",
    "DecimalType",
    "ArrayType",
    "MapType",
    "StructField",
    "StructType",
    "parse_type",
    "short_repr",
    "parse_schema",
    "python_container",
    "python_type_to_sql",
    "coerce",
    "struct_to_tuple",
    "to_user",
]

_ATOMIC_ALIASES = {
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "byte",
    "byte": "byte",
    "smallint": "short",
    "short": "short",
    "int": "int",
    "integer": "int",
    "bigint": "long",
    "long": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "string": "string",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
}
_DDL_NAMES = {
    "boolean": "BOOLEAN",
    "byte": "TINYINT",
    "short": "SMALLINT",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "STRING",
    "binary": "BINARY",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamp_ntz": "TIMESTAMP_NTZ",
}
_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}


class SqlType:
    """Base of the type model; ``ddl()`` renders Spark DDL."""

    def ddl(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def __str__(self) -> str:
        return self.ddl()


@dataclass(frozen=True)
class AtomicType(SqlType):
    name: str

    def ddl(self) -> str:
        return _DDL_NAMES[self.name]


@dataclass(frozen=True)
class DecimalType(SqlType):
    precision: int = 10
    scale: int = 0

    def ddl(self) -> str:
        return f"DECIMAL({self.precision},{self.scale})"


@dataclass(frozen=True)
class ArrayType(SqlType):
    element: SqlType

    def ddl(self) -> str:
        return f"ARRAY<{self.element.ddl()}>"


@dataclass(frozen=True)
class MapType(SqlType):
    key: SqlType
    value: SqlType

    def ddl(self) -> str:
        return f"MAP<{self.key.ddl()}, {self.value.ddl()}>"


@dataclass(frozen=True)
class StructField:
    name: str
    type: SqlType


@dataclass(frozen=True)
class StructType(SqlType):
    fields: tuple[StructField, ...]

    def ddl(self) -> str:
        return "STRUCT<" + ", ".join(f"`{f.name}`: {f.type.ddl()}" for f in self.fields) + ">"

    def field_ddl(self) -> str:
        """The ``a BIGINT, b DOUBLE`` form used for schemas."""
        return ", ".join(f"`{f.name}` {f.type.ddl()}" for f in self.fields)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]


# ---------------------------------------------------------------- DDL parsing

_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class _Tokens:
    def __init__(self, text: str):
        self.text = text
        self.items: list[tuple[str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise SchemaError(f"cannot parse type {text!r}: unexpected {text[pos:].strip()[:10]!r}")
            tok = next(g for g in m.groups() if g is not None)
            self.items.append((tok, m.start(m.lastindex)))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.items[self.i][0] if self.i < len(self.items) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise SchemaError(f"cannot parse type {self.text!r}: unexpected end, expected {expected or 'a type'}")
        if expected is not None and tok.lower() != expected:
            raise SchemaError(f"cannot parse type {self.text!r}: expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok


def _ident(tok: str) -> str:
    return tok[1:-1].replace("``", "`") if tok.startswith("`") else tok


def _parse(t: _Tokens) -> SqlType:
    tok = t.take()
    name = tok.lower()
    if name == "array":
        t.take("<")
        elem = _parse(t)
        t.take(">")
        return ArrayType(elem)
    if name == "map":
        t.take("<")
        k = _parse(t)
        t.take(",")
        v = _parse(t)
        t.take(">")
        return MapType(k, v)
    if name == "struct":
        t.take("<")
        fields = []
        while t.peek() != ">":
            fname = _ident(t.take())
            if t.peek() == ":":
                t.take(":")
            fields.append(StructField(fname, _parse(t)))
            if t.peek() == ",":
                t.take(",")
        t.take(">")
        return StructType(tuple(fields))
    if name in ("decimal", "dec", "numeric"):
        if t.peek() == "(":
            t.take("(")
            p = int(t.take())
            s = 0
            if t.peek() == ",":
                t.take(",")
                s = int(t.take())
            t.take(")")
            return DecimalType(p, s)
        return DecimalType()
    if name in ("varchar", "char"):
        t.take("(")
        t.take()
        t.take(")")
        return AtomicType("string")
    if name in _ATOMIC_ALIASES:
        return AtomicType(_ATOMIC_ALIASES[name])
    raise SchemaError(f"unknown type {tok!r} in {t.text!r}")


def parse_type(ddl: str | SqlType) -> SqlType:
    """Parse a DDL type (``"double"``, ``"array<string>"``) or a field list into a struct."""
    if isinstance(ddl, SqlType):
        return ddl
    if not isinstance(ddl, str) or not ddl.strip():
        raise SchemaError(f"a type must be a non-empty DDL string, got {ddl!r}")
    t = _Tokens(ddl)
    # field list form: "<name> <type>[, ...]" -- a name followed by something other than '<' / '('
    if len(t.items) >= 2 and t.items[1][0] not in ("<", "(", ",") and t.items[0][0].lower() != "struct":
        return parse_schema(ddl)
    result = _parse(t)
    if t.peek() is not None:
        raise SchemaError(f"cannot parse type {ddl!r}: unexpected {t.peek()!r}")
    return result


def parse_schema(ddl: str | SqlType) -> StructType:
    """Parse ``"a long, b double"`` (or ``struct<...>``) into a StructType."""
    if isinstance(ddl, StructType):
        return ddl
    if isinstance(ddl, SqlType):
        raise SchemaError(f"expected a list of columns, got the type {ddl.ddl()}")
    if not isinstance(ddl, str) or not ddl.strip():
        raise SchemaError(f"a schema must be a non-empty DDL string like 'a bigint, b double', got {ddl!r}")
    t = _Tokens(ddl)
    if t.peek() and t.peek().lower() == "struct" and len(t.items) > 1 and t.items[1][0] == "<":
        result = _parse(t)
        if t.peek() is not None:
            raise SchemaError(f"cannot parse schema {ddl!r}: unexpected {t.peek()!r}")
        return result  # type: ignore[return-value]
    fields: list[StructField] = []
    while t.peek() is not None:
        fname = _ident(t.take())
        if t.peek() == ":":
            t.take(":")
        if t.peek() in (None, ","):
            raise SchemaError(f"column {fname!r} in {ddl!r} has no type")
        fields.append(StructField(fname, _parse(t)))
        if t.peek() == ",":
            t.take(",")
        elif t.peek() is not None:
            raise SchemaError(f"cannot parse schema {ddl!r}: unexpected {t.peek()!r} after column {fname!r}")
    names = [f.name.lower() for f in fields]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SchemaError(f"duplicate column(s) {sorted(dup)} in {ddl!r}")
    return StructType(tuple(fields))


# ---------------------------------------------------------------- Python annotations

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
    if origin is typing.Union or str(origin) == "types.UnionType":
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
    if origin is typing.Union or str(origin) == "types.UnionType":
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


# ---------------------------------------------------------------- value checking


def _fail(where: str, t: SqlType, value: Any) -> StateTypeError:
    return StateTypeError(f"{where}: expected {t.ddl()}, got {type(value).__name__} {value!r}")


def coerce(value: Any, t: SqlType, where: str) -> Any:
    """Check ``value`` against ``t`` and return the Python value Spark expects for it."""
    if value is None:
        return None
    if isinstance(t, AtomicType):
        n = t.name
        if n == "boolean":
            if isinstance(value, bool) or (
                type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")
            ):
                return bool(value)
            raise _fail(where, t, value)
        if n in _INT_RANGES:
            if isinstance(value, bool) or not _is_integral(value):
                raise _fail(where, t, value)
            iv = int(value)
            lo, hi = _INT_RANGES[n]
            if not lo <= iv <= hi:
                raise StateTypeError(f"{where}: {iv} does not fit {t.ddl()}")
            return iv
        if n in ("float", "double"):
            if isinstance(value, bool):
                raise _fail(where, t, value)
            if isinstance(value, (int, float)) or _is_numpy_number(value):
                return float(value)
            if isinstance(value, decimal.Decimal):
                return float(value)
            raise _fail(where, t, value)
        if n == "string":
            if isinstance(value, str):
                return value
            raise _fail(where, t, value)
        if n == "binary":
            if isinstance(value, (bytes, bytearray)):
                return bytes(value)
            raise _fail(where, t, value)
        if n == "date":
            if isinstance(value, _dt.datetime):
                raise _fail(where, t, value)
            if isinstance(value, _dt.date):
                return value
            raise _fail(where, t, value)
        if n in ("timestamp", "timestamp_ntz"):
            if hasattr(value, "to_pydatetime"):
                value = value.to_pydatetime()
            if isinstance(value, _dt.datetime):
                return value
            raise _fail(where, t, value)
    if isinstance(t, DecimalType):
        if isinstance(value, bool):
            raise _fail(where, t, value)
        if isinstance(value, (int, decimal.Decimal)):
            return decimal.Decimal(value)
        raise _fail(where, t, value)
    if isinstance(t, ArrayType):
        if isinstance(value, (list, tuple, set, frozenset)) or _is_ndarray(value):
            items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            return [coerce(v, t.element, f"{where}[{i}]") for i, v in enumerate(items)]
        raise _fail(where, t, value)
    if isinstance(t, MapType):
        if isinstance(value, dict):
            if None in value:  # Spark (and Arrow) maps have no NULL keys: say so here, on every path
                raise StateTypeError(
                    f"{where}: a map key cannot be None (Spark maps have no NULL keys); got {short_repr(value)}"
                )
            return {coerce(k, t.key, f"{where} key"): coerce(v, t.value, f"{where}[{k!r}]") for k, v in value.items()}
        raise _fail(where, t, value)
    if isinstance(t, StructType):
        return struct_to_tuple(value, t, where)
    raise _fail(where, t, value)  # pragma: no cover


def short_repr(v: Any, limit: int = 120) -> str:
    """``repr(v)`` cut to ``limit`` characters, for error messages that quote user values."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def fast_check(t: SqlType, var: str, ranged: bool = True) -> str | None:
    """A Python expression, over the variable ``var``, that is true when ``coerce`` would return
    the value unchanged (the common case, checked inline by generated converters); None when
    there is no such shortcut for ``t``. ``ranged=False``: an integer's range is not checked
    (left to an Arrow conversion, which refuses a value out of range)."""
    if not isinstance(t, AtomicType):
        return None
    n = t.name
    if n in _INT_RANGES:
        lo, hi = _INT_RANGES[n]
        return f"(type({var}) is int and {lo} <= {var} <= {hi})" if ranged else f"type({var}) is int"
    exact = {"double": "float", "float": "float", "string": "str", "boolean": "bool"}.get(n)
    if exact:
        return f"type({var}) is {exact}"
    # coerce returns a datetime / date unchanged (the generated code's module has these names)
    if n in ("timestamp", "timestamp_ntz"):
        return f"type({var}) is __datetime"
    if n == "date":
        return f"type({var}) is __date"
    return None


FAST_CHECK_NAMES = {"__datetime": _dt.datetime, "__date": _dt.date}  # names fast_check's expressions use


def struct_to_tuple(value: Any, t: StructType, where: str) -> tuple:
    """A dict (by name) or a tuple/Row (by position) as a tuple in field order."""
    if isinstance(value, dict):
        extra = [k for k in value if k not in {f.name for f in t.fields}]
        if extra:
            raise StateTypeError(f"{where}: unknown field(s) {extra}; expected fields {t.names}")
        return tuple(coerce(value.get(f.name), f.type, f"{where}.{f.name}") for f in t.fields)
    if isinstance(value, (tuple, list)):
        if len(value) != len(t.fields):
            raise StateTypeError(
                f"{where}: expected {len(t.fields)} values ({', '.join(t.names)}), got {len(value)}: {value!r}"
            )
        return tuple(coerce(v, f.type, f"{where}.{f.name}") for v, f in zip(value, t.fields))
    raise _fail(where, t, value)


def _is_integral(value: Any) -> bool:
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu"


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def _is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray"


def to_user(value: Any, t: SqlType) -> Any:
    """Storage form (tuples/Rows for structs) back to the user form (dicts for structs)."""
    if value is None:
        return None
    if isinstance(t, StructType):
        if isinstance(value, dict):
            return {f.name: to_user(value.get(f.name), f.type) for f in t.fields}
        return {f.name: to_user(v, f.type) for v, f in zip(value, t.fields)}
    if isinstance(t, ArrayType):
        return [to_user(v, t.element) for v in value]
    if isinstance(t, MapType):
        items = value.items() if isinstance(value, dict) else value
        return {to_user(k, t.key): to_user(v, t.value) for k, v in items}
    return value

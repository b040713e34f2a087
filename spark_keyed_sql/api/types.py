"""A Spark-free model of Spark SQL types and its DDL parser (annotations.py maps Python
annotations onto it, values.py checks and converts Python values by it).

KeyedTester and the state descriptors must work without a SparkContext, and pyspark's
``_parse_datatype_string`` needs one, so DDL strings are parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import SchemaError

__all__ = [
    "ArrayType",
    "AtomicType",
    "DecimalType",
    "MapType",
    "SqlType",
    "StructField",
    "StructType",
    "parse_schema",
    "parse_type",
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

"""A class changed between runs of one checkpoint: what its stored state becomes.

Stored state reaches the attribute / state variable of the same **name**, whatever the order
the class declares them in. Compared field by field (the stored layout against the class's):

- a name only the class has is *added*: it starts from its ``__init__`` value (an attribute) or
  unset (a state variable);
- a name only the state has is *removed*: its stored values are dropped (logged once, at start);
- the same name with the same type is carried as it is;
- the same name with a wider type is *widened*: converted as Spark's cast converts it;
- any other change (a narrowing, another kind of type, an attribute that changed between the
  JSON encoding of an un-annotated attribute and a type annotation, a ValueState that became a
  ListState) is refused at start, before anything is written, naming the function, the field,
  both types and the fix (``ks.migrate_state(..., transform=)``).

Widening follows Spark's safe up-casts (``UpCastRule.canUpCast``): integral and floating types
along ``tinyint < smallint < int < bigint < float < double``, a number into a decimal that holds
every value of it (and a decimal into a wider decimal or number), ``date`` into ``timestamp`` /
``timestamp_ntz``, and arrays, maps and structs (same field names, same order) whose elements
widen. Spark's other up-casts change what a Python attribute holds (any value to ``string``, a
``timestamp`` to / from ``bigint``, ``timestamp`` to / from ``timestamp_ntz``), so they are
refused here. An un-annotated attribute is stored as its JSON encoding: a change of what it
holds is not a change of its column and is never refused.

Used by both engines: ``check_layouts`` at start from the layouts the checkpoint's metadata
records; the bulk engine maps its stored columns with ``compare_columns``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import types as T

from ..api.errors import KeyedSQLError
from ..api.types import parse_type
from .operator_record import OperatorRecord
from .spark_types import to_spark

__all__ = [
    "Evolution",
    "StateEvolutionError",
    "StoredField",
    "absent_attributes",
    "check_layouts",
    "compare",
    "fields_of_record",
    "widens",
]

log = logging.getLogger(__name__)

_NUMERIC_ORDER = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType)
_INTEGRAL_DIGITS = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 20}


class StateEvolutionError(KeyedSQLError):
    """A class changed its state in a way stored state cannot follow (the message says how)."""


def _as_decimal(t: T.DataType) -> T.DecimalType | None:
    if isinstance(t, T.DecimalType):
        return t
    digits = _INTEGRAL_DIGITS.get(type(t))
    return T.DecimalType(digits, 0) if digits is not None else None


def _decimal_fits(small: T.DecimalType, big: T.DecimalType) -> bool:
    return small.precision - small.scale <= big.precision - big.scale and small.scale <= big.scale


def widens(old: T.DataType, new: T.DataType) -> bool:
    """Does every value of ``old`` convert to ``new`` without loss or failure (Spark's
    ``canUpCast``, without the up-casts that change what a Python value is; module doc)?"""
    if old == new or isinstance(old, T.NullType):
        return True
    if type(old) in _NUMERIC_ORDER and type(new) in _NUMERIC_ORDER:
        return _NUMERIC_ORDER.index(type(old)) < _NUMERIC_ORDER.index(type(new))
    if isinstance(new, T.DecimalType) or isinstance(old, T.DecimalType):
        small, big = _as_decimal(old), _as_decimal(new)
        if small is not None and big is not None:
            return _decimal_fits(small, big)
        # a decimal into float / double: Spark's isTighterThan says no for those
        return False
    if isinstance(old, T.DateType) and isinstance(new, (T.TimestampType, T.TimestampNTZType)):
        return True
    if isinstance(old, T.ArrayType) and isinstance(new, T.ArrayType):
        return widens(old.elementType, new.elementType)
    if isinstance(old, T.MapType) and isinstance(new, T.MapType):
        return widens(old.keyType, new.keyType) and widens(old.valueType, new.valueType)
    if isinstance(old, T.StructType) and isinstance(new, T.StructType):
        return [f.name for f in old.fields] == [f.name for f in new.fields] and all(
            widens(a.dataType, b.dataType) for a, b in zip(old.fields, new.fields)
        )
    return False


@dataclass(frozen=True)
class StoredField:
    """One attribute or state variable as a layout records it."""

    name: str
    type: T.DataType
    encoded: bool = False  # an un-annotated attribute: its JSON encoding (a string)
    kind: str = "attribute"  # "attribute", or a state variable's kind: "value", "list", "map"
    key_type: T.DataType | None = None  # a MapState's key type (None: not recorded)

    def describe(self) -> str:
        if self.encoded:
            return "un-annotated (stored as its JSON encoding)"
        what = self.type.simpleString()
        if self.kind == "map":
            key = self.key_type.simpleString() if self.key_type is not None else "?"
            return f"MapState<{key}, {what}>"
        if self.kind == "list":
            return f"ListState<{what}>"
        if self.kind == "value":
            return f"ValueState<{what}>"
        return what


@dataclass
class Evolution:
    """What a class change does to its stored state (names are the class's)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    widened: dict[str, tuple[T.DataType, T.DataType]] = field(default_factory=dict)
    reordered: bool = False

    @property
    def changed(self) -> bool:
        """Does stored state need mapping (anything but the same names, types and order)?"""
        return bool(self.added or self.removed or self.widened or self.reordered)


def compare(function: str, stored: list[StoredField], current: list[StoredField], what: str) -> Evolution:
    """Stored layout -> the class's, by name; raises :class:`StateEvolutionError` at the first
    change that is not carried (module doc). ``what``: "state attribute" / "state variable"."""
    old = {f.name: f for f in stored}
    new = {f.name: f for f in current}
    out = Evolution(
        added=[n for n in new if n not in old],
        removed=[n for n in old if n not in new],
        reordered=[n for n in old if n in new] != [n for n in new if n in old],
    )
    for name, f in new.items():
        was = old.get(name)
        if was is None:
            continue
        if was.encoded and f.encoded:
            continue  # JSON both ways: a change of what it holds is not a change of its column
        same_kind = was.kind == f.kind and was.encoded == f.encoded
        keys_ok = was.key_type is None or f.key_type is None or widens(was.key_type, f.key_type)
        if same_kind and keys_ok and widens(was.type, f.type):
            keys_widened = was.key_type is not None and f.key_type is not None and was.key_type != f.key_type
            if was.type != f.type or keys_widened:
                out.widened[name] = (was.type, f.type)
            continue
        raise StateEvolutionError(
            f"{function}: {what} '{name}' is stored as {was.describe()} and the class now declares "
            f"{f.describe()}; that is not a widening (Spark's safe up-casts: tinyint < smallint < int < bigint < "
            f"float < double, into a wider decimal, date into timestamp), so the stored values cannot be carried. "
            f"Keep the type {was.describe()}, or rewrite the stored state into a new checkpoint with "
            f"ks.migrate_state(<checkpoint>, <new checkpoint>, '{function}', transform='SELECT ... FROM state') "
            "and run the query there. Nothing was written to the checkpoint"
        )
    return out


def _ddl(t: str) -> T.DataType:
    return to_spark(parse_type(t))


def fields_of_record(op: OperatorRecord) -> tuple[list[StoredField], list[StoredField]]:
    """(attributes, state variables) of an operator as the checkpoint's metadata records it."""
    attrs = [StoredField(a["name"], _ddl(a["type"]), bool(a.get("encoded"))) for a in op.attributes]
    variables = [
        StoredField(
            v["name"],
            _ddl(v["type"]),
            kind=v.get("kind", "value"),
            key_type=_ddl(v["key_type"]) if v.get("key_type") else None,
        )
        for v in op.variables
    ]
    return attrs, variables


def check_layouts(checkpoint: str, previous: list[OperatorRecord], operators: list[OperatorRecord]) -> None:
    """At start, before the checkpoint's metadata is replaced: each operator's stored layout
    (``previous``) against the class it runs now (``operators``). Refuses what cannot be carried;
    logs, once, what is dropped, added or widened."""
    for was, now in zip(previous, operators):
        function = now.function
        old_attrs, old_vars = fields_of_record(was)
        new_attrs, new_vars = fields_of_record(now)
        for what, old, new in (("state attribute", old_attrs, new_attrs), ("state variable", old_vars, new_vars)):
            if not old and not new:
                continue
            change = compare(function, old, new, what)
            if change.removed:
                log.warning(
                    "checkpoint %s: %s no longer has %s(s) %s; their stored values are dropped",
                    checkpoint,
                    function,
                    what,
                    ", ".join(change.removed),
                )
            if change.added:
                log.info(
                    "checkpoint %s: %s has new %s(s) %s; stored keys start them from %s",
                    checkpoint,
                    function,
                    what,
                    ", ".join(change.added),
                    "their __init__ value" if what == "state attribute" else "unset",
                )
            for name, (a, b) in change.widened.items():
                log.info(
                    "checkpoint %s: %s.%s widened from %s to %s; stored values are converted",
                    checkpoint,
                    function,
                    name,
                    a.simpleString(),
                    b.simpleString(),
                )


def absent_attributes(was: OperatorRecord, names: list[str]) -> list[str]:
    """The attributes (of ``names``, the class's) that rows stored under an earlier layout may
    lack: those added since the state began (``was``: the operator's record before this run),
    kept for as long as the class has them (rows written before the change stay in the state)."""
    before = {a["name"] for a in was.attributes}
    carried = set(was.absent_attributes)
    return [n for n in names if n in carried or n not in before]

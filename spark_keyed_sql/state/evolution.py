"""A class changed between runs of one checkpoint: what its stored state becomes.

Stored state reaches the attribute / state variable of the same **name**, whatever the order
the class declares them in. Compared field by field (the stored layout against the class's):

- a name only the class has is *added*: it starts from its ``__init__`` value (an attribute) or
  unset (a state variable);
- a name only the state has is *removed*: its stored values are dropped (logged once, at start);
- the same name with the same type is carried as it is;
- the same name with a wider type is *widened*: converted as Spark's cast converts it;
- a name the class declares renamed (``__state_renamed__ = {"new": "old"}``, ``renamed_from=`` on
  a typed variable) takes the stored values of its former name, when the state has no values
  under the new name, and is then compared as above;
- a type change that is not a widening, for a name with a declared converter
  (``__state_converters__ = {"name": callable}``), is *converted*: the callable makes each stored
  non-NULL value the new type's (per element of a ListState, per value of a MapState);
- any other change (a narrowing without a converter, another kind of type, an attribute that changed between the
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
records; the bulk engine rewrites its stored columns by ``compare``'s answer (a new base
snapshot), the transformWithState engine keeps its state where it is and reads a renamed one
under the name it was stored by (``stored_names``, recorded with the layout as ``stored``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pyspark.sql import types as T

from ..api.errors import KeyedSQLError
from ..api.types import parse_type
from ..api.values import coerce, short_repr, to_user
from .encoding import dumps, loads
from .operator_record import OperatorRecord
from .spark_types import to_spark

__all__ = [
    "Change",
    "Evolution",
    "StateEvolutionError",
    "StoredField",
    "absent_attributes",
    "change_of",
    "check_layouts",
    "compare",
    "fields_of_record",
    "stored_names",
    "value_converter",
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
    renamed: dict[str, str] = field(default_factory=dict)  # new name -> the stored name it takes
    converted: dict[str, tuple[T.DataType, T.DataType]] = field(default_factory=dict)  # by a converter

    @property
    def changed(self) -> bool:
        """Does stored state need mapping (anything but the same names, types and order)?"""
        return bool(self.added or self.removed or self.widened or self.reordered or self.renamed or self.converted)

    def source(self, name: str) -> str:
        """The stored name the class's ``name`` takes its values from."""
        return self.renamed.get(name, name)


class Change(Enum):
    """What one stored field becomes in the class's field of the same (or declared former) name."""

    SAME = "same"  # carried as it is (or JSON both ways: what it holds is not its column's type)
    WIDENED = "widened"  # carried through Spark's cast
    CONVERTED = "converted"  # through the class's declared converter
    REFUSED = "refused"  # neither: refused at start (the fix: migrate_state with transform=)


def change_of(was: StoredField, now: StoredField, has_converter: bool) -> Change:
    """The one rule a restart (``compare``) and ``migrate_state`` (carrying a changed class) follow."""
    if was.encoded and now.encoded:
        return Change.SAME
    keys_ok = was.key_type is None or now.key_type is None or widens(was.key_type, now.key_type)
    if was.kind == now.kind and was.encoded == now.encoded and keys_ok and widens(was.type, now.type):
        keys_widened = was.key_type is not None and now.key_type is not None and was.key_type != now.key_type
        return Change.WIDENED if was.type != now.type or keys_widened else Change.SAME
    if has_converter and was.kind == now.kind and keys_ok:
        return Change.CONVERTED
    return Change.REFUSED


def compare(
    function: str,
    stored: list[StoredField],
    current: list[StoredField],
    what: str,
    renames: dict[str, str] | None = None,
    converters: Collection[str] = (),
) -> Evolution:
    """Stored layout -> the class's, by name (``renames``: new name -> stored name, taken where
    the state has nothing under the new name; ``converters``: the names with a declared
    converter); raises :class:`StateEvolutionError` at the first change that is not carried
    (module doc). ``what``: "state attribute" / "state variable"."""
    old = {f.name: f for f in stored}
    new = {f.name: f for f in current}
    renamed = {n: o for n, o in (renames or {}).items() if n in new and n not in old and o in old}
    taken = set(renamed.values())
    out = Evolution(
        added=[n for n in new if n not in old and n not in renamed],
        removed=[n for n in old if n not in new and n not in taken],
        reordered=[n for n in old if n in new] != [n for n in new if n in old],
        renamed=renamed,
    )
    for name, f in new.items():
        was = old.get(renamed.get(name, name))
        if was is None:
            continue
        change = change_of(was, f, name in converters)
        if change is Change.WIDENED:
            out.widened[name] = (was.type, f.type)
        elif change is Change.CONVERTED:
            out.converted[name] = (was.type, f.type)
        if change is not Change.REFUSED:
            continue
        stored_as = f" (stored as '{was.name}')" if was.name != name else ""
        raise StateEvolutionError(
            f"{function}: {what} '{name}'{stored_as} is stored as {was.describe()} and the class now declares "
            f"{f.describe()}; that is not a widening (Spark's safe up-casts: tinyint < smallint < int < bigint < "
            f"float < double, into a wider decimal, date into timestamp), so the stored values cannot be carried. "
            f"Keep the type {was.describe()}, declare a converter on the class (__state_converters__ = "
            f'{{"{name}": <callable: stored value -> new value>}}), or rewrite the stored state into a new '
            f"checkpoint with ks.migrate_state(<checkpoint>, <new checkpoint>, function='{function}', "
            "transform='SELECT ... FROM state') and run the query there. Nothing was written to the checkpoint"
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


Declared = tuple[dict[str, str], Collection[str]]  # a class's renames and converter names


def check_layouts(
    checkpoint: str,
    previous: list[OperatorRecord],
    operators: list[OperatorRecord],
    declared: list[Declared] | None = None,
) -> list[tuple[Evolution, Evolution]]:
    """At start, before the checkpoint's metadata is replaced: each operator's stored layout
    (``previous``) against the class it runs now (``operators``, with ``declared`` renames and
    converters). Refuses what cannot be carried; logs, once, what is dropped, added, renamed,
    widened or converted. Returns each operator's (attributes, state variables) evolution."""
    out = []
    for i, (was, now) in enumerate(zip(previous, operators)):
        function = now.function
        renames, converters = declared[i] if declared else ({}, ())
        old_attrs, old_vars = fields_of_record(was)
        new_attrs, new_vars = fields_of_record(now)
        pair = []
        for what, old, new in (("state attribute", old_attrs, new_attrs), ("state variable", old_vars, new_vars)):
            change = compare(function, old, new, what, renames, converters)
            pair.append(change)
            _log_change(checkpoint, function, what, change)
        out.append((pair[0], pair[1]))
    return out


def _log_change(checkpoint: str, function: str, what: str, change: Evolution) -> None:
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
    for name, old in change.renamed.items():
        log.info("checkpoint %s: %s's %s '%s' carries the values stored as '%s'", checkpoint, function, what, name, old)
    for kind, changes in (("widened", change.widened), ("converted by its converter", change.converted)):
        for name, (a, b) in changes.items():
            log.info(
                "checkpoint %s: %s.%s %s from %s to %s",
                checkpoint,
                function,
                name,
                kind,
                a.simpleString(),
                b.simpleString(),
            )


def stored_names(
    was: OperatorRecord | None, names: list[str], renames: dict[str, str], variables: bool
) -> dict[str, str]:
    """Name -> the name its values are stored under, where they differ, for an engine that keeps
    state where it is (a rename is then a name map, recorded with the layout as ``stored``):
    a name the previous record has keeps its stored name; a renamed one takes its former name's."""
    if was is None:
        return {}
    entries = was.variables if variables else was.attributes
    physical = {str(e["name"]): str(e.get("stored") or e["name"]) for e in entries}
    out = {}
    for n in names:
        source = n if n in physical else renames.get(n)
        if source in physical and physical[source] != n:
            out[n] = physical[source]
    return out


def absent_attributes(was: OperatorRecord, names: list[str], renames: dict[str, str] | None = None) -> list[str]:
    """The attributes (of ``names``, the class's) that rows stored under an earlier layout may
    lack: those added since the state began (``was``: the operator's record before this run),
    kept for as long as the class has them (rows written before the change stay in the state).
    A renamed attribute (``renames``: new -> former name) is not added: its values are stored."""
    before = {a["name"] for a in was.attributes}
    carried = set(was.absent_attributes)
    renames = renames or {}
    out = []
    for n in names:
        source = n if n in before else renames.get(n, n)  # the name its stored values have
        if source in carried or source not in before:
            out.append(n)
    return out


def value_converter(
    function: str, was: StoredField, now: StoredField, fn: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """A stored value of ``was`` (as Spark hands it to Python) -> the value to store for ``now``,
    through the class's converter ``fn``: it gets the value as user code sees it (a JSON-encoded
    attribute decoded, a struct as a dict) and its result is checked against the new type (or
    JSON-encoded). Per element of a ListState, per value of a MapState; NULL stays NULL. A
    converter that raises fails with the function, the name and the value."""
    old_t, new_t = parse_type(was.type.simpleString()), parse_type(now.type.simpleString())
    where = f"{function}: converter of '{now.name}'"

    def one(v):  # (no hints: pyspark would take hints for a pandas UDF's)
        if v is None:
            return None
        user = loads(v) if was.encoded else to_user(v, old_t)
        try:
            out = fn(user)
        except Exception as exc:
            raise StateEvolutionError(
                f"{where} failed on stored value {short_repr(user, 200)}: {type(exc).__name__}: {exc}. "
                "Nothing was written to the checkpoint"
            ) from None
        return dumps(out, where) if now.encoded else coerce(out, new_t, f"{where} (result for {short_repr(user, 200)})")

    if now.kind == "list":
        return lambda v: None if v is None else [one(e) for e in v]
    if now.kind == "map":
        return lambda v: None if v is None else {k: one(e) for k, e in v.items()}
    return one

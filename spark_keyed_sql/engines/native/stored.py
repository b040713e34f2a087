"""A native stream step's state as the Python path stores it: each attribute's stored column read
back as the value the key's recurrences start from, and the new value written into the same
column with the same bytes (``AttributeLayout``: typed columns, or the JSON encoding), so a
checkpoint moves between native and Python micro-batches freely.

What is planned: typed (annotated) attributes of type bigint, double, boolean, string and
timestamp (an instant in both: Python's naive UTC datetime, Spark's TIMESTAMP), and
JSON-encoded ones holding ints (to 38 digits), booleans or None. Anything else declines with
what to change: Spark SQL cannot write Python's JSON of a float, a datetime or a non-ASCII string
byte for byte."""

from __future__ import annotations

from dataclasses import dataclass

from ...api.types import AtomicType
from ...runtime.columns import quote
from ...state.attributes import AttributeLayout
from ...state.snapshots import STATE_PREFIX
from .analyze import Declined
from .ir import Const
from .render import DECIMAL, null_literal, out_of_range

__all__ = ["UNREADABLE", "StoredAttribute", "stored_attributes"]

# how the error of a stored value a native plan cannot read ends (native = 'auto' runs the batch
# on the Python path instead: engines/bulk/step.py)
UNREADABLE = "the native plan reads; run the statement with OPTIONS (native = false)"

_TYPED = {("bigint", "int"), ("double", "float"), ("boolean", "bool"), ("string", "str"), ("timestamp", "datetime")}
_ENCODED = ("int", "bool", "none")


@dataclass(frozen=True)
class StoredAttribute:
    """One attribute's state column: how the stored value reads back and how the new one is
    written."""

    name: str
    column: str  # the state row's column (``__ks_s_<name>``)
    ty: str  # the planner's type of the attribute
    encoded: bool  # the JSON encoding (else a typed column)
    wide: bool = False  # an int the plan holds as DECIMAL(38,0) (it may pass 62 bits)
    nullable: bool = True  # may the plan read None from it (else a stored None is refused)
    double: bool = False  # a typed double: compared by its text (-0.0 apart from 0.0)

    def read(self, function: str, key_repr: str) -> str:
        """The stored column as the attribute's value. A stored value the plan cannot read raises
        (a text of another type, an int past the plan's bound, None where the plan assumes none:
        left by UPDATE keyed_state, a migration or an older class), naming key and attribute."""
        c = quote(self.column)
        shown = f"coalesce(CAST({c} AS STRING), 'NULL')"
        expected = "None" if self.ty == "none" else f"the {self.ty}"
        bad = (
            f"raise_error(concat('function \\'{function}\\': the stored state of key ', {key_repr}, "
            f"' holds ', {shown}, ' in attribute \\'{self.name}\\', not {expected} {UNREADABLE}'))"
        )
        null = f"{c} IS NULL" if not self.encoded else f"({c} IS NULL OR {c} = 'null')"
        if not self.nullable and self.ty != "none":
            null_value = bad
        else:
            null_value = f"CAST(NULL AS {DECIMAL})" if self.wide else null_literal(self.ty)
        if self.ty == "none":
            return f"CASE WHEN {null} THEN NULL ELSE {bad} END"
        if not self.encoded:
            if self.ty == "int" and not self.wide:  # within the bound the plan's BIGINT arithmetic has
                within = f"{c} BETWEEN -{2**62} AND {2**62}"
                return f"CASE WHEN {null} THEN {null_value} WHEN {within} THEN {c} ELSE {bad} END"
            return f"CASE WHEN {null} THEN {null_value} ELSE {c} END" if not self.nullable else c
        if self.ty == "int":
            # digits only (the casts below never see other text), within the plan's bound: 2**62
            # for BIGINT arithmetic, 38 digits for DECIMAL
            digits = f"{c} RLIKE '^-?[0-9]{{1,{38 if self.wide else 19}}}$'"
            if self.wide:
                value = f"CAST({c} AS {DECIMAL})"
            else:
                fits = f"abs(CAST({c} AS {DECIMAL})) < CAST('{2**62}' AS {DECIMAL})"
                value = f"CASE WHEN {fits} THEN CAST({c} AS BIGINT) ELSE {bad} END"
            return f"CASE WHEN {null} THEN {null_value} WHEN {digits} THEN {value} ELSE {bad} END"
        flag = f"WHEN {c} = 'true' THEN TRUE WHEN {c} = 'false' THEN FALSE"
        return f"CASE WHEN {null} THEN {null_value} {flag} ELSE {bad} END"

    def out_of_range(self, value: str) -> str | None:
        """A typed BIGINT column given a wider int: the condition under which storing it fails
        (the Python path raises StateTypeError then), else None."""
        if self.encoded or self.ty != "int" or not self.wide:
            return None
        return out_of_range(value, 63, wide=True)

    def write(self, value: str) -> str:
        """The new value (SQL of the planner's type) as the column stores it."""
        if not self.encoded:
            bad = self.out_of_range(value)
            if bad is not None:  # (the error row raises; Spark may compute this before its filter)
                return f"CASE WHEN {bad} THEN NULL ELSE CAST({value} AS BIGINT) END"
            return f"CAST({value} AS BIGINT)" if self.ty == "int" else value
        if self.ty == "none":
            return "'null'"
        if self.ty == "int":
            return f"coalesce(CAST({value} AS STRING), 'null')"
        return f"CASE WHEN {value} IS NULL THEN 'null' WHEN {value} THEN 'true' ELSE 'false' END"

    def same(self, a: str, b: str) -> str:
        """Do two stored values have the same bytes (NULLs equal; a double by its text)?"""
        if self.double:
            return f"(CAST({a} AS STRING) <=> CAST({b} AS STRING))"
        return f"({a} <=> {b})"


def stored_attributes(
    layout: AttributeLayout, initial: dict[str, Const], bits: dict[str, int], nullable: dict[str, bool]
) -> list[StoredAttribute]:
    """Each state attribute's column, or Declined naming the attribute and what to change."""
    out = []
    for name in layout.names:
        if name not in initial:
            raise Declined(
                f"attribute {name!r}: per-key dict state on a stream (native stream steps plan plain attributes; "
                "keep one attribute per value, e.g. self.count instead of self.d[key]['count'])"
            )
        ty = initial[name].ty
        if layout.is_encoded(name):
            if ty not in _ENCODED:
                raise Declined(
                    f"attribute {name!r} holds a {ty} stored as JSON, which Spark SQL cannot write as Python does; "
                    f"annotate it (e.g. `{name}: {_PY.get(ty, ty)}`) for a native plan on a stream"
                )
            wide = ty == "int" and bits.get(name, 0) > 62
            out.append(StoredAttribute(name, STATE_PREFIX + name, ty, True, wide, nullable.get(name, True)))
            continue
        t = layout.column_type(name)
        ddl = t.ddl().lower() if isinstance(t, AtomicType) else str(t)
        # an attribute left None: NULL in an atomic column (a map column's NULLs could not be
        # compared with <=>, which Spark refuses on maps)
        left_none = ty == "none" and isinstance(t, AtomicType)
        if (ddl, ty) not in _TYPED and not left_none:
            raise Declined(
                f"attribute {name!r} is stored as {ddl.upper()} and the plan holds a {ty} in it "
                "(planned on a stream: int as BIGINT, float as DOUBLE, bool as BOOLEAN, str as STRING, "
                "datetime as TIMESTAMP)"
            )
        wide = ty == "int" and bits.get(name, 0) > 62
        out.append(
            StoredAttribute(name, STATE_PREFIX + name, ty, False, wide, nullable.get(name, True), double=ty == "float")
        )
    return out


_PY = {"float": "float", "str": "str", "datetime": "datetime", "timedelta": "timedelta"}

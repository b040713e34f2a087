"""A native stream step's state as the Python path stores it: each attribute's stored column read
back as the value the key's recurrences start from, and the new value written into the same
column as Python writes it (``AttributeLayout``: typed columns, or the JSON encoding), so a
checkpoint moves between native and Python micro-batches freely.

What is planned: typed (annotated) attributes of type bigint, double, boolean, string and
timestamp (an instant in both: Python's naive UTC datetime, Spark's TIMESTAMP), and
JSON-encoded ones holding ints (to 38 digits), booleans, None, floats, strings or datetimes.
Ints, booleans, None and datetimes (``{"$datetime": "<isoformat>"}``) are written byte for
byte as Python writes them; a float is written as Spark's text of it (``1.0E16`` where Python
writes ``1e+16``: the same float when read back, Java's text of a double reads back as that
double), a string as Spark's JSON of it (non-ASCII characters as they are, where Python writes
``\\uXXXX``: the same string when read back). The per-key dict pattern (``StoredDict``) is
read and written as Python's JSON of the dict holding the key's one entry. Anything else
declines with what to change."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ...api.types import AtomicType
from ...runtime.columns import quote
from ...state.attributes import AttributeLayout
from ...state.snapshots import STATE_PREFIX
from .analyze import EXISTS, Declined
from .ir import Const
from .render import DECIMAL, literal, null_literal, out_of_range

__all__ = ["UNREADABLE", "Stored", "StoredAttribute", "StoredDict", "check_typed_attributes", "stored_attributes"]

# how the error of a stored value a native plan cannot read ends (native = 'auto' runs the batch
# on the Python path instead: engines/bulk/step.py)
UNREADABLE = "the native plan reads; run the statement with OPTIONS (native = false)"

_TYPED = {("bigint", "int"), ("double", "float"), ("boolean", "bool"), ("string", "str"), ("timestamp", "datetime")}
_ENCODED = ("int", "bool", "none", "float", "str", "datetime")


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

    @property
    def attrs(self) -> tuple[str, ...]:
        """The plan's attributes this column holds."""
        return (self.name,)

    def helpers(self) -> list[tuple[str, str]]:
        """Columns ``starts`` reads (none: the stored column itself)."""
        return []

    def starts(self, function: str, key_repr: str) -> list[tuple[str, str]]:
        """Each attribute's value as the stored column holds it."""
        return [(self.name, self.read(function, key_repr))]

    def write_from(self, value: Callable[[str], str]) -> str:
        """The column's new text from its attributes' new values (``value``: attribute -> SQL)."""
        return self.write(value(self.name))

    def read(self, function: str, key_repr: str, text: str | None = None) -> str:
        """The stored column (or ``text``, a JSON text within it) as the attribute's value. A
        stored value the plan cannot read raises (a text of another type, an int past the plan's
        bound, None where the plan assumes none: left by UPDATE keyed_state, a migration or an
        older class), naming key and attribute."""
        c = quote(self.column) if text is None else text
        expected = "None" if self.ty == "none" else f"the {self.ty}"
        bad = unreadable(function, key_repr, c, self.name, expected)
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
        return f"CASE WHEN {null} THEN {null_value} {_READ[self.ty](c)} ELSE {bad} END"

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
        return f"CASE WHEN {value} IS NULL THEN 'null' ELSE {_WRITE[self.ty](value)} END"

    def same(self, a: str, b: str) -> str:
        """Do two stored values have the same bytes (NULLs equal; a double by its text)?"""
        if self.double:
            return f"(CAST({a} AS STRING) <=> CAST({b} AS STRING))"
        return f"({a} <=> {b})"


# JSON-encoded floats, strings and datetimes (state/encoding.py): a ``WHEN ... THEN`` reading
# each form Python (or a native step) writes, and the text a non-NULL value is written as
_FLOAT_TEXT = "^-?[0-9]+([.][0-9]+([eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)$"  # a float's repr / Java's text
# an int in an attribute the plan holds as a float (`self.total = 0`, then `+= 0.5` on some rows):
# to 15 digits, exact in a double
_FLOAT_INT = "^-?[0-9]{1,15}$"
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # {"$float": tag} <-> Spark's double
_DATETIME = '^[{]"[$]datetime":"[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{6})?"[}]$'
_DAY = 86_400_000_000  # microseconds


def _read_bool(c: str) -> str:
    return f"WHEN {c} = 'true' THEN TRUE WHEN {c} = 'false' THEN FALSE"


def _write_bool(v: str) -> str:
    return f"CASE WHEN {v} THEN 'true' ELSE 'false' END"


def _float_tag(tag: str) -> str:
    return '\'{"$float":"' + tag + "\"}'"


def _read_float(c: str) -> str:
    tags = " ".join(f"WHEN {c} = {_float_tag(t)} THEN CAST('{java}' AS DOUBLE)" for t, java in _NON_FINITE.items())
    return f"WHEN {c} RLIKE '{_FLOAT_TEXT}' OR {c} RLIKE '{_FLOAT_INT}' THEN CAST({c} AS DOUBLE) {tags}"


def _write_float(v: str) -> str:
    # (Spark's NaN equals NaN)
    tags = " ".join(f"WHEN {v} = CAST('{java}' AS DOUBLE) THEN {_float_tag(t)}" for t, java in _NON_FINITE.items())
    return f"CASE {tags} ELSE CAST({v} AS STRING) END"


def _read_str(c: str) -> str:
    # a JSON string (Python's \uXXXX escapes or Spark's raw UTF-8): the text between the quotes
    return f"""WHEN {c} RLIKE '(?s)^".*"$' AND get_json_object(concat('[', {c}, ']'), '$[0]') IS NOT NULL
        THEN get_json_object(concat('[', {c}, ']'), '$[0]')"""


def _write_str(v: str) -> str:
    whole = f"to_json(named_struct('v', {v}))"  # {"v":"..."}
    return f"substr({whole}, 6, length({whole}) - 6)"


def _read_datetime(c: str) -> str:
    # {"$datetime":"YYYY-MM-DDTHH:MM:SS[.ffffff]"}: the naive UTC wall clock -> the instant, no
    # time zone in between (the date's day number and the time of day's microseconds)
    day = f"CAST(unix_date(CAST(substr({c}, 15, 10) AS DATE)) AS BIGINT) * {_DAY}"
    tod = (
        f"CAST(substr({c}, 26, 2) AS BIGINT) * 3600000000 + CAST(substr({c}, 29, 2) AS BIGINT) * 60000000"
        f" + CAST(substr({c}, 32, 2) AS BIGINT) * 1000000"
        f" + CASE WHEN substr({c}, 34, 1) = '.' THEN CAST(substr({c}, 35, 6) AS BIGINT) ELSE 0 END"
    )
    valid = f"{c} RLIKE '{_DATETIME}' AND try_cast(substr({c}, 15, 10) AS DATE) IS NOT NULL"
    return f"WHEN {valid} THEN timestamp_micros({day} + {tod})"


def _write_datetime(v: str) -> str:
    # Python's isoformat of the naive UTC datetime, byte for byte (microseconds only when not 0)
    us = f"unix_micros({v})"
    tod = f"pmod({us}, {_DAY})"
    day = f"CAST(({us} - {tod}) div {_DAY} AS INT)"

    def two(x: str) -> str:
        return f"lpad(CAST({x} AS STRING), 2, '0')"

    clock = f"{two(f'{tod} div 3600000000')}, ':', {two(f'({tod} div 60000000) % 60')}, ':', "
    clock += f"{two(f'({tod} div 1000000) % 60')}"
    frac = f"CASE WHEN {tod} % 1000000 = 0 THEN '' ELSE concat('.', lpad(CAST({tod} % 1000000 AS STRING), 6, '0')) END"
    head = '\'{"$datetime":"\''
    return f"concat({head}, CAST(date_from_unix_date({day}) AS STRING), 'T', {clock}, {frac}, '\"}}')"


_READ = {"bool": _read_bool, "float": _read_float, "str": _read_str, "datetime": _read_datetime}
_WRITE = {"bool": _write_bool, "float": _write_float, "str": _write_str, "datetime": _write_datetime}


def unreadable(function: str, key_repr: str, text: str, name: str, expected: str) -> str:
    """The error of a stored value the plan cannot read, naming key, value and attribute."""
    shown = f"coalesce(CAST({text} AS STRING), 'NULL')"
    return (
        f"raise_error(concat('StateTypeError: function \\'{function}\\': the stored state of key ', {key_repr}, "
        f"' holds ', {shown}, ' in attribute \\'{name}\\', not {expected} {UNREADABLE}'))"
    )


_ENTRY_TYPES = ("int", "bool", "none", "float", "datetime")  # a str field reads back without its quotes


@dataclass(frozen=True)
class StoredDict:
    """The per-key dict (``self.d[self.ctx.get_key()] = {...}``), kept as Python's JSON of the
    dict: ``{}`` before the key's entry is set, else ``{"<key>": {<fields>}}`` — or
    ``{"$dict": [[<key>, {<fields>}]]}`` for a NULL, int or bool key or a string key starting
    with ``$`` (state/encoding.py). Read as the plan's attributes ``<name>#exists`` and
    ``<name>.<field>``; written back from them (fields in the order the class sets them)."""

    name: str
    column: str
    key: str  # the key column's SQL
    key_ty: str  # str, int or bool
    fields: tuple[StoredAttribute, ...]  # each named "<name>.<field>"
    index: int = 0  # which per-key dict of the class (its helper columns' names)

    @property
    def attrs(self) -> tuple[str, ...]:
        return (self.name + EXISTS, *(f.name for f in self.fields))

    def _field(self, f: StoredAttribute) -> str:
        return f.name[len(self.name) + 1 :]

    def _key_text(self) -> str:
        """The key as from_json reads it back from the stored JSON (a string's text, a number's digits)."""
        if self.key_ty == "bool":
            return f"CASE WHEN {self.key} THEN 'true' WHEN NOT {self.key} THEN 'false' END"
        return f"CAST({self.key} AS STRING)"

    def _tagged(self) -> str:
        """Does Python write the ``$dict`` form for this key?"""
        if self.key_ty != "str":
            return "TRUE"
        return f"({self.key} IS NULL OR substr({self.key}, 1, 1) = '$')"

    def _cols(self) -> tuple[str, str, str]:
        """The helper columns: the key's entry (its JSON text), the entry's fields (a map of
        their JSON texts), and whether the stored text has the shape Python writes for it."""
        return (f"__ksn_dictentry{self.index}", f"__ksn_dictfields{self.index}", f"__ksn_dictok{self.index}")

    def helpers(self) -> list[tuple[str, str]]:
        """Columns ``starts`` reads, each parsing the stored text once (in either form)."""
        c = quote(self.column)
        entry_col, fields_col, ok_col = self._cols()
        pairs_col, plain_col = f"__ksn_dictpairs{self.index}", f"__ksn_dictplain{self.index}"
        pairs, plain = quote(pairs_col), quote(plain_col)
        pair = f"try_element_at({pairs}, 1)"
        tagged_form = f"""{c} LIKE '{{"$dict":[[%'"""
        stored_key = (
            f"CASE WHEN {tagged_form} THEN try_element_at({pair}, 1) ELSE try_element_at(map_keys({plain}), 1) END"
        )
        entry = (
            f"CASE WHEN {tagged_form} THEN try_element_at({pair}, 2) ELSE try_element_at(map_values({plain}), 1) END"
        )
        names = ", ".join(literal(Const("str", False, self._field(f))) for f in self.fields)
        # one entry, under this key, in the form Python writes for it, with the class's fields
        shape = (
            f"CASE WHEN {tagged_form} THEN {self._tagged()} AND size({pairs}) = 1 AND size({pair}) = 2 "
            f"ELSE NOT {self._tagged()} AND size({plain}) = 1 END"
        )
        fields = quote(fields_col)
        ok = (
            f"coalesce({shape} AND ({stored_key} <=> {self._key_text()}) "
            f"AND array_sort(map_keys({fields})) = array_sort(array({names})), FALSE)"
        )
        return [
            (pairs_col, f"from_json({c}, 'STRUCT<`$dict`: ARRAY<ARRAY<STRING>>>').`$dict`"),
            (plain_col, f"from_json({c}, 'MAP<STRING, STRING>')"),
            (entry_col, entry),
            (fields_col, f"from_json({quote(entry_col)}, 'MAP<STRING, STRING>')"),
            (ok_col, ok),
        ]

    def starts(self, function: str, key_repr: str) -> list[tuple[str, str]]:
        c = quote(self.column)
        _, fields_col, ok_col = self._cols()
        bad = unreadable(function, key_repr, c, self.name, "the per-key dict")
        exists = f"CASE WHEN {c} = '{{}}' THEN FALSE WHEN {quote(ok_col)} THEN TRUE ELSE {bad} END"
        out = [(self.name + EXISTS, exists)]
        for f in self.fields:
            text = f"try_element_at({quote(fields_col)}, {literal(Const('str', False, self._field(f)))})"
            value = f.read(function, key_repr, text)
            out.append((f.name, f"CASE WHEN {c} = '{{}}' THEN {null_literal(f.ty)} ELSE {value} END"))
        return out

    def write_from(self, value: Callable[[str], str]) -> str:
        parts = []
        for i, f in enumerate(self.fields):
            head = ("{" if i == 0 else ",") + json.dumps(self._field(f)) + ":"
            parts += [literal(Const("str", False, head)), f.write(value(f.name))]
        entry = f"concat({', '.join(parts)}, '}}')"
        key = StoredAttribute("", "", self.key_ty, True).write(self.key)  # the key's JSON, as a value's
        tagged = f"""concat('{{"$dict":[[', {key}, ',', {entry}, ']]}}')"""
        return (
            f"CASE WHEN NOT {value(self.name + EXISTS)} THEN '{{}}' "
            f"WHEN {self._tagged()} THEN {tagged} ELSE concat('{{', {key}, ':', {entry}, '}}') END"
        )

    def same(self, a: str, b: str) -> str:
        return f"({a} <=> {b})"


Stored = StoredAttribute | StoredDict


def _stored_dict(
    name: str,
    initial: dict[str, Const],
    bits: dict[str, int],
    nullable: dict[str, bool],
    key: tuple[str, str] | None,
    index: int,
) -> StoredDict:
    if key is None:
        raise Declined(f"attribute {name!r}: a per-key dict on a stream keyed by more than one column")
    prefix = name + "."
    fields = []
    for a, c in initial.items():  # (the fields in the order the class sets them)
        if not a.startswith(prefix):
            continue
        if c.ty not in _ENTRY_TYPES:
            raise Declined(
                f"attribute {name!r}: field {a[len(prefix) :]!r} of the per-key dict holds a {c.ty} "
                "(on a stream a per-key dict's fields may hold ints, floats, booleans, datetimes and None)"
            )
        fields.append(StoredAttribute(a, "", c.ty, True, c.ty == "int" and bits.get(a, 0) > 62, nullable.get(a, True)))
    return StoredDict(name, STATE_PREFIX + name, quote(key[0]), key[1], tuple(fields), index)


def stored_attributes(
    layout: AttributeLayout,
    initial: dict[str, Const],
    bits: dict[str, int],
    nullable: dict[str, bool],
    key: tuple[str, str] | None = None,
) -> list[Stored]:
    """Each state attribute's column, or Declined naming the attribute and what to change.
    ``key``: the key column and its Python type (str, int, bool), when there is one."""
    out: list[Stored] = []
    for name in layout.names:
        if name not in initial and name + EXISTS in initial:
            if not layout.is_encoded(name):
                raise Declined(f"attribute {name!r}: a per-key dict in a typed column (planned kept as JSON)")
            out.append(_stored_dict(name, initial, bits, nullable, key, len(out)))
            continue
        if name not in initial:
            raise Declined(f"attribute {name!r}: container state the plan does not track (a list, a set, a dict)")
        ty = initial[name].ty
        if layout.is_encoded(name):
            if ty not in _ENCODED:
                raise Declined(
                    f"attribute {name!r} holds a {ty} stored as JSON (native stream steps plan ints, floats, "
                    "booleans, strings, datetimes and None in state)"
                )
            wide = ty == "int" and bits.get(name, 0) > 62
            out.append(StoredAttribute(name, STATE_PREFIX + name, ty, True, wide, nullable.get(name, True)))
            continue
        _check_typed(layout, name, ty)
        wide = ty == "int" and bits.get(name, 0) > 62
        out.append(
            StoredAttribute(name, STATE_PREFIX + name, ty, False, wide, nullable.get(name, True), double=ty == "float")
        )
    return out


def _check_typed(layout: AttributeLayout, name: str, ty: str) -> None:
    """Declined unless the typed attribute ``name``'s column takes what the plan holds in it
    (``ty``), as the Python path's store does."""
    t = layout.column_type(name)
    ddl = t.ddl().lower() if isinstance(t, AtomicType) else str(t)
    # an attribute left None: NULL in an atomic column (a map column's NULLs could not be
    # compared with <=>, which Spark refuses on maps)
    left_none = ty == "none" and isinstance(t, AtomicType)
    if (ddl, ty) not in _TYPED and not left_none:
        raise Declined(
            f"attribute {name!r} is stored as {ddl.upper()} and the plan holds a {ty} in it "
            "(planned: int as BIGINT, float as DOUBLE, bool as BOOLEAN, str as STRING, datetime as TIMESTAMP)"
        )


def check_typed_attributes(layout: AttributeLayout, initial: dict[str, Const]) -> None:
    """Declined where a typed attribute would hold what its column does not take: the Python
    path refuses to store it at the end of each key, a one-shot batch's too."""
    for name in layout.names:
        if not layout.is_encoded(name) and name in initial:
            _check_typed(layout, name, initial[name].ty)

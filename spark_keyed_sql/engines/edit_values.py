"""UPDATE of keyed state, the part every engine shares: each ``SET column = expr`` checked
against the state as ``read_state`` shows it — a key column or an unknown column refused, an
expression that does not analyse refused, a value its column's type cannot hold refused
naming the column and the first key, a JSON-encoded attribute given text that is no JSON
refused — and turned into the column's new value (an expression over the flagged frame).
Nothing is written here: an engine writes the values its own way."""

from __future__ import annotations

import re
from typing import Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..api.errors import StateEncodingError
from ..compat.names import named
from ..compat.query_context import quiet_query_context_logs
from ..runtime.spec import FunctionSpec
from ..state.attributes import AttributeLayout
from ..state.checkpoint import CheckpointError, OperatorRecord
from ..state.encoding import loads

__all__ = ["assigned_values", "check_statement", "first_line", "key_text"]

_ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"  # datetime.fromisoformat reads it on every Python
_INTEGRAL = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_NON_FINITE_TEXT = re.compile(r'"(NaN|Infinity|-Infinity)"')
_EPOCH_NTZ = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"


def _json_native(t: T.DataType) -> bool:
    """Whether ``to_json`` writes a value of ``t`` as the JSON of the Python value it reads as
    (lists, dicts with text keys, text, numbers, bools; ``array()``'s and ``map()``'s void)."""
    if isinstance(t, (T.NullType, T.StringType, T.FloatType, T.DoubleType, *_INTEGRAL)):
        return True
    if isinstance(t, T.ArrayType):
        return _json_native(t.elementType)
    if isinstance(t, T.MapType):
        return isinstance(t.keyType, (T.StringType, T.NullType)) and _json_native(t.valueType)
    if isinstance(t, T.StructType):
        return all(_json_native(f.dataType) and not f.name.startswith("$") for f in t.fields)
    return False


def _has_floats(t: T.DataType) -> bool:
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return True
    if isinstance(t, T.ArrayType):
        return _has_floats(t.elementType)
    if isinstance(t, T.MapType):
        return _has_floats(t.valueType)
    return isinstance(t, T.StructType) and any(_has_floats(f.dataType) for f in t.fields)


def _stored_json(value: Column, vtype: T.DataType) -> Column | None:
    """``value`` (of type ``vtype``, not a string) as an untyped attribute stores the Python
    value it reads as (state/encoding.py): a number or a bool as JSON, a timestamp as
    ``{"$datetime": <its UTC wall clock>}``, a date, a decimal, bytes tagged; None for a type
    with no such form (an interval, a map keyed by other than text). Times are written by
    ``to_json`` in UTC, never through the session's time zone (a wall clock a DST change
    repeats or skips stays as it is)."""

    def tagged(tag: str, body: Column, options: dict[str, str] | None = None) -> Column:
        return F.when(value.isNotNull(), F.to_json(F.struct(body.alias(tag)), options))

    def text(tag: str, body: str) -> Column:
        return F.lit(f'{{"{tag}": "{body}"}}')

    if isinstance(vtype, (T.NullType, *_INTEGRAL)):
        return value.cast("string")
    if isinstance(vtype, (T.FloatType, T.DoubleType)):
        return (
            F.when(F.isnan(value), text("$float", "nan"))
            .when(value == F.lit(float("inf")), text("$float", "inf"))
            .when(value == F.lit(float("-inf")), text("$float", "-inf"))
            .otherwise(value.cast("double").cast("string"))
        )
    if isinstance(vtype, T.DecimalType):
        return tagged("$decimal", value.cast("string"))
    if isinstance(vtype, T.TimestampType):  # the instant's UTC wall clock: naive datetimes in state are UTC
        return tagged("$datetime", value, {"timestampFormat": _ISO, "timeZone": "UTC"})
    if isinstance(vtype, T.TimestampNTZType):
        return tagged("$datetime", value, {"timestampNTZFormat": _ISO})
    if isinstance(vtype, T.DateType):
        return tagged("$date", value, {"dateFormat": "yyyy-MM-dd"})
    if isinstance(vtype, T.BinaryType):
        return tagged("$bytes", F.base64(value))
    if isinstance(vtype, (T.ArrayType, T.MapType, T.StructType)) and _json_native(vtype):
        return F.to_json(value, {"ignoreNullFields": "false"})  # (a struct's NULL field is a None, kept)
    return None


def _crossed_at_utc(text: str, vtype: T.DataType, target: T.DataType) -> str:
    """``text`` (of type ``vtype``) for a column of ``target``: a timestamp set into a column of
    the other kind (``timestamp`` <-> ``timestamp_ntz``) crosses at UTC, as the function itself
    sees it (an instant is its UTC wall clock there), never at the session's time zone (Spark's
    cast, and the functions that coerce one kind into the other): an instant's microseconds
    since the epoch added to the epoch's wall clock; a wall clock's fields read as UTC's (so a
    wall clock a DST change repeats or skips stays right; Spark 3.5's ``timestampadd`` takes no
    bigint)."""
    if isinstance(vtype, T.TimestampType) and isinstance(target, T.TimestampNTZType):
        return f"{_EPOCH_NTZ} + make_dt_interval(0, 0, 0, CAST(unix_micros(({text})) AS DECIMAL(20, 0)) / 1000000)"
    if isinstance(vtype, T.TimestampNTZType) and isinstance(target, T.TimestampType):
        x = f"({text})"
        fields = ", ".join(f"{f}({x})" for f in ("year", "month", "day", "hour", "minute"))
        return f"make_timestamp({fields}, extract(SECOND FROM {x}), 'UTC')"
    return text


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def key_text(op: OperatorRecord, row: Any, keys: list[str]) -> str:
    return ", ".join(f"{name}={row[k]!r}" for name, k in zip(op.keys, keys))


def _state_column(column: str, by_name: dict[str, str], key_names: set[str], shown: dict[str, str], what: str) -> str:
    """The internal name of the state column ``SET column`` names; a key column or an unknown
    one refused, naming the columns there are as read_state shows them."""
    if column.lower() in key_names:
        raise CheckpointError(f"{what}: SET {column}: a key column cannot be set (DELETE the key instead)")
    internal = by_name.get(column.lower())
    if internal is None:
        names = ", ".join(shown[c] for c in by_name.values()) or "none"
        raise CheckpointError(f"{what}: SET {column}: no such state column (state columns: {names})")
    return internal


def check_statement(
    readable: DataFrame, where: str, assignments: tuple[tuple[str, str], ...], keys: tuple[str, ...], what: str
) -> None:
    """The WHERE and each SET analysed against the state as read_state shows it (``readable``:
    the key columns, the state columns and batch_id, by those names), before a key is counted
    or anything is written: a wrong name is refused whether or not a key matches, and Spark's
    suggestions name only columns the user can write."""
    columns = ", ".join(readable.columns)
    with quiet_query_context_logs():
        try:
            readable.select(F.expr(where).cast("boolean")).schema  # noqa: B018 - analysed, not run
        except (AnalysisException, ParseException) as exc:
            raise CheckpointError(f"{what}: WHERE {where}: {first_line(exc)} (columns: {columns})") from None
        shown = {c: c for c in readable.columns if c not in keys and c != "batch_id"}
        by_name = {c.lower(): c for c in shown}
        key_names = {k.lower() for k in keys}
        for column, text in assignments:
            internal = _state_column(column, by_name, key_names, shown, what)
            try:
                vtype = readable.select(F.expr(text).alias("v")).schema["v"].dataType
            except (AnalysisException, ParseException) as exc:
                raise CheckpointError(
                    f"{what}: SET {column} = {text}: {first_line(exc)} (columns: {columns}). A SET value is an SQL "
                    "expression: a string value is written quoted, 'text' (from Python: set={'col': \"'text'\"}, or "
                    "a Python value that is no str: None, a number, a bool, a date or datetime)"
                ) from None
            target = readable.schema[internal].dataType
            try:  # (a value of a type the column's cannot be cast from: e.g. an array of strings for a list of structs)
                readable.select(F.expr(f"try_cast(({text}) AS {target.simpleString()})")).schema  # noqa: B018
            except (AnalysisException, ParseException):
                raise CheckpointError(
                    f"{what}: SET {column} = {text}: column '{column}' is {target.simpleString()} and the value is "
                    f"{vtype.simpleString()}, which cannot be cast to it; nothing was written"
                ) from None


def assigned_values(
    flagged: DataFrame,
    match: str,
    shown: dict[str, str],
    keys: list[str],
    op: OperatorRecord,
    assignments: tuple[tuple[str, str], ...],
    spec: FunctionSpec | None,
    attributes: set[str],
    what: str,
) -> dict[str, Column]:
    """``flagged``: the state with a boolean column ``match`` (the keys the WHERE matched);
    ``shown``: its state columns, internal name -> the name read_state shows; ``keys``: its key
    columns; ``attributes``: the internal names holding a StatefulFunction's attributes (a
    string one may hold an untyped attribute's JSON). Returns internal name -> its checked new
    value (the matched rows' only: the caller keeps the others' values)."""
    by_name = {n.lower(): c for c, n in shown.items() if c not in keys}
    key_names = {k.lower() for k in op.keys}
    layout: AttributeLayout | None = None
    out: dict[str, Column] = {}
    for column, text in assignments:
        internal = _state_column(column, by_name, key_names, shown, what)
        target = flagged.schema[internal].dataType
        name = shown[internal]
        try:
            value = F.expr(text)
            vtype = flagged.select(value.alias("v")).schema["v"].dataType
        except (AnalysisException, ParseException) as exc:
            raise CheckpointError(f"{what}: SET {column} = {text}: {first_line(exc)}") from None
        encoded = internal in attributes and isinstance(target, T.StringType)
        if encoded:
            if layout is None:
                if spec is None:
                    raise CheckpointError(
                        f"{what}: SET {column}: attribute '{name}' is a string column, which holds either a str or "
                        "the JSON encoding of an untyped attribute; register the function (ks.register) so the edit "
                        "knows which, and run it again"
                    )
                layout = AttributeLayout(spec.instantiate())
            encoded = layout.is_encoded(name)
        if encoded and not isinstance(vtype, T.StringType):
            # a value, not text: stored as the Python value it reads as (a timestamp as a datetime)
            checked = _stored_json(value, vtype)
            if checked is None:
                raise CheckpointError(
                    f"{what}: SET {column} = {text}: attribute '{name}' is stored as its JSON encoding, which has no "
                    f"form for a {vtype.simpleString()} value; give JSON text (to_json(...)) or a value of another "
                    "type; nothing was written"
                )
        else:
            crossed = _crossed_at_utc(text, vtype, target)
            if crossed != text:
                value, vtype = F.expr(crossed), target
            checked = F.expr(f"try_cast(({crossed}) AS {target.simpleString()})")
            lost = value.isNotNull() & checked.isNull()
            if vtype != target and isinstance(target, T.AtomicType) and isinstance(vtype, T.AtomicType):
                lost = lost | (value.isNotNull() & ~checked.cast(vtype).eqNullSafe(value))  # e.g. 1.5 into an int
            bad = flagged.where(F.col(match) & lost).select(*map(named, keys), value.alias("v")).limit(1).collect()
            if bad:
                raise CheckpointError(
                    f"{what}: SET {column} = {text}: column '{name}' is {target.simpleString()} and cannot hold "
                    f"{bad[0]['v']!r} (key {key_text(op, bad[0], keys)}); nothing was written"
                )
        if encoded:
            # to_json writes NaN and infinities inside a collection as text ("NaN"): they would read as str
            floats_inside = _has_floats(vtype) and not isinstance(vtype, (T.FloatType, T.DoubleType))
            for r in flagged.where(F.col(match)).select(*map(named, keys), checked.alias("v")).collect():
                if floats_inside and r["v"] is not None and _NON_FINITE_TEXT.search(r["v"]):
                    raise CheckpointError(
                        f"{what}: SET {column} = {text}: attribute '{name}' is stored as its JSON encoding, which "
                        f"holds no NaN or infinity inside a {vtype.simpleString()} (key {key_text(op, r, keys)}); "
                        "nothing was written"
                    )
                try:
                    if r["v"] is not None:
                        loads(r["v"])
                except (ValueError, TypeError, KeyError, StateEncodingError) as exc:
                    raise CheckpointError(
                        f"{what}: SET {column} = {text}: attribute '{name}' is stored as its JSON encoding "
                        f"and {r['v']!r} (key {key_text(op, r, keys)}) is not one ({exc}); nothing was written"
                    ) from None
        out[internal] = checked
    return out

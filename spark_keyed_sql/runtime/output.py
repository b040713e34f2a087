"""What a user function returned, as rows of its ``returns`` schema."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from ..api.errors import OutputSchemaError, StateTypeError
from ..api.types import MapType, StructType
from ..api.values import FAST_CHECK_NAMES, coerce, fast_check, short_repr
from ..compat.codegen import generated_function

__all__ = ["normalize_output", "normalizer", "rows_as_dicts", "snapshot", "tuple_converter", "Where", "resolve_where"]

# where a value came from, for error messages only: a string, or a callable that builds it
# (a per-row message would cost more than the row itself)
Where = str | Callable[[], str]


def resolve_where(where: Where) -> str:
    return where() if callable(where) else where


_FIELDS: dict[int, tuple[StructType, tuple]] = {}


def _fields(schema: StructType) -> tuple:
    """(names, name set, (name, type, label) per field, tuple converter, dict converter),
    computed once per schema object."""
    hit = _FIELDS.get(id(schema))
    if hit is None or hit[0] is not schema:
        names = tuple(schema.names)
        fields = tuple((f.name, f.type, f"column '{f.name}'") for f in schema.fields)
        info = (names, frozenset(names), fields, *_converters(fields))
        hit = _FIELDS[id(schema)] = (schema, info)
    return hit[1]


def _converters(fields: tuple) -> tuple[Callable[[Any], tuple], Callable[[dict], tuple]]:
    """Generated per schema: a value that already has the exact Python type Spark wants passes
    with one inline check; anything else (None, numpy, wider types, errors) goes to ``coerce``.
    One output row per input row makes this the engines' hottest path."""
    env: dict[str, Any] = {"coerce": coerce, **FAST_CHECK_NAMES}
    lines = []
    for i, (_, t, label) in enumerate(fields):
        env[f"t{i}"], env[f"l{i}"] = t, label
        check = fast_check(t, f"v{i}")
        convert = f"coerce(v{i}, t{i}, l{i})"
        lines.append(f"    v{i} = v{i} if {check} else {convert}" if check else f"    v{i} = {convert}")
    vs = ", ".join(f"v{i}" for i in range(len(fields)))
    body = "\n".join(lines) or "    pass"
    unpack = f"    {vs}, = value" if fields else "    pass"
    gets = "\n".join(f"    v{i} = g({name!r})" for i, (name, _, _) in enumerate(fields)) or "    pass"
    src = (
        f"def from_tuple(value):\n{unpack}\n{body}\n    return ({vs}{',' if fields else ''})\n"
        f"def from_dict(value):\n    g = value.get\n{gets}\n{body}\n    return ({vs}{',' if fields else ''})\n"
    )
    from_tuple = generated_function(src, "from_tuple", env, "output converter")
    return from_tuple, env["from_dict"]


def tuple_converter(schema: StructType) -> Callable[[Any], tuple]:
    """The generated converter of a tuple of ``schema``'s width (raises StateTypeError)."""
    return _fields(schema)[3]


def normalize_output(result: Any, schema: StructType | None, where: Where) -> list[Any]:
    """dict / tuple / None / DataFrame / iterable of those -> list of tuples in ``schema`` order.

    With ``schema`` None (KeyedTester without ``returns``) dicts and tuples pass unchanged.
    """
    out: list[Any] = []
    t = type(result)
    if t is list:  # the common shapes first, without the general dispatch
        for item in result:
            if type(item) is tuple or type(item) is dict:
                out.append(_row(item, schema, where))
            else:
                _collect(item, schema, where, out, top=False)
        return out
    if t is dict:
        out.append(_row(result, schema, where))
        return out
    _collect(result, schema, where, out, top=True)
    return out


def normalizer(schema: StructType | None) -> Callable[[Any, Where], list[Any]]:
    """``normalize_output`` bound to one schema, for a loop over many results: the common
    shapes (a tuple or dict, a list of them) go straight to the generated converters."""
    if schema is None:
        return lambda result, where: normalize_output(result, None, where)
    names, name_set, _, from_tuple, from_dict = _fields(schema)
    width = len(names)

    def one(item: Any) -> Any:
        t = type(item)
        try:
            if t is tuple and len(item) == width:
                return from_tuple(item)
            if t is dict and name_set.issuperset(item):
                return from_dict(item)
        except StateTypeError:
            pass  # _row below says what was wrong, with the where
        return None

    def normalize(result: Any, where: Where) -> list[Any]:
        t = type(result)
        if t is list:
            out = []
            for item in result:
                row = one(item)
                if row is not None:
                    out.append(row)
                elif type(item) is tuple or type(item) is dict:
                    out.append(_row(item, schema, where))  # raises, saying what is wrong
                else:
                    _collect(item, schema, where, out, top=False)  # a Row, None, ...
            return out
        if t is tuple or t is dict:
            row = one(result)
            if row is not None:
                return [row]
        return normalize_output(result, schema, where)

    return normalize


def _collect(result: Any, schema: StructType | None, where: Where, out: list, top: bool) -> None:
    if result is None:
        return
    if isinstance(result, dict) or (isinstance(result, tuple) and hasattr(result, "__fields__")):
        out.append(_row(result.asDict() if hasattr(result, "asDict") else result, schema, where))
        return
    if isinstance(result, tuple):
        out.append(_row(result, schema, where))
        return
    if type(result).__name__ == "DataFrame" and hasattr(result, "to_dict"):
        for rec in result.to_dict("records"):
            out.append(_row({k: _unnan(v) for k, v in rec.items()}, schema, where))
        return
    if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
        if schema is not None and len(schema.fields) == 1:
            out.append(_row((result,), schema, where))
            return
        raise OutputSchemaError(
            f"{resolve_where(where)} returned {type(result).__name__} {result!r}; return a dict, a tuple, None, "
            "a pandas DataFrame or an iterable of dicts/tuples"
        )
    if not top:
        raise OutputSchemaError(
            f"{resolve_where(where)} yielded a nested {type(result).__name__}; yield dicts or tuples"
        )
    for item in result:
        _collect(item, schema, where, out, top=False)


def _unnan(v: Any) -> Any:
    return None if isinstance(v, float) and v != v else v


_MUTABLE = (dict, list, set, bytearray)


def snapshot(value: Any) -> Any:
    """``value`` fixed as it is now: mutable containers (also inside tuples) are copied, deeply,
    so a row a function returned does not change when the function later mutates the state it
    returned (the SAGE seed returns ``self.user_sessions[user_id]``, the live dict). Scalars
    and other immutable values are returned as they are, with one type check."""
    t = type(value)
    if t is dict:
        return {k: snapshot(v) for k, v in value.items()}
    if t is list:
        return [snapshot(v) for v in value]
    if t is tuple:
        return (
            tuple(snapshot(v) for v in value)
            if any(isinstance(v, _MUTABLE) or type(v) is tuple for v in value)
            else value
        )
    if t is set:
        return {snapshot(v) for v in value}
    if t is bytearray:
        return bytearray(value)
    if isinstance(value, _MUTABLE):  # subclasses (OrderedDict, defaultdict, ...): keep their type
        return copy.deepcopy(value)
    return value


def _row(value: Any, schema: StructType | None, where: Where) -> Any:
    if schema is None:
        # no returns schema (KeyedTester): the row is handed back as given, so fix it here; with
        # a schema the generated converters build new rows, and coerce rebuilds every container
        return snapshot(value)
    names, name_set, fields, from_tuple, from_dict = _fields(schema)
    try:
        if isinstance(value, dict):
            if name_set.issuperset(value):
                return from_dict(value)
            unknown = [k for k in value if k not in name_set]
            if len(fields) == 1 and isinstance(fields[0][1], (MapType, StructType)):
                n, t, label = fields[0]  # a dict as the one column's value
                return (coerce(value, t, label),)
            raise OutputSchemaError(
                f"{resolve_where(where)} returned {short_repr(value)} with key(s) {unknown} that are not columns of "
                f"returns ({schema.field_ddl()})"
            )
        if len(value) != len(names):
            raise OutputSchemaError(
                f"{resolve_where(where)} returned {len(value)} value(s) {short_repr(value)} but returns has "
                f"{len(names)} column(s) ({schema.field_ddl()})"
            )
        return from_tuple(value)
    except StateTypeError as exc:
        raise OutputSchemaError(
            f"{resolve_where(where)} returned {short_repr(value)} that does not match returns ({schema.field_ddl()}): "
            f"{exc}"
        ) from None


def rows_as_dicts(rows: list[tuple], schema: StructType | None) -> list[Any]:
    if schema is None:
        return rows
    return [dict(zip(schema.names, r)) for r in rows]

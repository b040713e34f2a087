"""What a user function returned, as rows of its ``returns`` schema."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..api.errors import OutputSchemaError, StateTypeError
from ..api.types import StructType, coerce

__all__ = ["normalize_output", "rows_as_dicts"]


def normalize_output(result: Any, schema: StructType | None, where: str) -> list[Any]:
    """dict / tuple / None / DataFrame / iterable of those -> list of tuples in ``schema`` order.

    With ``schema`` None (KeyedTester without ``returns``) dicts and tuples pass unchanged.
    """
    out: list[Any] = []
    _collect(result, schema, where, out, top=True)
    return out


def _collect(result: Any, schema: StructType | None, where: str, out: list, top: bool) -> None:
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
            f"{where} returned {type(result).__name__} {result!r}; return a dict, a tuple, None, "
            "a pandas DataFrame or an iterable of dicts/tuples"
        )
    if not top:
        raise OutputSchemaError(f"{where} yielded a nested {type(result).__name__}; yield dicts or tuples")
    for item in result:
        _collect(item, schema, where, out, top=False)


def _unnan(v: Any) -> Any:
    return None if isinstance(v, float) and v != v else v


def _row(value: Any, schema: StructType | None, where: str) -> Any:
    if schema is None:
        return value
    names = schema.names
    try:
        if isinstance(value, dict):
            unknown = [k for k in value if k not in names]
            if not unknown:
                return tuple(coerce(value.get(f.name), f.type, f"column '{f.name}'") for f in schema.fields)
            if len(schema.fields) == 1:
                f = schema.fields[0]
                return (coerce(value, f.type, f"column '{f.name}'"),)
            raise OutputSchemaError(
                f"{where} returned {_short(value)} with key(s) {unknown} that are not columns of "
                f"returns ({schema.field_ddl()})"
            )
        if len(value) != len(names):
            raise OutputSchemaError(
                f"{where} returned {len(value)} value(s) {_short(value)} but returns has "
                f"{len(names)} column(s) ({schema.field_ddl()})"
            )
        return tuple(coerce(v, f.type, f"column '{f.name}'") for v, f in zip(value, schema.fields))
    except StateTypeError as exc:
        raise OutputSchemaError(f"{where} returned {_short(value)} that does not match returns ({schema.field_ddl()}): {exc}") from None


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 120 else r[:117] + "..."


def rows_as_dicts(rows: list[tuple], schema: StructType | None) -> list[Any]:
    if schema is None:
        return rows
    return [dict(zip(schema.names, r)) for r in rows]

"""Column lists and ORDER BY lists given as strings (``key => 'a, b'``, ``order_by => 'ts DESC'``),
read with sqlglot's Spark dialect rather than split by hand. (sqlglot loads when a list is
read: the Python workers that import this module never read one.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..api.errors import SchemaError
from ..compat.names import quote
from .keys import OrderSpec

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = ["parse_column_list", "parse_order_list", "quote"]


def _parse(sql: str, what: str, text: str) -> exp.Expression:
    import sqlglot
    from sqlglot.errors import ParseError

    try:
        return sqlglot.parse_one(sql, read="spark")
    except ParseError as exc:
        detail = exc.errors[0]["description"] if exc.errors else str(exc)
        raise SchemaError(f"cannot read {what} {text!r}: {detail}") from None


def parse_column_list(text: str | list[str] | None, what: str = "key") -> list[str]:
    if text is None:
        return []
    if isinstance(text, (list, tuple)):
        return [str(t) for t in text]
    if not isinstance(text, str):
        raise SchemaError(f"{what} must be a string of column names, got {text!r}")
    if not text.strip():
        return []
    from sqlglot import exp

    select = _parse(f"SELECT {text}", what, text)
    names = []
    for e in select.expressions:
        if not isinstance(e, exp.Column) or e.table:
            raise SchemaError(f"{what} {text!r}: {e.sql(dialect='spark')!r} is not a plain column name")
        names.append(e.name)
    return names


def parse_order_list(text: str | list[str] | None) -> list[OrderSpec]:
    """``'ts DESC, seq'`` -> the ORDER BY items. In a list, an item without a space or a backtick
    is a column name as written (as in ``parse_column_list``'s lists: ``["u.ts"]`` names the
    column ``u.ts``); any other item is read as ORDER BY items (``"ts DESC"``, ``"`u.ts` DESC"``),
    so a misspelt direction is refused, not taken for a name."""
    if text is None:
        return []
    if isinstance(text, (list, tuple)):
        out = []
        for item in map(str, text):
            if item and "`" not in item and not any(c.isspace() for c in item):
                out.append(OrderSpec(item, True, None))
            else:
                out += _order_items(item)
        return out
    return _order_items(text)


def _order_items(text: str) -> list[OrderSpec]:
    if not text.strip():
        return []
    from sqlglot import exp

    select = _parse(f"SELECT 1 ORDER BY {text}", "order_by", text)
    out = []
    for o in select.args["order"].expressions:
        col = o.this
        if not isinstance(col, exp.Column) or col.table:
            raise SchemaError(f"order_by {text!r}: {col.sql(dialect='spark')!r} is not a plain column name")
        desc = bool(o.args.get("desc"))
        nf = o.args.get("nulls_first")
        out.append(OrderSpec(col.name, not desc, None if nf is None else bool(nf)))
    return out

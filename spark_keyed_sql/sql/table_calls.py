"""The table-function form given to ``ks.sql`` / ``ks.start`` / ``ks.run`` / ``EXPLAIN KEYED``.

``fn(TABLE(src), key => 'a, b', order_by => 'ts')`` in a FROM clause, where ``fn`` is a
registered function, is the keyed select it stands for::

    (SELECT a, b, fn.* FROM src GROUP BY KEY a, b WITH STATE fn(*) ORDER BY ts) AS fn

so it runs on the engines like any keyed query: at ``GROUP BY KEY`` speed, over batch or
streaming inputs, with checkpoints (plain ``spark.sql`` keeps Spark's UDTF, batch only). Its
output is the key columns followed by the function's ``returns`` columns; every column of
``src`` is an argument, as the UDTF hands them. ``TABLE(...)`` takes what FROM takes: a table
or view, a directory named the Spark way (``parquet.`/dir```), or a subquery."""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError

from ..api.errors import SchemaError
from ..runtime.columns import parse_column_list
from .dialect import KeyedSpark
from .errors import KeyedQueryError
from .expressions import KeyedGroup

__all__ = ["TABLE_CALL_ARGUMENTS", "expand_table_calls", "mentions_table_call"]

# the named arguments of the table-function form
TABLE_CALL_ARGUMENTS = ("key", "order_by")


def mentions_table_call(text: str, registered: Callable[[str], bool]) -> bool:
    """True when the tokens hold ``<registered name> ( TABLE``."""
    try:
        tokens = KeyedSpark().tokenize(text)
    except (TokenError, ValueError):
        return False
    return any(
        a.text.upper() != "TABLE" and b.text == "(" and c.text.upper() == "TABLE" and registered(a.text)
        for a, b, c in zip(tokens, tokens[1:], tokens[2:])
    )


def _call_of(table: exp.Table) -> exp.Anonymous | None:
    call = table.this
    if isinstance(call, exp.Anonymous) and call.expressions:
        first = call.expressions[0]
        if isinstance(first, exp.Anonymous) and first.name.upper() == "TABLE":
            return call
    return None


def _literal(call: exp.Anonymous, name: str, value: exp.Expression) -> str:
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise KeyedQueryError(
            f"{call.name}(TABLE(...), {name} => ...): {name} must be a string literal such as '{name}_column', "
            f"got {value.sql(dialect=KeyedSpark)}"
        )
    return value.this


def _source(call: exp.Anonymous) -> exp.Expression:
    """What ``TABLE(...)`` names, as a FROM item: a table, a file directory or a subquery."""
    arg = call.expressions[0]
    if len(arg.expressions) != 1:
        raise KeyedQueryError(f"{call.name}: TABLE(...) takes one table, view or subquery")
    inner = arg.expressions[0]
    if isinstance(inner, exp.Subquery):
        inner = inner.this
    if isinstance(inner, exp.Query):
        return exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"__ks_{call.name}_input")))
    if isinstance(inner, exp.Column):
        parts = [p.copy() for p in inner.parts]
        return exp.Table(
            this=parts[-1], db=parts[-2] if len(parts) > 1 else None, catalog=parts[-3] if len(parts) > 2 else None
        )
    if isinstance(inner, exp.Table):
        return inner.copy()
    raise KeyedQueryError(
        f"{call.name}: TABLE(...) takes a table, a view, a directory (parquet.`/dir`) or a subquery, "
        f"got {inner.sql(dialect=KeyedSpark)}"
    )


def _expand(table: exp.Table, call: exp.Anonymous) -> exp.Expression:
    fn = call.name
    named: dict[str, str] = {}
    for arg in call.expressions[1:]:
        if not isinstance(arg, exp.Kwarg):
            raise KeyedQueryError(
                f"{fn}(TABLE(...), ...): arguments after TABLE(...) are named, e.g. key => 'user_id', "
                f"order_by => 'ts'; got {arg.sql(dialect=KeyedSpark)}"
            )
        name = arg.this.name.lower()
        if name not in TABLE_CALL_ARGUMENTS:
            raise KeyedQueryError(
                f"{fn}(TABLE(...), ...): unknown argument {arg.this.name!r}; known: {', '.join(TABLE_CALL_ARGUMENTS)}"
            )
        named[name] = _literal(call, name, arg.expression)
    try:
        keys = parse_column_list(named.get("key"), "key")
    except SchemaError as exc:
        raise KeyedQueryError(f"{fn}: {exc}") from None
    order = None
    if named.get("order_by", "").strip():
        try:
            order = (
                sqlglot.parse_one(f"SELECT 1 ORDER BY {named['order_by']}", read=KeyedSpark).args["order"].expressions
            )
        except Exception:  # noqa: BLE001 - sqlglot's own message is about the made-up SELECT
            raise KeyedQueryError(
                f"{fn}: order_by {named['order_by']!r} is not a list of columns with ASC/DESC"
            ) from None
    key_columns = [exp.column(k, quoted=True) for k in keys]
    group = KeyedGroup(
        keys=key_columns, keyed=bool(keys), function=exp.Anonymous(this=fn, expressions=[exp.Star()]), order=order
    )
    select = exp.select(*[k.copy() for k in key_columns], exp.Column(this=exp.Star(), table=exp.to_identifier(fn)))
    select = select.from_(_source(call))
    select.set("group", group)
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(fn))
    return exp.Subquery(this=select, alias=alias.copy())


def expand_table_calls(tree: exp.Expression, registered: Callable[[str], bool]) -> exp.Expression:
    """``tree`` with every table-function call of a registered function replaced by its keyed
    subquery (innermost first: a call may read another's output through a subquery)."""
    calls = [(t, c) for t in tree.find_all(exp.Table) if (c := _call_of(t)) is not None and registered(c.name)]
    for table, call in reversed(calls):
        replacement = _expand(table, call)
        if table is tree:
            return replacement
        table.replace(replacement)
    return tree

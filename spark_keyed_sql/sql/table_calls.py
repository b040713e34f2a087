"""The table-function form given to ``ks.sql`` / ``ks.start`` / ``ks.run`` / ``EXPLAIN KEYED``.

``fn(TABLE(src), key => 'a, b', order_by => 'ts')`` in a FROM clause, where ``fn`` is a
registered function, is the keyed select it stands for::

    (SELECT a, b, fn.* FROM src GROUP BY KEY a, b WITH STATE fn(*) ORDER BY ts) AS fn

so it runs on the engines like any keyed query: at ``GROUP BY KEY`` speed, over batch or
streaming inputs, with checkpoints (plain ``spark.sql`` keeps Spark's UDTF, batch only). Its
output is the key columns followed by the function's ``returns`` columns; every column of
``src`` is an argument, as the UDTF hands them. ``TABLE(...)`` takes what FROM takes: a table
or view, a directory named the Spark way (``parquet.`/dir```), or a subquery.

Several named inputs (``fn(impressions => TABLE(i), clicks => TABLE(c), key => 'id')``) feed one
function with one state per key: their rows are brought together (``UNION ALL``) with the index
of the input each came from, the columns they share (key, ``order_by``, ``event_time``) once and
each input's other columns apart; the keyed step's plan learns, per input, which columns make
its rows (``KeyedGroup``'s ``inputs``). Within a batch a key's rows go in ``order_by`` order,
rows of one position in the order of the inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError

from ..api.errors import SchemaError
from ..runtime.columns import parse_column_list
from .dialect import KeyedSpark
from .errors import KeyedQueryError
from .expressions import KeyedGroup
from .parse import render

__all__ = ["INPUT_COLUMN", "TABLE_CALL_ARGUMENTS", "expand_table_calls", "input_column", "mentions_table_call"]

# the named arguments of the table-function form (besides the named inputs)
TABLE_CALL_ARGUMENTS = ("key", "order_by", "event_time", "watermark")
INPUT_COLUMN = "__ks_input"  # the index of the input a row came from (several inputs)

Schema = Callable[[exp.Expression], list[tuple[str, str]]]  # a FROM item -> (column, Spark type) pairs


def input_column(i: int, column: str) -> str:
    """The union column that holds input ``i``'s own column ``column``."""
    return f"__ks_in{i}_{column}"


def mentions_table_call(text: str, registered: Callable[[str], bool]) -> bool:
    """True when the tokens hold ``<registered name> ( TABLE`` or ``<name> ( <arg> => TABLE``."""
    try:
        tokens = KeyedSpark().tokenize(text)
    except (TokenError, ValueError):
        return False
    for i, t in enumerate(tokens[:-2]):
        if tokens[i + 1].text != "(" or t.text.upper() == "TABLE" or not registered(t.text):
            continue
        rest = [x.text.upper() for x in tokens[i + 2 : i + 5]]
        if rest[:1] == ["TABLE"] or rest[1:3] == ["=>", "TABLE"] or rest[1:2] == ["=>"] and rest[2:3] == ["TABLE"]:
            return True
    return False


def _is_table_arg(e: exp.Expression) -> bool:
    return isinstance(e, exp.Anonymous) and e.name.upper() == "TABLE"


def _call_of(table: exp.Table) -> exp.Anonymous | None:
    call = table.this
    if not isinstance(call, exp.Anonymous) or not call.expressions:
        return None
    for e in call.expressions:
        if _is_table_arg(e) or (isinstance(e, exp.Kwarg) and _is_table_arg(e.expression)):
            return call
    return None


def _literal(fn: str, name: str, value: exp.Expression) -> str:
    if not (isinstance(value, exp.Literal) and value.is_string):
        raise KeyedQueryError(
            f"{fn}(TABLE(...), {name} => ...): {name} must be a string literal such as '{name}_column', "
            f"got {value.sql(dialect=KeyedSpark)}"
        )
    return value.this


def _source(fn: str, arg: exp.Expression, alias: str) -> exp.Expression:
    """What ``TABLE(...)`` names, as a FROM item: a table, a file directory or a subquery."""
    if len(arg.expressions) != 1:
        raise KeyedQueryError(f"{fn}: TABLE(...) takes one table, view or subquery")
    inner = arg.expressions[0]
    if isinstance(inner, exp.Subquery):
        inner = inner.this
    if isinstance(inner, exp.Query):
        return exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))
    if isinstance(inner, exp.Column):
        parts = [p.copy() for p in inner.parts]
        return exp.Table(
            this=parts[-1], db=parts[-2] if len(parts) > 1 else None, catalog=parts[-3] if len(parts) > 2 else None
        )
    if isinstance(inner, exp.Table):
        return inner.copy()
    raise KeyedQueryError(
        f"{fn}: TABLE(...) takes a table, a view, a directory (parquet.`/dir`) or a subquery, "
        f"got {inner.sql(dialect=KeyedSpark)}"
    )


def _parts(call: exp.Anonymous) -> tuple[list[tuple[str | None, exp.Expression]], dict[str, str]]:
    """The call's inputs ((name or None, TABLE(...))) and its other named arguments."""
    fn = call.name
    inputs: list[tuple[str | None, exp.Expression]] = []
    named: dict[str, str] = {}
    for arg in call.expressions:
        if _is_table_arg(arg):
            if inputs:
                raise KeyedQueryError(
                    f"{fn}: several inputs are given by name: {fn}(a => TABLE(...), b => TABLE(...), key => '...')"
                )
            inputs.append((None, arg))
            continue
        if not isinstance(arg, exp.Kwarg):
            raise KeyedQueryError(
                f"{fn}(TABLE(...), ...): arguments after TABLE(...) are named, e.g. key => 'user_id', "
                f"order_by => 'ts'; got {arg.sql(dialect=KeyedSpark)}"
            )
        name = arg.this.name
        if _is_table_arg(arg.expression):
            if any(n is None for n, _ in inputs) or name.lower() in {(n or "").lower() for n, _ in inputs}:
                raise KeyedQueryError(f"{fn}: input {name!r} given twice, or beside an unnamed TABLE(...)")
            if name.lower() in TABLE_CALL_ARGUMENTS:
                raise KeyedQueryError(f"{fn}: an input cannot be named {name!r} (the name of an argument)")
            inputs.append((name, arg.expression))
            continue
        if name.lower() not in TABLE_CALL_ARGUMENTS:
            raise KeyedQueryError(
                f"{fn}(TABLE(...), ...): unknown argument {name!r}; known: {', '.join(TABLE_CALL_ARGUMENTS)} "
                "(an input is name => TABLE(...))"
            )
        named[name.lower()] = _literal(fn, name.lower(), arg.expression)
    return inputs, named


def _columns(text: str | None, what: str, fn: str) -> list[str]:
    try:
        return parse_column_list(text, what)
    except SchemaError as exc:
        raise KeyedQueryError(f"{fn}: {exc}") from None


def _order(fn: str, text: str | None) -> list[exp.Ordered] | None:
    if not (text or "").strip():
        return None
    try:
        return sqlglot.parse_one(f"SELECT 1 ORDER BY {text}", read=KeyedSpark).args["order"].expressions
    except Exception:  # noqa: BLE001 - sqlglot's own message is about the made-up SELECT
        raise KeyedQueryError(f"{fn}: order_by {text!r} is not a list of columns with ASC/DESC") from None


_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")


def _compatible(a: str, b: str) -> bool:
    return a == b or (a.startswith(_NUMERIC) and b.startswith(_NUMERIC))


def _union(fn: str, inputs: list[tuple[str, exp.Expression]], shared: list[str], schema: Schema):
    """The inputs' rows together: ``shared`` columns once, the input's index, each input's
    other columns apart (NULL in the others' rows); and per input, (its column, union column)."""
    sources = [_source(fn, arg, f"__ks_{fn}_{name}") for name, arg in inputs]
    schemas = [schema(src) for src in sources]
    lowered = [{c.lower(): (c, t) for c, t in cols} for cols in schemas]
    types: dict[str, str] = {}
    for (name, _), cols, lower in zip(inputs, schemas, lowered):
        missing = [c for c in shared if c.lower() not in lower]
        if missing:
            raise KeyedQueryError(
                f"{fn}: input {name!r} has no column(s) {missing} (its columns: {', '.join(c for c, _ in cols)}); "
                f"rename in a subquery: {name} => TABLE(SELECT ... AS {missing[0]}, ... FROM ...)"
            )
        for c in shared:
            t = lower[c.lower()][1]
            seen = types.setdefault(c.lower(), t)
            if not _compatible(seen, t):
                raise KeyedQueryError(
                    f"{fn}: column {c!r} is {seen} in input {inputs[0][0]!r} and {t} in input {name!r}; "
                    "key, order_by and event_time columns must be of one type in every input (cast it in a subquery)"
                )
    own = [[(c, t) for c, t in cols if c.lower() not in {s.lower() for s in shared}] for cols in schemas]
    selects = []
    for j, (src, lower) in enumerate(zip(sources, lowered)):
        items: list[exp.Expression] = [exp.column(lower[c.lower()][0], quoted=True).as_(c, quoted=True) for c in shared]
        items.append(exp.Literal.number(j).as_(INPUT_COLUMN, quoted=True))
        for i, cols in enumerate(own):
            for c, t in cols:
                value = exp.column(c, quoted=True) if i == j else exp.cast(exp.Null(), t)
                items.append(value.as_(input_column(i, c), quoted=True))
        selects.append(exp.select(*items).from_(src))
    union: exp.Expression = selects[0]
    for s in selects[1:]:
        union = exp.union(union, s, distinct=False)
    maps = [
        [(lower[c.lower()][0], c) for c in shared] + [(c, input_column(i, c)) for c, _ in own[i]]
        for i, lower in enumerate(lowered)
    ]
    return union, maps


def _expand(table: exp.Table, call: exp.Anonymous, schema: Schema | None) -> exp.Expression:
    fn = call.name
    inputs, named = _parts(call)
    keys = _columns(named.get("key"), "key", fn)
    order = _order(fn, named.get("order_by"))
    event_time = named.get("event_time")
    if bool(event_time) != bool(named.get("watermark")):
        raise KeyedQueryError(f"{fn}: event_time => '...' and watermark => '...' go together")
    key_columns = [exp.column(k, quoted=True) for k in keys]
    group = KeyedGroup(
        keys=key_columns, keyed=bool(keys), function=exp.Anonymous(this=fn, expressions=[exp.Star()]), order=order
    )
    if event_time:
        group.set("event_time", exp.column(event_time, quoted=True))
        group.set("watermark", exp.Literal.string(named["watermark"]))
    several = [(n, a) for n, a in inputs if n is not None]
    if len(several) > 1:
        if schema is None:
            raise KeyedQueryError(f"{fn}: several inputs need the session to read their columns")
        shared = list(
            dict.fromkeys([*keys, *[o.this.name for o in order or []], *([event_time] if event_time else [])])
        )
        union, maps = _union(fn, several, shared, schema)
        source: exp.Expression = exp.Subquery(
            this=union, alias=exp.TableAlias(this=exp.to_identifier(f"__ks_{fn}_inputs"))
        )
        # ties in the order: the order of the inputs
        group.set("order", [*(order or []), exp.Ordered(this=exp.column(INPUT_COLUMN, quoted=True), desc=False)])
        group.set("inputs", [(n, m) for (n, _), m in zip(several, maps)])
    else:
        source = _source(fn, inputs[0][1], f"__ks_{fn}_input")
    select = exp.select(*[k.copy() for k in key_columns], exp.Column(this=exp.Star(), table=exp.to_identifier(fn)))
    select = select.from_(source)
    select.set("group", group)
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(fn))
    return exp.Subquery(this=select, alias=alias.copy())


def expand_table_calls(
    tree: exp.Expression, registered: Callable[[str], bool], schema: Schema | None = None
) -> exp.Expression:
    """``tree`` with every table-function call of a registered function replaced by its keyed
    subquery (innermost first: a call may read another's output through a subquery).
    ``schema(from_item)`` gives a FROM item's columns (needed for several inputs)."""
    calls = [(t, c) for t in tree.find_all(exp.Table) if (c := _call_of(t)) is not None and registered(c.name)]
    for table, call in reversed(calls):
        replacement = _expand(table, call, schema)
        if table is tree:
            return replacement
        table.replace(replacement)
    return tree


def source_schema(spark: Any) -> Schema:
    """``schema`` for ``expand_table_calls``: a FROM item's columns as Spark resolves them."""

    def schema(item: exp.Expression) -> list[tuple[str, str]]:
        sql = render(exp.select("*").from_(item.copy()))
        try:
            fields = spark.sql(sql).schema.fields
        except Exception as exc:  # noqa: BLE001 - Spark's complaint about the input, as ours
            from .errors import spark_hint

            raise KeyedQueryError(f"Spark cannot read an input of the table function: {spark_hint(exc)}") from None
        return [(f.name, f.dataType.simpleString()) for f in fields]

    return schema

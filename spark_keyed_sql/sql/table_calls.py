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
rows of one position in the order of the inputs.

Inputs named in ``broadcast => 'rates'`` (``broadcast_key => 'currency'``: their key column, by
default their first) are not keyed: their rows join the union after the keyed inputs' (the key,
and the order_by / event_time columns they lack, NULL), and ``KeyedGroup``'s ``broadcast`` says
which input index each has and which of its columns are key, time and order; the engines take
those rows out before the keyed ones run (``runtime/broadcast.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp

from ..api.errors import SchemaError
from ..runtime.columns import parse_column_list
from .ctes import ctes_visible_from
from .dialect import KeyedSpark
from .errors import KeyedQueryError, position
from .expressions import KNOWN_OPTIONS, KeyedGroup, KeyedOption
from .parse import render

__all__ = ["INPUT_COLUMN", "TABLE_CALL_ARGUMENTS", "expand_table_calls", "input_column"]

# the named arguments of the table-function form (besides the named inputs); string literals,
# but initial_state, which is TABLE(...) like an input; and WITH STATE's OPTIONS (any literal)
TABLE_CALL_ARGUMENTS = (
    "key",
    "order_by",
    "event_time",
    "watermark",
    "ttl",
    "initial_state",
    "broadcast",
    "broadcast_key",
    "initial_broadcast",
    *sorted(KNOWN_OPTIONS),
)
INPUT_COLUMN = "__ks_input"  # the index of the input a row came from (several inputs)

Schema = Callable[[exp.Expression], list[tuple[str, str]]]  # a FROM item -> (column, Spark type) pairs


def input_column(i: int, column: str) -> str:
    """The union column that holds input ``i``'s own column ``column``."""
    return f"__ks_in{i}_{column}"


def _error(message: str, node: exp.Expression | None) -> KeyedQueryError:
    return KeyedQueryError(message, *position(node))


def _is_interval(e: exp.Expression) -> bool:
    """``INTERVAL 10 MINUTES``, or several added up (sqlglot reads ``INTERVAL 1 HOUR 30 MINUTES``
    as a sum)."""
    if isinstance(e, exp.Add):
        return _is_interval(e.this) and _is_interval(e.expression)
    return isinstance(e, exp.Interval)


def _partitioned(table: exp.Expression) -> bool:
    return any(table.args.get(k) for k in ("partition_by", "order", "single_partition"))


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


def _source(fn: str, arg: exp.Expression, alias: str) -> exp.Expression:
    """What ``TABLE(...)`` names, as a FROM item: a table, a file directory or a subquery."""
    if len(arg.expressions) != 1:
        raise _error(f"{fn}: TABLE(...) takes one table, view or subquery", arg)
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
    raise _error(
        f"{fn}: TABLE(...) takes a table, a view, a directory (parquet.`/dir`) or a subquery, "
        f"got {inner.sql(dialect=KeyedSpark)}",
        arg,
    )


class _Call:
    """One table-function call's parts: its inputs (name or None, ``TABLE(...)``) and its other
    named arguments (string values; ``initial_state``'s ``TABLE(...)`` apart)."""

    def __init__(self, call: exp.Anonymous):
        self.node, self.fn = call, call.name
        self.inputs: list[tuple[str | None, exp.Expression]] = []
        self.named: dict[str, str] = {}
        self.nodes: dict[str, exp.Expression] = {}  # argument -> its value (for positions)
        self.initial: exp.Expression | None = None
        self.initial_broadcast: exp.Expression | None = None  # seeds the broadcast state
        self.options: list[KeyedOption] = []  # WITH STATE's OPTIONS given as arguments
        self._given: set[str] = set()  # the named arguments so far (lower case)
        self._from_tables: set[str] = set()  # key / order_by given by PARTITION BY / ORDER BY on TABLE(...)
        for arg in call.expressions:
            self._take(arg)

    def _partitioning(self, table: exp.Expression) -> None:
        """Spark's spelling of key and order on a table argument, ``TABLE(t) PARTITION BY (a, b)
        ORDER BY ts`` (``WITH SINGLE PARTITION``: no key), as ``key => 'a, b', order_by =>
        'ts'``; inputs that give it give the same."""
        for arg, text in (
            ("key", self._partition_columns(table)),
            (
                "order_by",
                ", ".join(o.sql(dialect=KeyedSpark) for o in table.args["order"].expressions)
                if table.args.get("order")
                else None,
            ),
        ):
            if text is None:
                continue
            if arg in self._given and arg not in self._from_tables:
                clause = "PARTITION BY" if arg == "key" else "ORDER BY"
                raise _error(
                    f"{self.fn}: {arg} given twice: {arg} => '...' and {clause} on TABLE(...) say the same; give one "
                    "of them",
                    table,
                )
            if arg in self._from_tables and self.named.get(arg, "").lower() != text.lower():
                raise _error(
                    f"{self.fn}: the inputs are partitioned or ordered differently ({self.named.get(arg) or 'none'!r} "
                    f"and {text!r}); every keyed input goes by the same key and order",
                    table,
                )
            self._given.add(arg)
            self._from_tables.add(arg)
            if text:
                self.named[arg], self.nodes[arg] = text, table

    def _partition_columns(self, table: exp.Expression) -> str | None:
        if table.args.get("single_partition"):
            return ""
        keys = table.args.get("partition_by")
        if not keys:
            return None
        for k in keys:
            if not isinstance(k, exp.Column) or k.table:
                raise _error(
                    f"{self.fn}: PARTITION BY on TABLE(...) takes columns of the input; compute "
                    f"{k.sql(dialect=KeyedSpark)} in the input, TABLE(SELECT *, <expr> AS name FROM ...) PARTITION "
                    "BY name",
                    k,
                )
        return ", ".join(k.sql(dialect=KeyedSpark) for k in keys)

    def _take(self, arg: exp.Expression) -> None:
        fn = self.fn
        if _is_table_arg(arg):
            if self.inputs:
                raise _error(
                    f"{fn}: several inputs are given by name: {fn}(a => TABLE(...), b => TABLE(...), key => '...')",
                    arg,
                )
            self.inputs.append((None, arg))
            self._partitioning(arg)
            return
        if not isinstance(arg, exp.Kwarg):
            raise _error(
                f"{fn}(TABLE(...), ...): arguments after TABLE(...) are named, e.g. key => 'user_id', "
                f"order_by => 'ts'; got {arg.sql(dialect=KeyedSpark)}",
                arg,
            )
        name, value = arg.this.name, arg.expression
        low = name.lower()
        if not _is_table_arg(value) or low in ("initial_state", "initial_broadcast"):  # (inputs: below)
            if low in self._given:
                raise _error(
                    f"{fn}: argument {name!r} given twice"
                    + ("; PARTITION BY / ORDER BY on TABLE(...) give it too" if low in self._from_tables else ""),
                    value,
                )
            self._given.add(low)
        if low in ("initial_state", "initial_broadcast") and _is_table_arg(value) and _partitioned(value):
            raise _error(f"{fn}: {low} is read whole: PARTITION BY / ORDER BY do not go on it", value)
        if low == "initial_state":
            if not _is_table_arg(value):
                raise _error(f"{fn}: initial_state takes TABLE(<table or subquery>) of key and state columns", value)
            self.initial = value
            return
        if low == "initial_broadcast":
            if not _is_table_arg(value):
                raise _error(
                    f"{fn}: initial_broadcast takes TABLE(<table or subquery>) of a broadcast input's rows "
                    "(e.g. a saved read_state(..., broadcast=...) table)",
                    value,
                )
            self.initial_broadcast = value
            return
        if _is_table_arg(value):
            if any(n is None for n, _ in self.inputs) or low in {(n or "").lower() for n, _ in self.inputs}:
                raise _error(f"{fn}: input {name!r} given twice, or beside an unnamed TABLE(...)", value)
            if low in TABLE_CALL_ARGUMENTS:
                raise _error(f"{fn}: an input cannot be named {name!r} (the name of an argument)", value)
            self.inputs.append((name, value))
            self._partitioning(value)
            return
        if low not in TABLE_CALL_ARGUMENTS:
            raise _error(
                f"{fn}(TABLE(...), ...): unknown argument {name!r}; known: {', '.join(TABLE_CALL_ARGUMENTS)} "
                "(an input is name => TABLE(...))",
                value,
            )
        if low in KNOWN_OPTIONS:
            if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal) and not value.this.is_string:
                value = exp.Literal(this=f"-{value.this.this}", is_string=False)  # (-1: a number, as in OPTIONS)
            if not isinstance(value, (exp.Literal, exp.Boolean)):
                raise _error(f"{fn}: {low} needs a literal value (string, number, true/false)", value)
            self.options.append(KeyedOption(this=exp.to_identifier(low), value=value.copy()))
            return
        if low in ("watermark", "ttl") and _is_interval(value):  # INTERVAL 10 MINUTES (or 1 HOUR 30 MINUTES)
            self.named[low], self.nodes[low] = value.sql(dialect=KeyedSpark), value
            return
        if not (isinstance(value, exp.Literal) and value.is_string):
            example = "'10 minutes' or INTERVAL 10 MINUTES" if low in ("watermark", "ttl") else f"'{low}_column'"
            raise _error(
                f"{fn}(TABLE(...), {low} => ...): {low} must be a string literal such as {example}, "
                f"got {value.sql(dialect=KeyedSpark)}",
                value,
            )
        self.named[low], self.nodes[low] = value.this, value

    def columns(self, what: str) -> list[str]:
        try:
            return parse_column_list(self.named.get(what), what)
        except SchemaError as exc:
            raise _error(f"{self.fn}: {exc}", self.nodes.get(what)) from None

    def order(self) -> list[exp.Ordered] | None:
        text = self.named.get("order_by")
        if not (text or "").strip():
            return None
        try:
            ordered = sqlglot.parse_one(f"SELECT 1 ORDER BY {text}", read=KeyedSpark).args["order"].expressions
        except Exception:  # noqa: BLE001 - sqlglot's own message is about the made-up SELECT
            raise _error(
                f"{self.fn}: order_by {text!r} is not a list of columns with ASC/DESC", self.nodes.get("order_by")
            ) from None
        for o in ordered:
            if not isinstance(o.this, exp.Column):
                raise _error(
                    f"{self.fn}: order_by {text!r}: {o.this.sql(dialect=KeyedSpark)} is not a column of the input; "
                    "compute it in the input, TABLE(SELECT *, <expr> AS name FROM ...), and order by name",
                    self.nodes.get("order_by"),
                )
        return ordered


_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")


_TIMESTAMPS = ("timestamp", "timestamp_ntz")


def _compatible(a: str, b: str) -> bool:
    """Types the inputs' union widens to one: numbers (``interval`` is none), and a timestamp
    with a timestamp_ntz."""
    base_a, base_b = a.split("(")[0], b.split("(")[0]
    return a == b or (base_a in _NUMERIC and base_b in _NUMERIC) or (base_a in _TIMESTAMPS and base_b in _TIMESTAMPS)


def _check_shared(
    fn: str,
    inputs: list[tuple[str | None, exp.Expression]],
    sources: list[exp.Expression],
    shared: dict[str, str],
    schema,
    arguments: dict[str, exp.Expression],
) -> list[list[tuple[str, str]]]:
    """Every input has the ``shared`` columns (column -> its argument: key, order_by,
    event_time), of one type; returns each input's (column, type) pairs. ``arguments``: the
    call's argument values, where an error points."""
    schemas = [schema(src) for src in sources]
    types: dict[str, tuple[str, str]] = {}  # column -> (type, the input it was first seen in)
    for (name, arg), cols in zip(inputs, schemas):
        lower = {c.lower(): (c, t) for c, t in cols}
        what = f"input {name!r}" if name is not None else "the input"
        missing = [c for c in shared if c.lower() not in lower]
        if missing and name is None:  # one input: most likely a misspelled argument
            raise _error(
                f"{fn}: {shared[missing[0]]} column {missing[0]!r} is not a column of the input (its columns: "
                f"{', '.join(c for c, _ in cols)})",
                arguments.get(shared[missing[0]], arg),
            )
        if missing:
            rename = f"{name} => " if name is not None else ""
            raise _error(
                f"{fn}: {what} has no column(s) {', '.join(repr(m) for m in missing)} (its columns: "
                f"{', '.join(c for c, _ in cols)}); rename in a subquery: "
                f"{rename}TABLE(SELECT ... AS {missing[0]}, ... FROM ...)",
                arg,
            )
        for c in shared:
            t = lower[c.lower()][1]
            seen, first = types.setdefault(c.lower(), (t, name or ""))
            if not _compatible(seen, t):
                raise _error(
                    f"{fn}: column {c!r} is {seen} in input {first!r} and {t} in input {name!r}; key, order_by and "
                    "event_time columns must be of one type in every input (cast it in a subquery)",
                    arg,
                )
    return schemas


def _shared_value(lower: dict[str, tuple[str, str]], c: str, type_: str) -> exp.Expression:
    """A shared column of one input in the union: as it is, cast to the keyed inputs' type (a
    broadcast input's time column of another type), or NULL where the input lacks it."""
    if c.lower() not in lower:
        return exp.cast(exp.Null(), type_)
    name, own_type = lower[c.lower()]
    value = exp.column(name, quoted=True)
    return value if _compatible(own_type, type_) else exp.cast(value, type_)


def _union(inputs: list[tuple[str, exp.Expression]], sources, schemas, shared: list[str]):
    """The inputs' rows together: ``shared`` columns once, the input's index, each input's
    other columns apart (NULL in the others' rows); and per input, (its column, union column).
    A shared column an input lacks (a broadcast input's key) is NULL of the first input's type."""
    lowered = [{c.lower(): (c, t) for c, t in cols} for cols in schemas]
    own = [[(c, t) for c, t in cols if c.lower() not in {s.lower() for s in shared}] for cols in schemas]
    shared_type = {c: lowered[0][c.lower()][1] for c in shared}
    selects = []
    for j, (src, lower) in enumerate(zip(sources, lowered)):
        items: list[exp.Expression] = [_shared_value(lower, c, shared_type[c]).as_(c, quoted=True) for c in shared]
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
        [(lower[c.lower()][0], c) for c in shared if c.lower() in lower] + [(c, input_column(i, c)) for c, _ in own[i]]
        for i, lower in enumerate(lowered)
    ]
    return union, maps


def _expand(table: exp.Table, call: exp.Anonymous, schema: Schema | None) -> exp.Expression:
    c = _Call(call)
    fn = c.fn
    keys = c.columns("key")
    order = c.order()
    event_time = c.named.get("event_time")
    if bool(event_time) != bool(c.named.get("watermark")):
        raise _error(f"{fn}: event_time => '...' and watermark => '...' go together", call)
    key_columns = [exp.column(k, quoted=True) for k in keys]
    group = KeyedGroup(
        keys=key_columns, keyed=bool(keys), function=exp.Anonymous(this=fn, expressions=[exp.Star()]), order=order
    )
    if event_time:
        group.set("event_time", exp.column(event_time, quoted=True))
        group.set("watermark", c.nodes["watermark"].copy())  # the argument's literal: its position in errors
    if c.named.get("ttl"):
        group.set("ttl", c.nodes["ttl"].copy())
    if c.options:
        group.set("options", c.options)
    if c.initial is not None:
        group.set("initial_state", _source(fn, c.initial, f"__ks_{fn}_initial_state"))
    shared: dict[str, str] = {}  # the columns every input has -> the argument naming each (the first)
    for column, argument in [
        *((k, "key") for k in keys),
        *((o.this.name, "order_by") for o in order or []),
        *([(event_time, "event_time")] if event_time else []),
    ]:
        shared.setdefault(column, argument)
    broadcast = _broadcast_inputs(c)
    if c.initial_broadcast is not None and not broadcast:
        raise _error(f"{fn}: initial_broadcast seeds a broadcast input; name one with broadcast => '...'", call)
    keyed_inputs = [i for i in c.inputs if i[0] not in broadcast]
    inputs = keyed_inputs + [i for i in c.inputs if i[0] in broadcast]  # keyed first: index = position
    several = len(inputs) > 1
    names = [f"__ks_{fn}_{n}" if n is not None else f"__ks_{fn}_input" for n, _ in inputs]
    sources = [_source(fn, arg, alias) for (_, arg), alias in zip(inputs, names)]
    if several and schema is None:
        raise _error(f"{fn}: several inputs need the session to read their columns", call)
    schemas = []
    if schema is not None:
        schemas = _check_shared(fn, keyed_inputs, sources[: len(keyed_inputs)], shared, schema, c.nodes)
        schemas += [schema(src) for src in sources[len(keyed_inputs) :]]
    if several:
        union, maps = _union(inputs, sources, schemas, list(shared))  # type: ignore[arg-type]
        source: exp.Expression = exp.Subquery(
            this=union, alias=exp.TableAlias(this=exp.to_identifier(f"__ks_{fn}_inputs"))
        )
        # ties in the order: the order of the inputs
        group.set("order", [*(order or []), exp.Ordered(this=exp.column(INPUT_COLUMN, quoted=True), desc=False)])
        n = len(keyed_inputs)
        group.set("inputs", [(name, m) for (name, _), m in zip(keyed_inputs, maps)])
        if c.initial_broadcast is not None:
            group.set("initial_broadcast", _source(fn, c.initial_broadcast, f"__ks_{fn}_initial_broadcast"))
        if broadcast:
            group.set(
                "broadcast",
                [
                    _broadcast_of(c, name, n + j, maps[n + j], schemas[n + j], inputs[n + j][1], event_time, order)
                    for j, (name, _) in enumerate(inputs[n:])
                ],
            )
    else:
        source = sources[0]
    select = exp.select(*[k.copy() for k in key_columns], exp.Column(this=exp.Star(), table=exp.to_identifier(fn)))
    select = select.from_(source)
    select.set("group", group)
    alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(fn))
    return exp.Subquery(this=select, alias=alias.copy())


def _broadcast_inputs(c: _Call) -> set[str | None]:
    """The inputs ``broadcast => '...'`` names (checked: named inputs, one keyed input left)."""
    text = c.named.get("broadcast")
    if text is None:
        if c.named.get("broadcast_key") is not None:
            raise _error(f"{c.fn}: broadcast_key => '...' goes with broadcast => '<input>'", c.nodes["broadcast_key"])
        return set()
    names = c.columns("broadcast")
    given = {n.lower(): n for n, _ in c.inputs if n is not None}
    unknown = [b for b in names if b.lower() not in given]
    if unknown or not names:
        raise _error(
            f"{c.fn}: broadcast => {text!r} names {', '.join(map(repr, unknown)) or 'no input'}; a broadcast input is "
            f"a named input of the call ({', '.join(given.values()) or 'none here: name them, rates => TABLE(...)'})",
            c.nodes["broadcast"],
        )
    chosen = {given[b.lower()] for b in names}
    if len(chosen) >= len(c.inputs):
        raise _error(
            f"{c.fn}: every input is a broadcast input; at least one input must be keyed", c.nodes["broadcast"]
        )
    return set(chosen)


def _broadcast_of(
    c: _Call,
    name: str | None,
    index: int,
    event_map: list[tuple[str, str]],
    columns: list[tuple[str, str]],
    arg: exp.Expression,
    event_time: str | None,
    order: list[exp.Ordered] | None,
) -> tuple:
    """A broadcast input's entry in ``KeyedGroup.broadcast``: (name, input index, event map, key
    columns, event-time column or None, order_by columns it has), by its own column names."""
    own = {col.lower(): col for col, _ in columns}
    wanted = c.columns("broadcast_key") if c.named.get("broadcast_key") else []
    key = [own[k.lower()] for k in wanted if k.lower() in own]
    if wanted and not key:
        raise _error(
            f"{c.fn}: broadcast input {name!r} has none of the broadcast_key column(s) {', '.join(wanted)} (its "
            f"columns: {', '.join(col for col, _ in columns)})",
            c.nodes.get("broadcast_key", arg),
        )
    time = own.get(event_time.lower()) if event_time else None
    if not key:  # its first column that is not the event time or an order_by column
        skip = {time, *(own.get(o.this.name.lower()) for o in order or [])}
        key = [next((col for col, _ in columns if col not in skip), columns[0][0])]
    # each order_by column it has: (its name, descending, NULLS FIRST: sqlglot's reading of the
    # text under Spark's rule, first ascending and last descending unless written)
    ordered = tuple(
        (own[o.this.name.lower()], bool(o.args.get("desc")), bool(o.args.get("nulls_first")))
        for o in order or []
        if o.this.name.lower() in own
    )
    return (name, index, tuple(event_map), tuple(key), time, ordered)


def expand_table_calls(
    tree: exp.Expression, registered: Callable[[str], bool], schema: Schema | None = None
) -> exp.Expression:
    """``tree`` with every table-function call of a registered function replaced by its keyed
    subquery (innermost first: a call may read another's output through a subquery).
    ``schema(from_item)`` gives a FROM item's columns (needed for several inputs)."""
    calls = [(t, c) for t in tree.find_all(exp.Table) if (c := _call_of(t)) is not None and registered(c.name)]
    for table, call in reversed(calls):
        visible = ctes_visible_from(table) if schema is not None else None  # TABLE(a CTE's name)
        here = schema if visible is None else (lambda item, w=visible: schema(item, w))  # type: ignore[misc]
        replacement = _expand(table, call, here)
        if table is tree:
            return replacement
        table.replace(replacement)
    return tree


def _named_by(item: exp.Expression, ctes: exp.With) -> exp.With | None:
    """The CTEs of ``ctes`` that ``item`` reads, itself or through another of them (a copy; all
    of them under WITH RECURSIVE): Spark is asked only about what the input is made of."""
    if ctes.args.get("recursive"):
        return ctes.copy()
    needed = {t.name.lower() for t in item.find_all(exp.Table) if not t.db}
    kept = []
    for cte in reversed(ctes.expressions):
        if cte.alias_or_name.lower() in needed:
            kept.append(cte.copy())
            needed |= {t.name.lower() for t in cte.this.find_all(exp.Table) if not t.db}
    return exp.With(expressions=kept[::-1]) if kept else None


def source_schema(spark: Any) -> Schema:
    """``schema`` for ``expand_table_calls``: a FROM item's columns as Spark resolves them."""

    def schema(item: exp.Expression, ctes: exp.With | None = None) -> list[tuple[str, str]]:
        q = exp.select("*").from_(item.copy())
        ctes = _named_by(item, ctes) if ctes is not None else None
        if ctes is not None:
            q.set("with_", ctes)
        if next(q.find_all(KeyedGroup), None) is not None:  # (an inner call, already expanded)
            raise KeyedQueryError(
                "a table argument of a table-function call reads another keyed call's output (a CTE or "
                "subquery over a table-function call or GROUP BY KEY); the table-function form takes a table, "
                "view or plain query: write this call as SELECT ... FROM <that CTE> GROUP BY KEY ... WITH STATE "
                "...(...), or make the inner result a view first",
                *position(item),
            )
        sql = render(q)
        try:
            fields = spark.sql(sql).schema.fields
        except Exception as exc:  # noqa: BLE001 - Spark's complaint about the input, as ours
            from .errors import spark_hint

            raise KeyedQueryError(f"Spark cannot read an input of the table function: {spark_hint(exc)}") from None
        return [(f.name, f.dataType.simpleString()) for f in fields]

    return schema

"""One keyed SELECT's names, resolved: its source part as Spark sees it, what its WITH STATE
clause asks for (keys, arguments, ORDER BY against the source's columns) and what its select
list, HAVING and ORDER BY refer to (a key, an output of the function, a source column passed
through). Errors name the column and where it is; nothing here plans or runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from sqlglot import exp

from ..runtime.keys import OrderSpec
from ..runtime.spec import FunctionKind, FunctionSpec
from .errors import KeyedQueryError, position
from .expressions import KeyedGroup, without_first_part
from .parse import render

__all__ = ["Call", "Outer", "Source", "quoted_identifier", "resolve_call", "resolve_outer"]


def quoted_identifier(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _name_of(e: exp.Expression, default: str) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return default


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


@dataclass
class Source:
    """The source part of one keyed select, as Spark sees it."""

    select: exp.Select  # SELECT * FROM ... WHERE ... (with the CTEs it may use)
    df: DataFrame
    aliases: set[str]  # lower-cased names the FROM / JOIN tables go by
    ctes: exp.With | None = None  # the CTEs the keyed select sees, as written (batch reads)

    @property
    def columns(self) -> list[str]:
        return self.df.columns

    @property
    def lower(self) -> dict[str, str]:
        return {c.lower(): c for c in self.df.columns}

    def struct_head(self, col: exp.Column) -> str | None:
        """The source column ``col`` reads a field of (``payload.user_id``, ``payload.geo.city``,
        ``e.payload.user_id`` with ``e`` a FROM alias), or None when it names a column itself (a
        FROM alias before a column wins, as in Spark)."""
        parts = [p.name.lower() for p in col.parts]
        lower = self.lower
        if len(parts) > 2 and parts[0] in self.aliases and parts[1] in lower:
            return lower[parts[1]]
        if len(parts) > 1 and parts[0] not in self.aliases and parts[0] in lower:
            return lower[parts[0]]
        return None

    def without_alias(self, col: exp.Column) -> exp.Expression:
        """``col`` (a struct field) without a FROM alias before its column."""
        if len(col.parts) > 2 and col.parts[0].name.lower() in self.aliases:
            return without_first_part(col)
        return col

    def check(self, e: exp.Expression, what: str) -> None:
        lower = self.lower
        for col in e.find_all(exp.Column):
            if col.name.lower() not in lower and self.struct_head(col) is None:
                raise KeyedQueryError(
                    f"{what} refers to '{col.name}', which is not a column of the source "
                    f"(columns: {', '.join(self.columns)})",
                    *position(col),
                )

    def check_timestamp(self, e: exp.Expression, what: str) -> None:
        """``e`` is a timestamp (Spark's watermark takes no other type; a string or a number
        would fail deep in a run, or be taken silently in a one-shot batch)."""
        fields = {f.name.lower(): f.dataType for f in self.df.schema.fields}
        plain = isinstance(e, exp.Column) and not e.table and e.name.lower() in fields
        kind = fields[e.name.lower()] if plain else self.df.select(F.expr(render(e))).schema[0].dataType
        if not isinstance(kind, (T.TimestampType, T.TimestampNTZType)):
            raise KeyedQueryError(
                f"{what}: {render(e)} is {kind.simpleString()}; the event-time column must be TIMESTAMP or "
                "TIMESTAMP_NTZ (convert it in the source, e.g. to_timestamp(col) or timestamp_millis(epoch_ms))",
                *position(e),
            )


@dataclass
class Call:
    """What the WITH STATE clause asks for, resolved against the source."""

    fname: str
    spec: FunctionSpec
    options: dict[str, Any]
    alias: str
    key_names: list[str]
    key_exprs: list[exp.Expression]
    arg_names: list[str]
    arg_exprs: list[exp.Expression]
    order_exprs: list[exp.Expression]
    order_specs: list[OrderSpec]
    where: str  # "WITH STATE <fname>", for messages

    @property
    def returns(self) -> list[str]:
        return self.spec.returns.names if self.spec.returns else []


@dataclass
class Outer:
    """The select list, HAVING and ORDER BY of the keyed select, resolved against keys, outputs
    and (for a StatefulFunction) source columns passed through."""

    expressions: list[exp.Expression]
    where: exp.Where | None
    order: exp.Order | None
    passthrough: list[str] = field(default_factory=list)


def resolve_call(group: KeyedGroup, spec: FunctionSpec, options: dict[str, Any], source: Source) -> Call:
    fname = group.function_name
    where = f"WITH STATE {fname}"
    key_names, key_exprs = [], []
    for i, k in enumerate(group.keys):
        source.check(_unalias(k), "GROUP BY KEY")
        key_names.append(_name_of(k, f"key{i}"))
        key_exprs.append(_unalias(k))
    fn_args = group.function.expressions
    arg_names, arg_exprs = [], []
    if len(fn_args) == 1 and isinstance(fn_args[0], exp.Star):
        arg_names = list(source.columns)
        arg_exprs = [exp.column(quoted_identifier(c)) for c in source.columns]
    else:
        for i, a in enumerate(fn_args):
            source.check(_unalias(a), f"argument {i + 1} of {where}")
            arg_names.append(_name_of(a, f"arg{i}"))
            arg_exprs.append(_unalias(a))
    dup = {n for n in arg_names if arg_names.count(n) > 1}
    if dup:
        raise KeyedQueryError(f"{where}: two arguments named {sorted(dup)}; name them with AS")
    order_exprs, order_specs = [], []
    for i, o in enumerate(group.args.get("order") or []):
        if isinstance(o.this, exp.Literal) and not o.this.is_string:
            raise KeyedQueryError(
                f"ORDER BY of {where}: {o.this.sql(dialect='spark')} is a constant, not a column position, in the "
                "order of rows within a key; name the column (ORDER BY ts)",
                *position(o.this),
            )
        source.check(o.this, f"ORDER BY of {where}")
        order_exprs.append(o.this)
        nf = o.args.get("nulls_first")
        order_specs.append(OrderSpec(f"__ks_o{i}", not o.args.get("desc"), None if nf is None else bool(nf)))
    return Call(
        fname,
        spec,
        options,
        group.alias_name or fname,
        key_names,
        key_exprs,
        arg_names,
        arg_exprs,
        order_exprs,
        order_specs,
        where,
    )


def resolve_outer(sel: exp.Select, call: Call, source: Source) -> Outer:
    """Resolve every column the select list, HAVING and ORDER BY name: a key, an output of
    the function (``alias.col`` or bare), or a source column passed through."""
    lower = source.lower
    key_lower = {n.lower(): n for n in call.key_names}
    ret_lower = {n.lower(): n for n in call.returns}
    select_aliases = {e.alias.lower() for e in sel.expressions if isinstance(e, exp.Alias)}
    alias, fname = call.alias.lower(), call.fname
    passthrough: list[str] = []

    def resolve(col: exp.Column, allow_select_alias: bool) -> None:
        table = col.table.lower() if col.table else None
        n = col.name.lower()
        if table == alias:
            if n not in ret_lower:
                raise KeyedQueryError(
                    f"'{col.sql(dialect='spark')}': {fname} has no output column '{col.name}' (returns: "
                    f"{', '.join(call.returns)})",
                    *position(col),
                )
            return
        head = source.struct_head(col)
        if head is not None:  # a field of a source column (payload.country): that column passed through
            if head.lower() in key_lower or head.lower() in ret_lower:
                return
            if call.spec.kind is not FunctionKind.FUNCTION:
                raise KeyedQueryError(
                    f"column '{col.sql(dialect='spark')}' is not a key or an output of {fname}; pass-through of "
                    "source columns needs a row-at-a-time StatefulFunction",
                    *position(col),
                )
            col.replace(source.without_alias(col))
            if head not in passthrough:
                passthrough.append(head)
            return
        if table is not None and table not in source.aliases:
            return  # belongs to an outer query (correlated) or another scope
        if table is not None:
            if n in ret_lower and n in lower and n not in key_lower:  # the source's column, not the output
                raise KeyedQueryError(
                    f"'{col.sql(dialect='spark')}': the source column '{col.name}' has the name of an output of "
                    f"{fname}; the keyed result holds one column of that name (the output, {call.alias}."
                    f"{ret_lower[n]}): pass the source column under another name, e.g. FROM (SELECT *, {col.name} AS "
                    f"source_{col.name} FROM ...)",
                    *position(col),
                )
            col.set("table", None)
        if n in key_lower or n in ret_lower or (allow_select_alias and n in select_aliases):
            return
        if n in lower:
            if call.spec.kind is not FunctionKind.FUNCTION:
                raise KeyedQueryError(
                    f"column '{col.name}' is not a key or an output of {fname}; pass-through of source "
                    "columns needs a row-at-a-time StatefulFunction",
                    *position(col),
                )
            if lower[n] not in passthrough:
                passthrough.append(lower[n])
            return
        raise KeyedQueryError(
            f"column '{col.sql(dialect='spark')}' is neither a key ({', '.join(call.key_names) or 'none'}), an "
            f"output of {fname} ({', '.join(call.returns)}) nor a source column",
            *position(col),
        )

    expressions = []
    for e in sel.expressions:
        if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table and e.table.lower() == alias:
            expressions += [exp.column(quoted_identifier(r), table=quoted_identifier(call.alias)) for r in call.returns]
            continue
        e = e.copy()
        for col in list(e.find_all(exp.Column)):
            if not isinstance(col.this, exp.Star):
                resolve(col, allow_select_alias=False)
        if isinstance(e, exp.Column) and source.struct_head(e) is not None:  # (a root node is not replaced)
            e = source.without_alias(e)
        expressions.append(e)
    where = None
    having = sel.args.get("having")
    if having is not None:
        cond = having.this.copy()
        by_alias = {e.alias.lower(): e.this for e in expressions if isinstance(e, exp.Alias)}
        for col in list(cond.find_all(exp.Column)):
            name = col.name.lower()
            if not col.table and name in by_alias and name not in key_lower and name not in ret_lower:
                col.replace(by_alias[name].copy())
        for col in list(cond.find_all(exp.Column)):
            resolve(col, allow_select_alias=False)
        where = exp.Where(this=cond)
    order = sel.args.get("order")
    if order is not None:
        order = order.copy()
        for col in list(order.find_all(exp.Column)):
            resolve(col, allow_select_alias=True)
    clash = [n for n in passthrough if n.lower() in ret_lower]
    if clash:
        raise KeyedQueryError(
            f"source column(s) {clash} have the same name as outputs of {fname}; qualify with {call.alias}."
        )
    # a key column asked for by name is the key itself, not a pass-through copy
    return Outer(expressions, where, order, [p for p in passthrough if p.lower() not in key_lower])

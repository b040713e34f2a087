"""Keyed query -> a plan: keyed steps and plain Spark SQL over their results.

For every SELECT carrying ``GROUP BY KEY ... WITH STATE`` (innermost first): the source part
(FROM / joins / WHERE, with the statement's CTEs) stays Spark SQL and is selected into
internally named columns; the keyed part becomes a :class:`~.statement.KeyedStep` for an
engine; the SELECT is replaced in the tree by plain SQL over the step's view (select list,
HAVING as WHERE, ORDER BY, LIMIT). What is left is plain Spark SQL. The rewriter runs nothing:
the caller's ``bind`` makes each step's view as it is planned (a nested keyed select reads the
inner one's view), and the caller runs the final SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from ..api.errors import SchemaError
from ..api.intervals import parse_interval_ms
from ..compat.features import features
from ..engines import AUTO, ENGINES, Engine, choose
from ..runtime.clock import session_offset_ms
from ..runtime.keys import OrderSpec
from ..runtime.plan import KeyedPlan, PlanInput
from ..runtime.spec import FunctionKind, FunctionSpec, check_process_inputs
from ..state.attributes import AttributeLayout
from ..state.checkpoint import CheckpointError, read_metadata
from ..state.evolution import absent_attributes
from .errors import KeyedQueryError, position, spark_hint
from .expressions import KNOWN_OPTIONS, STREAMING_ONLY_OPTIONS, KeyedGroup
from .parse import render
from .sources import Sources, literal, view_name
from .statement import KeyedStatement, KeyedStep, RunMode
from .table_calls import INPUT_COLUMN

__all__ = ["KNOWN_OPTIONS", "STREAMING_ONLY_OPTIONS", "plan_statement"]

log = logging.getLogger(__name__)

MAX_STATE_PARTITIONS = 100_000


def _interval_ms(e: exp.Expression | None) -> int | None:
    if e is None:
        return None
    if isinstance(e, exp.Literal) and e.is_string:
        return parse_interval_ms(e.this)
    if isinstance(e, exp.Interval):
        unit = e.args.get("unit")
        return parse_interval_ms(
            f"{e.this.name if isinstance(e.this, exp.Literal) else e.this.sql()} {unit.name if unit else ''}"
        )
    raise KeyedQueryError(f"cannot read interval {e.sql(dialect='spark')}")


def _q(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _quoted(name: str) -> str:
    return _q(name).sql(dialect="spark")


def _name_of(e: exp.Expression, default: str) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return default


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


def _depth(node: exp.Expression) -> int:
    d = 0
    while node.parent is not None:
        node = node.parent
        d += 1
    return d


_OUTPUT_MODES = ("append", "update")  # what transformWithState takes


@dataclass
class _Source:
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

    def check(self, e: exp.Expression, what: str) -> None:
        lower = self.lower
        for col in e.find_all(exp.Column):
            if col.name.lower() not in lower:
                raise KeyedQueryError(
                    f"{what} refers to '{col.name}', which is not a column of the source "
                    f"(columns: {', '.join(self.columns)})",
                    *position(col),
                )


@dataclass
class _Call:
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
class _Outer:
    """The select list, HAVING and ORDER BY of the keyed select, resolved against keys, outputs
    and (for a StatefulFunction) source columns passed through."""

    expressions: list[exp.Expression]
    where: exp.Where | None
    order: exp.Order | None
    passthrough: list[str] = field(default_factory=list)


class _Planner:
    def __init__(
        self,
        spark: SparkSession,
        functions: Callable[[str], FunctionSpec],
        default_engine: str,
        mode: RunMode,
        bind: Callable[[KeyedStep], None],
        checkpoint: str | None = None,
        written_by: Callable[[str], str | None] | None = None,
    ):
        self.spark = spark
        self.functions = functions  # name -> FunctionSpec (raises UnknownFunctionError)
        self.default_engine = default_engine
        self.checkpoint = checkpoint  # given as checkpoint= (one in OPTIONS is the call's)
        self.written_by = written_by  # checkpoint -> the engine that wrote it (None: new)
        self.mode = mode
        self.bind = bind
        self.sources = Sources(spark)
        self.steps: list[KeyedStep] = []

    # ------------------------------------------------------------------ entry
    def run(self, tree: exp.Expression) -> KeyedStatement:
        self.sources.replace_keyed_state(tree)
        keyed = [s for s in tree.find_all(exp.Select) if isinstance(s.args.get("group"), KeyedGroup)]
        # innermost first: a keyed select nested in another one's FROM is replaced before
        keyed.sort(key=_depth, reverse=True)
        top_with = tree.args.get("with_") if isinstance(tree, exp.Query) else None
        for sel in keyed:
            outer = self._plan_select(sel, top_with)
            if sel is tree:
                tree = outer
            else:
                sel.replace(outer)
        return KeyedStatement(render(tree), self.steps)

    # ------------------------------------------------------------------ one keyed select
    def _plan_select(self, sel: exp.Select, top_with: exp.With | None) -> exp.Expression:
        group: KeyedGroup = sel.args["group"]
        call_options, spec = self._options(group)
        source = self._source(sel, top_with, call_options)
        call = self._call(group, spec, call_options, source)
        if not source.df.isStreaming:
            bad = sorted(set(call.options) & STREAMING_ONLY_OPTIONS)
            if bad:
                raise KeyedQueryError(
                    f"option(s) {bad} of {call.where} only apply to a streaming source; the source is a batch query"
                )
        outer = self._outer(sel, call, source)
        engine = self._engine(sel, call, source)
        step = self._step(group, call, source, outer, engine)
        self.bind(step)
        self.steps.append(step)
        return self._outer_select(sel, call, outer, step)

    def _options(self, group: KeyedGroup) -> tuple[dict[str, Any], FunctionSpec]:
        fname = group.function_name
        spec = self.functions(fname)
        options = {k: literal(v) for k, v in group.options.items()}
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise KeyedQueryError(f"unknown option(s) {unknown} in WITH STATE {fname}; known: {sorted(KNOWN_OPTIONS)}")
        if "state_partitions" in options:
            n = options["state_partitions"]
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_STATE_PARTITIONS:
                raise KeyedQueryError(
                    f"option state_partitions of WITH STATE {fname} must be a whole number from 1 to "
                    f"{MAX_STATE_PARTITIONS:,}, got {n!r}"
                )
        if group.args.get("ttl") is not None:
            ttl = group.args["ttl"]
            ttl_ms = _interval_ms(ttl)
            if ttl_ms is not None and ttl_ms <= 0:
                raise KeyedQueryError(
                    f"TTL of WITH STATE {fname} must be a positive interval, got {ttl.sql(dialect='spark')}",
                    *position(ttl),
                )
            spec = spec.with_ttl(ttl_ms)
        return options, spec

    def _source(self, sel: exp.Select, top_with: exp.With | None, options: dict[str, Any]) -> _Source:
        base = exp.Select(expressions=[exp.Star()])
        for arg in ("from_", "joins", "where", "laterals"):
            value = sel.args.get(arg)
            if value is not None:
                base.set(arg, [a.copy() for a in value] if isinstance(value, list) else value.copy())
        ctes = self._ctes_visible_from(sel, top_with) if top_with is not None else None
        if ctes is not None:
            base.set("with_", ctes.copy())
        if self.mode is RunMode.STREAM:
            self.sources.streamify(base, options.get("max_files_per_trigger"))
        aliases = set()
        if base.args.get("from_"):
            tables = (base.args["from_"].this, *[j.this for j in base.args.get("joins") or []])
            aliases = {t.alias_or_name.lower() for t in tables}
        return _Source(base, self.spark.sql(render(base)), aliases, ctes)

    @staticmethod
    def _ctes_visible_from(sel: exp.Select, top_with: exp.With) -> exp.With | None:
        ctes = []
        for cte in top_with.expressions:
            if sel.find_ancestor(exp.CTE) is cte or cte.find(exp.Select) is sel:
                break
            ctes.append(cte.copy())
        return exp.With(expressions=ctes) if ctes else None

    def _call(self, group: KeyedGroup, spec: FunctionSpec, options: dict[str, Any], source: _Source) -> _Call:
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
            arg_exprs = [exp.column(_q(c)) for c in source.columns]
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
            source.check(o.this, f"ORDER BY of {where}")
            order_exprs.append(o.this)
            nf = o.args.get("nulls_first")
            order_specs.append(OrderSpec(f"__ks_o{i}", not o.args.get("desc"), None if nf is None else bool(nf)))
        return _Call(
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

    def _outer(self, sel: exp.Select, call: _Call, source: _Source) -> _Outer:
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
                        f"{', '.join(call.returns)})"
                    )
                return
            if table is not None and table not in source.aliases:
                return  # belongs to an outer query (correlated) or another scope
            if table is not None:
                col.set("table", None)
            if n in key_lower or n in ret_lower or (allow_select_alias and n in select_aliases):
                return
            if n in lower:
                if call.spec.kind is not FunctionKind.FUNCTION:
                    raise KeyedQueryError(
                        f"column '{col.name}' is not a key or an output of {fname}; pass-through of source "
                        "columns needs a row-at-a-time StatefulFunction"
                    )
                if lower[n] not in passthrough:
                    passthrough.append(lower[n])
                return
            raise KeyedQueryError(
                f"column '{col.sql(dialect='spark')}' is neither a key ({', '.join(call.key_names) or 'none'}), an "
                f"output of {fname} ({', '.join(call.returns)}) nor a source column"
            )

        expressions = []
        for e in sel.expressions:
            if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table and e.table.lower() == alias:
                expressions += [exp.column(_q(r), table=_q(call.alias)) for r in call.returns]
                continue
            e = e.copy()
            for col in list(e.find_all(exp.Column)):
                if not isinstance(col.this, exp.Star):
                    resolve(col, allow_select_alias=False)
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
        return _Outer(expressions, where, order, [p for p in passthrough if p.lower() not in key_lower])

    def _engine(self, sel: exp.Select, call: _Call, source: _Source) -> Engine:
        streaming = source.df.isStreaming
        if streaming and sel.args.get("limit") is not None:
            raise KeyedQueryError(
                f"LIMIT after {call.where} is batch-only; the source is streaming (limit the result in the sink, or "
                "use a batch source)"
            )
        found = features(self.spark)
        requested = str(call.options.get("engine", self.default_engine)).lower()
        written = self.checkpoint or call.options.get("checkpoint")
        if requested == AUTO and written and self.written_by is not None:
            requested = self.written_by(str(written)) or AUTO  # continue on the engine that wrote it
        try:
            engine = choose(
                requested,
                streaming=streaming,
                spec=call.spec,
                features=found,
                per_batch_ok=self.mode is RunMode.STREAM,
            )
        except SchemaError as exc:
            raise KeyedQueryError(f"{exc} (OPTIONS of {call.where})") from None
        if streaming and sel.args.get("order") is not None and not engine.capabilities.ordered_stream_output:
            able = " or ".join(f"'{e.name}'" for e in ENGINES.values() if e.capabilities.ordered_stream_output)
            raise KeyedQueryError(
                f"ORDER BY after {call.where} over a streaming source needs an engine that runs per micro-batch "
                f"(engine {able} under ks.start / ks.run orders each batch's output); engine '{engine.name}' here "
                "cannot"
            )
        return engine

    def _absent_attributes(self, call: _Call) -> tuple[str, ...]:
        """The attributes the class added since its checkpoint's state began (rows stored before
        lack them: ``state/evolution.py``), from the checkpoint's record of its last run."""
        written = self.checkpoint or call.options.get("checkpoint")
        if not written or call.spec.kind is not FunctionKind.FUNCTION:
            return ()
        try:
            meta = read_metadata(str(written), self.spark)
        except CheckpointError:
            return ()
        was = meta.operator(call.fname) if meta else None
        if was is None:
            return ()
        return tuple(absent_attributes(was, AttributeLayout(call.spec.instantiate()).names))

    def _step(self, group: KeyedGroup, call: _Call, source: _Source, outer: _Outer, engine: Engine) -> KeyedStep:
        event_time = group.args.get("event_time")
        projections: list[exp.Expression] = []
        named: dict[str, str] = {}  # expression SQL -> its internal column: each is shipped once

        def column(e: exp.Expression, name: str) -> str:
            # every identifier quoted: `ts` and ts (an ORDER BY column also passed through) ship once
            sql = render(e, identify=True)
            if sql not in named:
                projections.append(exp.alias_(e.copy(), _q(name)))
                named[sql] = name
            return named[sql]

        keys = [column(k, f"__ks_k{i}") for i, k in enumerate(call.key_exprs)]
        args = [column(a, f"__ks_a{i}") for i, a in enumerate(call.arg_exprs)]
        order = [
            OrderSpec(column(o, f"__ks_o{i}"), spec.ascending, spec.nulls_first)
            for i, (o, spec) in enumerate(zip(call.order_exprs, call.order_specs))
        ]
        through = []
        for i, p in enumerate(outer.passthrough):
            name = column(exp.column(_q(p)), f"__ks_p{i}")
            if name in keys:  # (a key's source column under another name: output apart from the key)
                name = f"__ks_p{i}"
                projections.append(exp.alias_(exp.column(_q(p)), _q(name)))
            through.append(name)
        if event_time is not None:
            source.check(event_time, "EVENT TIME")
        et = column(event_time, "__ks_et") if event_time is not None else None
        if not projections:
            projections = [exp.alias_(exp.Literal.number(0), _q("__ks_none"))]
        keyed_source = source.select.copy()
        keyed_source.set("expressions", projections)
        initial_df, initial_source = None, None
        if group.args.get("initial_state") is not None:
            initial_df = self._initial_state(group.args["initial_state"], call.key_names, call.fname, keys, source.ctes)
            initial_source = render(group.args["initial_state"])
        plan = KeyedPlan(
            call.spec,
            keys,
            args,
            order,
            initial_df,
            self._output_mode(call, engine),
            call.arg_names,
            through,
            et,
            _interval_ms(group.args.get("watermark")),
            partitions=call.options.get("state_partitions"),
            clock_offset_ms=session_offset_ms(self.spark),
            absent_attributes=self._absent_attributes(call),
        )
        inputs = group.args.get("inputs")
        if inputs:
            internal = dict(zip(call.arg_names, args))
            plan.inputs = [PlanInput(name, tuple((n, internal[c]) for n, c in m)) for name, m in inputs]
            plan.input_column = internal[INPUT_COLUMN]
            if call.spec.kind is FunctionKind.PROCESSOR:
                check_process_inputs(call.spec, [i.name for i in plan.inputs], f"{call.where}")
        columns = [f"{_quoted(k)} AS {_quoted(n)}" for k, n in zip(keys, call.key_names)]
        columns += [_quoted(r) for r in call.returns]
        columns += [f"{_quoted(c)} AS {_quoted(p)}" for c, p in zip(through, outer.passthrough)]
        ttl = group.args.get("ttl")
        streaming = source.df.isStreaming
        log.debug(
            "planned WITH STATE %s (%s) keyed by %s on engine '%s'%s",
            call.fname,
            call.spec.cls.__name__,
            ", ".join(call.key_names) or "nothing",
            engine.name,
            " over a stream" if streaming else "",
        )
        return KeyedStep(
            function=call.fname,
            class_name=call.spec.cls.__name__,
            keys=[f"{render(k)} AS {n}" for k, n in zip(call.key_exprs, call.key_names)],
            arguments=[f"{render(a)} AS {n}" for a, n in zip(call.arg_exprs, call.arg_names)]
            if not inputs
            else [f"{name}: {', '.join(n for n, _ in m)}" for name, m in inputs],
            order=[render(o) for o in group.args.get("order") or []],
            options=call.options | ({"ttl": render(ttl)} if ttl is not None else {}),
            engine=engine,
            source_sql=render(keyed_source),
            outer_sql="",  # set once the outer select is built
            view=view_name("keyed"),
            streaming=streaming,
            source=self.spark.sql(render(keyed_source)),
            plan=plan,
            columns=columns,
            passthrough=outer.passthrough,
            key_names=call.key_names,
            initial_source=initial_source,
        )

    @staticmethod
    def _output_mode(call: _Call, engine: Engine) -> str:
        """OPTIONS (output_mode = ...): Spark's name for the keyed operator's mode. ``bulk`` writes
        each micro-batch's rows as they come (append); ``update`` is transformWithState's."""
        mode = str(call.options.get("output_mode", "append")).lower()
        if mode not in _OUTPUT_MODES:
            raise KeyedQueryError(
                f"option output_mode of {call.where} is {mode!r}; use 'append' (the default) or 'update' "
                "('complete' has no meaning for a keyed function's rows)"
            )
        if mode != "append" and not engine.capabilities.streams_as_dataframe:
            raise KeyedQueryError(
                f"option output_mode = {mode!r} of {call.where}: engine '{engine.name}' appends each micro-batch's "
                "rows; output_mode 'update' needs OPTIONS (engine = 'tws')"
            )
        return mode.capitalize()

    def _initial_state(
        self,
        source: exp.Expression,
        key_names: list[str],
        fname: str,
        key_columns: list[str],
        ctes: exp.With | None = None,
    ) -> DataFrame:
        """INITIAL STATE FROM's rows, read as a batch (a CTE of the statement may be the seed)."""
        q = exp.Select(expressions=[exp.Star()]).from_(source.copy())
        if ctes is not None:
            q.set("with_", ctes.copy())
        df = self.spark.sql(render(q))
        lower = {c.lower(): c for c in df.columns}
        missing = [k for k in key_names if k.lower() not in lower]
        if missing:
            raise KeyedQueryError(
                f"INITIAL STATE FROM for {fname}: key column(s) {missing} missing (columns: {', '.join(df.columns)})"
            )
        exprs = [f"{_quoted(lower[k.lower()])} AS {_quoted(c)}" for k, c in zip(key_names, key_columns)]
        # batch_id is read_state's bookkeeping column, not state: a read_state table bootstraps as is
        skip = {k.lower() for k in key_names} | {"batch_id"}
        exprs += [_quoted(c) for c in df.columns if c.lower() not in skip]
        return df.selectExpr(*exprs)

    @staticmethod
    def _outer_select(sel: exp.Select, call: _Call, outer: _Outer, step: KeyedStep) -> exp.Select:
        select = exp.Select(expressions=outer.expressions).from_(
            exp.Table(this=_q(step.view), alias=exp.TableAlias(this=_q(call.alias)))
        )
        if outer.where is not None:
            select.set("where", outer.where)
        if outer.order is not None:
            select.set("order", outer.order)
        for arg in ("limit", "offset", "distinct"):
            if sel.args.get(arg) is not None:
                select.set(arg, sel.args[arg].copy())
        step.outer_sql = render(select)
        return select


def plan_statement(
    spark: SparkSession,
    tree: exp.Expression,
    functions: Callable[[str], FunctionSpec],
    bind: Callable[[KeyedStep], None],
    *,
    default_engine: str = AUTO,
    mode: RunMode = RunMode.SQL,
    checkpoint: str | None = None,
    written_by: Callable[[str], str | None] | None = None,
) -> KeyedStatement:
    """Plan ``tree``'s keyed selects; ``bind(step)`` is called for each, innermost first, to
    make the view the rest of the statement reads its result from. ``auto`` continues a
    checkpoint (``checkpoint``, or one in a call's OPTIONS) on ``written_by(checkpoint)``, the
    engine that wrote it."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return _Planner(spark, functions, default_engine, mode, bind, checkpoint, written_by).run(tree)
    except SchemaError as exc:
        raise KeyedQueryError(str(exc)) from None
    except (AnalysisException, ParseException) as exc:
        # the source part of the statement is Spark SQL: Spark's own complaint, as ours
        raise KeyedQueryError(f"Spark cannot run the statement's source part: {spark_hint(exc)}") from None

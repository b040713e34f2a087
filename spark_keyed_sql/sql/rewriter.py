"""Keyed query -> a plan: keyed steps and plain Spark SQL over their results (the names a keyed
select refers to are resolved in ``resolution.py``).

For every SELECT carrying ``GROUP BY KEY ... WITH STATE`` (innermost first): the source part
(FROM / joins / WHERE, with the statement's CTEs) stays Spark SQL and is selected into
internally named columns; the keyed part becomes a :class:`~.statement.KeyedStep` for an
engine; the SELECT is replaced in the tree by plain SQL over the step's view (select list,
HAVING as WHERE, ORDER BY, LIMIT). What is left is plain Spark SQL. The rewriter runs nothing:
the caller's ``bind`` makes each step's view as it is planned (a nested keyed select reads the
inner one's view), and the caller runs the final SQL.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from ..api.errors import SchemaError
from ..api.intervals import parse_interval_ms
from ..compat.features import features
from ..compat.names import named, quote
from ..engines import AUTO, ENGINES, Engine, choose
from ..engines.broadcast_rows import collect_rows
from ..engines.native import NATIVE_CONF, OFF, ON, NativePlan, native_mode, plan_native
from ..runtime.broadcast import BroadcastInput, broadcast_limit
from ..runtime.clock import session_offset_ms
from ..runtime.keys import OrderSpec
from ..runtime.plan import KeyedPlan, PlanInput
from ..runtime.seed_keys import seed_key_sql
from ..runtime.spec import FunctionKind, FunctionSpec, check_one_input, check_process_inputs
from ..state.attributes import AttributeLayout
from ..state.checkpoint import CheckpointError, read_metadata
from ..state.evolution import absent_attributes, stored_names
from .ctes import ctes_visible_from
from .errors import KeyedQueryError, position, spark_hint
from .expressions import KNOWN_OPTIONS, STREAMING_ONLY_OPTIONS, KeyedGroup
from .parse import render
from .resolution import Call, Outer, Source, quoted_identifier, resolve_call, resolve_outer
from .sources import Sources, literal, view_name
from .statement import KeyedStatement, KeyedStep, RunMode, drop_views
from .table_calls import INPUT_COLUMN

__all__ = ["KNOWN_OPTIONS", "STREAMING_ONLY_OPTIONS", "plan_statement"]

log = logging.getLogger(__name__)

MAX_STATE_PARTITIONS = 100_000


_INTERVAL_UNITS = "milliseconds (ms), seconds (s), minutes (m), hours (h), days (d), weeks"


def _interval_ms(e: exp.Expression | None, what: str) -> int | None:
    """Milliseconds of ``'10 minutes'`` / ``INTERVAL 10 MINUTES`` / ``INTERVAL 1 HOUR 30 MINUTES``
    (sqlglot reads the last as a sum of intervals); ``what``: the clause, for the error."""
    if e is None:
        return None
    try:
        return _interval_parts_ms(e)
    except SchemaError as exc:
        raise KeyedQueryError(f"{what}: {exc}; units: {_INTERVAL_UNITS}", *position(e)) from None


def _interval_parts_ms(e: exp.Expression) -> int:
    if isinstance(e, exp.Literal) and e.is_string:
        return parse_interval_ms(e.this)
    if isinstance(e, exp.Interval):
        unit = e.args.get("unit")
        return parse_interval_ms(
            f"{e.this.name if isinstance(e.this, exp.Literal) else e.this.sql()} {unit.name if unit else ''}"
        )
    if isinstance(e, exp.Add) and all(isinstance(p, (exp.Interval, exp.Add)) for p in (e.this, e.expression)):
        return _interval_parts_ms(e.this) + _interval_parts_ms(e.expression)
    raise SchemaError(
        f"cannot read interval {e.sql(dialect='spark')}; write it as '1 hour 30 minutes' or INTERVAL 90 MINUTES"
    )


def _depth(node: exp.Expression) -> int:
    d = 0
    while node.parent is not None:
        node = node.parent
        d += 1
    return d


_OUTPUT_MODES = ("append", "update")  # what transformWithState takes


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
        per_batch: bool | None = None,
    ):
        self.spark = spark
        self.functions = functions  # name -> FunctionSpec (raises UnknownFunctionError)
        self.default_engine = default_engine
        self.checkpoint = checkpoint  # given as checkpoint= (one in OPTIONS is the call's)
        self.written_by = written_by  # checkpoint -> the engine that wrote it (None: new)
        self.mode = mode
        # a stream's steps are run per micro-batch (ks.start / ks.run, or planned as they would run
        # them: EXPLAIN), so 'auto' may take an engine that runs streams that way
        self.per_batch = mode is RunMode.STREAM if per_batch is None else per_batch
        self.bind = bind
        self.sources = Sources(spark)
        self.steps: list[KeyedStep] = []

    # ------------------------------------------------------------------ entry
    def run(self, tree: exp.Expression) -> KeyedStatement:
        try:
            return self._run(tree)
        except BaseException:  # no statement to run: the views its planned steps and streams made go
            drop_views(self.spark, [s.view for s in self.steps] + list(self.sources.stream_views.values()))
            raise

    def _run(self, tree: exp.Expression) -> KeyedStatement:
        self.sources.replace_keyed_state(tree)
        keyed = [s for s in tree.find_all(exp.Select) if isinstance(s.args.get("group"), KeyedGroup)]
        # innermost first: a keyed select nested in another one's FROM is replaced before
        keyed.sort(key=_depth, reverse=True)
        for sel in keyed:
            outer = self._plan_select(sel)
            if sel is tree:
                tree = outer
            else:
                sel.replace(outer)
        return KeyedStatement(
            render(tree),
            self.steps,
            is_query=isinstance(tree, exp.Query),
            source_views=list(self.sources.stream_views.values()),
        )

    # ------------------------------------------------------------------ one keyed select
    def _plan_select(self, sel: exp.Select) -> exp.Expression:
        group: KeyedGroup = sel.args["group"]
        _refuse_dropped_clauses(sel, group.function_name)
        call_options, spec, watermark_ms = self._options(group)
        source = self._source(sel, call_options)
        call = resolve_call(group, spec, call_options, source)
        if not source.df.isStreaming:
            bad = sorted(set(call.options) & STREAMING_ONLY_OPTIONS)
            if bad:
                raise KeyedQueryError(
                    f"option(s) {bad} of {call.where} only apply to a streaming source; the source is a batch query"
                )
        outer = resolve_outer(sel, call, source)
        engine = self._engine(sel, call, source)
        step = self._step(group, call, source, outer, engine, watermark_ms)
        self.bind(step)
        self.steps.append(step)
        return self._outer_select(sel, call, outer, step)

    def _options(self, group: KeyedGroup) -> tuple[dict[str, Any], FunctionSpec, int | None]:
        """The clause's options, the function's spec with its TTL, and its watermark in ms: each
        checked before Spark runs anything."""
        fname = group.function_name
        spec = self.functions(fname)
        options = {k: literal(v) for k, v in group.options.items()}
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            close = [m for u in unknown for m in difflib.get_close_matches(u, sorted(KNOWN_OPTIONS), n=1)]
            raise KeyedQueryError(
                f"unknown option(s) {unknown} in WITH STATE {fname}"
                + (f" (did you mean {', '.join(close)}?)" if close else "")
                + f"; known: {sorted(KNOWN_OPTIONS)}",
                *position(next(o for o in group.args["options"] if o.name.lower() == unknown[0])),
            )
        if "state_partitions" in options:
            n = options["state_partitions"]
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_STATE_PARTITIONS:
                raise KeyedQueryError(
                    f"option state_partitions of WITH STATE {fname} must be a whole number from 1 to "
                    f"{MAX_STATE_PARTITIONS:,}, got {n!r}",
                    *position(group.options["state_partitions"]),
                )
        if group.args.get("ttl") is not None:
            ttl = group.args["ttl"]
            ttl_ms = _interval_ms(ttl, f"TTL of WITH STATE {fname}")
            if ttl_ms is not None and ttl_ms <= 0:
                raise KeyedQueryError(
                    f"TTL of WITH STATE {fname} must be a positive interval, got {ttl.sql(dialect='spark')}",
                    *position(ttl),
                )
            spec = spec.with_ttl(ttl_ms)
        watermark_ms = _interval_ms(group.args.get("watermark"), f"WATERMARK of WITH STATE {fname}")
        return options, spec, watermark_ms

    def _source(self, sel: exp.Select, options: dict[str, Any]) -> Source:
        base = exp.Select(expressions=[exp.Star()])
        for arg in ("from_", "joins", "where", "laterals"):
            value = sel.args.get(arg)
            if value is not None:
                base.set(arg, [a.copy() for a in value] if isinstance(value, list) else value.copy())
        joins_hint, _ = _split_hint(sel)
        if joins_hint is not None:
            base.set("hint", joins_hint)
        ctes = ctes_visible_from(sel)
        if ctes is not None:
            base.set("with_", ctes.copy())
        if self.mode is RunMode.STREAM:
            self.sources.streamify(base, options.get("max_files_per_trigger"))
        aliases = set()
        if base.args.get("from_"):
            tables = (base.args["from_"].this, *[j.this for j in base.args.get("joins") or []])
            aliases = {t.alias_or_name.lower() for t in tables}
        return Source(base, self.spark.sql(render(base)), aliases, ctes)

    def _engine(self, sel: exp.Select, call: Call, source: Source) -> Engine:
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
                per_batch_ok=self.per_batch,
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

    def _evolution(self, call: Call, engine: Engine) -> tuple[tuple[str, ...], dict[str, str]]:
        """From the checkpoint's record of its last run (``state/evolution.py``): the attributes
        the class added since its state began (rows stored before lack them), and, on an engine
        that keeps state where it was written, the names renamed state is stored under."""
        written = self.checkpoint or call.options.get("checkpoint")
        if not written:
            return (), {}
        try:
            meta = read_metadata(str(written), self.spark)
        except CheckpointError:
            return (), {}
        was = meta.operator(call.fname) if meta else None
        if was is None:
            return (), {}
        spec, renames = call.spec, call.spec.renames
        if spec.kind is FunctionKind.FUNCTION:
            names = AttributeLayout(spec.instantiate()).names
            absent = tuple(absent_attributes(was, names, renames))
        else:
            names, absent = list(spec.descriptors), ()
        keeps = engine.capabilities.keeps_state_names
        return absent, stored_names(was, names, renames, spec.kind is not FunctionKind.FUNCTION) if keeps else {}

    def _step(
        self, group: KeyedGroup, call: Call, source: Source, outer: Outer, engine: Engine, watermark_ms: int | None
    ) -> KeyedStep:
        event_time = group.args.get("event_time")
        projections: list[exp.Expression] = []
        shipped: dict[str, str] = {}  # expression SQL -> its internal column: each is shipped once

        def column(e: exp.Expression, name: str) -> str:
            # every identifier quoted: `ts` and ts (an ORDER BY column also passed through) ship once
            sql = render(e, identify=True)
            if sql not in shipped:
                projections.append(exp.alias_(e.copy(), quoted_identifier(name)))
                shipped[sql] = name
            return shipped[sql]

        keys = [column(k, f"__ks_k{i}") for i, k in enumerate(call.key_exprs)]
        args = [column(a, f"__ks_a{i}") for i, a in enumerate(call.arg_exprs)]
        order = [
            OrderSpec(column(o, f"__ks_o{i}"), spec.ascending, spec.nulls_first)
            for i, (o, spec) in enumerate(zip(call.order_exprs, call.order_specs))
        ]
        through = []
        for i, p in enumerate(outer.passthrough):
            name = column(exp.column(quoted_identifier(p)), f"__ks_p{i}")
            if name in keys:  # (a key's source column under another name: output apart from the key)
                name = f"__ks_p{i}"
                projections.append(exp.alias_(exp.column(quoted_identifier(p)), quoted_identifier(name)))
            through.append(name)
        if event_time is not None:
            source.check(event_time, "EVENT TIME")
            source.check_timestamp(event_time, f"EVENT TIME of {call.where}")
        et = column(event_time, "__ks_et") if event_time is not None else None
        if not projections:
            projections = [exp.alias_(exp.Literal.number(0), quoted_identifier("__ks_none"))]
        keyed_source = source.select.copy()
        keyed_source.set("expressions", projections)
        initial_df, initial_source = None, None
        initial, broadcast_seed = group.args.get("initial_state"), group.args.get("initial_broadcast")
        if initial is not None and broadcast_seed is None and self._seeds_broadcast(initial, call, source, group):
            # DESIGN: broadcast state is "seedable with INITIAL STATE": a seed with a broadcast
            # input's key and not the call's is that input's (as initial_broadcast => would give it)
            initial, broadcast_seed = None, initial
        if initial is not None:
            initial_df = self._initial_state(initial, call, keys, source, group.args.get("broadcast") or [])
            initial_source = render(initial)
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
            watermark_ms,
            partitions=call.options.get("state_partitions"),
            clock_offset_ms=session_offset_ms(self.spark),
        )
        plan.absent_attributes, plan.stored_names = self._evolution(call, engine)
        inputs = group.args.get("inputs")
        broadcast = group.args.get("broadcast") or []
        if inputs:
            internal = dict(zip(call.arg_names, args))
            plan.inputs = [PlanInput(name, tuple((n, internal[c]) for n, c in m)) for name, m in inputs]
            plan.input_column = internal[INPUT_COLUMN]
            if broadcast:
                plan.broadcasts = [
                    BroadcastInput(
                        name,
                        index,
                        tuple((n, internal[c]) for n, c in m),
                        key,
                        time,
                        tuple(OrderSpec(c, not desc, nulls) for c, desc, nulls in order),
                    )
                    for name, index, m, key, time, order in broadcast
                ]
                plan.broadcast_column = plan.input_column
                if broadcast_seed is not None:
                    arg = "initial_broadcast" if group.args.get("initial_broadcast") is not None else "initial_state"
                    plan.broadcast_seed = self._broadcast_seed(
                        broadcast_seed, plan.broadcasts, call.where, source.ctes, arg
                    )
            if len(plan.inputs) == 1:  # one keyed input beside broadcast ones: its events as one input's
                only = plan.inputs[0]
                plan.inputs, plan.arg_columns, plan.arg_names = None, only.columns, only.names
                # (and no tie-break by input: its rows are all of one input, the column not sorted or shipped)
                plan.order = [o for o in plan.order if o.column != plan.input_column]
            elif call.spec.kind is FunctionKind.PROCESSOR:
                check_process_inputs(call.spec, [i.name for i in plan.inputs], f"{call.where}")
            if broadcast and source.df.isStreaming and not engine.capabilities.broadcast_streams:
                raise KeyedQueryError(
                    f"{call.where}: broadcast inputs on a stream run on engine 'bulk' under ks.start / ks.run (the "
                    f"driver applies each micro-batch's broadcast rows before its keyed rows); engine '{engine.name}' "
                    "runs its batches inside Spark's operator, out of the driver's reach: use engine => 'bulk'"
                )
        if plan.inputs is None and call.spec.kind is FunctionKind.PROCESSOR:
            check_one_input(call.spec, f"{call.where}")
        columns = [f"{quote(k)} AS {quote(n)}" for k, n in zip(keys, call.key_names)]
        columns += [quote(r) for r in call.returns]
        columns += [f"{quote(c)} AS {quote(p)}" for c, p in zip(through, outer.passthrough)]
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
        step = KeyedStep(
            function=call.fname,
            class_name=call.spec.cls.__name__,
            keys=[f"{render(k)} AS {n}" for k, n in zip(call.key_exprs, call.key_names)],
            arguments=[f"{render(a)} AS {n}" for a, n in zip(call.arg_exprs, call.arg_names)]
            if not inputs
            else [f"{name}: {', '.join(n for n, _ in m)}" for name, m in inputs]
            + [
                f"{name} (broadcast by {', '.join(key)}{', versioned by ' + time if time else ''}): "
                f"{', '.join(n for n, _ in m)}"
                for name, _, m, key, time, _ in broadcast
            ],
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
        mode = native_mode(call.options.get("native"), self.spark.conf.get(NATIVE_CONF, None))
        if mode is None:
            given = call.options.get("native")
            raise KeyedQueryError(
                f"option native of {call.where} is {given!r}; use true, false or 'auto' (the default)"
                if given is not None
                else f"{NATIVE_CONF} is {self.spark.conf.get(NATIVE_CONF)!r}; use true, false or auto (the default)"
            )
        if mode != OFF:
            step.plan.use_schema(step.source.schema)
            step.native = plan_native(
                step.plan,
                streaming=streaming,
                native_streams=engine.capabilities.native_streams,
            )
            if isinstance(step.native, NativePlan) and step.native.stream is not None:
                step.native.every_batch = mode == ON
        return step

    @staticmethod
    def _output_mode(call: Call, engine: Engine) -> str:
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

    def _seed_columns(self, source: exp.Expression, ctes: exp.With | None) -> list[str] | None:
        """A seed table's columns (None when Spark cannot read it: the seed's own reader says why)."""
        from pyspark.errors import AnalysisException, ParseException

        try:
            return self.spark.sql(_seed_sql(source, ctes)).columns
        except (AnalysisException, ParseException):
            return None

    def _seeds_broadcast(self, seed: exp.Expression, call: Call, keyed: Source, group: exp.Expression) -> bool:
        """Is ``initial_state``'s table a broadcast input's state (its key columns and not the call's)?"""
        broadcasts = group.args.get("broadcast") or []
        if not broadcasts:
            return False
        columns = self._seed_columns(seed, keyed.ctes)
        if columns is None:
            return False
        return bool(_broadcast_meant(columns, call.key_names, broadcasts))

    def _broadcast_seed(
        self,
        source: exp.Expression,
        inputs: list[BroadcastInput],
        where: str,
        ctes: exp.With | None,
        arg: str = "initial_broadcast",
    ) -> dict[str, list[dict[str, Any]]]:
        """``initial_broadcast => TABLE(...)``'s rows, per broadcast input, by its column names:
        a read_state(..., broadcast=...) table seeds as is (``valid_from`` is the time column;
        ``batch_id`` is dropped); with several broadcast inputs a ``broadcast`` column names each
        row's. Applied before the first batch, as the input's own rows are."""
        df = self.spark.sql(_seed_sql(source, ctes))
        lower = {c.lower(): c for c in df.columns}
        several = len(inputs) > 1
        if several and "broadcast" not in lower:
            raise KeyedQueryError(
                f"{arg} of {where}: with several broadcast inputs ({', '.join(b.name for b in inputs)}) "
                f"the table needs a column 'broadcast' naming each row's input (columns: {', '.join(df.columns)})"
            )
        limit = broadcast_limit(self.spark)
        seed: dict[str, list[dict[str, Any]]] = {}
        for b in inputs:
            missing = [k for k in b.key if k.lower() not in lower]
            if missing:
                raise KeyedQueryError(
                    f"{arg} of {where}: broadcast input '{b.name}' is keyed by {', '.join(b.key)}; the "
                    f"table lacks {', '.join(missing)} (columns: {', '.join(df.columns)})"
                )
            cols = []
            for n in b.names:
                if n.lower() in lower:
                    cols.append(named(lower[n.lower()]).alias(n))
                elif n == b.time and "valid_from" in lower:
                    cols.append(F.col("valid_from").alias(n))
                else:
                    cols.append(F.lit(None).alias(n))
            rows = df.filter(named(lower["broadcast"]) == b.name) if several else df
            seed[b.name] = collect_rows(rows.select(*cols), limit, f"{arg} of {where} for '{b.name}'")
        return seed

    def _initial_state(
        self,
        source: exp.Expression,
        call: Call,
        key_columns: list[str],
        keyed: Source,
        broadcasts: list[tuple] = (),
    ) -> DataFrame:
        """INITIAL STATE FROM's rows, read as a batch (a CTE of the statement may be the seed),
        their key columns in the source's key types. ``broadcasts``: the call's broadcast inputs
        (name, index, columns, key, ...), for a seed of broadcast state given here by mistake."""
        key_names, fname = call.key_names, call.fname
        from pyspark.errors import AnalysisException, ParseException

        try:
            df = self.spark.sql(_seed_sql(source, keyed.ctes))
        except (AnalysisException, ParseException) as exc:
            raise KeyedQueryError(
                f"INITIAL STATE FROM for {fname}: Spark cannot read the seed: {spark_hint(exc)}", *position(source)
            ) from None
        lower = {c.lower(): c for c in df.columns}
        missing = [k for k in key_names if k.lower() not in lower]
        if missing:
            meant = _broadcast_meant(df.columns, key_names, broadcasts)
            hint = (
                f"; it looks like the state of broadcast input {meant[0]!r}, which initial_broadcast => TABLE(...) "
                "seeds (initial_state seeds the per-key state)"
                if meant
                else ""
            )
            raise KeyedQueryError(
                f"INITIAL STATE FROM for {fname}: key column(s) {missing} missing "
                f"(columns: {', '.join(df.columns)}){hint}"
            )
        key_types = [f.dataType for f in keyed.df.select(*[F.expr(render(k)) for k in call.key_exprs]).schema]
        seed_types = {f.name: f.dataType for f in df.schema.fields}
        exprs = []
        for k, c, t in zip(key_names, key_columns, key_types):
            name = lower[k.lower()]
            try:
                what = f"INITIAL STATE FROM for {fname}: key column {name}"
                sql = seed_key_sql(quote(name), seed_types[name], t, what)
            except SchemaError as exc:
                raise KeyedQueryError(str(exc), *position(source)) from None
            exprs.append(f"{sql} AS {quote(c)}")
        # batch_id is read_state's bookkeeping column, not state: a read_state table bootstraps as is
        skip = {k.lower() for k in key_names} | {"batch_id"}
        state = [c for c in df.columns if c.lower() not in skip]
        attributes = call.spec.state_attributes()
        unknown = [c for c in state if attributes is not None and c not in attributes]
        if unknown:  # (said here, before any job: the seeding task would fail on its first row)
            raise KeyedQueryError(
                f"INITIAL STATE FROM for {fname}: column(s) {unknown} are not state attributes of "
                f"{call.spec.cls.__name__} ({', '.join(attributes or [])}); the seed's columns are the key column(s) "
                "and state attributes, as read_state shows them: leave the others out of the seed's SELECT",
                *position(source),
            )
        exprs += [quote(c) for c in state]
        return df.selectExpr(*exprs)

    @staticmethod
    def _outer_select(sel: exp.Select, call: Call, outer: Outer, step: KeyedStep) -> exp.Select:
        select = exp.Select(expressions=outer.expressions).from_(
            exp.Table(this=quoted_identifier(step.view), alias=exp.TableAlias(this=quoted_identifier(call.alias)))
        )
        if outer.where is not None:
            select.set("where", outer.where)
        if outer.order is not None:
            select.set("order", outer.order)
        for arg in ("limit", "offset", "distinct"):
            if sel.args.get(arg) is not None:
                select.set(arg, sel.args[arg].copy())
        _, output_hint = _split_hint(sel)
        if output_hint is not None:
            select.set("hint", output_hint)
        step.outer_sql = render(select)
        return select


# clauses of a keyed select that would apply to its result: the outer select keeps WHERE-like
# HAVING, ORDER BY, LIMIT, OFFSET and DISTINCT; these are refused rather than dropped
_RESULT_CLAUSES = {
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
}


# Spark's join strategy hints (sqlglot reads most as JoinHint, SHUFFLE_MERGE as a function)
_JOIN_HINTS = {"BROADCAST", "BROADCASTJOIN", "MAPJOIN", "MERGE", "SHUFFLE_MERGE", "MERGEJOIN", "SHUFFLE_HASH"}
_JOIN_HINTS |= {"SHUFFLE_REPLICATE_NL"}


def _is_join_hint(h: exp.Expression) -> bool:
    return isinstance(h, exp.JoinHint) or (h.name or "").upper() in _JOIN_HINTS


def _split_hint(sel: exp.Select) -> tuple[exp.Hint | None, exp.Hint | None]:
    """A keyed select's hint in two: join hints (BROADCAST, MERGE, ...) for its source's joins,
    the rest (COALESCE, REPARTITION, REBALANCE: the output's partitions) for the outer select."""
    hint = sel.args.get("hint")
    if not isinstance(hint, exp.Hint):
        return None, None
    joins = [h.copy() for h in hint.expressions if _is_join_hint(h)]
    other = [h.copy() for h in hint.expressions if not _is_join_hint(h)]
    return (exp.Hint(expressions=joins) if joins else None), (exp.Hint(expressions=other) if other else None)


def _refuse_dropped_clauses(sel: exp.Select, fname: str) -> None:
    for arg, clause in _RESULT_CLAUSES.items():
        node = sel.args.get(arg)
        if node:
            at = node[0] if isinstance(node, list) else node
            raise KeyedQueryError(
                f"{clause} on the select of GROUP BY KEY ... WITH STATE {fname} is not supported; apply it to the "
                f"keyed result in an outer query: SELECT * FROM (<the keyed select>) r {clause} ...",
                *position(at),
            )


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
    per_batch: bool | None = None,
) -> KeyedStatement:
    """Plan ``tree``'s keyed selects; ``bind(step)`` is called for each, innermost first, to
    make the view the rest of the statement reads its result from. ``auto`` continues a
    checkpoint (``checkpoint``, or one in a call's OPTIONS) on ``written_by(checkpoint)``, the
    engine that wrote it. ``per_batch``: a streaming source's steps are planned as ks.start /
    ks.run run them (default: in ``RunMode.STREAM``), so ``auto`` picks as they do."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        return _Planner(spark, functions, default_engine, mode, bind, checkpoint, written_by, per_batch).run(tree)
    except SchemaError as exc:
        raise KeyedQueryError(str(exc)) from None
    except (AnalysisException, ParseException) as exc:
        # the source part of the statement is Spark SQL: Spark's own complaint, as ours
        raise KeyedQueryError(f"Spark cannot run the statement's source part: {spark_hint(exc)}") from None


def _broadcast_meant(columns: list[str], key_names: list[str], broadcasts: list[tuple]) -> list[str]:
    """The broadcast inputs (name, index, columns, key, ...) whose key a seed's ``columns`` hold,
    when they lack one of the call's ``key_names`` (a seed of broadcast state, not of keyed)."""
    lower = {c.lower() for c in columns}
    if all(k.lower() in lower for k in key_names):
        return []
    return [name for name, _, _, key, *_ in broadcasts if all(k.lower() in lower for k in key)]


def _seed_sql(source: exp.Expression, ctes: exp.With | None) -> str:
    """``SELECT * FROM <seed>`` with the statement's CTEs (a seed may name one of them)."""
    q = exp.Select(expressions=[exp.Star()]).from_(source.copy())
    if ctes is not None:
        q.set("with_", ctes.copy())
    return render(q)

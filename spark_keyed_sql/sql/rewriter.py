"""Keyed query -> DataFrame operations.

For every SELECT carrying ``GROUP BY KEY ... WITH STATE`` (innermost first): the source part
(FROM / joins / WHERE, with the statement's CTEs) stays Spark SQL and is selected into
internally named columns; the keyed part runs on an engine; its result becomes a temp view;
the SELECT is replaced in the tree by plain SQL over that view (select list, HAVING as WHERE,
ORDER BY, LIMIT). What is left is plain Spark SQL, run with ``spark.sql``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from ..api.errors import SchemaError
from ..api.intervals import parse_interval_ms
from ..runtime.base import output_schema
from ..runtime.connect import is_connect
from ..runtime.plan import KeyedPlan
from ..runtime.runner import OrderSpec
from ..runtime.spec import FunctionSpec
from .errors import KeyedQueryError
from .expressions import KeyedGroup
from .parse import render

__all__ = ["KeyedRewrite", "rewrite", "KNOWN_OPTIONS", "STREAMING_ONLY_OPTIONS"]

KNOWN_OPTIONS = {"engine", "checkpoint", "output_mode", "trigger", "max_files_per_trigger"}
STREAMING_ONLY_OPTIONS = {"output_mode", "trigger", "max_files_per_trigger"}
_view_ids = itertools.count()


@dataclass
class KeyedStep:
    """One keyed SELECT, as the rewriter planned it (what EXPLAIN KEYED shows)."""

    function: str
    class_name: str
    keys: list[str]
    arguments: list[str]
    order: list[str]
    options: dict[str, Any]
    engine: str
    source_sql: str
    outer_sql: str
    bootstrapped: bool
    view: str
    streaming: bool
    passthrough: list[str] = field(default_factory=list)
    key_names: list[str] = field(default_factory=list)
    # an engine that runs a stream per micro-batch (bulk): (source frame, plan, renaming
    # expressions); the step's view holds an empty placeholder until ks.start / ks.run runs it
    deferred: tuple[DataFrame, KeyedPlan, list[str]] | None = None
    # the INITIAL STATE FROM source as written (a checkpoint records what seeded it)
    initial_source: str | None = None


@dataclass
class KeyedRewrite:
    final_sql: str
    steps: list[KeyedStep]
    dataframe: DataFrame | None = None


def _lit_value(e: exp.Expression) -> Any:
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else (float(e.this) if "." in e.this else int(e.this))
    return e.sql(dialect="spark")


def _interval_ms(e: exp.Expression | None) -> int | None:
    if e is None:
        return None
    if isinstance(e, exp.Literal) and e.is_string:
        return parse_interval_ms(e.this)
    if isinstance(e, exp.Interval):
        unit = e.args.get("unit")
        return parse_interval_ms(f"{e.this.name if isinstance(e.this, exp.Literal) else e.this.sql()} {unit.name if unit else ''}")
    raise KeyedQueryError(f"cannot read interval {e.sql(dialect='spark')}")


def _interval_text(e: exp.Expression) -> str:
    return f"{_interval_ms(e)} milliseconds"


def _q(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _name_of(e: exp.Expression, default: str) -> str:
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return default


def _unalias(e: exp.Expression) -> exp.Expression:
    return e.this if isinstance(e, exp.Alias) else e


class _Rewriter:
    def __init__(self, spark: SparkSession, functions: Any, engines: dict, default_engine: str, mode: str):
        self.spark = spark
        self.functions = functions  # name -> FunctionSpec (callable raising UnknownFunctionError)
        self.engines = engines
        self.default_engine = default_engine
        self.mode = mode  # "sql" | "stream" (ks.start / ks.run)
        self.steps: list[KeyedStep] = []
        self.stream_views: dict[str, str] = {}

    # ------------------------------------------------------------------ entry
    def run(self, tree: exp.Expression, execute: bool) -> KeyedRewrite:
        self._replace_keyed_state(tree)
        keyed = [s for s in tree.find_all(exp.Select) if isinstance(s.args.get("group"), KeyedGroup)]
        # innermost first: a keyed select nested in another one's FROM is replaced before
        keyed.sort(key=_depth, reverse=True)
        top_with = tree.args.get("with_") if isinstance(tree, exp.Query) else None
        for sel in keyed:
            outer = self._rewrite_select(sel, top_with, execute)
            if sel is tree:
                tree = outer
            else:
                sel.replace(outer)
        final = render(tree)
        return KeyedRewrite(final, self.steps)

    # ------------------------------------------------------------------ one keyed select
    def _rewrite_select(self, sel: exp.Select, top_with: exp.With | None, execute: bool) -> exp.Expression:
        group: KeyedGroup = sel.args["group"]
        fname = group.function_name
        spec: FunctionSpec = self.functions(fname)
        options = {k: _lit_value(v) for k, v in group.options.items()}
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise KeyedQueryError(f"unknown option(s) {unknown} in WITH STATE {fname}; known: {sorted(KNOWN_OPTIONS)}")
        if group.args.get("ttl") is not None:
            spec = spec.with_ttl(_interval_ms(group.args["ttl"]))

        # ---- source part
        base = exp.Select(expressions=[exp.Star()])
        for arg in ("from_", "joins", "where", "laterals"):
            if sel.args.get(arg) is not None:
                base.set(arg, sel.args[arg].copy() if not isinstance(sel.args[arg], list) else [a.copy() for a in sel.args[arg]])
        if top_with is not None:
            base.set("with_", self._ctes_visible_from(sel, top_with))
        if self.mode == "stream":
            self._streamify_tables(base, options.get("max_files_per_trigger"))
        source_sql = render(base)
        source = self.spark.sql(source_sql)
        columns = source.columns
        lower = {c.lower(): c for c in columns}
        streaming = source.isStreaming
        where_fn = f"WITH STATE {fname}"

        def check_columns(e: exp.Expression, what: str) -> None:
            for col in e.find_all(exp.Column):
                if col.name.lower() not in lower:
                    raise KeyedQueryError(
                        f"{what} refers to '{col.sql(dialect='spark')}', which is not a column of the source "
                        f"(columns: {', '.join(columns)})"
                    )

        # keys
        key_names, key_exprs = [], []
        for i, k in enumerate(group.keys):
            check_columns(_unalias(k), "GROUP BY KEY")
            key_names.append(_name_of(k, f"key{i}"))
            key_exprs.append(_unalias(k))
        # arguments
        fn_args = group.function.expressions
        arg_names, arg_exprs = [], []
        if len(fn_args) == 1 and isinstance(fn_args[0], exp.Star):
            arg_names = list(columns)
            arg_exprs = [exp.column(_q(c)) for c in columns]
        else:
            for i, a in enumerate(fn_args):
                check_columns(_unalias(a), f"argument {i + 1} of {where_fn}")
                arg_names.append(_name_of(a, f"arg{i}"))
                arg_exprs.append(_unalias(a))
        dup = {n for n in arg_names if arg_names.count(n) > 1}
        if dup:
            raise KeyedQueryError(f"{where_fn}: two arguments named {sorted(dup)}; name them with AS")
        # within-key order
        order_exprs, order_specs = [], []
        for i, o in enumerate(group.args.get("order") or []):
            check_columns(o.this, f"ORDER BY of {where_fn}")
            order_exprs.append(o.this)
            nf = o.args.get("nulls_first")
            order_specs.append(OrderSpec(f"__ks_o{i}", not o.args.get("desc"), None if nf is None else bool(nf)))

        alias = group.alias_name or fname
        returns = spec.returns.names if spec.returns else []
        if not streaming:
            bad = sorted(set(options) & STREAMING_ONLY_OPTIONS)
            if bad:
                raise KeyedQueryError(f"option(s) {bad} of {where_fn} only apply to a streaming source; the source is a batch query")

        # ---- outer part: what the select list / HAVING / ORDER BY need
        source_aliases = {t.alias_or_name.lower() for t in (base.args["from_"].this, *[j.this for j in base.args.get("joins") or []])} if base.args.get("from_") else set()
        key_lower = {n.lower(): n for n in key_names}
        ret_lower = {n.lower(): n for n in returns}
        select_aliases = {e.alias.lower() for e in sel.expressions if isinstance(e, exp.Alias)}
        passthrough: list[str] = []

        def resolve(col: exp.Column, allow_select_alias: bool) -> None:
            table = col.table.lower() if col.table else None
            n = col.name.lower()
            if table == alias.lower():
                if n not in ret_lower:
                    raise KeyedQueryError(f"'{col.sql(dialect='spark')}': {fname} has no output column '{col.name}' (returns: {', '.join(returns)})")
                return
            if table is not None and table not in source_aliases:
                return  # belongs to an outer query (correlated) or another scope
            if table is not None:
                col.set("table", None)
            if n in key_lower or n in ret_lower or (allow_select_alias and n in select_aliases):
                return
            if n in lower:
                if spec.kind != "function":
                    raise KeyedQueryError(
                        f"column '{col.name}' is not a key or an output of {fname}; pass-through of source "
                        "columns needs a row-at-a-time StatefulFunction"
                    )
                if lower[n] not in passthrough:
                    passthrough.append(lower[n])
                return
            raise KeyedQueryError(
                f"column '{col.sql(dialect='spark')}' is neither a key ({', '.join(key_names) or 'none'}), an output of "
                f"{fname} ({', '.join(returns)}) nor a source column"
            )

        new_exprs = []
        for e in sel.expressions:
            if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table and e.table.lower() == alias.lower():
                new_exprs += [exp.column(_q(r), table=_q(alias)) for r in returns]
                continue
            e = e.copy()
            for col in list(e.find_all(exp.Column)):
                if not isinstance(col.this, exp.Star):
                    resolve(col, allow_select_alias=False)
            new_exprs.append(e)
        having = sel.args.get("having")
        where_outer = None
        if having is not None:
            cond = having.this.copy()
            by_alias = {e.alias.lower(): e.this for e in new_exprs if isinstance(e, exp.Alias)}
            for col in list(cond.find_all(exp.Column)):
                if not col.table and col.name.lower() in by_alias and col.name.lower() not in key_lower and col.name.lower() not in ret_lower:
                    col.replace(by_alias[col.name.lower()].copy())
            for col in list(cond.find_all(exp.Column)):
                resolve(col, allow_select_alias=False)
            where_outer = exp.Where(this=cond)
        order_outer = sel.args.get("order")
        if order_outer is not None:
            order_outer = order_outer.copy()
            for col in list(order_outer.find_all(exp.Column)):
                resolve(col, allow_select_alias=True)

        clash = [n for n in passthrough if n.lower() in ret_lower]
        if clash:
            raise KeyedQueryError(f"source column(s) {clash} have the same name as outputs of {fname}; qualify with {alias}.")
        pass_internal = [p for p in passthrough if p.lower() not in key_lower]

        # ---- the keyed DataFrame
        projections = [exp.alias_(k.copy(), _q(f"__ks_k{i}")) for i, k in enumerate(key_exprs)]
        projections += [exp.alias_(a.copy(), _q(f"__ks_a{i}")) for i, a in enumerate(arg_exprs)]
        projections += [exp.alias_(o.copy(), _q(f"__ks_o{i}")) for i, o in enumerate(order_exprs)]
        projections += [exp.alias_(exp.column(_q(p)), _q(f"__ks_p{i}")) for i, p in enumerate(pass_internal)]
        if group.args.get("event_time") is not None:
            check_columns(group.args["event_time"], "EVENT TIME")
            projections.append(exp.alias_(group.args["event_time"].copy(), _q("__ks_et")))
        if not projections:
            projections = [exp.alias_(exp.Literal.number(0), _q("__ks_none"))]
        keyed_source = base.copy()
        keyed_source.set("expressions", projections)
        engine_name = str(options.get("engine", self.default_engine))
        if engine_name == "auto":
            engine_name = resolve_auto(streaming, spec, per_batch_ok=self.mode == "stream" and not is_connect(self.spark))
        if engine_name not in self.engines:
            raise KeyedQueryError(f"unknown engine '{engine_name}' in OPTIONS; choose one of {sorted(self.engines)}")
        if streaming and sel.args.get("limit") is not None:
            raise KeyedQueryError(f"LIMIT after {where_fn} is batch-only; the source is streaming (limit the result in the sink, or use a batch source)")
        if streaming and sel.args.get("order") is not None and self.engines[engine_name].streams_as_dataframe:
            # a per-micro-batch engine (bulk under ks.start / ks.run) orders each batch's output
            raise KeyedQueryError(
                f"ORDER BY after {where_fn} over a streaming source needs an engine that runs per micro-batch "
                f"(engine 'bulk' under ks.start / ks.run orders each batch's output); engine '{engine_name}' here cannot"
            )
        view = f"__ks_keyed_{next(_view_ids)}"

        initial_df = None
        if group.args.get("initial_state") is not None:
            initial_df = self._initial_state(group.args["initial_state"], key_names, fname)

        deferred = None
        if execute:
            df = self.spark.sql(render(keyed_source))
            engine = self.engines[engine_name]()
            per_batch = df.isStreaming and not engine.streams_as_dataframe
            if group.args.get("event_time") is not None and df.isStreaming and not per_batch:
                # late rows (older than the previous batch's watermark) are dropped by Spark
                df = df.withWatermark("__ks_et", _interval_text(group.args["watermark"]))
            plan = KeyedPlan(
                spec,
                [f"__ks_k{i}" for i in range(len(key_exprs))],
                [f"__ks_a{i}" for i in range(len(arg_exprs))],
                order_specs,
                initial_df,
                str(options.get("output_mode", "Append")).capitalize(),
                arg_names,
                [f"__ks_p{i}" for i in range(len(pass_internal))],
                "__ks_et" if group.args.get("event_time") is not None else None,
                _interval_ms(group.args.get("watermark")),
            )
            renamed = [f"`__ks_k{i}` AS {_q(n).sql(dialect='spark')}" for i, n in enumerate(key_names)]
            renamed += [f"{_q(r).sql(dialect='spark')}" for r in returns]
            renamed += [f"`__ks_p{i}` AS {_q(p).sql(dialect='spark')}" for i, p in enumerate(pass_internal)]
            if per_batch:
                if self.mode != "stream":
                    raise KeyedQueryError(
                        f"{where_fn}: engine '{engine_name}' runs a streaming source per micro-batch, so it has no "
                        "streaming DataFrame to return; run the statement with ks.start / ks.run, or use engine 'tws'"
                    )
                out = self.spark.createDataFrame([], output_schema(df.schema, plan))
                deferred = (df, plan, renamed)
            else:
                out = engine.apply(df, plan)
            out.selectExpr(*renamed).createOrReplaceTempView(view)

        outer = exp.Select(expressions=new_exprs).from_(exp.Table(this=_q(view), alias=exp.TableAlias(this=_q(alias))))
        if where_outer is not None:
            outer.set("where", where_outer)
        if order_outer is not None:
            outer.set("order", order_outer)
        for arg in ("limit", "offset"):
            if sel.args.get(arg) is not None:
                outer.set(arg, sel.args[arg].copy())
        if sel.args.get("distinct") is not None:
            outer.set("distinct", sel.args["distinct"].copy())
        self.steps.append(
            KeyedStep(
                function=fname,
                class_name=spec.cls.__name__,
                keys=[f"{render(k)} AS {n}" for k, n in zip(key_exprs, key_names)],
                arguments=[f"{render(a)} AS {n}" for a, n in zip(arg_exprs, arg_names)],
                order=[render(o) for o in group.args.get("order") or []],
                options=options | ({"ttl": render(group.args["ttl"])} if group.args.get("ttl") is not None else {}),
                engine=engine_name,
                source_sql=render(keyed_source),
                outer_sql=render(outer),
                bootstrapped=initial_df is not None,
                view=view,
                streaming=streaming,
                passthrough=pass_internal,
                key_names=key_names,
                deferred=deferred,
                initial_source=render(group.args["initial_state"]) if initial_df is not None else None,
            )
        )
        return outer

    def _replace_keyed_state(self, tree: exp.Expression) -> None:
        """``FROM keyed_state('<checkpoint>' [, '<function>' [, <batch id>]])`` -> a temp view of
        ``read_state``."""
        from ..state.reader import read_state, read_state_changes

        for table in list(tree.find_all(exp.Table)):
            fn = table.this
            name = str(fn.this).lower() if isinstance(fn, exp.Anonymous) else ""
            if name not in ("keyed_state", "keyed_state_changes"):
                continue
            args = [_lit_value(a) for a in fn.expressions]
            if not args or not isinstance(args[0], str):
                raise KeyedQueryError(
                    f"{name} needs a checkpoint path: keyed_state('<checkpoint>' [, '<function>' [, batch_id]]) or "
                    "keyed_state_changes('<checkpoint>' [, '<function>' [, from_batch [, to_batch]]])"
                )
            function = args[1] if len(args) > 1 and args[1] not in (None, "") else None
            view = f"__ks_state_{next(_view_ids)}"
            if name == "keyed_state":
                batch = int(args[2]) if len(args) > 2 else None
                read_state(self.spark, args[0], function, batch).createOrReplaceTempView(view)
            else:
                lo = int(args[2]) if len(args) > 2 else None
                hi = int(args[3]) if len(args) > 3 else None
                read_state_changes(self.spark, args[0], function, lo, hi).createOrReplaceTempView(view)
            table.set("this", _q(view))
            if table.args.get("alias") is None:
                table.set("alias", exp.TableAlias(this=_q(name)))

    def _ctes_visible_from(self, sel: exp.Select, top_with: exp.With) -> exp.With:
        ctes = []
        for cte in top_with.expressions:
            if sel.find_ancestor(exp.CTE) is cte or cte.find(exp.Select) is sel:
                break
            ctes.append(cte.copy())
        return exp.With(expressions=ctes) if ctes else None  # type: ignore[return-value]

    def _initial_state(self, source: exp.Expression, key_names: list[str], fname: str) -> DataFrame:
        q = exp.Select(expressions=[exp.Star()]).from_(source.copy())
        df = self.spark.sql(render(q))
        lower = {c.lower(): c for c in df.columns}
        missing = [k for k in key_names if k.lower() not in lower]
        if missing:
            raise KeyedQueryError(
                f"INITIAL STATE FROM for {fname}: key column(s) {missing} missing (columns: {', '.join(df.columns)})"
            )
        exprs = [f"{_q(lower[k.lower()]).sql(dialect='spark')} AS `__ks_k{i}`" for i, k in enumerate(key_names)]
        # batch_id is read_state's bookkeeping column, not state: a read_state table bootstraps as is
        skip = {k.lower() for k in key_names} | {"batch_id"}
        exprs += [_q(c).sql(dialect="spark") for c in df.columns if c.lower() not in skip]
        return df.selectExpr(*exprs)

    def _streamify_tables(self, base: exp.Select, max_files: Any = None) -> None:
        """ks.start / ks.run: file and catalog tables of the source become streaming reads
        (``max_files_per_trigger`` caps the files each micro-batch takes)."""
        for table in list(base.find_all(exp.Table)):
            fmt = table.db.lower() if table.db else ""
            if fmt in ("parquet", "json", "csv", "orc") and not table.catalog:
                path = table.name
                view = self._file_stream(f"{fmt}:{path}:{max_files}", fmt, {}, lambda f=fmt, p=path: getattr(self.spark.read, f)(p).schema, path, max_files)
                table.replace(exp.Table(this=_q(view), alias=table.args.get("alias") or exp.TableAlias(this=_q(path.rsplit("/", 1)[-1] or "src"))))
            elif not table.db and self._is_temp_view(table.name):
                batch = self.spark.table(table.name)
                source = None if batch.isStreaming else file_source(batch)
                if source is None:
                    continue  # already a streaming temp view (or not a file source: refused later)
                fmt, options, path = source
                view = self._file_stream(f"view:{table.name.lower()}:{max_files}", fmt, options, lambda b=batch: b.schema, path, max_files)
                table.replace(exp.Table(this=_q(view), alias=table.args.get("alias") or exp.TableAlias(this=_q(table.name))))
            else:
                name = table.sql(dialect="spark")
                view = f"__ks_stream_{next(_view_ids)}"
                self.spark.readStream.table(name).createOrReplaceTempView(view)
                table.replace(exp.Table(this=_q(view), alias=table.args.get("alias") or exp.TableAlias(this=_q(table.name))))

    def _file_stream(self, key: str, fmt: str, options: dict[str, str], schema: Any, path: str, max_files: Any) -> str:
        """A streaming temp view over ``path``'s files (made once per key): ``schema()`` gives
        the schema, ``max_files_per_trigger`` caps the files each micro-batch takes."""
        if key not in self.stream_views:
            reader = self.spark.readStream.format(fmt).options(**options).schema(schema())
            if max_files is not None:
                reader = reader.option("maxFilesPerTrigger", int(max_files))
            view = f"__ks_stream_{next(_view_ids)}"
            reader.load(path).createOrReplaceTempView(view)
            self.stream_views[key] = view
        return self.stream_views[key]

    def _is_temp_view(self, name: str) -> bool:
        try:
            return any(t.name.lower() == name.lower() and t.isTemporary for t in self.spark.catalog.listTables())
        except Exception:  # noqa: BLE001 - catalog listing failures just mean "not a temp view"
            return False


def file_source(df: DataFrame) -> tuple[str, dict[str, str], str] | None:
    """A batch DataFrame that is exactly one file relation (e.g. a view made by ``CREATE
    TEMPORARY VIEW v USING csv OPTIONS (path ...)`` or ``spark.read.csv(path)``): its format,
    reader options and path, so ks.start / ks.run can read the same files as a stream."""
    try:
        node = df._jdf.queryExecution().analyzed()
        while node.children().size() == 1 and node.getClass().getSimpleName() in ("SubqueryAlias", "View", "Project"):
            node = node.children().head()
        if node.getClass().getSimpleName() != "LogicalRelation":
            return None
        rel = node.relation()
        if rel.getClass().getSimpleName() != "HadoopFsRelation" or rel.location().rootPaths().size() != 1:
            return None
        fmt = rel.fileFormat().shortName()
        opts = rel.options()
        options = {k: opts.apply(k) for k in _scala_keys(opts) if k.lower() not in ("path", "paths", "inferschema")}
        root = rel.location().rootPaths().head()
        conf = df.sparkSession._jsc.hadoopConfiguration()
        if root.getFileSystem(conf).getFileStatus(root).isFile():
            # one file: Spark streams only directories, so stream its directory filtered to it
            options["pathGlobFilter"] = "".join("\\" + c if c in "[]{}*?\\" else c for c in root.getName())
            return fmt, options, root.getParent().toString()
        return fmt, options, root.toString()
    except Exception:  # noqa: BLE001 - any other plan shape (or Spark Connect): not a plain file source
        return None


def _scala_keys(scala_map: Any) -> list[str]:
    it = scala_map.keys().iterator()
    out = []
    while it.hasNext():
        out.append(str(it.next()))
    return out


def resolve_auto(streaming: bool, spec: FunctionSpec, per_batch_ok: bool = False) -> str:
    """Engine 'auto', chosen by BENCHMARKS.md: 'bulk' (many keys per Python call) for batch
    queries and for streams run by ks.start / ks.run (per micro-batch), where it measured faster
    than 'tws' at every input size tried on 100k keys of state (at 1M keys 'tws' wins for small
    increments: docs/concepts.md); 'tws' where a streaming DataFrame must be returned (ks.sql /
    ks.apply over a stream, or any stream on Spark Connect), which 'bulk' cannot do."""
    if not streaming or per_batch_ok:
        return "bulk"
    return "tws"


def _depth(node: exp.Expression) -> int:
    d = 0
    while node.parent is not None:
        node = node.parent
        d += 1
    return d


def rewrite(
    spark: SparkSession, tree: exp.Expression, functions: Any, engines: dict, default_engine: str, *, execute: bool = True, mode: str = "sql"
) -> KeyedRewrite:
    from pyspark.errors import AnalysisException, ParseException

    try:
        return _Rewriter(spark, functions, engines, default_engine, mode).run(tree, execute)
    except SchemaError as exc:
        raise KeyedQueryError(str(exc)) from None
    except (AnalysisException, ParseException) as exc:
        # the source part of the statement is Spark SQL: Spark's own complaint, as ours
        raise KeyedQueryError(f"Spark cannot run the statement's source part: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    from .errors import spark_hint

    text = str(exc).strip()
    return spark_hint(text.splitlines()[0]) if text else type(exc).__name__

"""KeyedSQL: register stateful classes on a SparkSession and run them."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .api.errors import SchemaError, UnknownFunctionError
from .runtime.base import Engine
from .runtime.bulk import BulkEngine
from .runtime.columns import parse_column_list, parse_order_list
from .runtime.connect import CONNECT_BULK_STREAMS, is_connect
from .runtime.failures import from_stream_failure, translating
from .runtime.plan import KeyedPlan
from .runtime.spec import FunctionSpec
from .runtime.tws import TransformWithStateEngine
from .runtime.udtf import make_table_function

__all__ = ["KeyedSQL", "ROCKSDB_PROVIDER", "configure_session", "use_this_python"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

ENGINES: dict[str, type[Engine]] = {"tws": TransformWithStateEngine, "bulk": BulkEngine}


def configure_session(spark: SparkSession) -> None:
    """Settings the stateful engines need: RocksDB state store, Avro state encoding."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    # Avro encoding from the first run is what later allows evolving a state schema.
    spark.conf.set("spark.sql.streaming.stateStore.encodingFormat", "avro")


def _ship_by_value(cls: type) -> None:
    """Classes from a user's own modules (a test file, a notebook, a script next to the data)
    are sent to executors by value, so executors need not be able to import those modules —
    the class's own module and those of its base classes (a user class may extend another)."""
    from pyspark import cloudpickle

    for klass in cls.__mro__:
        mod = sys.modules.get(klass.__module__)
        if mod is None or klass.__module__ in ("__main__", "builtins"):
            continue
        path = getattr(mod, "__file__", None) or ""
        if not path or "site-packages" in path or "dist-packages" in path or klass.__module__.startswith("spark_keyed_sql"):
            continue
        if path.startswith(sys.base_prefix) or path.startswith(sys.prefix):
            continue  # the standard library
        try:
            cloudpickle.register_pickle_by_value(mod)
        except (ValueError, TypeError):
            pass


_SHIPPED: set[int] = set()
_WORKER_IMPORTS = "import spark_keyed_sql, pandas, pyarrow"


def _same_python(a: str, b: str) -> bool:
    """Same interpreter *path* (not resolved: a venv's python links to the base one, which
    does not see the venv's packages)."""
    import shutil

    found = shutil.which(a) or a
    return os.path.abspath(found) == os.path.abspath(b)


def _imports_package(python: str) -> bool:
    import subprocess

    try:
        return subprocess.run([python, "-c", _WORKER_IMPORTS], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def use_this_python(spark: SparkSession) -> None:
    """Spark's Python workers must import this package (and pandas, pyarrow). PySpark fixes
    their interpreter when the SparkContext starts (``sc.pythonExec``: ``PYSPARK_PYTHON`` as it
    was then, else ``python3`` from the PATH) and gives it to each Python function as it is
    created, so a session the user started without the variable sends every keyed function to
    an interpreter that cannot import it. On a local master the workers run on this machine:
    when the interpreter was not chosen (or cannot import the package), the functions created
    from here on use this one. On a cluster the executors' interpreter is the cluster's to
    choose; the package itself is shipped (``_ship_package``)."""
    sc = spark.sparkContext
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # for SparkContexts started later
    current = getattr(sc, "pythonExec", None) or "python3"
    if not (sc.master or "").startswith("local") or _same_python(current, sys.executable):
        return
    chosen = current != "python3" or bool(sc.getConf().get("spark.pyspark.python", None))
    if chosen and _imports_package(current):
        return
    if chosen:
        import warnings

        warnings.warn(
            f"Spark's Python workers were set to use {current}, which cannot import spark_keyed_sql, pandas and "
            f"pyarrow; using {sys.executable} for them (set PYSPARK_PYTHON={sys.executable} before creating the "
            "SparkSession to silence this)",
            stacklevel=3,
        )
    sc.pythonExec = sys.executable


def _temp_dir(prefix: str) -> str:
    """A temp directory removed when the process exits (not before: Spark's file server and
    a running query may read it until then)."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _package_zip() -> str:
    import shutil

    package = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(_temp_dir("spark-keyed-sql-"), "spark_keyed_sql")
    return shutil.make_archive(base, "zip", root_dir=os.path.dirname(package), base_dir="spark_keyed_sql")


def _ship_package(spark: SparkSession) -> None:
    """On a cluster, executors may lack this package: send it as a zip, once per SparkContext
    (``addPyFile``) or Spark Connect session (``addArtifacts``). Local masters share the driver's
    interpreter and need nothing."""
    if is_connect(spark):
        if spark.conf.get("spark.master", "").startswith("local") or id(spark) in _SHIPPED:
            return
        spark.addArtifacts(_package_zip(), pyfile=True)
        _SHIPPED.add(id(spark))
        return
    sc = spark.sparkContext
    master = sc.master or ""
    if master.startswith("local") or id(sc) in _SHIPPED:
        return
    sc.addPyFile(_package_zip())
    _SHIPPED.add(id(sc))


class KeyedSQL:
    """The entry point: ``ks = KeyedSQL(spark)``; ``ks.register(...)``; ``ks.sql(...)``."""

    def __init__(self, spark: SparkSession, *, engine: str = "auto"):
        if engine != "auto" and engine not in ENGINES:
            raise SchemaError(f"unknown engine {engine!r}; choose one of {sorted(ENGINES) + ['auto']}")
        self.spark = spark
        self.default_engine = engine
        self.functions: dict[str, FunctionSpec] = {}
        configure_session(spark)
        if not is_connect(spark):
            use_this_python(spark)
        _ship_package(spark)

    # ------------------------------------------------------------------ registry
    def register(self, name: str, cls: Any, returns: str | None = None, **kwargs: Any) -> FunctionSpec:
        """Register ``cls`` as ``name``: usable in ``GROUP BY KEY ... WITH STATE name(...)``
        and as the table function ``name(TABLE(t), key => '...', order_by => '...')``.

        ``cls`` may also be a pyspark ``StatefulProcessor`` (class or instance), run unchanged;
        ``style='pandas'`` or ``'row'`` says which transformWithState API it was written for."""
        spec = FunctionSpec.build(name, cls, returns, kwargs)
        _ship_by_value(cls if inspect.isclass(cls) else type(cls))  # a StatefulProcessor may be an instance
        from pyspark.sql.functions import udtf

        self.spark.udtf.register(name, udtf(make_table_function(spec)))
        self.functions[name.lower()] = spec
        return spec

    def function(self, name: str) -> FunctionSpec:
        spec = self.functions.get(name.lower())
        if spec is None:
            known = ", ".join(sorted(self.functions)) or "none registered yet"
            raise UnknownFunctionError(f"unknown function '{name}' (registered: {known}); call ks.register first")
        return spec

    # ------------------------------------------------------------------ execution
    def apply(
        self,
        df: DataFrame,
        function: str,
        key: str | list[str] | None = None,
        order_by: str | list[str] | None = None,
        *,
        args: list[str] | None = None,
        initial_state: DataFrame | None = None,
        engine: str | None = None,
    ) -> DataFrame:
        """Run a registered function over ``df`` (batch or streaming), keyed by ``key``.

        The result has the key columns followed by the function's ``returns`` columns. The
        event dict / rows frame holds ``args`` (default: every column of ``df``)."""
        spec = self.function(function)
        keys = parse_column_list(key, "key")
        order = parse_order_list(order_by)
        columns = {c.lower(): c for c in df.columns}
        arg_cols = list(df.columns) if args is None else parse_column_list(args, "args")
        for what, cols in (("key", keys), ("order_by", [o.column for o in order]), ("argument", arg_cols)):
            missing = [c for c in cols if c.lower() not in columns]
            if missing:
                raise SchemaError(
                    f"{function}: {what} column(s) {missing} not in the source (columns: {', '.join(df.columns)})"
                )
        keys = [columns[k.lower()] for k in keys]
        arg_cols = [columns[c.lower()] for c in arg_cols]
        plan = KeyedPlan(spec, keys, arg_cols, order, initial_state)
        from .sql.rewriter import resolve_auto

        name = engine or self.default_engine
        if name == "auto":
            name = resolve_auto(df.isStreaming, spec)
        if name not in ENGINES:
            raise SchemaError(f"unknown engine {name!r}; choose one of {sorted(ENGINES) + ['auto']}")
        eng = ENGINES[name]()
        if df.isStreaming and not eng.streams_as_dataframe:
            raise SchemaError(
                f"engine {name!r} runs streams per micro-batch and has no streaming DataFrame to return; "
                "use engine='tws' with ks.apply, or a SQL statement with ks.start / ks.run"
            )
        return translating(eng.apply(df, plan))

    # ------------------------------------------------------------------ SQL
    def _rewrite(self, query: str, *, execute: bool, mode: str = "sql", checkpoint: str | None = None):
        from .sql import ExplainKeyed, mentions_keyed_syntax, parse_statement, rewrite

        if not mentions_keyed_syntax(query):
            return None, False
        tree = parse_statement(query)
        explain = isinstance(tree, ExplainKeyed)
        if explain:
            tree = tree.this
        default = self.default_engine
        if default == "auto" and checkpoint:
            default = _checkpoint_engine(self.spark, checkpoint) or default  # continue on the engine that wrote it
        return rewrite(self.spark, tree, self.function, ENGINES, default, execute=execute, mode=mode), explain

    def sql(self, query: str) -> DataFrame:
        """Run SQL with the keyed clause; statements without it go to ``spark.sql`` unchanged.

        ``EXPLAIN KEYED <query>`` returns a one-row DataFrame (column ``plan``)."""
        rw, explain = self._rewrite(query, execute=True)
        if rw is None:
            return translating(self.spark.sql(query))  # a table-function call fails with our error too
        if explain:
            from .sql.explain import format_plan

            return self.spark.createDataFrame([(format_plan(rw),)], "plan string")
        from pyspark.errors import AnalysisException, ParseException

        try:
            return translating(self.spark.sql(rw.final_sql))
        except (AnalysisException, ParseException) as exc:
            from .sql.errors import KeyedQueryError

            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise KeyedQueryError(f"Spark cannot run the statement's outer part: {first}") from None

    def explain(self, query: str) -> str:
        """The plan the rewriter makes for ``query``: source SQL, keys, function, options,
        engine and outer SQL."""
        from .sql.explain import format_plan

        rw, _ = self._rewrite(query, execute=True)
        if rw is None:
            return "== Keyed plan ==\n(no GROUP BY KEY / WITH STATE: runs as plain Spark SQL)\n" + query
        return format_plan(rw)

    def start(self, query: str, checkpoint: str | None = None, sink: str = "console", *, trigger: str | None = None):
        """Run a keyed query over a streaming source; returns the pyspark StreamingQuery."""
        rw, _ = self._rewrite(query, execute=True, mode="stream", checkpoint=checkpoint)
        _probe_output(self.spark, sink)
        lock = _lock(self.spark, checkpoint or _sql_checkpoint(rw), "ks.start")
        try:
            checkpoint = self._checkpoint(rw, checkpoint, "ks.start")
            query_, _ = self._launch(rw, query, checkpoint, sink, trigger=trigger, available_now=False, where="ks.start")
        except BaseException:
            if lock:
                lock.release()
            raise
        if lock:
            _release_when_done(query_, lock)
        return translating(query_)

    def run(self, query: str, checkpoint: str | None = None, output: str | None = None, *, progress=None) -> dict:
        """Incremental batch: process what is new in the file/table source since the last run
        (Spark's availableNow trigger), with state carried in ``checkpoint``. ``progress``, if
        given, is called with a dict per finished batch (batch_id, input_rows, output_rows,
        keys_touched, state_rows)."""
        rw, _ = self._rewrite(query, execute=True, mode="stream", checkpoint=checkpoint)
        if output:
            _probe_output(self.spark, output)
        lock = _lock(self.spark, checkpoint or _sql_checkpoint(rw), "ks.run")
        try:
            return self._run(rw, query, checkpoint, output, progress)
        finally:
            if lock:
                lock.release()

    def _run(self, rw, query: str, checkpoint: str | None, output: str | None, progress) -> dict:

        checkpoint = self._checkpoint(rw, checkpoint, "ks.run")
        if not checkpoint:
            raise SchemaError("ks.run needs checkpoint=... (or OPTIONS (checkpoint = '...'))")
        if not output:
            raise SchemaError("ks.run needs output=<parquet directory or table name>")
        before = self._committed_rows(output)
        bulk_before = _bulk_version(self.spark, checkpoint)
        q, bulk = self._launch(rw, query, checkpoint, output, trigger=None, available_now=True, where="ks.run", progress=progress)
        timers = rw is not None and any(self.function(s.function).has_timers for s in rw.steps)
        try:
            self._wait(q, bulk, timers, progress)
        except Exception as exc:  # noqa: BLE001 - Spark's StreamingQueryException, turned into ours
            raise from_stream_failure(exc, checkpoint) from None
        if q.exception() is not None:
            raise from_stream_failure(q.exception(), checkpoint)
        if bulk is not None:
            if timers:
                bulk.flush_timers()  # Spark's no-data batch: timers due by the last watermark fire
            return _bulk_summary(self.spark, checkpoint, bulk_before)
        progress = [p for p in recent_progress(q) if p.get("batchId") is not None]
        data = [p for p in progress if p["numInputRows"] > 0]
        return {
            "batches": len(data),
            "input_rows": sum(p["numInputRows"] for p in progress),
            # the file sink reports numOutputRows = -1: count what its commit log now holds
            "output_rows": self._committed_rows(output) - before,
            "keys_touched": sum(sum(op.get("numRowsUpdated", 0) for op in p.get("stateOperators", [])) for p in progress),
            # rows older than the watermark (EVENT TIME ... WATERMARK), dropped by Spark
            "late_rows": sum(sum(op.get("numRowsDroppedByWatermark", 0) for op in p.get("stateOperators", [])) for p in progress),
            "metrics": state_metrics(progress, [s.function for s in rw.steps] if rw else []),
        }

    @staticmethod
    def _wait(q, bulk, timers: bool, progress) -> None:
        """Until an availableNow query ends (or, with processing-time timers, finds no more input)."""
        import time

        seen = 0
        while q.isActive:
            q.awaitTermination(1)
            recent = recent_progress(q) if bulk is None else []
            if progress is not None and bulk is None:
                for p in recent[seen:]:
                    ops = p.get("stateOperators", [])
                    progress({"batch_id": p.get("batchId"), "input_rows": p.get("numInputRows", 0),
                              "keys_touched": sum(o.get("numRowsUpdated", 0) for o in ops),
                              "state_rows": sum(o.get("numRowsTotal", 0) for o in ops)})
                seen = len(recent)
            # with timers Spark runs in ProcessingTime mode, where availableNow never ends:
            # stop once a batch has found no new input
            if timers and bulk is None and len(recent) > 1 and recent[-1]["numInputRows"] == 0:
                q.stop()
            time.sleep(0.05)

    def _launch(
        self, rw, query: str, checkpoint: str | None, sink: str, *, trigger: str | None, available_now: bool, where: str, progress=None
    ):
        """Start the streaming query: Spark's writer over the rewritten statement, or, for an
        engine that runs per micro-batch, ``foreachBatch`` over the keyed step's source."""
        deferred = [s for s in rw.steps if s.deferred is not None] if rw else []
        in_sql = [s.options["trigger"] for s in (rw.steps if rw else []) if s.options.get("trigger")]
        if trigger and in_sql:
            raise SchemaError(f"trigger given twice: in {where}(trigger=...) and in OPTIONS; give it once")
        trigger = trigger or (str(in_sql[0]) if in_sql else None)
        bulk = None
        if deferred:
            from .runtime.bulk_stream import BulkStream
            from .sql.errors import KeyedQueryError

            if is_connect(self.spark):
                raise KeyedQueryError(f"{where}: {CONNECT_BULK_STREAMS}")
            if len(rw.steps) > 1:
                raise KeyedQueryError(
                    f"{where}: engine '{deferred[0].engine}' runs one keyed step per streaming statement; this one has "
                    f"{len(rw.steps)}. Use engine 'tws' for nested keyed selects over a stream"
                )
            step = deferred[0]
            df, plan, renamed = step.deferred
            if not checkpoint:
                checkpoint = _temp_dir("spark-keyed-sql-checkpoint-")
            final_sql = rw.final_sql

            def finish(out: DataFrame) -> DataFrame:
                out.selectExpr(*renamed).createOrReplaceTempView(step.view)
                return out.sparkSession.sql(final_sql)

            bulk = BulkStream(self.spark, plan, df.schema, checkpoint, sink, finish, step.function, on_commit=progress)
            writer = df.writeStream.foreachBatch(bulk).option("checkpointLocation", checkpoint)
        else:
            df = self.spark.sql(rw.final_sql if rw else query)
            if not df.isStreaming:
                raise SchemaError(f"{where} needs a streaming source (a readStream view, a file directory such as parquet.`/dir`, a view over files, or a catalog table); use ks.sql for batch")
            writer = df.writeStream.outputMode("append")
            if checkpoint:
                writer = writer.option("checkpointLocation", checkpoint)
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif trigger:
            writer = writer.trigger(processingTime=trigger)
        if bulk is not None:
            q = writer.start()
            if not available_now and self.function(deferred[0].function).has_timers:
                from .api.intervals import parse_interval_ms

                bulk.pump_timers(q, parse_interval_ms(trigger) / 1000 if trigger else 1.0)
            return q, bulk
        return _start_sink(writer, sink), None

    def metrics(self, query) -> list[dict]:
        """State size after each batch of a query started by ``ks.start``: per keyed function,
        the number of keys holding state and the state store's size."""
        return state_metrics(recent_progress(query), [])

    def _committed_rows(self, output: str) -> int:
        """Rows readers see in ``output`` (a file sink's reader honours its _spark_metadata log)."""
        try:
            if _is_path(output):
                if not _path_exists(self.spark, output):
                    return 0  # not created yet (reading it would log a FileNotFoundException stack)
                return self.spark.read.parquet(output).count()
            return self.spark.table(output).count()
        except Exception:  # noqa: BLE001 - output not created yet
            return 0

    def _checkpoint(self, rw, checkpoint: str | None, where: str) -> str | None:
        in_sql = [s.options.get("checkpoint") for s in (rw.steps if rw else []) if s.options.get("checkpoint")]
        if checkpoint and in_sql:
            raise SchemaError(f"checkpoint given twice: in {where}(checkpoint=...) and in OPTIONS; give it once")
        checkpoint = checkpoint or (str(in_sql[0]) if in_sql else None)
        if checkpoint and rw is not None:
            from .state.checkpoint import check_compatible, read_metadata, write_metadata

            operators = [self._operator_metadata(s) for s in rw.steps]
            check_compatible(checkpoint, operators, self.spark)
            old = read_metadata(checkpoint, self.spark)
            for new, was in zip(operators, old["operators"] if old else []):
                if was.get("partitions"):
                    new["partitions"] = was["partitions"]  # chosen by migrate_state
            _check_seed(checkpoint, operators, old["operators"] if old else [], lambda: _has_commits(self.spark, checkpoint))
            write_metadata(checkpoint, operators, self.spark)
        return checkpoint

    def _operator_metadata(self, step) -> dict:
        from .api.function import state_descriptors

        spec = self.function(step.function)
        layout = None
        if spec.kind == "function":
            from .state.attributes import AttributeLayout

            layout = AttributeLayout(spec.instantiate())
        return {
            "function": step.function,
            "class": f"{spec.cls.__module__}.{spec.cls.__qualname__}",
            "kind": spec.kind,
            "keys": step.key_names,
            "returns": spec.returns.field_ddl() if spec.returns else None,
            "attributes": [
                {"name": n, "type": layout.column_type(n).ddl(), "encoded": layout.is_encoded(n)} for n in layout.names
            ]
            if layout
            else [],
            "variables": [
                {"name": n, "kind": d.kind, "type": d.type.ddl(), "ttl_ms": d.ttl_ms}
                for n, d in state_descriptors(spec.cls).items()
            ],
            "ttl_ms": spec.ttl_ms,
            "engine": step.engine,
            "initial_state": _seed_record(step.initial_source),
        }

    # ------------------------------------------------------------------ state as tables
    def migrate_state(
        self,
        src_checkpoint: str,
        dst_checkpoint: str,
        *,
        function: str | None = None,
        to_function: str | None = None,
        transform: str | None = None,
        partitions: int | None = None,
    ) -> dict:
        """Rewrite ``src_checkpoint``'s state into ``dst_checkpoint``, which continues from the
        same input position (on the bulk engine). ``to_function`` renames the function (it must
        be registered; default: the same name), ``transform`` is a SQL query over a view named
        ``state`` (one row per key, as ``read_state`` shows it) that evolves the schema, and
        ``partitions`` sets the number of hash partitions the new checkpoint runs with."""
        from .runtime.migrate import MigrationError, migrate_state
        from .state.checkpoint import read_metadata

        if is_connect(self.spark):
            raise MigrationError(
                f"migrate_state({src_checkpoint!r} -> {dst_checkpoint!r}): not supported on Spark Connect; it writes a "
                f"bulk-engine checkpoint, and {CONNECT_BULK_STREAMS}. Migrate from a classic SparkSession"
            )
        meta = read_metadata(src_checkpoint, self.spark)
        source_fn = function or (meta["operators"][0]["function"] if meta and meta["operators"] else None)
        target = self.function(to_function or source_fn or "")
        return migrate_state(
            self.spark, src_checkpoint, dst_checkpoint, target, function=function, transform=transform, partitions=partitions
        )

    def unlock(self, checkpoint: str) -> dict | None:
        """Remove ``checkpoint``'s lock, whoever holds it: the way out when the process that ran
        a query on it is gone and its lease has not timed out yet. Returns what the lock said
        about its holder (host, pid, query, heartbeat_ms), or None when it was not locked. Make
        sure no query runs on the checkpoint: two writers would corrupt it."""
        from .state.lock import unlock

        return unlock(checkpoint, self.spark)

    def read_state(self, checkpoint: str, function: str | None = None, batch_id: int | None = None) -> DataFrame:
        """One row per key of the checkpoint's state: key columns, one column per state
        variable / attribute, and ``batch_id``. ``batch_id`` reads an older committed batch."""
        from .state.reader import read_state

        return read_state(self.spark, checkpoint, function, batch_id)

    def read_state_changes(
        self, checkpoint: str, function: str | None = None, from_batch: int | None = None, to_batch: int | None = None
    ) -> DataFrame:
        """The change feed between committed batches (Samza's changelog): key columns,
        ``variable``, ``change`` ('upsert' | 'delete'), ``new_value`` (JSON), ``batch_id``."""
        from .state.reader import read_state_changes

        return read_state_changes(self.spark, checkpoint, function, from_batch, to_batch)


def recent_progress(query) -> list[dict]:
    """``query.recentProgress`` as plain dicts: Spark Connect's progress objects keep some
    fields (numInputRows, ...) out of their dict view, so go through their JSON."""
    import json

    out = []
    for p in query.recentProgress:
        d = json.loads(p.json) if hasattr(p, "json") else dict(p)
        if "numInputRows" not in d:  # Connect's JSON leaves out the totals it derives from sources
            d["numInputRows"] = sum(int(src.get("numInputRows") or 0) for src in d.get("sources", []))
        out.append(d)
    return out


def _start_sink(writer, sink: str):
    if sink == "console":
        return writer.format("console").start()
    if sink.startswith("memory:"):
        return writer.format("memory").queryName(sink.split(":", 1)[1]).start()
    if _is_path(sink):
        return writer.format("parquet").option("path", sink).start()
    return writer.toTable(sink)


def state_metrics(progress: list[dict], functions: list[str]) -> list[dict]:
    """Per batch and stateful operator: keys with state, rows updated, bytes (from Spark's
    progress; RocksDB's SST size when present, else the store's memory use)."""
    out = []
    for p in progress:
        for i, op in enumerate(p.get("stateOperators", [])):
            if "transformWithState" not in op.get("operatorName", ""):
                continue
            custom = op.get("customMetrics", {})
            out.append(
                {
                    "batch_id": p.get("batchId"),
                    "function": functions[i] if i < len(functions) else None,
                    # one state row per key for attribute state; a KeyedProcessor's rows are
                    # per variable entry, so this is an upper bound on its keys
                    "state_rows": op.get("numRowsTotal", 0),
                    "rows_updated": op.get("numRowsUpdated", 0),
                    "state_bytes": custom.get("rocksdbSstFileSize") or op.get("memoryUsedBytes", 0),
                }
            )
    return out


def _sql_checkpoint(rw) -> str | None:
    found = [s.options.get("checkpoint") for s in (rw.steps if rw else []) if s.options.get("checkpoint")]
    return str(found[0]) if found else None


# checkpoint -> (lock, query started by ks.start) held by this process
_HELD: dict[str, tuple] = {}


def _probe_output(spark, sink: str | None) -> None:
    """A directory output Spark cannot reach fails now, naming it, before any state is written."""
    if sink and _is_path(sink) and not sink.startswith("memory:"):
        from .state.fs import CheckpointFS

        CheckpointFS(spark).probe(sink, "output")


def _lock(spark, checkpoint: str | None, where: str = ""):
    if not checkpoint:
        return None
    from .state.fs import CheckpointFS
    from .state.lock import CheckpointLock

    key = CheckpointFS(spark).qualify(checkpoint, "checkpoint")
    held = _HELD.get(key)
    if held is not None and not held[1].isActive:  # stopped, its waiter not yet run: take over
        _HELD.pop(key, None)
        held[0].release()
    return CheckpointLock(checkpoint, spark, query=where or None).acquire()


def _release_when_done(query, lock) -> None:
    import threading

    key = lock.fs.qualify(lock.checkpoint)
    _HELD[key] = (lock, query)

    def wait() -> None:
        try:
            query.awaitTermination()
        except Exception:  # noqa: BLE001 - the failure is the query's to report
            pass
        finally:
            if _HELD.get(key, (None,))[0] is lock:
                _HELD.pop(key, None)
                lock.release()

    threading.Thread(target=wait, name="spark-keyed-sql checkpoint lock", daemon=True).start()


def _checkpoint_engine(spark, checkpoint: str) -> str | None:
    from .state.checkpoint import CheckpointError, read_metadata

    try:
        meta = read_metadata(checkpoint, spark)
    except CheckpointError:
        return None
    return meta["operators"][0].get("engine", "tws") if meta and meta["operators"] else None


def _bulk_version(spark, checkpoint: str) -> int:
    from .state.snapshots import SnapshotStore

    latest = SnapshotStore(checkpoint, spark).latest()
    return -1 if latest is None else latest.version


def _bulk_summary(spark, checkpoint: str, before: int) -> dict:
    """ks.run's summary for the bulk engine, from the commit files this run wrote."""
    from .state.snapshots import SnapshotStore

    new = [c for c in SnapshotStore(checkpoint, spark).commits() if c.version > before]
    return {
        "batches": sum(1 for c in new if c.info.get("input_rows")),
        "input_rows": sum(c.info.get("input_rows", 0) for c in new),
        "output_rows": sum(c.info.get("output_rows") or 0 for c in new),
        "keys_touched": sum(c.info.get("keys_touched", 0) for c in new),
        "late_rows": sum(c.info.get("late_rows", 0) for c in new),
        "metrics": [
            {
                "batch_id": c.version,
                "function": c.info.get("function"),
                "state_rows": c.info.get("state_rows"),
                "rows_updated": c.info.get("keys_touched"),
                "state_bytes": c.info.get("state_bytes"),
            }
            for c in new
        ],
    }


def _seed_record(source: str | None) -> dict | None:
    """What seeded a checkpoint: the INITIAL STATE FROM source as written, and its digest."""
    if source is None:
        return None
    import hashlib

    return {"source": source if len(source) <= 300 else source[:297] + "...", "sha256": hashlib.sha256(source.encode()).hexdigest()}


def _check_seed(checkpoint: str, operators: list[dict], previous: list[dict], has_commits: Callable[[], bool]) -> None:
    """INITIAL STATE FROM seeds a new checkpoint once, at its first batch; the same query run
    again on the checkpoint it seeded continues (both engines apply initial state only when
    the checkpoint has no state yet). A checkpoint holding state it was not seeded with, or
    seeded from another source, is refused: the initial state would be silently ignored."""
    from .state.checkpoint import CheckpointError

    committed: bool | None = None
    for i, new in enumerate(operators):
        was = (previous[i] if i < len(previous) else None) or {}
        seeded = was.get("initial_state")
        if new["initial_state"] is None:
            new["initial_state"] = seeded  # a later run without INITIAL STATE keeps the record
            continue
        if committed is None:
            committed = has_commits()
        if not committed or (seeded is not None and seeded["sha256"] == new["initial_state"]["sha256"]):
            continue
        now = new["initial_state"]["source"]
        if seeded is None:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} already holds state of {new['function']} that INITIAL STATE FROM {now} did "
                "not seed; initial state only seeds a new checkpoint (Spark would silently ignore it). Use a new "
                "checkpoint, or drop INITIAL STATE FROM"
            )
        raise CheckpointError(
            f"checkpoint {checkpoint!r} was seeded from INITIAL STATE FROM {seeded['source']}; this query seeds "
            f"{new['function']} from {now}. Initial state applies once, to a new checkpoint: use a new checkpoint, "
            f"or run the query with the INITIAL STATE FROM it was seeded with (or without one)"
        )


def _has_commits(spark, checkpoint: str) -> bool:
    from .state.fs import CheckpointFS, join

    return any(not f.startswith(".") for f in CheckpointFS(spark).list(join(checkpoint, "commits")))


def _path_exists(spark: SparkSession, path: str) -> bool:
    """Through Spark's filesystem layer (any URI Spark accepts); True when it cannot ask."""
    if is_connect(spark):
        return True
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        p = jvm.org.apache.hadoop.fs.Path(path)
        return bool(p.getFileSystem(spark._jsc.hadoopConfiguration()).exists(p))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - let the read itself decide
        return True


def _is_path(sink: str) -> bool:
    return "/" in sink or sink.startswith(".") or "://" in sink

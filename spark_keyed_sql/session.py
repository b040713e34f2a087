"""KeyedSQL: the entry point users call. It registers classes and hands each call to the
module whose job it is: SQL planning (``sql``), engines (``engines``), streaming queries
(``streaming``), state as tables and migration."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from .api.errors import KeyedSQLError, UnknownFunctionError
from .compat.features import Feature, features
from .compat.interpreter import worker_python_set_here
from .compat.pandas_warning import preload_quietly, quietly
from .engines import AUTO, require_engine
from .engines import choose as choose_engine
from .engines.base import output_schema
from .engines.settings import ROCKSDB_PROVIDER, SESSION_SETTINGS, configure_session
from .engines.state_tables import read_broadcast, read_state, read_state_changes
from .runtime.clock import session_offset_ms
from .runtime.connect import is_connect
from .runtime.plan import dataframe_plan, plain_names
from .runtime.spec import FunctionSpec
from .shipping import ship_class, ship_package, use_this_python
from .sql.edits import StateEdit
from .sql.explain import explain_text
from .sql.query import plan_query
from .sql.sources import guide_plain_sql
from .sql.statement import RunMode, release_views
from .state_edits import edit_plan, edit_result, edit_state, state_edit_of
from .streaming import queries
from .streaming.checkpoints import engine_of
from .streaming.failures import from_spark_failure, translating

if TYPE_CHECKING:
    from sqlglot.exp import Expression

__all__ = ["KeyedSQL", "ROCKSDB_PROVIDER", "SESSION_SETTINGS", "configure_session", "use_this_python"]

log = logging.getLogger(__name__)

# with pandas 3, a session's first JVM call would warn about pandas (compat/pandas_warning.py)
preload_quietly()


class KeyedSQL:
    """The entry point: ``ks = KeyedSQL(spark)``; ``ks.register(...)``; ``ks.sql(...)``.

    What it changes in the session is listed by :meth:`side_effects`: the state store settings
    transformWithState needs, the Python interpreter of the session's later Python functions (a
    local master, when the session's cannot import this package), this package shipped to a
    cluster's executors, and two guide UDTFs (``keyed_state``, ``keyed_state_changes``) that
    point plain ``spark.sql`` at ``ks.sql``. ``configure=False`` changes none of it (engine
    ``tws`` then needs the RocksDB state store set by the session's owner)."""

    @quietly
    def __init__(self, spark: SparkSession, *, engine: str = AUTO, configure: bool = True):
        self.features = features(spark)
        engine = engine.lower() if isinstance(engine, str) else engine  # names are case-insensitive, as in SQL
        if engine != AUTO:
            require_engine(engine, self.features, f"KeyedSQL(spark, engine={engine!r})")
        self.spark = spark
        self.default_engine = engine
        self.functions: dict[str, FunctionSpec] = {}
        self._changes: list[str] = []
        set_here = worker_python_set_here()
        if set_here:
            self._changes.append(f"environment PYSPARK_PYTHON -> {set_here!r} (when spark_keyed_sql was imported)")
        if not configure:
            return
        self._changes += configure_session(spark)
        if not is_connect(spark):
            self._changes += use_this_python(spark)
        self._changes += ship_package(spark)
        self._changes += guide_plain_sql(self.spark, self.features, self.functions)
        log.debug(
            "KeyedSQL on %s, engine %s; changed: %s", self.features.describe(), engine, self._changes or "nothing"
        )

    def side_effects(self) -> list[str]:
        """What this KeyedSQL changed in the session and the process, one line each."""
        return list(self._changes)

    # ------------------------------------------------------------------ registry
    @quietly
    def register(self, name: str, cls: Any, /, returns: str | None = None, **kwargs: Any) -> FunctionSpec:
        """Register ``cls`` as ``name``: usable in ``GROUP BY KEY ... WITH STATE name(...)``
        and as the table function ``name(TABLE(t), key => '...', order_by => '...')``. Every
        keyword but ``returns`` goes to the class's ``__init__`` (``name=`` and ``cls=`` too:
        the function's name and class are given by position).

        ``cls`` may also be a pyspark ``StatefulProcessor`` (class or instance), run unchanged;
        ``style='pandas'`` or ``'row'`` says which transformWithState API it was written for.

        The table-function form in plain ``spark.sql`` needs Spark 4.0 (a Python UDTF's
        ``analyze``); through ``ks.sql`` / ``ks.run`` / ``ks.start`` it runs on every Spark."""
        from pyspark.sql.functions import udtf

        from .engines.table_function import make_table_function

        spec = FunctionSpec.build(name, cls, returns, kwargs)
        ship_class(cls if inspect.isclass(cls) else type(cls))  # a StatefulProcessor may be an instance
        if self.features.has(Feature.UDTF_ANALYZE):
            self.spark.udtf.register(name, udtf(make_table_function(spec)))
        self.functions[name.lower()] = spec
        return spec

    def function(self, name: str) -> FunctionSpec:
        spec = self.functions.get(name.lower())
        if spec is None:
            known = ", ".join(sorted(self.functions)) or "none registered yet"
            raise UnknownFunctionError(f"unknown function '{name}' (registered: {known}); call ks.register first")
        return spec

    # ------------------------------------------------------------------ DataFrame API
    @quietly
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
        plan = dataframe_plan(spec, df, key, order_by, args, initial_state, session_offset_ms(self.spark))
        eng = choose_engine(engine or self.default_engine, streaming=df.isStreaming, spec=spec, features=self.features)
        output_schema(df.schema, plan)  # a returns column named as a key is refused in the user's names
        source, plan, names = plain_names(df, plan)  # (a column named `u.id` runs under another name)
        out = translating(eng.apply(source, plan))
        if names:
            out = out.withColumnsRenamed(names)
        if df.isStreaming:
            self._started_by_you([eng])
        return out

    # ------------------------------------------------------------------ SQL
    def _plan(
        self, query: str, mode: RunMode, checkpoint: str | None = None, bind_as: RunMode | None = None
    ) -> tuple[Any, Expression | None]:
        """``sql.query.plan_query`` with this KeyedSQL's functions, engine and checkpoints."""
        return plan_query(
            self.spark,
            query,
            self.functions,
            self.function,
            self.default_engine,
            mode,
            checkpoint,
            bind_as,
            lambda path: engine_of(self.spark, path),
        )

    @quietly
    def sql(self, query: str) -> DataFrame:
        """Run SQL with the keyed clause; statements without it go to ``spark.sql`` unchanged.

        ``EXPLAIN KEYED <query>`` returns a one-row DataFrame (column ``plan``)."""
        statement, explained = self._plan(query, RunMode.SQL)
        if isinstance(statement, StateEdit):  # DELETE / UPDATE of keyed_state (or its EXPLAIN KEYED)
            return edit_result(self.spark, statement, explained is not None, self.functions.get)
        if statement is None and explained is None:
            return translating(self.spark.sql(query))  # a table-function call fails with our error too
        try:
            return self._keyed_frame(query, statement, explained)
        finally:  # (the DataFrame keeps the steps' plans: their views go)
            release_views(self.spark, statement)

    def _keyed_frame(self, query: str, statement: Any, explained: Any) -> DataFrame:
        if explained is not None:
            return self.spark.createDataFrame([(explain_text(query, statement, explained),)], "plan string")
        for step in statement.steps:
            if "checkpoint" in step.options:  # it would be ignored: the state would silently not carry over
                from .sql.errors import KeyedQueryError

                raise KeyedQueryError(
                    f"OPTIONS (checkpoint = ...) of WITH STATE {step.function}: ks.sql evaluates the query once and "
                    "keeps no checkpoint; run it with ks.run(sql, output=...) (a batch source, processed "
                    "incrementally) or ks.start(sql, sink=...) (a stream), or the CLI's run with --output"
                )
        from pyspark.errors import AnalysisException, ParseException

        try:
            df = translating(self.spark.sql(statement.final_sql))
        except (AnalysisException, ParseException) as exc:
            from .sql.errors import outer_part_error

            raise outer_part_error(exc) from None
        if df.isStreaming:
            self._started_by_you([step.engine for step in statement.steps])
        return df

    def _started_by_you(self, engines: list[Any]) -> None:
        """A streaming DataFrame goes to the user, who starts it: the session gets the settings
        its engines' streams start with (``ks.start`` / ``ks.run`` give them to their query only),
        listed by ``side_effects``."""
        for eng in engines:
            for change in configure_session(self.spark, eng.stream_settings(self.spark)):
                change += f" (a streaming DataFrame of engine '{eng.name}' returned for you to start needs it)"
                self._changes.append(change)
                log.info("%s", change)

    @quietly
    def explain(self, query: str) -> str:
        """The plan the rewriter makes for ``query``: source SQL, keys, function, options,
        engine and outer SQL."""
        # a stream's steps bound as ks.start / ks.run would run them (a plan, no result)
        statement, explained = self._plan(query, RunMode.SQL, bind_as=RunMode.STREAM)
        if isinstance(statement, StateEdit):
            return edit_plan(self.spark, statement)
        try:
            return explain_text(query, statement, explained)
        finally:
            release_views(self.spark, statement)

    def tester(self, query: str, function: str | None = None, **options: Any):
        """A KeyedTester of the registered function ``query`` calls (``function``: which, when it
        calls several), whose rows frames have the column types this query gives it: its
        ``rows`` are then what the function gets from Spark. ``options`` go to KeyedTester
        (``order_by=``, ``time_mode=``, ``initial_state=``, ...). Nothing runs on Spark."""
        from .testing import tester_for

        statement, _ = self._plan(query, RunMode.SQL, bind_as=RunMode.STREAM)  # a stream's types: no query started
        if isinstance(statement, StateEdit):
            raise KeyedSQLError(f"ks.tester: a {statement.verb} of keyed state runs no function")
        try:
            return tester_for(query, statement, function, options)
        finally:
            release_views(self.spark, statement)

    # ------------------------------------------------------------------ streaming
    @quietly
    def start(self, query: str, checkpoint: str | None = None, sink: str = "console", *, trigger: str | None = None):
        """Run a keyed query over a streaming source; returns the pyspark StreamingQuery."""
        statement, _ = self._plan(query, RunMode.STREAM, checkpoint)
        return queries.start(self.spark, statement, query, checkpoint, sink, trigger, self.function)

    @quietly
    def run(
        self,
        query: str,
        checkpoint: str | None = None,
        output: str | None = None,
        *,
        progress=None,
        sink: str | None = None,
    ) -> dict:
        """Incremental batch: process what is new in the file/table source since the last run
        (Spark's availableNow trigger), with state carried in ``checkpoint``. ``progress``, if
        given, is called with a dict per finished batch (batch_id, input_rows, output_rows,
        keys_touched, state_rows). ``sink=`` is another name for ``output=`` (ks.start's).
        The summary's ``keys_touched`` sums each batch's keys (a key in two batches counts twice);
        ``batches`` counts the batches that read input."""
        if sink is not None:
            if output is not None:
                raise KeyedSQLError(f"ks.run: give output={output!r} or sink={sink!r}, not both (one argument)")
            output = sink
        statement, _ = self._plan(query, RunMode.STREAM, checkpoint)
        return queries.run(self.spark, statement, query, checkpoint, output, self.function, progress)

    def metrics(self, query) -> list[dict]:
        """State size after each batch of a query started by ``ks.start``: per keyed function,
        the number of keys holding state and the state store's size."""
        return queries.metrics(query)

    def unlock(self, checkpoint: str) -> dict | None:
        """Remove ``checkpoint``'s lock, whoever holds it: the way out when the process that ran
        a query on it is gone and its lease has not timed out yet. Returns what the lock said
        about its holder (host, pid, query, heartbeat_ms), or None when it was not locked. Make
        sure no query runs on the checkpoint: two writers would corrupt it."""
        from .state.lock import unlock

        return unlock(checkpoint, self.spark)

    # ------------------------------------------------------------------ state as tables
    @quietly
    def read_state(
        self, checkpoint: str, function: str | None = None, batch_id: int | None = None, *, broadcast: str | None = None
    ) -> DataFrame:
        """One row per key of the checkpoint's state: key columns, one column per state
        variable / attribute, and ``batch_id``. ``batch_id`` reads an older committed batch.
        ``broadcast="rates"`` reads that broadcast input's state instead: its key column(s),
        value column(s), ``valid_from`` when versioned by event time, and ``batch_id``."""
        if broadcast is not None:
            return read_broadcast(self.spark, checkpoint, broadcast, function, batch_id)
        return read_state(self.spark, checkpoint, function, batch_id)

    @quietly
    def read_state_changes(
        self, checkpoint: str, function: str | None = None, from_batch: int | None = None, to_batch: int | None = None
    ) -> DataFrame:
        """The change feed between committed batches (Samza's changelog): key columns,
        ``variable``, ``change`` ('upsert' | 'delete'), ``new_value`` (JSON), ``batch_id``."""
        return read_state_changes(self.spark, checkpoint, function, from_batch, to_batch)

    @quietly
    def delete_state(
        self, checkpoint: str, *, where: str, function: str | None = None, timeout: float | None = None
    ) -> dict:
        """``DELETE FROM keyed_state(checkpoint[, function]) WHERE where``: the matching keys
        erased from every file of the checkpoint, by its running query at its next batch boundary
        (waiting up to ``timeout`` s) or at once when none runs; the audit (docs/erasure.md)."""
        edit = state_edit_of("delete", checkpoint, where, function)
        return edit_state(self.spark, edit, self.functions.get, timeout)

    @quietly
    def update_state(
        self,
        checkpoint: str,
        *,
        set: dict[str, Any],
        where: str,
        function: str | None = None,
        timeout: float | None = None,
    ) -> dict:
        """``UPDATE keyed_state(...) SET column = expression, ... WHERE where`` (``set``: column
        -> SQL expression text, or a Python value: None, bool, int, float, Decimal, datetime, date);
        old values gone from every file; as ``delete_state``, the audit."""
        edit = state_edit_of("update", checkpoint, where, function, set)
        return edit_state(self.spark, edit, self.functions.get, timeout)

    @quietly
    def migrate_state(
        self,
        src_checkpoint: str,
        dst_checkpoint: str,
        *,
        function: str | None = None,
        to_function: str | None = None,
        transform: str | Callable[[DataFrame], DataFrame] | None = None,
        partitions: int | None = None,
        dry_run: bool = False,
        sample: int = 20,
    ) -> dict | DataFrame:
        """Rewrite ``src_checkpoint``'s state into ``dst_checkpoint``, which continues from the
        same input position (on the bulk engine). ``to_function`` renames the function (it must
        be registered; default: the same name), ``transform`` is a SQL query that reads the state as
        ``state`` (one row per key, as ``read_state`` shows it) that evolves the schema (or a
        function that takes that state DataFrame and returns the new one), and
        ``partitions`` sets the number of hash partitions the new checkpoint runs with.
        ``dry_run=True`` checks all that and writes nothing: it returns the ``sample`` smallest
        keys with their state before and after side by side (columns: the keys, ``old``, ``new``)."""
        from .migrate import migrate_checkpoint

        try:
            out = migrate_checkpoint(
                self.spark,
                src_checkpoint,
                dst_checkpoint,
                self.function,
                function,
                to_function,
                transform,
                partitions,
                dry_run=dry_run,
                sample=sample,
            )
        except KeyedSQLError:
            raise
        except Exception as exc:  # a Spark job's failure carrying ours (a class's converter that raised)
            err = from_spark_failure(exc, src_checkpoint)
            if err is exc:
                raise
            raise err from None
        return translating(out) if isinstance(out, DataFrame) else out

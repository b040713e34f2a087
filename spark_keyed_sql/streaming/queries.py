"""The life of a streaming query started by ``ks.start`` / ``ks.run``: its checkpoint prepared
and locked, the engine's streaming run launched, waited for (ks.run), its failure raised as
this project's error, its lock released when it ends, and its progress and metrics read."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ..api.errors import SchemaError
from ..engines import ENGINES, Engine, StreamJob, StreamRun
from ..engines.background import fail_query
from ..engines.dataframe_stream import DataFrameStreamRun, recent_progress, state_metrics
from ..engines.native import NativePlan
from ..runtime.connect import is_connect
from ..runtime.spec import FunctionSpec
from ..sql.errors import KeyedQueryError, outer_part_error
from ..sql.statement import KeyedStatement, release_views
from ..state.filesystems import filesystem
from ..state.fs import is_path
from ..state.lock import CheckpointLock
from .checkpoints import checkpoint_in_sql, prepare_checkpoint
from .edit_restarts import EditRestarts, apply_queued
from .failures import from_spark_failure, from_stream_failure, translating

__all__ = ["checkpoint_lease", "start", "run", "metrics"]

log = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]

# checkpoint -> the lease of a query ks.start started, held by this process
_HELD: dict[str, _Held] = {}
_HELD_LOCK = threading.Lock()
_OUR_THREADS = "spark-keyed-sql"  # how the threads of work beside a query are named
# query id -> the run that started it (ks.metrics)
_RUNS: dict[str, StreamRun] = {}


def start(
    spark: SparkSession,
    statement: KeyedStatement | None,
    query: str,
    checkpoint: str | None,
    sink: str,
    trigger: str | None,
    function: Callable[[str], FunctionSpec],
) -> Any:
    """ks.start: the running pyspark StreamingQuery (its failures raise our errors)."""
    lock = None
    try:
        _probe_output(spark, sink)
        lock = _lock(spark, checkpoint or checkpoint_in_sql(statement), "ks.start")
        checkpoint = prepare_checkpoint(spark, statement, checkpoint, "ks.start", function)
        edits = _restarted_for_edits(statement)
        if edits is not None and checkpoint:
            apply_queued(spark, checkpoint, edits.layout, edits.name, _spec_of(function), lock)
        stream = _launch(spark, statement, query, checkpoint, sink, trigger, False, "ks.start", function, None)
        stream.query = translating(stream.query)
        _settling(stream)
        if edits is not None and checkpoint:
            EditRestarts(
                spark,
                stream,
                checkpoint,
                lock,
                edits.layout,
                edits.name,
                _spec_of(function),
                functools.partial(edits.start_stream, stream.job),  # type: ignore[attr-defined]
                refused=_not_restartable(sink),
            )
    except BaseException:
        if lock:
            lock.release()
        release_views(spark, statement, ended=True)
        raise
    for qid in [q for q, r in _RUNS.items() if not r.query.isActive]:
        del _RUNS[qid]
    _RUNS[str(stream.query.id)] = stream
    _release_when_done(spark, stream, lock, statement)
    log.info("ks.start: query %s on checkpoint %s, sink %s", stream.query.id, checkpoint, sink)
    return stream.query


def run(
    spark: SparkSession,
    statement: KeyedStatement | None,
    query: str,
    checkpoint: str | None,
    output: str | None,
    function: Callable[[str], FunctionSpec],
    progress: Progress | None = None,
) -> dict[str, Any]:
    """ks.run: process what is new since the last run (availableNow), then return the summary."""
    lock = None
    stream: StreamRun | None = None
    try:
        if not output:  # (before the checkpoint is touched: nothing recorded for a run that cannot start)
            raise SchemaError("ks.run needs output=<parquet directory or table name>")
        if not (checkpoint or checkpoint_in_sql(statement)):
            raise SchemaError("ks.run needs checkpoint=... (or OPTIONS (checkpoint = '...'))")
        _probe_output(spark, output)
        lock = _lock(spark, checkpoint or checkpoint_in_sql(statement), "ks.run")
        checkpoint = prepare_checkpoint(spark, statement, checkpoint, "ks.run", function)
        if not checkpoint:
            raise SchemaError("ks.run needs checkpoint=... (or OPTIONS (checkpoint = '...'))")
        edits = _restarted_for_edits(statement)
        if edits is not None:  # queued before: applied before the run
            apply_queued(spark, checkpoint, edits.layout, edits.name, _spec_of(function), lock)
        stream = _launch(spark, statement, query, checkpoint, output, None, True, "ks.run", function, progress)
        if lock:
            lock.on_lost = lambda err: fail_query(stream.query, err, "the checkpoint lease")
        try:
            stream.wait()
        except Exception as exc:  # noqa: BLE001 - Spark's StreamingQueryException, turned into ours
            raise from_stream_failure(exc, checkpoint) from None
        summary = stream.summary()
        if edits is not None:  # queued while it ran: applied now, at its end
            apply_queued(spark, checkpoint, edits.layout, edits.name, _spec_of(function), lock)
        log.info(
            "ks.run on checkpoint %s: %d batch(es), %d rows in, %d rows out",
            checkpoint,
            summary["batches"],
            summary["input_rows"],
            summary["output_rows"],
        )
        return summary
    finally:
        try:
            if stream is not None:
                try:
                    _stop_if_running(stream)  # (left early: an interrupt, a failing progress callback)
                finally:
                    stream.close()
        finally:  # (a second interrupt while the query stops: the lease still goes)
            try:
                if lock:
                    lock.release()
            finally:
                release_views(spark, statement, ended=True)  # (its micro-batches read them by name: now done)


def _stop_if_running(stream: StreamRun) -> None:
    """A ks.run left before its query ended (a KeyboardInterrupt in a notebook, a progress
    callback that raised) stops it before its lease goes: no batch may commit unleased."""
    try:
        if stream.query.isActive:
            log.warning("ks.run: stopping its query %s (the run was left before the query ended)", stream.query.id)
            stream.stop()
    except Exception:  # noqa: BLE001 - the run's own error (or the interrupt) is the one to raise
        log.warning("ks.run: could not stop its query", exc_info=True)


def metrics(query: Any) -> list[dict[str, Any]]:
    """State size after each batch of a query started by ks.start."""
    stream = _RUNS.get(str(query.id))
    return stream.metrics() if stream is not None else state_metrics(recent_progress(query), [])


def _launch(
    spark: SparkSession,
    statement: KeyedStatement | None,
    query: str,
    checkpoint: str | None,
    sink: str,
    trigger: str | None,
    available_now: bool,
    where: str,
    function: Callable[[str], FunctionSpec],
    progress: Progress | None,
) -> StreamRun:
    steps = statement.steps if statement else []
    in_sql = [s.options["trigger"] for s in steps if s.options.get("trigger")]
    if trigger and in_sql:
        raise SchemaError(f"trigger given twice: in {where}(trigger=...) and in OPTIONS; give it once")
    job = StreamJob(
        spark=spark,
        final_sql=statement.final_sql if statement else query,
        checkpoint=checkpoint,
        sink=sink,
        trigger=trigger or (str(in_sql[0]) if in_sql else None),
        available_now=available_now,
        where=where,
        functions=[s.function for s in steps],
        has_timers=any(function(s.function).has_timers for s in steps),
        processing_timers=any(function(s.function).has_timers and s.plan.event_time is None for s in steps),
        input_scans=max((s.plan.watermarked_inputs for s in steps), default=0) or 1,
        progress=progress,
        key_touches=[s.plan.key_touches for s in steps],
        state_partitions=max(
            (int(s.options["state_partitions"]) for s in steps if "state_partitions" in s.options), default=None
        ),
    )
    if statement is not None:
        job.outer = _outer_frame(spark, job.final_sql)
    per_batch = statement.per_batch_steps if statement else []
    if not per_batch:
        engine = steps[0].engine if steps else None
        return engine.start_stream(job) if engine is not None else DataFrameStreamRun.start(job)
    step = per_batch[0]
    engine = step.engine
    if len(steps) > 1 and not engine.capabilities.nested_streaming_steps:
        nested = " or ".join(f"'{e.name}'" for e in ENGINES.values() if e.capabilities.nested_streaming_steps)
        raise KeyedQueryError(
            f"{where}: engine '{engine.name}' runs one keyed step per streaming statement; this one has "
            f"{len(steps)}. Use engine {nested} for several keyed selects over a stream (when the SQL around them "
            "has no aggregation, deduplication or stream-stream join of its own), or run it as a batch with ks.sql"
        )
    job.source, job.plan, job.view, job.columns = step.source, step.plan, step.view, step.columns
    if isinstance(step.native, NativePlan) and step.native.stream is not None:
        job.native = step.native
    return engine.start_stream(job)


def _restarted_for_edits(statement: KeyedStatement | None) -> Engine | None:
    """The statement's engine when its running query takes queued edits by a restart."""
    steps = statement.steps if statement else []
    engine = steps[0].engine if steps else None
    return engine if engine is not None and engine.layout.edits_by_restart else None


def _not_restartable(sink: str) -> str | None:
    if sink.startswith("memory:"):
        return (
            "the query holding it writes to a memory sink, which Spark does not recover from a checkpoint, so it "
            "cannot be restarted to apply the edit: stop the query, then run the edit again"
        )
    return None


def _spec_of(function: Callable[[str], FunctionSpec]) -> Callable[[str], FunctionSpec | None]:
    def spec(name: str) -> FunctionSpec | None:
        try:
            return function(name)
        except Exception:  # noqa: BLE001 - not registered in this session: the edit goes without it
            return None

    return spec


def _probe_output(spark: SparkSession, sink: str | None) -> None:
    """A directory output Spark cannot reach fails now, naming it, before any state is written."""
    if sink and is_path(sink) and not sink.startswith("memory:"):
        filesystem(spark).probe(sink, "output")


def checkpoint_lease(spark: SparkSession, checkpoint: str, where: str) -> CheckpointLock:
    """The checkpoint's lease for work beside the queries (a migration reading it whole): a
    query of this process that has stopped gives it up first; a running one refuses it."""
    lock = _lock(spark, checkpoint, where)
    assert lock is not None
    return lock


def _lock(spark: SparkSession, checkpoint: str | None, where: str) -> CheckpointLock | None:
    if not checkpoint:
        return None
    key = filesystem(spark).qualify(checkpoint, "checkpoint")
    with _HELD_LOCK:
        held = _HELD.get(key)
    if held is not None and not held.running():
        held.end()  # stopped, its lease not given up yet (or being given up): done first
    return CheckpointLock(checkpoint, spark, query=where or None).acquire()


def _outer_frame(spark: SparkSession, final_sql: str) -> DataFrame:
    """The SQL around the statement's keyed selects, analysed before the query starts (over a
    step run per micro-batch, its empty placeholder view): what Spark refuses there is ks.sql's
    error, raised now rather than from the first batch."""
    from pyspark.errors import AnalysisException, ParseException

    try:
        df = spark.sql(final_sql)
        if is_connect(spark):
            df.schema  # noqa: B018 - (Spark Connect analyses a frame when asked)
    except (AnalysisException, ParseException) as exc:
        raise outer_part_error(exc) from None
    return df


def _settling(run: StreamRun) -> None:
    """The handle's ``processAllAvailable()`` returns with what the query owes for the data it
    has processed done (``StreamRun.settle``: on bulk, the timers its last watermark made due,
    which the timer pump would fire a moment later). A failure there fails the query, as the
    pump's would."""
    query = run.query
    process = query.processAllAvailable  # (the translating class's, or the engine's own)

    def process_all_available() -> None:
        process()
        if not query.isActive:
            return
        try:
            run.settle()
        except Exception as exc:
            fail_query(query, exc, "processAllAvailable: the steps the processed data made due")
            raise from_spark_failure(exc) from None

    query.processAllAvailable = process_all_available


class _Held:
    """The lease of a query ``ks.start`` started, held by this process until the query has
    ended. ``end()`` gives it up once — called by whoever comes first: the thread waiting for the
    query to end, the handle's ``stop()``, or a start on the same checkpoint — and a second
    caller waits until the first is done, so a restart right after ``stop()`` finds the
    checkpoint free."""

    def __init__(
        self,
        spark: SparkSession,
        key: str | None,
        lock: CheckpointLock | None,
        run: StreamRun,
        statement: KeyedStatement | None,
    ):
        self.spark, self.key, self.lock, self.run, self.statement = spark, key, lock, run, statement
        self._once = threading.Lock()
        self._ended = False

    def running(self) -> bool:
        restarts = getattr(self.run, "edit_restarts", None)
        return restarts.held() if restarts is not None else bool(self.run.query.isActive)

    def end(self) -> None:
        with self._once:
            if self._ended:
                return
            self._ended = True
            try:
                self.run.close()  # (waits for a step it runs beside the query's batches)
                if self.lock:
                    self.lock.release()
            finally:
                with _HELD_LOCK:
                    if _HELD.get(self.key) is self:  # type: ignore[arg-type]
                        del _HELD[self.key]  # type: ignore[arg-type]
                release_views(self.spark, self.statement, ended=True)


def _release_when_done(
    spark: SparkSession, run: StreamRun, lock: CheckpointLock | None, statement: KeyedStatement | None
) -> None:
    """Once ``run``'s query has ended: its checkpoint's lease (``lock``) released and the
    statement's temp views dropped (its micro-batches read them by name until then); at once
    when the user's ``stop()`` returns, with what the run did beside the batches finished."""
    query = run.query
    key = lock.fs.qualify(lock.checkpoint) if lock else None
    held = _Held(spark, key, lock, run, statement)
    if lock:
        with _HELD_LOCK:
            _HELD[key] = held  # type: ignore[index]
        lock.on_lost = lambda err: fail_query(query, err, "the checkpoint lease")
    stop = query.stop  # (the translating class's, or the edit restarts' own)

    def stopping() -> None:
        stop()
        if not threading.current_thread().name.startswith(_OUR_THREADS):
            held.end()  # (a stop by work beside the query, e.g. its lease's watchdog, leaves the end to the waiter)

    query.stop = stopping

    def wait() -> None:
        try:
            query.awaitTermination()
        except Exception:  # noqa: BLE001 - the failure is the query's to report
            pass
        finally:
            held.end()

    threading.Thread(target=wait, name="spark-keyed-sql query end", daemon=True).start()

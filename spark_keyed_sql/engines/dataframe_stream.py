"""A statement run as one streaming DataFrame (Spark's own ``writeStream``): the default
streaming run of engines whose keyed steps are streaming DataFrames (transformWithState), and
of streaming statements without a keyed step. Progress, metrics and ``ks.run``'s summary come
from Spark's query progress."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

from ..api.errors import SchemaError
from ..compat.quirks import jvm_logger_off
from ..state.checkpoint import last_committed_batch
from ..state.errors import CheckpointError
from ..state.filesystems import filesystem
from ..state.fs import FSError, is_path
from .base import StreamJob, StreamRun
from .settings import ENCODING_CONF
from .sink_log import fill_sink_log
from .streams import (
    configure_writer,
    not_a_stream,
    reattach_table,
    stop_between_batches,
    table_details,
    wait_until_done,
)

__all__ = ["DataFrameStreamRun", "process_all_available", "recent_progress", "state_metrics", "start_sink"]

log = logging.getLogger(__name__)


def recent_progress(query: Any, scans: int = 1) -> list[dict]:
    """``query.recentProgress`` as plain dicts: Spark Connect's progress objects keep some
    fields (numInputRows, ...) out of their dict view, so go through their JSON. ``scans``: how
    many times each batch read every source (``StreamJob.input_scans``); input rows counted once."""
    out = []
    for p in query.recentProgress:
        d = json.loads(p.json) if hasattr(p, "json") else dict(p)
        if "numInputRows" not in d:  # Connect's JSON leaves out the totals it derives from sources
            d["numInputRows"] = sum(int(src.get("numInputRows") or 0) for src in d.get("sources", []))
        if scans > 1:
            d["numInputRows"] = int(d["numInputRows"]) // scans
            for src in d.get("sources", []):
                src["numInputRows"] = int(src.get("numInputRows") or 0) // scans
        out.append(d)
    return out


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


def start_sink(writer: Any, sink: str) -> Any:
    """Start a DataStreamWriter on ``sink``: a table name, a directory, console or memory:<name>."""
    if sink == "console":
        return writer.format("console").start()
    if sink.startswith("memory:"):
        return writer.format("memory").queryName(sink.split(":", 1)[1]).start()
    if is_path(sink):
        return writer.format("parquet").option("path", sink).start()
    return writer.toTable(sink)


_START_CONF_LOCK = threading.Lock()  # a restart after queued edits may start beside the user's start


@contextmanager
def _start_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The session's conf with ``settings`` while a query starts: Spark copies the session's
    conf at start and keeps what a checkpoint must keep (its state partitions, its state
    encoding) in it, so the user's session is left as it was."""
    if not settings:
        yield
        return
    with _START_CONF_LOCK:
        before = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in before.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


_AVRO_REFUSED = "State store encoding format as avro is not supported for operator="
_NOT_RECOVERABLE = "does not support recovering from checkpoint location"  # Spark's memory sink, restarted


def process_all_available(query: Any, poll: float = 0.1) -> None:
    """``processAllAvailable()`` for a query whose transformWithState has processing-time
    timers. Spark's returns once a trigger finds no batch to run, and such an operator asks for
    a batch on every trigger (SPARK-50180), so it would block forever. This one returns once a
    batch that began after the call has read nothing from any source (every offset stayed)
    and committed: all data available at the call was processed and committed by then (the
    batch two after the last one completed at the call cannot have begun before it)."""
    done = [p.get("batchId") for p in recent_progress(query) if p.get("batchId") is not None]
    first = (max(done) if done else -1) + 2
    while True:
        if not query.isActive:
            exc = query.exception()
            if exc is not None:
                raise exc
            return
        for p in reversed(recent_progress(query)):
            if p.get("batchId") is None or p["batchId"] < first:
                break
            if all(s.get("startOffset") == s.get("endOffset") for s in p.get("sources", [])):
                return
        time.sleep(poll)


def committed_rows(spark: SparkSession, output: str) -> int:
    """Rows readers see in ``output`` (a file sink's reader honours its _spark_metadata log)."""
    try:
        if is_path(output):
            if not filesystem(spark).exists(output):
                return 0  # not created yet (reading it would log a FileNotFoundException stack)
            return spark.read.parquet(output).count()
        return spark.table(output).count()
    except Exception:  # noqa: BLE001 - output not created yet, or not reachable from here (Connect)
        return 0


_FILE_WRITER = "org.apache.spark.sql.execution.datasources.FileFormatWriter"  # logs the abort of a stopped batch

# the formats Spark's file sink writes (a table of another provider has no _spark_metadata log)
_FILE_FORMATS = {"parquet", "orc", "json", "csv", "text", "avro"}


def _file_output(spark: SparkSession, sink: str) -> str | None:
    """The directory a file sink writes ``sink`` to (a path, or an existing file table's location)."""
    if sink == "console" or sink.startswith("memory:"):
        return None
    if is_path(sink):
        return sink
    info = table_details(spark, sink)
    if info is None or info.get("Provider", "").lower() not in _FILE_FORMATS:
        return None
    return info.get("Location") or None


def _close_log_gap(spark: SparkSession, checkpoint: str, sink: str) -> None:
    """Batches an edit committed on the checkpoint (engines/tws/erase.py), logged in the output's
    file sink log before the query logs its next one after them (engines/sink_log.py)."""
    from ..runtime.connect import is_connect

    if is_connect(spark):  # (the edits that add batches run in classic sessions only)
        return
    output = _file_output(spark, sink)
    if output is None:
        return
    try:
        fill_sink_log(spark, filesystem(spark), last_committed_batch(checkpoint, spark), output)
    except (FSError, OSError) as exc:  # a location this driver cannot reach or read: Spark's own writer says more
        log.debug("output %s: its file sink log not checked (%s)", output, exc)
    except Exception as exc:  # noqa: BLE001 - the run goes on; its output may read short after an edit
        log.warning("output %s: its file sink log could not be brought up to the checkpoint: %s", output, exc)


def _beside_an_avro_refusal(job: StreamJob, exc: BaseException) -> SchemaError:
    """Spark refused the statement's own stateful operator (an aggregation, a deduplication, a
    stream-stream join) in the Avro state encoding its keyed step on engine tws needs."""
    named = str(exc).split(_AVRO_REFUSED, 1)[1].split()
    operator = named[0].rstrip(";,.") if named else "operator"
    return SchemaError(
        f"{job.where}: this streaming statement has a stateful {operator} of its own beside its keyed step "
        f"({', '.join(job.functions)}, engine 'tws'), and Spark runs them in one query with one state "
        "encoding: transformWithState's state is kept in Avro (what lets its state evolve), which Spark "
        f"refuses for a streaming {operator}. Start the keyed select as its own stream (ks.start into a "
        f"table or directory) and the {operator} as a stream over its output, or run the statement as a "
        "batch query with ks.sql"
    )


def _sink_rows(progress: dict) -> int | None:
    """The rows a batch wrote, as Spark's sink reports them (None when it does not: a file sink
    says -1; the run's summary counts the output's rows instead)."""
    n = (progress.get("sink") or {}).get("numOutputRows")
    return None if n is None or int(n) < 0 else int(n)


def _keys_touched(job: StreamJob) -> int | None:
    """The keys the query's keyed steps have run so far, as their engines count them (None when a
    step's are not known: engine tws through Spark Connect, where Spark reports state rows)."""
    values = [c.value for c in job.key_touches if c is not None]
    return None if any(v is None for v in values) else sum(values)


class DataFrameStreamRun(StreamRun):
    def __init__(
        self, job: StreamJob, query: Any, rows_before: int, functions: list[str], touched_before: int | None = None
    ):
        self.job, self.query, self.rows_before, self.functions = job, query, rows_before, functions
        self.touched_before = touched_before
        # every batch's progress seen so far, by batch id: Spark's recentProgress keeps the last 100
        self.batches: dict[int, dict] = {}

    def _progress(self, recent: list[dict] | None = None) -> list[dict]:
        """Every batch's progress since the run started, in batch order (kept as polled, so a run
        of more than recentProgress's 100 batches is counted whole), with ``recent`` (Spark's
        newest, read now when not given) added."""
        if recent is None:
            recent = recent_progress(self.query, self.job.input_scans)
        for p in recent:
            if p.get("batchId") is not None:
                self.batches.setdefault(int(p["batchId"]), p)
        return [self.batches[b] for b in sorted(self.batches)]

    @classmethod
    def start(cls, job: StreamJob, conf: dict[str, str] | None = None) -> DataFrameStreamRun:
        """``conf``: settings the query starts with (its engine's), besides the job's state partitions."""
        df = job.outer if job.outer is not None else job.spark.sql(job.final_sql)
        if not df.isStreaming:
            raise not_a_stream(job)
        writer = configure_writer(df.writeStream.outputMode("append"), job, job.checkpoint)
        if job.sink != "console" and not job.sink.startswith("memory:") and not is_path(job.sink):
            reattach_table(job.spark, job.sink, df.schema)  # (before its rows are counted)
        if job.checkpoint:
            _close_log_gap(job.spark, job.checkpoint, job.sink)
        before = committed_rows(job.spark, job.sink) if job.available_now else 0
        touched = _keys_touched(job)  # (before the query starts: none of its tasks counted yet)
        settings = dict(conf or {})
        if job.state_partitions is not None:
            settings["spark.sql.shuffle.partitions"] = str(job.state_partitions)
        try:
            with _start_conf(job.spark, settings):
                query = start_sink(writer, job.sink)
        except Exception as exc:
            if settings.get(ENCODING_CONF) == "avro" and _AVRO_REFUSED in str(exc):
                raise _beside_an_avro_refusal(job, exc) from None
            if job.sink.startswith("memory:") and _NOT_RECOVERABLE in str(exc):
                raise CheckpointError(
                    f"{job.where}: checkpoint {job.checkpoint!r} has run before, and a memory sink ({job.sink}) "
                    "cannot continue one (Spark keeps none of its output to recover from): start the query with a "
                    "table or directory sink to go on from the checkpoint's state, or on a new checkpoint (Spark's "
                    "own remedy, deleting its offsets, would start the state over)"
                ) from None
            raise
        if job.processing_timers and not job.available_now:
            # the user's query.processAllAvailable(): Spark's would never return (below)
            query.processAllAvailable = functools.partial(process_all_available, query)
        return cls(job, query, before, job.functions, touched)

    def wait(self) -> None:
        """Until the availableNow query ends; with timers Spark runs it in ProcessingTime mode,
        where availableNow never ends, so it is stopped once a batch has found no new input."""
        q, progress = self.query, self.job.progress
        seen = -1  # the newest batch id reported
        touched = self.touched_before

        def poll() -> None:
            nonlocal seen, touched
            recent = recent_progress(q, self.job.input_scans)
            batches = self._progress(recent)
            if progress is not None:
                new = [p for p in batches if int(p["batchId"]) > seen]
                now = _keys_touched(self.job)
                for i, p in enumerate(new):
                    ops = p.get("stateOperators", [])
                    # the keys counted since the last look, on the newest of the batches it found
                    keys = None if now is None or touched is None else (now - touched if i == len(new) - 1 else 0)
                    progress(
                        {
                            "batch_id": p.get("batchId"),
                            "input_rows": p.get("numInputRows", 0),
                            "output_rows": _sink_rows(p),
                            "keys_touched": keys,
                            "state_rows": sum(o.get("numRowsTotal", 0) for o in ops),
                        }
                    )
                if new:
                    touched = now
                    seen = int(new[-1]["batchId"])
            if self.job.has_timers and len(recent) > 1 and recent[-1]["numInputRows"] == 0:
                # in processing time Spark runs batch after batch (its timers always ask for one):
                # there is no moment between them to wait for, and Spark logs the write it interrupts
                if self.job.processing_timers:
                    with jvm_logger_off(self.job.spark, _FILE_WRITER):
                        q.stop()
                else:
                    stop_between_batches(q)

        wait_until_done(q, poll)

    def summary(self) -> dict[str, Any]:
        progress = self._progress()
        ops = [op for p in progress for op in p.get("stateOperators", [])]
        return {
            "batches": sum(1 for p in progress if p["numInputRows"] > 0),
            "input_rows": sum(p["numInputRows"] for p in progress),
            # the file sink reports numOutputRows = -1: count what its commit log now holds
            "output_rows": committed_rows(self.job.spark, self.job.sink) - self.rows_before,
            # the keys the batches ran, as the engine counts them (None: not known here)
            "keys_touched": None if self.touched_before is None else _keys_touched(self.job) - self.touched_before,
            # rows older than the watermark (EVENT TIME ... WATERMARK), dropped by Spark
            "late_rows": sum(op.get("numRowsDroppedByWatermark", 0) for op in ops),
            "metrics": state_metrics(progress, self.functions),
        }

    def metrics(self) -> list[dict[str, Any]]:
        return state_metrics(self._progress(), self.functions)

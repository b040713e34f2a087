"""The bulk engine over a streaming source: one step per micro-batch (``foreachBatch``).

Each step reads the last committed state snapshot, runs one ``mapInArrow`` pass over the
batch's rows and the snapshot's keys (every key holding state is visited, so timers fire for
keys without new input), and writes output, new state and per-task stats in one Parquet
write into a fresh attempt directory. Then the output goes to the sink (idempotently), and
last the version's commit file is created (without overwrite), naming the attempt's state as
the new snapshot. Nothing is renamed, so this holds on object stores too. A crash anywhere
before the commit file re-runs the step from the previous snapshot into a new attempt; Spark
replays the same micro-batch, so output and state are exactly once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.errors import KeyedSQLError
from ...api.intervals import parse_interval_ms
from ...runtime.faults import crash_point
from ...runtime.plan import KeyedPlan
from ...state.fs import is_path, join, temp_dir
from ...state.snapshots import SnapshotStore
from ..base import StreamJob, StreamRun, output_schema
from .layout import bulk_partitions
from .program import KEY_PREFIX, KIND, NEW_STATE, OUT, STATS, BulkProgram, combine, step_schema
from .sinks import MEMORY_SINKS, write_batch
from .state_row import StateRowCodec

__all__ = ["BulkStream", "BulkStreamRun"]


class BulkStream:
    """Runs ``plan`` per micro-batch with state in ``checkpoint``/bulk; ``finish`` turns the
    keyed output of a batch into what the sink receives (the statement's outer SQL)."""

    def __init__(
        self,
        driver: SparkSession,
        plan: KeyedPlan,
        source_schema: T.StructType,
        checkpoint: str,
        sink: str,
        finish: Callable[[DataFrame], DataFrame],
        function: str,
        on_commit: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.driver = driver
        plan = dataclasses.replace(plan, partitions=plan.partitions or bulk_partitions(checkpoint, driver))
        self.plan = plan
        self.shipped = dataclasses.replace(plan, initial_state=None)
        self.source_schema = source_schema
        self.checkpoint = checkpoint
        self.sink = sink
        self.finish = finish
        self.function = function
        self.on_commit = on_commit
        self.lock = threading.Lock()  # foreachBatch and the timer pump never step at once
        self.store = SnapshotStore(checkpoint, driver)
        self.fs = self.store.fs
        self.codec = StateRowCodec(plan.spec)
        self.out_schema = output_schema(source_schema, plan)
        n = len(plan.key_columns)
        self.step_schema = step_schema(self.out_schema, self.codec, n)
        self.snapshot_schema = T.StructType(self.step_schema.fields[1 : 1 + n] + self.codec.fields)
        if is_path(sink) and self.fs.is_dir(join(sink, "_spark_metadata")):
            raise KeyedSQLError(
                f"output {sink!r} was written by Spark's file sink (it has _spark_metadata), whose readers would hide "
                "the files engine 'bulk' writes; give this query a new output directory"
            )
        latest = self.store.latest()
        if latest is not None:
            self.store.verify(latest.version)  # refuse a damaged checkpoint before Spark starts
        self._stage_initial_state()
        if sink.startswith("memory:"):  # queryable from the start, as Spark's memory sink is
            MEMORY_SINKS.pop(sink.split(":", 1)[1], None)
            driver.createDataFrame([], self.finish(self._empty_output()).schema).createOrReplaceTempView(
                sink.split(":", 1)[1]
            )

    # ------------------------------------------------------------------ setup
    def _empty_output(self) -> DataFrame:
        return self.driver.createDataFrame([], self.out_schema)

    def _stage_initial_state(self) -> None:
        """INITIAL STATE is read once, into the checkpoint, before the first batch (the batch
        runs in Spark's streaming session, not the one the table was read in)."""
        if self.plan.initial_state is None or self.store.latest() is not None:
            return
        initial = self.plan.initial_state
        self.store.stage_initial(lambda d: initial.write.parquet(d))

    # ------------------------------------------------------------------ foreachBatch
    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        with self.lock:
            if self.store.committed_spark_batch(batch_id):
                return  # done before a restart; Spark had not recorded it yet
            self.step(batch_df, batch_id)

    def flush_timers(self) -> dict[str, Any] | None:
        """A step without input: fires timers due by the last watermark / now (what Spark's
        no-data batch does). Commits only if a timer fired."""
        with self.lock:
            empty = self.driver.createDataFrame([], self.source_schema)
            return self.step(empty, None, only_if_timers=True)

    def pump_timers(self, query: Any, interval_s: float) -> threading.Thread:
        """While ``query`` runs, fire due timers every ``interval_s`` even when no input
        arrives (Spark schedules no batch for a foreachBatch query without new data)."""

        def loop() -> None:
            while query.isActive:
                time.sleep(interval_s)
                if not query.isActive:
                    break
                try:
                    self.flush_timers()
                except Exception:  # noqa: BLE001 - the query itself reports real failures
                    if query.isActive:
                        time.sleep(interval_s)

        t = threading.Thread(target=loop, name=f"spark-keyed-sql timers {self.function}", daemon=True)
        t.start()
        return t

    def step(self, batch_df: DataFrame, spark_batch: int | None, only_if_timers: bool = False) -> dict[str, Any] | None:
        spark = batch_df.sparkSession
        store, plan = self.store, self.plan
        prev = store.latest()
        version = 0 if prev is None else prev.version + 1
        state_df = spark.read.schema(self.snapshot_schema).parquet(store.state_dir(prev.version)) if prev else None
        initial = None
        initial_dir = store.initial_dir() if prev is None else None
        if initial_dir is not None:
            initial = spark.read.parquet(initial_dir)
        wm = prev.watermark_ms if prev is not None else None
        if wm is None and plan.event_time is not None:
            wm = 0  # Spark's event-time watermark starts at 0 (a timer at 0 fires in batch 0)
        started = time.time()
        now = int(started * 1000)
        program = BulkProgram(self.shipped, self.out_schema, step=True, now_ms=now, watermark_ms=wm, has_initial=initial is not None)
        result = combine(batch_df, plan, state_df, initial).mapInArrow(program, self.step_schema)
        staging = store.attempt_dir(version)  # written once, never renamed; the commit names it
        result.write.partitionBy(KIND).parquet(staging)
        fs = self.fs
        parts = set(fs.list(staging))

        def part(kind: int) -> str:
            return join(staging, f"{KIND}={kind}")

        def has(kind: int) -> bool:
            return f"{KIND}={kind}" in parts

        stats = spark.read.parquet(part(STATS)).agg(
            F.sum("__ks_late"), F.max("__ks_max_et"), F.sum("__ks_events"), F.sum("__ks_keys"), F.sum("__ks_timers_fired")
        ).collect()[0] if has(STATS) else (0, None, 0, 0, 0)
        late, max_et, events, keys, fired = (stats[0] or 0, stats[1], stats[2] or 0, stats[3] or 0, stats[4] or 0)
        if only_if_timers and not fired:
            fs.delete(staging)
            return None
        new_wm = wm
        if plan.event_time is not None and max_et is not None:
            cand = max_et - (plan.watermark_ms or 0)
            new_wm = cand if wm is None else max(wm, cand)

        # 1. state: the staged new-state rows are the snapshot
        state_dir = part(NEW_STATE)
        if not has(NEW_STATE):
            spark.createDataFrame([], self.snapshot_schema).write.parquet(state_dir)
        crash_point("state_written")
        # 2. output, through the statement's outer SQL, to the sink
        n = len(plan.key_columns)
        if has(OUT):
            staged = spark.read.schema(T.StructType(self.step_schema.fields[1:])).parquet(part(OUT))
        else:
            staged = spark.createDataFrame([], T.StructType(self.step_schema.fields[1:]))
        out = staged.select(
            *[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(plan.key_columns)],
            *[F.col(f.name) for f in self.out_schema.fields[n:]],
        )
        final = self.finish(out)
        output_rows = final.count() if self.sink != "console" else None
        write_batch(self.driver, final, self.sink, self.checkpoint, version)
        crash_point("after_sink")
        # 3. commit
        info = {
            "spark_batch": spark_batch,
            "watermark_ms": new_wm,
            "processing_ms": now,
            "input_rows": int(events + late),
            "events": int(events),
            "late_rows": int(late),
            "keys_touched": int(keys),
            "timers_fired": int(fired),
            "output_rows": output_rows,
            "state_rows": spark.read.schema(self.snapshot_schema).parquet(state_dir).count(),
            "state_bytes": fs.size(state_dir),
            "function": self.function,
            "seconds": round(time.time() - started, 3),
        }
        store.commit(version, info, state_dir)
        store.cleanup()
        if self.on_commit is not None:
            self.on_commit(info | {"batch_id": version})
        return info


class BulkStreamRun(StreamRun):
    """A bulk stream: Spark's ``foreachBatch`` over the keyed step's source, each micro-batch a
    :class:`BulkStream` step; ks.run's summary and the metrics come from the commit files."""

    def __init__(self, job: StreamJob, query: Any, stream: BulkStream, version_before: int):
        self.job, self.query, self.stream, self.version_before = job, query, stream, version_before

    @classmethod
    def start(cls, job: StreamJob) -> BulkStreamRun:
        assert job.source is not None and job.plan is not None and job.view is not None
        checkpoint = job.checkpoint or temp_dir("spark-keyed-sql-checkpoint-")
        view, columns, final_sql = job.view, list(job.columns), job.final_sql

        def finish(out: DataFrame) -> DataFrame:
            out.selectExpr(*columns).createOrReplaceTempView(view)
            return out.sparkSession.sql(final_sql)

        stream = BulkStream(
            job.spark, job.plan, job.source.schema, checkpoint, job.sink, finish, job.plan.spec.name, on_commit=job.progress
        )
        latest = stream.store.latest()
        writer = job.source.writeStream.foreachBatch(stream).option("checkpointLocation", checkpoint)
        if job.available_now:
            writer = writer.trigger(availableNow=True)
        elif job.trigger:
            writer = writer.trigger(processingTime=job.trigger)
        query = writer.start()
        if not job.available_now and job.has_timers:
            stream.pump_timers(query, parse_interval_ms(job.trigger) / 1000 if job.trigger else 1.0)
        return cls(job, query, stream, -1 if latest is None else latest.version)

    def wait(self) -> None:
        q = self.query
        while q.isActive:
            q.awaitTermination(1)
        if q.exception() is not None:
            raise q.exception()
        if self.job.has_timers:
            self.stream.flush_timers()  # Spark's no-data batch: timers due by the last watermark fire

    def _new_commits(self) -> list:
        return [c for c in self.stream.store.commits() if c.version > self.version_before]

    def summary(self) -> dict[str, Any]:
        new = self._new_commits()
        return {
            "batches": sum(1 for c in new if c.info.get("input_rows")),
            "input_rows": sum(c.info.get("input_rows", 0) for c in new),
            "output_rows": sum(c.info.get("output_rows") or 0 for c in new),
            "keys_touched": sum(c.info.get("keys_touched", 0) for c in new),
            "late_rows": sum(c.info.get("late_rows", 0) for c in new),
            "metrics": self.metrics(),
        }

    def metrics(self) -> list[dict[str, Any]]:
        return [
            {
                "batch_id": c.version,
                "function": c.info.get("function"),
                "state_rows": c.info.get("state_rows"),
                "rows_updated": c.info.get("keys_touched"),
                "state_bytes": c.info.get("state_bytes"),
            }
            for c in self._new_commits()
        ]

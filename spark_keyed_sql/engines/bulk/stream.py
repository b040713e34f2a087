"""The bulk engine over a streaming source: one step per micro-batch (``foreachBatch``).

Each step runs one ``mapInArrow`` job over the batch's rows, spread by state partition: a task
takes each state partition's state from the partition's local store on its host
(``local_store.py``) and runs only the keys the batch touches, plus those with a timer due or
state expiring (``incremental.py``). It writes the output, the state rows it changed (the
batch's delta) and per-partition stats into a fresh attempt directory. State partitions whose
local store was missing or stale are run again in a second job, their state fed from the
checkpoint (base snapshot and deltas). Then the output goes to the sink (idempotently), and
last the version's commit file is created (without overwrite), naming the base and the deltas
that make up its state and which task's store holds each partition. Nothing is renamed, so
this holds on object stores too. A crash anywhere before the commit file re-runs the step into
a new attempt; Spark replays the same micro-batch, so output and state are exactly once.

A compaction (in the background) folds the deltas into a new base snapshot once they add up,
so reading a version's state (read_state, a rebuild, a migration) never slows with the number
of batches; a batch itself never reads the checkpoint's state unless a partition is rebuilt.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
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
from ...state.snapshots import KEY_PREFIX, Commit, SnapshotStore
from ..base import StreamJob, StreamRun, output_schema
from .incremental import CATCH_UP, DELTA, FULL, OUT, STATS, IncrementalProgram, incremental_input, step_schema
from .layout import bulk_partitions, state_frame
from .local_store import token_version
from .partitioning import PART
from .program import KIND
from .sinks import MEMORY_SINKS, write_batch
from .state_row import StateRowCodec

__all__ = ["BulkStream", "BulkStreamRun", "COMPACT_DELTAS", "COMPACT_DELTAS_CONF", "COMPACT_MIN_ROWS", "LOCAL_STATE_DIR_CONF"]

COMPACT_DELTAS = 100  # deltas since the base that make a compaction due ...
COMPACT_MIN_ROWS = 100_000  # ... or delta rows adding up to this many (and half the base's rows)
LOCAL_STATE_DIR_CONF = "spark.keyedsql.localStateDir"  # where hosts keep local state (default: the temp dir)
COMPACT_DELTAS_CONF = "spark.keyedsql.compactDeltas"  # the deltas that make a compaction due


def _stats(spark: SparkSession, directory: str, fs: Any) -> dict[int, Any]:
    """Per state partition: the stats row a job wrote."""
    path = join(directory, f"{KIND}={STATS}")
    if not fs.is_dir(path):
        return {}
    cols = ["__ks_hit", "__ks_token", "__ks_late", "__ks_max_et", "__ks_events", "__ks_keys", "__ks_timers_fired",
            "__ks_inserted", "__ks_deleted", "__ks_changed", "__ks_next_timer", "__ks_next_expiry"]
    return {r[PART]: r for r in spark.read.parquet(path).select(PART, *cols).collect()}


def _min(values: list) -> Any:
    known = [v for v in values if v is not None]
    return min(known) if known else None


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
        self.store = SnapshotStore(checkpoint, driver)
        self.fs = self.store.fs
        latest = self.store.latest()
        # state partitions are fixed for a checkpoint: its commits say how many; a new one takes
        # a migration's choice, OPTIONS (state_partitions = n) or the session's shuffle
        # partitions (as Spark's state store does)
        self.partitions = int(
            (latest.partitions if latest is not None else None)
            or bulk_partitions(checkpoint, driver)
            or plan.partitions
            or (1 if not plan.keyed else driver.conf.get("spark.sql.shuffle.partitions") or 200)
        )
        if not plan.keyed:
            self.partitions = 1
        self.tasks = max(1, min(self.partitions, driver.sparkContext.defaultParallelism))
        self.plan = plan
        self.shipped = dataclasses.replace(plan, initial_state=None)
        self.source_schema = source_schema
        self.checkpoint = checkpoint
        self.qualified = self.fs.qualify(checkpoint, "checkpoint")
        self.cache_dir = driver.conf.get(LOCAL_STATE_DIR_CONF, None) or None
        self.sink = sink
        self.finish = finish
        self.function = function
        self.on_commit = on_commit
        self.lock = threading.Lock()  # foreachBatch and the timer pump never step at once
        self.codec = StateRowCodec(plan.spec)
        self.out_schema = output_schema(source_schema, plan)
        n = len(plan.key_columns)
        self.step_schema = step_schema(self.out_schema, self.codec, n)
        self.snapshot_schema = T.StructType(self.step_schema.fields[1 : 1 + n] + self.codec.fields)
        self.compactor = Compactor(self)
        if is_path(sink) and self.fs.is_dir(join(sink, "_spark_metadata")):
            raise KeyedSQLError(
                f"output {sink!r} was written by Spark's file sink (it has _spark_metadata), whose readers would hide "
                "the files engine 'bulk' writes; give this query a new output directory"
            )
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
            if not self._may_be_due(self.store.latest(), int(time.time() * 1000)):
                return None
            empty = self.driver.createDataFrame([], self.source_schema)
            return self.step(empty, None, only_if_timers=True)

    def _may_be_due(self, prev: Commit | None, now: int) -> bool:
        """Would a step without input do anything now: fire a timer, expire state, or move the
        watermark it evicts by (Spark's no-data batch)? From the last commit's record of the
        earliest timer and expiry; a checkpoint without that record: maybe."""
        if prev is None:
            return False
        if "next_timer_ms" not in prev.info:
            return True
        if self._watermark_moved(prev):
            return True
        timer, expiry = prev.info.get("next_timer_ms"), prev.info.get("next_expiry_ms")
        until = prev.watermark_ms if self.plan.event_time is not None else now
        return (timer is not None and until is not None and timer <= until) or (expiry is not None and expiry <= now)

    def _watermark_moved(self, prev: Commit | None) -> bool:
        """Has the watermark advanced past the one the last step evicted by?"""
        return (self.plan.event_time is not None and prev is not None
                and (prev.watermark_ms or 0) > (prev.info.get("evict_watermark_ms") or 0))

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

    # ------------------------------------------------------------------ one micro-batch
    def step(self, batch_df: DataFrame, spark_batch: int | None, only_if_timers: bool = False) -> dict[str, Any] | None:
        spark = batch_df.sparkSession
        store, plan, fs = self.store, self.plan, self.fs
        prev = store.latest()
        version = 0 if prev is None else prev.version + 1
        started = time.time()
        now = int(started * 1000)
        wm = prev.watermark_ms if prev is not None else None
        if wm is None and plan.event_time is not None:
            wm = 0  # Spark's event-time watermark starts at 0 (a timer at 0 fires in batch 0)
        # Spark drops input older than the watermark the previous batch evicted by (SPARK-40925)
        late_wm = (prev.info.get("evict_watermark_ms", prev.watermark_ms) if prev is not None else None) if plan.event_time else None
        initial_dir = store.initial_dir() if prev is None else None
        initial = spark.read.parquet(initial_dir) if initial_dir is not None else None
        attempt = uuid.uuid4().hex[:12]
        rel = f"steps/{version}-{attempt}"
        program = IncrementalProgram(
            self.shipped, self.out_schema, self.qualified, version, attempt,
            {p: (prev.token(p) if prev is not None else "") for p in range(self.partitions)},
            now, wm, late_wm, has_initial=initial is not None, cache_dir=self.cache_dir,
        )
        jobs = [f"{rel}/main"]
        incremental_input(batch_df, plan, self.partitions, self.tasks, initial=initial).mapInArrow(
            program, self.step_schema).write.partitionBy(KIND).parquet(store.path(jobs[0]))
        stats = _stats(spark, store.path(jobs[0]), fs)
        missed = {p: r["__ks_token"] for p, r in stats.items() if not r["__ks_hit"]}
        fed: dict[str, list[int]] = {}
        while missed:
            # state partitions whose local store does not hold the last committed state: again,
            # fed from the checkpoint (the deltas since the state the store holds, else all of it)
            crash_point("before_rebuild")
            feeds, catch_up = self._feeds(prev, missed, final=len(jobs) > 1)
            for p, feed in feeds.items():
                fed.setdefault(feed, []).append(p)
            jobs.append(f"{rel}/fed{len(jobs)}")
            tasks = max(1, min(len(missed), self.tasks))
            state = self._feed_rows(spark, prev, feeds)
            incremental_input(batch_df, plan, self.partitions, tasks, only=sorted(missed), state=state, initial=initial).mapInArrow(
                dataclasses.replace(program, feeds=feeds, catch_up=catch_up), self.step_schema
            ).write.partitionBy(KIND).parquet(store.path(jobs[-1]))
            again = _stats(spark, store.path(jobs[-1]), fs)
            stats.update(again)
            missed = {p: r["__ks_token"] for p, r in again.items() if not r["__ks_hit"]}
        rows = list(stats.values())
        missing = [p for p in range(self.partitions) if p not in stats or not stats[p]["__ks_hit"]]
        if missing:
            raise KeyedSQLError(f"internal: state partitions {missing[:10]} of {self.checkpoint!r} were not run in batch {version}")

        def total(col: str) -> int:
            return int(sum(r[col] or 0 for r in rows))

        late, events, fired = total("__ks_late"), total("__ks_events"), total("__ks_timers_fired")
        if only_if_timers and not fired and total("__ks_changed") == 0 and not self._watermark_moved(prev):
            fs.delete(store.path(rel))
            return None
        max_et = _min([-(r["__ks_max_et"]) for r in rows if r["__ks_max_et"] is not None])
        new_wm = wm
        if plan.event_time is not None and max_et is not None:
            cand = -max_et - (plan.watermark_ms or 0)
            new_wm = cand if wm is None else max(wm, cand)
        crash_point("state_written")

        # output, through the statement's outer SQL, to the sink
        n = len(plan.key_columns)
        staged_schema = T.StructType(self.step_schema.fields[1:])
        outputs = [join(store.path(j), f"{KIND}={OUT}") for j in jobs]
        present = [o for o in outputs if fs.is_dir(o)]
        staged = spark.read.schema(staged_schema).parquet(*present) if present else spark.createDataFrame([], staged_schema)
        out = staged.select(
            *[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(plan.key_columns)],
            *[F.col(f.name) for f in self.out_schema.fields[n:]],
        )
        final = self.finish(out)
        output_rows = final.count() if self.sink != "console" else None
        write_batch(self.driver, final, self.sink, self.checkpoint, version)
        crash_point("after_sink")

        # commit: the state is the base plus the deltas since (this batch's among them)
        deltas_now = [f"{j}/{KIND}={DELTA}" for j in jobs if fs.is_dir(join(store.path(j), f"{KIND}={DELTA}"))]
        info = self._layout_info(prev, version, deltas_now, rows)
        inserted, deleted = total("__ks_inserted"), total("__ks_deleted")
        info |= {
            "attempt": attempt,
            "partitions": self.partitions,
            "stores": self._stores(rows),
            "schema": self.snapshot_schema.jsonValue(),
            "spark_batch": spark_batch,
            "watermark_ms": new_wm,
            "evict_watermark_ms": wm,
            "processing_ms": now,
            "input_rows": events + late,
            "events": events,
            "late_rows": late,
            "keys_touched": total("__ks_keys"),
            "timers_fired": fired,
            "output_rows": output_rows,
            "state_rows": (prev.info.get("state_rows") or 0 if prev is not None else 0) + inserted - deleted,
            "fed_partitions": fed,
            "next_timer_ms": _min([r["__ks_next_timer"] for r in rows]),
            "next_expiry_ms": _min([r["__ks_next_expiry"] for r in rows]),
            "function": self.function,
            "seconds": round(time.time() - started, 3),
        }
        commit = store.commit(version, info)
        store.cleanup(keep_bases=self.compactor.running)
        self.compactor.maybe_start(commit)
        if self.on_commit is not None:
            self.on_commit(info | {"batch_id": version})
        return info

    def _feeds(self, prev: Commit | None, missed: dict[int, str], final: bool) -> tuple[dict[int, str], dict[int, dict[int, str]]]:
        """How to feed each missed partition: CATCH_UP when the store holds a committed state the
        retained deltas lead on from (any of them: the job may run on another host), else FULL
        (always, in a later job: it cannot miss)."""
        if prev is None:
            return {p: FULL for p in missed}, {}
        usable = {c.version: c for c in self.store.commits() if c.version >= prev.base_version}
        feeds: dict[int, str] = {}
        catch_up: dict[int, dict[int, str]] = {}
        for p, held in missed.items():
            tokens = {v: c.token(p) for v, c in usable.items()}
            if prev.base is None:
                tokens[-1] = ""  # every change since the first batch is a retained delta
            if not final and tokens.get(token_version(held)) == held:
                feeds[p], catch_up[p] = CATCH_UP, tokens
            else:
                feeds[p] = FULL
        return feeds, catch_up

    def _feed_rows(self, spark: SparkSession, prev: Commit | None, feeds: dict[int, str]) -> DataFrame | None:
        """The checkpoint's rows for the fed partitions: all their state for FULL, the deltas
        since the base for CATCH_UP (each with its version: the newest row of a key wins)."""
        if prev is None:
            return None
        frames = []
        full = sorted(p for p, f in feeds.items() if f == FULL)
        catch = sorted(p for p, f in feeds.items() if f == CATCH_UP)
        if full:
            frames.append(state_frame(spark, self.store, prev, parts=full, versions=True))
        if catch:
            frames.append(state_frame(spark, self.store, prev, parts=catch, versions=True, deltas_only=True))
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out

    def _layout_info(self, prev: Commit | None, version: int, deltas_now: list[str], rows: list) -> dict[str, Any]:
        """Base and deltas of the new version: the previous version's, or the newest compacted
        base if one was made since, plus this batch's deltas."""
        store = self.store
        base, base_version = (prev.base, prev.base_version) if prev is not None else (None, -1)
        base_rows = (prev.info.get("base_rows", prev.info.get("state_rows")) if prev is not None else 0) or 0
        base_bytes = (prev.info.get("base_bytes", prev.info.get("state_bytes")) if prev is not None else 0) or 0
        entries = list(prev.info.get("deltas", [])) if prev is not None else []
        compacted = store.bases()
        if compacted and compacted[-1]["version"] > base_version and prev is not None and compacted[-1]["version"] <= prev.version:
            newest = compacted[-1]
            base, base_version = newest["dir"], newest["version"]
            base_rows, base_bytes = newest.get("rows", 0), newest.get("bytes", 0)
            entries = [e for e in entries if int(e[0]) > base_version]
        if deltas_now:
            changed = sum(int(r["__ks_changed"] or 0) for r in rows)
            entries.append([version, deltas_now, changed, sum(self.fs.size(store.path(d)) for d in deltas_now)])
        delta_bytes = sum(int(e[3]) if len(e) > 3 else 0 for e in entries)
        return {
            "base": base,
            "base_version": base_version,
            "base_rows": base_rows,
            "base_bytes": base_bytes,
            "deltas": entries,
            "delta_rows": sum(int(e[2]) if len(e) > 2 else 0 for e in entries),
            "state_bytes": base_bytes + delta_bytes,
        }

    @staticmethod
    def _stores(rows: list) -> dict[str, list[int]]:
        """Which task's local store holds each state partition now (by the task's token)."""
        out: dict[str, list[int]] = {}
        for r in rows:
            out.setdefault(r["__ks_token"].rsplit("-", 1)[1], []).append(r[PART])
        return {t: sorted(ps) for t, ps in out.items()}


class Compactor:
    """Folds a version's deltas into a new base snapshot, in the background, one at a time."""

    def __init__(self, stream: BulkStream):
        self.stream = stream
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.every = int(stream.driver.conf.get(COMPACT_DELTAS_CONF, None) or COMPACT_DELTAS)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def due(self, commit: Commit) -> bool:
        entries = commit.info.get("deltas", [])
        rows = commit.info.get("delta_rows", 0)
        base_rows = commit.info.get("base_rows", 0) or 0
        return len(entries) >= self.every or (rows >= COMPACT_MIN_ROWS and rows >= base_rows // 2)

    def maybe_start(self, commit: Commit) -> None:
        if self.running or not self.due(commit):
            return
        self.thread = threading.Thread(target=self._run, args=(commit,), name="spark-keyed-sql compaction", daemon=True)
        self.thread.start()

    def _run(self, commit: Commit) -> None:
        try:
            self.compact(commit)
        except BaseException as exc:  # noqa: BLE001 - a failed compaction leaves the deltas as they are
            self.error = exc

    def compact(self, commit: Commit) -> None:
        stream = self.stream
        store, spark = stream.store, stream.driver
        rel = store.new_base(commit.version)
        frame = state_frame(spark, store, commit)
        frame.repartition(PART).write.partitionBy(PART).parquet(store.path(rel))
        crash_point("compaction_written")
        rows = spark.read.parquet(store.path(rel)).count()
        store.mark_base(commit.version, rel, {"rows": rows, "bytes": store.fs.size(store.path(rel)),
                                              "partitions": stream.partitions})
        crash_point("after_compaction")

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


def _idle_steps(plan: KeyedPlan) -> bool:
    """Does a stream of ``plan`` need steps without input (Spark's no-data batches): timers to
    fire, state to expire, a watermark to advance?"""
    return plan.spec.has_timers or plan.spec.has_ttl or plan.event_time is not None


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
        if not job.available_now and _idle_steps(job.plan):
            stream.pump_timers(query, parse_interval_ms(job.trigger) / 1000 if job.trigger else 1.0)
        return cls(job, query, stream, -1 if latest is None else latest.version)

    def wait(self) -> None:
        q = self.query
        while q.isActive:
            q.awaitTermination(1)
        if q.exception() is not None:
            raise q.exception()
        if self.job.plan is not None and _idle_steps(self.job.plan):
            self.stream.flush_timers()  # Spark's no-data batch: timers due by the last watermark fire
        self.stream.compactor.join()  # a compaction the run started finishes before it returns
        if self.stream.compactor.error is not None:
            raise self.stream.compactor.error

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

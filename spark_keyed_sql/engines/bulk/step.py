"""The bulk engine's step: what it does with one micro-batch (``foreachBatch``).

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

import collections
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.errors import KeyedSQLError
from ...api.intervals import parse_interval_ms
from ...compat.names import named
from ...compat.pandas_warning import quietly
from ...runtime.broadcast import BroadcastState
from ...runtime.clock import now_ms
from ...runtime.connect import default_parallelism, is_connect
from ...runtime.faults import crash_point
from ...runtime.plan import KeyedPlan
from ...state.commit_record import BatchMetrics, CommitRecord, DeltaEntry
from ...state.fs import is_path, join
from ...state.lock import check_lease
from ...state.snapshots import KEY_PREFIX, SnapshotStore
from ..background import Retrying
from ..base import output_schema
from ..broadcast_rows import BROADCAST_FILE, take_broadcasts
from ..edit_pickup import apply_pending
from ..native.stored import UNREADABLE
from .compaction import Compactor
from .feeding import plan_feeds
from .incremental import IncrementalProgram, incremental_input, step_schema
from .layout import BulkLayout, bulk_partitions, evolved_commit, state_frame
from .native_choice import Choice, choose, input_bytes, python_after_refusal
from .native_step import native_job
from .partitioning import PART
from .records import KIND, OutputKind, TaskStats
from .sinks import reset_memory_sink, write_batch
from .state_row import StateRowCodec
from .watermarks import ONE_INPUT, next_watermarks, watermark_policy

__all__ = ["EDIT_POLL_CONF", "LOCAL_STATE_DIR_CONF", "BulkStream", "StepJobs", "StepPlan"]

log = logging.getLogger(__name__)

LOCAL_STATE_DIR_CONF = "spark.keyedsql.localStateDir"  # where hosts keep local state (default: the temp dir)
# how often a running query looks for queued DELETE / UPDATE requests between batches (one
# listing of <checkpoint>/edits each time); every batch also looks before it starts
EDIT_POLL_CONF = "spark.keyedsql.editPollInterval"
EDIT_POLL_DEFAULT = "2 seconds"


# at most this many stats files are read on the driver (through the file-system layer), more by a
# Spark job: a job costs 0.3-0.4 s on a laptop whatever it reads, a small file a few ms locally
# (on an object store a request each, so a cluster's hundreds of partitions go to the job)
_STATS_READ_HERE = 16


def _stats(spark: SparkSession, directory: str, fs: Any) -> dict[int, TaskStats]:
    """Per state partition: the stats a job wrote."""
    path = join(directory, OutputKind.STATS.directory)
    files = [n for n in fs.list(path) if n.endswith(".parquet") and not n.startswith(("_", "."))]  # (as Spark reads)
    if not files:
        return {}
    columns = [PART, *TaskStats.COLUMNS]
    if len(files) <= _STATS_READ_HERE and not is_connect(spark):  # (Connect's layer reads by a job)
        import io

        import pyarrow.parquet as pq

        tables = [pq.read_table(io.BytesIO(fs.read_bytes(join(path, n))), columns=columns) for n in files]
        rows = [r for t in tables for r in t.to_pylist()]
    else:
        rows = spark.read.parquet(path).select(*columns).collect()
    return {r[PART]: TaskStats.from_row(r) for r in rows}


@dataclass
class StepPlan:
    """What one step starts from (``BulkStream.plan_version``)."""

    prev: CommitRecord | None
    version: int
    attempt: str
    started: float  # wall clock, seconds
    now_ms: int  # the batch's processing time
    watermark_ms: int | None  # event-time timers fire, and state is evicted, by this (the previous batch's watermark)
    late_watermark_ms: int | None  # rows at or before this are late (Spark's rule)
    initial: DataFrame | None  # INITIAL STATE rows staged before batch 0
    program: IncrementalProgram
    # the broadcast state this version commits (a directory relative to bulk/; None: none)
    broadcast: str | None = None

    @property
    def rel(self) -> str:
        """The attempt's directory, relative to bulk/."""
        return f"steps/{self.version}-{self.attempt}"


@dataclass
class StepJobs:
    """The jobs of one step (the main job, then one per round of fed partitions) and the stats
    of every state partition (``BulkStream.run_jobs``)."""

    jobs: list[str]
    stats: dict[int, TaskStats]
    fed: dict[str, list[int]] = field(default_factory=dict)
    native: Choice | None = None  # a natively planned step: the path this batch took, and why


class BulkStream:
    """Runs ``plan`` per micro-batch with state in ``checkpoint``/bulk; ``finish`` turns the
    keyed output of a batch into what the sink receives (the statement's outer SQL).

    A step is a pipeline of named stages, each a method: ``plan_version`` (what the step starts
    from), ``run_jobs`` (the keyed job, and again for partitions fed from the checkpoint),
    ``totals``, ``write_sink``, ``record`` (the commit record) and ``commit``."""

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
        *,
        views: SparkSession | None = None,
        native: Any = None,
    ):
        """``views``: the session a memory sink's view is registered in (``driver``'s when not
        given); ``native``: the step planned as Spark SQL (a stream-mode ``NativePlan``: each
        micro-batch runs it instead of the Python job, ``native_step.py``). Reads the
        checkpoint's last commit, writes nothing: ``prepare`` does the checks and the staging a
        new run needs before its query starts."""
        self.driver = driver
        self.views = views or driver
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
        self.tasks = max(1, min(self.partitions, default_parallelism(driver)))
        self.plan = plan
        self.shipped = dataclasses.replace(plan, initial_state=None)
        self.source_schema = source_schema
        self.checkpoint = checkpoint
        self.qualified = self.fs.qualify(checkpoint, "checkpoint")
        self.cache_dir = driver.conf.get(LOCAL_STATE_DIR_CONF, None) or None
        # several inputs: the checkpoint keeps the policy of its first run (as Spark's offset log)
        self.watermark_policy = (
            (latest.watermark_policy if latest is not None else None) or watermark_policy(driver)
            if plan.watermarked_inputs
            else None
        )
        self.sink = sink
        self.native = native
        self.finish = finish
        self.function = function
        self.on_commit = on_commit
        self.lock = threading.Lock()  # foreachBatch, the timer pump and queued edits never step at once
        self.closed = False  # the query ended: no edit is applied any more (its lease goes)
        # the batches this process committed, the newest 10,000 (an erase hides older ones)
        self.committed: collections.deque[CommitRecord] = collections.deque(maxlen=10_000)
        # on a Connect server: is the lease still the one this query's batches ran under
        self.lease_guard: Callable[[], bool] | None = None
        self.codec = StateRowCodec(plan.spec)
        self.out_schema = output_schema(source_schema, plan)
        n = len(plan.key_columns)
        self.step_schema = step_schema(self.out_schema, self.codec, n)
        self.snapshot_schema = T.StructType(self.step_schema.fields[1 : 1 + n] + self.codec.fields)
        self.compactor = Compactor(self.store, driver)
        # the last commit rewritten by name for this class's state layout (evolved_commit), when
        # the class changed since it was written; the next step continues from it
        self.evolved: CommitRecord | None = None

    # ------------------------------------------------------------------ setup
    def prepare(self) -> BulkStream:
        """Before the query starts (by the driver; a Connect server's step is built from a
        prepared one): refuse an output Spark's file sink wrote and a damaged checkpoint, stage
        INITIAL STATE, apply the edits queued meanwhile, and make a memory sink's view queryable
        from the start."""
        sink = self.sink
        if is_path(sink) and self.fs.is_dir(join(sink, "_spark_metadata")):
            raise KeyedSQLError(
                f"output {sink!r} was written by Spark's file sink (it has _spark_metadata), whose readers would hide "
                "the files engine 'bulk' writes; give this query a new output directory"
            )
        latest = self.store.latest()
        if latest is not None:
            self.store.verify(latest.version)  # refuse a damaged checkpoint before Spark starts
        self._stage_initial_state()
        self.apply_edits()  # requests queued while no query ran (or left by a writer that died)
        if sink.startswith("memory:"):  # queryable from the start, as Spark's memory sink is
            reset_memory_sink(sink.split(":", 1)[1])
            self.views.createDataFrame([], self.finish(self._empty_output()).schema).createOrReplaceTempView(
                sink.split(":", 1)[1]
            )
        return self

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
            self._apply_edits()  # the batch boundary: a queued edit goes before this batch
            if self.store.committed_spark_batch(batch_id):
                return  # done before a restart; Spark had not recorded it yet
            self.step(batch_df, batch_id)

    # ------------------------------------------------------------------ queued edits
    def apply_edits(self) -> int:
        """Apply the DELETE / UPDATE requests queued in the checkpoint, between two steps."""
        with self.lock:
            return self._apply_edits()

    def close(self) -> None:
        """No edit is applied and no step without input runs from now on (waits for one that
        runs)."""
        with self.lock:
            self.closed = True

    def _apply_edits(self) -> int:
        if self.closed:
            return 0

        def before() -> None:
            self.compactor.join()  # a compaction from older state must not finish after the edit
            self.compactor.check()

        try:
            return apply_pending(
                self.driver,
                self.checkpoint,
                BulkLayout(),
                "bulk",
                lambda name: self.plan.spec if name == self.function else None,
                before,
                self._still_mine,
            )
        except Exception as exc:  # noqa: BLE001 - an edit never fails the query; tried again at the next look
            log.warning("checkpoint %s: queued edits not applied yet (tried again): %s", self.checkpoint, exc)
            return 0

    def _still_mine(self) -> bool:
        """Does this query still hold the checkpoint's lease (asked before an edit commits)?"""
        try:
            check_lease(self.qualified)
        except KeyedSQLError:
            return False
        return self.lease_guard is None or self.lease_guard()

    def edit_poll_s(self) -> float:
        return parse_interval_ms(self.driver.conf.get(EDIT_POLL_CONF, None) or EDIT_POLL_DEFAULT) / 1000

    def poll_edits(
        self, interval_s: float, active: Callable[[], bool], guard: Callable[[], bool] | None = None
    ) -> threading.Thread:
        """While ``active()``, apply queued edits every ``interval_s`` between batches, so a
        stream without input applies them too (``guard``: as ``pump_timers``)."""
        what = f"applying the queued edits of {self.function}"
        return self._pump(what, interval_s, self.apply_edits, active, None, guard)

    def flush_timers(self) -> CommitRecord | None:
        """A step without input: fires timers due by the last watermark / now (what Spark's
        no-data batch does). Commits only if a timer fired."""
        with self.lock:
            if self.closed or not self._may_be_due(self.store.latest(), now_ms(self.plan.clock_offset_ms)):
                return None
            empty = self.driver.createDataFrame([], self.source_schema)
            return self.step(empty, None, only_if_timers=True)

    def _may_be_due(self, prev: CommitRecord | None, now: int) -> bool:
        """Would a step without input do anything now: fire a timer, expire state, or move the
        watermark it evicts by (Spark's no-data batch)? From the last commit's record of the
        earliest timer and expiry."""
        if prev is None:
            return False
        if self._watermark_moved(prev):
            return True
        timer, expiry = prev.next_timer_ms, prev.next_expiry_ms
        until = prev.watermark_ms if self.plan.event_time is not None else now
        return (timer is not None and until is not None and timer <= until) or (expiry is not None and expiry <= now)

    def _watermark_moved(self, prev: CommitRecord | None) -> bool:
        """Has the watermark advanced past the one the last step evicted by?"""
        return (
            self.plan.event_time is not None
            and prev is not None
            and (prev.watermark_ms or 0) > (prev.evict_watermark_ms or 0)
        )

    def pump_timers(
        self,
        interval_s: float,
        active: Callable[[], bool],
        fail: Callable[[BaseException, str], None],
        guard: Callable[[], bool] | None = None,
    ) -> threading.Thread:
        """While ``active()``, fire due timers every ``interval_s`` even when no input arrives
        (Spark schedules no batch for a foreachBatch query without new data). A failure is
        logged and tried again; past the bound ``fail(exc, what)`` is called and the pump ends
        (``background.py``)."""
        return self._pump(f"firing the timers of {self.function}", interval_s, self.flush_timers, active, fail, guard)

    def _pump(
        self,
        what: str,
        interval_s: float,
        work: Callable[[], Any],
        active: Callable[[], bool],
        fail: Callable[[BaseException, str], None] | None,
        guard: Callable[[], bool] | None = None,
    ) -> threading.Thread:
        """A thread calling ``work`` every ``interval_s`` while ``active()`` (and, each time,
        ``guard()`` says so); failures logged and tried again, past the bound ``fail(exc, what)``
        (when given) and the thread ends."""
        retrying = Retrying(f"{what} (checkpoint {self.checkpoint!r})")

        def loop() -> None:
            while active():
                time.sleep(interval_s)
                if not active():
                    break
                try:
                    if guard is not None and not guard():
                        continue
                    work()
                except Exception as exc:  # noqa: BLE001 - counted, logged, and past the bound the query's failure
                    if not active():
                        break
                    if retrying.failed(exc) and fail is not None:
                        fail(exc, retrying.what)
                        break
                    continue
                retrying.succeeded()

        t = threading.Thread(target=loop, name=f"spark-keyed-sql: {what}", daemon=True)
        t.start()
        return t

    # ------------------------------------------------------------------ one micro-batch
    @quietly  # runs on the stream's thread: Spark's pandas warning muted here too
    def step(self, batch_df: DataFrame, spark_batch: int | None, only_if_timers: bool = False) -> CommitRecord | None:
        """One micro-batch (``only_if_timers``: a step without input that commits only when it
        fired a timer, changed state or moved the watermark)."""
        self.compactor.check()  # a compaction that kept failing fails the query here
        check_lease(self.qualified)  # nor does a writer that may no longer hold the checkpoint start one
        spark = batch_df.sparkSession
        plan = self.plan_version(spark)
        if self.plan.broadcasts:
            batch_df = self.take_broadcasts(batch_df, plan)
        jobs = self.run_jobs(batch_df, plan)
        totals = TaskStats.total(list(jobs.stats.values()))
        if only_if_timers and not totals.timers_fired and not totals.changed and not self._watermark_moved(plan.prev):
            self.fs.delete(self.store.path(plan.rel))
            return None
        crash_point("state_written")
        check_lease(self.qualified)  # a writer whose lease ran out or was taken writes no output ...
        output_rows = self.write_sink(spark, plan, jobs)
        crash_point("after_sink")
        check_lease(self.qualified)  # ... and commits nothing
        return self.commit(self.record(plan, jobs, totals, spark_batch, output_rows))

    def plan_version(self, spark: SparkSession) -> StepPlan:
        """The version this step commits, its clock and watermarks, and the program its tasks run."""
        prev = self._continue_from(spark, self.store.latest())
        version = 0 if prev is None else prev.version + 1
        started = time.time()
        now = now_ms(self.plan.clock_offset_ms)
        wm = prev.watermark_ms if prev is not None else None
        if wm is None and self.plan.event_time is not None:
            wm = 0  # Spark's event-time watermark starts at 0 (a timer at 0 fires in batch 0)
        # Spark drops input older than the watermark the previous batch evicted by (SPARK-40925)
        late_wm = (prev.evict_watermark_ms if prev is not None else None) if self.plan.event_time else None
        initial_dir = self.store.initial_dir() if prev is None else None
        initial = spark.read.parquet(initial_dir) if initial_dir is not None else None
        attempt = uuid.uuid4().hex[:12]
        program = IncrementalProgram(
            self.shipped,
            self.out_schema,
            self.qualified,
            version,
            attempt,
            {p: (prev.token(p) if prev is not None else "") for p in range(self.partitions)},
            now,
            wm,
            late_wm,
            has_initial=initial is not None,
            cache_dir=self.cache_dir,
        )
        return StepPlan(prev, version, attempt, started, now, wm, late_wm, initial, program)

    def take_broadcasts(self, batch_df: DataFrame, plan: StepPlan) -> DataFrame:
        """The batch's broadcast rows applied by the driver to the broadcast state the previous
        version committed (kept once per query, in the checkpoint), before the batch's keyed
        rows; the state rides with the program to every task. Returns the keyed rows."""
        prev = plan.prev.broadcast if plan.prev is not None else None
        state = (
            BroadcastState.from_json(self.fs.read_bytes(join(self.store.path(prev), BROADCAST_FILE)).decode())
            if prev
            else None
        )
        if state is not None:
            state.prune(plan.late_watermark_ms)  # a versioned read is never older than a row still taken
        keyed, shipped, applied = take_broadcasts(batch_df, self.plan, state)
        plan.program = dataclasses.replace(
            plan.program, plan=dataclasses.replace(plan.program.plan, broadcast_state=shipped.broadcast_state)
        )
        if applied or prev is None:
            rel = f"{plan.rel}/broadcast"
            self.fs.mkdirs(self.store.path(rel))
            self.fs.create_text(join(self.store.path(rel), BROADCAST_FILE), shipped.broadcast_state.to_json())
            plan.broadcast = rel
        else:
            plan.broadcast = prev
        return keyed

    def _continue_from(self, spark: SparkSession, latest: CommitRecord | None) -> CommitRecord | None:
        """The commit a step continues from: the last one, or, when the class's state layout
        changed since it was written, that state mapped by name (made once, by the first step)."""
        if latest is None:
            return None
        evolved = self.evolved
        if evolved is not None and evolved.version == latest.version:
            return evolved
        self.evolved = evolved_commit(spark, self.store, latest, self.codec, self.function)
        return self.evolved or latest

    def run_jobs(self, batch_df: DataFrame, plan: StepPlan) -> StepJobs:
        """The keyed job over every state partition; then, while some partition's local store
        did not hold the last committed state, a job for those partitions fed from the
        checkpoint (the deltas since the state the store holds, else all of it)."""
        spark, store = batch_df.sparkSession, self.store
        jobs = [f"{plan.rel}/main"]
        choice, app = None, ""
        if self.native is not None:
            app = spark.conf.get("spark.app.id", None) or ""
            choice = choose(
                app,
                self.qualified,
                plan.version,
                self.native.every_batch,
                input_bytes(batch_df),
                plan.prev,
            )
        if choice is not None and choice.native:
            prior = state_frame(spark, store, plan.prev, versions=True) if plan.prev is not None else None
            try:
                stats = native_job(
                    self.native,
                    batch_df,
                    prior,
                    self.plan.key_columns,
                    self.partitions,
                    self.step_schema,
                    store.path(jobs[0]),
                    self.fs,
                    plan.version,
                    plan.attempt,
                )
                return StepJobs(jobs, stats, native=choice)
            except Exception as exc:  # noqa: BLE001 - only the one below is taken; the rest raised as they are
                if self.native.every_batch or UNREADABLE not in str(exc):
                    raise
                # a stored value the plan cannot read (left by UPDATE keyed_state, a migration, an
                # older class): with native = 'auto' the batch runs on the Python path, which does
                # what Python does with it, in a directory of its own (Connect cannot remove the
                # native job's); the log names key and value, the commit record does not (user data)
                said = next((ln.strip() for ln in str(exc).splitlines() if UNREADABLE in ln), "")[:300]
                log.warning("batch %d of %s: %s; it runs on the Python path", plan.version, self.checkpoint, said)
                self.fs.delete(store.path(jobs[0]))
                jobs[0] = f"{plan.rel}/python"
                choice = python_after_refusal(app, self.qualified, plan.version)
        incremental_input(batch_df, self.plan, self.partitions, self.tasks, initial=plan.initial).mapInArrow(
            plan.program, self.step_schema
        ).write.partitionBy(KIND).parquet(store.path(jobs[0]))
        stats = _stats(spark, store.path(jobs[0]), self.fs)
        run = StepJobs(jobs, stats, native=choice)
        missed = {p: s.token for p, s in stats.items() if not s.hit}
        while missed:
            crash_point("before_rebuild")
            log.info(
                "batch %d: state partitions %s of %s fed from the checkpoint",
                plan.version,
                sorted(missed)[:20],
                self.checkpoint,
            )
            feeding = plan_feeds(store, plan.prev, self.evolved, missed, final=len(jobs) > 1)
            for p, feed in feeding.feeds.items():
                run.fed.setdefault(feed.value, []).append(p)
            jobs.append(f"{plan.rel}/fed{len(jobs)}")
            tasks = max(1, min(len(missed), self.tasks))
            state = feeding.rows(spark, store, plan.prev)
            incremental_input(
                batch_df, self.plan, self.partitions, tasks, only=sorted(missed), state=state, initial=plan.initial
            ).mapInArrow(
                dataclasses.replace(plan.program, feeds=feeding.feeds, catch_up=feeding.catch_up),
                self.step_schema,
            ).write.partitionBy(KIND).parquet(store.path(jobs[-1]))
            again = _stats(spark, store.path(jobs[-1]), self.fs)
            stats.update(again)
            missed = {p: s.token for p, s in again.items() if not s.hit}
        missing = [p for p in range(self.partitions) if p not in stats or not stats[p].hit]
        if missing:
            raise KeyedSQLError(
                f"internal: state partitions {missing[:10]} of {self.checkpoint!r} were not run in batch {plan.version}"
            )
        return run

    def write_sink(self, spark: SparkSession, plan: StepPlan, run: StepJobs) -> int | None:
        """The jobs' output, through the statement's outer SQL, to the sink (idempotently: a
        re-run of the version replaces what it wrote). Returns the rows written (None: not
        counted, the console sink)."""
        n = len(self.plan.key_columns)
        staged_schema = T.StructType(self.step_schema.fields[1:])
        outputs = [join(self.store.path(j), OutputKind.OUT.directory) for j in run.jobs]
        present = [o for o in outputs if self.fs.is_dir(o)]
        staged = (
            spark.read.schema(staged_schema).parquet(*present) if present else spark.createDataFrame([], staged_schema)
        )
        out = staged.select(
            *[F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(self.plan.key_columns)],
            *[named(f.name) for f in self.out_schema.fields[n:]],
        )
        final = self.finish(out)
        output_rows = final.count() if self.sink != "console" else None
        write_batch(self.views, final, self.sink, self.checkpoint, plan.version)
        return output_rows

    def record(
        self, plan: StepPlan, run: StepJobs, totals: TaskStats, spark_batch: int | None, output_rows: int | None
    ) -> CommitRecord:
        """The new version's commit record: the previous version's base and deltas (or the newest
        compacted base, if one was made since) plus this batch's delta, and what the batch did."""
        prev, store = plan.prev, self.store
        base, base_version = (prev.base, prev.base_version) if prev is not None else (None, -1)
        base_rows, base_bytes = (prev.base_rows, prev.base_bytes) if prev is not None else (0, 0)
        deltas = list(prev.deltas) if prev is not None else []
        compacted = store.bases()
        if prev is not None and compacted and base_version < compacted[-1].version <= prev.version:
            newest = compacted[-1]
            base, base_version, base_rows, base_bytes = newest.dir, newest.version, newest.rows, newest.bytes
            deltas = [e for e in deltas if e.version > base_version]
        dirs = tuple(
            f"{j}/{OutputKind.DELTA.directory}"
            for j in run.jobs
            if self.fs.is_dir(join(store.path(j), OutputKind.DELTA.directory))
        )
        if dirs:
            deltas.append(
                DeltaEntry(plan.version, dirs, totals.changed, sum(self.fs.size(store.path(d)) for d in dirs))
            )
        new_wm, input_wms = plan.watermark_ms, dict(plan.prev.input_watermarks_ms if plan.prev is not None else {})
        if self.plan.event_time is not None:
            newest = totals.input_max_event_times
            if not self.plan.inputs and totals.max_event_time_ms is not None:
                newest = {ONE_INPUT: totals.max_event_time_ms}
            new_wm, input_wms = next_watermarks(
                new_wm, input_wms, newest, self.plan.watermark_ms or 0, self.watermark_policy or "min"
            )
        stores: dict[str, list[int]] = {}
        for p, s in run.stats.items():
            stores.setdefault(s.task, []).append(p)
        return CommitRecord(
            version=plan.version,
            attempt=plan.attempt,
            partitions=self.partitions,
            function=self.function,
            schema=self.snapshot_schema.jsonValue(),
            base=base,
            base_version=base_version,
            base_rows=base_rows,
            base_bytes=base_bytes,
            deltas=tuple(deltas),
            stores={t: tuple(sorted(ps)) for t, ps in stores.items()},
            spark_batch=spark_batch,
            watermark_ms=new_wm,
            evict_watermark_ms=plan.watermark_ms,
            input_watermarks_ms=input_wms,
            watermark_policy=self.watermark_policy,
            broadcast=plan.broadcast,
            next_timer_ms=totals.next_timer_ms,
            next_expiry_ms=totals.next_expiry_ms,
            metrics=BatchMetrics(
                input_rows=totals.events + totals.late_rows,
                events=totals.events,
                late_rows=totals.late_rows,
                keys_touched=totals.keys_touched,
                timers_fired=totals.timers_fired,
                output_rows=output_rows,
                state_rows=(prev.state_rows if prev is not None else 0) + totals.inserted - totals.deleted,
                processing_ms=plan.now_ms,
                seconds=round(time.time() - plan.started, 3),
                fed_partitions={k: tuple(sorted(v)) for k, v in run.fed.items()},
                native=run.native is not None and run.native.native,
                native_choice=run.native.why if run.native is not None else "",
            ),
        )

    def commit(self, record: CommitRecord) -> CommitRecord:
        """Make the version visible (one create of its commit file), then tidy up, maybe start a
        compaction, and report the batch."""
        commit = self.store.commit(record)
        self.committed.append(commit)
        self.store.cleanup(keep_bases=self.compactor.running)
        self.compactor.maybe_start(commit)
        log.debug("committed version %d of %s: %s", commit.version, self.checkpoint, commit.metrics)
        if self.on_commit is not None:
            self.on_commit(commit.progress())
        return commit

"""The bulk engine's Python pass over one micro-batch: only the keys the batch touches.

Input (``incremental_input``): one TICK row per state partition, so every partition is visited
even without input; for partitions being rebuilt, their committed state rows (REBUILD); on a
new checkpoint, INITIAL STATE rows (INIT); then the batch's rows (EVENT). Rows arrive grouped
by state partition, ticks first, then by kind, then by key.

For each state partition the task opens the partition's local store (``local_store.py``) and
checks it holds the state the last commit names (else it reports a miss and does nothing for
the partition: the driver runs it again with the partition's state fed from the checkpoint).
Then it runs the keys with input (state looked up in the store, a chunk of keys at a time),
then the keys the store lists as having a timer due or state expiring, and records what
changed: in the store as a pending change set under this task's token, and as delta rows (new
state rows, tombstones) for the checkpoint. No other key's state is read or written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...compat.arrow import select, to_array
from ...compat.names import named
from ...runtime.faults import crash_point
from ...runtime.plan import KeyedPlan
from ...runtime.runner import KeyedRunner
from ...state.commit_record import StoreToken, store_token
from ...state.memory import MemoryKeyState, due_times, purge_expired
from ...state.snapshots import KEY_PREFIX
from ..arrow_rows import BatchEvents, fewer_collections, naive_batch, pylist, transposed
from .layout import DELETED, VERSION
from .local_store import Change, LocalStore, cache_root, decode, encode
from .partitioning import PART, TASK, part_column, task_column
from .program import INIT_PREFIX, KeyPass, order_columns
from .records import INPUT_KIND, KIND, Feed, InputKind, OutputKind, TaskStats, earliest
from .state_row import StateRowCodec

__all__ = ["DELETED", "IncrementalProgram", "VERSION", "incremental_input", "step_schema"]

# as plain ints: compared with and written into Arrow columns in the per-row loops
TICK, REBUILD, INIT, EVENT = (int(k) for k in (InputKind.TICK, InputKind.REBUILD, InputKind.INIT, InputKind.EVENT))
OUT, DELTA, STATS = (int(k) for k in (OutputKind.OUT, OutputKind.DELTA, OutputKind.STATS))
LOOKUP_CHUNK = 512  # keys looked up in the local store at once


def step_schema(out: T.StructType, codec: StateRowCodec, n_keys: int) -> T.StructType:
    """What a micro-batch job writes: output rows (OUT), changed state rows (DELTA) and one stats
    row per state partition (STATS); key columns named by position, as snapshots store them."""
    key_fields = out.fields[:n_keys]
    return T.StructType(
        [T.StructField(KIND, T.IntegerType(), False)]
        + [T.StructField(f"{KEY_PREFIX}{i}", f.dataType, True) for i, f in enumerate(key_fields)]
        + [T.StructField(f.name, f.dataType, True) for f in out.fields[n_keys:]]
        + codec.fields
        + [T.StructField(DELETED, T.BooleanType(), True), T.StructField(PART, T.IntegerType(), True)]
        + TaskStats.struct_fields()
    )


def incremental_input(
    events: DataFrame,
    plan: KeyedPlan,
    partitions: int,
    tasks: int,
    only: list[int] | None = None,
    state: DataFrame | None = None,
    initial: DataFrame | None = None,
) -> DataFrame:
    """The job's input: ticks, REBUILD rows (``state``: snapshot rows with ``VERSION``), INIT and
    EVENT rows, spread over ``tasks`` tasks by state partition and sorted for the program.
    ``only``: the state partitions this job runs (the others' events are left out)."""
    spark = events.sparkSession
    keys = plan.key_columns
    parts = [events.withColumn(INPUT_KIND, F.lit(EVENT)).withColumn(PART, part_column(keys, partitions))]
    wanted = range(partitions) if only is None else only
    parts.append(spark.createDataFrame([(p,) for p in wanted], f"{PART} int").withColumn(INPUT_KIND, F.lit(TICK)))
    if state is not None:
        renamed = [F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(keys)]
        rest = [c for c in state.columns if not c.startswith(KEY_PREFIX) and c != PART]
        parts.append(state.select(*renamed, *rest, PART).withColumn(INPUT_KIND, F.lit(REBUILD)))
    if initial is not None:
        cols = [named(k) for k in keys] + [named(c).alias(INIT_PREFIX + c) for c in initial.columns if c not in keys]
        parts.append(
            initial.select(*cols).withColumn(INPUT_KIND, F.lit(INIT)).withColumn(PART, part_column(keys, partitions))
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p, allowMissingColumns=True)
    if only is not None:
        out = out.where(F.col(PART).isin(list(only)))
    # within a partition: ticks, REBUILD rows, INIT rows, then events; each kind by key (REBUILD
    # rows by version too, events by the within-key ORDER BY): Python sorts nothing
    order = (
        [F.col(PART), F.col(INPUT_KIND), *[named(k) for k in keys]]
        + ([F.col(VERSION)] if state is not None else [])
        + order_columns(plan)
    )
    return out.withColumn(TASK, task_column(PART, tasks)).repartition(tasks, TASK).sortWithinPartitions(*order)


def _task_id() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return str(ctx.taskAttemptId()) if ctx is not None else uuid.uuid4().hex[:12]


class _Partition:
    """One state partition while a task runs it."""

    def __init__(self, prog: IncrementalProgram, ctx: _TaskContext, p: int):
        self.prog, self.ctx, self.p = prog, ctx, p
        self.store = LocalStore(ctx.root, prog.checkpoint, p)
        self.expected = prog.expected.get(p, "")
        self.held = self.store.applied()  # the committed state the store holds (reported on a miss)
        # key bytes -> (key values, state, its stored row before this batch)
        self.touched: dict[bytes, tuple[tuple, MemoryKeyState, bytes | None]] = {}
        self.waiting: list[tuple[tuple, bytes, _KeyRows]] = []
        self.loading = False  # REBUILD rows are being loaded into the store
        self.since = -1  # a catch-up loads only rows newer than the store's version
        self.load_key: bytes | None = None
        self.load_row: tuple | None | bool = False  # False: nothing to load for load_key
        feed = prog.feeds.get(p)
        if feed == Feed.FULL:
            self.store.load_begin(clear=True)
            self.loading, self.hit = True, True
        elif feed == Feed.CATCH_UP and prog.catch_up.get(p, {}).get(StoreToken.version_of(self.held)) == self.held:
            # the store holds a committed state older than the last: apply the deltas since
            self.store.load_begin(clear=False)
            self.loading, self.hit, self.since = True, True, StoreToken.version_of(self.held)
        elif feed is None:
            self.hit = self.store.ensure(self.expected)
            if not self.hit:  # (a miss may have undone an empty store's direct changes: it holds no state now)
                self.held = self.store.applied()
        else:
            self.hit = False  # fed deltas for a state this host's store does not hold: run again, fed in full
        ctx.key_pass.reset_counts()

    @property
    def active(self) -> bool:
        return self.hit

    # -- REBUILD rows (sorted by key, then version): each key's newest row is loaded
    def load_add(self, key_bytes: bytes, row: dict) -> None:
        if row[VERSION] <= self.since:
            return  # the store has it already
        if key_bytes != self.load_key:
            self._load_flush()
            self.load_key = key_bytes
        self.load_row = None if row[DELETED] else tuple(row[c] for c in self.ctx.codec.names)

    def _load_flush(self) -> None:
        if self.load_key is not None and self.load_row is not False:
            if self.load_row is None:
                self.store.load(self.load_key, None, None, None)
            else:
                key_state = self.ctx.codec.load_values(self.load_row)  # type: ignore[arg-type]
                self.store.load(self.load_key, encode(self.load_row), *due_times(key_state))  # type: ignore[arg-type]
        self.load_key, self.load_row = None, False

    def load_done(self) -> None:
        if self.loading:
            self._load_flush()
            self.store.load_end(self.expected)
            self.loading = False

    # -- keys
    def _state(self, key_values: tuple, key_bytes: bytes, row: bytes | None) -> MemoryKeyState:
        seen = self.touched.get(key_bytes)
        if seen is not None:
            return seen[1]
        key_state = self.ctx.codec.load_values(decode(row)) if row is not None else MemoryKeyState()
        self.touched[key_bytes] = (key_values, key_state, row)
        return key_state

    def initial(self, key_values: tuple, init_row: dict) -> None:
        key_bytes = encode(key_values)
        found = self.store.get([key_bytes]).get(key_bytes)
        self.ctx.key_pass.initial(key_values, self._state(key_values, key_bytes, found), init_row)

    def events(self, key_values: tuple, rows: _KeyRows) -> None:
        self.waiting.append((key_values, encode(key_values), rows))
        if len(self.waiting) >= LOOKUP_CHUNK:
            self._run_waiting()

    def _run_waiting(self) -> None:
        if not self.waiting:
            return
        found = self.store.get([key_bytes for _, key_bytes, _ in self.waiting if key_bytes not in self.touched])
        for key_values, key_bytes, rows in self.waiting:
            self.ctx.run(key_values, self._state(key_values, key_bytes, found.get(key_bytes)), rows)
        self.waiting = []

    def finish(self) -> None:
        ctx, prog = self.ctx, self.prog
        self.load_done()
        if not self.hit:
            ctx.stats(self.p, TaskStats(hit=False, token=self.held))
            self.store.close()
            return
        self._run_waiting()
        if not ctx.crash_point_passed:  # once per task, with its first partition's keys run
            crash_point("processing")
            ctx.crash_point_passed = True
        # the keys without input that have a timer due or state expiring in this batch
        for key_bytes, row in self.store.due(ctx.timer_until, prog.now_ms):
            if key_bytes not in self.touched:
                key_values = decode(key_bytes)
                ctx.run(key_values, self._state(key_values, key_bytes, row), _KeyRows())
        changes: list[Change] = []
        deltas: list[tuple] = []
        inserted = deleted = 0
        next_timer = next_expiry = None
        for key_bytes, (key_values, key_state, before) in self.touched.items():
            purge_expired(key_state, prog.now_ms)
            values = ctx.codec.dump(key_state)
            after = None if values is None else encode(values)
            if after == before:
                continue
            if after is None:
                deleted += 1
                changes.append(Change(key_bytes, None, None, None))
                deltas.append(ctx.delta_row(key_values, None, self.p))
                continue
            inserted += before is None
            timer_at, expire_at = due_times(key_state)
            next_timer, next_expiry = earliest(next_timer, timer_at), earliest(next_expiry, expire_at)
            changes.append(Change(key_bytes, after, timer_at, expire_at))
            deltas.append(ctx.delta_row(key_values, values, self.p))
        self.store.stage(ctx.token, self.expected, changes)
        crash_point("local_state_written")
        held_timer, held_expiry = self.store.next_due()
        self.store.close()
        ctx.rows.extend(deltas)
        ctx.stats(
            self.p,
            TaskStats.counted(
                ctx.token,
                ctx.key_pass.counts,
                inserted=inserted,
                deleted=deleted,
                changed=len(changes),
                next_timer_ms=earliest(held_timer, next_timer),
                next_expiry_ms=earliest(held_expiry, next_expiry),
            ),
        )


class _TaskContext:
    """What every partition of one task shares: runner, codec, output rows."""

    def __init__(self, prog: IncrementalProgram):
        from ...compat.arrow import arrow_schema as to_arrow_schema

        plan = prog.plan
        self.codec = StateRowCodec(plan.spec)
        runner = KeyedRunner(
            plan.spec, [], plan.keyed, plan.input_names
        )  # rows come in order (incremental_input sorts them)
        self.key_pass = KeyPass(
            plan, runner, prog.now_ms, prog.watermark_ms, prog.late_watermark_ms, end_of_input=False
        )
        self.events = BatchEvents(plan)
        self.n_keys = len(plan.key_columns)
        self.schema = step_schema(prog.out_schema, self.codec, self.n_keys)
        self.arrow_schema = to_arrow_schema(self.schema)
        self.token = store_token(prog.version, prog.attempt, _task_id())
        self.root = cache_root(prog.cache_dir)
        self.timer_until = prog.watermark_ms if plan.event_time is not None else prog.now_ms
        n_rest = len(prog.out_schema.fields) - self.n_keys
        self.out_pad = (None,) * n_rest
        self.pass_pad = (None,) * len(plan.passthrough)
        self.state_pad = (None,) * len(self.codec.fields)
        self.stats_pad = (None,) * len(TaskStats.COLUMNS)
        self.no_key = (None,) * self.n_keys
        self.rows: list[tuple] = []
        self.crash_point_passed = False

    def run(self, key_values: tuple, key_state: MemoryKeyState, rows: _KeyRows) -> None:
        """The key's turn; its output rows (with their pass-through values) to the job's output."""
        out: list[Any] = []
        src: list[Any] = []
        self.key_pass.run(key_values, key_state, rows.events, out, src, 0, event_times=rows.times, inputs=rows.inputs)
        pad, state_pad, stats_pad, through = self.pass_pad, self.state_pad, self.stats_pad, rows.through
        for o, i in zip(out, src):
            self.rows.append(
                (OUT, *key_values, *o, *(through[i] if i is not None else pad), *state_pad, None, None, *stats_pad)
            )

    def delta_row(self, key_values: tuple, values: tuple | None, part: int) -> tuple:
        if values is None:
            return (DELTA, *key_values, *self.out_pad, *self.state_pad, True, part, *self.stats_pad)
        return (DELTA, *key_values, *self.out_pad, *values, False, part, *self.stats_pad)

    def stats(self, part: int, stats: TaskStats) -> None:
        """A partition's stats row."""
        self.rows.append((STATS, *self.no_key, *self.out_pad, *self.state_pad, None, part, *stats.values()))

    def flush(self) -> Any:
        import pyarrow as pa

        cols = transposed(self.rows, len(self.arrow_schema))
        arrays = [to_array(c, f.type) for c, f in zip(cols, self.arrow_schema)]
        self.rows = []
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


@dataclass
class IncrementalProgram:
    """What each Python task of a micro-batch job runs (pickled to executors).

    Its walk is not ``BulkProgram``'s: a one-shot batch's keys each lie in one Arrow batch
    (``key_runs``) and start fresh, while here the rows come as blocks of one kind (state to
    rebuild, initial state, events) per state partition, each partition opened by a TICK row,
    and one key's events may span Arrow batches (gathered in ``_KeyRows``)."""

    plan: KeyedPlan
    out_schema: T.StructType
    checkpoint: str  # qualified URI: names the local stores
    version: int  # the version this batch commits
    attempt: str
    expected: dict[int, str]  # state partition -> token of the committed state it starts from
    now_ms: int
    watermark_ms: int | None  # event-time timers due by this (the previous batch's watermark)
    late_watermark_ms: int | None  # rows at or before this are late (Spark's rule)
    # partitions fed from the checkpoint in this job: FULL (all their state) or CATCH_UP (the
    # deltas after FeedPlan.since, for a store holding one of the versions in catch_up[p])
    feeds: dict[int, Feed] = field(default_factory=dict)  # missed partitions, fed from the checkpoint
    catch_up: dict[int, dict[int, str]] = field(default_factory=dict)  # partition -> {version: token}
    has_initial: bool = False
    cache_dir: str | None = None

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        with fewer_collections():
            yield from self._run(batches)

    def _run(self, batches: Iterator[Any]) -> Iterator[Any]:

        ctx = _TaskContext(self)
        plan = self.plan
        part: _Partition | None = None
        current: tuple | None = None  # the key whose events are being gathered (they may span batches)
        rows = _KeyRows()
        for rb in batches:
            rb = naive_batch(rb)
            n = rb.num_rows
            kinds, parts = pylist(rb.column(INPUT_KIND)), pylist(rb.column(PART))
            keys = list(zip(*[pylist(rb.column(k)) for k in plan.key_columns])) if plan.key_columns else [()] * n
            i = 0
            while i < n:
                kind, j = kinds[i], i + 1
                while j < n and kinds[j] == kind and parts[j] == parts[i] and kind != TICK:
                    j += 1  # [i, j): a block of one kind in one state partition
                if kind == TICK:
                    if part is not None:
                        if current is not None:
                            part.events(current, rows)
                            current, rows = None, _KeyRows()
                        part.finish()
                    part = _Partition(self, ctx, parts[i])
                elif part is not None and part.active:  # else a miss: it runs again, fed from the checkpoint
                    block = rb.slice(i, j - i)
                    if kind == REBUILD:
                        for key_values, r in zip(keys[i:j], block.to_pylist()):
                            part.load_add(encode(key_values), r)
                    else:
                        part.load_done()
                        if kind == INIT:
                            init_cols = [c for c in block.schema.names if c.startswith(INIT_PREFIX)]
                            for key_values, r in zip(keys[i:j], select(block, init_cols).to_pylist()):
                                part.initial(key_values, {c[len(INIT_PREFIX) :]: v for c, v in r.items()})
                        else:
                            events, names = ctx.events(block)
                            through = (
                                list(zip(*[pylist(block.column(c)) for c in plan.passthrough]))
                                if plan.passthrough
                                else None
                            )
                            times = pylist(block.column(plan.event_time)) if plan.event_time else None
                            for k in range(j - i):
                                key_values = keys[i + k]
                                if key_values != current:
                                    if current is not None:
                                        part.events(current, rows)
                                    current, rows = key_values, _KeyRows()
                                rows.add(
                                    events[k],
                                    through[k] if through is not None else (),
                                    times[k] if times is not None else None,
                                    names[k] if names is not None else None,
                                )
                i = j
            if len(ctx.rows) >= 8192:
                yield ctx.flush()
        if part is not None:
            if current is not None:
                part.events(current, rows)
            part.finish()
        ctx.key_pass.runner.close()
        if ctx.rows:
            yield ctx.flush()


class _KeyRows:
    """One key's events of the batch, with their pass-through values, event times and (several
    inputs) input names."""

    __slots__ = ("events", "through", "times", "inputs")

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.through: list[tuple] = []
        self.times: list | None = None
        self.inputs: list[str] | None = None

    def add(self, event: dict, through: tuple, time: Any, input: str | None = None) -> None:
        self.events.append(event)
        self.through.append(through)
        if input is not None:
            if self.inputs is None:
                self.inputs = []
            self.inputs.append(input)
        if time is not None or self.times is not None:
            if self.times is None:
                self.times = [None] * (len(self.events) - 1)
            self.times.append(time)

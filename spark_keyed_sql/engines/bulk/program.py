"""The bulk engine's Python pass: many keys per Python call.

The input is hash-partitioned by key and sorted by key, then handed to ``mapInArrow``: each
Python call walks Arrow batches holding thousands of keys, runs the registered class key by
key with its state in memory, and writes output rows back as Arrow batches. No Python round
trip per key, no state-store call per variable.

A one-shot batch query fires the timers still due at end of input, in timestamp order. A
micro-batch (``incremental.py``) runs the same ``KeyPass`` per key, with the key's state from
the partition's local store, and fires the timers due by the previous batch's watermark (event
time) or the batch's start (processing time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.context import to_epoch_ms
from ...compat.arrow import to_array
from ...runtime.columns import quote
from ...runtime.faults import crash_point
from ...runtime.key_rows import rows_builder
from ...runtime.keys import user_key, user_keys
from ...runtime.plan import KeyedPlan
from ...runtime.runner import KeyedRunner
from ...runtime.spark_frames import arrow_types
from ...runtime.timers import pop_due
from ...state.binding import KeyBinding
from ...state.memory import MemoryKeyState, MemoryKeyStore
from ..arrow_rows import BatchEvents, fewer_collections, key_runs, naive_batch, pylist, transposed
from .frames import frame_slicer
from .records import INPUT_KIND, InputKind, PassCounts

__all__ = ["BulkProgram", "KeyPass", "combine", "hash_ordered", "order_columns", "output_batch", "HASH", "INIT_PREFIX"]

HASH = "__ks_hash"  # a key's 64-bit hash: the one-shot batch's sort column where hash_ordered
INIT_PREFIX = "__ks_i_"


class KeyPass:
    """One key's turn in a batch, the same in a one-shot batch and a micro-batch: initial
    state, the key's rows (late rows dropped on a stream), then its timers that are due.
    Output rows are appended to the caller's list with, for each, the position of the input
    row it came from (None for a timer's: its pass-through columns are NULL)."""

    def __init__(
        self,
        plan: KeyedPlan,
        runner: KeyedRunner,
        now_ms: int | None,
        watermark_ms: int | None,
        late_watermark_ms: int | None,
        end_of_input: bool,
    ):
        self.plan, self.runner = plan, runner
        if plan.broadcast_state is not None:
            runner.use_broadcasts(plan.broadcast_state, plan.event_time_name)
        self.now, self.watermark_ms, self.late_watermark_ms, self.end_of_input = (
            now_ms,
            watermark_ms,
            late_watermark_ms,
            end_of_input,
        )
        self.names = list(plan.event_names)
        self.function = runner.layout is not None
        self.rows_format = runner.rows_format
        self.keyed, self.ttl_ms = plan.keyed, plan.spec.ttl_ms
        types = arrow_types(plan.arg_types)
        self.build_rows = rows_builder(self.rows_format, self.names, [types.get(c) for c in plan.arg_columns])
        self.input_rows = {
            i.name: rows_builder(self.rows_format, i.names, [types.get(c) for c in i.columns])
            for i in plan.inputs or []
        }
        # one binding for the task, re-pointed at each key's state (not one made per key)
        self._store = MemoryKeyStore(MemoryKeyState())
        self._binding = KeyBinding(self._store, self._clock, self.ttl_ms)
        self.reset_counts()

    def reset_counts(self) -> None:
        self.counts = PassCounts()

    def _clock(self) -> int | None:
        return self.now

    def binding(self, key_state: MemoryKeyState) -> KeyBinding:
        """The task's binding, pointed at ``key_state`` (valid until the next key's)."""
        self._store.ks = key_state
        self._binding.repoint()
        return self._binding

    def due_until(self) -> tuple[bool, int | None]:
        """Whether any timer can be due in this batch, and by when (None: every one, at end of
        a one-shot batch's input)."""
        if self.end_of_input:
            return True, None
        limit = self.watermark_ms if self.plan.event_time is not None else self.now
        return limit is not None, limit

    def initial(self, key_values: tuple, key_state: MemoryKeyState, init_row: dict) -> None:
        self.runner.initial_state(user_key(key_values, self.plan.keyed), init_row, self.binding(key_state))

    def run(
        self,
        key_values: tuple,
        key_state: MemoryKeyState,
        events: list[dict],
        out: list,
        src: list,
        first_src: int = 0,
        event_times: list | None = None,
        frame: Callable[[], Any] | None = None,
        inputs: list[str] | None = None,
    ) -> None:
        """The key's events (in order; their input rows at ``first_src``...), then its due timers.
        ``event_times``: the events' event-time values (a stream with EVENT TIME); ``frame()``:
        a KeyedProcessor's ``rows`` of the events (else built from them); ``inputs``: each
        event's input name (several inputs)."""
        counts, runner = self.counts, self.runner
        key = user_key(key_values, self.keyed)
        binding = self.binding(key_state)
        counts.keys_touched += 1
        live = False  # the key's state held in the runner's instance (see KeyedRunner.run_function)
        if events:
            positions = None
            if event_times is not None:
                ets = [to_epoch_ms(t) if t is not None else None for t in event_times]
                known = [t for t in ets if t is not None]
                if known:
                    m = max(known)
                    newest = counts.max_event_time_ms
                    counts.max_event_time_ms = m if newest is None else max(newest, m)
                    if inputs is not None:  # several inputs: a watermark each (watermarks.py)
                        by = counts.max_event_times
                        for name, t in zip(inputs, ets):
                            if t is not None and (name not in by or t > by[name]):
                                by[name] = t
                if self.late_watermark_ms is not None:
                    late = self.late_watermark_ms
                    positions = [i for i, t in enumerate(ets) if t is None or t > late]
                    if len(positions) < len(events):
                        counts.late_rows += len(events) - len(positions)
                        events = [events[i] for i in positions]
                        inputs = [inputs[i] for i in positions] if inputs is not None else None
                        frame = None
                    else:
                        positions = None
            counts.events += len(events)
            if events:
                if self.function:  # held live when its timers may fire next (no state round trip between)
                    if positions is None:
                        live = runner.run_function(
                            key,
                            events,
                            binding,
                            self.now,
                            self.watermark_ms,
                            out,
                            src,
                            first_src,
                            hold=True,
                            inputs=inputs,
                        )
                    else:
                        at: list[int] = []
                        live = runner.run_function(
                            key, events, binding, self.now, self.watermark_ms, out, at, hold=True, inputs=inputs
                        )
                        src.extend(first_src + positions[j] for j in at)
                else:
                    before = len(out)
                    if inputs is not None:  # one frame per input, by name
                        rows = {n: b([e for e, i in zip(events, inputs) if i == n]) for n, b in self.input_rows.items()}
                    else:
                        rows = frame() if frame is not None else self.build_rows(events)
                    runner.run_processor(
                        key, rows, len(events), lambda: events[0], binding, self.now, self.watermark_ms, out
                    )
                    src.extend([None] * (len(out) - before))
        if key_state.timers:
            live = self._fire_due(key, key_state, binding, live, out, src)
        if live:  # a one-shot batch keeps no state: the key ends without being stored
            (runner.discard if self.end_of_input else runner.release)(key, binding)

    def run_group(
        self,
        key_values: tuple,
        key_state: MemoryKeyState,
        rows: Any,
        count: int,
        first: Callable[[], dict],
        out: list,
        src: list,
    ) -> None:
        """A KeyedProcessor's key of a one-shot batch, its ``rows`` cut from the batch already
        (``count`` of them; ``first()`` builds the first event for an error message), then its
        due timers: ``run``'s work without what a one-shot batch has no use for (a processor's
        output has no pass-through columns, so ``src`` is left as it is)."""
        key = user_key(key_values, self.keyed)
        binding = self.binding(key_state)
        if count:  # (a one-shot batch reports no key or event counts)
            self.runner.run_processor(key, rows, count, first, binding, self.now, self.watermark_ms, out)
        if key_state.timers:
            self._fire_due(key, key_state, binding, False, out, src)

    def _fire_due(self, key: Any, key_state: MemoryKeyState, binding: Any, live: bool, out: list, src: list) -> bool:
        """The key's timers due in this batch, in time order; returns whether the key is left
        live (see ``run``)."""
        runner = self.runner
        if live and not runner.stays_live():  # (its state would change by a store and reload: do them)
            runner.release(key, binding)
            live = False
        fires, until = self.due_until()
        if not fires:
            return live
        for t in pop_due(key_state.timers, until, lambda: runner.naming(key)):
            self.counts.timers_fired += 1
            fired = runner.fire_timer(
                key, t, binding, self.now, t if self.end_of_input else self.watermark_ms, live=live, hold=self.function
            )
            live = runner.held
            out.extend(fired)
            src.extend([None] * len(fired))
        return live


@dataclass
class BulkProgram:
    """A one-shot batch: every key's rows with fresh state, then every timer still due at end
    of input, in timestamp order per key (what each Python task runs; pickled to executors).
    Rows arrive sorted by key, kind and the within-key ORDER BY (``combine``)."""

    plan: KeyedPlan
    out_schema: T.StructType
    now_ms: int | None = None  # the query's processing time
    has_initial: bool = False
    hashed: bool = False  # rows sorted by their key's HASH only (``combine``)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        with fewer_collections():
            yield from self._run(batches)

    def _run(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from ...compat.arrow import arrow_schema as to_arrow_schema

        plan = self.plan
        runner = KeyedRunner(plan.spec, [], plan.keyed, plan.input_names)  # rows come in order: no sort here
        key_pass = KeyPass(plan, runner, self.now_ms, None, None, end_of_input=True)
        arrow_schema = to_arrow_schema(self.out_schema)
        keys = plan.key_columns
        names = list(plan.event_names)
        batch_events = BatchEvents(plan)
        build_events = batch_events.build
        several = batch_events.several is not None
        crashed_here = False
        fresh = MemoryKeyState()
        spec = plan.spec
        fresh_keys = key_pass.function and not self.has_initial and not spec.has_timers and not spec.has_ttl
        # every row of a key run holds the key's own value (the run's first row's), so a batch whose
        # every row made one row hands its key columns on as they are (not floats: 0.0 and -0.0)
        keys_as_rows = all(isinstance(f.dataType, _HASHABLE_KEYS) for f in self.out_schema.fields[: len(keys)])
        for rb, starts in key_runs(batches, keys, HASH if self.hashed else None):
            rb = naive_batch(rb)
            n = rb.num_rows
            ends = [*starts[1:].tolist(), n]
            kinds = pylist(rb.column(INPUT_KIND)) if self.has_initial else None
            init_cols = [c for c in rb.schema.names if c.startswith(INIT_PREFIX)] if self.has_initial else []
            args = batch_events.columns(rb)
            slicer = cut = None
            inputs = None
            if several:
                events, inputs = batch_events(rb)
            elif not key_pass.function and key_pass.rows_format != "records":
                slicer = frame_slicer(names, [rb.column(c) for c in plan.arg_columns], n)
                if slicer is not None:
                    cut = slicer.frame if key_pass.rows_format == "pandas" else slicer.column_rows
            # a processor fed frames reads no event dicts (only the first, for an error message);
            # the keys loop builds each row's event itself
            if not several and not fresh_keys:
                events = None if slicer is not None else batch_events(rb, args)[0]

            def first_event(i: int, args: list = args) -> dict:
                return build_events(*[a[i : i + 1] for a in args])[0] if args else {}

            columns = [pylist(rb.column(k).take(pa.array(starts))) for k in keys]
            out: list[Any] = []
            src: list[Any] = []
            key_row_of: Any = []
            dense = False
            if fresh_keys:  # the common case in one call: no initial state, timers or TTL
                fresh_args = ([events], None) if inputs is not None else (args, names)
                fresh_keys_of = user_keys(columns, len(starts))
                dense = runner.run_fresh_keys(
                    fresh_keys_of,
                    starts.tolist(),
                    ends,
                    *fresh_args,
                    key_pass.binding(fresh),
                    fresh.reset,  # type: ignore[arg-type]
                    self.now_ms,
                    out,
                    src,
                    inputs,
                )
                # (key_runs' batches: key runs from row 0 to the end, so starts[0] == 0)
                if dense:  # every row made one row: output row j is input row j, its key that row's
                    key_row_of = None if keys_as_rows else np.repeat(starts, np.diff(starts, append=n))
                else:  # each output row's key's first row: the last key start at or before its input row
                    key_row_of = (
                        starts[np.searchsorted(starts, np.asarray(src, np.int64), side="right") - 1] if out else []
                    )
                block_keys: list[tuple] = []
            else:
                block_keys = list(zip(*columns)) if keys else [()] * len(starts)
            for start, e, key_values in zip(starts.tolist(), ends, block_keys):
                s = start
                key_state = fresh.reset()  # (a one-shot batch starts every key afresh and keeps nothing)
                if kinds is not None:
                    while s < e and kinds[s] != InputKind.EVENT:
                        key_pass.initial(
                            key_values, key_state, {c[len(INIT_PREFIX) :]: rb.column(c)[s].as_py() for c in init_cols}
                        )
                        s += 1
                before = len(out)
                if cut is not None:  # a processor fed rows cut from the batch
                    key_pass.run_group(
                        key_values, key_state, cut(s, e) if e > s else None, e - s, lambda s=s: first_event(s), out, src
                    )
                else:
                    key_pass.run(
                        key_values,
                        key_state,
                        events[s:e],
                        out,
                        src,
                        s,
                        inputs=inputs[s:e] if inputs is not None else None,
                    )  # type: ignore[index]
                made = len(out) - before
                if made == 1:
                    key_row_of.append(start)
                elif made:
                    key_row_of.extend([start] * made)
                if not crashed_here:
                    crash_point("processing")
                    crashed_here = True
            if not crashed_here:
                crash_point("processing")
                crashed_here = True
            if out:
                try:
                    batch = output_batch(
                        rb, keys, plan.passthrough, out, key_row_of, None if dense else src, arrow_schema
                    )
                except (OverflowError, pa.ArrowException):
                    if fresh_keys:  # the keys loop leaves integer ranges to this conversion
                        runner.check_rows(out, src, fresh_keys_of, starts.tolist(), *fresh_args)
                    raise
                yield batch
        runner.close()


def output_batch(
    rb: Any, keys: list[str], passthrough: list[str], out: list, key_row_of: Any, src: list | None, schema: Any
) -> Any:
    """Output rows as an Arrow batch: key and pass-through columns taken from the input batch
    (by the key's first row, by the producing row), the returns columns from ``out``. ``src``
    None: output row j is input row j (the pass-through columns are the input's), and so is its
    key's value when ``key_row_of`` is None too."""
    import pyarrow as pa

    fields = list(schema)
    arrays = []
    key_rows = None if key_row_of is None else pa.array(key_row_of, pa.int64())
    for k, f in zip(keys, fields):
        col = rb.column(k) if key_rows is None else rb.column(k).take(key_rows)
        arrays.append(col if col.type == f.type else col.cast(f.type))
    n_ret = len(fields) - len(keys) - len(passthrough)
    columns = transposed(out, n_ret)
    for c, f in zip(columns, fields[len(keys) : len(keys) + n_ret]):
        arrays.append(to_array(c, f.type))
    if passthrough:
        rows = None if src is None else pa.array(src, pa.int64())
        for p, f in zip(passthrough, fields[len(keys) + n_ret :]):
            col = rb.column(p) if rows is None else rb.column(p).take(rows)
            arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_SORTS = {  # (ascending, nulls first) -> the sort by column name
    (True, True): F.asc_nulls_first,
    (True, False): F.asc_nulls_last,
    (False, True): F.desc_nulls_first,
    (False, False): F.desc_nulls_last,
}


def order_columns(plan: KeyedPlan) -> list[Any]:
    """The within-key ORDER BY as Spark sort expressions (ASC/DESC, NULLS FIRST/LAST as given,
    Spark's defaults otherwise); made from the column's name, one JVM call each."""
    out = []
    for o in plan.order:
        nulls_first = o.ascending if o.nulls_first is None else o.nulls_first
        out.append(_SORTS[o.ascending, nulls_first](quote(o.column)))
    return out


def _by_name(columns: list[str]) -> list[Any]:
    """Ascending sorts of ``columns`` (Spark's default: NULLS FIRST), by name."""
    return [F.asc(quote(c)) for c in columns]


# key types whose equal values are the same value: their rows hash alike exactly when they are
# the same key for key_runs, and any row of a key run holds the key's value (no -0.0 / 0.0 or
# NaN: floating keys keep the sort by value, and each run's key is its first row's)
_HASHABLE_KEYS = (
    T.StringType,
    T.IntegralType,
    T.BooleanType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
    T.DecimalType,
    T.BinaryType,
)


def key_hash(columns: list[str]) -> Any:
    """The 64-bit hash a hash-ordered batch sorts by, of the quoted key column names (tests
    narrow it to make keys share one)."""
    return F.xxhash64(*columns)


def hash_ordered(df: DataFrame, plan: KeyedPlan, initial: DataFrame | None) -> bool:
    """Whether a one-shot batch groups its keys by a sort on one 64-bit hash of the key instead
    of the key itself: a sort on one long column is a radix sort in Spark, a sort on a string is
    not (W2 at 100k keys: 0.4 s of a 2.3 s query, measured). Only where nothing else orders the
    rows: no within-key ORDER BY, no initial state; keys of the types above."""
    if not plan.keyed or plan.order or initial is not None:
        return False
    types = {f.name: f.dataType for f in df.schema.fields}
    return all(isinstance(types.get(k), _HASHABLE_KEYS) for k in plan.key_columns)


def combine(df: DataFrame, plan: KeyedPlan, initial: DataFrame | None) -> DataFrame:
    """A one-shot batch's input: events and initial-state rows in one frame, partitioned by key
    and sorted by key, kind (a key's initial-state row first) and the within-key ORDER BY (the
    same sort Spark does anyway, so Python sorts nothing) — or, where ``hash_ordered``, by the
    key's hash alone (``HASH`` column; ``key_runs`` regroups the rare keys sharing one).

    Columns are given by name, projections as one ``selectExpr``: in classic PySpark 4 a
    ``F.col`` or a Column method is about a dozen JVM round trips (it records the call site), a
    name handed to a sort function, ``repartition`` or ``selectExpr`` a few."""
    keys = [quote(k) for k in plan.key_columns]
    needed = {*plan.key_columns, *plan.arg_columns, *plan.passthrough}
    if plan.event_time:
        needed.add(plan.event_time)
    if hash_ordered(df, plan, initial):
        out = df.withColumn(HASH, key_hash(keys))
        out = out.repartition(plan.partitions, *keys) if plan.partitions else out.repartition(*keys)
        out = out.sortWithinPartitions(HASH)
        return _project(out, needed | {HASH})
    out, kind = df, []
    if initial is not None:  # (without one, no kind column: one column less to sort and ship)
        init = initial.selectExpr(
            *keys,
            *(f"{quote(c)} AS {quote(INIT_PREFIX + c)}" for c in initial.columns if c not in plan.key_columns),
            f"{int(InputKind.INIT)} AS {quote(INPUT_KIND)}",
        )
        # a key's initial state row sorts before its events
        out = df.withColumn(INPUT_KIND, F.lit(int(InputKind.EVENT))).unionByName(init, allowMissingColumns=True)
        kind = [INPUT_KIND]
    order = [*_by_name([*plan.key_columns, *kind]), *order_columns(plan)]
    if plan.keyed:
        # no count given: Spark's adaptive execution coalesces the shuffle to what the data
        # needs (a handful of rows: one task, not spark.sql.shuffle.partitions = 200)
        out = out.repartition(plan.partitions, *keys) if plan.partitions else out.repartition(*keys)
    else:
        out = out.repartition(1)
    if order:  # (unkeyed, no ORDER BY, no initial state: rows in arrival order)
        out = out.sortWithinPartitions(*order)
    # the order columns are not read in Python (unless they are arguments or pass-through too)
    return _project(out, needed | {INPUT_KIND, *(c for c in out.columns if c.startswith(INIT_PREFIX))})


def _project(df: DataFrame, needed: set[str]) -> DataFrame:
    """``df``'s columns in ``needed``, in ``df``'s order: one ``selectExpr``."""
    return df.selectExpr(*(quote(c) for c in df.columns if c in needed))

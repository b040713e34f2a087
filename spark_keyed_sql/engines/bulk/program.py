"""The bulk engine's Python pass: many keys per Python call.

The input (and, across micro-batches, the previous state snapshot) is hash-partitioned by key
and sorted by key, then handed to ``mapInArrow``: each Python call walks Arrow batches holding
thousands of keys, runs the registered class key by key with its state in memory, and writes
output rows (and, for a micro-batch, the keys' new state rows) back as Arrow batches. No
Python round trip per key, no state-store call per variable.

A one-shot batch query fires the timers still due at end of input, in timestamp order. A
micro-batch (``bulk_stream``) fires the timers due by the previous batch's watermark (event
time) or the batch's start (processing time), for every key holding state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.context import to_epoch_ms
from ...runtime.faults import crash_point
from ...runtime.plan import KeyedPlan
from ...runtime.runner import KeyedRunner, user_key
from ...state.memory import MemoryKeyState, memory_binding
from ...state.snapshots import KEY_PREFIX
from .state_row import StateRowCodec

__all__ = ["BulkProgram", "combine", "KIND", "STATE", "INIT", "EVENT", "OUT", "NEW_STATE", "STATS", "STATS_FIELDS", "step_schema"]

KIND = "__ks_kind"
STATE, INIT, EVENT = 0, 0, 1  # input kinds: a key's state (or initial state) row sorts before its events
OUT, NEW_STATE, STATS = 0, 1, 2  # output kinds of a micro-batch step
INIT_PREFIX = "__ks_i_"
STATS_FIELDS = [
    T.StructField("__ks_late", T.LongType(), True),
    T.StructField("__ks_max_et", T.LongType(), True),
    T.StructField("__ks_events", T.LongType(), True),
    T.StructField("__ks_keys", T.LongType(), True),
    T.StructField("__ks_timers_fired", T.LongType(), True),
]
BATCH_ROWS = 8192


def step_schema(out: T.StructType, codec: StateRowCodec, n_keys: int) -> T.StructType:
    """A micro-batch step writes output rows, new state rows and one stats row per task; key
    columns are named by position (``__ks_key0``...), as snapshots store them."""
    key_fields = out.fields[:n_keys]
    rest = out.fields[n_keys:]
    return T.StructType(
        [T.StructField(KIND, T.IntegerType(), False)]
        + [T.StructField(f"{KEY_PREFIX}{i}", f.dataType, True) for i, f in enumerate(key_fields)]
        + [T.StructField(f.name, f.dataType, True) for f in rest]
        + codec.fields
        + STATS_FIELDS
    )


@dataclass
class BulkProgram:
    """What each Python task runs (pickled to executors)."""

    plan: KeyedPlan
    out_schema: T.StructType
    step: bool = False  # micro-batch: also emit state rows and stats
    now_ms: int | None = None  # processing time of the micro-batch
    watermark_ms: int | None = None  # the previous batch's watermark (event time)
    has_initial: bool = False

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        plan = self.plan
        codec = StateRowCodec(plan.spec)
        runner = KeyedRunner(plan.spec, plan.order, plan.keyed)
        schema = step_schema(self.out_schema, codec, len(plan.key_columns)) if self.step else self.out_schema
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        width = len(schema.fields)
        n_out = len(self.out_schema.fields)
        keys = plan.key_columns
        event_map = list(zip(plan.event_names, plan.arg_columns))
        pad = (None,) * len(plan.passthrough)
        state_cols = codec.names
        init_cols: list[str] | None = None
        ts_cols: list[str] | None = None
        rows_out: list[tuple] = []
        stats = {"late": 0, "max_et": None, "events": 0, "keys": 0, "fired": 0}
        now = self.now_ms
        wm = self.watermark_ms
        end_of_input = not self.step

        def clock() -> int | None:
            return now

        def emit_out(kv: tuple, produced: list[Any]) -> None:
            if self.step:
                for p in produced:
                    rows_out.append((OUT, *kv, *p) + (None,) * (width - 1 - n_out))
            else:
                for p in produced:
                    rows_out.append((*kv, *p))

        def finish_key(kv: tuple, state_row: dict | None, init_row: dict | None, events: list[dict]) -> None:
            key = user_key(kv, plan.keyed)
            if state_row is not None and not events and not self.step:
                return
            ks = codec.load(state_row) if state_row is not None else MemoryKeyState()
            if state_row is not None and not events and (not ks.timers or not self._due(min(ks.timers))):
                # untouched key: its state row goes through as it is
                rows_out.append((NEW_STATE, *kv) + (None,) * (n_out - len(kv)) + tuple(state_row[c] for c in state_cols) + (None,) * len(STATS_FIELDS))
                return
            stats["keys"] += 1
            binding = memory_binding(ks, clock, plan.spec.ttl_ms)
            if init_row is not None:
                runner.initial_state(key, init_row, binding)
            if events:
                if plan.event_time is not None:
                    ets = [to_epoch_ms(e[plan.event_time]) for e in events if e[plan.event_time] is not None]
                    if ets:
                        m = max(ets)
                        stats["max_et"] = m if stats["max_et"] is None else max(stats["max_et"], m)
                    if wm is not None and self.step:
                        kept = [e for e in events if e[plan.event_time] is None or to_epoch_ms(e[plan.event_time]) > wm]
                        stats["late"] += len(events) - len(kept)
                        events = kept
                stats["events"] += len(events)
                if events:
                    emit_out(kv, runner.process_key(key, events, binding, now, wm, event_map=event_map, passthrough=plan.passthrough))
            while ks.timers:
                t = min(ks.timers)
                if not end_of_input and not self._due(t):
                    break
                ks.timers.discard(t)
                stats["fired"] += 1
                fired = runner.fire_timer(key, t, binding, now, t if end_of_input else wm)
                emit_out(kv, [(*o, *pad) for o in fired])
            if self.step:
                row = codec.dump(ks)
                if row is not None:
                    rows_out.append((NEW_STATE, *kv) + (None,) * (n_out - len(kv)) + row + (None,) * len(STATS_FIELDS))

        def flush() -> Any:
            cols = list(zip(*rows_out)) if rows_out else [[] for _ in range(width)]
            arrays = [pa.array(list(c), type=f.type) for c, f in zip(cols, arrow_schema)]
            rows_out.clear()
            return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

        current: tuple | None = None
        state_row: dict | None = None
        init_row: dict | None = None
        events: list[dict] = []
        started = False
        crashed_here = False
        for rb in batches:
            if ts_cols is None:
                ts_cols = [i for i, f in enumerate(rb.schema) if pa.types.is_timestamp(f.type) and f.type.tz is not None]
                init_cols = [c for c in rb.schema.names if c.startswith(INIT_PREFIX)]
            for i in ts_cols:
                # UTC instants as naive datetimes (what every engine hands user code), cast in C
                rb = rb.set_column(i, rb.schema[i].name, rb.column(i).cast(pa.timestamp(rb.schema[i].type.unit)))
            one_key = len(keys) == 1
            k0 = keys[0] if one_key else None
            for r in rb.to_pylist():
                kv = (r[k0],) if one_key else tuple(r[k] for k in keys)
                if not started or kv != current:
                    if started:
                        finish_key(current, state_row, init_row, events)  # type: ignore[arg-type]
                        if not crashed_here:
                            crash_point("processing")
                            crashed_here = True
                    started, current, state_row, init_row, events = True, kv, None, None, []
                if r[KIND] == EVENT:
                    events.append(r)
                elif self.has_initial:  # a new checkpoint: kind-0 rows are initial state
                    init_row = {c[len(INIT_PREFIX) :]: r[c] for c in init_cols or []}
                else:
                    state_row = r
            if len(rows_out) >= BATCH_ROWS:
                yield flush()
        if started:
            finish_key(current, state_row, init_row, events)  # type: ignore[arg-type]
        if self.step:
            rows_out.append(
                (STATS,) + (None,) * (width - 1 - len(STATS_FIELDS))
                + (stats["late"], stats["max_et"], stats["events"], stats["keys"], stats["fired"])
            )
        if rows_out:
            yield flush()

    def _due(self, t: int) -> bool:
        """Is a timer at ``t`` due in this micro-batch?"""
        if self.plan.event_time is not None:
            return self.watermark_ms is not None and t <= self.watermark_ms
        return self.now_ms is not None and t <= self.now_ms


def combine(df: DataFrame, plan: KeyedPlan, state: DataFrame | None, initial: DataFrame | None) -> DataFrame:
    """Events, state rows and initial-state rows in one frame, partitioned and sorted by key
    with each key's state row first."""
    events = df.withColumn(KIND, F.lit(EVENT))
    parts = [events]
    if state is not None:
        # snapshots name keys by position, so a rewritten query keeps reading them
        renamed = [F.col(f"{KEY_PREFIX}{i}").alias(k) for i, k in enumerate(plan.key_columns)]
        rest = [c for c in state.columns if not c.startswith(KEY_PREFIX)]
        parts.append(state.select(*renamed, *rest).withColumn(KIND, F.lit(STATE)))
    if initial is not None:
        cols = [F.col(k) for k in plan.key_columns] + [
            F.col(c).alias(INIT_PREFIX + c) for c in initial.columns if c not in plan.key_columns
        ]
        parts.append(initial.select(*cols).withColumn(KIND, F.lit(INIT)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p, allowMissingColumns=True)
    if plan.keyed:
        if plan.partitions:
            return out.repartition(plan.partitions, *plan.key_columns).sortWithinPartitions(*plan.key_columns, KIND)
        # no count given: Spark's adaptive execution coalesces the shuffle to what the data
        # needs (a handful of rows: one task, not spark.sql.shuffle.partitions = 200)
        return out.repartition(*plan.key_columns).sortWithinPartitions(*plan.key_columns, KIND)
    return out.repartition(1).sortWithinPartitions(KIND)

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

__all__ = ["BulkProgram", "KeyPass", "combine", "KIND", "INIT", "INIT_PREFIX", "EVENT"]

KIND = "__ks_kind"
STATE, INIT, EVENT = 0, 0, 1  # input kinds: a key's initial state row sorts before its events
INIT_PREFIX = "__ks_i_"
BATCH_ROWS = 8192


class KeyPass:
    """One key's turn in a batch, the same in a one-shot batch and a micro-batch: initial
    state, the key's rows (late rows dropped on a stream), then its timers that are due."""

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
        self.now, self.wm, self.late_wm, self.end_of_input = now_ms, watermark_ms, late_watermark_ms, end_of_input
        self.event_map = list(zip(plan.event_names, plan.arg_columns))
        self.pad = (None,) * len(plan.passthrough)
        self.reset_stats()

    def reset_stats(self) -> None:
        self.stats: dict[str, Any] = {"late": 0, "max_et": None, "events": 0, "keys": 0, "fired": 0}

    def _clock(self) -> int | None:
        return self.now

    def binding(self, ks: MemoryKeyState) -> Any:
        return memory_binding(ks, self._clock, self.plan.spec.ttl_ms)

    def due(self, t: int) -> bool:
        """Is a timer at ``t`` due in this batch?"""
        if self.end_of_input:
            return True
        if self.plan.event_time is not None:
            return self.wm is not None and t <= self.wm
        return self.now is not None and t <= self.now

    def initial(self, kv: tuple, ks: MemoryKeyState, init_row: dict) -> None:
        self.runner.initial_state(user_key(kv, self.plan.keyed), init_row, self.binding(ks))

    def run(self, kv: tuple, ks: MemoryKeyState, events: list[dict]) -> list[Any]:
        """The key's rows, then its due timers; returns the rows it produced."""
        plan, stats = self.plan, self.stats
        key = user_key(kv, plan.keyed)
        binding = self.binding(ks)
        out: list[Any] = []
        stats["keys"] += 1
        if events:
            et = plan.event_time
            if et is not None:
                ets = [to_epoch_ms(e[et]) for e in events if e[et] is not None]
                if ets:
                    m = max(ets)
                    stats["max_et"] = m if stats["max_et"] is None else max(stats["max_et"], m)
                if self.late_wm is not None:
                    kept = [e for e in events if e[et] is None or to_epoch_ms(e[et]) > self.late_wm]
                    stats["late"] += len(events) - len(kept)
                    events = kept
            stats["events"] += len(events)
            if events:
                out += self.runner.process_key(
                    key, events, binding, self.now, self.wm, event_map=self.event_map, passthrough=plan.passthrough
                )
        while ks.timers:
            t = min(ks.timers)
            if not self.due(t):
                break
            ks.timers.discard(t)
            stats["fired"] += 1
            fired = self.runner.fire_timer(key, t, binding, self.now, t if self.end_of_input else self.wm)
            out += [(*o, *self.pad) for o in fired]
        return out


@dataclass
class BulkProgram:
    """A one-shot batch: every key's rows with fresh state, then every timer still due at end
    of input, in timestamp order per key (what each Python task runs; pickled to executors)."""

    plan: KeyedPlan
    out_schema: T.StructType
    now_ms: int | None = None  # the query's processing time
    has_initial: bool = False

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        plan = self.plan
        runner = KeyedRunner(plan.spec, plan.order, plan.keyed)
        key_pass = KeyPass(plan, runner, self.now_ms, None, None, end_of_input=True)
        arrow_schema = to_arrow_schema(self.out_schema, timezone="UTC")
        keys = plan.key_columns
        init_cols: list[str] | None = None
        ts_cols: list[int] | None = None
        rows_out: list[tuple] = []

        def finish_key(kv: tuple, init_row: dict | None, events: list[dict]) -> None:
            ks = MemoryKeyState()
            if init_row is not None:
                key_pass.initial(kv, ks, init_row)
            for p in key_pass.run(kv, ks, events):
                rows_out.append((*kv, *p))

        def flush() -> Any:
            cols = list(zip(*rows_out)) if rows_out else [[] for _ in arrow_schema]
            arrays = [pa.array(list(c), type=f.type) for c, f in zip(cols, arrow_schema)]
            rows_out.clear()
            return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

        current: tuple | None = None
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
                        finish_key(current, init_row, events)  # type: ignore[arg-type]
                        if not crashed_here:
                            crash_point("processing")
                            crashed_here = True
                    started, current, init_row, events = True, kv, None, []
                if r[KIND] == EVENT:
                    events.append(r)
                else:  # kind-0 rows are initial state
                    init_row = {c[len(INIT_PREFIX) :]: r[c] for c in init_cols or []}
            if len(rows_out) >= BATCH_ROWS:
                yield flush()
        if started:
            finish_key(current, init_row, events)  # type: ignore[arg-type]
        if rows_out:
            yield flush()


def combine(df: DataFrame, plan: KeyedPlan, initial: DataFrame | None) -> DataFrame:
    """A one-shot batch's input: events and initial-state rows in one frame, partitioned and
    sorted by key with each key's initial-state row first."""
    out = df.withColumn(KIND, F.lit(EVENT))
    if initial is not None:
        cols = [F.col(k) for k in plan.key_columns] + [
            F.col(c).alias(INIT_PREFIX + c) for c in initial.columns if c not in plan.key_columns
        ]
        out = out.unionByName(initial.select(*cols).withColumn(KIND, F.lit(INIT)), allowMissingColumns=True)
    if plan.keyed:
        if plan.partitions:
            return out.repartition(plan.partitions, *plan.key_columns).sortWithinPartitions(*plan.key_columns, KIND)
        # no count given: Spark's adaptive execution coalesces the shuffle to what the data
        # needs (a handful of rows: one task, not spark.sql.shuffle.partitions = 200)
        return out.repartition(*plan.key_columns).sortWithinPartitions(*plan.key_columns, KIND)
    return out.repartition(1).sortWithinPartitions(KIND)

"""Engine: Spark's row-based ``transformWithState`` with the RocksDB state store.

Attribute state of a StatefulFunction is one ValueState ``attributes`` (a struct, one field
per attribute: typed or JSON-encoded), read once and written once per key per batch. The
typed state of a KeyedProcessor maps one to one onto Spark ValueState/ListState/MapState, so
Spark's own ``statestore`` reader sees them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timezone
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from ..api.context import TimerService
from ..api.state import StateDescriptor, StateStorage
from ..state.spark_types import scalar_wrap, to_spark
from .base import Engine, output_schema
from .faults import crash_point
from .plan import KeyedPlan
from .runner import KeyBinding, KeyedRunner, user_key

__all__ = ["TransformWithStateEngine", "ATTRIBUTES_VAR"]

ATTRIBUTES_VAR = "attributes"


EXPIRES = "__expires_ms"


def _with_expiry(schema: T.StructType) -> T.StructType:
    """A stored row with TTL carries its expiry (epoch ms) as a last field."""
    return T.StructType(schema.fields + [T.StructField(EXPIRES, T.LongType(), True)])


class _SparkVariable(StateStorage):
    """A typed state variable over one Spark state variable (scoped to the current key).

    TTL is kept here, not by Spark: Spark's TTL needs the ProcessingTime time mode, under
    which an ``availableNow`` query never terminates. Each stored value carries an
    ``__expires_ms`` field; expired values are never returned and are removed when seen.
    """

    def __init__(self, handle: StatefulProcessorHandle, desc: StateDescriptor, now: Any):
        from ..api.types import StructType

        self.desc = desc
        self.now = now
        self.struct = isinstance(desc.type, StructType)
        self.ttl = desc.ttl_ms
        schema = scalar_wrap(desc.type)
        self.width = len(schema.fields)
        if self.ttl is not None:
            schema = _with_expiry(schema)
        if desc.kind == "value":
            self.var = handle.getValueState(desc.name, schema)
        elif desc.kind == "list":
            self.var = handle.getListState(desc.name, schema)
        else:
            self.var = handle.getMapState(desc.name, scalar_wrap(desc.key_type), schema)  # type: ignore[attr-defined]

    def _alive(self, row: Any) -> bool:
        return self.ttl is None or row[self.width] is None or self.now() < row[self.width]

    def _unwrap(self, row: Any) -> Any:
        return tuple(row[: self.width]) if self.struct else row[0]

    def _wrap(self, v: Any) -> tuple:
        t = tuple(v) if self.struct else (v,)
        return t if self.ttl is None else (*t, self.now() + self.ttl)

    def value_exists(self) -> bool:
        if not self.var.exists():
            return False
        if self.ttl is not None and not self._alive(self.var.get()):
            self.var.clear()
            return False
        return True

    def value_get(self) -> Any:
        if not self.var.exists():
            return None
        row = self.var.get()  # one read, not value_exists() and then another get()
        if not self._alive(row):
            self.var.clear()
            return None
        return self._unwrap(row)

    def value_set(self, v: Any) -> None:
        self.var.update(self._wrap(v))

    def clear(self) -> None:
        self.var.clear()

    def _list_rows(self) -> list[Any]:
        if not self.var.exists():
            return []
        rows = list(self.var.get())
        if self.ttl is not None:
            live = [r for r in rows if self._alive(r)]
            if len(live) != len(rows):
                self.var.put(live) if live else self.var.clear()
            rows = live
        return rows

    def list_get(self) -> list[Any]:
        return [self._unwrap(r) for r in self._list_rows()]

    def list_append(self, vs: list[Any]) -> None:
        if self.ttl is not None:
            self._list_rows()
        if vs:
            self.var.appendList([self._wrap(v) for v in vs])

    def list_put(self, vs: list[Any]) -> None:
        if vs:
            self.var.put([self._wrap(v) for v in vs])
        else:
            self.var.clear()

    def map_get(self, k: Any) -> Any:
        if not self.var.containsKey((k,)):
            return None
        row = self.var.getValue((k,))
        if not self._alive(row):
            self.var.removeKey((k,))
            return None
        return self._unwrap(row)

    def map_contains(self, k: Any) -> bool:
        return self.map_get(k) is not None

    def map_put(self, k: Any, v: Any) -> None:
        self.var.updateValue((k,), self._wrap(v))

    def map_remove(self, k: Any) -> None:
        self.var.removeKey((k,))

    def map_items(self) -> list[tuple[Any, Any]]:
        if not self.var.exists():
            return []
        out = []
        for kk, vv in list(self.var.iterator()):
            if self._alive(vv):
                out.append((kk[0], self._unwrap(vv)))
            else:
                self.var.removeKey(kk)
        return out


class _SparkTimers(TimerService):
    def __init__(self, handle: StatefulProcessorHandle, enabled: bool):
        self.handle, self.enabled = handle, enabled

    def _check(self) -> None:
        if not self.enabled:
            raise RuntimeError(
                "timers need a streaming query with a time mode; this query runs without one "
                "(define on_timer on the class, and run it as a streaming query)"
            )

    def register(self, ms: int) -> None:
        self._check()
        self.handle.registerTimer(int(ms))

    def delete(self, ms: int) -> None:
        self._check()
        self.handle.deleteTimer(int(ms))

    def list(self) -> list[int]:
        if not self.enabled:
            return []
        return list(self.handle.listTimers())


class _SparkBinding(KeyBinding):
    def __init__(self, proc: _Processor):
        self.proc = proc

    def load_attributes(self) -> Any:
        v = self.proc.attr_var
        if not v.exists():
            return None
        row = v.get()
        ttl = self.proc.plan.spec.ttl_ms
        if ttl is None:
            return row
        if row[-1] is not None and self.proc.now() >= row[-1]:
            v.clear()
            return None
        return row[:-1]

    def save_attributes(self, row: tuple) -> None:
        ttl = self.proc.plan.spec.ttl_ms
        self.proc.attr_var.update(row if ttl is None else (*row, self.proc.now() + ttl))

    def clear_attributes(self) -> None:
        self.proc.attr_var.clear()

    def variable(self, desc: StateDescriptor) -> StateStorage:
        return self.proc.variables[desc.name]

    def timers(self) -> TimerService:
        return self.proc.timer_service


class _Processor(StatefulProcessor):
    def __init__(self, plan: KeyedPlan, time_mode: str, out_names: list[str], ts_columns: list[str]):
        self.plan = plan
        self.time_mode = time_mode
        self.out_names = out_names
        # row-based transformWithState gives tz-aware UTC datetimes; the other engines (and
        # PySpark generally) give naive ones: normalise so every engine hands the same event
        self.ts_columns = ts_columns

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.runner = KeyedRunner(self.plan.spec, self.plan.order, self.plan.keyed)
        self.attr_var = None
        self._batch_now: int | None = None
        if self.runner.layout is not None:
            schema = to_spark(self.runner.layout.schema)
            if self.plan.spec.ttl_ms is not None:
                schema = _with_expiry(schema)
            self.attr_var = handle.getValueState(ATTRIBUTES_VAR, schema)
        self.variables = {name: _SparkVariable(handle, d, self.now) for name, d in self.runner.descriptors.items()}
        self.timer_service = _SparkTimers(handle, self.time_mode != "None")
        self.binding = _SparkBinding(self)
        self.OutRow = Row(*self.out_names)

    def _emit(self, key_values: tuple, rows: list[Any]) -> Iterator[Row]:
        kv = key_values if self.plan.keyed else ()
        for r in rows:
            yield self.OutRow(*kv, *r)

    def now(self) -> int:
        """Processing time for TTL: the batch's, or the wall clock without a time mode."""
        return self._batch_now if self._batch_now is not None else int(time.time() * 1000)

    def _times(self, timer_values: Any) -> tuple[int | None, int | None]:
        p = timer_values.getCurrentProcessingTimeInMs()
        w = timer_values.getCurrentWatermarkInMs()
        self._batch_now = p if p >= 0 else None
        return (p if p >= 0 else None, w if w >= 0 else None)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        crash_point("processing")
        plan = self.plan
        rows_ = [r.asDict() for r in rows]
        for c in self.ts_columns:
            for d in rows_:
                v = d[c]
                if v is not None and v.tzinfo is not None:
                    d[c] = v.astimezone(timezone.utc).replace(tzinfo=None)
        k = user_key(tuple(key), plan.keyed)
        p, w = self._times(timerValues)
        out = self.runner.process_key(
            k, rows_, self.binding, p, w, event_map=list(zip(plan.event_names, plan.arg_columns)), passthrough=plan.passthrough
        )
        return self._emit(tuple(key), out)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        k = user_key(tuple(key), self.plan.keyed)
        p, w = self._times(timerValues)
        out = self.runner.fire_timer(k, expiredTimerInfo.getExpiryTimeInMs(), self.binding, p, w)
        pad = (None,) * len(self.plan.passthrough)
        return self._emit(tuple(key), [(*o, *pad) for o in out])

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        k = user_key(tuple(key), self.plan.keyed)
        row = initialState.asDict(recursive=True)
        for c in self.plan.key_columns:
            row.pop(c, None)
        self.runner.initial_state(k, row, self.binding)

    def close(self) -> None:
        pass


UNKEYED_COLUMN = "__ks_unkeyed__"


class TransformWithStateEngine(Engine):
    name = "tws"

    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        from pyspark.sql import functions as F

        streaming = df.isStreaming
        if not streaming and plan.spec.has_timers:
            # transformWithState has no timers in a batch query; the bulk engine fires the
            # timers still due at end of input (DESIGN: time semantics)
            from .bulk import BulkEngine

            return BulkEngine().apply(df, plan)
        schema = output_schema(df.schema, plan)
        # TTL is handled by _SparkVariable; only timers need a Spark time mode, and Spark
        # allows one per operator: event time when the query names one, else processing time
        needs_time = streaming and plan.spec.has_timers
        time_mode = ("EventTime" if plan.event_time else "ProcessingTime") if needs_time else "None"
        source = df
        group_cols = list(plan.key_columns)
        if not plan.keyed:
            source = df.withColumn(UNKEYED_COLUMN, F.lit(0))
            group_cols = [UNKEYED_COLUMN]
        initial = None
        if plan.initial_state is not None:
            initial = plan.initial_state.groupBy(*group_cols)
        ts_columns = [f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)]
        # the processor is pickled to executors: it must not carry the initial-state DataFrame
        shipped = dataclasses.replace(plan, initial_state=None)
        proc = _Processor(shipped, time_mode, [f.name for f in schema.fields], ts_columns)
        return source.groupBy(*group_cols).transformWithState(
            proc, schema, plan.output_mode, time_mode, initial
        )

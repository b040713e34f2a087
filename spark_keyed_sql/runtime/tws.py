"""Engine: Spark's row-based ``transformWithState`` with the RocksDB state store.

Attribute state of a StatefulFunction is one ValueState ``attributes`` (a struct, one field
per attribute: typed or JSON-encoded), read once and written once per key per batch. The
typed state of a KeyedProcessor maps one to one onto Spark ValueState/ListState/MapState, so
Spark's own ``statestore`` reader sees them.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from ..api.context import TimerService
from ..api.state import StateDescriptor, StateStorage
from ..state.spark_types import scalar_wrap, to_spark
from .base import Engine, output_schema
from .plan import KeyedPlan
from .runner import KeyBinding, KeyedRunner, user_key

__all__ = ["TransformWithStateEngine", "ATTRIBUTES_VAR"]

ATTRIBUTES_VAR = "attributes"


def _unwrap(row: Any, struct: bool) -> Any:
    if row is None:
        return None
    return tuple(row) if struct else row[0]


def _wrap(v: Any, struct: bool) -> tuple:
    return tuple(v) if struct else (v,)


class _SparkVariable(StateStorage):
    """A typed state variable over one Spark state variable (scoped to the current key)."""

    def __init__(self, handle: StatefulProcessorHandle, desc: StateDescriptor, ttl_ok: bool):
        from ..api.types import StructType

        self.desc = desc
        self.struct = isinstance(desc.type, StructType)
        ttl = desc.ttl_ms if ttl_ok else None
        if desc.kind == "value":
            self.var = handle.getValueState(desc.name, scalar_wrap(desc.type), ttl)
        elif desc.kind == "list":
            self.var = handle.getListState(desc.name, scalar_wrap(desc.type), ttl)
        else:
            self.var = handle.getMapState(desc.name, scalar_wrap(desc.key_type), scalar_wrap(desc.type), ttl)  # type: ignore[attr-defined]

    def value_get(self) -> Any:
        return _unwrap(self.var.get(), self.struct)

    def value_exists(self) -> bool:
        return self.var.exists()

    def value_set(self, v: Any) -> None:
        self.var.update(_wrap(v, self.struct))

    def clear(self) -> None:
        self.var.clear()

    def list_get(self) -> list[Any]:
        if not self.var.exists():
            return []
        return [_unwrap(r, self.struct) for r in self.var.get()]

    def list_append(self, vs: list[Any]) -> None:
        if vs:
            self.var.appendList([_wrap(v, self.struct) for v in vs])

    def list_put(self, vs: list[Any]) -> None:
        if vs:
            self.var.put([_wrap(v, self.struct) for v in vs])
        else:
            self.var.clear()

    def map_get(self, k: Any) -> Any:
        return _unwrap(self.var.getValue((k,)), self.struct) if self.var.containsKey((k,)) else None

    def map_contains(self, k: Any) -> bool:
        return self.var.containsKey((k,))

    def map_put(self, k: Any, v: Any) -> None:
        self.var.updateValue((k,), _wrap(v, self.struct))

    def map_remove(self, k: Any) -> None:
        self.var.removeKey((k,))

    def map_items(self) -> list[tuple[Any, Any]]:
        if not self.var.exists():
            return []
        return [(kk[0], _unwrap(vv, self.struct)) for kk, vv in self.var.iterator()]


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
    def __init__(self, proc: "_Processor"):
        self.proc = proc

    def load_attributes(self) -> Any:
        v = self.proc.attr_var
        return v.get() if v.exists() else None

    def save_attributes(self, row: tuple) -> None:
        self.proc.attr_var.update(row)

    def clear_attributes(self) -> None:
        self.proc.attr_var.clear()

    def variable(self, desc: StateDescriptor) -> StateStorage:
        return self.proc.variables[desc.name]

    def timers(self) -> TimerService:
        return self.proc.timer_service


class _Processor(StatefulProcessor):
    def __init__(self, plan: KeyedPlan, time_mode: str, out_names: list[str]):
        self.plan = plan
        self.time_mode = time_mode
        self.out_names = out_names

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.runner = KeyedRunner(self.plan.spec, self.plan.order, self.plan.keyed)
        ttl_ok = self.time_mode != "None"
        self.attr_var = None
        if self.runner.layout is not None:
            ttl = self.plan.spec.ttl_ms if ttl_ok else None
            self.attr_var = handle.getValueState(ATTRIBUTES_VAR, to_spark(self.runner.layout.schema), ttl)
        self.variables = {name: _SparkVariable(handle, d, ttl_ok) for name, d in self.runner.descriptors.items()}
        self.timer_service = _SparkTimers(handle, ttl_ok)
        self.binding = _SparkBinding(self)
        self.OutRow = Row(*self.out_names)
        self.n_keys = len(self.plan.key_columns)

    def _emit(self, key_values: tuple, rows: list[Any]) -> Iterator[Row]:
        kv = key_values if self.plan.keyed else ()
        for r in rows:
            yield self.OutRow(*kv, *r)

    @staticmethod
    def _times(timer_values: Any) -> tuple[int | None, int | None]:
        p = timer_values.getCurrentProcessingTimeInMs()
        w = timer_values.getCurrentWatermarkInMs()
        return (p if p >= 0 else None, w if w >= 0 else None)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        cols = self.plan.arg_columns
        events = [{c: r[c] for c in cols} for r in rows]
        k = user_key(tuple(key), self.plan.keyed)
        p, w = self._times(timerValues)
        out = self.runner.process_key(k, events, self.binding, p, w)
        return self._emit(tuple(key), out)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        k = user_key(tuple(key), self.plan.keyed)
        p, w = self._times(timerValues)
        out = self.runner.fire_timer(k, expiredTimerInfo.getExpiryTimeInMs(), self.binding, p, w)
        return self._emit(tuple(key), out)

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

        schema = output_schema(df.schema, plan)
        streaming = df.isStreaming
        needs_time = streaming and (plan.spec.has_timers or plan.spec.uses_ttl)
        time_mode = "ProcessingTime" if needs_time else "None"
        source = df
        group_cols = list(plan.key_columns)
        if not plan.keyed:
            source = df.withColumn(UNKEYED_COLUMN, F.lit(0))
            group_cols = [UNKEYED_COLUMN]
        initial = None
        if plan.initial_state is not None:
            initial = plan.initial_state.groupBy(*group_cols)
        proc = _Processor(plan, time_mode, [f.name for f in schema.fields])
        return source.groupBy(*group_cols).transformWithState(
            proc, schema, plan.output_mode, time_mode, initial
        )

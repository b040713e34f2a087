"""The StatefulProcessor the transformWithState engine hands Spark: it runs the registered
class through the engine-neutral runner, with the key's state in Spark's state variables.

TTL is applied by the runner's binding, not by Spark: Spark's TTL needs the ProcessingTime
time mode, under which an ``availableNow`` query never terminates. A stored row with TTL
carries its expiry (epoch ms) as a last field (``EXPIRES``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from ...api.context import TimerService
from ...api.state import StateDescriptor, StateKind
from ...api.types import StructType
from ...runtime.clock import now_ms
from ...runtime.faults import crash_point
from ...runtime.keys import user_key
from ...runtime.plan import KeyedPlan
from ...runtime.runner import KeyedRunner
from ...runtime.spark_frames import arrow_types
from ...state.binding import Entry, KeyBinding, KeyStore, VariableStore
from ...state.spark_types import scalar_wrap, to_spark
from .avro_limits import narrow_integer_error, null_element_error, refused_as
from .chunks import ChunkFormat, encode_columns, pack, row_reader
from .layout import ADDED, ATTRIBUTES_VAR, EXPIRES

__all__ = ["KeyedStatefulProcessor"]


def _with_expiry(schema: T.StructType) -> T.StructType:
    return T.StructType(schema.fields + [T.StructField(EXPIRES, T.LongType(), True)])


class _SparkVariable(VariableStore):
    """One Spark state variable (scoped by Spark to the current key) as raw entries."""

    def __init__(self, handle: StatefulProcessorHandle, desc: StateDescriptor, stored_name: str | None = None):
        # stored_name: Spark's name for the variable (its former name, after a rename)
        name = stored_name or desc.name
        self.struct = isinstance(desc.type, StructType)
        self.ttl = desc.ttl_ms is not None
        schema = scalar_wrap(desc.type)
        self.width = len(schema.fields)
        if self.ttl:
            schema = _with_expiry(schema)
        self.schema = schema
        self.what = f"state variable '{desc.name}'"
        key_schema = scalar_wrap(desc.key_type) if desc.kind is StateKind.MAP else T.StructType([])
        # (every field, the key's too, named only once Spark has refused)
        with refused_as(
            lambda exc: narrow_integer_error(exc, self.what, T.StructType(schema.fields + key_schema.fields))
        ):
            if desc.kind is StateKind.VALUE:
                self.var = handle.getValueState(name, schema)
            elif desc.kind is StateKind.LIST:
                self.var = handle.getListState(name, schema)
            else:
                self.var = handle.getMapState(name, key_schema, schema)  # type: ignore[attr-defined]

    def _refused(self, rows: list[tuple]) -> refused_as:
        """A write of ``rows`` that Spark refuses for a None inside a list / map: said as ours."""
        return refused_as(lambda exc: self._null_element(exc, rows))

    def _null_element(self, exc: BaseException, rows: list[tuple]) -> Exception | None:
        names = [f.name for f in self.schema.fields]
        return next((e for r in rows if (e := null_element_error(exc, self.what, names, r)) is not None), None)

    def _entry(self, row: Any) -> Entry:
        value = tuple(row[: self.width]) if self.struct else row[0]
        return value, (row[self.width] if self.ttl else None)

    def _row(self, entry: Entry) -> tuple:
        v, exp = entry
        t = tuple(v) if self.struct else (v,)
        return (*t, exp) if self.ttl else t

    def clear(self) -> None:
        self.var.clear()

    def get(self) -> Entry | None:
        row = self.var.get()  # None when unset: one round trip, not exists() and get()
        return None if row is None else self._entry(row)

    def set(self, entry: Entry) -> None:
        row = self._row(entry)
        with self._refused([row]):
            self.var.update(row)

    def entries(self) -> list[Entry]:
        return [self._entry(r) for r in self.var.get()] if self.var.exists() else []

    def put_entries(self, entries: list[Entry]) -> None:
        rows = [self._row(e) for e in entries]
        with self._refused(rows):
            self.var.put(rows)

    def append_entries(self, entries: list[Entry]) -> None:
        rows = [self._row(e) for e in entries]
        with self._refused(rows):
            self.var.appendList(rows)

    def map_get(self, k: Any) -> Entry | None:
        return self._entry(self.var.getValue((k,))) if self.var.containsKey((k,)) else None

    def map_put(self, k: Any, entry: Entry) -> None:
        row = self._row(entry)
        with self._refused([row]):
            self.var.updateValue((k,), row)

    def map_remove(self, k: Any) -> None:
        self.var.removeKey((k,))

    def map_entries(self) -> list[tuple[Any, Entry]]:
        if not self.var.exists():
            return []
        return [(kk[0], self._entry(vv)) for kk, vv in list(self.var.iterator())]


class _SparkTimers(TimerService):
    def __init__(self, handle: StatefulProcessorHandle, enabled: bool):
        self.handle, self.enabled = handle, enabled
        # the timer on_timer is running for: Spark's handle lists it until the call returns (and
        # then deletes it, even if registered again meanwhile); other paths have removed it already
        self.firing: int | None = None

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
        if not self.enabled:
            return  # no timer can have been registered: nothing to delete (as on bulk)
        self.handle.deleteTimer(int(ms))

    def list(self) -> list[int]:
        if not self.enabled:
            return []
        return [t for t in self.handle.listTimers() if t != self.firing]


class _SparkKeyStore(KeyStore):
    def __init__(self, proc: KeyedStatefulProcessor):
        self.proc = proc
        self.ttl = proc.plan.spec.ttl_ms is not None

    def get_attributes(self) -> Entry | None:
        row = self.proc.attr_var.get()  # None when unset: one round trip
        if row is None:
            return None
        expires = row[-1] if self.ttl else None
        fill = self.proc.attr_fill
        if not fill:
            return (row[:-1] if self.ttl else row), expires
        # attributes added since the state began: a row stored before lacks them (Spark resolves
        # them by name as NULL) and takes their __init__ values; a row written since names them
        width = self.proc.attr_width
        values, held = list(row[:width]), row[width] or ()
        for i, name, fresh in fill:
            if values[i] is None and name not in held:
                values[i] = fresh
        return tuple(values), expires

    def set_attributes(self, row: tuple, expires: int | None) -> None:
        proc = self.proc
        stored = (*row, proc.attr_added) if proc.attr_fill else row
        with refused_as(
            lambda exc: null_element_error(
                exc,
                f"function '{proc.plan.spec.name}', key {proc.current_key!r}, attributes",
                list(proc.runner.layout.names),
                row,
            )
        ):
            proc.attr_var.update((*stored, expires) if self.ttl else stored)

    def clear_attributes(self) -> None:
        self.proc.attr_var.clear()

    def variable(self, desc: StateDescriptor) -> VariableStore:
        return self.proc.variables[desc.name]

    def timers(self) -> TimerService:
        return self.proc.timer_service


_EPOCH = datetime(1970, 1, 1)
_MICRO = timedelta(microseconds=1)


def _naive(v: Any) -> Any:
    """A key value as user code gets it: Spark hands timestamps tz-aware, engines give naive UTC."""
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(timezone.utc).replace(tzinfo=None)
    return v


class KeyedStatefulProcessor(StatefulProcessor):
    variable_class: type[_SparkVariable] = _SparkVariable

    def __init__(
        self,
        plan: KeyedPlan,
        time_mode: str,
        out_names: list[str],
        ts_columns: list[str],
        aware: list[str],
        chunks: ChunkFormat | None = None,
    ):
        self.plan = plan
        self.time_mode = time_mode
        self.out_names = out_names
        # timestamp columns arrive as epoch microseconds (the engine ships them so: the row
        # transport makes a slow pyarrow Scalar per timestamp); handed on as naive UTC
        # datetimes, what every engine gives user code
        self.ts_columns = ts_columns
        # the event-time column stays a timestamp: row-based transformWithState gives it tz-aware
        self.aware = aware
        # chunked transport (chunks.py): a key's rows arrive in chunks, and its output leaves
        # as one chunk per call; None: a Row per row both ways
        self.chunks = chunks

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.runner = KeyedRunner(self.plan.spec, self.plan.order, self.plan.keyed, self.plan.input_names)
        if self.plan.broadcast_state is not None:
            self.runner.use_broadcasts(self.plan.broadcast_state, self.plan.event_time_name)
        self.runner.column_types = arrow_types(self.plan.arg_types)
        self.attr_var = None
        self.current_key: Any = None  # (named by a store error)
        self.attr_fill: list[tuple[int, str, Any]] = []
        self._batch_now: int | None = None
        if self.runner.layout is not None:
            layout = self.runner.layout
            # each field under the name its values are stored by (a renamed attribute: its former)
            schema = T.StructType(
                [T.StructField(self.plan.stored_name(f.name), f.dataType, f.nullable) for f in to_spark(layout.schema)]
            )
            # (index, stored name, stored __init__ value) of the attributes a row stored before they were
            # added lacks: Spark's Avro encoding resolves a stored row by name, giving NULL for
            # them; rows written since carry ADDED, the names they hold (layout.py)
            self.attr_width = len(layout.names)
            self.attr_fill = [
                (i, self.plan.stored_name(n), v)
                for i, (n, v) in enumerate(zip(layout.names, layout.fresh_row))
                if n in self.plan.absent_attributes
            ]
            self.attr_added = [n for _, n, _ in self.attr_fill]  # (written with each row)
            if self.attr_fill:
                schema = T.StructType(schema.fields + [T.StructField(ADDED, T.ArrayType(T.StringType()), True)])
            if self.plan.spec.ttl_ms is not None:
                schema = _with_expiry(schema)
            with refused_as(
                lambda exc: narrow_integer_error(exc, f"function '{self.plan.spec.name}', attributes", schema)
            ):
                self.attr_var = handle.getValueState(ATTRIBUTES_VAR, schema)
        self.variables = {
            name: self.variable_class(handle, d, self.plan.stored_name(name))
            for name, d in self.runner.descriptors.items()
        }
        self.timer_service = _SparkTimers(handle, self.time_mode != "None")
        self.touches = self.plan.key_touches
        if self.touches is not None:
            self.touches.reset()
        self.binding = KeyBinding(_SparkKeyStore(self), self.now, self.plan.spec.ttl_ms)
        self.OutRow = Row(*self.out_names)
        if self.chunks is not None:
            key_names = list(self.plan.key_columns) if self.plan.keyed else []
            self.read_chunks = row_reader(self.chunks.names, self.chunks.kinds, key_names)

    def _emit(self, key_values: tuple, rows: list[Any]) -> Iterator[Row]:
        kv = key_values if self.plan.keyed else ()
        if self.chunks is not None:
            if rows:
                columns = encode_columns(self.chunks.out_kinds, list(zip(*rows)))
                yield self.OutRow(*kv, pack(len(rows), columns))
            return
        for r in rows:
            yield self.OutRow(*kv, *r)

    def now(self) -> int:
        """Processing time for TTL: the batch's, or the wall clock without a time mode."""
        return (self._batch_now if self._batch_now is not None else now_ms()) + self.plan.clock_offset_ms

    def _times(self, timer_values: Any) -> tuple[int | None, int | None]:
        p = timer_values.getCurrentProcessingTimeInMs()
        w = timer_values.getCurrentWatermarkInMs()
        self._batch_now = p if p >= 0 else None
        return (p if p >= 0 else None, w if w >= 0 else None)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        crash_point("processing")
        if self.chunks is not None:
            kv = tuple(_naive(v) for v in key) if self.plan.keyed else ()
            rows_ = self.read_chunks(kv, [r[-1] for r in rows])
        else:
            rows_ = self._row_dicts(rows)
        return self._run(tuple(key), rows_, timerValues)

    def _run(self, key: tuple, rows: list[dict], timerValues: Any) -> Iterator[Row]:
        plan = self.plan
        k = self.current_key = user_key(key, plan.keyed)
        if self.touches is not None:
            self.touches.input(tuple(_naive(v) for v in key))
        p, w = self._times(timerValues)
        out = self.runner.process_key(
            k,
            rows,
            self.binding,
            p,
            w,
            event_map=list(zip(plan.event_names, plan.arg_columns)),
            passthrough=plan.passthrough,
            input_maps=[list(i.event_map) for i in plan.inputs] if plan.inputs else None,
            input_column=plan.input_column,
        )
        return self._emit(key, out)

    def _row_dicts(self, rows: Iterator[Row]) -> list[dict]:
        rows_ = [r.asDict() for r in rows]
        for c in self.ts_columns:
            for d in rows_:
                v = d[c]
                if v is not None:
                    d[c] = _EPOCH + v * _MICRO
        for c in self.aware:
            for d in rows_:
                v = d[c]
                if v is not None and v.tzinfo is not None:
                    d[c] = v.astimezone(timezone.utc).replace(tzinfo=None)
        return rows_

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        k = self.current_key = user_key(tuple(key), self.plan.keyed)
        if self.touches is not None:
            self.touches.timer(tuple(_naive(v) for v in key))
        p, w = self._times(timerValues)
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.timer_service.firing = expiry
        try:
            out = self.runner.fire_timer(k, expiry, self.binding, p, w)
        finally:
            self.timer_service.firing = None
        pad = (None,) * len(self.plan.passthrough)
        return self._emit(tuple(key), [(*o, *pad) for o in out])

    def handleInitialState(self, key: Any, initialState: Row, timerValues: Any) -> None:
        k = self.current_key = user_key(tuple(key), self.plan.keyed)
        row = initialState.asDict(recursive=True)
        for c in self.plan.key_columns:
            row.pop(c, None)
        self.runner.initial_state(k, row, self.binding)

    def close(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close()

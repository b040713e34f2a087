"""Engine-neutral execution of one registered class, one key at a time.

Every engine (bulk, transformWithState, the table function, KeyedTester) hands the runner a
key, that key's rows and a ``KeyBinding`` (where the key's state lives); the runner does the rest:
state in, user code, state out, output rows checked against ``returns``. Keeping this in one
place is what makes the engines agree.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any

from ..api.context import from_epoch_ms
from ..api.errors import KeyedSQLError, OutputSchemaError, StateTypeError, UserFunctionError
from ..api.rows import check_rows_format
from ..api.values import short_repr
from ..compat.codegen import generated_function
from ..state.attributes import AttributeLayout
from ..state.binding import KeyBinding
from ..state.encoding import loads
from .key_lifecycle import KeyLifecycle
from .key_rows import rows_builder
from .keys import OrderSpec, sort_rows
from .output import Where, normalize_output, normalizer, resolve_where, tuple_converter
from .row_loop import keys_loop, row_loop
from .spec import FunctionKind, FunctionSpec, check_process_inputs

__all__ = ["KeyedRunner"]


@lru_cache(maxsize=64)
def _event_maker(event_map: tuple[tuple[str, str], ...]) -> Callable[[list[dict]], list[dict]]:
    """rows -> a fresh event dict per row, ``{event name: row[column]}`` (generated per map:
    a dict display is several times a dict comprehension's speed)."""
    env: dict[str, Any] = {}
    items = []
    for i, (name, col) in enumerate(event_map):
        env[f"n{i}"], env[f"c{i}"] = name, col
        items.append(f"n{i}: r[c{i}]")
    src = f"def make(rows):\n    return [{{{', '.join(items)}}} for r in rows]\n"
    return generated_function(src, "make", env, "event map")


def _rows_where(count: int, first: Callable[[], Any]) -> str:
    """Where a processor's call failed: its rows, by count and first row."""
    return f"{count} row(s), first {short_repr(first(), 300)}"


@dataclass
class KeyedRunner(KeyLifecycle):
    spec: FunctionSpec
    order: list[OrderSpec] = field(default_factory=list)
    keyed: bool = True
    # the names of the function's inputs, in argument order, when it has several (None: one)
    inputs: list[str] | None = None

    def __post_init__(self) -> None:
        self.instance = self.spec.instantiate()
        self.ctx = self.instance.ctx
        self.call = self.ctx.call  # the current key, re-pointed at each key (api/context.KeyCall)
        self.call.no_on_timer = None if self.spec.has_timers else self.spec.cls.__name__
        self.layout = AttributeLayout(self.instance) if self.spec.kind is FunctionKind.FUNCTION else None
        self.descriptors = self.spec.descriptors
        # what a KeyedProcessor's process(key, rows) gets as rows (checked at registration)
        self.rows_format = check_rows_format(self.spec.cls) if self.spec.kind is FunctionKind.PROCESSOR else "pandas"
        self._normalize = normalizer(self.spec.returns)
        # a [tuple] of the returns' width goes straight to the generated converter
        self._from_tuple, self._width = (
            (tuple_converter(self.spec.returns), len(self.spec.returns.fields)) if self.spec.returns else (None, 0)
        )
        # a StatefulFunction's rows, generated per returns (and for several inputs)
        self._row_loop = row_loop(self.spec.returns, several_inputs=bool(self.inputs))
        if self.inputs and self.spec.kind is FunctionKind.PROCESSOR:
            check_process_inputs(self.spec, self.inputs)
        # a key's state may stay in the live instance between its events and its timers of the
        # same pass when storing and reloading it would change nothing (no TTL to re-check on load)
        self._may_hold = self.layout is not None and self.spec.ttl_ms is None
        self.held = False  # did the last fire_timer(hold=True) leave the key live?
        self._clear_fn = self._clear_current  # what ctx.clear_state() calls (one bound method, not one per key)
        # a KeyedProcessor's rows columns (source column, or event name) -> Arrow type, to type
        # them as PySpark does (runtime/spark_frames.py); a column not here: from its values
        self.column_types: dict[str, Any] = {}
        self._execute: Any = None  # execute as the row loops call it (use_broadcasts: the row's time first)
        self._versioned_broadcast = False  # a timer reads versioned broadcast state as of its time

    def use_broadcasts(self, state: Any, event_time_name: str | tuple[str, ...] | None) -> None:
        """The query's broadcast state (runtime/broadcast.py), read through ``self.ctx.broadcast``;
        with versioned state (``event_time``), each row reads it as of the row's event time
        (``event_time_name``: that column's name in the event dicts, one per input's spelling)
        and each timer as of its time."""
        self.call.broadcasts = state
        self._versioned_broadcast = state is not None and any(t.versioned for t in state.tables.values())
        if not self._versioned_broadcast or event_time_name is None or self.layout is None:
            return
        names = (event_time_name,) if isinstance(event_time_name, str) else tuple(event_time_name)
        execute, call = self.instance.execute, self.call
        from ..api.context import to_epoch_ms

        def execute_at(event: dict) -> Any:
            t = None
            for n in names:  # (the spelling of the row's own input)
                t = event.get(n)
                if t is not None:
                    break
            call.as_of_ms = to_epoch_ms(t) if t is not None else None
            return execute(event)

        self._execute = execute_at

    def _types(self, columns: list[str]) -> list[Any]:
        return [self.column_types.get(c) for c in columns]

    def _call(self, key: Any, where: Where, fn: Any, *args: Any) -> list[Any]:
        """Call user code; ``where`` (a string, or a callable building it) only on error."""
        try:
            result = fn(*args)
        except Exception as exc:
            raise UserFunctionError(self.spec.name, key, resolve_where(where), exc) from exc
        return self._checked(key, where, result)

    def _checked(self, key: Any, where: Where, result: Any) -> list[Any]:
        """User code's result as output rows (a generator's user code runs here)."""
        try:
            return normalize_output(
                result, self.spec.returns, lambda: f"function '{self.spec.name}' (key {key!r}, {resolve_where(where)})"
            )
        except OutputSchemaError:
            raise
        except Exception as exc:
            raise UserFunctionError(self.spec.name, key, resolve_where(where), exc) from exc

    def close(self) -> None:
        """The end of a task's (or, on ``tws``, a partition's) pass: a pyspark StatefulProcessor's
        ``close()`` runs here, as Spark calls it at the end of each partition of a batch."""
        if self.spec.kind is not FunctionKind.PROCESSOR:
            return
        try:
            self.instance.close()
        except Exception as exc:
            raise UserFunctionError(self.spec.name, None, "close()", exc) from exc

    # ------------------------------------------------------------ entry points
    def run_function(
        self,
        key: Any,
        events: list[dict],
        binding: KeyBinding,
        processing_ms: int | None,
        watermark_ms: int | None,
        out: list,
        src: list,
        src0: int = 0,
        *,
        hold: bool = False,
        inputs: list[str] | None = None,
    ) -> bool:
        """A StatefulFunction over one key's events, in order: output rows (tuples in returns
        order) appended to ``out`` and, for each, the position of the event that produced it
        (``src0`` + its index) to ``src``. The hottest loop of every engine: one pass per row.
        ``inputs``: each event's input name (a function with several inputs).

        ``hold``: leave the key live (its state in the instance, not stored yet) and return True;
        the caller then fires its due timers (``fire_timer(live=self.stays_live())``, ending it
        first when that is False) or calls ``release``. A key without timers is thus stored once,
        with no check whether it could have stayed live."""
        self._begin(key, binding, processing_ms, watermark_ms)
        held = False
        try:
            self._row_loop(events, src0, self._execute or self.instance.execute, out, src, self, self.call, key, inputs)
            held = hold
            if not held:
                self._end(key, binding)
            return held
        finally:
            if not held and self.call.active:  # (an error: end the key all the same)
                self._end(key, binding)

    def run_fresh_keys(
        self,
        keys: list,
        starts: list[int],
        ends: list[int],
        columns: list[list],
        names: list[str] | None,
        binding: KeyBinding,
        next_key: Callable[[], None],
        processing_ms: int | None,
        out: list,
        src: list,
        inputs: list[str] | None = None,
    ) -> bool:
        """Keys of a one-shot batch for a StatefulFunction without timers or TTL: each key from
        the state ``__init__`` makes, its rows ``starts[i]`` to ``ends[i]`` in order (each key's
        rows end where the next key's start), its state not kept (``run_function`` then
        ``discard`` per key, the key's call set up once for all of them). ``columns``: one list
        per argument, ``names`` their names (each row's event is built from them); with several
        inputs ``[events]`` (``names`` None) and each event's input in ``inputs``. ``next_key()``
        empties ``binding``'s state for the next key. Output rows go to ``out`` and their input
        rows to ``src`` as ``run_function`` puts them, except that ``src`` stays empty while every
        row made exactly one row; True when that held for the whole batch (output row j is then
        input row ``starts[0] + j``). Integers of the common result are range-checked by the
        Arrow conversion, not here: when it refuses one, ``check_rows`` names the row."""
        call, instance, layout = self.call, self.instance, self.layout
        assert layout is not None
        loop = keys_loop(
            self.spec.returns,
            None if self.inputs else len(columns),
            copies=bool(layout.copied),
            live=layout.live_source,
        )
        call.processing_ms, call.watermark_ms = processing_ms, None
        call.timers, call.clear = binding, self._clear_fn
        call.keyed = self.keyed
        self._binding = binding
        try:
            return loop(
                keys,
                starts,
                ends,
                columns,
                names,
                self._execute or instance.execute,
                out,
                src,
                self,
                call,
                next_key,
                instance,
                layout,
                inputs,
            )
        except KeyedSQLError:
            # an earlier row's integer out of range (not checked in the loop) came first
            self.check_rows(out, src, keys, starts, columns, names)
            raise
        finally:
            self._leave()

    def check_rows(
        self, out: list, src: list, keys: list, starts: list[int], columns: list[list], names: list[str] | None
    ) -> None:
        """The output rows of ``run_fresh_keys`` (same arguments) checked the general way, in
        order: raises the first bad one's error, naming function, key and row (what the Arrow
        conversion refused: an integer out of range). The row is shown as it came in, rebuilt
        from ``columns`` (not as ``execute`` may have changed its dict)."""
        # src shorter than out: every row so far made one row (run_fresh_keys)
        rows = src if len(src) == len(out) else range(starts[0], starts[0] + len(out))
        for item, row in zip(out, rows):
            key = keys[bisect_right(starts, row) - 1]
            event = columns[0][row] if names is None else {n: c[row] for n, c in zip(names, columns)}
            self._general_row(key, event, [item], row, [], [])

    def _row_failed(self, key: Any, event: Any, exc: Exception) -> None:
        """A row's ``execute`` raised (called by the row loop, inside its ``except``)."""
        raise UserFunctionError(self.spec.name, key, f"row {short_repr(event, 300)}", exc) from exc

    def _general_row(self, key: Any, event: Any, result: Any, i: int, out: list, src: list) -> None:
        """A row's result that is not one tuple of exact types: checked and converted here (a
        generator's user code runs here)."""
        name = self.spec.name
        try:
            produced = self._normalize(result, lambda: f"function '{name}' (key {key!r}, row {short_repr(event, 300)})")
        except OutputSchemaError:
            raise
        except Exception as exc:
            raise UserFunctionError(name, key, f"row {short_repr(event, 300)}", exc) from exc
        out.extend(produced)
        src.extend([i] * len(produced))

    def run_processor(
        self,
        key: Any,
        rows: Any,
        count: int,
        first: Any,
        binding: KeyBinding,
        processing_ms: int | None,
        watermark_ms: int | None,
        out: list,
    ) -> None:
        """A KeyedProcessor's ``process(key, rows)`` with ``rows`` the key's frame (or records);
        ``first()`` gives its first event for an error message. With several inputs ``rows`` is
        ``{input name: its rows}`` and ``process`` takes them by name."""
        self._begin(key, binding, processing_ms, watermark_ms)
        try:
            try:
                result = self.instance.process(key, **rows) if self.inputs else self.instance.process(key, rows)
            except Exception as exc:
                raise UserFunctionError(self.spec.name, key, _rows_where(count, first), exc) from exc
            one = self._from_tuple
            # one tuple of the returns' width (an aggregate per key): the generated check
            if one is not None and type(result) is list and len(result) == 1:
                item = result[0]
                if type(item) is tuple and len(item) == self._width:
                    try:
                        out.append(one(item))
                        return
                    except StateTypeError:
                        pass  # normalize says what is wrong
            out.extend(self._checked(key, lambda: _rows_where(count, first), result))
        finally:
            self._end(key, binding)

    def process_key(
        self,
        key: Any,
        rows: list[dict],
        binding: KeyBinding,
        processing_ms: int | None = None,
        watermark_ms: int | None = None,
        *,
        event_map: list[tuple[str, str]] | None = None,
        passthrough: list[str] | None = None,
        input_maps: list[list[tuple[str, str]]] | None = None,
        input_column: str | None = None,
    ) -> list[Any]:
        """All of one key's rows of one batch. Returns output rows (tuples in returns order).

        ``event_map`` (event name, row column) builds each event from a wider row (default: the
        row is the event); ``passthrough`` row columns are appended to every output row a
        StatefulFunction produced from that row. Several inputs: ``row[input_column]`` is the
        index of the row's input, ``input_maps[i]`` that input's event map; rows of one order
        position keep the order of the inputs."""
        if self.inputs and input_maps is not None and input_column is not None:
            return self._process_inputs(key, rows, binding, processing_ms, watermark_ms, input_maps, input_column)
        rows = sort_rows(rows, self.order)
        events = rows if event_map is None else _event_maker(tuple(event_map))(rows)
        out: list[Any] = []
        if self.layout is not None:
            src: list[int] = []
            self.run_function(key, events, binding, processing_ms, watermark_ms, out, src)
            if len(passthrough or ()) == 1:
                get = itemgetter(passthrough[0])  # type: ignore[index]
                out = [(*o, get(rows[i])) for o, i in zip(out, src)]
            elif passthrough:
                get = itemgetter(*passthrough)
                out = [(*o, *get(rows[i])) for o, i in zip(out, src)]
            return out
        columns = [n for n, _ in event_map] if event_map is not None else (list(events[0].keys()) if events else [])
        types = [self.column_types.get(c) for _, c in event_map] if event_map is not None else self._types(columns)
        arg = rows_builder(self.rows_format, columns, types)(events)
        self.run_processor(
            key, arg, len(events), lambda: events[0] if events else None, binding, processing_ms, watermark_ms, out
        )
        return out

    def _process_inputs(
        self,
        key: Any,
        rows: list[dict],
        binding: KeyBinding,
        processing_ms: int | None,
        watermark_ms: int | None,
        input_maps: list[list[tuple[str, str]]],
        input_column: str,
    ) -> list[Any]:
        """``process_key`` for a function with several inputs (``self.inputs``)."""
        assert self.inputs is not None
        rows = sort_rows(rows, [*self.order, OrderSpec(input_column)])
        makers = [_event_maker(tuple(m)) for m in input_maps]
        which = [r[input_column] for r in rows]
        out: list[Any] = []
        if self.layout is not None:
            events = [makers[i]([r])[0] for i, r in zip(which, rows)]
            self.run_function(
                key, events, binding, processing_ms, watermark_ms, out, [], inputs=[self.inputs[i] for i in which]
            )
            return out
        frames = {}
        for i, (name, m) in enumerate(zip(self.inputs, input_maps)):
            mine = makers[i]([r for r, w in zip(rows, which) if w == i])
            frames[name] = rows_builder(self.rows_format, [n for n, _ in m], [self.column_types.get(c) for _, c in m])(
                mine
            )
        first = rows[0] if rows else None
        self.run_processor(key, frames, len(rows), lambda: first, binding, processing_ms, watermark_ms, out)
        return out

    def fire_timer(
        self,
        key: Any,
        expiry_ms: int,
        binding: KeyBinding,
        processing_ms: int | None = None,
        watermark_ms: int | None = None,
        *,
        live: bool = False,
        hold: bool = False,
    ) -> list[Any]:
        """``on_timer`` for one timer. ``live``: the key was held by the previous call (its state
        is in the instance); ``hold``: keep it live again if nothing would change (see
        ``held``), else end it."""
        if live:
            self._resume(key, processing_ms, watermark_ms)
        else:
            self._begin(key, binding, processing_ms, watermark_ms)
        self.held = False
        self.call.input = None  # (in on_timer no row came from an input; a held key kept its last row's)
        try:
            ts = from_epoch_ms(expiry_ms)
            if self._versioned_broadcast:
                self.call.as_of_ms = expiry_ms  # (versioned broadcast state: as of the timer's time)
            out = self._call(key, lambda: f"timer {ts.isoformat()}", self.instance.on_timer, key, ts)
            self.held = self._hold_or_end(key, binding, hold)
            return out
        finally:
            self.call.as_of_ms = None
            if not self.held and self.call.active:
                self._end(key, binding)

    def _seed_value(self, name: str, v: Any) -> Any:
        """An initial-state column for an attribute: encoded attributes take the JSON text
        that read_state shows (or a plain value); typed attributes take their typed value."""
        assert self.layout is not None
        if self.layout.is_encoded(name) and isinstance(v, str):
            try:
                return loads(v)  # (text that is JSON reads as JSON: every read_state value seeds back)
            except ValueError as exc:
                if isinstance(self.instance.__dict__.get(name), str):  # a str attribute (its __init__
                    return v  # value, just set) also takes text that is no JSON: 'ab' as well as '"ab"'
                raise KeyedSQLError(
                    f"initial state column '{name}' for '{self.spec.name}' must hold the attribute's JSON "
                    f"encoding (as read_state shows it), got {short_repr(v, 300)}: {exc}"
                ) from None
        return v

    def initial_state(self, key: Any, state_row: dict, binding: KeyBinding) -> None:
        """Seed one key's state from a row of an initial-state table."""
        self._begin(key, binding, None, None)
        try:
            if self.layout is not None:
                unknown = [c for c in state_row if c not in self.layout.names]
                if unknown:
                    raise KeyedSQLError(
                        f"initial state for '{self.spec.name}' has column(s) {unknown} that are not state "
                        f"attributes of {self.spec.cls.__name__} ({', '.join(self.layout.names)})"
                    )
                for name, v in state_row.items():
                    self.instance.__dict__[name] = self._seed_value(name, v)
            else:
                self._call(
                    key, f"initial state {short_repr(state_row, 300)}", self.instance.on_initial_state, key, state_row
                )
        finally:
            self._end(key, binding)

"""KeyedTester: run a StatefulFunction or KeyedProcessor in-process, without Spark."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .api.context import to_epoch_ms
from .api.errors import KeyedSQLError
from .api.intervals import parse_ttl_ms
from .api.state import StateKind
from .api.values import to_user
from .runtime.broadcast import BroadcastInput, BroadcastState, broadcast_hook
from .runtime.columns import parse_column_list, parse_order_list
from .runtime.key_rows import rows_builder
from .runtime.keys import sort_rows
from .runtime.output import rows_as_dicts
from .runtime.runner import KeyedRunner
from .runtime.spark_frames import arrow_types, arrow_types_of, column_ddl, ddl_of, infer_arrow_type
from .runtime.spec import FunctionKind, FunctionSpec, processor_inputs
from .runtime.timers import FireGuard
from .state.binding import KeyBinding
from .state.memory import MemoryKeyState, memory_binding

__all__ = ["FiredRows", "KeyedTester", "tester_for"]

log = logging.getLogger(__name__)

_UNKEYED = object()


_TIME_MODES = ("event", "processing")


def _schema_types(schema: Any, name: str) -> dict[str, Any]:
    """column -> Arrow type from what ``schema=`` may be: DDL text, a pyspark StructType or a
    DataFrame (its ``schema``), or ``{column: "<Spark type>"}``."""
    if isinstance(schema, str):
        return arrow_types_of(schema)
    if isinstance(schema, Mapping):
        ddl = {str(c): str(t) for c, t in schema.items()}
    else:
        fields = getattr(getattr(schema, "schema", schema), "fields", None)  # a DataFrame, or a StructType
        if fields is None or not all(hasattr(f, "dataType") for f in fields):
            raise KeyedSQLError(
                f"KeyedTester({name}): schema= takes DDL text ('id string, ts timestamp'), a pyspark StructType, "
                f"a DataFrame or {{column: '<Spark type>'}}; got {type(schema).__name__}"
            )
        ddl = column_ddl(fields)
    types = arrow_types(ddl)
    unknown = [c for c in ddl if c not in types]
    if unknown and isinstance(schema, Mapping):
        raise KeyedSQLError(
            f"KeyedTester({name}): schema= {', '.join(f'{c} {ddl[c]!r}' for c in unknown)}: not a Spark type "
            "this tester knows (e.g. 'bigint', 'timestamp', 'array<string>')"
        )
    return types


def _row(row: Any) -> dict:
    """A row as a dict: a dict (or mapping) as given, a pyspark Row through ``asDict`` (nested
    Rows too: struct values are dicts, as the engines hand them)."""
    return row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)


def _key(key: Any) -> Any:
    """A key of several columns given as a list is the tuple ``get_key()`` returns."""
    return tuple(key) if isinstance(key, list) else key


def _slot(key: Any) -> tuple[bool, Any]:
    """(keyed, key) of a key argument: omitted is unkeyed use."""
    return (key is not _UNKEYED, None if key is _UNKEYED else _key(key))


class FiredRows(list):
    """The rows timers gave (``set_watermark`` / ``advance_processing_time``): a list of output
    dicts as ``run`` returns, in firing order, and ``row_keys``, the key each row's timer fired
    for (in SQL the query's key columns say it), with ``by_key()`` grouping them. (Not ``keys``:
    a list with a ``keys`` attribute is taken for a mapping by ``dict()``.)"""

    def __init__(self, rows: Iterable[Any] = (), keys: Iterable[Any] = ()):
        super().__init__(rows)
        self.row_keys: list[Any] = list(keys)

    def by_key(self) -> dict[Any, list[Any]]:
        out: dict[Any, list[Any]] = {}
        for key, row in zip(self.row_keys, self):
            out.setdefault(key, []).append(row)
        return out


_SPEC = "__ks_spec"  # (tester_for hands the registration over under this project's __ks_ prefix)


class KeyedTester:
    """``run(rows, key=...)`` processes one batch for one key and returns its output dicts.

    Time is yours to move: ``advance_processing_time(ts)`` drives processing-time TTL and
    timers, ``set_watermark(ts)`` event-time timers; both return what fired timers emitted.
    Timers belong to one clock, as under Spark (event time with ``EVENT TIME ... WATERMARK``,
    processing time without): ``time_mode="event"`` or ``"processing"`` says which; left out,
    the tester is in event time from the first ``set_watermark`` on, and the processing clock
    then moves TTL only.

    ``initial_state`` seeds keys before the first batch, as ``INITIAL STATE FROM`` does in the
    engines (and ``initialStateRow`` in Spark's ``TwsTester``): ``{key: row}`` or ``(key, row)``
    pairs, each row a dict (or Row) of state columns without the key columns.

    A function with several inputs gets each batch's rows with the input they came from:
    ``run(rows, key=..., input="clicks")`` (``self.ctx.input`` in ``execute``; a KeyedProcessor's
    ``process(key, <one frame per input>)``, the other inputs' frames empty). ``inputs`` names
    them, for an unknown name to be refused; a KeyedProcessor's are its ``process`` parameters.
    ``inputs={"profiles": "member_id string, region string", ...}`` also gives each input's
    columns (DDL, ``{column: type}``, a StructType or a list of names): an input without rows
    yet gets an empty frame with them (``ks.tester(query)`` gives them from the query).

    A KeyedProcessor's ``rows`` are the frame PySpark's ``applyInPandas`` would hand for the
    same rows (docs/api.md, "What a rows frame holds"): ``schema`` gives the input's Spark types
    as DDL (``schema="id string, eventTime timestamp, n int"``: ``n`` is then int32, the
    timestamps datetime64[ns]). Without it, each column's type is what Spark infers from its
    first values (``createDataFrame``'s rules: a Python int is ``bigint``, a float ``double``, a
    datetime ``timestamp``); the tester logs once what it inferred. ``rows_format="records"``
    rows are the dicts as given. ``schema`` may also be a pyspark ``StructType``, a DataFrame
    (its schema), or ``{column: "<Spark type>"}``; ``ks.tester(query)`` makes a tester whose
    schema is the one the registered SQL gives the function.
    """

    def __init__(
        self,
        cls: type,
        returns: str | None = None,
        *,
        order_by: str | list[str] | None = None,
        ttl: str | None = None,
        initial_state: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None = None,
        inputs: Iterable[str] | Mapping[str, Any] | None = None,
        time_mode: str | None = None,
        schema: Any = None,
        broadcast: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
        broadcast_key: str | list[str] | None = None,
        event_time: str | None = None,
        **kwargs: Any,
    ):
        name = getattr(cls, "__name__", type(cls).__name__)  # a pyspark StatefulProcessor may be an instance
        spec = (
            kwargs.pop(_SPEC)
            if _SPEC in kwargs  # (tester_for: a registration, whose kwargs may share a name with an option)
            else FunctionSpec.build(name, cls, returns, kwargs, require_returns=False)
        )
        if ttl is not None:
            spec = spec.with_ttl(parse_ttl_ms(ttl, "KeyedTester ttl="))
        self.spec = spec
        self._order = parse_order_list(order_by)
        # inputs: names, or {name: its columns} (DDL text, {column: type}, a StructType or a list
        # of names), so that an input without rows yet gets an empty frame with its columns
        per_input = dict(inputs) if isinstance(inputs, Mapping) else {}
        self.inputs = list(inputs) if inputs is not None else processor_inputs(spec)
        self._runners: dict[tuple[bool, bool], KeyedRunner] = {}
        self._keys: dict[Any, MemoryKeyState] = {}
        self._processing_ms = 0  # the processing clock starts at the epoch: TTL counts from there until moved
        self._watermark_ms: int | None = None
        if time_mode is not None and time_mode not in _TIME_MODES:
            raise KeyedSQLError(
                f"KeyedTester({self.spec.name}): time_mode={time_mode!r}; use one of "
                f"{', '.join(map(repr, _TIME_MODES))} (or leave it out: event time from the first set_watermark on)"
            )
        self._time_mode = time_mode
        # the rows' column types (Arrow): from schema=, else inferred from the first values seen
        self._types: dict[str, Any] = _schema_types(schema, self.spec.name) if schema is not None else {}
        self._input_columns: dict[str, list[str]] = {}  # each named input's columns, as its rows had them
        for input_name, columns in per_input.items():
            if columns is None:
                continue
            if isinstance(columns, (list, tuple)) and all(isinstance(c, str) for c in columns):
                self._input_columns[input_name] = list(columns)
                continue
            found = _schema_types(columns, self.spec.name)
            self._input_columns[input_name] = list(found)
            for column, arrow in found.items():
                self._types.setdefault(column, arrow)
        self._schema_given = schema is not None
        # broadcast inputs (runtime/broadcast.py): name -> its BroadcastInput, and their state
        self._broadcast_key = parse_column_list(broadcast_key, "broadcast_key") if broadcast_key else None
        self._event_time = event_time
        self._broadcasts: dict[str, BroadcastInput] = {}
        self._broadcast_state = BroadcastState()
        if broadcast is not None:
            self._broadcast_all(broadcast, f"KeyedTester({self.spec.name})")
        if initial_state is not None:
            self._seed(initial_state)

    def _broadcast_all(self, broadcast: Any, where: str) -> None:
        """``broadcast=``'s rows, each input's through :meth:`broadcast`."""
        if not isinstance(broadcast, Mapping):
            raise KeyedSQLError(f"{where}: broadcast= takes {{'<input>': [row dicts]}}, got {type(broadcast).__name__}")
        for name, rows in broadcast.items():
            self.broadcast(name, rows)

    def broadcast(self, name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Broadcast rows of input ``name`` (each a dict; its first column that is not the
        ``event_time`` or an ``order_by`` column is the key unless ``broadcast_key=`` names it),
        applied before the next ``run`` as a batch's are: in order
        of ``event_time`` (versioned), then the ``order_by`` columns they have (in their
        directions), then their values; an ``on_broadcast`` hook runs for each."""
        rows = [_row(r) for r in rows]
        b = self._broadcasts.get(name)
        if b is None and rows:  # the input's columns, key and time: from its first rows
            names = list(rows[0])
            if self._broadcast_key and not set(self._broadcast_key) & set(names):
                raise KeyedSQLError(
                    f"KeyedTester({self.spec.name}): broadcast input {name!r} has none of the broadcast_key "
                    f"column(s) {', '.join(self._broadcast_key)} (its columns: {', '.join(names)})"
                )
            time = self._event_time if self._event_time in names else None
            order = tuple(o for o in self._order if o.column in names)  # (the order_by columns it has)
            # as in SQL: by default its first column that is not the event time or an order_by column
            skip = {time, *(o.column for o in order)}
            key = [k for k in (self._broadcast_key or []) if k in names] or [
                next((n for n in names if n not in skip), names[0])
            ]
            b = self._broadcasts[name] = BroadcastInput(name, 0, tuple((n, n) for n in names), tuple(key), time, order)
        if b is None:
            self._broadcast_state.declare(name, versioned=False)  # (no rows yet: an empty mapping)
        else:
            hook = broadcast_hook(self.spec, self._broadcast_state)
            self._broadcast_state.apply([b], {name: rows}, hook, function=self.spec.name)
        for runner in self._runners.values():
            runner.use_broadcasts(self._broadcast_state, self._event_time)

    # ------------------------------------------------------------------ helpers
    def _runner(self, keyed: bool, several: bool = False) -> KeyedRunner:
        slot = (keyed, several)
        if slot not in self._runners:
            names = (self.inputs or ["input"]) if several else None  # (a function learns its input names per row)
            runner = KeyedRunner(self.spec, self._order, keyed, names)
            runner.column_types = self._types  # (shared: columns inferred later reach every runner)
            if self._broadcasts or self._broadcast_state.tables:
                runner.use_broadcasts(self._broadcast_state, self._event_time)
            self._runners[slot] = runner
        return self._runners[slot]

    def _infer(self, rows: list[dict]) -> None:
        """Types of columns neither ``schema`` nor an earlier batch gave, from these rows'
        values as Spark infers them; said once per column in the log."""
        if self.spec.kind is not FunctionKind.PROCESSOR or not rows:
            return
        names = list(dict.fromkeys(c for r in rows for c in r))
        new = {}
        for c in names:
            if c not in self._types:
                t = infer_arrow_type([r.get(c) for r in rows])
                if t is not None:
                    new[c] = t
        if new:
            self._types.update(new)
            given = " (not in schema=)" if self._schema_given else ""
            log.info(
                "KeyedTester(%s): the rows frame's column types%s, inferred from their values as Spark infers them: "
                '%s; give KeyedTester(..., schema="<DDL>") for the exact types',
                self.spec.name,
                given,
                ", ".join(f"{c} {ddl_of(t)}" for c, t in new.items()),
            )

    def _binding(self, slot: Any) -> KeyBinding:
        ks = self._keys.setdefault(slot, MemoryKeyState())
        return memory_binding(ks, lambda: self._processing_ms, self.spec.ttl_ms)

    def _gc(self, slot: Any) -> None:
        ks = self._keys.get(slot)
        if ks is not None and ks.is_empty():
            del self._keys[slot]

    def _seed(self, initial_state: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
        """Each (key, row) goes through the runner's initial_state, exactly as the engines
        apply a row of an INITIAL STATE FROM table (encoded attributes take the JSON text
        read_state shows, or plain values; a KeyedProcessor's on_initial_state runs)."""
        where = f"KeyedTester({self.spec.name}) initial_state"
        pairs = initial_state.items() if isinstance(initial_state, Mapping) else initial_state
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
            raise KeyedSQLError(
                f"{where}: give a {{key: row}} dict or (key, row) pairs, got {type(initial_state).__name__}"
            )
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise KeyedSQLError(f"{where}: expected a (key, row) pair, got {pair!r}")
            key, row = pair
            if hasattr(row, "asDict"):
                row = row.asDict(recursive=True)
            if not isinstance(row, Mapping):
                raise KeyedSQLError(
                    f"{where}: the row for key {key!r} must be a dict of state columns, got {type(row).__name__}"
                )
            slot = (True, key)
            self._runner(True).initial_state(key, dict(row), self._binding(slot))
            self._gc(slot)

    def _out(self, rows: list[Any]) -> list[Any]:
        return rows_as_dicts(rows, self.spec.returns)

    # ------------------------------------------------------------------ public
    def run(
        self,
        rows: Iterable[dict] | Mapping[str, Iterable[dict]],
        key: Any = _UNKEYED,
        *,
        keyed: bool | None = None,
        input: str | None = None,
        broadcast: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    ) -> list[Any]:
        """Process ``rows`` (dicts or pyspark Rows) as one batch of ``key`` (omit ``key`` for
        unkeyed use); ``input``: the named input they come from, for a function with several
        inputs, or ``rows`` a mapping ``{'<input>': [rows], ...}``: one batch with rows of several
        inputs, merged in ``order_by`` order (ties: the order of the inputs) as the engines merge
        them; ``broadcast``: ``{'<input>': [row dicts]}`` arriving in this batch, applied before
        its rows (as :meth:`broadcast` does, and as the engines apply a batch's broadcast rows
        first)."""
        if broadcast is not None:
            self._broadcast_all(broadcast, f"KeyedTester({self.spec.name}).run")
        is_keyed = (key is not _UNKEYED) if keyed is None else keyed
        k = None if key is _UNKEYED else _key(key)
        if isinstance(rows, Mapping):
            if input is not None:
                raise KeyedSQLError(
                    f"KeyedTester({self.spec.name}).run: rows given by input ({{'<input>': [rows]}}) take no input="
                )
            if any(isinstance(part, (Mapping, str, bytes)) or not isinstance(part, Iterable) for part in rows.values()):
                raise KeyedSQLError(
                    f"KeyedTester({self.spec.name}).run: rows are a list of dicts ([{{...}}, ...]); a dict is "
                    "{'<input>': [rows], ...}, for a function with several inputs"
                )
            batch = {str(name): [_row(r) for r in part] for name, part in rows.items()}
        else:
            batch = {input: [_row(r) for r in rows]} if input is not None else None
            rows = [_row(r) for r in rows] if batch is None else batch[input]
        for part in batch.values() if batch is not None else (rows,):
            self._infer(part)
        slot = (is_keyed, k)
        if batch is None and self.inputs and len(self.inputs) > 1:
            raise KeyedSQLError(
                f"KeyedTester({self.spec.name}): it has the inputs {', '.join(self.inputs)}; say which one the "
                "rows come from with run(rows, key=..., input='<name>'), or give them as {'<input>': [rows], ...}"
            )
        with self._batch(slot):
            if batch is not None:
                out = self._run_inputs(k, is_keyed, batch, slot)
            else:
                runner = self._runner(is_keyed)
                out = runner.process_key(k, rows, self._binding(slot), self._processing_ms, self._watermark_ms)
        return self._out(out)

    @contextmanager
    def _batch(self, slot: Any) -> Iterator[None]:
        """One batch of one key, as the engines commit it: all of it, or (the user's code raised)
        none of it: the key's state and timers go back to what they were before."""
        before = self._keys.get(slot)
        saved = before.copy() if before is not None else None
        try:
            yield
        except BaseException:
            if saved is None:
                self._keys.pop(slot, None)
            else:
                self._keys[slot] = saved
            raise
        self._gc(slot)

    def _run_inputs(self, key: Any, keyed: bool, batch: dict[str, list[dict]], slot: Any) -> list[Any]:
        """One batch of rows of several named inputs: a function's merged in order_by order
        (ties: the order of the inputs, then as given), a processor's one frame per input (an
        input without rows this batch: an empty frame with the columns its rows had before)."""
        names = self.inputs or list(batch)
        unknown = [n for n in batch if n not in names]
        if unknown:
            raise KeyedSQLError(
                f"KeyedTester({self.spec.name}): unknown input {unknown[0]!r}; its inputs are {', '.join(names)}"
            )
        for name, rows in batch.items():
            seen = self._input_columns.setdefault(name, [])
            seen += [c for c in dict.fromkeys(c for r in rows for c in r) if c not in seen]
        runner = self._runner(keyed, several=True)
        binding = self._binding(slot)
        out: list[Any] = []
        if runner.layout is not None:
            tagged = [(name, r) for name in names for r in batch.get(name, ())]  # (ties: the inputs' order)
            tagged = sort_rows(tagged, self._order, lambda t, c: t[1].get(c))
            runner.run_function(
                key,
                [r for _, r in tagged],
                binding,
                self._processing_ms,
                self._watermark_ms,
                out,
                [],
                inputs=[name for name, _ in tagged],
            )
            return out
        frames = {}
        for name in runner.inputs or list(batch):
            rows = sort_rows(batch.get(name, []), self._order)
            columns = self._input_columns.get(name, [])
            frames[name] = rows_builder(runner.rows_format, columns, [self._types.get(c) for c in columns])(rows)
        count = sum(len(r) for r in batch.values())
        first = next((r[0] for r in batch.values() if r), None)
        runner.run_processor(key, frames, count, lambda: first, binding, self._processing_ms, self._watermark_ms, out)
        return out

    def state(self, key: Any = _UNKEYED) -> dict:
        """The key's current state: attribute values, or typed state variables' values."""
        slot = _slot(key)
        binding = self._binding(slot)
        runner = self._runner(slot[0])
        try:
            if runner.layout is not None:
                row = binding.load_attributes()
                return {} if row is None else runner.layout.to_row_dict(row)
            out: dict[str, Any] = {}
            for name, d in self.spec.descriptors.items():
                st = binding.variable(d)
                if d.kind is StateKind.VALUE:
                    if st.value_exists():
                        out[name] = to_user(st.value_get(), d.type)
                elif d.kind is StateKind.LIST:
                    items = st.list_get()
                    if items:
                        out[name] = [to_user(v, d.type) for v in items]
                else:
                    items = st.map_items()
                    if items:
                        out[name] = {
                            k: to_user(v, d.type) for k, v in sorted(items, key=lambda kv: (kv[0] is None, kv[0]))
                        }
            return out
        finally:
            self._gc(slot)

    def keys(self) -> list[Any]:
        return [k for (keyed, k), ks in self._keys.items() if keyed and not ks.is_empty()]

    def timers(self, key: Any = _UNKEYED) -> list:
        slot = _slot(key)
        ks = self._keys.get(slot)
        return [] if ks is None else sorted(ks.timers)

    def _fire(self, now_ms: int) -> FiredRows:
        out: list[Any] = []
        keys: list[Any] = []
        guards: dict[Any, FireGuard] = {}  # per key: an on_timer that re-registers forever fails
        while True:
            # by time only: keys of different types (a NULL key beside strings) do not compare
            due = sorted(
                ((t, slot) for slot, ks in self._keys.items() for t in ks.timers if t <= now_ms), key=lambda d: d[0]
            )
            if not due:
                return FiredRows(self._out(out), keys)
            t, slot = due[0]
            if slot not in guards:
                guards[slot] = FireGuard(0, False, lambda slot=slot: self._runner(slot[0]).naming(slot[1]))
            guards[slot].check(t)
            with self._batch(slot):
                self._keys[slot].timers.discard(t)
                fired = self._runner(slot[0]).fire_timer(
                    slot[1], t, self._binding(slot), self._processing_ms, self._watermark_ms
                )
                out.extend(fired)
                keys.extend([slot[1]] * len(fired))

    def advance_processing_time(self, ts: Any) -> FiredRows:
        """Move the processing-time clock to ``ts`` (datetime or epoch ms); fire due timers
        (none in event time: the clock then moves TTL only)."""
        self._processing_ms = to_epoch_ms(ts)
        if self._time_mode == "event":
            return FiredRows()
        return self._fire(self._processing_ms)

    def set_watermark(self, ts: Any) -> FiredRows:
        """Move the event-time watermark to ``ts``; fire event-time timers at or before it
        (none with ``time_mode="processing"``)."""
        self._watermark_ms = to_epoch_ms(ts)
        if self._time_mode is None:
            self._time_mode = "event"
        if self._time_mode == "processing":
            return FiredRows()
        return self._fire(self._watermark_ms)


def tester_for(query: str, statement: Any, function: str | None, options: dict) -> KeyedTester:
    """The KeyedTester of ``ks.tester``: the registration of the step calling ``function`` (or
    the statement's only keyed function), with the argument columns' types the statement gives."""
    steps = list(statement.steps) if statement is not None else []
    if function is not None:
        steps = [s for s in steps if s.function.lower() == function.lower()]
    names = sorted({s.function for s in statement.steps}) if statement is not None else []
    if not steps:
        what = f"no call of {function!r}" if function is not None else "no keyed function call"
        raise KeyedSQLError(
            f"ks.tester: the query has {what}"
            + (f"; it calls {', '.join(names)}" if names else "")
            + f": {query.strip()[:120]!r}"
        )
    if len({s.function.lower() for s in steps}) > 1:
        raise KeyedSQLError(f"ks.tester: the query calls {', '.join(names)}; say which with function='<name>'")
    step = steps[0]
    plan = step.plan
    types = dict(plan.arg_types or {})
    if plan.inputs:
        maps = [m for i in plan.inputs for m in i.event_map]
    else:
        maps = list(zip(plan.event_names, plan.arg_columns))
    schema = {name: types[col] for name, col in maps if col in types}
    spec = plan.spec  # the registration (its kwargs as registered), with the query's TTL clause
    settings = dict(options)
    if plan.inputs and "inputs" not in options:  # each input's columns: its empty frame has them
        settings["inputs"] = {i.name: {n: types[c] for n, c in i.event_map if c in types} for i in plan.inputs}
    settings.setdefault("schema", schema)
    return KeyedTester(spec.cls, spec.returns, **settings, **{_SPEC: spec})

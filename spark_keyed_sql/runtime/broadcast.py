"""Broadcast inputs: one small, non-keyed table every key's function reads.

An input named in ``broadcast => 'rates'`` is not partitioned by the key. Its rows never reach a
worker as rows: the driver applies them, in a fixed order, to the query's **broadcast state**
(a mapping per input, ``broadcast_key`` -> the latest row, or its one value column), and the
workers get that state with the keyed rows' program. So every task reads one copy, built once,
and the answer does not depend on how rows were partitioned or on which task came first.

Order (what makes it deterministic): within a batch every broadcast row applies before the
batch's keyed rows; broadcast rows apply ordered by the ``event_time`` column (when the input
has it), then by the ``order_by`` columns it has, then by their values (a total order, so two
rows of one key in one batch always resolve the same way). With ``event_time`` the state is
**versioned**: each change is kept with its time, and a keyed row reads the state as of its own
event time (a timer, as of its time); without it every read sees the state after the batch's
broadcast rows. A row whose other columns are all NULL removes its key.

``on_broadcast(self, name, row)`` on the class replaces that default: it runs on the driver,
once per row in the same order, and keeps the mapping itself through the writable
``self.ctx.broadcast(name)``; it must not touch per-key state.

``BroadcastState`` is the state of every broadcast input of a query: applied rows in
(``apply``), read views out (``view``), pruned below the watermark (``prune``), and stored as
JSON in a checkpoint (``to_json`` / ``from_json``: the values tagged so a timestamp, a date, a
decimal and bytes come back as themselves)."""

from __future__ import annotations

import base64
import bisect
import datetime as _dt
import decimal
import functools
import json
import logging
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..api.context import to_epoch_ms
from ..api.errors import KeyedSQLError, StateAccessError, UserFunctionError
from .keys import OrderSpec, sort_rows

__all__ = [
    "BROADCAST_MAX_ROWS",
    "BROADCAST_MAX_ROWS_CONF",
    "BroadcastInput",
    "BroadcastState",
    "BroadcastTooLarge",
    "broadcast_hook",
    "broadcast_limit",
]

log = logging.getLogger(__name__)

BROADCAST_MAX_ROWS_CONF = "spark.keyedsql.broadcastMaxRows"
# what ships well to every task (BENCHMARKS.md, broadcast inputs: W1 at 100k keys +0-8% with
# 10,000 rows, +9% with 30,000, +46% with 100,000, where a join is +15%): the state goes with
# each task's program; past this many rows a join of the table to the keyed rows is the better plan
BROADCAST_MAX_ROWS = 30_000


class _Gone:
    """A version that removed its key: one object in every process (pickled by name)."""

    def __reduce__(self) -> str:
        return "_GONE"

    def __repr__(self) -> str:
        return "<removed>"


_GONE = _Gone()


class BroadcastTooLarge(KeyedSQLError):
    """A broadcast input (or the state kept for it) is above the limit of what ships to every task."""


def broadcast_limit(spark: Any) -> int:
    try:
        value = spark.conf.get(BROADCAST_MAX_ROWS_CONF, None)
    except Exception:  # noqa: BLE001 - a session that cannot answer: the default
        value = None
    return int(value) if value else BROADCAST_MAX_ROWS


@dataclass(frozen=True)
class BroadcastInput:
    """A broadcast input of a plan: its rows are the source rows whose input index is ``index``;
    ``event_map`` gives a row's dict (its own column name -> source column). ``key`` names the
    broadcast key column(s), ``time`` its event-time column (versioned state), ``order`` the
    ``order_by`` columns it has, each in its direction (all by the input's own names)."""

    name: str
    index: int
    event_map: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    time: str | None = None
    order: tuple[OrderSpec, ...] = ()

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.event_map]

    @functools.cached_property
    def value_columns(self) -> list[str]:
        """The columns that make a row's value: all but the key, time and order columns."""
        skip = {*self.key, *([self.time] if self.time else []), *(o.column for o in self.order)}
        return [n for n in self.names if n not in skip]

    def key_of(self, row: Mapping[str, Any]) -> Any:
        key = self.key
        return row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)

    def value_of(self, row: Mapping[str, Any]) -> Any:
        """The row's value (its one value column, else the row), or _GONE when every value
        column is NULL."""
        cols = self.value_columns
        if cols and all(row[c] is None for c in cols):
            return _GONE
        return row[cols[0]] if len(cols) == 1 else dict(row)

    def time_of(self, row: Mapping[str, Any]) -> int | None:
        if self.time is None:
            return None
        t = row[self.time]
        if t is None:
            raise KeyedSQLError(
                f"broadcast input '{self.name}': a row has no {self.time} (its event time): "
                f"{_shown(row)}; versioned broadcast rows need one"
            )
        return to_epoch_ms(t)


def _canonical(row: Mapping[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in row.items()))


def _shown(row: Mapping[str, Any]) -> str:
    text = repr(dict(row))
    return text if len(text) < 200 else text[:197] + "..."


class _Table:
    """One input's state: key -> versions [(time, value)] oldest first (one version per key when
    not versioned)."""

    __slots__ = ("versioned", "versions", "pruned_below", "_times")

    def __init__(
        self, versioned: bool, versions: dict[Any, list[tuple[int, Any]]] | None = None, pruned_below: int | None = None
    ):
        self.versioned = versioned
        self.versions: dict[Any, list[tuple[int, Any]]] = versions or {}
        self.pruned_below = pruned_below  # reads before this time would miss pruned versions
        self._times: dict[Any, list[int]] | None = None  # per key, the versions' times (built on first read)

    def set(self, key: Any, time: int | None, value: Any) -> None:
        self._times = None
        if not self.versioned:
            if value is _GONE:
                self.versions.pop(key, None)
            else:
                self.versions[key] = [(0, value)]
            return
        vs = self.versions.setdefault(key, [])
        t = int(time or 0)
        i = bisect.bisect_right([v[0] for v in vs], t)
        if i and vs[i - 1][0] == t:  # a later row of the same time replaces it
            vs[i - 1] = (t, value)
        else:
            vs.insert(i, (t, value))

    def get(self, key: Any, as_of: int | None) -> Any:
        vs = self.versions.get(key)
        if not vs:
            return _GONE
        if as_of is None or not self.versioned:
            return vs[-1][1]
        if self.pruned_below is not None and as_of < self.pruned_below:
            raise StateAccessError(
                f"broadcast state as of {as_of} ms is no longer kept: versions before the watermark "
                f"({self.pruned_below} ms) were dropped; read it as of a later time"
            )
        times = self._times
        if times is None:
            times = self._times = {k: [t for t, _ in v] for k, v in self.versions.items()}
        i = bisect.bisect_right(times[key], as_of)
        return vs[i - 1][1] if i else _GONE

    def keys_at(self, as_of: int | None) -> list[Any]:
        """The keys held as of ``as_of``, in one order (by repr) whatever order they came in."""
        return sorted((k for k in self.versions if self.get(k, as_of) is not _GONE), key=repr)

    def size(self) -> int:
        return sum(len(v) for v in self.versions.values())

    def prune(self, below: int) -> None:
        """Drop versions no read at or after ``below`` can see (the last one at or before it stays)."""
        if not self.versioned:
            return
        for k in list(self.versions):
            vs = self.versions[k]
            i = bisect.bisect_right([t for t, _ in vs], below)
            if i > 1:  # (a removal in force stays: a late row of an older time must not revive the key)
                self.versions[k] = vs[i - 1 :]
        self.pruned_below = max(below, self.pruned_below or below)
        self._times = None


class BroadcastView(Mapping):
    """``self.ctx.broadcast(name)`` in ``execute`` / ``process`` / ``on_timer``: read-only, as of
    a time (versioned state) or the newest."""

    __slots__ = ("_name", "_table", "_as_of")

    def __init__(self, name: str, table: _Table, as_of: int | None):
        self._name, self._table, self._as_of = name, table, as_of

    def __getitem__(self, key: Any) -> Any:
        v = self._table.get(key, self._as_of)
        if v is _GONE:
            raise KeyError(key)
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._table.get(key, self._as_of)
        return default if v is _GONE else v

    def __contains__(self, key: object) -> bool:
        return self._table.get(key, self._as_of) is not _GONE

    def __iter__(self) -> Iterator[Any]:
        return iter(self._table.keys_at(self._as_of))

    def __len__(self) -> int:
        return len(self._table.keys_at(self._as_of))

    def __repr__(self) -> str:
        return f"<broadcast '{self._name}': {len(self)} keys>"

    def _readonly(self, *a: Any, **k: Any) -> None:
        raise StateAccessError(
            f"self.ctx.broadcast('{self._name}') is read-only here; an on_broadcast(self, name, row) hook keeps it"
        )

    __setitem__ = __delitem__ = _readonly  # type: ignore[assignment]


class _ReadOnly(dict):
    """An unversioned input's read view: a dict (its reads run in C) that refuses changes."""

    __slots__ = ("_name",)

    def __init__(self, name: str, values: dict[Any, Any]):
        super().__init__(values)
        self._name = name

    def _readonly(self, *a: Any, **k: Any) -> Any:
        raise StateAccessError(
            f"self.ctx.broadcast('{self._name}') is read-only here; an on_broadcast(self, name, row) hook keeps it"
        )

    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = __ior__ = _readonly  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<broadcast '{self._name}': {len(self)} keys>"


class _Writable(BroadcastView, MutableMapping):
    """``self.ctx.broadcast(name)`` inside ``on_broadcast``: changes are versions at the row's time."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        # kept as the checkpoint keeps it (a tuple a list, ...): the same in a one-shot batch and
        # after a restart; a value JSON cannot hold is refused here
        self._table.set(key, self._as_of, _dec(_enc(value)))

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            raise KeyError(key)
        self._table.set(key, self._as_of, _GONE)


class BroadcastState:
    """The broadcast state of a query: input name -> its table."""

    def __init__(self, tables: dict[str, _Table] | None = None, columns: dict[str, dict[str, Any]] | None = None):
        self.tables = tables or {}
        # name -> what read_state shows of it: key columns, value columns, Spark types, kept by a hook
        self.columns: dict[str, dict[str, Any]] = columns or {}
        self.writing: tuple[str, int | None] | None = None  # (name, time) while on_broadcast runs
        # an unversioned table's read view: a read-only proxy of {key: value}, made on first read
        # (the per-row path: one dict lookup for the view, one in C for the value)
        self._proxies: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"tables": self.tables, "columns": self.columns}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.tables, self.columns, self.writing, self._proxies = d["tables"], d["columns"], None, {}

    # ------------------------------------------------------------------ reads (workers)
    def versioned(self, name: str) -> bool | None:
        """Whether input ``name``'s state is versioned by event time (None: no such input)."""
        table = self.tables.get(name)
        return None if table is None else table.versioned

    def view(self, name: str, as_of: Any = None) -> Mapping[Any, Any]:
        """What ``self.ctx.broadcast(name, as_of=)`` returns."""
        proxy = self._proxies.get(name)
        if proxy is not None and self.writing is None:
            return proxy
        table = self.tables.get(name)
        if table is None:
            known = ", ".join(sorted(self.tables)) or "none"
            raise StateAccessError(
                f"self.ctx.broadcast({name!r}): no broadcast input of that name (this query has: {known})"
            )
        if self.writing is not None:
            if self.writing[0] != name:
                raise StateAccessError(
                    f"on_broadcast for '{self.writing[0]}' may change only that input's state, not '{name}'"
                )
            return _Writable(name, table, self.writing[1])
        if not table.versioned:
            values = {k: table.versions[k][-1][1] for k in sorted(table.versions, key=repr)}  # (one order)
            proxy = self._proxies[name] = _ReadOnly(name, values)
            return proxy
        return BroadcastView(name, table, to_epoch_ms(as_of) if as_of is not None else None)

    def rows(self, name: str) -> list[tuple[Any, int | None, Any]]:
        """(key, time or None, value) of every kept version (read_state's broadcast table), by
        key; a removal's value is None (seeded back, its NULL value columns remove the key)."""
        t = self.tables[name]
        return [
            (k, (tm if t.versioned else None), None if v is _GONE else v)
            for k in sorted(t.versions, key=repr)
            for tm, v in t.versions[k]
        ]

    def size(self) -> int:
        return sum(t.size() for t in self.tables.values())

    # ------------------------------------------------------------------ writes (the driver)
    def declare(self, name: str, versioned: bool) -> None:
        """An input with no rows yet: an empty mapping."""
        self.tables.setdefault(name, _Table(versioned))

    def apply(
        self,
        inputs: list[BroadcastInput],
        rows: Mapping[str, list[dict[str, Any]]],
        hook: Any = None,
        *,
        function: str = "",
        limit: int | None = None,
        types: Mapping[str, Mapping[str, str]] | None = None,
    ) -> int:
        """Apply each input's new ``rows`` in their order; ``hook``: an instance whose
        ``on_broadcast`` keeps the state instead; ``types``: each input's Spark column types (DDL),
        for read_state. Returns the rows applied."""
        applied = 0
        self._proxies.clear()
        for b in inputs:
            table = self.tables.get(b.name)
            if table is None or (not table.versions and table.versioned != (b.time is not None)):
                # (an input declared before its first rows told whether it has the event-time column)
                table = self.tables[b.name] = _Table(b.time is not None)
            self.columns[b.name] = {
                "key": list(b.key),
                "value": b.value_columns,
                "time": b.time,
                "types": dict((types or {}).get(b.name) or self.columns.get(b.name, {}).get("types") or {}),
                "hook": hook is not None,
            }
            timed = [(b.time_of(row), dict(row)) for row in rows.get(b.name, [])]
            for t, row in _in_order(b, timed, by_value=hook is not None):
                if hook is not None:
                    self._call_hook(hook, b, row, t, function)
                else:
                    table.set(b.key_of(row), t, b.value_of(row))
                applied += 1
            if limit is not None and table.size() > limit:
                raise BroadcastTooLarge(
                    f"broadcast input '{b.name}' of {function or 'the function'} now keeps {table.size():,} entries, "
                    f"above the limit of {limit:,} ({BROADCAST_MAX_ROWS_CONF}): a broadcast input is sent to every "
                    "task; join a table this large to the keyed rows instead (or raise the limit)"
                )
        return applied

    def _call_hook(self, hook: Any, b: BroadcastInput, row: dict, t: int | None, function: str) -> None:
        before = _attributes(hook)
        self.writing = (b.name, t)
        try:
            hook.on_broadcast(b.name, dict(row))
        except KeyedSQLError:
            raise
        except Exception as exc:
            raise UserFunctionError(function, None, f"on_broadcast('{b.name}', {_shown(row)})", exc) from exc
        finally:
            self.writing = None
        after = _attributes(hook)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k, _GONE) != after.get(k, _GONE))
            raise UserFunctionError(
                function,
                None,
                f"on_broadcast('{b.name}', {_shown(row)})",
                StateAccessError(
                    f"on_broadcast changed {changed}: it must not touch per-key state; keep broadcast-level state in "
                    f"self.ctx.broadcast('{b.name}')"
                ),
            )

    def prune(self, below_ms: int | None) -> None:
        self._proxies.clear()
        if below_ms is not None:
            for t in self.tables.values():
                t.prune(below_ms)

    # ------------------------------------------------------------------ the checkpoint's copy
    def to_json(self) -> str:
        return json.dumps(
            {
                "format": 1,
                "columns": self.columns,
                "inputs": {
                    name: {
                        "versioned": t.versioned,
                        "pruned_below": t.pruned_below,
                        "entries": [
                            [_enc(k), [[tm, {"$gone": 1} if v is _GONE else _enc(v)] for tm, v in vs]]
                            for k, vs in t.versions.items()
                        ],
                    }
                    for name, t in self.tables.items()
                },
            }
        )

    @classmethod
    def from_json(cls, text: str) -> BroadcastState:
        data = json.loads(text)
        tables = {}
        for name, t in data.get("inputs", {}).items():
            versions = {
                _key(_dec(k)): [(int(tm), _GONE if isinstance(v, dict) and v.get("$gone") else _dec(v)) for tm, v in vs]
                for k, vs in t["entries"]
            }
            tables[name] = _Table(bool(t["versioned"]), versions, t.get("pruned_below"))
        return cls(tables, dict(data.get("columns") or {}))

    def copy(self) -> BroadcastState:
        return BroadcastState.from_json(self.to_json())


def _in_order(b: BroadcastInput, timed: list[tuple[int | None, dict]], by_value: bool) -> list[tuple[int | None, dict]]:
    """Rows in the order they apply: time, the order_by columns (each ASC or DESC, NULLS FIRST
    or LAST, as the query's order_by says), then (a total order, for rows that tie) their
    values. Without a hook rows of different keys do not affect each other, so only each key's
    rows are ordered (most keys have one: no sort, no repr)."""
    if by_value:  # a hook sees every row: one order of all of them
        return _sorted(b, list(timed))
    by_key: dict[Any, list[tuple[int | None, dict]]] = {}
    key_of = b.key_of
    for tr in timed:
        by_key.setdefault(key_of(tr[1]), []).append(tr)
    out: list[tuple[int | None, dict]] = []
    for key in sorted(by_key, key=repr):  # (new keys enter the table in one order)
        rows = by_key[key]
        out += _sorted(b, rows) if len(rows) > 1 else rows
    return out


def _sorted(b: BroadcastInput, rows: list[tuple[int | None, dict]]) -> list[tuple[int | None, dict]]:
    """``rows`` by time, then the order_by columns, then value: stable sorts from the last
    criterion to the first."""
    rows.sort(key=lambda tr: _canonical(tr[1]))
    rows = sort_rows(rows, b.order, lambda tr, c: tr[1][c])
    rows.sort(key=lambda tr: tr[0] or 0)
    return rows


def broadcast_hook(spec: Any, state: BroadcastState) -> Any:
    """An instance of ``spec``'s class whose ``on_broadcast`` keeps ``state`` (its
    ``self.ctx.broadcast`` reads and writes it), or None when the class has no such hook."""
    if getattr(spec.cls, "on_broadcast", None) is None:
        return None
    hook = spec.instantiate()
    hook.ctx.call.broadcasts = state
    return hook


def _attributes(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(instance).items() if k not in ("ctx", "_ctx", "_ks_accessors")}


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _enc(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, _dt.datetime):
        return {"$ts": v.isoformat()}
    if isinstance(v, _dt.date):
        return {"$date": v.isoformat()}
    if isinstance(v, decimal.Decimal):
        return {"$dec": str(v)}
    if isinstance(v, (bytes, bytearray)):
        return {"$b64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, Mapping):
        return {"$map": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if hasattr(v, "item"):  # a numpy scalar
        return _enc(v.item())
    raise KeyedSQLError(f"broadcast state cannot keep a value of type {type(v).__name__}: {v!r}")


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "$ts" in v:
        return _dt.datetime.fromisoformat(v["$ts"])
    if "$date" in v:
        return _dt.date.fromisoformat(v["$date"])
    if "$dec" in v:
        return decimal.Decimal(v["$dec"])
    if "$b64" in v:
        return base64.b64decode(v["$b64"])
    if "$map" in v:
        return {_key(_dec(k)): _dec(x) for k, x in v["$map"]}
    raise KeyedSQLError(f"unreadable broadcast state value {v!r}")

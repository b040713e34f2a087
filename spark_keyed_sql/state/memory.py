"""One key's state in memory: where the bulk engine, the table function and KeyedTester keep a
key while it runs (TTL is applied above this, by ``binding.KeyBinding``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..api.state import StateDescriptor
from .binding import Entry, KeyBinding, KeyStore, VariableStore

__all__ = ["MemoryKeyState", "MemoryKeyStore", "MemoryTimers", "memory_binding", "purge_expired", "due_times"]


class MemoryKeyState:
    """All state of one key: attribute row, typed variables and timers."""

    __slots__ = ("vars", "timers", "attributes", "attributes_expire")

    def __init__(self) -> None:
        self.vars: dict[str, Any] = {}  # name -> (value, expires) | list[(v, exp)] | dict[k, (v, exp)]
        self.timers: set[int] = set()
        self.attributes: tuple | None = None  # attribute-state row of a StatefulFunction
        self.attributes_expire: int | None = None

    def reset(self) -> MemoryKeyState:
        """Empty again, for the next key of a one-shot pass (whose state is never kept)."""
        if self.vars:
            self.vars.clear()
        if self.timers:
            self.timers.clear()
        self.attributes = self.attributes_expire = None
        return self

    def is_empty(self) -> bool:
        return not self.vars and not self.timers and self.attributes is None

    def copy(self) -> MemoryKeyState:
        """A deep copy: what a failed batch of this key goes back to (KeyedTester)."""
        other = MemoryKeyState()
        other.vars = copy.deepcopy(self.vars)
        other.timers = set(self.timers)
        other.attributes = copy.deepcopy(self.attributes)
        other.attributes_expire = self.attributes_expire
        return other


class _MemoryVariable(VariableStore):
    __slots__ = ("ks", "name")

    def __init__(self, ks: MemoryKeyState, name: str):
        self.ks, self.name = ks, name

    def clear(self) -> None:
        self.ks.vars.pop(self.name, None)

    def get(self) -> Entry | None:
        return self.ks.vars.get(self.name)

    def set(self, entry: Entry) -> None:
        self.ks.vars[self.name] = entry

    def entries(self) -> list[Entry]:
        return list(self.ks.vars.get(self.name) or ())

    def put_entries(self, entries: list[Entry]) -> None:
        self.ks.vars[self.name] = list(entries)

    def append_entries(self, entries: list[Entry]) -> None:
        self.ks.vars.setdefault(self.name, []).extend(entries)

    def map_get(self, k: Any) -> Entry | None:
        m = self.ks.vars.get(self.name)
        return None if m is None else m.get(k)

    def map_put(self, k: Any, entry: Entry) -> None:
        self.ks.vars.setdefault(self.name, {})[k] = entry

    def map_remove(self, k: Any) -> None:
        m = self.ks.vars.get(self.name)
        if m is not None:
            m.pop(k, None)
            if not m:
                del self.ks.vars[self.name]

    def map_entries(self) -> list[tuple[Any, Entry]]:
        return list((self.ks.vars.get(self.name) or {}).items())


class MemoryTimers:
    __slots__ = ("ks",)

    def __init__(self, ks: MemoryKeyState):
        self.ks = ks

    def register(self, ms: int) -> None:
        self.ks.timers.add(ms)

    def delete(self, ms: int) -> None:
        self.ks.timers.discard(ms)

    def list(self) -> list[int]:
        return sorted(self.ks.timers)


class MemoryKeyStore(KeyStore):
    def __init__(self, ks: MemoryKeyState):
        self.ks = ks

    def get_attributes(self) -> Entry | None:
        return None if self.ks.attributes is None else (self.ks.attributes, self.ks.attributes_expire)

    def set_attributes(self, row: tuple, expires: int | None) -> None:
        self.ks.attributes, self.ks.attributes_expire = row, expires

    def clear_attributes(self) -> None:
        self.ks.attributes, self.ks.attributes_expire = None, None

    def variable(self, desc: StateDescriptor) -> VariableStore:
        return _MemoryVariable(self.ks, desc.name)

    def timers(self) -> MemoryTimers:
        return MemoryTimers(self.ks)


def memory_binding(ks: MemoryKeyState, clock: Callable[[], int | None], attr_ttl_ms: int | None = None) -> KeyBinding:
    """The runner's binding over one key's in-memory state."""
    return KeyBinding(MemoryKeyStore(ks), clock, attr_ttl_ms)


def _live(exp: int | None, now: int) -> bool:
    return exp is None or now < exp


def purge_expired(ks: MemoryKeyState, now: int | None) -> None:
    """Drop what has expired by ``now`` (state expiring in a batch is dropped whether or not
    the key has input; a read drops it too, through the binding)."""
    if now is None:
        return
    if ks.attributes is not None and not _live(ks.attributes_expire, now):
        ks.attributes, ks.attributes_expire = None, None
    for name, entry in list(ks.vars.items()):
        if type(entry) is tuple:  # a value: (value, expires)
            if not _live(entry[1], now):
                del ks.vars[name]
        elif type(entry) is list:
            live = [e for e in entry if _live(e[1], now)]
            if len(live) != len(entry):
                ks.vars[name] = live
        else:
            live_map = {k: e for k, e in entry.items() if _live(e[1], now)}
            if len(live_map) != len(entry):
                ks.vars[name] = live_map
        if not ks.vars.get(name, True):
            del ks.vars[name]


def due_times(ks: MemoryKeyState) -> tuple[int | None, int | None]:
    """(earliest timer, earliest expiry) of a key's state: when it must be visited next even
    without input."""
    expiries = [] if ks.attributes_expire is None or ks.attributes is None else [ks.attributes_expire]
    for entry in ks.vars.values():
        if type(entry) is tuple:
            expiries.append(entry[1])
        elif type(entry) is list:
            expiries += [e for _, e in entry]
        else:
            expiries += [e for _, e in entry.values()]
    known = [e for e in expiries if e is not None]
    return (min(ks.timers) if ks.timers else None, min(known) if known else None)

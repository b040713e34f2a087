"""In-memory keyed state with processing-time TTL and timers: KeyedTester and the
table-function form keep state here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api.state import StateDescriptor, StateStorage

__all__ = ["MemoryKeyState", "MemoryVariable", "MemoryTimers"]

Clock = Callable[[], "int | None"]


class MemoryKeyState:
    """All typed state variables and timers of one key."""

    def __init__(self) -> None:
        self.vars: dict[str, Any] = {}  # name -> (value, expires_ms) | list[(v, exp)] | dict[k, (v, exp)]
        self.timers: set[int] = set()
        self.attributes: tuple | None = None  # attribute-state row of a StatefulFunction
        self.attributes_expire: int | None = None

    def is_empty(self) -> bool:
        return not self.vars and not self.timers and self.attributes is None


def _alive(exp: int | None, now: int | None) -> bool:
    return exp is None or now is None or now < exp


class MemoryVariable(StateStorage):
    def __init__(self, ks: MemoryKeyState, desc: StateDescriptor, clock: Clock):
        self.ks, self.name, self.ttl, self.clock = ks, desc.name, desc.ttl_ms, clock

    def _exp(self) -> int | None:
        now = self.clock()
        return None if self.ttl is None or now is None else now + self.ttl

    def _raw(self) -> Any:
        return self.ks.vars.get(self.name)

    # value
    def value_exists(self) -> bool:
        e = self._raw()
        if e is None:
            return False
        if not _alive(e[1], self.clock()):
            self.ks.vars.pop(self.name, None)
            return False
        return True

    def value_get(self) -> Any:
        return self.ks.vars[self.name][0] if self.value_exists() else None

    def value_set(self, v: Any) -> None:
        self.ks.vars[self.name] = (v, self._exp())

    def clear(self) -> None:
        self.ks.vars.pop(self.name, None)

    # list
    def list_get(self) -> list[Any]:
        now = self.clock()
        items = [(v, e) for v, e in (self._raw() or []) if _alive(e, now)]
        if items:
            self.ks.vars[self.name] = items
        else:
            self.ks.vars.pop(self.name, None)
        return [v for v, _ in items]

    def list_append(self, vs: list[Any]) -> None:
        exp = self._exp()
        self.ks.vars.setdefault(self.name, [])
        self.ks.vars[self.name] = [(v, e) for v, e in self.ks.vars[self.name] if _alive(e, self.clock())]
        self.ks.vars[self.name].extend((v, exp) for v in vs)

    def list_put(self, vs: list[Any]) -> None:
        exp = self._exp()
        if vs:
            self.ks.vars[self.name] = [(v, exp) for v in vs]
        else:
            self.clear()

    # map
    def _map(self) -> dict:
        now = self.clock()
        m = self._raw() or {}
        live = {k: ve for k, ve in m.items() if _alive(ve[1], now)}
        if live:
            self.ks.vars[self.name] = live
        else:
            self.ks.vars.pop(self.name, None)
        return live

    def map_get(self, k: Any) -> Any:
        e = self._map().get(k)
        return None if e is None else e[0]

    def map_contains(self, k: Any) -> bool:
        return k in self._map()

    def map_put(self, k: Any, v: Any) -> None:
        self._map()
        self.ks.vars.setdefault(self.name, {})[k] = (v, self._exp())

    def map_remove(self, k: Any) -> None:
        m = self._map()
        m.pop(k, None)
        if not m:
            self.ks.vars.pop(self.name, None)

    def map_items(self) -> list[tuple[Any, Any]]:
        return [(k, ve[0]) for k, ve in self._map().items()]


class MemoryTimers:
    def __init__(self, ks: MemoryKeyState):
        self.ks = ks

    def register(self, ms: int) -> None:
        self.ks.timers.add(int(ms))

    def delete(self, ms: int) -> None:
        self.ks.timers.discard(int(ms))

    def list(self) -> list[int]:
        return sorted(self.ks.timers)

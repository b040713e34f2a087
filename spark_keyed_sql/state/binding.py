"""Where the runner finds the current key's state, for every engine alike.

An engine keeps one key's state in a :class:`KeyStore`: raw entries, each stored with its
expiry (epoch ms, or None when the state has no TTL). :class:`KeyBinding` is the one layer the
runner talks to; it applies TTL the same way whatever the store (an expired entry is never
returned and is dropped when seen; a write stamps ``now + ttl``), so the engines, the table
function and KeyedTester cannot drift apart on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..api.context import TimerService
from ..api.state import StateDescriptor, StateStorage

__all__ = ["Clock", "Entry", "KeyBinding", "KeyStore", "TtlVariable", "VariableStore", "alive"]

Clock = Callable[[], "int | None"]
Entry = tuple[Any, "int | None"]  # (value, expires_ms)


def alive(expires: int | None, now: int | None) -> bool:
    return expires is None or now is None or now < expires


class VariableStore(ABC):
    """One typed state variable of the current key, as raw (value, expires) entries. Which
    methods apply depends on the variable's kind (value, list or map)."""

    # value
    def get(self) -> Entry | None:
        raise NotImplementedError

    def set(self, entry: Entry) -> None:
        raise NotImplementedError

    # list
    def entries(self) -> list[Entry]:
        raise NotImplementedError

    def put_entries(self, entries: list[Entry]) -> None:
        """Replace the list (never called with an empty list: ``clear`` is)."""
        raise NotImplementedError

    def append_entries(self, entries: list[Entry]) -> None:
        raise NotImplementedError

    # map
    def map_get(self, k: Any) -> Entry | None:
        raise NotImplementedError

    def map_put(self, k: Any, entry: Entry) -> None:
        raise NotImplementedError

    def map_remove(self, k: Any) -> None:
        raise NotImplementedError

    def map_entries(self) -> list[tuple[Any, Entry]]:
        raise NotImplementedError

    @abstractmethod
    def clear(self) -> None: ...


class KeyStore(ABC):
    """All state of the current key in one engine's storage."""

    @abstractmethod
    def get_attributes(self) -> Entry | None:
        """The attribute row of a StatefulFunction and its expiry, or None."""

    @abstractmethod
    def set_attributes(self, row: tuple, expires: int | None) -> None: ...

    @abstractmethod
    def clear_attributes(self) -> None: ...

    @abstractmethod
    def variable(self, desc: StateDescriptor) -> VariableStore: ...

    @abstractmethod
    def timers(self) -> TimerService: ...


class TtlVariable(StateStorage):
    """A typed state variable with its TTL applied: what the state accessors call."""

    def __init__(self, store: VariableStore, ttl_ms: int | None, clock: Clock):
        self.store, self.ttl, self.clock = store, ttl_ms, clock

    def _expires(self) -> int | None:
        if self.ttl is None:
            return None
        now = self.clock()
        return None if now is None else now + self.ttl

    def _live(self, expires: int | None) -> bool:
        return self.ttl is None or alive(expires, self.clock())

    def clear(self) -> None:
        self.store.clear()

    # value
    def value_exists(self) -> bool:
        return self.value_entry() is not None

    def value_entry(self) -> Entry | None:
        e = self.store.get()
        if e is not None and not self._live(e[1]):
            self.store.clear()
            return None
        return e

    def value_get(self) -> Any:
        e = self.value_entry()
        return None if e is None else e[0]

    def value_set(self, v: Any) -> None:
        self.store.set((v, self._expires()))

    # list
    def _list(self) -> list[Entry]:
        entries = self.store.entries()
        if self.ttl is not None:
            live = [e for e in entries if self._live(e[1])]
            if len(live) != len(entries):
                self.store.put_entries(live) if live else self.store.clear()
            entries = live
        return entries

    def list_get(self) -> list[Any]:
        return [v for v, _ in self._list()]

    def list_append(self, vs: list[Any]) -> None:
        if self.ttl is not None:
            self._list()  # expired entries go first, as a read would drop them
        if vs:
            exp = self._expires()
            self.store.append_entries([(v, exp) for v in vs])

    def list_put(self, vs: list[Any]) -> None:
        if vs:
            exp = self._expires()
            self.store.put_entries([(v, exp) for v in vs])
        else:
            self.store.clear()

    # map
    def map_get(self, k: Any) -> Any:
        e = self.store.map_get(k)
        if e is None:
            return None
        if not self._live(e[1]):
            self.store.map_remove(k)
            return None
        return e[0]

    def map_contains(self, k: Any) -> bool:
        e = self.store.map_get(k)
        if e is not None and not self._live(e[1]):
            self.store.map_remove(k)
            return False
        return e is not None

    def map_put(self, k: Any, v: Any) -> None:
        self.store.map_put(k, (v, self._expires()))

    def map_remove(self, k: Any) -> None:
        self.store.map_remove(k)

    def map_items(self) -> list[tuple[Any, Any]]:
        out = []
        for k, (v, exp) in self.store.map_entries():
            if self._live(exp):
                out.append((k, v))
            else:
                self.store.map_remove(k)
        return out


class KeyBinding:
    """The current key's state as the runner uses it: attribute row and typed variables with
    TTL applied (attribute state expires as a whole, ``attr_ttl_ms`` after its last write),
    and timers."""

    def __init__(self, store: KeyStore, clock: Clock, attr_ttl_ms: int | None = None):
        self.store, self.clock, self.attr_ttl_ms = store, clock, attr_ttl_ms
        self._variables: dict[str, TtlVariable] = {}
        self._timers: TimerService | None = None

    def repoint(self) -> None:
        """Ready for the store's next key (a task keeps one binding, re-pointed at each key,
        instead of making one per key): what was cached of the last key is dropped."""
        if self._variables:
            self._variables = {}
        if self._timers is not None:
            self._timers = None
            self.__dict__.pop("register", None)
            self.__dict__.pop("delete", None)

    def load_attributes(self) -> Any:
        e = self.store.get_attributes()
        if e is None:
            return None
        row, expires = e
        if self.attr_ttl_ms is not None and not alive(expires, self.clock()):
            self.store.clear_attributes()
            return None
        return row

    def save_attributes(self, row: tuple) -> None:
        now = self.clock() if self.attr_ttl_ms is not None else None
        self.store.set_attributes(row, None if now is None else now + self.attr_ttl_ms)  # type: ignore[operator]

    def clear_attributes(self) -> None:
        self.store.clear_attributes()

    def variable(self, desc: StateDescriptor) -> TtlVariable:
        v = self._variables.get(desc.name)
        if v is None:
            v = self._variables[desc.name] = TtlVariable(self.store.variable(desc), desc.ttl_ms, self.clock)
        return v

    def timers(self) -> TimerService:
        if self._timers is None:
            t = self._timers = self.store.timers()
            # from now on the key's register/delete calls go straight to the store's timers: one
            # Python call less per timer call (a sessionizer makes two per row)
            self.register, self.delete = t.register, t.delete  # type: ignore[method-assign]
        return self._timers

    # the binding is the key's TimerService too (``self.ctx`` holds it while the key runs):
    # the store's timer object is made only when user code touches timers
    def register(self, ms: int) -> None:
        self.timers().register(ms)

    def delete(self, ms: int) -> None:
        self.timers().delete(ms)

    def list(self) -> list[int]:
        return self.timers().list()

    def clear_timers(self) -> None:
        ts = self.timers()
        for ms in list(ts.list()):
            ts.delete(ms)

"""Typed keyed state: ``ValueState``, ``ListState`` and ``MapState`` declared as class attributes.

A descriptor on the class; on an instance it returns the accessor bound to the key being
processed. The accessor's storage is supplied by the runtime (``StateStorage``): Spark's state
variables under the transformWithState engine, a dict in KeyedTester and the table function.
"""

from __future__ import annotations

import copy
import datetime as _dt
from abc import ABC, abstractmethod
from collections.abc import Iterator
from enum import Enum
from typing import Any

from .errors import StateAccessError
from .intervals import parse_ttl_ms
from .types import SqlType, StructType, parse_type
from .values import coerce, to_user

__all__ = [
    "StateKind",
    "StateDescriptor",
    "ValueState",
    "ListState",
    "MapState",
    "StateStorage",
    "ValueAccessor",
    "ListAccessor",
    "MapAccessor",
    "bind_accessors",
    "current_accessors",
    "unbind_accessors",
]

# Where a KeyedProcessor instance holds the accessors of the key being run: the runtime binds
# them before user code runs and unbinds them after; the descriptors read them. These three
# functions are the only code that touches the slot.
_ACCESSORS_SLOT = "_ks_accessors"


def bind_accessors(instance: Any, accessors: dict[str, Any]) -> None:
    instance.__dict__[_ACCESSORS_SLOT] = accessors


def unbind_accessors(instance: Any) -> None:
    instance.__dict__.pop(_ACCESSORS_SLOT, None)


def current_accessors(instance: Any) -> dict[str, Any] | None:
    """The accessors of the key being run (None outside a key's call)."""
    return instance.__dict__.get(_ACCESSORS_SLOT)


class StateKind(str, Enum):
    """The three kinds of typed state (the value is what a checkpoint's metadata records)."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


class StateDescriptor:
    """Common part of the three typed state declarations."""

    kind: StateKind

    def __init__(self, ttl: str | int | None = None, renamed_from: str | None = None):
        self.ttl = ttl
        self.ttl_ms: int | None = parse_ttl_ms(ttl, "ttl=") if ttl is not None else None
        if renamed_from is not None and (not isinstance(renamed_from, str) or not renamed_from.isidentifier()):
            raise StateAccessError(f"renamed_from= takes the state variable's former name, got {renamed_from!r}")
        # the name its stored values were kept under before a rename (carried on restart)
        self.renamed_from = renamed_from
        self.name: str = ""
        self.owner: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner.__name__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        accessors = instance.__dict__.get(_ACCESSORS_SLOT)
        if accessors is None or self.name not in accessors:
            raise StateAccessError(
                f"state '{self.name}' of {self.owner} is only available inside process(), "
                "on_timer() or on_initial_state(), while a key is being processed"
            )
        return accessors[self.name]

    def __set__(self, instance: Any, value: Any) -> None:
        raise StateAccessError(
            f"state '{self.name}' of {self.owner} is a {type(self).__name__}; "
            f"use self.{self.name}.update(...) / put(...) instead of assigning it"
        )

    def where(self) -> str:
        return f"{self.owner}.{self.name}"

    def ttl_or(self, ttl_ms: int | None) -> StateDescriptor:
        """This declaration with the function's TTL where it gives none of its own (the SQL
        clause ``TTL <interval>`` is the default TTL of the function's state)."""
        if self.ttl_ms is not None or ttl_ms is None:
            return self
        resolved = copy.copy(self)
        resolved.ttl_ms = ttl_ms
        return resolved


class ValueState(StateDescriptor):
    kind = StateKind.VALUE

    def __init__(
        self,
        type: str | SqlType,
        default: Any = None,
        ttl: str | int | None = None,
        *,
        renamed_from: str | None = None,
    ):
        super().__init__(ttl, renamed_from)
        self.type = parse_type(type)
        self.default = default
        # checked here, not in __set_name__: Python 3.11 wraps an error raised there in a
        # RuntimeError, which `except StateTypeError` would not catch. Kept in storage form, so
        # that get() hands the default over as it hands a stored value (a double as a float, a
        # struct as a dict of every field)
        self.stored_default = coerce(default, self.type, f"default of ValueState({type!r})")


class ListState(StateDescriptor):
    kind = StateKind.LIST

    def __init__(self, type: str | SqlType, ttl: str | int | None = None, *, renamed_from: str | None = None):
        super().__init__(ttl, renamed_from)
        self.type = parse_type(type)


class MapState(StateDescriptor):
    kind = StateKind.MAP

    def __init__(
        self,
        key_type: str | SqlType,
        value_type: str | SqlType,
        ttl: str | int | None = None,
        *,
        renamed_from: str | None = None,
    ):
        super().__init__(ttl, renamed_from)
        self.key_type = parse_type(key_type)
        self.type = parse_type(value_type)
        if isinstance(self.key_type, StructType):
            raise StateAccessError("MapState keys must be scalar types")


class StateStorage(ABC):
    """Primitive per-key operations a runtime provides for one state variable.

    Values cross this interface in storage form (tuples for structs, as ``coerce`` returns).
    """

    # value
    @abstractmethod
    def value_get(self) -> Any: ...
    @abstractmethod
    def value_exists(self) -> bool: ...
    @abstractmethod
    def value_set(self, v: Any) -> None: ...
    @abstractmethod
    def clear(self) -> None: ...

    # list
    @abstractmethod
    def list_get(self) -> list[Any]: ...
    @abstractmethod
    def list_append(self, vs: list[Any]) -> None: ...
    @abstractmethod
    def list_put(self, vs: list[Any]) -> None: ...

    # map
    @abstractmethod
    def map_get(self, k: Any) -> Any: ...
    @abstractmethod
    def map_contains(self, k: Any) -> bool: ...
    @abstractmethod
    def map_put(self, k: Any, v: Any) -> None: ...
    @abstractmethod
    def map_remove(self, k: Any) -> None: ...
    @abstractmethod
    def map_items(self) -> list[tuple[Any, Any]]: ...


class _Accessor:
    def __init__(self, desc: StateDescriptor, storage: StateStorage):
        self._desc = desc
        self._storage = storage

    def clear(self) -> None:
        self._storage.clear()

    def _in(self, v: Any) -> Any:
        return coerce(v, self._desc.type, f"value for state {self._desc.where()}")  # type: ignore[attr-defined]

    def _out(self, v: Any) -> Any:
        return to_user(v, self._desc.type)  # type: ignore[attr-defined]


class ValueAccessor(_Accessor):
    def get(self) -> Any:
        if not self._storage.value_exists():
            return self._out(self._desc.stored_default)  # type: ignore[attr-defined]  (a fresh copy)
        return self._out(self._storage.value_get())

    def update(self, v: Any) -> None:
        stored = None if v is None else self._in(v)
        if stored is None:  # (None, or a NaT: unset)
            self._storage.clear()
        else:
            self._storage.value_set(stored)

    def exists(self) -> bool:
        return self._storage.value_exists()


class ListAccessor(_Accessor):
    def get(self) -> Iterator[Any]:
        return iter([self._out(v) for v in self._storage.list_get()])

    def append(self, v: Any) -> None:
        self._storage.list_append([self._in(v)])

    def extend(self, vs: Any) -> None:
        self._storage.list_append([self._in(v) for v in vs])

    def put(self, vs: Any) -> None:
        self._storage.list_put([self._in(v) for v in vs])


def _sort_key(k: Any) -> tuple:
    return (k is None, k)


class MapAccessor(_Accessor):
    def _key(self, k: Any) -> Any:
        k = coerce(k, self._desc.key_type, f"key for state {self._desc.where()}")  # type: ignore[attr-defined]
        if type(k) is _dt.datetime and k.tzinfo is not None:  # one instant, one key (naive UTC, as Spark keeps it)
            return k.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return k

    def get(self, k: Any) -> Any:
        v = self._storage.map_get(self._key(k))
        return None if v is None else self._out(v)

    def put(self, k: Any, v: Any) -> None:
        if v is None:
            self._storage.map_remove(self._key(k))
        else:
            self._storage.map_put(self._key(k), self._in(v))

    def contains(self, k: Any) -> bool:
        return self._storage.map_contains(self._key(k))

    def remove(self, k: Any) -> None:
        self._storage.map_remove(self._key(k))

    def _sorted(self) -> list[tuple[Any, Any]]:
        return sorted(self._storage.map_items(), key=lambda kv: _sort_key(kv[0]))

    def keys(self) -> Iterator[Any]:
        return iter([k for k, _ in self._sorted()])

    def values(self) -> Iterator[Any]:
        return iter([self._out(v) for _, v in self._sorted()])

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter([(k, self._out(v)) for k, v in self._sorted()])

    def all(self) -> Iterator[tuple[Any, Any]]:
        """All entries in key order (Samza's ``KeyValueStore.all``)."""
        return self.items()

    def range(self, from_k: Any, to_k: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_k <= key < to_k`` in key order (Samza's ``range``); a bound given as
        None is open (``range(None, "m")``: every key before ``"m"``)."""
        lo = None if from_k is None else self._key(from_k)
        hi = None if to_k is None else self._key(to_k)
        return iter(
            [
                (k, self._out(v))
                for k, v in self._sorted()
                if k is not None and (lo is None or lo <= k) and (hi is None or k < hi)
            ]
        )


ACCESSORS = {StateKind.VALUE: ValueAccessor, StateKind.LIST: ListAccessor, StateKind.MAP: MapAccessor}

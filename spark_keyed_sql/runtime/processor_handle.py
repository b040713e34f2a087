"""What a pyspark ``StatefulProcessor`` run by the adapter (processor_adapter.py) speaks to:
the handle its ``init(handle)`` gets. At registration a recording handle turns the state it
declares (``getValueState`` / ``getListState`` / ``getMapState``, TTL included) into typed
state descriptors (:class:`Declared`); at run time the same handle hands state objects that
speak pyspark's API (values are tuples) over the current key's state, and its timers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..api.context import to_epoch_ms
from ..api.errors import RegistrationError, StateAccessError
from ..api.function import KeyedProcessor
from ..api.state import ListState, MapState, StateDescriptor, StateStorage, ValueState, current_accessors
from ..api.types import StructType, parse_schema
from ..api.values import coerce

__all__ = ["Declared", "Handle"]


# ---------------------------------------------------------------------- schemas


def _schema(schema: Any, what: str) -> StructType:
    """A pyspark StructType or DDL string -> our StructType."""
    if isinstance(schema, str):
        return parse_schema(schema)
    simple = getattr(schema, "simpleString", None)
    if simple is None:
        raise RegistrationError(f"{what}: schema must be a StructType or a DDL string, got {schema!r}")
    text = simple()
    if not text.startswith("struct<"):
        text = f"value {text}"  # a bare type: one field named value
    return parse_schema(text)


def _state_type(schema: Any, what: str) -> tuple[Any, bool]:
    """The state's type, and whether it was a one-field struct stored as its field's type
    (pyspark's ``(v,)`` is ``v`` in our state, so every reader shows the value itself)."""
    st = _schema(schema, what)
    if len(st.fields) == 1:
        return st.fields[0].type, True
    return st, False


def _ttl(ttl_ms: Any, what: str) -> int | None:
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        raise RegistrationError(f"{what}: ttlDurationMs must be a positive int (milliseconds), got {ttl_ms!r}")
    return int(ttl_ms)


class Declared:
    """What ``init`` declared: descriptor per state name, in declaration order."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.descriptors: dict[str, StateDescriptor] = {}
        self.single: dict[str, bool] = {}  # a state declared with a one-field schema: pyspark's (v,) is v here
        self.deleted: set[str] = set()

    def value(self, name: str, schema: Any, ttl: Any) -> StateDescriptor:
        what = f"{self.where}: getValueState({name!r})"
        t, single = _state_type(schema, what)
        return self._add(name, ValueState(t, ttl=_ttl(ttl, what)), single)

    def list(self, name: str, schema: Any, ttl: Any) -> StateDescriptor:
        what = f"{self.where}: getListState({name!r})"
        t, single = _state_type(schema, what)
        return self._add(name, ListState(t, ttl=_ttl(ttl, what)), single)

    def map(self, name: str, key_schema: Any, value_schema: Any, ttl: Any) -> StateDescriptor:
        what = f"{self.where}: getMapState({name!r})"
        ks = _schema(key_schema, what)
        if len(ks.fields) != 1 or isinstance(ks.fields[0].type, StructType):
            raise RegistrationError(
                f"{what}: the user key schema must have exactly one scalar field (got {ks}); "
                "a composite map key is not supported"
            )
        t, single = _state_type(value_schema, what)
        return self._add(name, MapState(ks.fields[0].type, t, ttl=_ttl(ttl, what)), single)

    def _add(self, name: str, desc: StateDescriptor, single: bool) -> StateDescriptor:
        if not isinstance(name, str) or not name or name.startswith("_") or hasattr(KeyedProcessor, name):
            raise RegistrationError(
                f"{self.where}: state name {name!r} cannot be used (empty, starting with '_', or the "
                "name of a KeyedProcessor method)"
            )
        self.deleted.discard(name)
        self.single[name] = single
        self.descriptors[name] = desc
        return desc

    def delete(self, name: str) -> None:
        self.descriptors.pop(name, None)
        self.deleted.add(name)


# ---------------------------------------------------------------------- pyspark-style state objects


def _runtime_error(message: str) -> Exception:
    try:
        from pyspark.errors import PySparkRuntimeError

        return PySparkRuntimeError(message)
    except ImportError:  # pragma: no cover
        return RuntimeError(message)


class _Var:
    """Base of the state objects the user's processor holds; bound to the current key."""

    def __init__(self, owner: Any, name: str, desc: Any, single: bool) -> None:
        self._owner, self._name, self._desc, self._single = owner, name, desc, single

    def _storage(self, op: str) -> StateStorage:
        accessors = current_accessors(self._owner)
        if self._name in _deleted(self._owner):
            raise _runtime_error(
                f"Error {op}: state variable '{self._name}' was removed by deleteIfExists('{self._name}')"
            )
        if accessors is None or self._name not in accessors:
            raise StateAccessError(
                f"state '{self._name}' of {type(self._owner).__name__} is only available inside "
                "handleInputRows, handleExpiredTimer or handleInitialState"
            )
        return accessors[self._name]._storage

    def _in(self, v: Any) -> Any:
        if self._single:
            if not isinstance(v, (tuple, list)) or len(v) != 1:
                raise StateAccessError(f"state '{self._name}' holds one-field rows: give a 1-tuple, got {v!r}")
            v = v[0]
        elif hasattr(v, "asDict") and not isinstance(v, tuple):
            v = v.asDict()
        return coerce(v, self._desc.type, f"value for state '{self._name}'")

    def _out(self, v: Any) -> tuple:
        return (v,) if self._single else tuple(v)

    def clear(self) -> None:
        self._storage("clearing state").clear()


class _ValueVar(_Var):
    def exists(self) -> bool:
        return self._storage("checking value state exists").value_exists()

    def get(self) -> tuple | None:
        st = self._storage("getting value state")
        return self._out(st.value_get()) if st.value_exists() else None

    def update(self, newValue: Any) -> None:
        self._storage("updating value state").value_set(self._in(newValue))


class _ListVar(_Var):
    def exists(self) -> bool:
        return bool(self._storage("checking list state exists").list_get())

    def get(self) -> Iterator[tuple]:
        return iter([self._out(v) for v in self._storage("getting list state").list_get()])

    def _values(self, newState: Any) -> list[Any]:
        vs = [self._in(v) for v in newState]
        if not vs:  # as Spark's state store refuses it (ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE)
            raise _runtime_error(
                f"Error updating value state: cannot write empty list values to state '{self._name}' "
                "(Spark refuses it too; use clear())"
            )
        return vs

    def put(self, newState: Any) -> None:
        self._storage("putting list state").list_put(self._values(newState))

    def appendValue(self, newState: Any) -> None:
        self._storage("appending to list state").list_append([self._in(newState)])

    def appendList(self, newState: Any) -> None:
        self._storage("appending to list state").list_append(self._values(newState))


def _map_order(kv: tuple) -> tuple:
    return (kv[0] is None, kv[0])


class _MapVar(_Var):
    def _key(self, k: Any) -> Any:
        if hasattr(k, "asDict") or isinstance(k, (tuple, list)):
            if len(k) != 1:
                raise StateAccessError(f"map state '{self._name}': a user key is a 1-tuple, got {k!r}")
            k = k[0]
        return coerce(k, self._desc.key_type, f"key for map state '{self._name}'")

    def _items(self, op: str) -> list[tuple[Any, Any]]:
        return sorted(self._storage(op).map_items(), key=_map_order)

    def exists(self) -> bool:
        return bool(self._storage("checking map state exists").map_items())

    def getValue(self, key: Any) -> tuple | None:
        v = self._storage("getting map value").map_get(self._key(key))
        return None if v is None else self._out(v)

    def containsKey(self, key: Any) -> bool:
        return self._storage("checking map key").map_contains(self._key(key))

    def updateValue(self, key: Any, value: Any) -> None:
        self._storage("updating map value").map_put(self._key(key), self._in(value))

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter([((k,), self._out(v)) for k, v in self._items("iterating map state")])

    def keys(self) -> Iterator[tuple]:
        return iter([(k,) for k, _ in self._items("iterating map state")])

    def values(self) -> Iterator[tuple]:
        return iter([self._out(v) for _, v in self._items("iterating map state")])

    def removeKey(self, key: Any) -> None:
        self._storage("removing map key").map_remove(self._key(key))


_VARS = {"value": _ValueVar, "list": _ListVar, "map": _MapVar}


class Handle:
    """The ``StatefulProcessorHandle`` given to the user's ``init``.

    Without an owner it only records declarations (at registration); with one, the state
    objects it returns read and write the owner's current key."""

    def __init__(self, declared: Declared, owner: Any = None) -> None:
        self._declared, self._owner = declared, owner

    def _var(self, desc: StateDescriptor, name: str) -> Any:
        single = self._declared.single.get(name, False)
        if self._owner is None:
            return _VARS[desc.kind](_Recorded(), name, desc, single)
        _deleted(self._owner).discard(name)
        return _VARS[desc.kind](self._owner, name, desc, single)

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:
        return self._var(self._declared.value(stateName, schema, ttlDurationMs), stateName)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> Any:
        return self._var(self._declared.list(stateName, schema, ttlDurationMs), stateName)

    def getMapState(
        self, stateName: str, userKeySchema: Any, valueSchema: Any, ttlDurationMs: int | None = None
    ) -> Any:
        return self._var(self._declared.map(stateName, userKeySchema, valueSchema, ttlDurationMs), stateName)

    def _ctx(self, op: str) -> Any:
        if self._owner is None or current_accessors(self._owner) is None:
            raise _runtime_error(f"{op} is only available while a key is being processed, not in init()")
        return self._owner.ctx

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._ctx("registerTimer").register_timer(int(expiryTimestampMs))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._ctx("deleteTimer").delete_timer(int(expiryTimestampMs))

    def listTimers(self) -> Iterator[int]:
        return iter([to_epoch_ms(t) for t in self._ctx("listTimers").list_timers()])

    def deleteIfExists(self, stateName: str) -> None:
        owner = self._owner
        if owner is None:
            self._declared.delete(stateName)
            return
        accessors = current_accessors(owner)
        if accessors is None:  # in init(): the variable is gone until declared again
            _deleted(owner).add(stateName)
        elif stateName in accessors:
            accessors[stateName].clear()


class _Recorded:
    """Owner of the state objects made while recording: using them in init() is an error (it
    never has accessors bound)."""

    def __init__(self) -> None:
        self._deleted_state: set[str] = set()


def _deleted(owner: Any) -> set[str]:
    """The state variables ``deleteIfExists`` removed in the owner's init() (until declared again)."""
    return owner._deleted_state

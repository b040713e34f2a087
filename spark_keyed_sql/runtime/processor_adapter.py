"""Run a pyspark ``StatefulProcessor`` (written for ``transformWithStateInPandas`` or
``transformWithState``) unchanged, as one of our ``KeyedProcessor`` classes.

The processor's ``init(handle)`` runs once at registration with a recording handle: the state
variables it declares (``getValueState`` / ``getListState`` / ``getMapState``, TTL included)
become typed state descriptors of a generated ``KeyedProcessor`` subclass, so every engine,
``KeyedTester`` and ``ks.read_state`` see ordinary typed state. At run time each generated
instance owns one copy of the user's processor, ``init`` is called again with a live handle
whose state objects speak pyspark's API (values are tuples) over the current key's state.
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from ..api.context import to_epoch_ms
from ..api.errors import KeyedSQLError, RegistrationError, StateAccessError
from ..api.function import KeyedProcessor
from ..api.state import ListState, MapState, StateDescriptor, StateStorage, ValueState, current_accessors
from ..api.types import StructType, parse_schema
from ..api.values import coerce

__all__ = ["STYLES", "is_stateful_processor", "adapt_processor", "processor_style"]

STYLES = ("pandas", "row")


def _base() -> type | None:
    try:
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return StatefulProcessor


def is_stateful_processor(obj: Any) -> bool:
    """A pyspark ``StatefulProcessor`` subclass or instance."""
    base = _base()
    if base is None:
        return False
    return (inspect.isclass(obj) and issubclass(obj, base)) or isinstance(obj, base)


def processor_style(user_cls: type, style: str | None, name: str) -> str:
    """``style`` when given; else what ``handleInputRows``'s return annotation says
    (``Iterator[pd.DataFrame]`` -> pandas, ``Iterator[Row]`` -> row); else pandas."""
    if style is not None:
        if style not in STYLES:
            raise RegistrationError(
                f"'{name}': style={style!r} is not one of {', '.join(repr(s) for s in STYLES)} "
                "('pandas' for transformWithStateInPandas processors, 'row' for transformWithState)"
            )
        return style
    fn = getattr(user_cls, "handleInputRows", None)
    ann = getattr(fn, "__annotations__", {}).get("return")
    text = ann if isinstance(ann, str) else repr(ann) if ann is not None else ""
    if "DataFrame" in text:
        return "pandas"
    if "Row" in text:
        return "row"
    return "pandas"


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


class _Declared:
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


class _Handle:
    """The ``StatefulProcessorHandle`` given to the user's ``init``.

    Without an owner it only records declarations (at registration); with one, the state
    objects it returns read and write the owner's current key."""

    def __init__(self, declared: _Declared, owner: Any = None) -> None:
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


# ---------------------------------------------------------------------- rows in, rows out


def _timer_values(ctx: Any) -> Any:
    from pyspark.sql.streaming.stateful_processor import TimerValues

    p, w = ctx.call.processing_ms, ctx.call.watermark_ms
    return TimerValues(-1 if p is None else int(p), -1 if w is None else int(w))


def _key_tuple(owner: Any, key: Any) -> tuple:
    if not owner.ctx.is_keyed:
        return ()
    return key if isinstance(key, tuple) else (key,)


def _pandas_frame(rows: Any) -> Any:
    import pandas as pd

    if not isinstance(rows, pd.DataFrame):
        rows = pd.DataFrame.from_records(rows)
    for c in rows.columns:  # Spark hands timestamps as datetime64[ns]
        dt = rows[c].dtype
        if str(dt).startswith("datetime64[") and str(dt) != "datetime64[ns]" and getattr(dt, "tz", None) is None:
            rows[c] = rows[c].astype("datetime64[ns]")
    return rows


def _row(d: dict) -> Any:
    from pyspark.sql import Row

    vals = {}
    for k, v in d.items():
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        if isinstance(v, _dt.datetime) and v.tzinfo is None:  # as transformWithState gives them
            v = v.replace(tzinfo=_dt.timezone.utc)
        vals[k] = v
    return Row(**vals)


def _collect(result: Any, style: str) -> list[Any]:
    """Consume what a handler returned (now, while the key's state is bound)."""
    if result is None:
        return []
    out: list[Any] = []
    for item in result if not hasattr(result, "to_dict") else [result]:
        if item is None:
            continue
        if hasattr(item, "to_dict") and hasattr(item, "columns"):  # a pandas DataFrame
            out.extend(item.to_dict("records"))
        elif hasattr(item, "asDict") and hasattr(item, "__fields__"):
            out.append(item.asDict())  # a Row with field names: matched to returns by name
        elif isinstance(item, tuple):
            out.append(tuple(item))  # a positional Row or a tuple: by position
        else:
            out.append(item)
    return out


# ---------------------------------------------------------------------- the generated class


def _overrides(user_cls: type, method: str) -> bool:
    base = _base()
    for k in user_cls.__mro__:
        if k is base:
            return False
        if method in k.__dict__:
            return True
    return False


def adapt_processor(name: str, obj: Any, kwargs: dict[str, Any], style: str | None) -> type:
    """A ``KeyedProcessor`` subclass running the pyspark StatefulProcessor ``obj`` (a class,
    built with ``kwargs``, or an instance, copied once per runner)."""
    user_cls: type = obj if inspect.isclass(obj) else type(obj)
    where = f"'{name}' ({user_cls.__name__})"
    if not inspect.isclass(obj) and kwargs:
        raise RegistrationError(f"{where}: constructor arguments {sorted(kwargs)} given with an instance")
    if not _overrides(user_cls, "handleInputRows"):
        raise RegistrationError(f"{where}: does not define handleInputRows(self, key, rows, timerValues)")
    resolved = processor_style(user_cls, style, name)
    template = None if inspect.isclass(obj) else obj
    ctor_kwargs = dict(kwargs)

    def make() -> Any:
        if template is not None:
            return copy.deepcopy(template)
        return user_cls(**ctor_kwargs)

    declared = _Declared(where)
    probe: list[Any] = []
    # built, init, then close, as Spark does with the driver's pre-init copy
    steps = (
        ("building it", lambda: probe.append(make())),
        ("init(handle)", lambda: probe[0].init(_Handle(declared))),
        ("close()", lambda: probe[0].close()),
    )
    for step, call in steps:
        try:
            call()
        except KeyedSQLError:
            raise
        except Exception as exc:
            raise RegistrationError(f"{where}: {step} failed at registration: {type(exc).__name__}: {exc}") from exc

    namespace: dict[str, Any] = dict(declared.descriptors)
    namespace.update(_methods(user_cls, make, declared.where, resolved))
    namespace["__module__"] = __name__
    namespace["__qualname__"] = user_cls.__name__
    returns = getattr(user_cls, "returns", None)
    namespace["returns"] = returns if isinstance(returns, str) else None
    return type(user_cls.__name__, (KeyedProcessor,), namespace)


def _methods(user_cls: type, make: Callable[[], Any], where: str, style: str) -> dict[str, Any]:
    pandas = style == "pandas"

    def __init__(self: Any, **kwargs: Any) -> None:
        KeyedProcessor.__init__(self)
        user = make()
        self._deleted_state = set()
        self._user = user
        try:
            user.init(_Handle(_Declared(where), self))
        except KeyedSQLError:
            raise
        except Exception as exc:
            raise RegistrationError(f"{where}: init(handle) failed: {type(exc).__name__}: {exc}") from exc

    def process(self: Any, key: Any, rows: Any) -> list[Any]:
        k = _key_tuple(self, key)
        data = iter([_pandas_frame(rows)]) if pandas else iter([_row(r) for r in rows])
        return _collect(self._user.handleInputRows(k, data, _timer_values(self.ctx)), style)

    def on_initial_state(self: Any, key: Any, state_row: dict) -> None:
        import pandas as pd

        k = _key_tuple(self, key)
        init = _pandas_frame(pd.DataFrame([state_row])) if pandas else _row(state_row)
        self._user.handleInitialState(k, init, _timer_values(self.ctx))

    def close(self: Any) -> None:
        self._user.close()

    methods: dict[str, Any] = {
        "__init__": __init__,
        "close": close,
        "process": process,
        "on_initial_state": on_initial_state,
        # the runner hands row-style processors the rows as dicts, not a pandas frame
        "rows_format": "pandas" if pandas else "records",
    }
    if _overrides(user_cls, "handleExpiredTimer"):

        def on_timer(self: Any, key: Any, timestamp: Any) -> list[Any]:
            from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

            k = _key_tuple(self, key)
            info = ExpiredTimerInfo(to_epoch_ms(timestamp))
            return _collect(self._user.handleExpiredTimer(k, _timer_values(self.ctx), info), style)

        methods["on_timer"] = on_timer
    return methods

"""The two kinds of user class: ``StatefulFunction`` (row at a time, attribute state) and
``KeyedProcessor`` (group at a time, typed state)."""

from __future__ import annotations

import copy
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from .annotations import python_container, python_type_to_sql
from .context import KeyContext
from .errors import SchemaError
from .state import StateDescriptor, StateKind
from .types import SqlType

__all__ = [
    "StatefulFunction",
    "KeyedProcessor",
    "DEFAULT_EXCLUDED",
    "state_attribute_names",
    "typed_attributes",
    "attribute_containers",
    "state_descriptors",
    "state_renames",
    "state_converters",
]

DEFAULT_EXCLUDED = frozenset({"logger", "_logger", "runtime_context", "ctx"})
# what the runtime keeps on an instance (api/state.py), and what a class set as self.runtime_context
_RUNTIME_SLOTS = frozenset({"_ctx", "ctx", "_ks_accessors", "_ks_runtime_context"})
_OWN_RUNTIME_CONTEXT = "_ks_runtime_context"


def attach_context(instance: Any) -> KeyContext:
    d = instance.__dict__
    c = d.get("_ctx")
    if c is None:
        c = d["_ctx"] = KeyContext()
    d["ctx"] = c
    return c


class _CtxSlot:
    """``self.ctx``: kept in the instance's ``__dict__`` after the first read, so the hot path
    (a timer call per row) reads a plain attribute rather than running a property."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return attach_context(instance)


class _Keyed:
    returns: ClassVar[str | None] = None

    def __init__(self, **kwargs: Any) -> None:
        # SAGE passes framework kwargs through super().__init__(**kwargs); nothing to keep.
        attach_context(self)

    ctx = _CtxSlot()

    @property
    def runtime_context(self) -> Any:
        """The key's context (``self.ctx``), unless the class set its own (a class ported from
        SAGE keeps the one its framework hands ``__init__``); never state."""
        own = self.__dict__.get(_OWN_RUNTIME_CONTEXT)
        return self.ctx if own is None else own  # (SAGE's __init__ default is None: the key's context)

    @runtime_context.setter
    def runtime_context(self, value: Any) -> None:
        self.__dict__[_OWN_RUNTIME_CONTEXT] = value  # (a name starting with _: not state)

    def on_timer(self, key: Any, timestamp: Any) -> Any:
        """Called when a registered timer fires; may return rows like execute/process."""
        return None


class StatefulFunction(_Keyed):
    """Row at a time: ``execute(event)`` with every instance attribute kept per key."""

    __state_include__: ClassVar[list[str]] = []
    __state_exclude__: ClassVar[list[str]] = []
    state_ttl: ClassVar[str | None] = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # a class without an __init__ of its own: an annotated attribute with a value in the class
        # body (``count: int = 0``) is state starting from that value (the value the class
        # resolves, a subclass's included), as if __init__ had set it; a copy, so a list stays per
        # key. (With an __init__, what it sets is the state: a class-body value stays a constant.)
        cls = type(self)
        if cls.__init__ is not StatefulFunction.__init__:
            return
        for _, name, _ in _state_annotations(cls):
            if name not in self.__dict__ and hasattr(cls, name):
                value = getattr(cls, name)
                if not (callable(value) or isinstance(inspect.getattr_static(cls, name), (property, StateDescriptor))):
                    self.__dict__[name] = copy.deepcopy(value)

    def execute(self, event: dict) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define execute(self, event)")


class KeyedProcessor(_Keyed):
    """Group at a time: ``process(key, rows)`` with typed ValueState/ListState/MapState.

    ``rows`` is the key's rows as a pandas DataFrame; a class may set ``rows_format`` to
    ``"numpy"`` (a ``ColumnRows``: one numpy array per column, no frame built) or
    ``"records"`` (a list of dicts, one per row)."""

    rows_format: ClassVar[str] = "pandas"

    def process(self, key: Any, rows: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define process(self, key, rows)")

    def close(self) -> None:
        """Called once at the end of each task's pass over a batch (as Spark calls a
        StatefulProcessor's ``close()`` at the end of each partition); nothing by default."""

    def on_initial_state(self, key: Any, state_row: dict) -> None:
        """Seed the key's state from one row of an initial-state table. Default: for each
        column named like a ValueState, set it; ListState/MapState columns take lists/dicts."""
        for name, desc in state_descriptors(type(self)).items():
            if name not in state_row or state_row[name] is None:
                continue
            acc = getattr(self, name)
            v = state_row[name]
            if desc.kind is StateKind.VALUE:
                acc.update(v)
            elif desc.kind is StateKind.LIST:
                acc.put(list(v))
            else:
                for k, item in dict(v).items():
                    acc.put(k, item)


def state_attribute_names(instance: Any) -> list[str]:
    """The instance attributes that are per-key state, in definition order."""
    cls = type(instance)
    include = list(getattr(cls, "__state_include__", []) or [])
    exclude = set(getattr(cls, "__state_exclude__", []) or [])
    names = [n for n in vars(instance) if n not in _RUNTIME_SLOTS]
    if include:
        return [n for n in names if n in include]
    return [n for n in names if n not in DEFAULT_EXCLUDED and not n.startswith("_") and n not in exclude]


def _state_annotations(cls: type) -> Iterator[tuple[type, str, Any]]:
    """(defining class, name, annotation) of the annotations that may type state attributes,
    base classes first (a subclass's annotation of a name comes after its base's)."""
    for klass in reversed(cls.__mro__):
        if klass in (object, _Keyed, StatefulFunction, KeyedProcessor):
            continue
        for name, a in klass.__dict__.get("__annotations__", {}).items():
            if name.startswith("__") or name in ("returns", "state_ttl"):
                continue
            if typing.get_origin(a) is ClassVar or (isinstance(a, str) and a.startswith("ClassVar")):
                continue
            yield klass, name, a


def typed_attributes(cls: type) -> dict[str, SqlType]:
    """Annotated attributes of a StatefulFunction, as SQL types."""
    out: dict[str, SqlType] = {}
    for klass, name, a in _state_annotations(cls):
        try:
            out[name] = python_type_to_sql(a, f"{cls.__name__}.{name}")
        except SchemaError:
            resolved = _evaluated(klass, a)  # `from __future__ import annotations`: "list[str]"
            if resolved is None:
                raise
            out[name] = python_type_to_sql(resolved, f"{cls.__name__}.{name}")
    return out


_RESOLVED = "__ks_resolved_annotations__"  # on a class: its string annotations as evaluated


def _evaluated(klass: type, annotation: Any) -> Any:
    """A string annotation evaluated as Python would (``typing.get_type_hints``, one at a time: a
    DDL string such as ``"amount double"`` is not Python); None when it is not Python."""
    if not isinstance(annotation, str):
        return None
    # what the driver evaluated travels with the class: a class shipped by value reaches a Python
    # worker whose sys.modules lacks its module (a notebook's, a test's), where `dt.datetime`
    # would not evaluate
    resolved = klass.__dict__.get(_RESOLVED)
    if resolved is not None and annotation in resolved:
        return resolved[annotation]
    module = sys.modules.get(klass.__module__)
    try:
        value = eval(annotation, dict(vars(module)) if module else {}, dict(vars(klass)))  # noqa: S307
    except Exception:  # noqa: BLE001 - not a Python expression: the caller's error stands
        return None
    if resolved is None:
        resolved = {}
        try:
            type.__setattr__(klass, _RESOLVED, resolved)
        except (TypeError, AttributeError):  # (a class that refuses attributes: evaluated each time)
            return value
    resolved[annotation] = value
    return value


def attribute_containers(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Annotated attributes whose annotation says a set, frozenset or tuple (stored as arrays):
    how each stored value becomes that container again."""
    out: dict[str, Callable[[Any], Any]] = {}
    for klass, name, a in _state_annotations(cls):
        convert = python_container(_evaluated(klass, a) if isinstance(a, str) else a)
        if convert is not None:
            out[name] = convert
        else:
            out.pop(name, None)  # (a subclass re-annotated it)
    return out


def state_descriptors(cls: type) -> dict[str, StateDescriptor]:
    out: dict[str, StateDescriptor] = {}
    for klass in reversed(cls.__mro__):
        for name, v in vars(klass).items():
            if isinstance(v, StateDescriptor):
                out[name] = v
    return out


def state_renames(cls: type) -> dict[str, str]:
    """New name -> the name its stored values were kept under: ``__state_renamed__ = {"new":
    "old"}`` (attributes or state variables) and ``renamed_from=`` on a typed variable."""
    declared = getattr(cls, "__state_renamed__", None) or {}
    if not isinstance(declared, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k.isidentifier() and v.isidentifier() for k, v in declared.items()
    ):
        raise SchemaError(
            f"{cls.__name__}.__state_renamed__ must map each new state name to its former one "
            f'({{"new": "old"}}), got {declared!r}'
        )
    out = dict(declared)
    for name, desc in state_descriptors(cls).items():
        if desc.renamed_from is not None:
            if out.get(name, desc.renamed_from) != desc.renamed_from:
                raise SchemaError(
                    f"{cls.__name__}.{name}: renamed from {desc.renamed_from!r} (renamed_from=) and from "
                    f"{out[name]!r} (__state_renamed__); declare it once"
                )
            out[name] = desc.renamed_from
    olds = list(out.values())
    twice = sorted({o for o in olds if olds.count(o) > 1})
    if twice:
        raise SchemaError(f"{cls.__name__}: state {twice} renamed to two names; a stored name carries to one")
    return out


def state_converters(cls: type) -> dict[str, Callable[[Any], Any]]:
    """``__state_converters__ = {"name": callable}``: how a stored value of a changed type
    becomes the new type's (called per stored non-NULL value; per element of a ListState, per
    value of a MapState)."""
    declared = getattr(cls, "__state_converters__", None) or {}
    if not isinstance(declared, dict) or not all(isinstance(k, str) and callable(v) for k, v in declared.items()):
        raise SchemaError(
            f'{cls.__name__}.__state_converters__ must map state names to callables ({{"total": float}}), '
            f"got {declared!r}"
        )
    return dict(declared)

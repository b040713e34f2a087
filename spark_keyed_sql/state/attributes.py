"""Attribute state of a StatefulFunction as one typed row per key.

Annotated attributes become typed columns; every other state attribute becomes a string
column holding the safe JSON encoding (``encoding.py``). The row is read once and written
once per key per batch.
"""

from __future__ import annotations

import copy
import datetime as _dt
from typing import Any

from ..api.errors import StateEncodingError, StateTypeError
from ..api.function import attribute_containers, state_attribute_names, typed_attributes
from ..api.types import AtomicType, SqlType, StructField, StructType
from ..api.values import FAST_CHECK_NAMES, coerce, fast_check, to_user
from ..compat.codegen import generated_function
from .encoding import dumps, loads

__all__ = ["AttributeLayout", "ENCODED", "LIVE_NAMES", "live_expression"]

ENCODED = AtomicType("string")
_IMMUTABLE = (int, float, str, bool, type(None), bytes, _dt.datetime, _dt.date, _dt.timedelta)


def _encoder(layout: AttributeLayout) -> Any:
    """``encode`` for an instance holding exactly the attributes ``__init__`` made, generated per
    class like the output converters: a typed value of the exact type passes with one inline
    check, everything else through ``coerce`` / ``dumps`` (which say what is wrong)."""
    env: dict[str, Any] = {"coerce": coerce, "dumps": dumps, **FAST_CHECK_NAMES}
    lines = []
    for i, n in enumerate(layout.names):
        env[f"w{i}"] = f"attribute {layout.owner}.{n}"
        lines.append(f"    v{i} = d[{n!r}]")
        if n in layout.typed:
            env[f"t{i}"] = layout.typed[n]
            check = fast_check(layout.typed[n], f"v{i}")
            convert = f"coerce(v{i}, t{i}, w{i})"
            lines.append(f"    v{i} = v{i} if {check} else {convert}" if check else f"    v{i} = {convert}")
        else:
            lines.append(f"    v{i} = dumps(v{i}, w{i})")
    vs = ", ".join(f"v{i}" for i in range(len(layout.names)))
    src = "def encode(d):\n" + ("\n".join(lines) or "    pass") + f"\n    return ({vs}{',' if layout.names else ''})\n"
    return generated_function(src, "encode", env, f"attribute encoder {layout.owner}")


_LIVE = (int, float, str, bool, type(None), bytes, _dt.date, _dt.timedelta)  # JSON round trip gives them back equal


# the names a live-check expression uses (live_expression), for the code that inlines it
LIVE_NAMES: dict[str, Any] = {"__live": _LIVE, **FAST_CHECK_NAMES}


def live_expression(layout: AttributeLayout, d: str = "d") -> str:
    """``live_safe``'s test as Python source over ``d``, the ``__dict__`` of an instance holding
    exactly the attributes ``__init__`` made: true when storing and reloading every attribute would
    hand back the value it holds (typed ones unchanged by ``coerce``; encoded ones immutable and
    equal after the JSON round trip). Its names are ``LIVE_NAMES``; each attribute is read from
    ``d`` once, into a local ``__l<i>`` (the loops that inline it run it once a key)."""
    terms = []
    for i, n in enumerate(layout.names):
        v, read = f"__l{i}", f"(__l{i} := {d}[{n!r}])"
        if n in layout.typed:
            check = fast_check(layout.typed[n], v)
            if not check:
                return "False"
            terms.append(f"({read} is None or {check})")
        else:  # a naive datetime comes back equal; an aware one may come back with another tzinfo
            terms.append(f"(type({read}) in __live or (type({v}) is __datetime and {v}.tzinfo is None))")
    return " and ".join(terms) or "True"


def _live_check(layout: AttributeLayout) -> Any:
    src = "def live(d):\n    return " + live_expression(layout) + "\n"
    return generated_function(src, "live", dict(LIVE_NAMES), f"attribute live check {layout.owner}")


class AttributeLayout:
    """Which attributes are state, their column types, and how to move them in and out."""

    def __init__(self, instance: Any):
        cls = type(instance)
        self.owner = cls.__name__
        typed = typed_attributes(cls)
        self.names: list[str] = state_attribute_names(instance)
        self.typed: dict[str, SqlType] = {n: typed[n] for n in self.names if n in typed}
        containers = attribute_containers(cls)
        self.containers = {n: containers[n] for n in self.names if n in self.typed and n in containers}
        self.schema = StructType(tuple(StructField(n, self.typed.get(n, ENCODED)) for n in self.names))
        # fail at registration, not in the middle of a query (and before deepcopy trips on it)
        for n in self.names:
            v = instance.__dict__[n]
            where = f"attribute {self.owner}.{n}"
            coerce(v, self.typed[n], where) if n in self.typed else dumps(v, where)
        self.template = {n: copy.deepcopy(getattr(instance, n)) for n in self.names}
        # a fresh key's attributes: immutable values are shared, mutable ones copied per key
        self.fresh_values = {n: v for n, v in self.template.items() if type(v) in _IMMUTABLE}
        self.copied = [(n, v) for n, v in self.template.items() if type(v) not in _IMMUTABLE]
        self.known = frozenset(instance.__dict__)  # every instance attribute after __init__
        self._encode = _encoder(self)
        # the stored row of __init__'s values: a key cleared back to it holds no state
        self.fresh_row = self._encode(self.template)
        # live_safe for an instance holding exactly ``known``: as source over ``d`` (its __dict__)
        # for loops that inline it, and as a function (its __dict__ -> bool)
        self.live_source = live_expression(self)
        self.live_check = _live_check(self)

    def column_type(self, name: str) -> SqlType:
        return self.typed.get(name, ENCODED)

    def is_encoded(self, name: str) -> bool:
        return name not in self.typed

    def encode(self, instance: Any) -> tuple:
        if instance.__dict__.keys() == self.known:  # the attributes __init__ made, no more, no less
            return self._encode(instance.__dict__)
        values = []
        for n in self.names:
            if n not in instance.__dict__:
                raise StateTypeError(
                    f"attribute {self.owner}.{n} was deleted; keyed state attributes must stay defined"
                )
            v = instance.__dict__[n]
            where = f"attribute {self.owner}.{n}"
            if n in self.typed:
                values.append(coerce(v, self.typed[n], where))
            else:
                values.append(dumps(v, where))
        extra = [n for n in state_attribute_names(instance) if n not in self.template]
        if extra:
            raise StateEncodingError(
                f"attribute(s) {', '.join(f'{self.owner}.{n}' for n in extra)} were first assigned outside "
                "__init__; initialise every state attribute in __init__ so its column is known up front "
                "(or exclude it with __state_exclude__)"
            )
        return tuple(values)

    def live_safe(self, instance: Any) -> bool:
        """Would ``decode_into(encode(instance))`` leave the instance's attributes as they are?
        Then a runtime may keep the instance live instead of storing and reloading its state."""
        return instance.__dict__.keys() == self.known and self.live_check(instance.__dict__)

    def decode_into(self, instance: Any, row: Any) -> None:
        """Set the instance's attributes from a stored row (tuple/Row in column order, or dict)."""
        if self.containers:
            instance.__dict__.update(self.to_row_dict(row))
            return
        get = row.get if isinstance(row, dict) else None
        for i, n in enumerate(self.names):
            v = get(n) if get else row[i]
            instance.__dict__[n] = to_user(v, self.typed[n]) if n in self.typed else loads(v) if v is not None else None

    def reset(self, instance: Any) -> None:
        """Give the instance a fresh key's attributes: the values ``__init__`` made."""
        d = instance.__dict__
        if d.keys() != self.known:
            for n in [n for n in state_attribute_names(instance) if n not in self.template]:
                del d[n]
        d.update(self.fresh_values)
        for n, v in self.copied:
            d[n] = copy.deepcopy(v)

    def to_row_dict(self, row: Any) -> dict:
        """Stored row -> ``{attribute: value}`` with encoded attributes decoded."""
        get = row.get if isinstance(row, dict) else None
        out = {}
        for i, n in enumerate(self.names):
            v = get(n) if get else row[i]
            out[n] = to_user(v, self.typed[n]) if n in self.typed else loads(v) if v is not None else None
        for n, convert in self.containers.items():  # set[...] / tuple[...] annotations: stored as arrays
            out[n] = convert(out[n])
        return out

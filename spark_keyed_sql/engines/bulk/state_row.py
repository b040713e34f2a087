"""The bulk engine's per-key state row: typed columns, and the move to and from
``MemoryKeyState`` (where the runner keeps a key's state while it runs).

Columns (all prefixed ``__ks_s_``): for a StatefulFunction one per attribute (typed, or the
JSON encoding) plus ``_has_attrs`` / ``_attrs_exp``; for a KeyedProcessor one per variable
(value: its type, list: array, map: map) plus ``<name>__exp`` expiries when it has a TTL;
``_timers`` (array of epoch ms) for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from ...api.state import StateDescriptor, StateKind
from ...runtime.spec import FunctionKind, FunctionSpec
from ...state.attributes import AttributeLayout
from ...state.memory import MemoryKeyState
from ...state.snapshots import HAS_ATTRS, STATE_PREFIX
from ...state.spark_types import to_spark

__all__ = ["StateRowCodec", "STATE_PREFIX", "TIMERS", "HAS_ATTRS", "ATTRS_EXP", "exp_column"]

TIMERS = STATE_PREFIX + "_timers"
ATTRS_EXP = STATE_PREFIX + "_attrs_exp"


def exp_column(name: str) -> str:
    """The column of a state variable's expiry times (a variable with a TTL)."""
    return f"{STATE_PREFIX}{name}__exp"


@dataclass
class StateRowCodec:
    spec: FunctionSpec

    def __post_init__(self) -> None:
        self.layout = AttributeLayout(self.spec.instantiate()) if self.spec.kind is FunctionKind.FUNCTION else None
        found = self.spec.descriptors
        # by name: a class shipped by value to an executor may list its attributes in another order
        self.descriptors: dict[str, StateDescriptor] = {n: found[n] for n in sorted(found)}
        fields: list[T.StructField] = []
        if self.layout is not None:
            fields.append(T.StructField(HAS_ATTRS, T.BooleanType(), True))
            fields += [
                T.StructField(STATE_PREFIX + n, to_spark(self.layout.column_type(n)), True) for n in self.layout.names
            ]
            if self.spec.ttl_ms is not None:
                fields.append(T.StructField(ATTRS_EXP, T.LongType(), True))
        for name, d in self.descriptors.items():
            t = to_spark(d.type)
            if d.kind is StateKind.VALUE:
                fields.append(T.StructField(STATE_PREFIX + name, t, True))
                exp_t: T.DataType = T.LongType()
            elif d.kind is StateKind.LIST:
                fields.append(T.StructField(STATE_PREFIX + name, T.ArrayType(t, True), True))
                exp_t = T.ArrayType(T.LongType(), True)
            else:
                kt = to_spark(d.key_type)  # type: ignore[attr-defined]
                fields.append(T.StructField(STATE_PREFIX + name, T.MapType(kt, t, True), True))
                exp_t = T.MapType(kt, T.LongType(), True)
            if d.ttl_ms is not None:
                fields.append(T.StructField(exp_column(name), exp_t, True))
        fields.append(T.StructField(TIMERS, T.ArrayType(T.LongType(), True), True))
        self.fields = fields
        self.names = [f.name for f in fields]

    @property
    def schema(self) -> T.StructType:
        return T.StructType(self.fields)

    # ------------------------------------------------------------------ row -> memory
    def load_values(self, values: tuple) -> MemoryKeyState:
        """A state row given as values in column order (as ``dump`` makes them)."""
        return self.load(dict(zip(self.names, values)))

    def load(self, row: dict[str, Any]) -> MemoryKeyState:
        ks = MemoryKeyState()
        if self.layout is not None and row.get(HAS_ATTRS):
            ks.attributes = tuple(row[STATE_PREFIX + n] for n in self.layout.names)
            ks.attributes_expire = row.get(ATTRS_EXP)
        for name, d in self.descriptors.items():
            v = row.get(STATE_PREFIX + name)
            if v is None:
                continue
            e = row.get(exp_column(name)) if d.ttl_ms is not None else None
            if d.kind is StateKind.VALUE:
                ks.vars[name] = (v, e)
            elif d.kind is StateKind.LIST:
                ks.vars[name] = [(x, e[i] if e else None) for i, x in enumerate(v)]
            else:
                exps = dict(e) if e else {}
                ks.vars[name] = {k: (x, exps.get(k)) for k, x in v}
        ks.timers = set(row.get(TIMERS) or ())
        return ks

    # ------------------------------------------------------------------ memory -> row
    def dump(self, ks: MemoryKeyState) -> tuple | None:
        """The key's state row, or None when the key holds no state (its row is dropped)."""
        if ks.is_empty():
            return None
        out: list[Any] = []
        if self.layout is not None:
            has = ks.attributes is not None
            out.append(has)
            out += list(ks.attributes) if has else [None] * len(self.layout.names)  # type: ignore[arg-type]
            if self.spec.ttl_ms is not None:
                out.append(ks.attributes_expire if has else None)
        for name, d in self.descriptors.items():
            raw = ks.vars.get(name)
            if d.kind is StateKind.VALUE:
                value, exp = raw if raw is not None else (None, None)
            elif d.kind is StateKind.LIST:
                value = [v for v, _ in raw] if raw else None
                exp = [e for _, e in raw] if raw else None
            else:
                value = [(k, v) for k, (v, _) in raw.items()] if raw else None
                exp = [(k, e) for k, (_, e) in raw.items()] if raw else None
            out.append(value)
            if d.ttl_ms is not None:
                out.append(exp)
        out.append(sorted(ks.timers) if ks.timers else None)
        return tuple(out)

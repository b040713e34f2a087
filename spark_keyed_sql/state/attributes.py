"""Attribute state of a StatefulFunction as one typed row per key.

Annotated attributes become typed columns; every other state attribute becomes a string
column holding the safe JSON encoding (``encoding.py``). The row is read once and written
once per key per batch.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api.errors import StateEncodingError, StateTypeError
from ..api.function import state_attribute_names, typed_attributes
from ..api.types import AtomicType, SqlType, StructField, StructType, coerce, to_user
from .encoding import dumps, loads

__all__ = ["AttributeLayout", "ENCODED"]

ENCODED = AtomicType("string")


class AttributeLayout:
    """Which attributes are state, their column types, and how to move them in and out."""

    def __init__(self, instance: Any):
        cls = type(instance)
        self.owner = cls.__name__
        typed = typed_attributes(cls)
        self.names: list[str] = state_attribute_names(instance)
        self.typed: dict[str, SqlType] = {n: typed[n] for n in self.names if n in typed}
        self.schema = StructType(tuple(StructField(n, self.typed.get(n, ENCODED)) for n in self.names))
        # fail at registration, not in the middle of a query (and before deepcopy trips on it)
        for n in self.names:
            v = instance.__dict__[n]
            where = f"attribute {self.owner}.{n}"
            coerce(v, self.typed[n], where) if n in self.typed else dumps(v, where)
        self.template = {n: copy.deepcopy(getattr(instance, n)) for n in self.names}

    def column_type(self, name: str) -> SqlType:
        return self.typed.get(name, ENCODED)

    def is_encoded(self, name: str) -> bool:
        return name not in self.typed

    def encode(self, instance: Any) -> tuple:
        values = []
        for n in self.names:
            if n not in instance.__dict__:
                raise StateTypeError(f"attribute {self.owner}.{n} was deleted; keyed state attributes must stay defined")
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

    def decode_into(self, instance: Any, row: Any) -> None:
        """Set the instance's attributes from a stored row (tuple/Row in column order, or dict)."""
        get = row.get if isinstance(row, dict) else None
        for i, n in enumerate(self.names):
            v = get(n) if get else row[i]
            instance.__dict__[n] = to_user(v, self.typed[n]) if n in self.typed else loads(v) if v is not None else None

    def reset(self, instance: Any) -> None:
        """Give the instance a fresh key's attributes: the values ``__init__`` made."""
        for n in [n for n in state_attribute_names(instance) if n not in self.template]:
            del instance.__dict__[n]
        for n, v in self.template.items():
            instance.__dict__[n] = copy.deepcopy(v)

    def to_row_dict(self, row: Any) -> dict:
        """Stored row -> ``{attribute: value}`` with encoded attributes decoded."""
        get = row.get if isinstance(row, dict) else None
        out = {}
        for i, n in enumerate(self.names):
            v = get(n) if get else row[i]
            out[n] = to_user(v, self.typed[n]) if n in self.typed else loads(v) if v is not None else None
        return out

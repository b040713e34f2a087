"""The native planner's expressions: what one ``execute`` call computes, symbolically.

Every node carries its Python type (``ty``: one of ``TYPES``) and whether it may be None.
``Old(a)`` is attribute ``a``'s value before the row (the previous row's result, or its
``__init__`` value for a key's first row); ``Field`` an event field; ``Key`` the key. Ints carry
a bound on their magnitude (``bits``) so the SQL holds them exactly (BIGINT, else DECIMAL(38,0)).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TYPES",
    "Expr",
    "Const",
    "Field",
    "Old",
    "Key",
    "Bin",
    "Neg",
    "Cmp",
    "IsNull",
    "Not",
    "BoolOp",
    "If",
    "Call",
    "TRUE",
    "FALSE",
    "walk",
    "olds",
    "type_name",
]

TYPES = ("int", "float", "bool", "str", "datetime", "timedelta", "none")
_NAMES = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "datetime": "datetime.datetime",
    "timedelta": "datetime.timedelta",
    "none": "NoneType",
    "any": "object",
}


def type_name(ty: str) -> str:
    """What ``type(v).__name__`` (as Python's messages show it) is for a value of type ``ty``."""
    return _NAMES[ty]


@dataclass(frozen=True)
class Expr:
    ty: str
    nullable: bool

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True)
class Const(Expr):
    value: Any = None
    bits: int = 0


@dataclass(frozen=True)
class Field(Expr):
    column: str = ""
    name: str = ""
    bits: int = 0


@dataclass(frozen=True)
class Old(Expr):
    attr: str = ""


@dataclass(frozen=True)
class Key(Expr):
    column: str = ""
    bits: int = 0


@dataclass(frozen=True)
class Bin(Expr):
    op: str = "+"  # + - * / // %
    left: Expr = field(default=None)  # type: ignore[assignment]
    right: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Cmp(Expr):
    """A comparison with Python's result (never None; NaN compares false, != true)."""

    op: str = "<"  # < <= > >= == !=
    left: Expr = field(default=None)  # type: ignore[assignment]
    right: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class IsNull(Expr):
    operand: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class BoolOp(Expr):
    """``and`` / ``or`` of non-null booleans (the analyzer turns operands into their truth)."""

    op: str = "and"
    values: tuple[Expr, ...] = ()

    def children(self) -> tuple[Expr, ...]:
        return self.values


@dataclass(frozen=True)
class If(Expr):
    cond: Expr = field(default=None)  # type: ignore[assignment]  # a non-null boolean
    then: Expr = field(default=None)  # type: ignore[assignment]
    other: Expr = field(default=None)  # type: ignore[assignment]

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.then, self.other)


@dataclass(frozen=True)
class Call(Expr):
    """``abs``, ``total_seconds`` (of a timedelta, a float), ``truth``
    (Python's truth of a value: a non-null boolean)."""

    fn: str = "abs"
    args: tuple[Expr, ...] = ()

    def children(self) -> tuple[Expr, ...]:
        return self.args


TRUE = Const("bool", False, True)
FALSE = Const("bool", False, False)


def walk(e: Expr):
    yield e
    for c in e.children():
        yield from walk(c)


def olds(e: Expr) -> set[str]:
    """The attributes whose previous value ``e`` reads."""
    return {n.attr for n in walk(e) if isinstance(n, Old)}

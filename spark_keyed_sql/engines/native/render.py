"""The native planner's expressions as Spark SQL with Python's results: NaN compares false,
``//`` and ``%`` floor, a division by zero is NULL here (the row's error says what Python
raised), ints held exactly (BIGINT, or DECIMAL(38,0) past 62 bits)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

from ...runtime.columns import quote
from .ir import Bin, BoolOp, Call, Cmp, Const, Expr, Field, If, IsNull, Key, Neg, Not, Old

__all__ = ["Renderer", "literal", "null_literal", "out_of_range", "DECIMAL", "DIVIDE_BITS", "MAX_BITS"]

DECIMAL = "DECIMAL(38,0)"
MAX_BITS = 125  # what DECIMAL(38,0) holds with room to spare
DIVIDE_BITS = 104  # a // quotient's bound DECIMAL(38,6) holds (32 digits) with room to spare
_EPOCH = dt.datetime(1970, 1, 1)
_SMALL = 62  # an arithmetic result BIGINT holds: |v| < 2**62


def null_literal(ty: str) -> str:
    """A typed NULL for a Python type (a bare NULL where Spark infers the type itself)."""
    return {"float": "CAST(NULL AS DOUBLE)", "int": "CAST(NULL AS BIGINT)", "str": "CAST(NULL AS STRING)"}.get(
        ty, "NULL"
    )


def out_of_range(sql: str, bits: int, wide: bool) -> str:
    """Does the int ``sql`` (``wide``: computed as DECIMAL(38,0)) miss a signed column of
    ``bits`` bits and a sign (63: BIGINT)?"""
    lo, hi = -(2**bits), 2**bits - 1
    if not wide:
        return f"({sql} < {lo} OR {sql} > {hi})"
    x = f"CAST({sql} AS {DECIMAL})"
    return f"({x} < CAST('{lo}' AS {DECIMAL}) OR {x} > CAST('{hi}' AS {DECIMAL}))"


def literal(c: Const) -> str:
    v = c.value
    if v is None:
        return "NULL"
    if c.ty == "bool":
        return "TRUE" if v else "FALSE"
    if c.ty == "int":
        v = int(v)
        return f"{v}L" if v.bit_length() <= _SMALL else f"CAST('{v}' AS {DECIMAL})"
    if c.ty == "float":
        v = float(v)
        if math.isnan(v):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(v):
            return f"CAST('{'-' if v < 0 else ''}Infinity' AS DOUBLE)"
        return f"CAST('{v!r}' AS DOUBLE)"
    if c.ty == "str":
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if c.ty == "timedelta":
        return f"{(v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds}L"
    if c.ty == "datetime":  # a naive datetime is the UTC wall clock of the instant (as the class gets it)
        return f"timestamp_micros({(v - _EPOCH) // dt.timedelta(microseconds=1)}L)"
    raise ValueError(f"no literal for {c.ty}")


class Renderer:
    """``old``: attribute -> the SQL of its previous value; ``bits``: an int expression's bound."""

    def __init__(self, old: Callable[[str], str], bits: Callable[[Expr], int]):
        self.old, self.bits = old, bits
        self.known: dict[Expr, str] = {}  # an expression already computed as a column

    def wide(self, e: Expr) -> bool:
        """Is the int held as DECIMAL(38,0) in the SQL (computed past BIGINT)?"""
        return e.ty == "int" and not isinstance(e, (Field, Key, Const)) and self.bits(e) > _SMALL

    def int_sql(self, e: Expr, wide: bool) -> str:
        s = self.sql(e)
        return f"CAST({s} AS {DECIMAL})" if wide else s

    def as_type(self, e: Expr, ty: str, wide: bool = False) -> str:
        """``e`` in the representation of ``ty`` (an int read as float: DOUBLE)."""
        if ty == "float" and e.ty != "float":
            return f"CAST({self.sql(e)} AS DOUBLE)"
        if ty == "int" and wide:
            return f"CAST({self.sql(e)} AS {DECIMAL})"
        return self.sql(e)

    def sql(self, e: Expr) -> str:  # noqa: C901 - one dispatch over the node kinds
        if self.known and not isinstance(e, (Const, Field, Key, Old)):
            hit = self.known.get(e)
            if hit is not None:
                return hit
        if isinstance(e, Const):
            return null_literal(e.ty) if e.value is None else literal(e)
        if isinstance(e, (Field, Key)):
            if e.ty == "int" and e.bits < 63:  # INT / SMALLINT / TINYINT: arithmetic in BIGINT, not their own width
                return f"CAST({quote(e.column)} AS BIGINT)"
            return quote(e.column)
        if isinstance(e, Old):
            return self.old(e.attr)
        if isinstance(e, Bin):
            return self.bin(e)
        if isinstance(e, Neg):
            return f"(- {self.int_sql(e.operand, True) if self.wide(e) else self.sql(e.operand)})"
        if isinstance(e, Cmp):
            return self.cmp(e)
        if isinstance(e, IsNull):
            return f"({self.sql(e.operand)} IS NULL)"
        if isinstance(e, Not):
            return f"(NOT {self.sql(e.operand)})"
        if isinstance(e, BoolOp):
            return "(" + f" {e.op.upper()} ".join(self.sql(v) for v in e.values) + ")"
        if isinstance(e, If):
            wide = self.wide(e)
            return (
                f"CASE WHEN {self.sql(e.cond)} THEN {self.as_type(e.then, e.ty, wide)} "
                f"ELSE {self.as_type(e.other, e.ty, wide)} END"
            )
        if isinstance(e, Call):
            return self.call(e)
        raise ValueError(f"cannot render {type(e).__name__}")

    def bin(self, e: Bin) -> str:
        a, b, op = e.left, e.right, e.op
        if e.ty == "str":
            return f"concat({self.sql(a)}, {self.sql(b)})"
        if a.ty == "datetime" and b.ty == "datetime":
            return f"(unix_micros({self.sql(a)}) - unix_micros({self.sql(b)}))"
        if e.ty == "datetime":
            ts, d = (a, b) if a.ty == "datetime" else (b, a)
            return f"timestamp_micros(unix_micros({self.sql(ts)}) {op} {self.sql(d)})"
        if e.ty == "timedelta":
            return f"({self.sql(a)} {op} {self.sql(b)})"
        if op == "/":
            return f"(CAST({self.sql(a)} AS DOUBLE) / NULLIF(CAST({self.sql(b)} AS DOUBLE), 0))"
        if e.ty == "float":
            return f"({self.as_type(a, 'float')} {op} {self.as_type(b, 'float')})"
        wide = self.bits(e) > _SMALL or self.wide(a) or self.wide(b)
        x, y = self.int_sql(a, wide), self.int_sql(b, wide)
        # Python's % takes the divisor's sign (Spark's the dividend's); // floors
        r = f"({x} % NULLIF({y}, 0))"
        mod = f"CASE WHEN {r} <> 0 AND ({r} < 0) <> ({y} < 0) THEN {r} + {y} ELSE {r} END"
        if op == "%":
            return f"({mod})"
        if op == "//":
            if wide:  # (Spark's div returns BIGINT, wrapping past it; x - mod divides exactly)
                return f"CAST(({x} - ({mod})) / NULLIF({y}, 0) AS {DECIMAL})"
            return f"(({x} - ({mod})) div NULLIF({y}, 0))"
        return f"({x} {op} {y})"

    def cmp(self, e: Cmp) -> str:
        a, b, op = e.left, e.right, e.op
        sql_op = {"==": "=", "!=": "<>"}.get(op, op)
        if op in ("==", "!="):  # None == None, None != 1; NaN == NaN is False
            if "float" in (a.ty, b.ty):
                x, y = self.as_type(a, "float"), self.as_type(b, "float")
                eq = f"({x} <=> {y} AND NOT coalesce(isnan({x}) OR isnan({y}), FALSE))"
            else:
                wide = a.ty == "int" and (self.wide(a) or self.wide(b))
                eq = f"({self.int_sql(a, wide) if a.ty == 'int' else self.sql(a)} <=> "
                eq += f"{self.int_sql(b, wide) if b.ty == 'int' else self.sql(b)})"
            return eq if op == "==" else f"(NOT {eq})"
        if "float" in (a.ty, b.ty):
            x, y = self.as_type(a, "float"), self.as_type(b, "float")
            return f"coalesce(NOT isnan({x}) AND NOT isnan({y}) AND {x} {sql_op} {y}, FALSE)"
        if a.ty == "int":
            wide = self.wide(a) or self.wide(b)
            return f"coalesce({self.int_sql(a, wide)} {sql_op} {self.int_sql(b, wide)}, FALSE)"
        return f"coalesce({self.sql(a)} {sql_op} {self.sql(b)}, FALSE)"

    def call(self, e: Call) -> str:
        (v,) = e.args
        x = self.sql(v)
        if e.fn == "truth":
            if v.ty == "bool":
                return f"coalesce({x}, FALSE)"
            if v.ty in ("int", "float", "timedelta"):
                return f"coalesce({x} <> 0, FALSE)"
            if v.ty == "str":
                return f"coalesce(length({x}) > 0, FALSE)"
            if v.ty == "none":
                return "FALSE"
            return f"({x} IS NOT NULL)"
        if e.fn == "abs":
            return f"abs({self.int_sql(v, True) if self.wide(e) else x})"
        if e.fn == "total_seconds":
            return f"(CAST({x} AS DOUBLE) / 1000000.0D)"
        raise ValueError(f"cannot render {e.fn}()")

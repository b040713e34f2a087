"""What user code sees of a key and of its rows' order: ``get_key()``'s value from the key
columns, and rows sorted as ``ORDER BY`` within a key (Spark's NULL placement)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

__all__ = ["OrderSpec", "sort_rows", "user_key", "user_keys"]

R = TypeVar("R")


@dataclass(frozen=True)
class OrderSpec:
    column: str
    ascending: bool = True
    nulls_first: bool | None = None  # Spark default: NULLS FIRST for ASC, NULLS LAST for DESC


def user_key(values: tuple, keyed: bool) -> Any:
    """Key column values -> what ``get_key()`` returns: scalar, tuple, or None when unkeyed."""
    if not keyed:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def user_keys(columns: list[list], n: int) -> list:
    """``user_key`` of each of ``n`` keys given column-wise (one list per key column)."""
    if not columns:
        return [None] * n
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def sort_rows(rows: list[R], order: Sequence[OrderSpec], value: Callable[[R, str], Any] | None = None) -> list[R]:
    """``rows`` in ``order``: stable sorts from the last criterion to the first, each column's
    NULLs placed apart as Spark places them. ``value(row, column)`` reads a row (default: a dict's
    ``row.get(column)``)."""
    if not order or len(rows) < 2:
        return rows
    out = list(rows)
    for o in reversed(order):
        nulls_first = o.ascending if o.nulls_first is None else o.nulls_first
        if value is None:  # dict rows (the runner's, per key): the quick way
            present = [r for r in out if r.get(o.column) is not None]  # type: ignore[attr-defined]
            missing = [r for r in out if r.get(o.column) is None]  # type: ignore[attr-defined]
            present.sort(key=itemgetter(o.column), reverse=not o.ascending)
        else:
            present = [r for r in out if value(r, o.column) is not None]
            missing = [r for r in out if value(r, o.column) is None]
            present.sort(key=lambda r, c=o.column: value(r, c), reverse=not o.ascending)
        out = missing + present if nulls_first else present + missing
    return out

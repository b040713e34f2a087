"""Arrow batches to the Python values user code gets, a column at a time.

``RecordBatch.to_pylist()`` builds a dict per row and, for timestamp and date columns, a pyarrow
Scalar per value (5-15 µs each in pyarrow 26): the largest single cost of the bulk engine's
Python pass when measured (BENCHMARKS.md, issue #18). Here a batch becomes one Python list per
column it needs (timestamps and dates through numpy), key runs are found with pyarrow's compute
kernels, and each event is a fresh dict built with the call's argument names only.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compat.codegen import generated_function

__all__ = [
    "BatchEvents",
    "InputEvents",
    "comparable",
    "concat",
    "event_builder",
    "fewer_collections",
    "key_runs",
    "naive",
    "naive_batch",
    "pylist",
    "run_starts",
    "transposed",
]


def naive(col: Any) -> Any:
    """UTC instants as naive timestamps (what every engine hands user code), cast in C."""
    t = col.type
    if pa.types.is_timestamp(t) and t.tz is not None:
        return col.cast(pa.timestamp(t.unit))
    return col


def naive_batch(rb: Any) -> Any:
    """An Arrow batch with its UTC timestamp columns naive (``naive``)."""
    return pa.RecordBatch.from_arrays([naive(c) for c in rb.columns], names=rb.schema.names)


def transposed(rows: list, width: int) -> list[list]:
    """Rows (tuples of ``width`` values) as ``width`` column lists: through C-level
    ``itemgetter``, cheaper than transposing with ``zip(*rows)`` (W1's output, measured)."""
    return [list(map(itemgetter(j), rows)) for j in range(width)]


def pylist(col: Any) -> list:
    """The column's values as Python objects, like ``to_pylist`` (NULL is None), with
    timestamps (s/ms/us, naive) and dates converted through numpy."""
    t = col.type
    if (pa.types.is_timestamp(t) and t.unit != "ns" and t.tz is None) or pa.types.is_date32(t):
        return col.to_numpy(zero_copy_only=False).astype(object).tolist()
    return col.to_pylist()


_COMPARABLE = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_boolean,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_decimal,
)


def comparable(t: Any) -> bool:
    """Whether Arrow's compute kernels compare (and sort) values of this type."""
    return any(f(t) for f in _COMPARABLE)


def run_starts(cols: list[Any], n: int) -> np.ndarray:
    """Positions where a new key starts, in rows sorted by key. Keys compare as Python tuples
    of their values do: NULL equals NULL, NaN differs from NaN (each NaN row its own key)."""
    changed = np.zeros(n, dtype=bool)
    if n:
        changed[0] = True
    if n < 2:
        return np.flatnonzero(changed)
    for c in cols:
        if comparable(c.type):
            x, y = c.slice(1), c.slice(0, n - 1)
            eq = pc.fill_null(pc.equal(x, y), False)
            if c.null_count:
                eq = pc.or_(eq, pc.and_(pc.is_null(x), pc.is_null(y)))
            changed[1:] |= ~eq.to_numpy(zero_copy_only=False)
        else:  # nested types: compare the Python values
            values = c.to_pylist()
            changed[1:] |= np.fromiter((a != b for a, b in zip(values[1:], values[:-1])), dtype=bool, count=n - 1)
    return np.flatnonzero(changed)


def concat(batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    if hasattr(pa, "concat_batches"):  # pyarrow 19+
        return pa.concat_batches(batches)
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def key_runs(
    batches: Iterator[Any], key_columns: list[str], hash_column: str | None = None
) -> Iterator[tuple[Any, np.ndarray]]:
    """(batch, key run starts) with every key's rows in one batch: a key whose rows continue in
    the next Arrow batch is held back and joined to it (its state is only handled whole).

    ``hash_column``: the rows are sorted by that hash of the key, not by the key; rows of keys
    sharing a hash are then regrouped by a stable sort (the hash's run is what is held back)."""
    pending: list[Any] = []
    runs_of = [hash_column] if hash_column else key_columns
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        if not key_columns:  # unkeyed: one run over the whole input
            pending.append(rb)
            continue
        starts = run_starts([rb.column(k) for k in runs_of], n)
        last = int(starts[-1])
        if last == 0:
            pending.append(rb)  # one key (or hash) so far: it may continue in the next batch
            continue
        head = rb.slice(0, last)
        if pending or hash_column:
            yield _grouped(concat([*pending, head]) if pending else head, key_columns, hash_column)
        else:
            yield head, starts[:-1]
        pending = [rb.slice(last)]
    if pending:
        todo = concat(pending)
        yield _grouped(todo, key_columns, hash_column) if key_columns else (todo, np.zeros(1, dtype=np.int64))


def _grouped(rb: Any, key_columns: list[str], hash_column: str | None) -> tuple[Any, np.ndarray]:
    """The batch with each key's rows together, and where each key's rows start."""
    starts = run_starts([rb.column(k) for k in key_columns], rb.num_rows)
    if hash_column is None or len(starts) == len(run_starts([rb.column(hash_column)], rb.num_rows)):
        return rb, starts  # (one key per hash run: every key's rows are together)
    # keys sharing a hash may interleave: a stable sort keeps each key's rows in their order
    order = pc.sort_indices(rb, sort_keys=[(hash_column, "ascending"), *[(k, "ascending") for k in key_columns]])
    rb = rb.take(order)
    return rb, run_starts([rb.column(k) for k in key_columns], rb.num_rows)


class InputEvents:
    """Events of a batch of several inputs' rows: each row's dict holds only its own input's
    columns (by the input's column names), and the row's input name goes with it."""

    def __init__(self, plan: Any):
        self.input_column = plan.input_column
        self.inputs = plan.inputs
        self.names = [i.name for i in plan.inputs]
        self.builders = [event_builder(i.names) for i in plan.inputs]

    def __call__(self, rb: Any) -> tuple[list[dict], list[str]]:
        which = pylist(rb.column(self.input_column))
        per = [b(*[pylist(rb.column(c)) for c in i.columns]) for i, b in zip(self.inputs, self.builders)]
        names = self.names
        # (a row of INITIAL STATE has no input: it is not an event)
        return (
            [per[w][r] if w is not None else {} for r, w in enumerate(which)],
            [names[w] if w is not None else None for w in which],
        )


class BatchEvents:
    """Rows of an Arrow batch (or block of one) as the events user code gets: one dict per row
    keyed by the argument names, or, with several inputs, by the row's own input's names with
    the row's input name beside it. The one place both bulk walks (a one-shot batch's key runs,
    a micro-batch's blocks per state partition) turn rows into events."""

    def __init__(self, plan: Any):
        self.arg_columns = list(plan.arg_columns)
        self.build = event_builder(list(plan.event_names))
        self.several = InputEvents(plan) if plan.inputs else None

    def columns(self, rb: Any) -> list[list]:
        """The argument columns as Python lists."""
        return [pylist(rb.column(c)) for c in self.arg_columns]

    def __call__(self, rb: Any, columns: list[list] | None = None) -> tuple[list[dict], list[str] | None]:
        """(events, each row's input name or None); ``columns``: ``self.columns(rb)`` when the
        caller has them already."""
        if self.several is not None:
            return self.several(rb)
        args = self.columns(rb) if columns is None else columns
        return (self.build(*args) if args else self.build(rb.num_rows)), None


def event_builder(names: list[str]) -> Callable[..., list[dict]]:
    """(one list per argument column) -> a fresh dict per row, keyed by the argument names
    (generated per arity); with no arguments, (row count) -> empty dicts."""
    env: dict[str, Any] = {f"n{i}": n for i, n in enumerate(names)}
    cs = ", ".join(f"c{i}" for i in range(len(names)))
    vs = ", ".join(f"v{i}" for i in range(len(names)))
    body = ", ".join(f"n{i}: v{i}" for i in range(len(names)))
    if len(names) == 1:
        src = "def events(c0):\n    return [{n0: v0} for v0 in c0]\n"
    elif names:
        src = f"def events({cs}):\n    return [{{{body}}} for {vs} in zip({cs})]\n"
    else:
        src = "def events(n):\n    return [{} for _ in range(n)]\n"
    return generated_function(src, "events", env, "event builder")


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the garbage collector's first threshold while a batch pass runs: every event dict
    and output tuple is a tracked container that survives a few young collections, and at the
    default threshold (700) the collector rescans them over and over (~30% of a pass, measured).
    Cycles are still collected; the threshold is restored (the Python worker is reused)."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], 20_000), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)

"""Keyed state as tables, whatever the engine that wrote it: which operator of a checkpoint
to read, and the change feed between committed batches computed from two reads. Reading one
batch's state is the engine's (its checkpoint layout)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..compat.names import named
from .checkpoint import CheckpointError, CheckpointMeta, OperatorRecord

__all__ = ["null_safe_match", "pick_operator", "state_changes"]


def null_safe_match(pairs: Iterable[tuple[Column, Column]]) -> Column | None:
    """``a <=> b`` for each pair of key columns, ANDed: a NULL key matches a NULL key, as
    ``GROUP BY KEY`` groups them. None for no pairs (an unkeyed function)."""
    conds = [a.eqNullSafe(b) for a, b in pairs]
    return functools.reduce(operator.and_, conds) if conds else None


def pick_operator(
    meta: CheckpointMeta | None, function: str | None, checkpoint: str
) -> tuple[int, OperatorRecord | None]:
    """(index, metadata) of the operator ``function`` names (the only one when None); (0,
    None) for a checkpoint without this project's metadata (written by plain Spark)."""
    if meta is None:
        if function is not None:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} has no spark-keyed-sql metadata; cannot pick function {function!r}"
            )
        return 0, None
    ops = meta.operators
    if function is None:
        if len(ops) > 1:
            names = [o.function for o in ops]
            raise CheckpointError(f"checkpoint {checkpoint!r} holds several functions {names}; pass function=...")
        return 0, ops[0]
    for i, o in enumerate(ops):
        if o.function.lower() == function.lower():
            return i, o
    raise CheckpointError(
        f"checkpoint {checkpoint!r} has no function {function!r} (it has {[o.function for o in ops]})"
    )


def state_changes(
    read: Callable[[int | None], DataFrame],
    batches: tuple[int, int],
    n_keys: int,
    checkpoint: str,
    from_batch: int | None = None,
    to_batch: int | None = None,
    erased_before: int | None = None,
) -> DataFrame:
    """The change feed (Samza's changelog role) for batches ``from_batch < b <= to_batch``: key
    columns, ``variable``, ``change`` ('upsert' | 'delete'), ``new_value`` (JSON) and
    ``batch_id``. ``read(b)`` gives batch b's state, ``batches`` the
    oldest and newest batch kept. Without ``from_batch``, from the oldest batch kept (batch 0
    counts as a change from empty state). ``erased_before``: a DELETE / UPDATE erased the
    history before that batch: the whole feed (no ``from_batch``) starts there; a ``from_batch``
    before it is refused, saying so."""
    min_batch, max_batch = batches
    lo = (min_batch - 1 if min_batch == 0 else min_batch) if from_batch is None else int(from_batch)
    hi = max_batch if to_batch is None else int(to_batch)
    if erased_before is not None and from_batch is None and hi >= erased_before:
        lo = max(lo, erased_before)  # the whole feed kept: from the erase on (empty until a batch follows it)
    if erased_before is not None and (lo < erased_before or hi < erased_before):
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: the state history before batch {erased_before} was erased (a DELETE / "
            f"UPDATE of keyed_state); the change feed starts after batch {erased_before} "
            f"(from_batch={erased_before})"
        )
    kept = min_batch if erased_before is None else max(min_batch, erased_before)
    # from_batch is a batch whose state is kept (its changes after it are net of it), or -1 for
    # a checkpoint that keeps batch 0 (that batch then counts as a change from empty state)
    if lo < (-1 if kept == 0 else kept) or hi < kept or hi > max_batch or lo > hi:
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: cannot read changes for batches ({lo}, {hi}]; it keeps {kept}..{max_batch}"
        )
    # every batch's state against the one before it in one full outer join on (key, batch), each
    # version read once (a version is one batch's "now" and the next one's "before"), every
    # variable's change taken from the same joined row: one shuffle, not one per batch and variable
    versions: dict[int, DataFrame] = {}

    def version(b: int) -> DataFrame:
        if b not in versions:
            versions[b] = read(b)
        return versions[b]

    latest = version(hi)  # (its columns name the keys and variables; the join reads it too)
    state_cols = [c for c in latest.columns if c != "batch_id"]
    keys, variables = state_cols[:n_keys], state_cols[n_keys:]
    if lo == hi or not variables:  # no batch after from_batch (yet): no change, in the feed's columns
        return latest.limit(0).select(
            *map(named, keys),
            F.lit(None).cast("string").alias("variable"),
            F.lit(None).cast("string").alias("change"),
            F.lit(None).cast("string").alias("new_value"),
            F.lit(None).cast("long").alias("batch_id"),
        )

    def side(df: DataFrame, b: int, now: bool) -> DataFrame:
        # (only internal names leave here: a key or variable named like one of them clashes with nothing)
        t = "n" if now else "o"
        return df.select(
            *[named(k).alias(f"__ks_{t}k{i}") for i, k in enumerate(keys)],
            F.lit(b).cast("long").alias(f"__ks_{t}b"),
            *[F.to_json(F.struct(named(v).alias(v))).alias(f"__ks_{t}v{j}") for j, v in enumerate(variables)],
            *[named(v).isNull().alias(f"__ks_{t}z{j}") for j, v in enumerate(variables)],
        )

    def union(frames: list[DataFrame]) -> DataFrame:
        return functools.reduce(lambda a, b: a.unionByName(b), frames)  # (a Connect frame's own method)

    now = union([side(version(b), b, True) for b in range(lo + 1, hi + 1)])
    # (the first batch kept has no state before it: its side is empty, every value an upsert)
    before = [side(version(b - 1), b, False) for b in range(lo + 1, hi + 1) if b - 1 >= min_batch]
    before = before or [side(version(lo + 1), lo + 1, False).limit(0)]
    pairs = [(F.col(f"__ks_nk{i}"), F.col(f"__ks_ok{i}")) for i in range(len(keys))]
    j = now.join(union(before), on=null_safe_match([*pairs, (F.col("__ks_nb"), F.col("__ks_ob"))]), how="full_outer")
    changes = []
    for i, var in enumerate(variables):
        new, old = F.col(f"__ks_nv{i}"), F.col(f"__ks_ov{i}")
        now_present = new.isNotNull() & ~F.coalesce(F.col(f"__ks_nz{i}"), F.lit(True))
        was_present = old.isNotNull() & ~F.coalesce(F.col(f"__ks_oz{i}"), F.lit(True))
        change = F.when(now_present & (~was_present | (new != old)), F.lit("upsert")).when(
            ~now_present & was_present, F.lit("delete")
        )
        changes.append(
            F.struct(F.lit(var).alias("variable"), change.alias("change"), F.when(now_present, new).alias("new_value"))
        )
    key_out = [F.coalesce(a, b).alias(k) for (a, b), k in zip(pairs, keys)]
    return (
        j.select(
            *key_out, F.coalesce(F.col("__ks_nb"), F.col("__ks_ob")).alias("batch_id"), F.inline(F.array(*changes))
        )
        .where(F.col("change").isNotNull())
        .select(*map(named, keys), "variable", "change", "new_value", "batch_id")
    )

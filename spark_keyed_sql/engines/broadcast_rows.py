"""A keyed step's broadcast inputs, taken out of its source by the driver: their rows collected
(at most the limit, else a clear error), applied to the query's broadcast state in their order
(``runtime/broadcast.py``), and the state shipped with the plan; the keyed rows go on as before.
Both engines' one-shot batches and the bulk engine's micro-batches call ``take_broadcasts``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..api.errors import KeyedSQLError
from ..compat.names import named, quote
from ..runtime.broadcast import (
    BROADCAST_MAX_ROWS_CONF,
    BroadcastState,
    BroadcastTooLarge,
    broadcast_hook,
    broadcast_limit,
)
from ..runtime.plan import KeyedPlan

__all__ = [
    "collect_rows",
    "BROADCAST_FILE",
    "broadcast_frame",
    "broadcast_types",
    "collect_broadcasts",
    "keyed_rows",
    "take_broadcasts",
]

log = logging.getLogger(__name__)

BROADCAST_FILE = "state.json"  # in a bulk version's broadcast directory


def keyed_rows(df: DataFrame, plan: KeyedPlan) -> DataFrame:
    """``df`` without the broadcast inputs' rows (they come after the keyed inputs' indexes)."""
    assert plan.broadcasts and plan.broadcast_column
    first = min(b.index for b in plan.broadcasts)
    return df.filter(F.col(plan.broadcast_column) < F.lit(first))


def broadcast_types(df: DataFrame, plan: KeyedPlan) -> dict[str, dict[str, str]]:
    """Each broadcast input's columns' Spark types (DDL), by its own column names."""
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    return {b.name: {n: types[c] for n, c in b.event_map if c in types} for b in plan.broadcasts or []}


_EPOCH = dt.datetime(1970, 1, 1)


def collect_rows(df: DataFrame, limit: int, what: str) -> list[dict[str, Any]]:
    """``df``'s rows as dicts, at most ``limit`` (more is refused, ``what`` naming them), with
    timestamps as user code gets them from the engines: naive UTC (collected as epoch
    microseconds, not in the driver's own time zone)."""
    stamps = {f.name for f in df.schema.fields if f.dataType.typeName() == "timestamp"}
    if stamps:
        df = df.select(*[F.unix_micros(named(c)).alias(c) if c in stamps else named(c) for c in df.columns])
    # one job when Spark's own estimate says the rows are few (a limit scans partitions in
    # rounds: a job each); else at most limit + 1 rows reach the driver
    rows = df.collect() if _estimated_small(df, limit) else df.limit(limit + 1).collect()
    if len(rows) > limit:
        raise BroadcastTooLarge(
            f"{what} has more than {limit:,} rows in one batch, above the limit of {limit:,} "
            f"({BROADCAST_MAX_ROWS_CONF}): a broadcast input is sent to every task; join a table this large to the "
            "keyed rows instead (or raise the limit)"
        )
    names = df.columns
    nested = any(f.dataType.typeName() in ("struct", "array", "map") for f in df.schema.fields)
    out = [r.asDict(recursive=True) for r in rows] if nested else [dict(zip(names, r)) for r in rows]
    for c in stamps:
        for d in out:
            if d[c] is not None:
                d[c] = _EPOCH + dt.timedelta(microseconds=d[c])
    return out


def collect_broadcasts(df: DataFrame, plan: KeyedPlan, limit: int) -> dict[str, list[dict[str, Any]]]:
    """Each broadcast input's rows in ``df`` as dicts by its own column names; more than
    ``limit`` is refused."""
    assert plan.broadcasts and plan.broadcast_column
    out: dict[str, list[dict[str, Any]]] = {}
    for b in plan.broadcasts:
        picked = df.filter(F.col(plan.broadcast_column) == F.lit(b.index)).select(
            *[F.col(c).alias(n) for n, c in b.event_map]
        )
        out[b.name] = collect_rows(picked, limit, f"broadcast input '{b.name}' of {plan.spec.name}")
    return out


_BYTES_PER_ROW = 1024  # what a broadcast row may take, for the estimate below


def _estimated_small(df: DataFrame, limit: int) -> bool:
    """Does Spark's optimizer estimate ``df`` at no more than ``limit`` rows' worth of bytes?
    (Classic sessions; False where the estimate cannot be read.)"""
    try:
        size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes().toString())
    except Exception:  # noqa: BLE001 - Connect, or another Spark's internals: the bounded path
        return False
    return size <= limit * _BYTES_PER_ROW


def take_broadcasts(
    df: DataFrame, plan: KeyedPlan, state: BroadcastState | None = None
) -> tuple[DataFrame, KeyedPlan, int]:
    """The keyed rows of ``df`` and ``plan`` carrying the broadcast state after ``df``'s
    broadcast rows (applied to ``state``, the state before, when given); and how many applied."""
    spark = df.sparkSession
    limit = broadcast_limit(spark)
    rows = collect_broadcasts(df, plan, limit)
    types = broadcast_types(df, plan)
    first = state is None  # the first batch: from initial_broadcast's rows, if given
    state = BroadcastState() if state is None else state
    hook = broadcast_hook(plan.spec, state)
    if first and plan.broadcast_seed:
        state.apply(plan.broadcasts or [], plan.broadcast_seed, hook, function=plan.spec.name, types=types)
    applied = state.apply(plan.broadcasts or [], rows, hook, function=plan.spec.name, limit=limit, types=types)
    log.debug("%s: %d broadcast rows applied (%s)", plan.spec.name, applied, ", ".join(rows))
    # (the seed's rows are in the state now: not shipped to every task with each program)
    return keyed_rows(df, plan), dataclasses.replace(plan, broadcast_state=state, broadcast_seed=None), applied


def broadcast_frame(spark: Any, state: BroadcastState, name: str, batch_id: int, where: str) -> DataFrame:
    """``read_state(..., broadcast=name)``: one row per kept version of each key: the key
    column(s), the value column(s) (a hook's own values as JSON in ``value``), ``valid_from``
    (versioned state: the event time it holds from) and ``batch_id``."""
    if name not in state.tables:
        known = ", ".join(sorted(state.tables)) or "none"
        raise KeyedSQLError(f"{where}: no broadcast input named {name!r} (it keeps: {known})")
    meta = state.columns.get(name, {})
    keys, values = list(meta.get("key") or ["key"]), list(meta.get("value") or ["value"])
    types = meta.get("types") or {}
    hook = bool(meta.get("hook"))
    if hook:
        values = ["value"]
    versioned = state.tables[name].versioned
    ddl = [f"{quote(k)} {types.get(k, 'string')}" for k in keys]
    ddl += [f"{quote(v)} {'string' if hook else types.get(v, 'string')}" for v in values]
    ddl += (["valid_from timestamp"] if versioned else []) + ["batch_id bigint"]
    rows = []
    for key, t, value in state.rows(name):
        kv = list(key) if isinstance(key, tuple) and len(keys) > 1 else [key]
        if value is None:  # a removal (versioned): NULL values, as the row that removed the key
            vv = [None] * len(values)
        elif hook:
            vv = [json.dumps(value, default=str, sort_keys=True)]
        elif len(values) == 1 and not isinstance(value, dict):
            vv = [value]
        else:
            vv = [value.get(v) for v in values]
        at = [dt.datetime.fromtimestamp(t / 1000, tz=dt.timezone.utc)] if versioned else []
        rows.append(tuple(kv + vv + at + [batch_id]))
    return spark.createDataFrame(rows, ", ".join(ddl))

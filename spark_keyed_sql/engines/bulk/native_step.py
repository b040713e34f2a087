"""The bulk engine's step planned as Spark SQL (``engines/native``): one job without a Python
worker writes what the ``mapInArrow`` job writes (``step_schema``), so sinking, the commit
record, cleanup and the crash protocol are the step's own.

The batch's rows are joined with their keys' state as the last commit holds it (``state_frame``),
the key's stored values start its recurrences, and the key's last row gives its new state row:
a DELTA row when it differs from the stored one (a key that ran keeps a row, as on the Python
path). No local store is read or written: the commit names a store no task holds, so the next
Python step finds its stores behind and catches them up from the deltas (``feeding.py``).
Per-partition stats are counted back from the written rows (figures stashed in their stats
columns, which no reader of OUT or DELTA rows selects)."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from ...compat.names import named, quote
from ...state.commit_record import store_token
from ...state.fs import join
from ...state.snapshots import HAS_ATTRS, KEY_PREFIX
from ..native import NativePlan
from ..native.plan import LAST
from .layout import DELETED, VERSION
from .partitioning import PART, part_column
from .records import KIND, STATS_PREFIX, OutputKind, TaskStats

__all__ = ["NATIVE_TASK", "native_job"]

log = logging.getLogger(__name__)

NATIVE_TASK = "native"  # the "task" a native step's commit names for every partition: no store holds it
_PRIOR_KEY = "__ksn_prior_key"
_RANK = "__ksn_rank"
_ROW = "__ksn_row"
_SAME = "__ksn_same"
_NEW = "__ksn_w"


def _conform(schema: T.StructType, columns: dict[str, Any]) -> list:
    """``columns`` (name -> Column) as the step schema's columns, in order, NULL where absent."""
    return [
        (columns[f.name] if f.name in columns else F.lit(None)).cast(f.dataType).alias(f.name) for f in schema.fields
    ]


def native_job(
    native: NativePlan,
    batch_df: DataFrame,
    prior: DataFrame | None,
    key_columns: list[str],
    partitions: int,
    schema: T.StructType,
    path: str,
    fs: Any,
    version: int,
    attempt: str,
) -> dict[int, TaskStats]:
    """Run ``native`` over the batch, starting each key from ``prior`` (``state_frame`` of the
    last commit with ``versions``: every stored row; None: no state yet), writing OUT and DELTA
    rows partitioned by kind to ``path``; returns every state partition's stats."""
    assert native.stream is not None
    stream = native.stream
    spark = batch_df.sparkSession
    (key,) = key_columns
    types = {f.name: f.dataType for f in schema.fields}
    if prior is not None:
        # the stored rows of the batch's keys (a semi-join: a broadcast one when the batch's keys
        # are few), then each key's newest: the state of other keys never reaches the window
        keys = batch_df.select(named(key).alias(_PRIOR_KEY)).distinct()
        stored = prior.join(keys, prior[f"{KEY_PREFIX}0"].eqNullSafe(keys[_PRIOR_KEY]), "left_semi")
        newest = Window.partitionBy(f"{KEY_PREFIX}0").orderBy(F.col(VERSION).desc())
        prior = (
            stored.withColumn(_RANK, F.row_number().over(newest))
            .where((F.col(_RANK) == 1) & ~F.col(DELETED))
            .select(F.col(f"{KEY_PREFIX}0").alias(_PRIOR_KEY), *stream.stored)
        )
        joined = batch_df.join(prior, batch_df[quote(key)].eqNullSafe(prior[_PRIOR_KEY]), "left").drop(_PRIOR_KEY)
    else:
        joined = batch_df.select("*", *[F.lit(None).cast(types[c]).alias(c) for c in stream.stored])
    layered = native.layered(joined).select(
        "*",
        part_column(key_columns, partitions).alias(PART),
        *[F.expr(sql).alias(f"{_NEW}{i}") for i, (_, sql) in enumerate(stream.columns)],
        F.expr(f"coalesce(`{HAS_ATTRS}`, FALSE) AND {stream.same}").alias(_SAME),
    )
    n_keys = f"{STATS_PREFIX}keys_touched"
    out = F.struct(
        *_conform(
            schema,
            {
                KIND: F.lit(int(OutputKind.OUT)),
                f"{KEY_PREFIX}0": named(key),
                **{name: F.expr(sql) for name, sql in native.outputs[1:]},
                PART: F.col(PART),
                n_keys: F.when(F.col(LAST), F.lit(1)),
            },
        )
    )
    delta = F.struct(
        *_conform(
            schema,
            {
                KIND: F.lit(int(OutputKind.DELTA)),
                f"{KEY_PREFIX}0": named(key),
                HAS_ATTRS: F.lit(True),
                **{c: F.col(f"{_NEW}{i}") for i, (c, _) in enumerate(stream.columns)},
                DELETED: F.lit(False),
                PART: F.col(PART),
                f"{STATS_PREFIX}inserted": F.when(F.col(HAS_ATTRS).isNull(), F.lit(1)),
            },
        )
    )
    # each row's output, and on a key's last row its new state row when it changed: one pass
    # over the windows (a union of two selects would compute them twice)
    written = F.when(F.col(LAST) & ~F.col(_SAME), F.array(out, delta)).otherwise(F.array(out))
    rows = layered.select(F.explode(written).alias(_ROW)).select(f"{_ROW}.*")
    rows.write.partitionBy(KIND).parquet(path)
    counted = (
        spark.read.parquet(path)
        .groupBy(PART)
        .agg(
            F.sum(F.when(F.col(KIND) == int(OutputKind.OUT), 1).otherwise(0)).alias("events"),
            F.sum(F.coalesce(F.col(n_keys), F.lit(0))).alias("keys"),
            F.sum(F.when(F.col(KIND) == int(OutputKind.DELTA), 1).otherwise(0)).alias("changed"),
            F.sum(F.coalesce(F.col(f"{STATS_PREFIX}inserted"), F.lit(0))).alias("inserted"),
        )
        .collect()
        if any(fs.is_dir(join(path, k.directory)) for k in (OutputKind.OUT, OutputKind.DELTA))
        else []  # an empty batch writes no rows
    )
    by_part = {r[PART]: r for r in counted}
    token = store_token(version, attempt, NATIVE_TASK)
    stats = {}
    for p in range(partitions):
        r = by_part.get(p)
        stats[p] = TaskStats(
            hit=True,
            token=token,
            late_rows=0,
            events=int(r["events"]) if r else 0,
            keys_touched=int(r["keys"]) if r else 0,
            timers_fired=0,
            inserted=int(r["inserted"]) if r else 0,
            deleted=0,
            changed=int(r["changed"]) if r else 0,
        )
    log.debug("native step %d: %s", version, {p: s.events for p, s in stats.items() if s.events})
    return stats

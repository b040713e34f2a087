"""``read_state`` / ``keyed_state(...)`` and the change feed for any checkpoint: the operator is
picked from the checkpoint's metadata, and read through the layout of the engine that wrote it."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from ..state.checkpoint import CheckpointError, read_metadata
from ..state.filesystems import filesystem
from ..state.fs import join
from ..state.reader import pick_operator, state_changes
from . import LEGACY_ENGINE, get_engine
from .base import Engine

__all__ = ["read_broadcast", "read_state", "read_state_changes"]


def _locate(spark: SparkSession, checkpoint: str, function: str | None) -> tuple[int, dict | None, Engine]:
    fs = filesystem(spark)
    fs.probe(checkpoint)
    if not fs.is_dir(checkpoint):
        raise CheckpointError(f"checkpoint {checkpoint!r} does not exist")
    meta = read_metadata(checkpoint, spark)
    if meta is None and not any(fs.exists(join(checkpoint, d)) for d in ("offsets", "commits", "metadata")):
        raise CheckpointError(
            f"{checkpoint!r} is no query's checkpoint (no metadata of this project or of Spark's, no offsets or "
            f"commits there: it holds {', '.join(fs.list(checkpoint)[:5]) or 'nothing'}); check the path"
        )
    op_index, op = pick_operator(meta, function, checkpoint)
    return op_index, op, get_engine(op.engine_or(LEGACY_ENGINE) if op else LEGACY_ENGINE)


def read_state(
    spark: SparkSession, checkpoint: str, function: str | None = None, batch_id: int | None = None
) -> DataFrame:
    """One row per key of the checkpoint's state: key columns, one column per state variable /
    attribute, and ``batch_id`` (the newest committed batch, or ``batch_id``)."""
    op_index, op, engine = _locate(spark, checkpoint, function)
    return engine.layout.read(spark, checkpoint, op_index, op, batch_id)


def read_broadcast(
    spark: SparkSession, checkpoint: str, name: str, function: str | None = None, batch_id: int | None = None
) -> DataFrame:
    """A broadcast input's state kept in the checkpoint (``read_state(..., broadcast=name)``)."""
    _, _, engine = _locate(spark, checkpoint, function)
    return engine.layout.read_broadcast(spark, checkpoint, name, batch_id)


def read_state_changes(
    spark: SparkSession,
    checkpoint: str,
    function: str | None = None,
    from_batch: int | None = None,
    to_batch: int | None = None,
) -> DataFrame:
    """The change feed between committed batches: key columns, ``variable``, ``change``
    ('upsert' | 'delete'), ``new_value`` (JSON), ``batch_id``."""
    op_index, op, engine = _locate(spark, checkpoint, function)
    layout = engine.layout
    return state_changes(
        lambda b: layout.read(spark, checkpoint, op_index, op, b),
        layout.batch_range(spark, checkpoint, op_index, op),
        # without our metadata the key struct has one column per key field; read_state puts them first
        len(op.keys) if op else 1,
        checkpoint,
        from_batch,
        to_batch,
        erased_before=layout.erased_before(spark, checkpoint),
    )

"""What every engine's streaming run does the same way: set up Spark's stream writer (the
checkpoint, the trigger) and wait for an ``availableNow`` run to end."""

from __future__ import annotations

from typing import Any

from ..api.errors import SchemaError
from .background import failure_of
from .base import StreamJob

__all__ = ["configure_writer", "not_a_stream", "wait_until_done"]


def not_a_stream(job: StreamJob) -> SchemaError:
    """The error for ks.start / ks.run over a source that is not a stream and not a view over
    files they could read as one."""
    from ..runtime.connect import is_connect

    hint = (
        " On Spark Connect a view made by spark.read... or CREATE TEMPORARY VIEW ... USING cannot be traced to "
        "its files (that needs the server's query plan): name the directory in SQL (parquet.`/dir`, csv.`/dir`) "
        "or register a spark.readStream view"
        if is_connect(job.spark)
        else ""
    )
    return SchemaError(
        f"{job.where} needs a streaming source (a readStream view, a file directory such as parquet.`/dir`, a "
        f"view over files, or a catalog table); use ks.sql for batch.{hint}"
    )


def configure_writer(writer: Any, job: StreamJob, checkpoint: str | None) -> Any:
    """``writer`` (a DataStreamWriter) with the run's checkpoint and trigger: ``availableNow``
    for ks.run, the processing-time trigger of ks.start's ``trigger`` / OPTIONS, else Spark's."""
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    if job.available_now:
        return writer.trigger(availableNow=True)
    if job.trigger:
        return writer.trigger(processingTime=job.trigger)
    return writer


def wait_until_done(query: Any, poll: Any = None) -> None:
    """Until ``query`` is no longer active (``poll()`` called each second); its failure raised
    (Spark's, or that of work beside it that stopped it)."""
    while query.isActive:
        query.awaitTermination(1)
        if poll is not None:
            poll()
    if query.exception() is not None:
        raise query.exception()
    failed = failure_of(query)  # stopped by work beside it (timer pump, lease): its failure
    if failed is not None:
        raise failed

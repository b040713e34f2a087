"""What every engine's streaming run does the same way: set up Spark's stream writer (the
checkpoint, the trigger) and wait for an ``availableNow`` run to end."""

from __future__ import annotations

from typing import Any

from .background import failure_of
from .base import StreamJob

__all__ = ["configure_writer", "wait_until_done"]


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

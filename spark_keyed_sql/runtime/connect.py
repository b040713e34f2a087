"""Spark Connect: what differs when the session is a client of a Connect server."""

from __future__ import annotations

from typing import Any

__all__ = ["is_connect", "CONNECT_BULK_STREAMS"]

CONNECT_BULK_STREAMS = (
    "engine 'bulk' runs a stream through foreachBatch with its commit protocol (state snapshot, "
    "idempotent output, commit file, checkpoint lock, timer pump) on the driver; Spark Connect runs "
    "foreachBatch functions on the server, so that is not supported there. Use engine 'tws' "
    "(engine 'auto' picks it on Spark Connect), or a classic SparkSession"
)


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (``SparkSession.builder.remote(...)``): no JVM on this side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")

"""Spark Connect: what differs when the session is a client of a Connect server."""

from __future__ import annotations

from typing import Any

__all__ = ["is_connect"]


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (``SparkSession.builder.remote(...)``): no JVM on this side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")

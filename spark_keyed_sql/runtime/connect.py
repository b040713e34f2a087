"""Spark Connect: what differs when the session is a client of a Connect server."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["default_parallelism", "is_connect", "session_by_id"]


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (``SparkSession.builder.remote(...)``): no JVM on this side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: Any) -> int:
    """The session's default parallelism (``sc.defaultParallelism``; a Connect session has no
    ``sparkContext``: its ``spark.default.parallelism``, else the cores of a ``local[n]`` master,
    else the shuffle partitions)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    conf = spark.conf
    value = conf.get("spark.default.parallelism", None)
    if value:
        return int(value)
    master = conf.get("spark.master", None) or ""
    if master.startswith("local[") and master[6:-1].isdigit():
        return int(master[6:-1])
    return int(conf.get("spark.sql.shuffle.partitions", None) or 200)


def session_by_id(session_id: str) -> Any:
    """On a Connect server's Python worker (where ``foreachBatch`` runs): the client session
    ``session_id`` itself, so that what a batch registers (a memory sink's view) is seen by the
    client that started the query, not only by the query's cloned session."""
    from pyspark.sql.connect.session import SparkSession

    url = os.environ["SPARK_CONNECT_LOCAL_URL"]
    return SparkSession.builder.remote(f"{url};session_id={session_id}").create()

"""The :class:`~spark_keyed_sql.state.fs.CheckpointFS` of a session: Hadoop's FileSystem for a
classic session, DataFrame operations on the server for a Spark Connect one."""

from __future__ import annotations

from typing import Any

from .connect_fs import ConnectFS
from .fs import CheckpointFS
from .hadoop_fs import HadoopFS

__all__ = ["filesystem"]


def filesystem(spark: Any = None) -> CheckpointFS:
    """The :class:`CheckpointFS` for ``spark`` (the active session when not given)."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return ConnectFS(spark)
    return HadoopFS(spark)

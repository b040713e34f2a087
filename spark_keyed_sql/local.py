"""A local SparkSession configured for keyed state (demo, CLI, tests)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from .java import require_java
from .session import configure_session

__all__ = ["local_session"]


def local_session(
    app: str = "spark-keyed-sql",
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    warehouse: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) a quiet local SparkSession; a clear error if Java is missing.
    ``conf``: more Spark settings for a new session, e.g. ``spark.hadoop.*`` for a checkpoint
    store (they must be given when the session starts)."""
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.appName(app)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    configure_session(spark)
    return spark

"""A local SparkSession configured for keyed state (demo, CLI, tests): quiet by default."""

from __future__ import annotations

import os
import sys
import tempfile

from pyspark.sql import SparkSession

from .java import require_java
from .session import configure_session

__all__ = ["local_session", "QUIET_LOGGERS"]

# Spark's known-harmless noise, and the loggers that repeat a failure the user gets anyway as
# the exception a call raises (a task's stack trace, logged by the executor and the scheduler)
QUIET_LOGGERS = {
    "org.apache.spark.executor.Executor": "off",
    "org.apache.spark.scheduler.TaskSetManager": "off",
    # "Assume no metadata directory ... FileNotFoundException" with ~95 lines of stack, when a
    # file sink's output directory does not exist yet
    "org.apache.spark.sql.execution.streaming.FileStreamSink": "error",
    "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink": "error",
    "org.apache.hadoop.util.NativeCodeLoader": "error",
    "org.apache.spark.util.Utils": "error",  # "Your hostname resolves to a loopback address"
}


def _log4j_config(level: str) -> str:
    """A log4j2 configuration (a file: the driver JVM reads it as it starts, before any line of
    start-up noise) with the root at ``level`` and the loggers above quieted."""
    lines = [
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.stderr.ref = console",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    # PySpark's shell logger: at the root's level, Spark does not announce "Setting default log level"
    lines += ["logger.repl.name = org.apache.spark.repl.Main", f"logger.repl.level = {level}"]
    for i, (name, lvl) in enumerate(sorted(QUIET_LOGGERS.items())):
        lines += [f"logger.ks{i}.name = {name}", f"logger.ks{i}.level = {lvl}"]
    fd, path = tempfile.mkstemp(prefix="spark-keyed-sql-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def local_session(
    app: str = "spark-keyed-sql",
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    warehouse: str | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Start (or reuse) a quiet local SparkSession; a clear error if Java is missing.

    Python workers use this interpreter (``PYSPARK_PYTHON`` is set before Spark starts, unless
    it is already set), a few shuffle partitions suit a laptop's data, there are no stage
    progress bars, and Spark's start-up and known-harmless log lines are not shown."""
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    java_options = "-Duser.timezone=UTC"
    if log_level.upper() != "DEBUG":
        java_options += f" -Dlog4j2.configurationFile={_log4j_config(log_level.lower())}"
    spark = (
        builder.appName(app)
        .master(master)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level.upper())
    configure_session(spark)
    return spark

"""A local SparkSession configured for keyed state (demo, CLI, tests): quiet by default."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping

from pyspark.sql import SparkSession

from .engines.settings import configure_session
from .java import require_java

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


def _log4j_config() -> str:
    """A log4j2 configuration (a file: the driver JVM reads it as it starts, before any line of
    start-up noise) with the loggers above quieted. The root stays at WARN, the level PySpark's
    shell logging expects (any other makes Spark announce "Setting default log level");
    ``local_session`` sets the level it was asked for once the session is up."""
    lines = [
        "rootLogger.level = warn",
        "rootLogger.appenderRef.stderr.ref = console",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    for i, (name, lvl) in enumerate(sorted(QUIET_LOGGERS.items())):
        lines += [f"logger.ks{i}.name = {name}", f"logger.ks{i}.level = {lvl}"]
    text = "\n".join(lines) + "\n"
    # one file per content, reused by every session (not one more temp file per start)
    path = os.path.join(
        tempfile.gettempdir(), f"spark-keyed-sql-log4j2-{hashlib.sha1(text.encode()).hexdigest()[:12]}.properties"
    )
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(prefix="spark-keyed-sql-log4j2-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path


def local_session(
    app: str = "spark-keyed-sql",
    master: str = "local[2]",
    shuffle_partitions: int = 4,
    warehouse: str | None = None,
    log_level: str = "ERROR",
    quiet: bool = True,
    conf: Mapping[str, str] | None = None,
    java_options: str = "",
) -> SparkSession:
    """Start (or reuse) a quiet local SparkSession; a clear error if Java is missing.

    Python workers use this interpreter (``PYSPARK_PYTHON`` is set before Spark starts, unless
    it is already set), a few shuffle partitions suit a laptop's data, there are no stage
    progress bars, and (``quiet``) Spark's start-up and known-harmless log lines are not shown.
    ``conf``: more Spark settings for a new session, e.g. ``spark.hadoop.*`` for a checkpoint
    store (they must be given when the session starts); ``java_options``: more options for the
    driver's JVM (a new session only)."""
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if warehouse:
        builder = builder.config("spark.sql.warehouse.dir", warehouse)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    java_options = f"-Duser.timezone=UTC {java_options}".strip()
    if quiet:
        java_options += f" -Dlog4j2.configurationFile={_log4j_config()}"
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

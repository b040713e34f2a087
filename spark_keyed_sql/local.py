"""A local SparkSession configured for keyed state (demo, CLI, tests): quiet by default."""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Mapping

from pyspark.sql import SparkSession

from .engines.settings import configure_session
from .engines.streams import RUN_QUERY_NAME
from .java import require_java
from .jvm_stderr import filtered_jvm_stderr

__all__ = ["local_session", "QUIET_LOGGERS", "QUIET_MESSAGES", "QUIET_PYSPARK_LOGGERS"]

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

# Lines (each with a stack trace) that repeat a failure the caller gets as the exception a call
# raises, left out by message: a task that fails ("Aborting task"), the write it was part of
# ("Aborting job", "Job ... aborted."), and a ks.run whose query ended with the error ks.run
# raises. The same loggers' other lines stay, and so does a ks.start query's failure (no call
# raises it: the log is where a stream that dies in the background says so).
_QUERY_RUNS = ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.execution.streaming.runtime")
QUIET_MESSAGES = {
    "org.apache.spark.util.Utils": "Aborting task",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter": "Aborting job |Job:? .* aborted",
    **{f"{p}.MicroBatchExecution": f"Query {RUN_QUERY_NAME} .*terminated with error" for p in _QUERY_RUNS},
}


# PySpark 4's Python loggers that write an error a call raises anyway (an AnalysisException of
# spark.sql or ks.sql: a JSON line with the JVM's whole stack in it, before the caller sees the
# exception)
QUIET_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _quiet_pyspark_loggers() -> None:
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark 3.5: no such logging
        return
    for name in QUIET_PYSPARK_LOGGERS:
        # made as PySpark makes it (a plain Logger in its place would refuse PySpark's keywords)
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


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
    for i, name in enumerate(sorted(QUIET_LOGGERS.keys() | QUIET_MESSAGES.keys())):
        lines += [f"logger.ks{i}.name = {name}"]
        if name in QUIET_LOGGERS:  # (else the level is the root's, as set_log_level makes it)
            lines += [f"logger.ks{i}.level = {QUIET_LOGGERS[name]}"]
        if name in QUIET_MESSAGES:
            lines += [
                f"logger.ks{i}.filter.quiet.type = RegexFilter",
                f"logger.ks{i}.filter.quiet.regex = (?s)({QUIET_MESSAGES[name]}).*",
                f"logger.ks{i}.filter.quiet.onMatch = DENY",
                f"logger.ks{i}.filter.quiet.onMismatch = NEUTRAL",
            ]
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
    progress bars, and (``quiet``) Spark's start-up and known-harmless log lines are not shown,
    nor the executor's and Spark's logs of a failure a call raises as its own error (a ks.run
    whose class raised), nor the lines pyspark's transformWithState worker prints, nor PySpark's
    JSON log line of a SQL error the call raises.
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
    with filtered_jvm_stderr(enabled=quiet):  # (a JVM started here: tws's worker lines left out)
        spark = _start(builder, app, master, shuffle_partitions, java_options)
    spark.sparkContext.setLogLevel(log_level.upper())
    if quiet:
        _quiet_pyspark_loggers()
    configure_session(spark)
    return spark


def _start(builder: SparkSession.Builder, app: str, master: str, shuffle_partitions: int, java_options: str):
    return (
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

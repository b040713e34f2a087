"""Writing one committed micro-batch of the bulk engine to a sink, idempotently.

A batch may be written twice (the process died after the sink write but before the batch's
commit): every sink replaces what an earlier attempt at the same version wrote.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ..state.checkpoint import local_path
from .faults import crash_point

__all__ = ["write_batch", "is_path", "MEMORY_SINKS"]

# name -> {version: rows}; the memory sink keeps each version once
MEMORY_SINKS: dict[str, dict[int, list[Any]]] = {}
_lock = threading.Lock()


def is_path(sink: str) -> bool:
    return "/" in sink or sink.startswith(".") or "://" in sink


def _local(path: str) -> str:
    return local_path(path, "output")


def _prefix(checkpoint: str, version: int) -> str:
    """File-name prefix of one version's output: unique per checkpoint, so two queries may
    share an output directory without replacing each other's files."""
    tag = hashlib.sha1(os.path.abspath(checkpoint).encode()).hexdigest()[:8]
    return f"ks-{tag}-v{version}-"


def _write_path(df: DataFrame, path: str, checkpoint: str, version: int) -> None:
    path = _local(path)
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f"_ks_tmp_{_prefix(checkpoint, version)}")  # '_' dirs are invisible to readers
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    df.write.parquet(tmp)
    prefix = _prefix(checkpoint, version)
    for name in os.listdir(path):
        if name.startswith(prefix):
            os.remove(os.path.join(path, name))  # an earlier attempt at this version
    for name in sorted(os.listdir(tmp)):
        if name.endswith(".parquet"):
            os.replace(os.path.join(tmp, name), os.path.join(path, prefix + name))
            crash_point("sink_write")
    shutil.rmtree(tmp)


def _write_table(df: DataFrame, table: str, marker_dir: str, version: int) -> None:
    marker = os.path.join(marker_dir, f"{version}.done")
    if os.path.exists(marker):
        return  # this version already reached the table
    spark = df.sparkSession
    if spark.catalog.tableExists(table):
        df.write.insertInto(table)
    else:
        df.write.saveAsTable(table)
    os.makedirs(marker_dir, exist_ok=True)
    with open(marker, "w") as f:
        f.write("done\n")


def _write_memory(spark: SparkSession, df: DataFrame, name: str, version: int) -> None:
    rows = df.collect()
    with _lock:
        versions = MEMORY_SINKS.setdefault(name, {})
        versions[version] = rows
        everything = [r for v in sorted(versions) for r in versions[v]]
    spark.createDataFrame(everything, df.schema).createOrReplaceTempView(name)


def write_batch(driver: SparkSession, df: DataFrame, sink: str, checkpoint: str, version: int) -> None:
    if sink == "console":
        df.show(truncate=False)
    elif sink.startswith("memory:"):
        _write_memory(driver, df, sink.split(":", 1)[1], version)
    elif is_path(sink):
        _write_path(df, sink, checkpoint, version)
    else:
        _write_table(df, sink, os.path.join(_local(checkpoint), "bulk", "sink"), version)
        driver.catalog.refreshTable(sink)  # the batch wrote through Spark's streaming session

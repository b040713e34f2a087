"""Writing one committed micro-batch of the bulk engine to a sink, idempotently.

A batch may be written twice (the process died after the sink write but before the batch's
commit): every sink replaces what an earlier attempt at the same version wrote. All file
access goes through Spark's file system layer (``state.fs``), so outputs may live at any URI
Spark accepts.

- Directory: Spark writes the batch into ``<output>/_ks_tmp_<prefix><attempt>/`` (names
  starting with ``_`` are invisible to Spark's readers); files of an earlier attempt at this
  version (same prefix) are deleted; then each file is moved to ``<output>/<prefix><name>``.
  On object stores a move is a copy of one whole object, so a reader sees each file whole or
  not at all; a crash mid-way leaves some files of the version, which the retry replaces.
- Table: an unpartitioned Parquet table (what a first batch creates) is written as files of
  its location, as a directory is (so exactly once, classic or Connect), then refreshed. Any
  other table: the insert is followed by creating ``<checkpoint>/bulk/sink/<version>.done``
  (create-without-overwrite); a retry finding it skips the insert, and a crash between the two
  inserts the batch again.
- Directory, on Spark Connect (no rename, and a file is deleted only by overwriting it): the
  batch is appended with its version's tag in the Spark schema the files carry (metadata of
  the first column, ``spark_keyed_sql.output``), after ``<checkpoint>/bulk/sink/<version>.writing``
  and before ``<version>.done``. A retry that finds ``.writing`` without ``.done`` first removes
  every file of the output written since the ``.writing`` mark that carries the tag (the
  earlier attempt's, whole or in part), then appends again: the batch is in the output once.
  A removed file leaves an empty directory of its name, which Spark's readers pass over.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ...compat.names import named
from ...runtime.faults import crash_point
from ...state.filesystems import filesystem
from ...state.fs import CheckpointFS, is_path, join
from ..streams import reattach_table, table_details

__all__ = ["TAG", "reset_memory_sink", "write_batch"]

log = logging.getLogger(__name__)

# name -> {version: rows}; the memory sink keeps each version once
MEMORY_SINKS: dict[str, dict[int, list[Any]]] = {}
_lock = threading.Lock()


def _prefix(fs: CheckpointFS, checkpoint: str, version: int) -> str:
    """File-name prefix of one version's output: unique per checkpoint, so two queries may
    share an output directory without replacing each other's files."""
    where = fs.qualify(checkpoint)
    if where.startswith("file:"):
        where = where[len("file:") :]  # the same tag local checkpoints always had
    tag = hashlib.sha1(where.encode()).hexdigest()[:8]
    return f"ks-{tag}-v{version}-"


def _write_path(fs: CheckpointFS, df: DataFrame, path: str, checkpoint: str, version: int) -> None:
    prefix = _prefix(fs, checkpoint, version)
    fs.mkdirs(path)
    tmp = join(path, f"_ks_tmp_{prefix}{uuid.uuid4().hex[:8]}")  # '_' dirs are invisible to readers
    df.write.parquet(tmp)
    for name in fs.list(path):
        if name.startswith(prefix):
            fs.delete(join(path, name), recursive=False)  # an earlier attempt at this version
        elif name.startswith(f"_ks_tmp_{prefix}") and join(path, name) != tmp:
            fs.delete(join(path, name))  # an earlier attempt's temporary directory
    for name in fs.list(tmp):
        if name.endswith(".parquet"):
            if not fs.rename(join(tmp, name), join(path, prefix + name)):
                raise OSError(f"output {path!r}: could not move {name} into place")
            crash_point("sink_write")
    fs.delete(tmp)


def _once(fs: CheckpointFS, marker_dir: str, version: int, write: Any) -> None:
    """``write()`` unless ``version`` already did, then its marker (create-without-overwrite)."""
    marker = join(marker_dir, f"{version}.done")
    if fs.exists(marker):
        return  # this version already reached the sink
    write()
    crash_point("sink_write")  # written, not yet marked
    fs.mkdirs(marker_dir)
    try:
        fs.create_text(marker, "done\n")
    except FileExistsError:
        pass


TAG = "spark_keyed_sql.output"
# a file of the earlier attempt may carry a modification time a little before the mark's
# (file systems that keep seconds, clocks of two machines): the tag decides, not the time
_SLACK_MS = 120_000


def _tagged(df: DataFrame, tag: str) -> DataFrame:
    first = df.schema.fields[0]
    cols = [named(f.name) for f in df.schema.fields]
    cols[0] = cols[0].alias(first.name, metadata={**first.metadata, TAG: tag})
    return df.select(*cols)


def _tag_of(spark: SparkSession, file: str) -> str | None:
    try:
        fields = spark.read.parquet(file).schema.fields
    except Exception:  # noqa: BLE001 - not a Parquet file of ours (or already removed): not the batch's
        return None
    return fields[0].metadata.get(TAG) if fields else None


def _write_path_in_place(fs: CheckpointFS, df: DataFrame, path: str, checkpoint: str, version: int) -> None:
    """Spark Connect's directory output, exactly once without a rename (module docstring): the
    tagged append done under ``_once``'s ``.done`` mark, after a ``.writing`` mark."""
    marks = join(checkpoint, "bulk", "sink")

    def append() -> None:
        writing, tag = join(marks, f"{version}.writing"), _prefix(fs, checkpoint, version)
        if fs.exists(writing):  # an earlier attempt may have appended some or all of the batch
            spark = df.sparkSession
            since = fs.modified_ms(writing) - _SLACK_MS
            stale = [f for f in fs.files_since(path, since) if f.endswith(".parquet") and _tag_of(spark, f) == tag]
            for f in stale:
                fs.delete(f, recursive=False)
            if stale:
                log.info("output %s: removed %d file(s) of an earlier attempt at batch %d", path, len(stale), version)
        else:
            fs.create_text(writing, "writing\n", overwrite=True)
        _tagged(df, tag).write.mode("append").parquet(path)

    _once(fs, marks, version, append)


def _parquet_table(df: DataFrame, table: str) -> tuple[str, DataFrame] | None:
    """An unpartitioned Parquet table (made now, empty, when there is none): its location and
    ``df`` shaped as ``insertInto`` shapes it (by position, cast to the table's columns), so
    the batch can be written as files of that location under names a retry replaces. None for
    any other table (partitioned, another format, a view, a catalog without locations)."""
    spark = df.sparkSession
    if not spark.catalog.tableExists(table) and not reattach_table(spark, table, df.schema):
        df.limit(0).write.format("parquet").saveAsTable(table)
    info = table_details(spark, table)
    if info is None:  # not describable here: inserted and marked instead
        return None
    if "# Partition Information" in info or info.get("Provider", "").lower() != "parquet":
        return None
    location = info.get("Location")
    target = spark.table(table).schema.fields
    if not location or len(target) != len(df.columns):
        return None  # insertInto gives Spark's own error for a width that does not match
    shaped = df.select(*[named(c).cast(t.dataType).alias(t.name) for c, t in zip(df.columns, target)])
    return location, shaped


def _write_table(df: DataFrame, table: str) -> None:
    spark = df.sparkSession
    if spark.catalog.tableExists(table):
        df.write.insertInto(table)
    else:
        df.write.saveAsTable(table)


def _write_memory(spark: SparkSession, df: DataFrame, name: str, version: int) -> None:
    rows = df.collect()
    with _lock:
        versions = MEMORY_SINKS.get(name)
        if versions is None:
            # this process's first write since the query started: keep what the view shows (on
            # Spark Connect the server's foreachBatch worker wrote the batches; the client
            # writes only the end-of-input timer step of ks.run)
            versions = MEMORY_SINKS[name] = {-1: _view_rows(spark, name)}
        versions[version] = rows
        everything = [r for v in sorted(versions) for r in versions[v]]
    spark.createDataFrame(everything, df.schema).createOrReplaceTempView(name)


def _view_rows(spark: SparkSession, name: str) -> list[Any]:
    try:
        return spark.table(name).collect()
    except Exception:  # noqa: BLE001 - no such view yet
        return []


def reset_memory_sink(name: str) -> None:
    """A new query's memory sink ``name`` starts empty."""
    with _lock:
        MEMORY_SINKS.pop(name, None)


def write_batch(driver: SparkSession, df: DataFrame, sink: str, checkpoint: str, version: int) -> None:
    log.debug("batch %d: output to %s", version, sink)
    if sink == "console":
        df.show(truncate=False)
    elif sink.startswith("memory:"):
        _write_memory(driver, df, sink.split(":", 1)[1], version)
    elif is_path(sink):
        fs = filesystem(driver)
        if fs.renames:
            _write_path(fs, df, sink, checkpoint, version)
        else:  # Spark Connect: no rename
            _write_path_in_place(fs, df, sink, checkpoint, version)
    else:
        fs = filesystem(driver)
        found = _parquet_table(df, sink)
        if found is None:  # inserted, then marked: a crash between the two inserts the batch again
            _once(fs, join(checkpoint, "bulk", "sink"), version, lambda: _write_table(df, sink))
        elif fs.renames:
            _write_path(fs, found[1], found[0], checkpoint, version)
        else:
            _write_path_in_place(fs, found[1], found[0], checkpoint, version)
        driver.catalog.refreshTable(sink)  # the batch wrote through Spark's streaming session

"""What every engine's streaming run does the same way: set up Spark's stream writer (the
checkpoint, the trigger) and wait for an ``availableNow`` run to end."""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any
from urllib.parse import unquote

from ..api.errors import SchemaError
from ..state.filesystems import filesystem
from ..state.fs import join
from .background import failure_of
from .base import StreamJob

__all__ = [
    "RUN_QUERY_NAME",
    "configure_writer",
    "not_a_stream",
    "reattach_table",
    "stop_between_batches",
    "table_details",
    "wait_until_done",
]

log = logging.getLogger(__name__)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the name of a ks.run's query (and a suffix of its own: names are unique among a session's
# active queries): its failure reaches the caller as the error ks.run raises, so a quiet session
# (``local.py``) leaves out Spark's "terminated with error" log of it
RUN_QUERY_NAME = "spark-keyed-sql run"


def table_details(spark: Any, table: str) -> dict[str, str] | None:
    """An existing table's ``DESCRIBE TABLE EXTENDED`` details (``Provider``, ``Location``,
    ...; the detail rows win over a column of the same name), with ``Location`` as a path
    Hadoop takes (DESCRIBE prints it URI-encoded: a space as %20, which Hadoop's Path would
    encode again). None when there is no such table or it cannot be described."""
    try:
        if not spark.catalog.tableExists(table):
            return None
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    except Exception:  # noqa: BLE001 - a name this catalog cannot describe
        return None
    info = {(r[0] or "").strip(): (r[1] or "").strip() for r in rows}
    if info.get("Location"):
        info["Location"] = unquote(info["Location"])
    return info


def reattach_table(spark: Any, table: str, schema: Any) -> bool:
    """An output table an earlier run made, unknown to this session's catalog (Spark's default
    in-memory catalog forgets its tables when the process ends) while its directory is still at
    the database's location: registered again over that directory, as an external Parquet table
    of ``schema``, so the run appends to it instead of failing to create it
    (LOCATION_ALREADY_EXISTS). Files there of another schema are refused, naming both. True when
    it registered the table; only a plain name in the current database is looked for."""
    if not _PLAIN_NAME.fullmatch(table) or spark.catalog.tableExists(table):
        return False
    try:
        database = spark.catalog.currentDatabase()
        root = spark.catalog.getDatabase(database).locationUri
    except Exception:  # noqa: BLE001 - a catalog that says neither: Spark's own error follows
        return False
    if not root:
        return False
    location = join(root, table.lower())
    fs = filesystem(spark)
    try:
        held = fs.exists(location) and bool(fs.list(location))
    except Exception:  # noqa: BLE001 - not listable here: Spark's own error follows
        return False
    if not held:
        return False
    try:
        found = spark.read.parquet(location).schema  # (footers only; none when no data file is there)
    except Exception:  # noqa: BLE001 - no data file yet (a first run without output rows)
        found = None
    if found is not None and _shape(found) != _shape(schema):
        raise SchemaError(
            f"output table '{table}' is not in this session's catalog, and its directory {location} holds files of "
            f"another schema ({found.simpleString()}) than this query's output ({schema.simpleString()}): give "
            "another output, or remove that directory"
        )
    spark.catalog.createTable(table, path=location, source="parquet", schema=schema)
    log.warning(
        "output table '%s' was not in this session's catalog but its directory %s was (an earlier run's: Spark's "
        "in-memory catalog forgets tables between processes); registered it again there as an external table "
        "(DROP TABLE keeps its files) and appending to it",
        table,
        location,
    )
    return True


def _shape(schema: Any) -> list[tuple[str, str]]:
    return [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]


def not_a_stream(job: StreamJob) -> SchemaError:
    """The error for ks.start / ks.run over a source that is not a stream and not a view over
    files they could read as one."""
    from ..runtime.connect import is_connect

    hint = (
        " On Spark Connect a view made by spark.read... or CREATE TEMPORARY VIEW ... USING cannot be traced to "
        "its files (that needs the server's query plan): name the directory in SQL (parquet.`/dir`, csv.`/dir`) "
        "or register a spark.readStream view"
        if is_connect(job.spark)
        else ""
    )
    return SchemaError(
        f"{job.where} needs a streaming source (a readStream view, a file directory such as parquet.`/dir`, a "
        f"view over files, or a catalog table); use ks.sql for batch.{hint}"
    )


def configure_writer(writer: Any, job: StreamJob, checkpoint: str | None) -> Any:
    """``writer`` (a DataStreamWriter) with the run's checkpoint and trigger: ``availableNow``
    for ks.run, the processing-time trigger of ks.start's ``trigger`` / OPTIONS, else Spark's."""
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    if job.available_now:
        return writer.queryName(f"{RUN_QUERY_NAME} {uuid.uuid4().hex[:12]}").trigger(availableNow=True)
    if job.trigger:
        return writer.trigger(processingTime=job.trigger)
    return writer


def stop_between_batches(query: Any, patience_s: float = 5.0) -> None:
    """Stop ``query`` while no micro-batch runs (a stop during one interrupts its writers: nothing
    is lost, as the batch is not committed, but Spark logs the aborted job with its stack); after
    ``patience_s`` without such a moment, stop it anyway."""
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        try:
            if not query.isActive or not query.status.get("isTriggerActive", False):
                break
        except Exception:  # noqa: BLE001 - a status that cannot be read: stop now
            break
        time.sleep(0.01)
    query.stop()


def wait_until_done(query: Any, poll: Any = None) -> None:
    """Until ``query`` is no longer active (``poll()`` called each second); its failure raised
    (Spark's, or that of work beside it that stopped it)."""
    while query.isActive:
        query.awaitTermination(1)
        if poll is not None:
            poll()
    if query.exception() is not None:
        raise query.exception()
    failed = failure_of(query)  # stopped by work beside it (timer pump, lease): its failure
    if failed is not None:
        raise failed

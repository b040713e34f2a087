"""A file sink's metadata log (``<output>/_spark_metadata``) kept in step with a checkpoint whose
batches an edit added, or that ran before this output was given.

A DELETE / UPDATE of a ``tws`` checkpoint commits a batch of its own (``engines/tws/erase.py``)
that Spark never ran, so the query's file sink has no log entry for it. Spark's reader of the
output (and the sink's own compaction) needs every batch's entry from the last compaction on:
once the query's next batch is logged after the gap, ``spark.read.parquet(output)`` fails with
"_spark_metadata/N doesn't exist". Before a run starts on the checkpoint, the batches it
committed that the log lacks are logged here with no file — what Spark's sink writes for a batch
without output rows — as Spark names and compacts them (``CompactibleFileStreamLog``). The same
holds for an output directory new to a checkpoint that has run (``ks.run`` into another
``output``): its log starts with the checkpoint's batches so far, each without a file."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from ..state.fs import join

__all__ = ["fill_sink_log"]

log = logging.getLogger(__name__)

METADATA_DIR = "_spark_metadata"
_COMPACT = ".compact"
_VERSION = "v1"  # FileStreamSinkLog.VERSION
_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


def _batch_id(name: str) -> int | None:
    stem = name[: -len(_COMPACT)] if name.endswith(_COMPACT) else name
    return int(stem) if stem.isdigit() else None


def _derived_interval(default: int, latest_compact: int) -> int:
    """Spark's ``CompactibleFileStreamLog.deriveCompactInterval``: a log with one compaction."""
    n = latest_compact + 1
    if n <= default:
        return n
    if default < n // 2:
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return n


def _interval(compacts: list[int], default: int) -> int:
    """The log's compaction interval, as Spark derives it from the compactions it holds."""
    compacts = sorted(compacts, reverse=True)
    if len(compacts) >= 2:
        return compacts[0] - compacts[1]
    if len(compacts) == 1:
        return _derived_interval(default, compacts[0])
    return default


def _entries(fs: Any, path: str) -> list[str]:
    """A log file's entries (its JSON lines, the version line left out)."""
    return [line for line in fs.read_text(path).split("\n")[1:] if line.strip()]


def _compacted(entries: list[str]) -> list[str]:
    """``FileStreamSinkLog.compactLogs``: the entries without the files a later entry deleted."""
    parsed = [json.loads(e) for e in entries]
    deleted = {d.get("path") for d in parsed if d.get("action") == "delete"}
    return [e for e, d in zip(entries, parsed) if d.get("path") not in deleted] if deleted else entries


def fill_sink_log(spark: Any, fs: Any, committed: int | None, output: str) -> list[int]:
    """Log the batches up to ``committed`` (the query's checkpoint's last committed batch, read
    before this lists the log) that ``output``'s file sink log lacks, each with no file; the
    batch ids logged. An output without a log (new to a checkpoint that has committed batches)
    gets one from batch 0 on: Spark's sink would log the next batch alone, which its reader
    refuses ("_spark_metadata/0 doesn't exist")."""
    metadata = join(output, METADATA_DIR)
    if committed is None:
        return []
    files = {b: name for name in fs.list(metadata) if (b := _batch_id(name)) is not None} if fs.exists(metadata) else {}
    if committed <= max(files, default=-1):
        return []
    # (no log yet, on a checkpoint with batches: an output directory new to a running checkpoint,
    # whose first logged batch would be the next one; logged from batch 0 on, with no file)
    latest = max(files, default=-1)
    version = fs.read_text(join(metadata, files[latest])).split("\n", 1)[0].strip() if files else ""
    version = version or _VERSION
    if not files:
        fs.mkdirs(metadata)
    try:
        default = int(spark.conf.get(_INTERVAL_CONF, None) or 10)
    except (TypeError, ValueError):
        default = 10
    interval = _interval([b for b, name in files.items() if name.endswith(_COMPACT)], default)
    written = []
    for b in range(latest + 1, committed + 1):
        if (b + 1) % interval == 0:  # a compaction: every entry since the previous one, with its own none
            entries: list[str] = []
            for prior in range(max(0, b - interval), b):
                name = f"{prior}{_COMPACT}" if (prior + 1) % interval == 0 else str(prior)
                if files.get(prior) != name:  # as Spark's own compaction would, stop short of a log it cannot read
                    raise RuntimeError(f"{join(metadata, name)} is missing (compacting batch {b}, interval {interval})")
                entries += _entries(fs, join(metadata, name))
            name, text = f"{b}{_COMPACT}", "\n".join([version, *_compacted(entries)])
        else:
            name, text = str(b), version
        # written aside, then renamed into place (Spark's own log writes the same way): a reader
        # never sees a torn entry, and a name that does not parse as a batch is passed over
        target = join(metadata, name)
        if fs.exists(target):  # another writer logged it meanwhile: its entry stands
            break
        temp = join(metadata, f".{name}.{uuid.uuid4().hex}.tmp")
        fs.create_text(temp, text)
        if not fs.rename(temp, target):
            fs.delete(temp)
        files[b] = name
        written.append(b)
    if not written:
        return written
    log.info(
        "output %s: its file sink log lacked batch(es) %s that the query's checkpoint committed (an edit's, or "
        "all before this output was first given); "
        "logged them without files, so the output stays readable",
        output,
        ", ".join(map(str, written)),
    )
    return written

"""Fault injection for the crash tests: named points where a test may SIGKILL the driver.

Inactive unless ``SPARK_KEYED_SQL_CRASH_AT`` is set (by the crash harness, never in normal
use). ``SPARK_KEYED_SQL_CRASH_AT=<point>:<n>`` kills the process ``SPARK_KEYED_SQL_CRASH_PID``
at the n-th time any process reaches ``<point>``; hits are counted in
``SPARK_KEYED_SQL_CRASH_DIR`` (append-only, so executors' Python workers count too).
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "POINTS"]

POINTS = (
    "processing",  # inside the Python pass over a batch (executor side)
    "local_state_written",  # bulk: a task staged a partition's changes in its local store (executor side)
    "before_rebuild",  # bulk: the batch's first job is written; partitions are to be fed from the checkpoint
    "state_written",  # bulk: the batch's state changes (deltas) written, output not yet
    "sink_write",  # bulk: part of the batch's output files moved into place
    "after_sink",  # bulk: output written, batch not yet committed
    "compaction_written",  # bulk: a compaction wrote a new base snapshot, not yet marked usable
    "after_compaction",  # bulk: the new base is marked usable, no commit builds on it yet
    "erase_written",  # bulk: an erase / update wrote the edited state as a new base, not yet committed
    "erase_committed",  # bulk: the erase's commit is created, the history before it not yet removed
    "erase_removing",  # bulk: part of the history before an erase removed
    "edit_queued",  # an edit's caller queued its request in the checkpoint, nothing applied yet
    "edit_answered",  # a queued DELETE / UPDATE request answered (its edit committed), the request not yet removed
    "lease_created",  # the lease file created (empty), its content not yet written (driver side)
    "lease_renewing",  # a heartbeat wrote the lease's new content beside it, not yet moved over it
)


def crash_point(point: str) -> None:
    spec = os.environ.get("SPARK_KEYED_SQL_CRASH_AT")
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != point:
        return
    path = os.path.join(os.environ["SPARK_KEYED_SQL_CRASH_DIR"], f"hits-{point}")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)
    if os.path.getsize(path) >= int(nth or 1):
        os.kill(int(os.environ["SPARK_KEYED_SQL_CRASH_PID"]), signal.SIGKILL)

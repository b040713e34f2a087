"""What this project records in a checkpoint beside Spark's own files: which function, keyed
how, with which state layout. ``read_state`` reads it; ``ks.start``/``ks.run`` use it to refuse
a checkpoint written by a different query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import CheckpointError, MigrationError
from .filesystems import filesystem
from .fs import join
from .operator_record import METADATA_FILE, CheckpointMeta, OperatorRecord

__all__ = [
    "METADATA_FILE",
    "CheckpointError",
    "CheckpointMeta",
    "MigrationError",
    "OperatorRecord",
    "check_compatible",
    "last_committed_batch",
    "read_metadata",
    "write_metadata",
]


def write_metadata(checkpoint: str, operators: list[OperatorRecord], spark: Any = None) -> None:
    """Record the query's shape. One small file, replaced in one write (a single PUT on object
    stores); unchanged content is not rewritten."""
    fs = filesystem(spark)
    text = CheckpointMeta(tuple(operators)).to_text()
    path = join(checkpoint, METADATA_FILE)
    fs.mkdirs(checkpoint)
    try:
        if fs.read_text(path) == text:
            return
    except FileNotFoundError:
        pass
    fs.write_text(path, text)


def read_metadata(checkpoint: str, spark: Any = None, as_written: bool = False) -> CheckpointMeta | None:
    """The checkpoint's record (None: none there, a checkpoint this project did not start), its
    layouts those of the committed state (a run that changed the class and committed nothing
    left the one before; ``as_written``: the file as it is)."""
    try:
        text = filesystem(spark).read_text(join(checkpoint, METADATA_FILE))
    except FileNotFoundError:
        return None
    meta = CheckpointMeta.from_text(text, f"{checkpoint}/{METADATA_FILE}")
    if as_written or all(o.committed_layout is None for o in meta.operators):
        return meta
    last = last_committed_batch(checkpoint, spark)
    return CheckpointMeta(tuple(o.as_of(last) for o in meta.operators))


def last_committed_batch(checkpoint: str, spark: Any = None) -> int | None:
    """The last micro-batch Spark's commit log holds (None: none committed)."""
    batches = [int(f) for f in filesystem(spark).list(join(checkpoint, "commits")) if f.isdigit()]
    return max(batches) if batches else None


def check_compatible(checkpoint: str, operators: list[OperatorRecord], spark: Any = None) -> None:
    """Refuse a checkpoint whose recorded query differs in function or keys (the engine is
    checked by the query's launcher, which knows the engines)."""
    old = read_metadata(checkpoint, spark)
    if old is None:
        return

    def shape(ops: Sequence[OperatorRecord]) -> list[tuple]:
        return [(o.function, tuple(o.keys)) for o in ops]

    def folded(ops: Sequence[OperatorRecord]) -> list[tuple]:  # SQL names: USER_ID is user_id
        return [(f.lower(), tuple(k.lower() for k in keys)) for f, keys in shape(ops)]

    if folded(old.operators) != folded(operators):
        was = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(old.operators))
        now = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(operators))
        raise CheckpointError(
            f"checkpoint {checkpoint!r} belongs to another query ({was}); this query runs {now}. "
            "Use a new checkpoint, or migrate the state"
        )

"""What this project records in a checkpoint beside Spark's own files: which function, keyed
how, with which state layout. ``read_state`` reads it; ``ks.start``/``ks.run`` use it to refuse
a checkpoint written by a different query."""

from __future__ import annotations

import json
from typing import Any

from ..api.errors import KeyedSQLError
from .filesystems import filesystem
from .fs import join

__all__ = ["METADATA_FILE", "write_metadata", "read_metadata", "check_compatible", "CheckpointError", "MigrationError"]

METADATA_FILE = "spark_keyed_sql.json"
VERSION = 1


class CheckpointError(KeyedSQLError):
    """A checkpoint is missing, belongs to another query, or cannot be read."""


class MigrationError(KeyedSQLError):
    """State that cannot be moved as asked (the message says what and why)."""


def write_metadata(checkpoint: str, operators: list[dict[str, Any]], spark: Any = None) -> None:
    """Record the query's shape. One small file, replaced in one write (a single PUT on object
    stores); unchanged content is not rewritten."""
    fs = filesystem(spark)
    text = json.dumps({"version": VERSION, "operators": operators}, indent=1, sort_keys=True)
    path = join(checkpoint, METADATA_FILE)
    fs.mkdirs(checkpoint)
    try:
        if fs.read_text(path) == text:
            return
    except FileNotFoundError:
        pass
    fs.write_text(path, text)


def read_metadata(checkpoint: str, spark: Any = None) -> dict[str, Any] | None:
    try:
        text = filesystem(spark).read_text(join(checkpoint, METADATA_FILE))
    except FileNotFoundError:
        return None
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {checkpoint!r}: {METADATA_FILE} is unreadable ({exc})") from None
    if meta.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {checkpoint!r} was written by an unknown version of spark-keyed-sql")
    return meta


def check_compatible(checkpoint: str, operators: list[dict[str, Any]], spark: Any = None) -> None:
    """Refuse a checkpoint whose recorded query differs in function or keys (the engine is
    checked by the query's launcher, which knows the engines)."""
    old = read_metadata(checkpoint, spark)
    if old is None:
        return

    def shape(ops: list[dict]) -> list[tuple]:
        return [(o["function"], tuple(o["keys"])) for o in ops]

    def folded(ops: list[dict]) -> list[tuple]:  # SQL names: USER_ID is user_id
        return [(f.lower(), tuple(k.lower() for k in keys)) for f, keys in shape(ops)]

    if folded(old["operators"]) != folded(operators):
        was = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(old["operators"]))
        now = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(operators))
        raise CheckpointError(
            f"checkpoint {checkpoint!r} belongs to another query ({was}); this query runs {now}. "
            "Use a new checkpoint, or migrate the state"
        )

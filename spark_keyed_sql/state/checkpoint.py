"""What this project records in a checkpoint beside Spark's own files: which function, keyed
how, with which state layout. ``read_state`` reads it; ``ks.start``/``ks.run`` use it to refuse
a checkpoint written by a different query."""

from __future__ import annotations

import json
import os
from typing import Any

from ..api.errors import KeyedSQLError

__all__ = ["local_path", "METADATA_FILE", "write_metadata", "read_metadata", "check_compatible", "CheckpointError"]

METADATA_FILE = "spark_keyed_sql.json"
VERSION = 1


class CheckpointError(KeyedSQLError):
    """A checkpoint is missing, belongs to another query, or cannot be read."""


def local_path(path: str, what: str = "checkpoint") -> str:
    """A local (or ``file:``) path as an OS path; other file systems are refused by name."""
    if path.startswith("file:"):
        path = path[len("file:") :]
        while path.startswith("//"):
            path = path[1:]
    if "://" in path:
        raise CheckpointError(f"{what} {path!r}: only local (or file:) paths are supported")
    return path


def write_metadata(checkpoint: str, operators: list[dict[str, Any]]) -> None:
    path = local_path(checkpoint)
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".{METADATA_FILE}.tmp")
    with open(tmp, "w") as f:
        json.dump({"version": VERSION, "operators": operators}, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(path, METADATA_FILE))  # atomic: never a half-written file


def read_metadata(checkpoint: str) -> dict[str, Any] | None:
    path = os.path.join(local_path(checkpoint), METADATA_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {checkpoint!r}: {METADATA_FILE} is unreadable ({exc})") from None
    if meta.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {checkpoint!r} was written by an unknown version of spark-keyed-sql")
    return meta


def check_compatible(checkpoint: str, operators: list[dict[str, Any]]) -> None:
    """Refuse a checkpoint whose recorded query differs in function or keys."""
    old = read_metadata(checkpoint)
    if old is None:
        return
    def shape(ops: list[dict]) -> list[tuple]:
        return [(o["function"], tuple(o["keys"])) for o in ops]

    if shape(old["operators"]) != shape(operators):
        was = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(old["operators"]))
        now = ", ".join(f"{f} keyed by {list(k) or 'nothing'}" for f, k in shape(operators))
        raise CheckpointError(
            f"checkpoint {checkpoint!r} belongs to another query ({was}); this query runs {now}. "
            "Use a new checkpoint, or migrate the state"
        )
    for o, n in zip(old["operators"], operators):
        was, now = o.get("engine", "tws"), n.get("engine", "tws")
        if was != now:
            hint = " (ks.migrate_state moves it into a new checkpoint on engine 'bulk')" if was == "tws" else ""
            raise CheckpointError(
                f"checkpoint {checkpoint!r} holds state of engine '{was}' for {o['function']}; this query runs on "
                f"engine '{now}'. Run it with OPTIONS (engine = '{was}'){hint}"
            )

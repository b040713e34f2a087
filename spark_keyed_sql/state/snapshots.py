"""Versioned state snapshots of the bulk engine, inside a query's checkpoint.

Layout under ``<checkpoint>/bulk/``::

    state/v=<n>/        Parquet: one row per key holding state after version n
    commits/<n>.json    written last, atomically: version n is done (state, sink, metrics)
    staging/<n>/        the batch's single Python pass (output, state, stats), before commit

A version is visible only once its commit file exists; a batch that died before that is
recomputed from the last committed version, overwriting its own staging and state
directories. So a restart never sees half a batch, and recomputing is idempotent.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from .checkpoint import CheckpointError, local_path

__all__ = ["SnapshotStore", "Commit", "BULK_DIR", "RETAIN", "KEY_PREFIX", "STATE_PREFIX", "state_column_names"]

BULK_DIR = "bulk"
RETAIN = 20  # committed versions kept readable (read_state(batch_id=...), change feed)
KEY_PREFIX = "__ks_key"  # snapshot key columns, by position
STATE_PREFIX = "__ks_s_"  # snapshot state columns


def state_column_names(columns: list[str]) -> dict[str, str]:
    """Snapshot column -> the state variable / attribute it holds (bookkeeping columns such as
    expiries and timers are left out)."""
    out = {}
    for c in columns:
        if not c.startswith(STATE_PREFIX):
            continue
        name = c[len(STATE_PREFIX) :]
        if name.startswith("_") or name.endswith("__exp"):
            continue
        out[c] = name
    return out


@dataclass(frozen=True)
class Commit:
    version: int
    info: dict[str, Any]

    @property
    def spark_batch(self) -> int | None:
        return self.info.get("spark_batch")

    @property
    def watermark_ms(self) -> int | None:
        return self.info.get("watermark_ms")


class SnapshotStore:
    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self.root = os.path.join(local_path(checkpoint), BULK_DIR)

    # ------------------------------------------------------------------ paths
    def state_dir(self, version: int) -> str:
        return os.path.join(self.root, "state", f"v={version}")

    def staging_dir(self, version: int) -> str:
        return os.path.join(self.root, "staging", str(version))

    def _commit_file(self, version: int) -> str:
        return os.path.join(self.root, "commits", f"{version}.json")

    # ------------------------------------------------------------------ commits
    def exists(self) -> bool:
        return os.path.isdir(os.path.join(self.root, "commits"))

    def commits(self) -> list[Commit]:
        d = os.path.join(self.root, "commits")
        if not os.path.isdir(d):
            return []
        out = []
        for name in os.listdir(d):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                version = int(name[: -len(".json")])
                with open(os.path.join(d, name)) as f:
                    info = json.load(f)
            except (ValueError, OSError) as exc:
                raise CheckpointError(f"checkpoint {self.checkpoint!r}: commit file {name} is unreadable ({exc})") from None
            out.append(Commit(version, info))
        return sorted(out, key=lambda c: c.version)

    def latest(self) -> Commit | None:
        cs = self.commits()
        return cs[-1] if cs else None

    def committed_spark_batch(self, batch_id: int) -> bool:
        return any(c.spark_batch == batch_id for c in self.commits())

    def get(self, version: int) -> Commit:
        for c in self.commits():
            if c.version == version:
                return c
        kept = [c.version for c in self.commits()]
        raise CheckpointError(
            f"checkpoint {self.checkpoint!r} keeps state versions {kept[0]}..{kept[-1]}; version {version} is not among them"
            if kept
            else f"checkpoint {self.checkpoint!r} has no committed state yet"
        )

    def commit(self, version: int, info: dict[str, Any]) -> None:
        """Make ``version`` visible: its state directory must be complete by now."""
        if not os.path.isdir(self.state_dir(version)):
            raise CheckpointError(f"internal: state of version {version} missing at commit")
        d = os.path.join(self.root, "commits")
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{version}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(info | {"version": version}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._commit_file(version))

    def verify(self, version: int) -> None:
        """Check that a committed version's files are whole Parquet files (footer readable),
        so a damaged checkpoint is refused up front instead of failing inside a batch."""
        import pyarrow.parquet as pq

        d = self.state_dir(version)
        if not os.path.isdir(d):
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r}: state of committed version {version} is missing ({d}); the checkpoint "
                "is damaged. Restore it, or migrate from a version it still holds"
            )
        for name in sorted(os.listdir(d)):
            if not name.endswith(".parquet"):
                continue
            try:
                pq.read_metadata(os.path.join(d, name))
            except Exception as exc:  # noqa: BLE001 - any unreadable footer is damage
                raise CheckpointError(
                    f"checkpoint {self.checkpoint!r}: state file {name} of version {version} is damaged "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); nothing was run. Restore the "
                    "checkpoint, or read an older version with read_state(batch_id=...) and migrate from it"
                ) from None

    # ------------------------------------------------------------------ state directories
    def install_state(self, version: int, source_dir: str | None) -> str:
        """Move a finished state directory into place as version ``version`` (replacing what a
        failed attempt at the same version left)."""
        target = self.state_dir(version)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if source_dir is not None:
            os.replace(source_dir, target)
        return target

    def prepare_staging(self, version: int) -> str:
        d = self.staging_dir(version)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        return d

    def cleanup(self) -> None:
        """Drop staging directories of committed versions and state older than ``RETAIN``."""
        cs = self.commits()
        if not cs:
            return
        committed = {c.version for c in cs}
        staging = os.path.join(self.root, "staging")
        if os.path.isdir(staging):
            for name in os.listdir(staging):
                if name.isdigit() and int(name) in committed:
                    shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
        keep = {c.version for c in cs[-RETAIN:]}
        for c in cs:
            if c.version not in keep:
                shutil.rmtree(self.state_dir(c.version), ignore_errors=True)
                try:
                    os.remove(self._commit_file(c.version))
                except FileNotFoundError:
                    pass

"""Versioned state snapshots of the bulk engine, inside a query's checkpoint.

Layout under ``<checkpoint>/bulk/``::

    steps/<n>-<attempt>/   one attempt at version n, written once by Spark: output, new state
                           (its ``state`` sub-directory) and stats of the batch's single pass
    commits/<n>.json       created last, without overwrite: version n is done, and its state is
                           the attempt it names (plus sink and metrics info)
    initial.json           names the directory holding INITIAL STATE rows, staged before batch 0

Nothing is renamed: a version becomes visible only when its commit file is created (an
atomic create-if-absent), and readers follow the commit to its attempt directory. A batch that
died before its commit is recomputed from the last committed version into a new attempt
directory; leftovers of failed attempts are never read and are deleted by ``cleanup``. So a
restart never sees half a batch, and recomputing is idempotent, on any file system Spark
reaches (see docs/reliability.md).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from .checkpoint import CheckpointError
from .fs import CheckpointFS, join

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
    def __init__(self, checkpoint: str, spark: Any = None):
        self.checkpoint = checkpoint
        self.fs = CheckpointFS(spark)
        self.root = join(checkpoint, BULK_DIR)
        self._seen: dict[str, Commit] = {}  # commit files never change once created

    # ------------------------------------------------------------------ paths
    def attempt_dir(self, version: int) -> str:
        """A fresh directory (not yet existing) for one attempt at ``version``."""
        return join(self.root, "steps", f"{version}-{uuid.uuid4().hex[:12]}")

    def state_dir(self, version: int) -> str:
        """Where committed ``version``'s state rows are (the attempt its commit names)."""
        rel = self.get(version).info.get("state")
        return join(self.root, rel) if rel else join(self.root, "state", f"v={version}")  # pre-0.2 layout

    def _commit_file(self, version: int) -> str:
        return join(self.root, "commits", f"{version}.json")

    # ------------------------------------------------------------------ commits
    def exists(self) -> bool:
        return self.fs.is_dir(join(self.root, "commits"))

    def commits(self) -> list[Commit]:
        d = join(self.root, "commits")
        out = []
        names = [n for n in self.fs.list(d) if n.endswith(".json") and not n.startswith(".")]
        for name in names:
            if name not in self._seen:
                try:
                    version = int(name[: -len(".json")])
                    info = json.loads(self.fs.read_text(join(d, name)))
                except (ValueError, OSError) as exc:
                    raise CheckpointError(f"checkpoint {self.checkpoint!r}: commit file {name} is unreadable ({exc})") from None
                self._seen[name] = Commit(version, info)
            out.append(self._seen[name])
        for gone in set(self._seen) - set(names):
            del self._seen[gone]
        return sorted(out, key=lambda c: c.version)

    def latest(self) -> Commit | None:
        cs = self.commits()
        return cs[-1] if cs else None

    def committed_spark_batch(self, batch_id: int) -> bool:
        return any(c.spark_batch == batch_id for c in self.commits())

    def get(self, version: int) -> Commit:
        cs = self.commits()
        for c in cs:
            if c.version == version:
                return c
        kept = [c.version for c in cs]
        raise CheckpointError(
            f"checkpoint {self.checkpoint!r} keeps state versions {kept[0]}..{kept[-1]}; version {version} is not among them"
            if kept
            else f"checkpoint {self.checkpoint!r} has no committed state yet"
        )

    def commit(self, version: int, info: dict[str, Any], state_dir: str) -> None:
        """Make ``version`` visible, its state being the complete directory ``state_dir`` (under
        this store's root): one create-without-overwrite of the commit file."""
        if not state_dir.startswith(self.root + "/") or not self.fs.is_dir(state_dir):
            raise CheckpointError(f"internal: state of version {version} missing at commit ({state_dir})")
        body = json.dumps(info | {"version": version, "state": state_dir[len(self.root) + 1 :]}, sort_keys=True)
        try:
            self.fs.create_text(self._commit_file(version), body)
        except FileExistsError:
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r}: version {version} was committed by another writer meanwhile; "
                "two queries ran on one checkpoint. This attempt's results were discarded"
            ) from None

    def verify(self, version: int) -> None:
        """Check that a committed version's files are whole Parquet files (size, header and
        footer magic), so a damaged checkpoint is refused up front instead of failing inside a
        batch."""
        d = self.state_dir(version)
        if not self.fs.is_dir(d):
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r}: state of committed version {version} is missing ({d}); the checkpoint "
                "is damaged. Restore it, or migrate from a version it still holds"
            )
        for name in self.fs.list(d):
            if not name.endswith(".parquet"):
                continue
            path = join(d, name)
            try:
                size = self.fs.size(path)
                tail = self.fs.tail(path, 8)
                footer = int.from_bytes(tail[:4], "little") if len(tail) == 8 else -1
                problem = None if size >= 12 and tail[4:] == b"PAR1" and 0 < footer <= size - 12 else "no Parquet footer"
            except Exception as exc:  # noqa: BLE001 - any unreadable file is damage
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if problem:
                raise CheckpointError(
                    f"checkpoint {self.checkpoint!r}: state file {name} of version {version} is damaged "
                    f"({problem}); nothing was run. Restore the checkpoint, or read an older version with "
                    "read_state(batch_id=...) and migrate from it"
                )

    # ------------------------------------------------------------------ INITIAL STATE
    def stage_initial(self, write: Any) -> None:
        """Write INITIAL STATE rows with ``write(directory)`` into a fresh directory, then point
        ``initial.json`` at it (replaced whole; read only before version 0 commits)."""
        d = join(self.root, "initial", uuid.uuid4().hex[:12])
        write(d)
        self.fs.write_text(join(self.root, "initial.json"), json.dumps({"dir": d[len(self.root) + 1 :]}))

    def initial_dir(self) -> str | None:
        try:
            rel = json.loads(self.fs.read_text(join(self.root, "initial.json")))["dir"]
        except FileNotFoundError:
            return None
        return join(self.root, rel)

    # ------------------------------------------------------------------ cleanup
    def cleanup(self) -> None:
        """Drop what no kept commit names: attempts that never committed, the output and stats
        of committed attempts, state older than ``RETAIN`` versions, staged INITIAL STATE."""
        cs = self.commits()
        if not cs:
            return
        latest = cs[-1].version
        keep = cs[-RETAIN:]
        for c in cs[:-RETAIN]:  # commit first: a dir without a commit is a leftover, never read
            self.fs.delete(self._commit_file(c.version), recursive=False)
            self._seen.pop(f"{c.version}.json", None)
            if not c.info.get("state"):
                self.fs.delete(join(self.root, "state", f"v={c.version}"))
        kept_state = {c.info["state"] for c in keep if c.info.get("state")}
        kept_attempts = {s.split("/")[1]: s.split("/")[2] for s in kept_state if s.startswith("steps/") and s.count("/") == 2}
        steps = join(self.root, "steps")
        for name in self.fs.list(steps):
            head = name.split("-", 1)[0]
            if not head.isdigit() or int(head) > latest:
                continue  # not ours, or a version not yet committed
            if name not in kept_attempts:
                self.fs.delete(join(steps, name))
                continue
            for child in self.fs.list(join(steps, name)):
                if child != kept_attempts[name] and not child.startswith("."):
                    self.fs.delete(join(steps, name, child))
        for name in self.fs.list(join(self.root, "staging")):  # pre-0.2 layout
            if name.isdigit() and int(name) <= latest:
                self.fs.delete(join(self.root, "staging", name))
        if self.fs.exists(join(self.root, "initial.json")):
            self.fs.delete(join(self.root, "initial.json"), recursive=False)
            self.fs.delete(join(self.root, "initial"))

"""The bulk engine's state in a query's checkpoint: a base snapshot and per-batch deltas.

Layout under ``<checkpoint>/bulk/``::

    steps/<n>-<attempt>/   one attempt at version n, written once by Spark: output, the state
                           rows the batch changed (its delta: new rows, and tombstones for keys
                           whose state is gone) and stats, per job of the batch (``main/``, and
                           ``fed<n>/`` when some state partitions had to be fed from here)
    commits/<n>.json       created last, without overwrite: version n is done; its record
                           (``commit_record.py``) names the base snapshot and the deltas after it
                           that make up its state, which task's local store holds each state
                           partition, where the stream stands and what the batch did
    bases/<n>-<id>/        a full snapshot as of version n (by state partition), written by a
                           compaction or a migration; ``bases/<n>.json`` (created when the
                           directory is complete) makes it usable
    initial.json           names the directory holding INITIAL STATE rows, staged before batch 0
    erased.json            the newest version a DELETE / UPDATE of keyed_state committed: the
                           history before it was erased (its commit record says so too; this
                           file outlives that commit). It holds no key or value

Nothing is renamed: a version becomes visible only when its commit file is created (an
atomic create-if-absent), and readers follow the commit to the files it names. A batch that
died before its commit is recomputed into a new attempt directory; leftovers of failed attempts
and compactions are never read and are deleted by ``cleanup``. So a restart never sees half a
batch, and recomputing is idempotent, on any file system Spark reaches (docs/reliability.md).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from .checkpoint import CheckpointError
from .commit_record import BaseMarker, CommitRecord, damaged_commit
from .faults import crash_point
from .filesystems import filesystem
from .fs import FSError, join

__all__ = [
    "BULK_DIR",
    "ERASED_FILE",
    "KEY_PREFIX",
    "RETAIN",
    "SnapshotStore",
    "STATE_PREFIX",
    "HAS_ATTRS",
    "state_column_names",
]

BULK_DIR = "bulk"
ERASED_FILE = "erased.json"
RETAIN = 20  # committed versions kept readable (read_state(batch_id=...), change feed)
KEY_PREFIX = "__ks_key"  # snapshot key columns, by position
STATE_PREFIX = "__ks_s_"  # snapshot state columns
HAS_ATTRS = STATE_PREFIX + "_has_attrs"  # a StatefulFunction's state row holds its attributes

log = logging.getLogger(__name__)


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


class SnapshotStore:
    def __init__(self, checkpoint: str, spark: Any = None):
        self.checkpoint = checkpoint
        self.fs = filesystem(spark)
        self.root = join(checkpoint, BULK_DIR)
        self._seen: dict[str, CommitRecord] = {}  # commit files never change once created
        self._trimmed: set[str] = set()  # committed attempt directories already cut down to what commits read
        self._markers: dict[str, BaseMarker] = {}  # whole base markers read (one never changes)

    # ------------------------------------------------------------------ paths
    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def new_base(self, version: int) -> str:
        return f"bases/{version}-{uuid.uuid4().hex[:12]}"

    def state_dirs(self, version: int) -> list[str]:
        """Every directory committed ``version``'s state is read from (base first, then deltas)."""
        c = self.get(version)
        return [self.path(rel) for rel in ([c.base] if c.base else []) + [d for _, d in c.delta_dirs]]

    def _commit_file(self, version: int) -> str:
        return join(self.root, "commits", f"{version}.json")

    # ------------------------------------------------------------------ commits
    def exists(self) -> bool:
        return self.fs.is_dir(join(self.root, "commits"))

    def commits(self) -> list[CommitRecord]:
        d = join(self.root, "commits")
        out = []
        names = [
            n for n in self.fs.list(d) if n.endswith(".json") and not n.startswith(".") and n[: -len(".json")].isdigit()
        ]
        for name in names:
            if name not in self._seen:
                path = join(d, name)
                try:
                    text = self.fs.read_text(path)
                except FileNotFoundError:
                    continue  # deleted since the listing (cleanup of an old version)
                except (OSError, FSError) as exc:  # FSError: e.g. the store's checksum does not match
                    raise damaged_commit(path, f"unreadable: {exc}") from None
                self._seen[name] = CommitRecord.from_json(text, int(name[: -len(".json")]), path)
            out.append(self._seen[name])
        for gone in set(self._seen) - set(names):
            del self._seen[gone]
        erased = max((c.erased_before for c in out if c.erased_before is not None), default=None)
        if erased is not None:  # history an erase removed (or is removing): never read again
            out = [c for c in out if c.version >= erased]
        return sorted(out, key=lambda c: c.version)

    def erased_before(self) -> int | None:
        """The version before which a DELETE / UPDATE of keyed_state erased the history (None:
        never erased)."""
        marked = max((c.erased_before for c in self.commits() if c.erased_before is not None), default=None)
        try:
            d = json.loads(self.fs.read_text(join(self.root, ERASED_FILE)))
            recorded = int(d["before"])
        except FileNotFoundError:
            recorded = None
        except (ValueError, KeyError, TypeError, OSError, FSError):
            recorded = None
        known = [v for v in (marked, recorded) if v is not None]
        return max(known) if known else None

    def erased_history_left(self) -> bool:
        """Whether files of the history an erase removed are still there (a crash stopped the
        removal): commits, deltas or bases of a version before it."""
        erased = self.erased_before()
        if erased is None:
            return False
        latest = self.latest()
        # what the newest commit still reads from an older directory is not erased history (a
        # broadcast state written before the erase and carried since: no keyed state in it)
        used = latest.files if latest is not None else set()
        for top in ("commits", "steps", "bases"):
            for name in self.fs.list(join(self.root, top)):
                head = name.split("-", 1)[0].split(".", 1)[0]
                if head.isdigit() and int(head) < erased and self._holds_more_than(f"{top}/{name}", used):
                    return True
        return False

    def _holds_more_than(self, rel: str, used: set[str]) -> bool:
        """Does ``rel`` hold anything but the parts of it ``used`` names?"""
        inside = [u for u in used if u == rel or u.startswith(rel + "/")]
        if rel in inside:
            return False
        if not inside or not rel.startswith(("steps/", "bases/")):
            return True
        for child in self.fs.list(self.path(rel)):
            sub = f"{rel}/{child}"
            if child.startswith(".") or sub in inside:
                continue
            if not any(u.startswith(sub + "/") for u in inside) or self._holds_more_than(sub, used):
                return True
        return False

    def record_erased(self, version: int) -> None:
        """``erased.json``: the history before ``version`` was erased (replaced whole)."""
        self.fs.write_text(join(self.root, ERASED_FILE), json.dumps({"before": version}))

    def erased_error(self, version: int) -> CheckpointError | None:
        """The error for reading ``version`` when it lies in erased history (None otherwise)."""
        erased = self.erased_before()
        if erased is None or version >= erased:
            return None
        return CheckpointError(
            f"checkpoint {self.checkpoint!r}: the state history before batch {erased} was erased (a DELETE / UPDATE "
            f"of keyed_state); batch {version} cannot be read. Batches from {erased} on can"
        )

    def latest(self) -> CommitRecord | None:
        cs = self.commits()
        return cs[-1] if cs else None

    def committed_spark_batch(self, batch_id: int) -> bool:
        return any(c.spark_batch == batch_id for c in self.commits())

    def get(self, version: int) -> CommitRecord:
        cs = self.commits()
        for c in cs:
            if c.version == version:
                return c
        erased = self.erased_error(version)
        if erased is not None:
            raise erased
        kept = [c.version for c in cs]
        raise CheckpointError(
            f"checkpoint {self.checkpoint!r} keeps state versions {kept[0]}..{kept[-1]}; version {version} is not "
            "among them"
            if kept
            else f"checkpoint {self.checkpoint!r} has no committed state yet"
        )

    def commit(self, commit: CommitRecord) -> CommitRecord:
        """Make ``commit.version`` visible: one create-without-overwrite of its commit file. The
        base and deltas it names must be complete directories."""
        version = commit.version
        known = set().union(*(c.files for c in list(self._seen.values())))  # checked when they were committed
        for rel in commit.files - known:
            if not self.fs.is_dir(self.path(rel)):
                raise CheckpointError(f"internal: state of version {version} missing at commit ({rel})")
        try:
            self.fs.create_text(self._commit_file(version), commit.to_json())
        except FileExistsError:
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r}: version {version} was committed by another writer meanwhile; "
                "two queries ran on one checkpoint. This attempt's results were discarded"
            ) from None
        return commit

    # ------------------------------------------------------------------ bases
    def bases(self) -> list[BaseMarker]:
        """Complete base snapshots (their markers), oldest first; a marker that is not whole is
        passed over, as if its compaction had not finished."""
        d = join(self.root, "bases")
        out = []
        for name in self.fs.list(d):
            if name.endswith(".json") and name[: -len(".json")].isdigit():
                marker = self._markers.get(name)
                if marker is None:
                    try:
                        marker = BaseMarker.from_json(self.fs.read_text(join(d, name)))
                    except OSError:
                        marker = None
                if marker is None:
                    log.warning("checkpoint %s: base marker %s is not whole; passed over", self.checkpoint, name)
                    continue
                self._markers[name] = marker  # a whole marker never changes
                out.append(marker)
        # the commits as last listed (a step lists them first); listed now if never
        seen = list(self._seen.values()) if self._seen else self.commits()
        erased = max((c.erased_before for c in seen if c.erased_before is not None), default=None)
        if erased is not None:
            out = [b for b in out if b.version >= erased]
        return sorted(out, key=lambda b: b.version)

    def mark_base(self, marker: BaseMarker) -> None:
        """Make a complete base directory usable (create-without-overwrite of its marker)."""
        try:
            self.fs.create_text(join(self.root, "bases", f"{marker.version}.json"), marker.to_json())
        except FileExistsError:
            pass  # an earlier compaction of this version finished first: its base is as good

    # ------------------------------------------------------------------ checks
    def verify(self, version: int) -> None:
        """Check that a committed version's files are whole Parquet files (size, header and
        footer magic), so a damaged checkpoint is refused up front instead of failing inside a
        batch."""
        commit = self.get(version)
        for rel in sorted(commit.files):
            d = self.path(rel)
            if not self.fs.is_dir(d):
                raise CheckpointError(
                    f"checkpoint {self.checkpoint!r}: state of committed version {version} is missing ({d}); the "
                    "checkpoint is damaged. Restore it, or migrate from a version it still holds"
                )
            for path in self._parquet_files(d):
                name = path.rsplit("/", 1)[-1]
                try:
                    size = self.fs.size(path)
                    tail = self.fs.tail(path, 8)
                    footer = int.from_bytes(tail[:4], "little") if len(tail) == 8 else -1
                    problem = (
                        None if size >= 12 and tail[4:] == b"PAR1" and 0 < footer <= size - 12 else "no Parquet footer"
                    )
                except Exception as exc:  # noqa: BLE001 - any unreadable file is damage
                    problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                if problem:
                    raise CheckpointError(
                        f"checkpoint {self.checkpoint!r}: state file {name} of version {version} is damaged "
                        f"({problem}); nothing was run. Restore the checkpoint, or read an older version with "
                        "read_state(batch_id=...) and migrate from it"
                    )

    def _parquet_files(self, d: str) -> list[str]:
        out = []
        for name in self.fs.list(d):
            if name.endswith(".parquet"):
                out.append(join(d, name))
            elif "=" in name and not name.startswith(("_", ".")):
                out += self._parquet_files(join(d, name))  # partition directories
        return out

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
    def cleanup(self, keep_bases: bool = False) -> None:
        """Drop what no kept commit reads: commits older than the last ``RETAIN``, attempts
        that never committed, the output and stats of committed attempts, deltas and bases no
        kept version reads, staged INITIAL STATE. ``keep_bases``: a compaction is running (its
        base directory has no marker yet)."""
        cs = self.commits()
        if not cs:
            return
        self._remove_erased_commits()
        latest = cs[-1].version
        keep = cs[-RETAIN:]
        for c in cs[:-RETAIN]:  # commit first: a file no commit names is a leftover, never read
            self.fs.delete(self._commit_file(c.version), recursive=False)
            self._seen.pop(f"{c.version}.json", None)
        used = set().union(*(c.files for c in keep))
        bases = self.bases()
        newest = bases[-1] if bases else None
        if newest is not None:
            used.add(newest.dir)  # made since the last commit: the next commit builds on it
        self._sweep("steps", used, latest)
        if not keep_bases:
            self._sweep("bases", used, latest, markers=True)
        if self.fs.exists(join(self.root, "initial.json")):
            self.fs.delete(join(self.root, "initial.json"), recursive=False)
            self.fs.delete(join(self.root, "initial"))

    def _remove_erased_commits(self) -> None:
        """Delete the commit files of the history an erase removed (never read again: ``commits``
        passes over them); what they named is then swept as what no kept commit reads."""
        erased = self.erased_before()
        if erased is None:
            return
        d = join(self.root, "commits")
        old = [n for n in self.fs.list(d) if n.endswith(".json") and n[:-5].isdigit() and int(n[:-5]) < erased]
        for i, name in enumerate(sorted(old, key=lambda n: int(n[:-5]))):
            self.fs.delete(join(d, name), recursive=False)
            self._seen.pop(name, None)
            if i == 0:
                crash_point("erase_removing")

    def _sweep(self, top: str, used: set[str], latest: int, markers: bool = False) -> None:
        """Under ``top``: delete what ``used`` does not name; keep the used parts of a directory
        (a committed attempt keeps its deltas, not its output and stats)."""
        for name in self.fs.list(join(self.root, top)):
            if name.endswith(".json"):
                if markers and not any(u.startswith(f"{top}/{name[:-5]}-") for u in used):
                    self.fs.delete(join(self.root, top, name), recursive=False)
                    self._markers.pop(name, None)
                continue
            head = name.split("-", 1)[0]
            if not head.isdigit() or int(head) > latest:
                continue  # not ours, or a version not yet committed (in flight)
            rel = f"{top}/{name}"
            inside = [u for u in used if u == rel or u.startswith(rel + "/")]
            if not inside:
                self.fs.delete(join(self.root, top, name))
                self._trimmed.discard(rel)
                continue
            if rel not in self._trimmed:  # what a commit reads of a directory never changes
                self._keep_only(rel, inside)
                self._trimmed.add(rel)

    def _keep_only(self, rel: str, used: list[str]) -> None:
        if rel in used:
            return
        for child in self.fs.list(self.path(rel)):
            sub = f"{rel}/{child}"
            if child.startswith("."):
                continue
            if not any(u == sub or u.startswith(sub + "/") for u in used):
                self.fs.delete(self.path(sub))
            elif sub not in used:
                self._keep_only(sub, [u for u in used if u.startswith(sub + "/")])

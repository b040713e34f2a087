"""The commit record of a ``bulk`` checkpoint: ``bulk/commits/<n>.json`` says that version n is
done, what its state is made of (a base snapshot and the deltas after it), which task's local
store holds each state partition, where the stream stands (Spark's batch, the watermarks, the
earliest timer and expiry held) and what the batch did. This module is the only one that writes
or reads it.

``format`` is the layout of the file; this release writes and reads ``COMMIT_FORMAT`` only (the
layouts before it were never released). A file that is not a whole record of that format is a
:class:`~spark_keyed_sql.state.checkpoint.CheckpointError` naming the file, never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .checkpoint import CheckpointError

__all__ = [
    "COMMIT_FORMAT",
    "BaseMarker",
    "BatchMetrics",
    "CommitRecord",
    "DeltaEntry",
    "StoreToken",
    "damaged_commit",
    "store_token",
]


COMMIT_FORMAT = 2


@dataclass(frozen=True)
class DeltaEntry:
    """One batch's delta: the state rows it changed (new rows and tombstones)."""

    version: int  # the batch that wrote it
    dirs: tuple[str, ...]  # its directories, relative to bulk/ (one per job of the batch)
    changed: int  # state rows it holds (upserts and tombstones)
    bytes: int


@dataclass(frozen=True)
class BatchMetrics:
    """What the batch did (for ks.run's summary, the progress callback and people reading the file)."""

    input_rows: int = 0  # events + late rows
    events: int = 0
    late_rows: int = 0
    keys_touched: int = 0
    timers_fired: int = 0
    output_rows: int | None = 0  # None: not counted (the console sink)
    state_rows: int = 0  # keys holding state after the batch
    processing_ms: int | None = None
    seconds: float = 0.0
    fed_partitions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # "full" / "catch-up" -> partitions
    native: bool = False  # the batch ran as the step's native plan (Spark SQL, no Python worker)
    native_choice: str = ""  # a natively planned step: why this batch ran natively or on the Python path


@dataclass(frozen=True)
class CommitRecord:
    version: int
    attempt: str  # the attempt directory's id (steps/<version>-<attempt>); "migrated" for a migration
    partitions: int  # state partitions (fixed for a checkpoint)
    function: str
    schema: Mapping[str, Any] | None  # the snapshot schema (StructType JSON)
    base: str | None  # the base snapshot's directory, relative to bulk/; None: the state is all deltas
    base_version: int  # the version the base is a snapshot of (-1: no base)
    base_rows: int
    base_bytes: int
    deltas: tuple[DeltaEntry, ...]  # after the base, oldest first
    stores: Mapping[str, tuple[int, ...]]  # task id -> the state partitions its local store holds
    spark_batch: int | None  # Spark's micro-batch id (None: a step without input)
    watermark_ms: int | None  # the event-time watermark after this batch
    evict_watermark_ms: int | None  # the watermark this batch fired timers and dropped late rows by
    next_timer_ms: int | None  # the earliest timer held over all partitions
    next_expiry_ms: int | None  # the earliest TTL expiry held
    metrics: BatchMetrics = field(default_factory=BatchMetrics)
    # several inputs: each input's own watermark after this batch (the query's is their minimum)
    input_watermarks_ms: Mapping[str, int] = field(default_factory=dict)
    # several inputs: the policy choosing among them (min / max), the one of the checkpoint's
    # first run (Spark keeps spark.sql.streaming.multipleWatermarkPolicy in its offset log)
    watermark_policy: str | None = None
    # a DELETE / UPDATE of keyed_state committed this version: the history before it was erased
    # (commits, snapshots and deltas of earlier versions are no longer read, and are removed)
    erased_before: int | None = None
    # a queued DELETE / UPDATE request this version applied: its id and audit (counts only), so
    # the request is applied once and answered even if its writer died before answering
    edit: Mapping[str, Any] | None = None
    # the query's broadcast state as of this version (runtime/broadcast.py): a directory, relative
    # to bulk/, holding state.json; None: no broadcast input
    broadcast: str | None = None
    format: int = COMMIT_FORMAT

    # ------------------------------------------------------------------ derived
    @property
    def delta_rows(self) -> int:
        return sum(e.changed for e in self.deltas)

    @property
    def state_bytes(self) -> int:
        return self.base_bytes + sum(e.bytes for e in self.deltas)

    @property
    def state_rows(self) -> int:
        return self.metrics.state_rows

    @property
    def delta_dirs(self) -> list[tuple[int, str]]:
        """(version, directory) of every delta after the base, oldest first."""
        return [(e.version, d) for e in self.deltas for d in e.dirs]

    @property
    def files(self) -> set[str]:
        """Every directory (relative to bulk/) this version's state is read from."""
        return (
            ({self.base} if self.base else set())
            | {d for _, d in self.delta_dirs}
            | ({self.broadcast} if self.broadcast else set())
        )

    def token(self, part: int) -> str:
        """The token of the local store state that holds state partition ``part`` as of this
        version (a commit no task wrote, e.g. a migration, names one no store holds)."""
        for task, parts in self.stores.items():
            if part in parts:
                return store_token(self.version, self.attempt, task)
        return store_token(self.version, self.attempt, "none")

    # ------------------------------------------------------------------ the file
    def as_dict(self) -> dict[str, Any]:
        """The file's content: one flat object (the keys docs/state.md shows users)."""
        metrics = asdict(self.metrics)
        metrics["fed_partitions"] = {k: list(v) for k, v in self.metrics.fed_partitions.items()}
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("metrics", "deltas", "stores")}
        out["deltas"] = [asdict(e) | {"dirs": list(e.dirs)} for e in self.deltas]
        out["stores"] = {k: list(v) for k, v in self.stores.items()}
        out["input_watermarks_ms"] = dict(self.input_watermarks_ms)
        out["delta_rows"] = self.delta_rows
        out["state_bytes"] = self.state_bytes
        return out | metrics

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    def progress(self) -> dict[str, Any]:
        """What a progress callback receives for this batch."""
        return self.as_dict() | {"batch_id": self.version}

    @classmethod
    def from_json(cls, text: str, version: int, where: str) -> CommitRecord:
        """The record of ``where`` (a commit file named for ``version``)."""
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise damaged_commit(where, f"not JSON ({exc})") from None
        if not isinstance(d, dict):
            raise damaged_commit(where, "not a JSON object")
        if d.get("format") != COMMIT_FORMAT:
            raise CheckpointError(
                f"commit file {where} has format {d.get('format')!r}; this spark-keyed-sql reads format "
                f"{COMMIT_FORMAT} (a checkpoint written by another release of it). Run the query on a new checkpoint, "
                "or bootstrap one from a saved read_state table with INITIAL STATE FROM"
            )
        try:
            metrics = BatchMetrics(**{f.name: d[f.name] for f in fields(BatchMetrics) if f.name in d})
            metrics = _with(metrics, fed_partitions={k: tuple(v) for k, v in metrics.fed_partitions.items()})
            return cls(
                version=version,
                attempt=str(d["attempt"]),
                partitions=int(d["partitions"]),
                function=str(d["function"]),
                schema=d["schema"],
                base=d["base"],
                base_version=int(d["base_version"]),
                base_rows=int(d["base_rows"]),
                base_bytes=int(d["base_bytes"]),
                deltas=tuple(
                    DeltaEntry(int(e["version"]), tuple(e["dirs"]), int(e["changed"]), int(e["bytes"]))
                    for e in d["deltas"]
                ),
                stores={str(k): tuple(int(p) for p in v) for k, v in d["stores"].items()},
                spark_batch=d["spark_batch"],
                watermark_ms=d["watermark_ms"],
                evict_watermark_ms=d["evict_watermark_ms"],
                next_timer_ms=d["next_timer_ms"],
                next_expiry_ms=d["next_expiry_ms"],
                metrics=metrics,
                input_watermarks_ms={str(k): int(v) for k, v in (d.get("input_watermarks_ms") or {}).items()},
                watermark_policy=d.get("watermark_policy"),
                erased_before=None if d.get("erased_before") is None else int(d["erased_before"]),
                edit=dict(d["edit"]) if d.get("edit") else None,
                broadcast=d.get("broadcast"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise damaged_commit(where, f"{type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class BaseMarker:
    """``bulk/bases/<n>.json``: a complete base snapshot of version n (made by a compaction or
    a migration), usable once this marker exists."""

    version: int
    dir: str  # relative to bulk/
    rows: int
    bytes: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BaseMarker | None:
        """None for a marker that is not whole (as if its compaction had not finished)."""
        try:
            d = json.loads(text)
            return cls(int(d["version"]), str(d["dir"]), int(d["rows"]), int(d["bytes"]))
        except (ValueError, KeyError, TypeError):
            return None


def _with(obj: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(obj, **changes)


def damaged_commit(where: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"commit file {where} is damaged ({why}); nothing was run. Restore the checkpoint from a copy. If it is the "
        "newest commit file and the query died while writing it (Spark's <checkpoint>/commits/ then has no entry past "
        "the micro-batch of the version before it), delete the file and run again: that batch is run again"
    )


@dataclass(frozen=True)
class StoreToken:
    """Names one task's local-store state of one version: ``<version>-<attempt>-<task>`` as
    commit records, stats rows and local stores keep it (text; "" names no state). The one
    place that builds or reads one."""

    version: int
    attempt: str
    task: str

    def __str__(self) -> str:
        return f"{self.version}-{self.attempt}-{self.task}"

    @classmethod
    def parse(cls, text: str) -> StoreToken | None:
        """The token ``text`` spells (the attempt may hold ``-``); None for "" or another text."""
        head, _, rest = text.partition("-")
        attempt, _, task = rest.rpartition("-")
        if not head.isdigit() or not task:
            return None
        return cls(int(head), attempt, task)

    @classmethod
    def version_of(cls, text: str) -> int:
        """The version the state ``text`` names was committed at (-1: no state)."""
        token = cls.parse(text)
        return token.version if token is not None else -1


def store_token(version: int, attempt: str, task: str) -> str:
    """The token (text) that names one task's local-store state of one version."""
    return str(StoreToken(version, attempt, task))

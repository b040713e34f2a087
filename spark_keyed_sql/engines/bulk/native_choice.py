"""Which path a micro-batch of a natively planned stream step runs (``native = auto``, the default).

A native micro-batch scans the checkpoint's whole stored state (base and deltas) to join it with
the batch's keys; the Python step reads only the touched keys, from local stores its tasks keep
between batches. So the native step pays where a batch is large beside the state, and costs ~2x
where it is small and the stores are warm (``make bench-stream``, BENCHMARKS.md). The choice, per
batch, from what the driver knows without a job:

- ``native = true`` (``every_batch``), no stored state yet, or an input of unknown size: native;
- input bytes (Spark's plan statistics of the batch) at least ``LARGE`` of the stored state's
  bytes (its Parquet base and deltas, from the last commit record): native;
- a smaller batch: the Python step when this application's stores hold the state (its Python
  step ran the last batch), or can catch up from the deltas after the version they hold while
  those and the batch stay under ``LARGE`` of the state; else native, until ``SMALL_IN_A_ROW`` small batches
  in a row have run natively in this application, then the Python step (its first batch loads
  the stores once; a long-running ``ks.start`` of small batches then stays on them).

Both paths write the same state in the same format (docs/native.md), so the choice changes only
the time a batch takes; the commit record says which ran (``native``, ``native_choice``)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from ...state.commit_record import CommitRecord
from ...state.snapshots import RETAIN

__all__ = ["Choice", "choose", "input_bytes", "python_after_refusal"]

log = logging.getLogger(__name__)

LARGE = 0.5  # input bytes / stored state bytes from which a batch runs natively
SMALL_IN_A_ROW = 3  # small batches run natively (cold stores) before the Python step takes over
_UNKNOWN = 2**50  # Spark sizes a relation it cannot estimate at Long.MaxValue (scaled down by projections)


@dataclass(frozen=True)
class Choice:
    native: bool
    why: str
    small: bool = False  # the batch is under LARGE of the stored state (counted while run natively)


@dataclass
class _Seen:
    """What this application did on one checkpoint."""

    python_version: int = -1  # the newest version it ran on the Python path (its stores hold the one before)
    small_native: int = 0  # small batches run natively in a row since


_SEEN: dict[tuple[str, str], _Seen] = {}
_LOCK = threading.Lock()


def input_bytes(batch_df: Any) -> int | None:
    """Spark's estimate of the batch's size (its optimized plan's statistics; no job), None
    where it has none (a source it cannot size, or a session without a JVM to ask)."""
    try:
        size = int(str(batch_df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - Spark Connect (no _jdf), or a plan without statistics
        log.debug("no size estimate of the batch", exc_info=True)
        return None
    return None if size >= _UNKNOWN else size


def choose(
    app: str, checkpoint: str, version: int, every_batch: bool, batch_bytes: int | None, prev: CommitRecord | None
) -> Choice:
    """The path of ``version``'s batch (recorded: the next batch's choice reads it)."""
    with _LOCK:
        seen = _SEEN.setdefault((app, checkpoint), _Seen())
        choice = _choose(seen, every_batch, batch_bytes, prev)
        if choice.native:
            seen.small_native = seen.small_native + 1 if choice.small else 0
        else:
            seen.python_version, seen.small_native = version, 0
    path = "native" if choice.native else "the Python path"
    log.info("checkpoint %s, batch %d: %s (%s)", checkpoint, version, path, choice.why)
    return choice


def python_after_refusal(app: str, checkpoint: str, version: int) -> Choice:
    """The Python path for ``version``'s batch, whose native plan refused a stored value."""
    with _LOCK:
        seen = _SEEN.setdefault((app, checkpoint), _Seen())
        seen.python_version, seen.small_native = version, 0
    return Choice(False, "the native plan refused a stored value (the log names key and attribute)")


def _choose(seen: _Seen, every_batch: bool, batch_bytes: int | None, prev: CommitRecord | None) -> Choice:
    small = prev is not None and batch_bytes is not None and batch_bytes < LARGE * prev.state_bytes
    if every_batch:
        return Choice(True, "native = true", small)
    if prev is None or prev.state_bytes == 0:
        return Choice(True, "no stored state")
    if batch_bytes is None:
        return Choice(True, "the batch's size is not known")
    state = prev.state_bytes
    if not small:
        return Choice(True, f"a large batch: {batch_bytes:,} input bytes over {state:,} bytes of stored state")
    said = f"a small batch: {batch_bytes:,} input bytes over {state:,} bytes of stored state"
    # (version + 1: a Python batch that failed before its commit left the stores at the last one)
    if seen.python_version in (prev.version, prev.version + 1):
        return Choice(False, f"{said}, read from this application's local stores")
    # after its Python batch V a store holds V - 1 and V's changes, applied by the next Python
    # batch when V is the last commit; else it catches up from V - 1 (engines/bulk/feeding.py),
    # reading the deltas after it: worth it while those and the batch stay small
    held = seen.python_version - 1
    if 0 <= seen.python_version <= prev.version and held >= prev.base_version and prev.version - held < RETAIN:
        deltas = sum(d.bytes for d in prev.deltas if d.version > held)
        if batch_bytes + deltas < LARGE * state:
            return Choice(False, f"{said}, this application's local stores caught up from {deltas:,} bytes of deltas")
    if seen.small_native >= SMALL_IN_A_ROW:
        return Choice(False, f"{said}, {SMALL_IN_A_ROW} in a row: the local stores are loaded once")
    return Choice(True, f"{said}, the local stores not loaded in this application", small)

"""The writer's side of queued DELETE / UPDATE requests (``state/edit_queue.py``): whoever holds
a checkpoint's lease — a running query between two batches, or an edit's caller that took it —
applies the pending requests in order through the engine's layout, each committed as a version
of its own that records the request, then answers each. A request whose commit already exists
(its writer died before answering) is answered from that commit, not applied again — all such
first, before any other is applied (a newer erase removes the commits before it). A refused one
(a wrong column, a value its column cannot hold) is answered with the error and changes nothing.
A writer that finds the lease is no longer its own stops before committing, leaving the request
pending. The query itself never fails because of an edit."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from ..api.errors import KeyedSQLError
from ..runtime.spec import FunctionSpec
from ..state.checkpoint import read_metadata
from ..state.edit_queue import EditAnswer, EditQueue, EditRequest
from ..state.reader import pick_operator
from .base import StateLayout

__all__ = ["LeaseNotHeld", "apply_pending"]

log = logging.getLogger(__name__)


class LeaseNotHeld(Exception):
    """The writer applying queued edits no longer holds the checkpoint's lease: it stops, the
    request stays pending for the lease's next holder."""


def apply_pending(
    spark: SparkSession,
    checkpoint: str,
    layout: StateLayout,
    engine: str,
    spec_of: Callable[[str], FunctionSpec | None],
    before: Callable[[], None] | None = None,
    still_mine: Callable[[], bool] | None = None,
) -> int:
    """Apply and answer the checkpoint's pending edit requests (the caller holds the lease, and
    no batch runs meanwhile); ``before``: called once before the first edit writes (a running
    query's compaction joined); ``still_mine``: does the caller still hold the lease (asked
    before each edit and again just before its commit). Returns how many were answered."""
    queue = EditQueue(checkpoint, spark)
    pending = queue.pending()
    if not pending:
        return 0
    waiting = []
    for request in pending:  # first those already committed: a newer edit would remove their commit
        applied = layout.applied_edit(spark, checkpoint, request.id)
        if applied is None:
            waiting.append(request)
            continue
        log.info(
            "checkpoint %s: edit request %s was committed at batch %s; answered",
            checkpoint,
            request.id,
            applied.get("batch_id"),
        )
        queue.answer_with(request, EditAnswer(applied))
    meta = read_metadata(checkpoint, spark) if waiting else None
    ready = False

    def confirm() -> None:
        if still_mine is not None and not still_mine():
            raise LeaseNotHeld(f"checkpoint {checkpoint!r}: the lease is no longer this writer's")

    for request in waiting:
        try:
            confirm()
        except LeaseNotHeld:
            log.info("checkpoint %s: lease gone; %d edit request(s) left pending", checkpoint, len(waiting))
            break
        if not ready and before is not None:
            before()
            ready = True
        answer = _apply(spark, checkpoint, layout, engine, spec_of, meta, request, confirm)
        if answer is None:
            break  # the lease went: pending for its next holder
        queue.answer_with(request, answer)
    return len(pending)


def _apply(
    spark: SparkSession,
    checkpoint: str,
    layout: StateLayout,
    engine: str,
    spec_of: Callable[[str], FunctionSpec | None],
    meta: Any,
    request: EditRequest,
    confirm: Callable[[], None],
) -> EditAnswer | None:
    """The request applied and its answer; None when the lease went before its commit."""
    try:
        _, op = pick_operator(meta, request.function, checkpoint)
        audit = layout.edit(
            spark,
            checkpoint,
            op,
            request.kind,
            request.where,
            request.assignments,
            spec_of(request.function),
            engine,
            request=request.id,
            before_commit=confirm,
        )
        return EditAnswer(audit)
    except LeaseNotHeld:
        return None
    except Exception as exc:  # noqa: BLE001 - answered, never the query's failure
        applied = layout.applied_edit(spark, checkpoint, request.id)
        if applied is not None:  # committed (by this writer before it failed, or by another): done
            log.warning("checkpoint %s: edit request %s is committed; it failed after: %s", checkpoint, request.id, exc)
            return EditAnswer(applied)
        if isinstance(exc, KeyedSQLError):  # refused before anything was written
            return EditAnswer(None, str(exc))
        log.warning("checkpoint %s: edit request %s failed, nothing changed: %s", checkpoint, request.id, exc)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return EditAnswer(
            None, f"{request.verb} of keyed state failed and changed nothing: {type(exc).__name__}: {first}"
        )

"""The writer's side of queued DELETE / UPDATE requests (``state/edit_queue.py``): whoever holds
a checkpoint's lease — a running query between two batches, or an edit's caller that took it —
applies the pending requests in order through the engine's layout, each committed as a version
of its own that records the request, then answers each. A request whose commit already exists
(its writer died before answering) is answered from that commit, not applied again; a refused
one (a wrong column, a value its column cannot hold) is answered with the error and changes
nothing. The query itself never fails because of an edit."""

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

__all__ = ["apply_pending"]

log = logging.getLogger(__name__)


def apply_pending(
    spark: SparkSession,
    checkpoint: str,
    layout: StateLayout,
    engine: str,
    spec_of: Callable[[str], FunctionSpec | None],
    before: Callable[[], None] | None = None,
) -> int:
    """Apply and answer the checkpoint's pending edit requests (the caller holds the lease, and
    no batch runs meanwhile); ``before``: called once before the first edit writes (a running
    query's compaction joined). Returns how many were answered."""
    queue = EditQueue(checkpoint, spark)
    pending = queue.pending()
    if not pending:
        return 0
    meta = read_metadata(checkpoint, spark)
    ready = False
    for request in pending:
        applied = layout.applied_edit(spark, checkpoint, request.id)
        if applied is not None:
            log.info(
                "checkpoint %s: edit request %s was committed at batch %s; answered",
                checkpoint,
                request.id,
                applied.get("batch_id"),
            )
            queue.answer_with(request, EditAnswer(applied))
            continue
        if not ready and before is not None:
            before()
            ready = True
        queue.answer_with(request, _apply(spark, checkpoint, layout, engine, spec_of, meta, request))
    return len(pending)


def _apply(
    spark: SparkSession,
    checkpoint: str,
    layout: StateLayout,
    engine: str,
    spec_of: Callable[[str], FunctionSpec | None],
    meta: Any,
    request: EditRequest,
) -> EditAnswer:
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
        )
        return EditAnswer(audit)
    except KeyedSQLError as exc:  # refused before anything was written
        return EditAnswer(None, str(exc))
    except Exception as exc:  # noqa: BLE001 - answered, never the query's failure
        applied = layout.applied_edit(spark, checkpoint, request.id)
        if applied is not None:  # it failed after its commit (removing the history): done
            log.warning(
                "checkpoint %s: edit request %s committed; tidying after it failed: %s", checkpoint, request.id, exc
            )
            return EditAnswer(applied)
        log.warning("checkpoint %s: edit request %s failed, nothing changed: %s", checkpoint, request.id, exc)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return EditAnswer(
            None, f"{request.verb} of keyed state failed and changed nothing: {type(exc).__name__}: {first}"
        )

"""A bulk stream's event-time watermark after a micro-batch, by Spark's rule.

Each input has its own watermark: the newest event time it has brought minus the delay, never
moving back. The query's one watermark is chosen over the inputs that have had rows by
``spark.sql.streaming.multipleWatermarkPolicy`` (``min``, Spark's default: it advances as the
slowest input does; ``max``: as the fastest) and never moves back either. With one input that
is its own watermark. Each input's watermark is kept in the commit record
(``input_watermarks_ms``), so a restarted stream (another ``ks.run``) goes on from it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ...api.errors import SchemaError

__all__ = ["ONE_INPUT", "POLICY_CONF", "next_watermarks", "watermark_policy"]

log = logging.getLogger(__name__)

POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
ONE_INPUT = ""  # the name a single input's watermark is kept under
_CHOOSE = {"min": min, "max": max}


def watermark_policy(spark: Any) -> str:
    """The session's policy for several watermarked inputs (``min`` unless set)."""
    try:
        name = (spark.conf.get(POLICY_CONF, "min") or "min").strip().lower()
    except Exception:  # noqa: BLE001 - a session that cannot say: Spark's default
        return "min"
    if name not in _CHOOSE:
        raise SchemaError(f"{POLICY_CONF} = {name!r}: Spark knows 'min' and 'max'")
    return name


def next_watermarks(
    previous_ms: int | None,
    inputs_ms: Mapping[str, int],
    newest_ms: Mapping[str, int],
    delay_ms: int,
    policy: str = "min",
) -> tuple[int | None, dict[str, int]]:
    """The query's watermark and each input's after a batch whose inputs brought ``newest_ms``
    (input -> newest event time; empty: no rows with an event time), from the watermark before
    it (``previous_ms``) and each input's (``inputs_ms``)."""
    inputs = dict(inputs_ms)
    for name, newest in newest_ms.items():
        candidate = newest - delay_ms
        if name not in inputs or candidate > inputs[name]:
            inputs[name] = candidate
    if not inputs:
        return previous_ms, inputs
    chosen = _CHOOSE[policy](inputs.values())
    if previous_ms is not None and chosen <= previous_ms:
        return previous_ms, inputs
    if previous_ms is not None and len(inputs) > 1:
        log.debug("watermark %s -> %s ms (%s of %s)", previous_ms, chosen, policy, inputs)
    return chosen, inputs

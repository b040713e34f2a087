"""Processing time as the engines read it: the wall clock, moved by a session's
``spark.keyedsql.clockOffsetMs`` (0 unless set). Tests move processing time past a TTL or a
timer with it instead of sleeping; a query's plan carries the offset to its tasks."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["CLOCK_OFFSET_CONF", "now_ms", "session_offset_ms"]

CLOCK_OFFSET_CONF = "spark.keyedsql.clockOffsetMs"


def session_offset_ms(spark: Any) -> int:
    """The session's clock offset (milliseconds; 0 when not set)."""
    try:
        return int(spark.conf.get(CLOCK_OFFSET_CONF, None) or 0)
    except (TypeError, ValueError):
        return 0


def now_ms(offset_ms: int = 0) -> int:
    return int(time.time() * 1000) + offset_ms

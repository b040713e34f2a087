"""Work an engine runs beside Spark's streaming query (a timer pump, a compaction), and how its
failure reaches the user. A failure is logged and retried up to a bound; past the bound it fails
the query: the query is stopped, and the failure is what ``StreamingQuery.exception()`` returns
and what ``awaitTermination()`` / ``processAllAvailable()`` raise on the query ``ks.start``
returned (``streaming/failures.py`` asks :func:`failure_of`), and what ``ks.run`` raises.
Nothing is dropped silently."""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["RETRIES", "Retrying", "fail_query", "failure_of"]

log = logging.getLogger(__name__)

RETRIES = 3  # consecutive failures of one kind of background work before it fails the query

_LOCK = threading.Lock()
_FAILED: dict[str, BaseException] = {}  # query id -> the failure that stopped it


def _query_id(query: Any) -> str | None:
    """The run's id: a query restarted on its checkpoint keeps its ``id`` but gets a new
    ``runId``, and the failure of the earlier run is not the restarted one's."""
    for attr in ("runId", "id"):
        try:
            return str(getattr(query, attr))
        except Exception:  # noqa: BLE001 - a query object without one: the next, or nothing to record under
            continue
    return None


def fail_query(query: Any, exc: BaseException, what: str) -> None:
    """Record ``exc`` as the failure of ``query`` and stop it."""
    qid = _query_id(query)
    log.error("%s failed; stopping streaming query %s", what, qid, exc_info=exc)
    if qid is not None:
        with _LOCK:
            _FAILED.setdefault(qid, exc)
    try:
        query.stop()
    except Exception:  # noqa: BLE001 - already stopped or gone: the failure is recorded all the same
        log.debug("stopping query %s after a background failure", qid, exc_info=True)


def failure_of(query: Any) -> BaseException | None:
    """The background failure that stopped ``query`` (None when there was none)."""
    qid = _query_id(query)
    if qid is None:
        return None
    with _LOCK:
        return _FAILED.get(qid)


class Retrying:
    """Consecutive failures of one piece of background work: ``failed(exc)`` logs it and says
    whether the bound is reached; ``succeeded()`` resets the count."""

    def __init__(self, what: str, bound: int = RETRIES):
        self.what, self.bound, self.count = what, bound, 0
        self.last: BaseException | None = None

    def failed(self, exc: BaseException) -> bool:
        self.count += 1
        self.last = exc
        log.warning("%s failed (%d of %d tries): %s", self.what, self.count, self.bound, exc, exc_info=exc)
        return self.count >= self.bound

    def succeeded(self) -> None:
        self.count, self.last = 0, None

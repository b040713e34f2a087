"""Workarounds for bugs of released Spark versions, each named with what it works around and
the versions seen to need it; the rest of the package calls these, never a version check."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ensure_state_store_coordinator"]

_DONE: set[int] = set()
_LOCK = threading.Lock()


def ensure_state_store_coordinator(spark: Any) -> None:
    """transformWithState in a *batch* query needs the driver's StateStoreCoordinator, which
    Spark registers when the session's StreamingQueryManager is first made. Spark 4.1 does not
    make it for a batch query, whose tasks then fail with ``RpcEndpointNotFoundException:
    Cannot find endpoint: spark://StateStoreCoordinator`` (seen on 4.1.4; 4.0 and 4.3 make it).
    Asking the session for its active streams makes the manager, once per session."""
    with _LOCK:
        if id(spark) in _DONE:
            return
        _DONE.add(id(spark))
    try:
        _ = spark.streams.active
    except Exception:  # noqa: BLE001 - a session without streams support: nothing to make
        pass

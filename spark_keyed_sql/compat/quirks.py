"""Workarounds for bugs of released Spark versions, each named with what it works around and
the versions seen to need it; the rest of the package calls these, never a version check."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ensure_state_store_coordinator", "jvm_logger_off"]

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


@contextmanager
def jvm_logger_off(spark: Any, name: str) -> Iterator[None]:
    """The driver JVM's log4j logger ``name`` off while the block runs, then as it was. For lines
    Spark logs at ERROR about what this package did on purpose (a query it stopped mid-batch:
    ``FileFormatWriter: Aborting job`` with the interrupt's stack). Classic sessions only (a
    Spark Connect client reaches no JVM): elsewhere the block just runs."""
    configurator = level = None
    try:
        jvm = spark._jvm  # (AttributeError through Connect)
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        level = jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel()
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:  # noqa: BLE001 - no JVM here, or not log4j 2: the lines stay
        configurator = None
    try:
        yield
    finally:
        if configurator is not None:
            try:
                configurator.setLevel(name, level)
            except Exception:  # noqa: BLE001 - the session is gone: nothing to restore
                pass

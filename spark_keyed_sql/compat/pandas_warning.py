"""PySpark 4.2 and 4.3 warn (``FutureWarning: PySpark does not yet fully support pandas >=
3.0.0``) each time they make a Python function while pandas 3 is installed: ``mapInArrow``,
``transformWithState``, a UDTF, and once when the first JVM call imports ``pyspark.testing``.
This package's own calls are tested on pandas 3 (the Arrow batches it hands on are not pandas
conversions), so the warning says nothing to their user: ``quiet_pandas_warning`` mutes that
one message around them. A user's own pandas UDFs keep PySpark's warning.

The filter is added on the first entry and removed on the last exit (counted under a lock),
never by restoring a saved filter list: a stream's thread and the caller's may be inside at
once, and a filter list saved by one and restored by the other would keep the mute for good
or drop a filter the user added meanwhile."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["MESSAGE", "preload_quietly", "quiet_pandas_warning", "quietly"]

MESSAGE = "PySpark does not yet fully support pandas"

_lock = threading.Lock()
_depth = 0
_entry: Any = None

F = TypeVar("F", bound=Callable[..., Any])


def _refresh() -> None:
    mutated = getattr(warnings, "_filters_mutated", None)  # each module's "already shown" cache
    if mutated is not None:
        mutated()


@contextmanager
def quiet_pandas_warning() -> Iterator[None]:
    global _depth, _entry
    with _lock:
        if _depth == 0:
            warnings.filterwarnings("ignore", message=MESSAGE, category=FutureWarning)
            _entry = warnings.filters[0]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                try:
                    warnings.filters.remove(_entry)
                except ValueError:  # a caller's catch_warnings() already put its own list back
                    pass
                _entry = None
                _refresh()


def quietly(fn: F) -> F:
    """``fn`` run inside ``quiet_pandas_warning``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet_pandas_warning():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def preload_quietly() -> None:
    """Import ``pyspark.testing.utils`` now, muted: PySpark's py4j converter imports it on a
    session's first JVM call, and with pandas 3 that import warns once, from a session start
    that has nothing to do with pandas. Imported here, it is in ``sys.modules`` already then."""
    import sys

    if "pyspark.testing.utils" in sys.modules:
        return
    with quiet_pandas_warning():
        try:
            import pyspark.testing.utils  # noqa: F401
        except Exception:  # noqa: BLE001 - a client without it (pyspark-client) has nothing to preload
            pass

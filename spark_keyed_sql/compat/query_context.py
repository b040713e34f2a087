"""PySpark (4.0+) logs each AnalysisException raised through the DataFrame API, with its query
context, as one JSON ERROR line (often kilobytes: the plan and the JVM's frames) before raising
it. Where this project probes a user's expression to raise its own error in its place, that
line is noise printed before the real message; these quiet it. The loggers are made as PySpark
makes them (its logger class takes extra fields)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_query_context_logs", "silence_query_context_logs"]

_NAMES = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _loggers() -> list[logging.Logger]:
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # (Spark 3.5: no such log)
        return []
    return [PySparkLogger.getLogger(name) for name in _NAMES]


def silence_query_context_logs() -> None:
    """For the whole process (the CLI, which says each error once itself)."""
    for logger in _loggers():
        logger.setLevel(logging.CRITICAL)


_lock = threading.Lock()
_quieting = 0  # probes under way (in any thread)
_levels: list[int] = []  # the loggers' levels before the first of them


@contextmanager
def quiet_query_context_logs() -> Iterator[None]:
    """While a probe runs whose AnalysisException becomes this project's own error. Probes in
    several threads overlap: the first one in quiets the loggers, the last one out restores them."""
    global _quieting, _levels
    with _lock:
        if _quieting == 0:
            loggers = _loggers()
            _levels = [lg.level for lg in loggers]
            for lg in loggers:
                lg.setLevel(logging.CRITICAL)
        _quieting += 1
    try:
        yield
    finally:
        with _lock:
            _quieting -= 1
            if _quieting == 0:
                for lg, level in zip(_loggers(), _levels):
                    lg.setLevel(level)

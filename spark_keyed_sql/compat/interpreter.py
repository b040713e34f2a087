"""Spark's Python workers and this interpreter.

PySpark starts its workers with ``PYSPARK_PYTHON`` as it was when the SparkContext started,
else ``python3`` from the PATH, and fixes that interpreter into every Python function and
DataFrame made from then on (``spark.createDataFrame`` of a list included). When a user runs
a venv's interpreter without activating the venv, that ``python3`` is another Python: it cannot
import this package, or is another minor version (``PYTHON_VERSION_MISMATCH``). So, when this
package is imported and ``PYSPARK_PYTHON`` is unset and the PATH's ``python3`` is not this
interpreter, ``PYSPARK_PYTHON`` is set to this interpreter for the SparkContexts started
later in this process (``KeyedSQL.side_effects()`` reports it; ``SPARK_KEYED_SQL_KEEP_ENV=1``
turns it off). A SparkContext already running is left alone here (``shipping.use_this_python``
sees to its later functions on a local master)."""

from __future__ import annotations

import logging
import os
import shutil
import sys

__all__ = ["default_worker_python", "same_python", "worker_python_set_here"]

log = logging.getLogger(__name__)

KEEP_ENV = "SPARK_KEYED_SQL_KEEP_ENV"
_SET_HERE: list[str] = []


def same_python(a: str, b: str) -> bool:
    """Same interpreter *path* (not resolved: a venv's python links to the base one, which does
    not see the venv's packages)."""
    found = shutil.which(a) or a
    return os.path.abspath(found) == os.path.abspath(b)


def default_worker_python() -> None:
    """``PYSPARK_PYTHON`` = this interpreter, when it is unset and ``python3`` is another."""
    if os.environ.get(KEEP_ENV) or "PYSPARK_PYTHON" in os.environ or not sys.executable:
        return
    if same_python("python3", sys.executable):
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    _SET_HERE.append(sys.executable)
    log.debug("PYSPARK_PYTHON set to %s (the PATH's python3 is another interpreter)", sys.executable)


def worker_python_set_here() -> str | None:
    """The interpreter this package put in ``PYSPARK_PYTHON``, if it did and it is still there."""
    if _SET_HERE and os.environ.get("PYSPARK_PYTHON") == _SET_HERE[-1]:
        return _SET_HERE[-1]
    return None

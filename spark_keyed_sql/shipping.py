"""Getting user code to Spark's Python workers: the interpreter they run, the user's classes
(by value, so executors need not import the user's modules) and this package itself (on a
cluster, whose executors may not have it installed)."""

from __future__ import annotations

import logging
import os
import sys
import threading

from pyspark.sql import SparkSession

from .compat.interpreter import same_python, worker_python_set_here
from .runtime.connect import is_connect
from .state.fs import temp_dir

__all__ = ["ship_class", "ship_package", "use_this_python"]

log = logging.getLogger(__name__)


def ship_class(cls: type) -> None:
    """Classes from a user's own modules (a test file, a notebook, a script next to the data)
    are sent to executors by value, so executors need not be able to import those modules —
    the class's own module and those of its base classes (a user class may extend another)."""
    from pyspark import cloudpickle

    for klass in cls.__mro__:
        mod = sys.modules.get(klass.__module__)
        if mod is None or klass.__module__ in ("__main__", "builtins"):
            continue
        path = getattr(mod, "__file__", None) or ""
        if (
            not path
            or "site-packages" in path
            or "dist-packages" in path
            or klass.__module__.startswith("spark_keyed_sql")
        ):
            continue
        if path.startswith(sys.base_prefix) or path.startswith(sys.prefix):
            continue  # the standard library
        try:
            cloudpickle.register_pickle_by_value(mod)
        except (ValueError, TypeError):
            pass


_SHIPPED: set[int] = set()
_SHIPPED_LOCK = threading.Lock()
_WORKER_IMPORTS = "import spark_keyed_sql, pandas, pyarrow"


def _imports_package(python: str) -> bool:
    import subprocess

    try:
        return subprocess.run([python, "-c", _WORKER_IMPORTS], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def use_this_python(spark: SparkSession) -> list[str]:
    """Spark's Python workers must import this package (and pandas, pyarrow). PySpark fixes
    their interpreter when the SparkContext starts (``sc.pythonExec``: ``PYSPARK_PYTHON`` as it
    was then, else ``python3`` from the PATH) and gives it to each Python function as it is
    created, so a session the user started without the variable sends every keyed function to
    an interpreter that cannot import it. On a local master the workers run on this machine:
    when the interpreter was not chosen (or cannot import the package), the functions created
    from here on use this one. On a cluster the executors' interpreter is the cluster's to
    choose; the package itself is shipped (``ship_package``). Returns what it changed; it may
    run the session's interpreter once (``python -c "import spark_keyed_sql, ..."``) to see
    whether that one can import this package."""
    sc = spark.sparkContext
    current = getattr(sc, "pythonExec", None) or "python3"
    if not (sc.master or "").startswith("local"):
        if worker_python_set_here() == current:
            log.warning(
                "Spark's Python workers on this cluster (master %s) will run %s: spark_keyed_sql set PYSPARK_PYTHON to "
                "this interpreter because it was unset. Set PYSPARK_PYTHON (or spark.pyspark.python) to the executors' "
                "Python if that path does not exist there",
                sc.master,
                current,
            )
        return []
    if same_python(current, sys.executable):
        return []
    chosen = current != "python3" or bool(sc.getConf().get("spark.pyspark.python", None))
    if chosen and _imports_package(current):
        return []
    if chosen:
        import warnings

        warnings.warn(
            f"Spark's Python workers were set to use {current}, which cannot import spark_keyed_sql, pandas and "
            f"pyarrow; using {sys.executable} for them (set PYSPARK_PYTHON={sys.executable} before creating the "
            "SparkSession to silence this)",
            stacklevel=3,
        )
    sc.pythonExec = sys.executable
    return [f"SparkContext.pythonExec {current!r} -> {sys.executable!r} (the session's later Python functions)"]


def _package_zip() -> str:
    import shutil

    package = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(temp_dir("spark-keyed-sql-"), "spark_keyed_sql")
    return shutil.make_archive(base, "zip", root_dir=os.path.dirname(package), base_dir="spark_keyed_sql")


def ship_package(spark: SparkSession) -> list[str]:
    """On a cluster, executors may lack this package: send it as a zip, once per SparkContext
    (``addPyFile``) or Spark Connect session (``addArtifacts``). Local masters share the driver's
    interpreter and need nothing. Returns what it changed."""
    if is_connect(spark):
        if spark.conf.get("spark.master", "").startswith("local"):
            return []
        with _SHIPPED_LOCK:
            if id(spark) in _SHIPPED:
                return []
            spark.addArtifacts(_package_zip(), pyfile=True)
            _SHIPPED.add(id(spark))
        return ["this package added to the Spark Connect session as a Python artifact"]
    sc = spark.sparkContext
    master = sc.master or ""
    if master.startswith("local"):
        return []
    with _SHIPPED_LOCK:
        if id(sc) in _SHIPPED:
            return []
        sc.addPyFile(_package_zip())
        _SHIPPED.add(id(sc))
    return ["this package added to the SparkContext's Python files (addPyFile) for its executors"]

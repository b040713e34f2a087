"""Which PySpark is installed, and whether this package supports it and this Python.

PySpark is not a dependency of this package (a platform brings its own: classic ``pyspark``,
``pyspark-client`` or Databricks Connect), so it is looked for here, once, when something that
needs Spark is first imported; ``StatefulFunction``, ``KeyedProcessor`` and ``KeyedTester``
never need it."""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache

from ..api.errors import SparkVersionError

__all__ = [
    "SUPPORTED_PYTHON",
    "SUPPORTED_SPARK",
    "PySparkInfo",
    "check_python",
    "installed_pyspark",
    "parse_version",
    "require_pyspark",
    "supported_range",
]


# the Spark minors this package is tested on (docs/compatibility.md), oldest and newest
SUPPORTED_SPARK: tuple[tuple[int, int], tuple[int, int]] = ((3, 5), (4, 3))
# the Pythons: 3.10 is the oldest every supported PySpark minor runs on
SUPPORTED_PYTHON: tuple[tuple[int, int], tuple[int, int]] = ((3, 10), (3, 13))

# packages that install the `pyspark` module without Spark's JVM side (a Connect client only)
_CONNECT_ONLY = ("pyspark-client", "pyspark-connect")


def parse_version(text: str) -> tuple[int, int, int]:
    """'4.1.4' -> (4, 1, 4); '3.5.0.dev0', '4.0.0-preview2' and '15.4.x' read their numbers."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def supported_range() -> str:
    (a, b), (c, d) = SUPPORTED_SPARK
    return f"{a}.{b} to {c}.{d}"


@dataclass(frozen=True)
class PySparkInfo:
    """The installed PySpark: its version, the distribution that brought it (``pyspark``,
    ``pyspark-client``, ``databricks-connect``, ...) and where it lives."""

    version: tuple[int, int, int]
    text: str
    distribution: str
    location: str

    @property
    def connect_only(self) -> bool:
        """No JVM side: only ``SparkSession.builder.remote(...)`` sessions."""
        return self.distribution in _CONNECT_ONLY or importlib.util.find_spec("py4j") is None

    @property
    def minor(self) -> tuple[int, int]:
        return self.version[:2]

    def describe(self) -> str:
        return f"{self.distribution} {self.text} ({self.location})"


def _distribution_of(module: str) -> str:
    try:
        from importlib.metadata import packages_distributions

        names = packages_distributions().get(module) or []
    except Exception:  # a broken metadata directory must not hide the real answer
        names = []
    # several (pyspark and pyspark-client both installed): the one that is not the plain name first
    names = sorted(set(names), key=lambda n: n == "pyspark")
    return names[0] if names else "pyspark"


@lru_cache(maxsize=1)
def installed_pyspark() -> PySparkInfo | None:
    """The PySpark importable here, or None when there is none."""
    if importlib.util.find_spec("pyspark") is None:
        return None
    try:
        import pyspark
    except Exception as exc:  # installed but broken: say so rather than pretend it is absent
        raise SparkVersionError(f"PySpark is installed but cannot be imported: {type(exc).__name__}: {exc}") from exc
    text = getattr(pyspark, "__version__", "") or ""
    try:
        version = parse_version(text)
    except ValueError:
        version = (0, 0, 0)
    location = (getattr(pyspark, "__file__", None) or "?").rsplit("/", 2)[0]
    return PySparkInfo(version, text or "of unknown version", _distribution_of("pyspark"), location)


_INSTALL_HINT = (
    "install one with `pip install 'spark-keyed-sql[spark]'` (a local Spark), or use the platform's own "
    "(pyspark, pyspark-client or Databricks Connect)"
)


def require_pyspark(what: str = "KeyedSQL") -> PySparkInfo:
    """The installed PySpark, when this package supports it; otherwise one SparkVersionError
    that names what was found and the supported range. Checked once per process."""
    info = installed_pyspark()
    low, high = SUPPORTED_SPARK
    if info is None:
        raise SparkVersionError(
            f"{what} needs PySpark {supported_range()}, and no PySpark was found for {sys.executable}: "
            f"{_INSTALL_HINT}. StatefulFunction, KeyedProcessor, the state descriptors and KeyedTester work without it."
        )
    if not (low <= info.minor <= high):
        raise SparkVersionError(
            f"{what} supports PySpark {supported_range()}; found {info.describe()}. Install a supported release "
            f"(e.g. `pip install 'pyspark=={high[0]}.{high[1]}.*'`), or see docs/compatibility.md"
        )
    _check_arrow(what)
    return info


def _check_arrow(what: str) -> None:
    """pyarrow and numpy that cannot be imported together (pyarrow 26 needs NumPy 2, which
    PySpark 3.5's `sql` extra forbids) fail every keyed query deep in a worker: say it here."""
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        try:
            from importlib.metadata import version

            found = f"pyarrow {version('pyarrow')}, numpy {version('numpy')}"
        except Exception:
            found = "pyarrow and numpy"
        raise SparkVersionError(
            f"{what} needs pyarrow, which cannot be imported here ({found}): {exc}. With NumPy 1.x, install "
            "pyarrow<26 (`pip install 'pyarrow<26'`); see docs/compatibility.md"
        ) from None


_WARNED: set[tuple[int, int]] = set()


def check_python() -> None:
    """Python older than 3.10: one ImportError; newer than the newest tested: one warning."""
    here = sys.version_info[:2]
    low, high = SUPPORTED_PYTHON
    if here < low:
        raise ImportError(
            f"spark-keyed-sql needs Python {low[0]}.{low[1]} to {high[0]}.{high[1]}; this is Python "
            f"{here[0]}.{here[1]} ({sys.executable})"
        )
    if here > high and here not in _WARNED:
        _WARNED.add(here)
        warnings.warn(
            f"spark-keyed-sql is tested on Python {low[0]}.{low[1]} to {high[0]}.{high[1]}; this is Python "
            f"{here[0]}.{here[1]}, untested (docs/compatibility.md)",
            RuntimeWarning,
            stacklevel=3,
        )

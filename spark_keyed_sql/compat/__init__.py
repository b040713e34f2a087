"""What the running Spark and Python can do: the one place that knows which release brought
which feature (``features``), whether the installed PySpark is one this package supports
(``versions``), and the calls whose signature changed between releases (``arrow``). Nothing
else in the package compares version numbers."""

from .features import Feature, SparkFeatures, features, require
from .versions import SUPPORTED_PYTHON, SUPPORTED_SPARK, PySparkInfo, check_python, installed_pyspark, require_pyspark

__all__ = [
    "Feature",
    "PySparkInfo",
    "SUPPORTED_PYTHON",
    "SUPPORTED_SPARK",
    "SparkFeatures",
    "check_python",
    "features",
    "installed_pyspark",
    "require",
    "require_pyspark",
]

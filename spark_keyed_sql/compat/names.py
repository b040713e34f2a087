"""Columns by their names as written. Spark's ``F.col("u.id")``, ``df.select("u.id")`` and
``Window.partitionBy("u.id")`` read a dot as a struct field, so a key named ``u.id`` (``GROUP BY
KEY `u.id` ``) fails with UNRESOLVED_COLUMN there; every user-given name goes through these.
(No PySpark at import: the package, KeyedTester among it, imports without one.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["named", "quote"]


def quote(name: str) -> str:
    """A column name as a quoted Spark SQL identifier (backticks doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def named(name: str) -> Column:
    """The column called ``name``, dots and backticks and all."""
    from pyspark.sql import functions as F

    return F.col(quote(name))

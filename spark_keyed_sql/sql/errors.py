"""Errors of the SQL layer, with line and column for syntax errors."""

from __future__ import annotations

import re

from ..api.errors import KeyedSQLError
from ..compat.exceptions import exception_texts, first_line

__all__ = ["KeyedSQLSyntaxError", "KeyedQueryError", "spark_hint"]


class KeyedSQLSyntaxError(KeyedSQLError):
    def __init__(self, message: str, line: int | None = None, col: int | None = None, sql: str = ""):
        self.line, self.col, self.description = line, col, message
        where = f"line {line}, column {col}: " if line is not None else ""
        pointer = ""
        if line is not None and sql:
            lines = sql.splitlines() or [""]
            text = lines[min(line, len(lines)) - 1]
            pointer = f"\n  {text}\n  {' ' * max((col or 1) - 1, 0)}^"
        super().__init__(f"{where}{message}{pointer}")


class KeyedQueryError(KeyedSQLError):
    """A well-formed keyed query that cannot run as written (unknown column, bad option...)."""


NANOS_HINT = (
    "; Spark cannot read Parquet timestamps in nanoseconds (pandas' default unit): write the file with "
    "df.to_parquet(path, coerce_timestamps='us', allow_truncated_timestamps=True), or set "
    "spark.sql.legacy.parquet.nanosAsLong=true to read them as bigint nanoseconds"
)


_NANOS = re.compile(r"(PARQUET_TYPE_ILLEGAL|Illegal Parquet type)[^\n]*NANOS")


def spark_hint(exc: BaseException) -> str:
    """Spark's error ``exc`` in one line, with what to do about it for errors whose remedy Spark
    does not say (looking down the cause chain: Spark 3.5 reports a Parquet file in nanoseconds
    as an unsupported data source, the reason two causes down)."""
    message = first_line(exc)
    if "nanosAsLong" in message:
        return message
    for text in exception_texts(exc):
        found = _NANOS.search(text)
        if found:
            shown = message if found.group(0) in message else f"{message} ({found.group(0).strip()})"
            return shown.rstrip(". ") + NANOS_HINT
    return message

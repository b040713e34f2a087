"""Errors of the SQL layer, with line and column for syntax errors."""

from __future__ import annotations

from ..api.errors import KeyedSQLError

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


def spark_hint(message: str) -> str:
    """``message`` (Spark's error) with what to do about it, for errors whose remedy Spark does
    not say."""
    if "PARQUET_TYPE_ILLEGAL" in message and "NANOS" in message and "nanosAsLong" not in message:
        return message.rstrip(". ") + NANOS_HINT
    return message

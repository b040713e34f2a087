"""Errors of the SQL layer, with line and column for syntax errors."""

from __future__ import annotations

import re
from typing import Any

from ..api.errors import KeyedSQLError
from ..compat.exceptions import exception_texts, first_line

__all__ = ["KeyedSQLSyntaxError", "KeyedQueryError", "outer_part_error", "position", "spark_hint"]


def _located(message: str, line: int | None, col: int | None, sql: str) -> str:
    where = f"line {line}, column {col}: " if line is not None else ""
    pointer = ""
    if line is not None and sql:
        lines = sql.splitlines() or [""]
        text = lines[min(line, len(lines)) - 1]
        pointer = f"\n  {text}\n  {' ' * max((col or 1) - 1, 0)}^"
    return f"{where}{message}{pointer}"


class KeyedSQLSyntaxError(KeyedSQLError):
    def __init__(self, message: str, line: int | None = None, col: int | None = None, sql: str = ""):
        self.line, self.col, self.description = line, col, message
        super().__init__(_located(message, line, col, sql))


class KeyedQueryError(KeyedSQLError):
    """A well-formed keyed query that cannot run as written (unknown column, bad option...);
    ``line``/``col``: where in the statement, when the rewriter knows (the start of the part at fault)."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None, sql: str = ""):
        self.line, self.col, self.description, self.sql = line, col, message, sql
        super().__init__(_located(message, line, col, sql))

    def in_statement(self, sql: str) -> KeyedQueryError:
        """The same error showing the statement's line with a caret (when it has a position)."""
        if self.line is None or self.sql:
            return self
        return KeyedQueryError(self.description, self.line, self.col, sql)


def outer_part_error(exc: BaseException) -> KeyedQueryError:
    """Spark's refusal of the SQL around a statement's keyed selects (an ambiguous or unknown
    column of the outer SELECT, say), in one line: what ks.sql, ks.run and ks.start raise."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    # (Spark's "line 1 pos 22" is a place in the SQL the rewriter made, not in the user's)
    return KeyedQueryError(f"Spark cannot run the statement's outer part: {_SPARK_POSITION.sub('', first)}")


_SPARK_POSITION = re.compile(r";?\s*line \d+,? pos \d+\s*$")


def position(node: Any) -> tuple[int | None, int | None]:
    """(line, column of its first character) of a parsed node, or of the first node under it that
    the parser placed; (None, None) when none was."""
    for n in node.walk() if node is not None else ():
        meta = getattr(n, "_meta", None) or {}
        if "line" in meta and "col" in meta:
            width = meta["end"] - meta["start"] if "end" in meta and "start" in meta else 0
            return meta["line"], max(1, meta["col"] - width)
    return None, None


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

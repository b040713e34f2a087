"""Errors of the SQL layer, with line and column for syntax errors."""

from __future__ import annotations

from ..api.errors import KeyedSQLError

__all__ = ["KeyedSQLSyntaxError", "KeyedQueryError"]


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

"""Text -> sqlglot tree with the keyed dialect; the project's own syntax errors."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .dialect import KeyedSpark
from .errors import KeyedSQLSyntaxError

__all__ = ["parse_statement", "mentions_keyed_syntax", "render"]


def mentions_keyed_syntax(text: str) -> bool:
    """True when the tokens (not strings or comments) contain WITH STATE / GROUP BY KEY /
    EXPLAIN KEYED / keyed_state."""
    try:
        tokens = KeyedSpark().tokenize(text)
    except (TokenError, ValueError):
        return False
    words = [t.text.upper() for t in tokens]
    if "KEYED_STATE" in words or "KEYED_STATE_CHANGES" in words:
        return True
    for a, b in zip(words, words[1:]):
        if (a, b) in {("WITH", "STATE"), ("EXPLAIN", "KEYED")}:
            return True
    for a, b in zip(words, words[1:]):
        if a == "GROUP BY" and b == "KEY":
            return True
    return False


def parse_statement(text: str) -> exp.Expression:
    if not isinstance(text, str) or not text.strip():
        raise KeyedSQLSyntaxError("empty SQL statement")
    try:
        trees = [t for t in sqlglot.parse(text, read=KeyedSpark) if t is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        raise KeyedSQLSyntaxError(err.get("description") or str(e), err.get("line"), err.get("col"), text) from None
    except TokenError as e:
        raise KeyedSQLSyntaxError(f"cannot tokenize SQL: {e}") from None
    if len(trees) != 1:
        raise KeyedSQLSyntaxError(f"expected one SQL statement, got {len(trees)}")
    return trees[0]


def render(tree: exp.Expression) -> str:
    return tree.sql(dialect=KeyedSpark, normalize_functions=False)

"""Text -> sqlglot tree with the keyed dialect; the project's own syntax errors."""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .dialect import KeyedSpark
from .errors import KeyedSQLSyntaxError
from .expressions import KeyedGroup

__all__ = ["STATE_TABLE_FUNCTIONS", "has_keyed_parts", "parse_statement", "mentions_keyed_syntax", "render"]

STATE_TABLE_FUNCTIONS = ("keyed_state", "keyed_state_changes")  # resolved by the rewriter, not by Spark


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


def has_keyed_parts(tree: exp.Expression) -> bool:
    """Whether the parsed statement has anything the rewriter plans (``GROUP BY KEY`` or a state
    table function); one that only looked like it (a column named ``key``) goes to Spark as written."""
    if tree.find(KeyedGroup) is not None:
        return True
    return any((f.name or "").lower() in STATE_TABLE_FUNCTIONS for f in tree.find_all(exp.Anonymous, exp.Table))


def parse_statement(text: str) -> exp.Expression:
    if not isinstance(text, str) or not text.strip():
        raise KeyedSQLSyntaxError("empty SQL statement")
    _refuse_plain_explain(text)
    try:
        trees = [t for t in sqlglot.parse(text, read=KeyedSpark) if t is not None]
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        raise KeyedSQLSyntaxError(err.get("description") or str(e), err.get("line"), err.get("col"), text) from None
    except TokenError as e:
        raise KeyedSQLSyntaxError(f"cannot tokenize SQL: {e}") from None
    if len(trees) != 1:
        raise KeyedSQLSyntaxError(f"expected one SQL statement, got {len(trees)}")
    tree = trees[0]
    return tree


def _refuse_plain_explain(text: str) -> None:
    """Spark's EXPLAIN cannot parse the keyed clause: say what shows a keyed query's plan."""
    if not mentions_keyed_syntax(text):
        return
    tokens = KeyedSpark().tokenize(text)
    if len(tokens) < 2 or tokens[0].text.upper() != "EXPLAIN" or tokens[1].text.upper() == "KEYED":
        return
    rest = tokens[2] if tokens[1].text.upper() in _EXPLAIN_MODES and len(tokens) > 2 else tokens[1]
    try:
        inner = sqlglot.parse_one(text[rest.start :], read=KeyedSpark)
    except (ParseError, TokenError):
        return  # not a keyed query after all: Spark's EXPLAIN says what it thinks of it
    if has_keyed_parts(inner):
        first = tokens[0]
        raise KeyedSQLSyntaxError(
            "EXPLAIN of a keyed query: use EXPLAIN KEYED <query> for its keyed plan, "
            "or ks.sql(<query>).explain() for Spark's physical plan",
            first.line,
            first.col,
            text,
        )


_EXPLAIN_MODES = {"EXTENDED", "FORMATTED", "CODEGEN", "COST"}


def render(tree: exp.Expression) -> str:
    return tree.sql(dialect=KeyedSpark, normalize_functions=False)

"""Text -> sqlglot tree with the keyed dialect; the project's own syntax errors."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from .dialect import KeyedSpark
from .errors import KeyedSQLSyntaxError
from .expressions import KeyedGroup

__all__ = [
    "STATE_TABLE_FUNCTIONS",
    "has_keyed_parts",
    "parse_statement",
    "mentions_keyed_syntax",
    "render",
    "without_trailing_semicolons",
]

STATE_TABLE_FUNCTIONS = ("keyed_state", "keyed_state_changes")  # resolved by the rewriter, not by Spark
_KEYED_MARKS = {("WITH", "STATE"), ("EXPLAIN", "KEYED")}  # word pairs only a keyed statement has


def _words(text: str) -> list[str] | None:
    """The statement's tokens (not strings or comments), upper-cased; None if it does not tokenize."""
    try:
        return [t.text.upper() for t in KeyedSpark().tokenize(text)]
    except (TokenError, ValueError):
        return None


def _has_keyed_marks(words: list[str]) -> bool:
    return any(pair in _KEYED_MARKS for pair in zip(words, words[1:]))


def mentions_keyed_syntax(text: str) -> bool:
    """True when the tokens (not strings or comments) contain WITH STATE / GROUP BY KEY /
    EXPLAIN KEYED / keyed_state."""
    words = _words(text)
    if words is None:
        return False
    if "KEYED_STATE" in words or "KEYED_STATE_CHANGES" in words or _has_keyed_marks(words):
        return True
    return any(a == "GROUP BY" and b == "KEY" for a, b in zip(words, words[1:]))


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
        plain = _plain_spark(text)
        if plain is not None:
            return plain
        err = e.errors[0] if e.errors else {}
        message = _readable(err.get("description") or str(e))
        raise KeyedSQLSyntaxError(message, err.get("line"), err.get("col"), text) from None
    except TokenError as e:
        raise KeyedSQLSyntaxError(f"cannot tokenize SQL: {e}") from None
    if len(trees) != 1:
        raise KeyedSQLSyntaxError(f"expected one SQL statement, got {len(trees)}")
    tree = trees[0]
    return tree


def _readable(message: str) -> str:
    """sqlglot's message for a clause left empty (``Required keyword: 'expressions' missing for
    <class 'sqlglot.expressions.query.Order'>``) in the words of the SQL."""
    m = _MISSING.match(message)
    if m is None:
        return message
    clause = _CLAUSES.get(m.group(2), m.group(2).upper())
    return f"Expected an expression after {clause}" if m.group(1) in ("this", "expressions") else message


_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_CLAUSES = {"Order": "ORDER BY", "Group": "GROUP BY", "Where": "WHERE", "Having": "HAVING", "Limit": "LIMIT"}


def _plain_spark(text: str) -> exp.Expression | None:
    """The tree of a statement the keyed dialect refused but Spark's grammar takes, with no
    ``WITH STATE`` or ``EXPLAIN KEYED`` in it: a column named ``key`` after ``GROUP BY`` in an
    expression the dialect read as a keyed clause (``GROUP BY key % 2``, ``GROUP BY key QUALIFY
    ...``). Plain Spark SQL, passed to Spark as written; None for anything else."""
    words = _words(text)
    if words is None or _has_keyed_marks(words):
        return None
    try:
        trees = [t for t in sqlglot.parse(text, read="spark") if t is not None]
    except (ParseError, TokenError):
        return None
    return trees[0] if len(trees) == 1 else None


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


def without_trailing_semicolons(text: str) -> str:
    """``text`` up to its last statement-ending ``;`` (and whatever comment follows it): what
    Spark accepts at the end of a statement but not inside parentheses."""
    try:
        tokens = KeyedSpark().tokenize(text)
    except TokenError:
        return text
    end = len(text)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        end = tokens.pop().start
    return text[:end]


def render(tree: exp.Expression, identify: bool = False) -> str:
    """Spark SQL text of ``tree`` (``identify``: every identifier quoted, one text per column)."""
    return tree.sql(dialect=KeyedSpark, normalize_functions=False, identify=identify)

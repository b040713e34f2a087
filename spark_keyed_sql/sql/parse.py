"""Text -> sqlglot tree with the keyed dialect; the project's own syntax errors.

A statement given to ``ks.sql`` is tokenized once and parsed at most once (``read_statement``):
the tokens say whether it is keyed at all (plain Spark SQL goes to Spark as written, unparsed),
and the parser reads those same tokens. The tree is then handed on (table-function calls
expanded, the rewriter), never parsed from text again."""

from __future__ import annotations

import re
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from .dialect import KeyedSpark
from .errors import KeyedSQLSyntaxError
from .expressions import KeyedGroup

__all__ = [
    "STATE_TABLE_FUNCTIONS",
    "has_keyed_parts",
    "parse_statement",
    "mentions_keyed_syntax",
    "mentions_table_call",
    "read_statement",
    "render",
    "without_trailing_semicolons",
]

STATE_TABLE_FUNCTIONS = ("keyed_state", "keyed_state_changes")  # resolved by the rewriter, not by Spark
_KEYED_MARKS = {("WITH", "STATE"), ("EXPLAIN", "KEYED")}  # word pairs only a keyed statement has


def _tokens(text: str) -> list[Token] | None:
    """The statement's tokens (not strings' insides or comments); None if it does not tokenize."""
    try:
        return KeyedSpark().tokenize(text)
    except (TokenError, ValueError):
        return None


def _words(tokens: list[Token]) -> list[str]:
    return [t.text.upper() for t in tokens]


def _has_keyed_marks(words: list[str]) -> bool:
    return any(pair in _KEYED_MARKS for pair in zip(words, words[1:]))


def _is_keyed(words: list[str]) -> bool:
    """WITH STATE / GROUP BY KEY / EXPLAIN KEYED / keyed_state among the words."""
    if "KEYED_STATE" in words or "KEYED_STATE_CHANGES" in words or _has_keyed_marks(words):
        return True
    return any(a == "GROUP BY" and b == "KEY" for a, b in zip(words, words[1:]))


def _calls_table_function(tokens: list[Token], words: list[str], registered: Callable[[str], bool]) -> bool:
    """A registered name called with a ``TABLE(...)`` argument (``fn(TABLE(t), ...)``,
    ``fn(..., name => TABLE(t), ...)``): the table-function form ``table_calls.py`` expands."""
    for i, t in enumerate(tokens[:-2]):
        if words[i + 1] != "(" or words[i] == "TABLE" or not registered(t.text):
            continue
        depth = 0
        for j in range(i + 1, len(words) - 1):
            depth += {"(": 1, ")": -1}.get(words[j], 0)
            if depth == 0:
                break
            if depth == 1 and words[j] in ("(", ",", "=>") and words[j + 1] == "TABLE":
                return True
    return False


def mentions_keyed_syntax(text: str) -> bool:
    """True when the tokens (not strings or comments) contain WITH STATE / GROUP BY KEY /
    EXPLAIN KEYED / keyed_state."""
    tokens = _tokens(text)
    return tokens is not None and _is_keyed(_words(tokens))


def mentions_table_call(text: str, registered: Callable[[str], bool]) -> bool:
    """True when the tokens hold a registered name called with a ``TABLE(...)`` argument."""
    tokens = _tokens(text)
    return tokens is not None and _calls_table_function(tokens, _words(tokens), registered)


def read_statement(text: str, registered: Callable[[str], bool]) -> exp.Expression | None:
    """The tree of a statement ``ks.sql`` plans: one with keyed syntax or a call of a
    ``registered`` function with a ``TABLE(...)`` argument. None for any other statement
    (plain Spark SQL, to be run as written): then it is tokenized and not parsed. Tokenized
    once, parsed once; syntax errors as ``parse_statement``'s."""
    tokens = _tokens(text)
    if tokens is None:
        _refuse_unterminated(text, lambda ts, words: _is_keyed(words) or _calls_table_function(ts, words, registered))
        return None
    words = _words(tokens)
    if not (_is_keyed(words) or _calls_table_function(tokens, words, registered)):
        return None
    return _parse(text, tokens, words)


def has_keyed_parts(tree: exp.Expression) -> bool:
    """Whether the parsed statement has anything the rewriter plans (``GROUP BY KEY`` or a state
    table function); one that only looked like it (a column named ``key``) goes to Spark as written."""
    if tree.find(KeyedGroup) is not None:
        return True
    return any((f.name or "").lower() in STATE_TABLE_FUNCTIONS for f in tree.find_all(exp.Anonymous, exp.Table))


def parse_statement(text: str) -> exp.Expression:
    """The tree of one statement in the keyed dialect (plain Spark SQL too)."""
    if not isinstance(text, str) or not text.strip():
        raise KeyedSQLSyntaxError("empty SQL statement")
    try:
        tokens = KeyedSpark().tokenize(text)
    except TokenError as e:
        _refuse_unterminated(text, lambda toks, words: True)
        raise KeyedSQLSyntaxError(f"cannot tokenize SQL: {e}") from None
    return _parse(text, tokens, _words(tokens))


_OPENERS = {"'": "string", '"': "string", "`": "quoted identifier", "/*": "comment"}


def _unterminated(text: str) -> tuple[int, str] | None:
    """(offset, what) of a string, quoted identifier or ``/*`` comment ``text`` opens and never
    closes (Spark's rules: a backslash escapes in strings, a doubled quote stands for itself)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):  # to the end of the line; a backslash before it continues it
            j = i + 2
            while j < n and text[j] != "\n":
                j += 2 if text.startswith("\\\n", j) else 1
            i = j + 1
        elif text.startswith("/*", i):  # Spark's bracketed comments nest
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                return i, "comment"
            i = j
        elif c in "'\"`":
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`":
                    j += 2
                elif text[j] == c:
                    if text.startswith(c * 2, j):
                        j += 2
                        continue
                    break
                else:
                    j += 1
            if j >= n:
                return i, _OPENERS[c]
            i = j + 1
        else:
            i += 1
    return None


def _refuse_unterminated(text: str, keyed: Callable[[list[Token], list[str]], bool]) -> None:
    """A statement that does not tokenize because a string, quoted identifier or comment is never
    closed: when what comes before it is ``keyed`` (so Spark, given the text, would complain about
    GROUP BY KEY instead), say where it opens."""
    found = _unterminated(text)
    if found is None:
        return
    offset, what = found
    head = _tokens(text[:offset])
    if head is None or not keyed(head, _words(head)):
        return
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    raise KeyedSQLSyntaxError(f"unterminated {what}: it opens here and is never closed", line, col, text)


def _parse(text: str, tokens: list[Token], words: list[str]) -> exp.Expression:
    """``text``'s one statement parsed from its ``tokens`` (``words``: their upper-cased text)."""
    _refuse_plain_explain(text, tokens, words)
    try:
        # a comment after the last ';' is a tree of its own (sqlglot's Semicolon): not a statement
        trees = [
            t for t in KeyedSpark().parser().parse(tokens, text) if t is not None and not isinstance(t, exp.Semicolon)
        ]
    except ParseError as e:
        plain = _plain_spark(text, words)
        if plain is not None:
            return plain
        err = e.errors[0] if e.errors else {}
        message = _readable(err.get("description") or str(e))
        line, col = err.get("line"), err.get("col")
        token = err.get("highlight") or ""
        if col is not None and token and "\n" not in token:  # (sqlglot's column is the token's last character)
            col = max(1, col - len(token) + 1)
        raise KeyedSQLSyntaxError(message, line, col, text) from None
    if not trees:
        raise KeyedSQLSyntaxError("empty SQL statement")
    if len(trees) != 1:
        second = _second_statement(tokens)
        raise KeyedSQLSyntaxError(
            f"expected one SQL statement, got {len(trees)}: ks.sql runs one statement at a time"
            + (" (the second starts here)" if second is not None else ""),
            *((second.line, second.col - len(second.text) + 1) if second is not None else (None, None)),
            text,
        )
    return trees[0]


def _second_statement(tokens: list[Token]) -> Token | None:
    """The first token after a statement-ending ``;`` (None if there is none)."""
    depth = 0
    for t, nxt in zip(tokens, tokens[1:]):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(t.token_type, 0)
        if depth == 0 and t.token_type == TokenType.SEMICOLON and nxt.token_type != TokenType.SEMICOLON:
            return nxt
    return None


def _readable(message: str) -> str:
    """sqlglot's message for a clause left empty (``Required keyword: 'expressions' missing for
    <class 'sqlglot.expressions.query.Order'>``) in the words of the SQL."""
    twice = _TWICE.match(message)
    if twice is not None:
        clause = twice.group(1).upper()
        if clause == "WITH":  # (a WITH STATE the plain GROUP BY / HAVING before it did not take)
            return (
                "WITH STATE after a plain GROUP BY or HAVING: a keyed query's keys are written "
                "GROUP BY KEY <keys> WITH STATE fn(...)"
            )
        return f"{clause} given twice" + _TWICE_HINTS.get(clause, "")
    m = _MISSING.match(message)
    if m is None:
        return message
    clause = _CLAUSES.get(m.group(2), m.group(2).upper())
    return f"Expected an expression after {clause}" if m.group(1) in ("this", "expression", "expressions") else message


_TWICE = re.compile(r"Found multiple '([\w ]+)' clauses")
_TWICE_HINTS = {
    "ORDER BY": (
        ": after WITH STATE fn(...) the first ORDER BY is the order of rows within a key and a second one "
        "orders the output; there is no third"
    ),
}
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_CLAUSES = {
    "Order": "ORDER BY",
    "Group": "GROUP BY",
    "Where": "WHERE",
    "Having": "HAVING",
    "Limit": "LIMIT",
    "Div": "'/' (a path is written as a string: keyed_state('/tmp/ck'))",
}


def _plain_spark(text: str, words: list[str]) -> exp.Expression | None:
    """The tree of a statement the keyed dialect refused but Spark's grammar takes, with no
    ``WITH STATE`` or ``EXPLAIN KEYED`` in it: a column named ``key`` after ``GROUP BY`` in an
    expression the dialect read as a keyed clause (``GROUP BY key % 2``, ``GROUP BY key QUALIFY
    ...``). Plain Spark SQL, passed to Spark as written; None for anything else. (Spark's own
    dialect tokenizes and parses it again: only after the keyed dialect refused it.)"""
    if _has_keyed_marks(words):
        return None
    try:
        trees = [t for t in sqlglot.parse(text, read="spark") if t is not None]
    except (ParseError, TokenError):
        return None
    return trees[0] if len(trees) == 1 else None


def _refuse_plain_explain(text: str, tokens: list[Token], words: list[str]) -> None:
    """Spark's EXPLAIN cannot parse the keyed clause: say what shows a keyed query's plan."""
    if len(tokens) < 2 or words[0] != "EXPLAIN" or words[1] == "KEYED" or not _is_keyed(words):
        return
    rest = 2 if words[1] in _EXPLAIN_MODES and len(tokens) > 2 else 1
    try:  # the query after EXPLAIN [mode], from the same tokens
        inner = KeyedSpark().parser().parse(tokens[rest:], text)[0]
    except ParseError:
        return  # not a keyed query after all: Spark's EXPLAIN says what it thinks of it
    if inner is not None and has_keyed_parts(inner):
        first = tokens[0]
        raise KeyedSQLSyntaxError(
            "EXPLAIN of a keyed query: use EXPLAIN KEYED <query> for its keyed plan, "
            "or ks.sql(<query>).explain() for Spark's physical plan",
            first.line,
            first.col - len(first.text) + 1,
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

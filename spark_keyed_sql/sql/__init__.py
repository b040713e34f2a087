"""The keyed SQL dialect, the rewriter and EXPLAIN KEYED."""

from .dialect import KeyedSpark
from .errors import KeyedQueryError, KeyedSQLSyntaxError
from .expressions import ExplainKeyed, KeyedGroup, KeyedOption
from .parse import mentions_keyed_syntax, parse_statement, read_statement, render
from .rewriter import plan_statement
from .statement import KeyedStatement, KeyedStep, RunMode, bind

__all__ = [
    "ExplainKeyed",
    "KeyedGroup",
    "KeyedOption",
    "KeyedQueryError",
    "KeyedStatement",
    "KeyedStep",
    "KeyedSQLSyntaxError",
    "KeyedSpark",
    "mentions_keyed_syntax",
    "parse_statement",
    "read_statement",
    "RunMode",
    "bind",
    "plan_statement",
    "render",
]

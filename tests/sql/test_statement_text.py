"""Text-level helpers of the SQL layer: what they cut from a user's statement and what they keep."""

import pytest

from spark_keyed_sql.sql.parse import without_trailing_semicolons

CASES = [
    ("SELECT 1", "SELECT 1"),
    ("SELECT 1;", "SELECT 1"),
    ("SELECT 1 ;; \n", "SELECT 1 "),
    ("SELECT 1; -- done", "SELECT 1"),
    ("SELECT 1 /* ; */ ; /* after */", "SELECT 1 /* ; */ "),
    ("SELECT ';'", "SELECT ';'"),  # in a string: not the statement's end
    ("SELECT 1 -- ends with;", "SELECT 1 -- ends with;"),  # in a comment: not one either
    ("SELECT `a;b` FROM t;", "SELECT `a;b` FROM t"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_without_trailing_semicolons(text, expected):
    assert without_trailing_semicolons(text) == expected

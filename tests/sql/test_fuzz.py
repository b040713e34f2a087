"""Fuzzing the dialect and the rewriter with mutated SQL: every input either works or raises
the project's own error type (syntax errors with line and column) — never an internal
exception from sqlglot or Spark. CI runs a fixed seed; `make fuzz` runs many more examples."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from keyed_functions import Count

from spark_keyed_sql import KeyedSQLError
from spark_keyed_sql.sql import KeyedGroup, parse_statement, render
from spark_keyed_sql.sql.dialect import KeyedSpark
from spark_keyed_sql.sql.errors import KeyedSQLSyntaxError

FIXTURES = [
    line
    for line in (Path(__file__).parent / "fixtures" / "roundtrip.sql").read_text().splitlines()
    if line.strip() and not line.startswith("--")
]
VOCAB = [
    "WITH",
    "STATE",
    "GROUP",
    "BY",
    "KEY",
    "ORDER",
    "EVENT",
    "TIME",
    "WATERMARK",
    "TTL",
    "INITIAL",
    "FROM",
    "OPTIONS",
    "(",
    ")",
    ",",
    "=",
    "'x'",
    "1",
    "AS",
    "SELECT",
    "*",
    "HAVING",
    "LIMIT",
    "INTERVAL",
    "DESC",
    "f",
    "user_id",
    "ts",
    "value",
    ";",
    ".",
    "EXPLAIN",
    "KEYED",
    "keyed_state",
    "'",
    "`",
    "--",
    "\n",
]
EXAMPLES = int(os.environ.get("KS_FUZZ_EXAMPLES", "300"))


def tokens(sql):
    return [t.text if t.token_type.name != "STRING" else f"'{t.text}'" for t in KeyedSpark().tokenize(sql)]


@st.composite
def mutated(draw):
    toks = tokens(draw(st.sampled_from(FIXTURES)))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "swap", "duplicate", "truncate"]))
        i = draw(st.integers(0, max(len(toks) - 1, 0)))
        if op == "delete" and toks:
            del toks[i]
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(VOCAB)))
        elif op == "swap" and len(toks) > 1:
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == "duplicate" and toks:
            toks.insert(i, toks[i])
        elif op == "truncate":
            toks = toks[:i]
    return " ".join(toks)


@seed(20261122)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_parser_only_raises_its_own_syntax_error(sql):
    try:
        tree = parse_statement(sql)
    except KeyedSQLSyntaxError as exc:
        assert exc.description, exc
        if exc.line is not None:
            assert exc.line >= 1 and (exc.col or 0) >= 0, exc
        return
    # any other exception type fails the test, and hypothesis shrinks it to a minimal input;
    # a keyed clause that parses renders back to SQL that parses to the same clause
    groups = list(tree.find_all(KeyedGroup))
    if groups:
        assert list(parse_statement(render(tree)).find_all(KeyedGroup)) == groups


@pytest.fixture(scope="module")
def fuzz_ks(spark):
    from spark_keyed_sql import KeyedSQL

    ks = KeyedSQL(spark)
    ks.register("f", Count, returns="n bigint")
    spark.createDataFrame(
        [("u1", 1.0, 1), ("u2", 2.0, 2)], "user_id string, value double, ts long"
    ).createOrReplaceTempView("events")
    spark.createDataFrame([("u1", "1")], "user_id string, n string").createOrReplaceTempView("boot")
    return ks


@seed(20261122)
@settings(max_examples=max(EXAMPLES // 3, 20), deadline=None, suppress_health_check=list(HealthCheck))
@given(sql=mutated())
def test_rewriter_only_raises_its_own_errors(fuzz_ks, sql):
    """A plan names what it planned; a refusal is the project's error with a message (and a
    syntax error its position); anything else fails (and hypothesis shrinks it)."""
    try:
        plan = fuzz_ks.explain(sql)
    except KeyedSQLSyntaxError as exc:
        assert exc.description and (exc.line is None or exc.line >= 1), exc
        return
    except KeyedSQLError as exc:
        assert str(exc).strip(), type(exc)
        return
    assert plan.startswith("== Keyed plan ==")
    assert "WITH STATE f (Count)" in plan or "(no GROUP BY KEY / WITH STATE" in plan, plan

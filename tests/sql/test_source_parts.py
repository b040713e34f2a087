"""The parts of a keyed select that go to its source, read without Spark: the CTEs of every
WITH around it as one WITH (an inner definition of a name shadowing the outer one, each CTE
reading what it read in its own WITH), and its hint split into the source's join hints and the
result's partitioning hints."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from spark_keyed_sql.sql import KeyedGroup, parse_statement, render
from spark_keyed_sql.sql.ctes import ctes_visible_from
from spark_keyed_sql.sql.rewriter import _split_hint


def _keyed(sql: str) -> exp.Select:
    return next(s for s in parse_statement(sql).find_all(exp.Select) if isinstance(s.args.get("group"), KeyedGroup))


def _ctes(sql: str) -> dict[str, str]:
    """name -> the SQL of the CTE's body, as the source's one WITH has them."""
    w = ctes_visible_from(_keyed(sql))
    return {c.alias_or_name: render(c.this) for c in w.expressions}


def _reads(body: str) -> set[str]:
    return {t.name for t in sqlglot.parse_one(body, read="spark").find_all(exp.Table)}


KEYED = "SELECT u, s.n FROM {src} GROUP BY KEY u WITH STATE f(a) AS s"


def test_an_inner_definition_shadows_and_an_outer_cte_keeps_reading_the_outer_one():
    ctes = _ctes(
        "WITH x AS (SELECT 1 AS a), y AS (SELECT * FROM x) SELECT * FROM (WITH x AS (SELECT 2 AS a) "
        + KEYED.format(src="y JOIN x ON true")
        + ") r"
    )
    assert set(ctes) == {"__ks_cte0_x", "y", "x"}  # the keyed select's x is the inner one
    assert ctes["x"] == "SELECT 2 AS a" and ctes["__ks_cte0_x"] == "SELECT 1 AS a"
    assert _reads(ctes["y"]) == {"__ks_cte0_x"}  # y was defined over the outer x


def test_an_inner_cte_reading_the_name_it_shadows_reads_the_outer_one():
    ctes = _ctes(
        "WITH x AS (SELECT * FROM e) SELECT * FROM (WITH x AS (SELECT * FROM x WHERE a > 0) "
        + KEYED.format(src="x")
        + ") r"
    )
    assert _reads(ctes["x"]) == {"__ks_cte0_x"} and _reads(ctes["__ks_cte0_x"]) == {"e"}


def test_without_a_name_twice_the_ctes_are_as_written():
    ctes = _ctes("WITH a AS (SELECT * FROM e), b AS (SELECT * FROM a) " + KEYED.format(src="b"))
    assert ctes == {"a": "SELECT * FROM e", "b": "SELECT * FROM a"}


def test_join_hints_go_to_the_source_and_partitioning_hints_to_the_result():
    sel = _keyed(
        "SELECT /*+ SHUFFLE_MERGE(d), BROADCAST(t), COALESCE(1), REPARTITION(4) */ u, s.n FROM e JOIN d USING (u) "
        "JOIN t USING (u) GROUP BY KEY u WITH STATE f(a) AS s"
    )
    joins, result = _split_hint(sel)
    assert [h.name.upper() for h in joins.expressions] == ["SHUFFLE_MERGE", "BROADCAST"]
    assert [render(h).split("(")[0].upper() for h in result.expressions] == ["COALESCE", "REPARTITION"]


def test_with_recursive_stays_recursive_when_gathered():
    """(the gathered WITH dropped RECURSIVE, so a CTE reading itself no longer resolved)"""
    sql = (
        "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
        "SELECT * FROM r GROUP BY KEY n WITH STATE f(n)"
    )
    assert render(ctes_visible_from(_keyed(sql))).startswith("WITH RECURSIVE r AS (")

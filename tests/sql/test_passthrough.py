"""Ordinary Spark SQL through ks.sql gives exactly what spark.sql gives."""

import pytest

STATEMENTS = [
    "SELECT 1 AS key",
    "SELECT key, count(*) AS c FROM pt GROUP BY key",
    "SELECT key, sum(v) FROM pt GROUP BY key HAVING sum(v) > 3",
    "SELECT key FROM pt GROUP BY key, state",
    "SELECT key || '!' AS k, count(*) AS c FROM pt GROUP BY key || '!'",
    "SELECT key IN ('a', 'b') AS ab, count(*) AS c FROM pt GROUP BY key IN ('a', 'b')",
    "SELECT key LIKE 'a%' AS a, count(*) AS c FROM pt GROUP BY key LIKE 'a%'",
    "SELECT `with`, state FROM pt",
    "SELECT state, count(*) FROM pt GROUP BY state",
    "SELECT * FROM pt WHERE `with` = 'WITH STATE'",
    "SELECT 'GROUP BY KEY x WITH STATE f(y)' AS s",
    "SELECT 'WITH STATE' AS `with state`",
    "SELECT key /* WITH STATE f(x) */ FROM pt",
    "SELECT key -- GROUP BY KEY k WITH STATE f(x)\nFROM pt",
    "WITH x AS (SELECT key, v FROM pt) SELECT * FROM x",
    "WITH state AS (SELECT key FROM pt) SELECT * FROM state",
    "WITH a AS (SELECT 1 AS n), b AS (SELECT n + 1 AS n FROM a) SELECT * FROM b",
    "SELECT key, v, row_number() OVER (PARTITION BY key ORDER BY v) AS rn FROM pt",
    "SELECT key, sum(v) OVER (PARTITION BY key ORDER BY v ROWS UNBOUNDED PRECEDING) AS s FROM pt",
    "SELECT key, lag(v) OVER (PARTITION BY key ORDER BY v) FROM pt",
    "SELECT key, rank() OVER (ORDER BY v DESC) FROM pt",
    "SELECT key, v FROM pt ORDER BY v DESC LIMIT 3",
    "SELECT DISTINCT key FROM pt",
    "SELECT key FROM pt UNION ALL SELECT key FROM pt",
    "SELECT key FROM pt INTERSECT SELECT key FROM pt",
    "SELECT key FROM pt EXCEPT SELECT 'a'",
    "SELECT a.key, b.v FROM pt a JOIN pt b ON a.key = b.key",
    "SELECT a.key FROM pt a LEFT JOIN pt b ON a.v = b.v + 100",
    "SELECT * FROM pt a CROSS JOIN (SELECT 1 AS one) b",
    "SELECT key, CASE WHEN v > 2 THEN 'hi' ELSE 'lo' END AS band FROM pt",
    "SELECT key, coalesce(state, 'none') FROM pt",
    "SELECT key, explode(array(1, 2)) AS e FROM pt",
    "SELECT key, e FROM pt LATERAL VIEW explode(array(1, 2)) t AS e",
    "SELECT key, collect_list(v) FROM pt GROUP BY key",
    "SELECT key, max(v), min(v), avg(v) FROM pt GROUP BY key",
    "SELECT key, count(DISTINCT v) FROM pt GROUP BY key",
    "SELECT key, sum(v) FROM pt GROUP BY key WITH ROLLUP",
    "SELECT key, state, sum(v) FROM pt GROUP BY CUBE(key, state)",
    "SELECT key, sum(v) FROM pt GROUP BY GROUPING SETS ((key), ())",
    "SELECT * FROM (SELECT key, v FROM pt) sub WHERE v > 1",
    "SELECT key FROM pt WHERE v IN (SELECT v FROM pt WHERE key = 'a')",
    "SELECT key FROM pt p WHERE EXISTS (SELECT 1 FROM pt q WHERE q.key = p.key AND q.v > 2)",
    "SELECT upper(key), lower(state), length(`with`) FROM pt",
    "SELECT key, v * 2 + 1 AS w FROM pt",
    "SELECT cast(v AS string) AS s FROM pt",
    "SELECT key, struct(v, state) AS st FROM pt",
    "SELECT key, map('k', v) AS m FROM pt",
    "SELECT named_struct('key', key, 'state', state) AS ns FROM pt",
    "SELECT key, v FROM pt WHERE key LIKE 'a%'",
    "SELECT key, v FROM pt WHERE v BETWEEN 1 AND 3",
    "SELECT key, if(v > 1, 'x', 'y') FROM pt",
    "SELECT key, date_add(DATE'2026-01-01', CAST(v AS INT)) FROM pt",
    "SELECT key, v FROM pt TABLESAMPLE (100 PERCENT)",
    "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS t(key, state)",
    "SELECT key, first(v) FROM pt GROUP BY key",
    "SELECT key, percentile_approx(v, 0.5) FROM pt GROUP BY key",
    "SELECT key FROM pt CLUSTER BY key",
    "SHOW TABLES",
    "DESCRIBE pt",
]


@pytest.fixture(scope="module")
def pt(spark):
    spark.createDataFrame(
        [("a", 1, "on", "x"), ("a", 2, "off", "WITH STATE"), ("b", 3, None, "y"), ("c", 4, "on", "z")],
        "key string, v int, state string, `with` string",
    ).createOrReplaceTempView("pt")


@pytest.mark.parametrize("sql", STATEMENTS)
def test_not_taken_for_keyed_syntax(sql):
    """Plain Spark SQL plans no keyed step: the token prefilter lets it by, or the parser finds
    no GROUP BY KEY / WITH STATE in it, even where 'key', 'state' or 'WITH STATE' appear as
    names, strings or comments."""
    from spark_keyed_sql.sql import ExplainKeyed, KeyedGroup, mentions_keyed_syntax, parse_statement

    if mentions_keyed_syntax(sql):
        tree = parse_statement(sql)
        assert not isinstance(tree, ExplainKeyed) and tree.find(KeyedGroup) is None


@pytest.mark.parametrize("sql", STATEMENTS)
def test_same_result_as_spark(spark, ks, pt, sql):
    expected = spark.sql(sql)
    got = ks.sql(sql)
    assert got.columns == expected.columns
    assert sorted(map(repr, got.collect())) == sorted(map(repr, expected.collect()))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT , count(*) FROM pt GROUP BY key",
        "SELECT key FROM pt GROUP BY key,",
        "EXPLAIN SELECT key FROM pt GROUP BY key",
    ],
)
def test_spark_sees_the_text_as_written(spark, ks, pt, sql):
    """Text that only looks keyed (GROUP BY of a column named key) reaches Spark unchanged: what
    Spark refuses stays refused (the parser's lenient re-rendering never repairs it), and what
    it runs gives Spark's result."""
    import re

    def rows(df):  # EXPLAIN's text numbers plans per query
        return sorted(re.sub(r"plan_id=\d+", "plan_id=N", repr(r)) for r in df.collect())

    try:
        expected = rows(spark.sql(sql))
    except Exception as exc:  # noqa: BLE001 - Spark's own verdict is the oracle
        with pytest.raises(Exception) as info:
            ks.sql(sql).collect()
        assert type(exc).__name__ in (type(info.value).__name__, *[c.__name__ for c in type(info.value).__mro__])
        return
    assert rows(ks.sql(sql)) == expected

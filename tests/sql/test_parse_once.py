"""A statement given to ks.sql / ks.explain is tokenized once and parsed at most once: the parsed
tree is handed on (table-function calls expanded, the rewriter, EXPLAIN KEYED's text), and plain
Spark SQL goes to spark.sql as written, tokenized but not parsed."""

from collections import Counter

import pytest
import sqlglot.parser
import sqlglot.tokens
from keyed_functions import Count


@pytest.fixture(scope="module")
def once_ks(spark, ks_auto):
    spark.createDataFrame(
        [("a", 1.0, 1), ("b", 2.0, 2)], "user_id string, value double, ts bigint"
    ).createOrReplaceTempView("once_events")
    ks_auto.register("once_cnt", Count, returns="n bigint")
    return ks_auto


@pytest.fixture
def reads(monkeypatch):
    """How often each text was tokenized and parsed by sqlglot: Counter of ("tokenize" |
    "parse", text). (A table-function call's argument strings are texts of their own.)"""
    seen: Counter = Counter()
    tokenize, parse = sqlglot.tokens.Tokenizer.tokenize, sqlglot.parser.Parser.parse

    def counted_tokenize(self, sql, *args, **kwargs):
        seen["tokenize", sql] += 1
        return tokenize(self, sql, *args, **kwargs)

    def counted_parse(self, raw_tokens, sql="", *args, **kwargs):
        seen["parse", sql] += 1
        return parse(self, raw_tokens, sql, *args, **kwargs)

    monkeypatch.setattr(sqlglot.tokens.Tokenizer, "tokenize", counted_tokenize)
    monkeypatch.setattr(sqlglot.parser.Parser, "parse", counted_parse)
    return seen


KEYED = [
    "SELECT user_id, c.n FROM once_events GROUP BY KEY user_id WITH STATE once_cnt(value) AS c ORDER BY ts",
    "SELECT * FROM once_cnt(TABLE(once_events), key => 'user_id', order_by => 'ts')",
    "EXPLAIN KEYED SELECT user_id, c.n FROM once_events GROUP BY KEY user_id WITH STATE once_cnt(value) AS c",
    "EXPLAIN KEYED SELECT user_id FROM once_events",  # the plan text shows it from the tree
    "SELECT key FROM (SELECT user_id AS key FROM once_events) GROUP BY key",  # looks keyed, is not
]


@pytest.mark.parametrize("query", KEYED)
def test_a_keyed_statement_is_tokenized_and_parsed_once(once_ks, reads, query):
    once_ks.explain(query)
    assert (reads["tokenize", query], reads["parse", query]) == (1, 1)


def test_ks_sql_hands_the_tree_on_to_the_plan_text(once_ks, reads):
    query = KEYED[3]
    (row,) = once_ks.sql(query).collect()
    assert "SELECT user_id FROM once_events" in row.plan
    assert (reads["tokenize", query], reads["parse", query]) == (1, 1)


def test_plain_spark_sql_goes_to_spark_as_written_unparsed(once_ks, reads, monkeypatch):
    query = "SELECT user_id, sum(value) AS s FROM once_events /* GROUP BY KEY x */ GROUP BY user_id"
    given = []
    sql = once_ks.spark.sql
    monkeypatch.setattr(once_ks.spark, "sql", lambda text, *a, **kw: given.append(text) or sql(text, *a, **kw))
    assert sorted(once_ks.sql(query).collect()) == [("a", 1.0), ("b", 2.0)]
    assert given == [query]
    assert (reads["tokenize", query], reads["parse", query]) == (1, 0)
    assert not [k for k in reads if k[0] == "parse"]

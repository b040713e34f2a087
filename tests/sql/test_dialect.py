"""Parser fixtures: round trips, where each clause lands in the tree, and syntax errors with
line and column."""

from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from spark_keyed_sql.sql import ExplainKeyed, KeyedGroup, KeyedSpark, KeyedSQLSyntaxError, parse_statement, render

FIXTURES = Path(__file__).parent / "fixtures"
ROUNDTRIP = [
    line for line in (FIXTURES / "roundtrip.sql").read_text().splitlines() if line.strip() and not line.startswith("--")
]
ERRORS = [
    [part.strip() for part in line.split("|||")]
    for line in (FIXTURES / "errors.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


# each part of the clause, how a fixture spells it, and the KeyedGroup argument it must land in
CLAUSE_PARTS = {
    "ORDER BY": "order",
    "EVENT TIME": "event_time",
    " TTL ": "ttl",
    "INITIAL STATE FROM": "initial_state",
    "OPTIONS (": "options",
    ") AS ": "alias",
}


@pytest.mark.parametrize("spelling, arg", list(CLAUSE_PARTS.items()))
def test_the_round_trip_fixtures_cover_each_part_and_it_lands_in_its_argument(spelling, arg):
    """Every part of WITH STATE appears in some fixture (so the round trips exercise it), and
    parsing such a fixture puts it in its own argument of the KeyedGroup."""
    having = [sql for sql in ROUNDTRIP if "WITH STATE" in sql and spelling in sql.split("WITH STATE", 1)[1]]
    assert having, f"no round-trip fixture uses {spelling.strip()} after WITH STATE"
    landed = [sql for sql in having if any(g.args.get(arg) for g in parse_statement(sql).find_all(KeyedGroup))]
    assert landed, f"{spelling.strip()} never lands in KeyedGroup.{arg}: {having[:3]}"


def test_the_error_fixtures_name_distinct_problems():
    """Each syntax-error fixture checks its own message (copies would test one thing twice)."""
    messages = [m for _, m, _ in ERRORS]
    assert messages and len(set(zip(messages, [s for s, _, _ in ERRORS]))) == len(ERRORS)


@pytest.mark.parametrize("sql", ROUNDTRIP)
def test_round_trip(sql):
    tree = parse_statement(sql)
    assert not isinstance(tree, exp.Command)
    assert render(tree) == sql


@pytest.mark.parametrize(
    "written, rendered",
    [
        ("SELECT * FROM STREAM(events) GROUP BY KEY u WITH STATE f(v)", "STREAM events"),
        ("SELECT * FROM STREAM (db.events) e GROUP BY KEY u WITH STATE f(v)", "STREAM db.events AS e"),
        ("SELECT * FROM STREAM(events) AS e GROUP BY KEY u WITH STATE f(v)", "STREAM events AS e"),
    ],
)
def test_a_stream_read_in_parentheses_renders_as_the_plain_form(written, rendered):
    """Spark 4.1+'s ``FROM STREAM(t)``: the name read as a stream (not a subquery), rendered
    in the one form every Spark with the keyword reads."""
    tree = parse_statement(written)
    (stream,) = list(tree.find_all(exp.Stream))
    assert isinstance(stream.this, exp.Table) and f"FROM {rendered} GROUP BY KEY" in render(tree)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM stream.events GROUP BY KEY user_id WITH STATE f(value)",
        "SELECT * FROM cat.stream.events",
        "SELECT stream(value) AS s, stream FROM events",
        "SELECT * FROM stream",
        "WITH stream AS (SELECT 1 AS a) SELECT * FROM stream",
    ],
)
def test_stream_as_a_name_stays_a_name(sql):
    """With STREAM a keyword, a database, function, column or CTE named stream is still one."""
    tree = parse_statement(sql)
    assert not list(tree.find_all(exp.Stream)) and render(tree) == sql


@pytest.mark.parametrize("sql, message, position", ERRORS)
def test_syntax_errors(sql, message, position):
    sql = sql.replace("\\n", "\n")
    line, col = (int(x) for x in position.split(":"))
    with pytest.raises(KeyedSQLSyntaxError) as info:
        parse_statement(sql)
    assert message in info.value.description
    assert (info.value.line, info.value.col) == (line, col)
    assert f"line {line}, column {col}" in str(info.value)


def group_of(sql) -> KeyedGroup:
    tree = parse_statement(sql)
    g = tree.find(KeyedGroup)
    assert g is not None
    return g


def test_tree_full_clause():
    g = group_of(
        "SELECT * FROM events GROUP BY KEY lower(user) AS u, region WITH STATE f(value * 2 AS v, ts) AS s "
        "ORDER BY ts DESC EVENT TIME ts WATERMARK '10 minutes' TTL INTERVAL 7 DAYS "
        "INITIAL STATE FROM boot OPTIONS (engine = 'tws', checkpoint = '/cp') HAVING n > 1 ORDER BY u LIMIT 3"
    )
    assert [k.alias_or_name for k in g.keys] == ["u", "region"]
    assert isinstance(g.keys[0], exp.Alias) and isinstance(g.keys[0].this, exp.Lower)
    assert g.function_name == "f" and g.alias_name == "s"
    assert [a.alias_or_name for a in g.function.expressions] == ["v", "ts"]
    assert g.args["order"][0].args["desc"] is True
    assert g.args["event_time"].name == "ts" and g.args["watermark"].this == "10 minutes"
    assert isinstance(g.args["ttl"], exp.Interval)
    assert g.args["initial_state"].name == "boot"
    assert {k: v.this for k, v in g.options.items()} == {"engine": "tws", "checkpoint": "/cp"}
    select = g.parent
    assert select.args["having"] is not None and select.args["order"] is not None and select.args["limit"] is not None


def test_first_order_by_is_within_key_second_is_output():
    g = group_of("SELECT * FROM e GROUP BY KEY u WITH STATE f(v) ORDER BY ts ORDER BY u")
    assert g.args["order"][0].this.name == "ts"
    assert g.parent.args["order"].expressions[0].this.name == "u"


def test_order_after_having_orders_output():
    g = group_of("SELECT * FROM e GROUP BY KEY u WITH STATE f(v) HAVING x > 1 ORDER BY u")
    assert g.args.get("order") is None
    assert g.parent.args["order"].expressions[0].this.name == "u"


def test_unkeyed_form_and_star():
    g = group_of("SELECT * FROM e WITH STATE f(*)")
    assert g.keys == [] and not g.args.get("keyed")
    assert isinstance(g.function.expressions[0], exp.Star)


def test_column_named_key_is_ordinary_group_by():
    for sql in (
        "SELECT key FROM t GROUP BY key",
        "SELECT key FROM t GROUP BY key, x",
        "SELECT key FROM t GROUP BY key WITH ROLLUP",
        # an expression starting with a column named key (a Kafka source's): Spark's grammar
        "SELECT key % 2 FROM t GROUP BY key % 2",
        "SELECT key DIV 2 FROM t GROUP BY key DIV 2",
        "SELECT key IN (1, 2) FROM t GROUP BY key IN (1, 2)",
        "SELECT 1 FROM t GROUP BY key::int",
        "SELECT 1 FROM t GROUP BY key['a']",
        "SELECT 1 FROM t GROUP BY key LIKE 'a%'",
        "SELECT 1 FROM t GROUP BY key AND x",
        "SELECT key FROM t GROUP BY key QUALIFY count(*) > 1",
        "SELECT key FROM t GROUP BY key LIMIT 3 OFFSET 2",
    ):
        tree = parse_statement(sql)
        assert tree.find(KeyedGroup) is None, sql
        assert isinstance(tree.args["group"], exp.Group), sql


def test_group_by_key_without_with_state_still_says_what_is_missing():
    """A keyed clause that lost its WITH STATE is not taken for plain SQL (Spark's grammar does
    not take it either): the keyed error, with where."""
    with pytest.raises(KeyedSQLSyntaxError, match=r"line 1, column \d+: Expected WITH STATE"):
        parse_statement("SELECT 1 FROM t GROUP BY KEY user_id ORDER BY 1")


def test_keyed_in_cte_and_subquery():
    assert parse_statement("WITH a AS (SELECT * FROM e GROUP BY KEY u WITH STATE f(v)) SELECT * FROM a").find(
        KeyedGroup
    )
    assert parse_statement("SELECT * FROM (SELECT * FROM e GROUP BY KEY u WITH STATE f(v)) AS x").find(KeyedGroup)


def test_explain_keyed():
    tree = parse_statement("EXPLAIN KEYED SELECT * FROM e GROUP BY KEY u WITH STATE f(v)")
    assert isinstance(tree, ExplainKeyed) and tree.this.find(KeyedGroup)


def test_plain_spark_sql_renders_as_spark_does():
    for sql in (
        "SELECT a, SUM(b) OVER (PARTITION BY c ORDER BY d) FROM t",
        "SELECT * FROM t LATERAL VIEW EXPLODE(xs) AS x",
    ):
        assert render(parse_statement(sql)) == sqlglot.transpile(sql, read="spark", write="spark")[0]


def test_dialect_is_a_spark_subclass():
    from sqlglot.dialects.spark import Spark

    assert issubclass(KeyedSpark, Spark)
    assert KeyedGroup in KeyedSpark.Generator.TRANSFORMS


def _users_keyed_statements() -> list[tuple[str, str]]:
    """(where, statement) of every WITH STATE statement users read or run: sql_examples/ and
    the sql blocks of README and docs (grammar synopses with <placeholders> left out)."""
    import re

    from spark_keyed_sql.cli import split_statements

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted((root / "sql_examples").rglob("*.sql")):
        found += [(str(path.relative_to(root)), s) for s in split_statements(path.read_text())]
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for block in re.findall(r"```sql\n(.*?)```", path.read_text(), re.S):
            found += [(str(path.relative_to(root)), s) for s in split_statements(block)]
    return [(w, s) for w, s in found if "WITH STATE" in s.upper() and "<" not in s.split("WITH STATE")[0][-200:]]


USERS = _users_keyed_statements()


def test_users_statements_are_collected():
    # sql_examples and the docs both hold keyed statements: an empty list would check nothing
    assert {w.split("/")[0] for w, _ in USERS} >= {"sql_examples", "docs"}


@pytest.mark.parametrize("where, sql", USERS, ids=[f"{w}:{i}" for i, (w, _) in enumerate(USERS)])
def test_users_statements_parse_and_render_stably(where, sql):
    """Beyond the fixtures: each keyed statement of the examples and docs parses with the
    dialect into a KeyedGroup, and its rendering parses back to the same rendering."""
    try:
        tree = parse_statement(sql)
    except KeyedSQLSyntaxError as exc:
        if "<" in sql:  # a synopsis with placeholders, not a statement
            pytest.skip(f"synopsis: {exc}")
        raise
    assert tree.find(KeyedGroup) is not None, where
    text = render(tree)
    assert render(parse_statement(text)) == text, where


@pytest.mark.parametrize(
    "interval, minutes",
    [
        ("'1 hour 30 minutes'", 90),
        ("INTERVAL 1 HOUR 30 MINUTES", 90),
        ("INTERVAL 90 MINUTES", 90),
        ("INTERVAL '2' DAY", 2880),
    ],
)
def test_an_interval_of_several_units_is_their_sum(interval, minutes):
    """sqlglot reads ``INTERVAL 1 HOUR 30 MINUTES`` as a sum of two intervals; the watermark is
    that sum (it was refused as 'cannot read interval INTERVAL '1' HOUR + ...')."""
    from spark_keyed_sql.sql.rewriter import _interval_ms

    group = parse_statement(f"SELECT * FROM e GROUP BY KEY u WITH STATE f(v) EVENT TIME ts WATERMARK {interval}")
    watermark = group.find(KeyedGroup).args["watermark"]
    assert _interval_ms(watermark, "WATERMARK") == minutes * 60_000


def test_an_unterminated_string_is_ours_to_report_only_in_a_keyed_statement():
    """Plain Spark SQL that does not tokenize goes to Spark as written (its own parse error); one
    whose keyed words come before the unclosed quote gets the position of the quote."""
    from spark_keyed_sql.sql.parse import read_statement

    assert read_statement("SELECT 'abc FROM t GROUP BY KEY u WITH STATE f(v)", lambda name: False) is None
    assert read_statement("SELECT u FROM t WHERE s = 'abc", lambda name: False) is None
    with pytest.raises(KeyedSQLSyntaxError) as info:
        read_statement("SELECT *\nFROM f(TABLE(t), key => 'u)", lambda name: name == "f")
    assert (info.value.line, info.value.col) == (2, 25) and "unterminated string" in info.value.description

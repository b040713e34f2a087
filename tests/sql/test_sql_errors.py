"""Each way a keyed query can be wrong gets its own message."""

import pytest

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.api.errors import KeyedSQLError, UnknownFunctionError
from spark_keyed_sql.sql.errors import KeyedQueryError, KeyedSQLSyntaxError


class Count(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return {"n": self.n}


@pytest.fixture(scope="module")
def setup(spark, ks_auto, tmp_path_factory):
    spark.createDataFrame(
        [("a", 1.0, 1), ("b", 2.0, 2)], "user_id string, value double, ts bigint"
    ).createOrReplaceTempView("err_events")
    ks_auto.register("cnt", Count, returns="n bigint")
    src = str(tmp_path_factory.mktemp("stream_src"))
    spark.createDataFrame([("a", 1.0, 1)], "user_id string, value double, ts bigint").write.mode("append").parquet(src)
    spark.readStream.schema("user_id string, value double, ts bigint").parquet(src).createOrReplaceTempView(
        "err_stream"
    )
    return ks_auto


CASES = [
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE nope(value)",
        UnknownFunctionError,
        "unknown function 'nope'",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(valu)",
        KeyedQueryError,
        "argument 1 of WITH STATE cnt refers to 'valu', which is not a column of the source "
        "(columns: user_id, value, ts)",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY userid WITH STATE cnt(value)",
        KeyedQueryError,
        "GROUP BY KEY refers to 'userid', which is not a column of the source",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) ORDER BY tss",
        KeyedQueryError,
        "ORDER BY of WITH STATE cnt refers to 'tss', which is not a column of the source",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (trigger = '1 second')",
        KeyedQueryError,
        "option(s) ['trigger'] of WITH STATE cnt only apply to a streaming source",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (colour = 'red')",
        KeyedQueryError,
        "unknown option(s) ['colour']",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (engin = 'bulk')",
        KeyedQueryError,
        "line 1, column 78: unknown option(s) ['engin'] in WITH STATE cnt (did you mean engine?); known: [",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) TTL '7 dayz'",
        KeyedQueryError,
        "line 1, column 73: TTL of WITH STATE cnt: unknown interval unit 'dayz' in '7 dayz'; units: milliseconds",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) EVENT TIME ts WATERMARK 'ten minutes'",
        KeyedQueryError,
        "WATERMARK of WITH STATE cnt: cannot read interval 'ten minutes'",
    ),
    (
        "SELECT * FROM cnt(TABLE(err_events), key => 'user_id', order_by => 'ts', key => 'value')",
        KeyedQueryError,
        "cnt: argument 'key' given twice",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (state_partitions = 0)",
        KeyedQueryError,
        "option state_partitions of WITH STATE cnt must be a whole number from 1 to 100,000, got 0",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) ORDER BY 1",
        KeyedQueryError,
        "line 1, column 78: ORDER BY of WITH STATE cnt: 1 is a constant, not a column position",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (state_partitions = -1)",
        KeyedQueryError,
        "option state_partitions of WITH STATE cnt must be a whole number from 1 to 100,000, got -1",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (state_partitions = 'four')",
        KeyedQueryError,
        "option state_partitions of WITH STATE cnt must be a whole number from 1 to 100,000, got 'four'",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (state_partitions = 2.5)",
        KeyedQueryError,
        "got 2.5",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (engine = 'turbo')",
        KeyedQueryError,
        "unknown engine 'turbo'",
    ),
    pytest.param(
        "SELECT user_id, n FROM err_stream GROUP BY KEY user_id WITH STATE cnt(value) ORDER BY ts ORDER BY n",
        KeyedQueryError,
        "ORDER BY after WITH STATE cnt over a streaming source needs an engine that runs per micro-batch",
        marks=pytest.mark.spark_feature("TRANSFORM_WITH_STATE"),
    ),
    (
        "SELECT user_id, n FROM err_stream GROUP BY KEY user_id WITH STATE cnt(value) LIMIT 3",
        KeyedQueryError,
        "LIMIT after WITH STATE cnt is batch-only; the source is streaming",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) WITH STATE cnt(ts)",
        KeyedSQLSyntaxError,
        "Only one WITH STATE per SELECT",
    ),
    (
        "SELECT s.zzz FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) AS s",
        KeyedQueryError,
        "line 1, column 10: 's.zzz': cnt has no output column 'zzz'",
    ),
    (
        "SELECT user_id, e.n, s.n FROM (SELECT *, 7 AS n FROM err_events) e "
        "GROUP BY KEY user_id WITH STATE cnt(value) AS s",
        KeyedQueryError,
        "line 1, column 19: 'e.n': the source column 'n' has the name of an output of cnt",
    ),
    (
        "SELECT nothing FROM err_events GROUP BY KEY user_id WITH STATE cnt(value)",
        KeyedQueryError,
        "line 1, column 8: column 'nothing' is neither a key (user_id), an output of cnt (n) nor a source column",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value, value)",
        KeyedQueryError,
        "two arguments named ['value']; name them with AS",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value",
        KeyedSQLSyntaxError,
        "line 1, column 62: Expected ')' to close the WITH STATE function's arguments",
    ),
    (
        "SELECT * FROM err_events\nGROUP BY KEY WITH STATE cnt(value)",
        KeyedSQLSyntaxError,
        "line 2, column 14: Expected a key expression after GROUP BY KEY",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) ORDER",
        KeyedSQLSyntaxError,
        "Expected ORDER BY <expr> [ASC|DESC], ... (the order of rows within a key) after WITH STATE cnt(...)",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) EVENT ts WATERMARK '1 minute'",
        KeyedSQLSyntaxError,
        "Expected EVENT TIME <column> WATERMARK <interval> after WITH STATE cnt(...)",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) INITIAL boot",
        KeyedSQLSyntaxError,
        "Expected INITIAL STATE FROM <table | (subquery)>",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS engine = 'bulk'",
        KeyedSQLSyntaxError,
        "Expected OPTIONS (name = value, ...)",
    ),
    (
        "SELECT * FROM err_events GROUP BY KEY user_id\nWITH STATE cnt(value) TTL '0 seconds'",
        KeyedQueryError,
        "line 2, column 27: TTL of WITH STATE cnt must be a positive interval, got '0 seconds'",
    ),
]


@pytest.mark.parametrize("sql, error, message", CASES)
def test_keyed_query_errors(setup, sql, error, message):
    with pytest.raises(error) as info:
        setup.sql(sql)
    assert message in str(info.value)
    assert isinstance(info.value, KeyedSQLError)


def test_checkpoint_given_twice(setup, tmp_path):
    with pytest.raises(KeyedSQLError, match="checkpoint given twice"):
        setup.run(
            "SELECT * FROM err_events GROUP BY KEY user_id WITH STATE cnt(value) "
            f"OPTIONS (checkpoint = '{tmp_path}/a')",
            checkpoint=str(tmp_path / "b"),
            output=str(tmp_path / "out"),
        )


@pytest.mark.parametrize(
    "source", ["err_events", pytest.param("err_stream", marks=pytest.mark.spark_feature("TRANSFORM_WITH_STATE"))]
)
def test_a_checkpoint_in_options_is_not_ignored_by_ks_sql(setup, tmp_path, source):
    """ks.sql keeps no checkpoint: one in OPTIONS would be silently unused (state not carried
    over), so it is refused with the ways to use it; EXPLAIN KEYED still shows the plan."""
    cp = tmp_path / "cp"
    sql = f"SELECT * FROM {source} GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (checkpoint = '{cp}')"
    with pytest.raises(
        KeyedQueryError,
        match=(
            r"OPTIONS \(checkpoint = \.\.\.\) of WITH STATE cnt: "
            r"ks\.sql evaluates the query once.*ks\.run.*ks\.start"
        ),
    ):
        setup.sql(sql)
    assert not cp.exists()
    assert "checkpoint" in setup.explain(sql)
    assert "checkpoint" in setup.sql("EXPLAIN KEYED " + sql).collect()[0][0]


def test_output_mode_is_checked(setup, tmp_path):
    """OPTIONS (output_mode = ...): a value Spark's keyed operator has no meaning for, or one the
    engine cannot honour (bulk appends each micro-batch's rows), is refused up front, naming it."""
    sql = "SELECT * FROM err_stream GROUP BY KEY user_id WITH STATE cnt(value) OPTIONS (output_mode = {mode}{engine})"
    run = {"checkpoint": str(tmp_path / "cp"), "output": str(tmp_path / "out")}
    with pytest.raises(KeyedQueryError, match=r"output_mode of WITH STATE cnt is 'complete'; use 'append'"):
        setup.run(sql.format(mode="'complete'", engine=""), **run)
    with pytest.raises(KeyedQueryError, match=r"engine 'bulk' appends .* needs OPTIONS \(engine = 'tws'\)"):
        setup.run(sql.format(mode="'update'", engine=", engine = 'bulk'"), **run)
    assert not (tmp_path / "out").exists()


def test_a_source_column_named_like_an_output_passes_through_under_another_name(setup, spark):
    """The fix the clash's error names: the source column renamed in a subquery passes through
    beside the output (the oracle: the source rows and a plain count per key)."""
    rows = [("a", 1.0, 1, 70), ("a", 2.0, 2, 80), ("b", 3.0, 3, 90)]
    spark.createDataFrame(rows, "user_id string, value double, ts bigint, n int").createOrReplaceTempView("err_clash")
    got = setup.sql(
        "SELECT user_id, e.source_n, s.n FROM (SELECT *, n AS source_n FROM err_clash) e "
        "GROUP BY KEY user_id WITH STATE cnt(value) AS s ORDER BY ts"
    ).collect()
    seen: dict = {}
    expected = []
    for user, _, _, n in rows:
        seen[user] = seen.get(user, 0) + 1
        expected.append((user, n, seen[user]))
    assert sorted(map(tuple, got)) == sorted(expected)

"""``ks.tester(query)``: a KeyedTester whose rows frames have the column types the registered
SQL gives the function, so a unit test of a processor sees what Spark hands it. The oracle is
PySpark's ``applyInPandas`` over the same SELECT; the same tester without a schema (types
inferred from Python values) must differ, or the test would not show anything."""

import datetime as dt

import pandas as pd
import pytest

from spark_keyed_sql import KeyedProcessor, KeyedSQLError, KeyedTester

SCHEMA = "id string, n int, small smallint, ts timestamp, x double, s string"
ROWS = [
    ("a", 1, 2, dt.datetime(2026, 1, 1, 0, 0, 1), 0.5, "p"),
    ("a", 3, None, dt.datetime(2026, 1, 1, 0, 0, 5), None, None),
]
ARGS = ["n", "small", "ts", "x", "s", "m"]  # m: `n + 1 AS m`, an int as Spark types it


class Dtypes(KeyedProcessor):
    returns = "id string, dtypes string"

    def process(self, key, rows):
        return [(key, ",".join(f"{c}:{rows[c].dtype}" for c in rows.columns))]


@pytest.fixture(scope="module")
def ks_tester(ks_auto, spark):
    spark.createDataFrame(ROWS, SCHEMA).createOrReplaceTempView("tester_src")
    ks_auto.register("frame_dtypes", Dtypes)
    return ks_auto


def _spark_dtypes(spark) -> str:
    """What applyInPandas hands for the same columns: the oracle."""

    def describe(pdf: pd.DataFrame) -> pd.DataFrame:
        cols = [c for c in pdf.columns if c != "id"]
        return pd.DataFrame({"d": [",".join(f"{c}:{pdf[c].dtype}" for c in cols)]})

    df = spark.sql("SELECT id, n, small, ts, x, s, n + 1 AS m FROM tester_src")
    return df.groupBy("id").applyInPandas(describe, "d string").collect()[0]["d"]


QUERY = "SELECT * FROM tester_src GROUP BY KEY id WITH STATE frame_dtypes(n, small, ts, x, s, n + 1 AS m)"


def _events():
    return [{"n": r[1], "small": r[2], "ts": r[3], "x": r[4], "s": r[5], "m": r[1] + 1} for r in ROWS]


def test_tester_from_sql_has_spark_frames(ks_tester, spark):
    oracle = _spark_dtypes(spark)
    tester = ks_tester.tester(QUERY)
    assert tester.run(_events(), key="a") == [{"id": "a", "dtypes": oracle}]
    # without the query's types, the same rows are typed as Python values infer: n, m bigint
    inferred = KeyedTester(Dtypes).run(_events(), key="a")[0]["dtypes"]
    assert inferred != oracle


def test_schema_as_structtype_and_dataframe(ks_tester, spark):
    oracle = _spark_dtypes(spark)
    df = spark.sql("SELECT n, small, ts, x, s, n + 1 AS m FROM tester_src")
    for schema in (df, df.schema, {f.name: f.dataType.simpleString() for f in df.schema.fields}):
        assert KeyedTester(Dtypes, schema=schema).run(_events(), key="a")[0]["dtypes"] == oracle


def test_tester_refuses_what_it_cannot_make(ks_tester):
    with pytest.raises(KeyedSQLError, match="no call of 'nope'.*frame_dtypes"):
        ks_tester.tester(QUERY, function="nope")
    with pytest.raises(KeyedSQLError, match="no keyed function call"):
        ks_tester.tester("SELECT 1")
    with pytest.raises(KeyedSQLError, match=r"schema=.*got int"):
        KeyedTester(Dtypes, schema=3)
    with pytest.raises(KeyedSQLError, match="n 'integr'"):
        KeyedTester(Dtypes, schema={"n": "integr"})


class Scaled(KeyedProcessor):
    """A class whose constructor takes arguments named like KeyedTester's own options."""

    returns = "id string, out string"

    def __init__(self, schema, ttl, **kw):
        super().__init__(**kw)
        self.label = f"{schema}/{ttl}"

    def process(self, key, rows):
        return [(key, f"{self.label}:{int(rows['n'].sum())}")]


def test_registration_arguments_named_like_tester_options_reach_the_class(ks_tester):
    """The registration's kwargs go to the class, the tester's options to the tester: a kwarg
    named schema= or ttl= is the class's (it was taken as the tester's option)."""
    ks_tester.register("scaled", Scaled, schema="v2", ttl=7)
    tester = ks_tester.tester("SELECT id, out FROM tester_src GROUP BY KEY id WITH STATE scaled(n)")
    # the oracle: the sum of n over the rows given, labelled as the registration asks
    assert tester.run([{"n": 2}, {"n": 5}], key="a") == [{"id": "a", "out": "v2/7:7"}]

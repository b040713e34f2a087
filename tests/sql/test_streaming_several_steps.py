"""Several keyed selects in one streaming statement: engine tws runs them as one Spark query,
bulk (one keyed step per micro-batch) refuses them naming what to do; each against a
plain-Python count."""

import pytest
from keyed_functions import Count

from spark_keyed_sql import KeyedSQL, KeyedSQLError

USERS = ["u1", "u2", "u1", "u3", "u1"]


def _sql(src: str, fn: str) -> str:
    return (
        f"SELECT 'keyed' AS scope, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {fn}(value)\n"
        f"UNION ALL\nSELECT 'all' AS scope, n FROM parquet.`{src}` WITH STATE {fn}(value)"
    )


def _write(spark, path):
    rows = [(u, float(i)) for i, u in enumerate(USERS)]
    spark.createDataFrame(rows, "user_id string, value double").write.parquet(path)


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_keyed_and_an_unkeyed_select_run_as_one_stream_on_tws(spark, tmp_path):
    ks = KeyedSQL(spark, engine="tws")
    ks.register("several_count", Count, returns="n bigint")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _write(spark, src)
    ks.run(_sql(src, "several_count"), checkpoint=str(tmp_path / "cp"), output=out)
    keyed = [("keyed", USERS[: i + 1].count(u)) for i, u in enumerate(USERS)]
    every = [("all", i + 1) for i in range(len(USERS))]
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == sorted(keyed + every)


def test_bulk_refuses_two_keyed_selects_in_one_stream_naming_tws_and_ks_sql(spark, tmp_path):
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("several_count_bulk", Count, returns="n bigint")
    src = str(tmp_path / "in")
    _write(spark, src)
    with pytest.raises(KeyedSQLError, match=r"runs one keyed step per streaming statement; this one has 2"):
        ks.run(_sql(src, "several_count_bulk"), checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))

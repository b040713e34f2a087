"""The CLI's progress line per batch (``spark-keyed-sql run``): the rows a batch took in and
gave out, and for a natively planned step the path the batch took."""

from __future__ import annotations

import datetime as dt

import pytest
from keyed_functions import Count

from spark_keyed_sql import cli


def test_the_progress_line_says_which_path_a_planned_batch_took(ks_auto, spark, tmp_path, capsys):
    ks_auto.register("cli_tally", Count, returns="n bigint")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    t0 = dt.datetime(2026, 5, 1)
    q = (
        f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE cli_tally() ORDER BY ts "
        "OPTIONS (native = {native})"
    )
    rows = [("a", t0), ("b", t0), ("a", t0 + dt.timedelta(1))]
    for i, native in enumerate(["true", "'auto'", "false"]):
        spark.createDataFrame(rows, "user_id string, ts timestamp").write.mode("append").parquet(src)
        capsys.readouterr()
        ks_auto.run(q.format(native=native), checkpoint=cp, output=out, progress=cli._progress)
        line = capsys.readouterr().err.strip().splitlines()[-1]
        state = "2 keys in state"
        assert line.startswith(f"batch {i}: 3 rows in, 3 out, 2 keys touched, {state}"), line
        # native = true and the first batch under 'auto' (cold stores, small) run natively; with
        # native = false nothing is planned and the line names no path
        want = {"true": ", native", "'auto'": ", native", "false": ""}[native]
        assert line == f"batch {i}: 3 rows in, 3 out, 2 keys touched, {state}{want}", line


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_tws_batch_whose_output_rows_spark_does_not_report_says_so(spark, tmp_path, capsys):
    """Spark's file sink reports -1 rows written: the line says '?' (it said 0 for 3 rows out)."""
    from spark_keyed_sql import KeyedSQL

    ks = KeyedSQL(spark, engine="tws")
    ks.register("cli_tally_tws", Count, returns="n bigint")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    spark.createDataFrame([("a", 1.0), ("b", 2.0), ("a", 3.0)], "user_id string, value double").write.parquet(src)
    capsys.readouterr()
    q = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE cli_tally_tws()"
    summary = ks.run(q, checkpoint=cp, output=out, progress=cli._progress)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("batch 0: 3 rows in, ? out, 2 keys touched"), line
    assert summary["output_rows"] == 3 == spark.read.parquet(out).count()

"""INITIAL STATE whose key column is of another type than the source's key: an int seed key
beside bigint events keys seeds those keys (it went under a key of its own on tws, two states
for one key, and was never met on bulk), one-shot and over ks.run on every engine; a string
seed key for a bigint key is refused naming both types. Against a plain-Python oracle."""

import pytest
from keyed_functions import RunningTotal

from spark_keyed_sql import KeyedSQLError

SEED = [(1, 5, 10.0), (3, 1, 1.0)]
EVENTS = [(1, 1.0), (2, 2.0), (1, 4.0)]


def _oracle():
    state = {k: [n, t] for k, n, t in SEED}
    out = []
    for k, v in EVENTS:  # (the events of a key in this order: seq below)
        s = state.setdefault(k, [0, 0.0])
        s[0] += 1
        s[1] += v
        out.append((k, s[0], s[1]))
    return sorted(out), sorted((k, n, t) for k, (n, t) in state.items())


def _views(spark, tmp_path, seed_type):
    spark.createDataFrame(SEED, f"k {seed_type}, n bigint, total double").createOrReplaceTempView("seed_kt")
    src = str(tmp_path / "events")
    rows = [(k, v, i) for i, (k, v) in enumerate(EVENTS)]
    spark.createDataFrame(rows, "k bigint, value double, seq int").write.parquet(src)
    return src


def test_an_int_seed_key_seeds_bigint_keys_one_shot_and_over_runs(spark, ks, tmp_path):
    ks.register("tally_kt", RunningTotal, returns="n bigint, total double")
    src = _views(spark, tmp_path, "int")
    sql = (
        f"SELECT k, n, total FROM parquet.`{src}` GROUP BY KEY k WITH STATE tally_kt(value) ORDER BY seq "
        "INITIAL STATE FROM seed_kt"
    )
    rows, state = _oracle()
    assert sorted(tuple(r) for r in ks.sql(sql).collect()) == rows
    cp, out = str(tmp_path / "cp"), str(tmp_path / "out")
    ks.run(sql, checkpoint=cp, output=out)
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == rows
    assert sorted((r.k, r.n, r.total) for r in ks.read_state(cp).collect()) == state


def test_apply_widens_an_int_seed_key_too(spark, ks, tmp_path):
    ks.register("tally_kt_apply", RunningTotal, returns="n bigint, total double")
    src = _views(spark, tmp_path, "int")
    out = ks.apply(
        spark.read.parquet(src),
        "tally_kt_apply",
        key="k",
        order_by="seq",
        args=["value"],
        initial_state=spark.table("seed_kt"),
    )
    assert sorted(tuple(r) for r in out.collect()) == _oracle()[0]


def test_a_string_seed_key_for_a_bigint_key_is_refused_naming_both(spark, ks, tmp_path):
    ks.register("tally_kt_s", RunningTotal, returns="n bigint, total double")
    src = _views(spark, tmp_path, "string")
    sql = f"SELECT k, n FROM parquet.`{src}` GROUP BY KEY k WITH STATE tally_kt_s(value) INITIAL STATE FROM seed_kt"
    with pytest.raises(KeyedSQLError, match=r"key column k is string and the source's key is bigint.*CAST"):
        ks.sql(sql).collect()
    with pytest.raises(KeyedSQLError, match=r"initial_state's key column k is string and the source's key is bigint"):
        ks.apply(spark.read.parquet(src), "tally_kt_s", key="k", initial_state=spark.table("seed_kt"))


def test_a_seed_spark_cannot_read_is_named_as_the_seed(spark, ks, tmp_path):
    """(It said "Spark cannot run the statement's source part", naming no seed.)"""
    ks.register("tally_kt_m", RunningTotal, returns="n bigint, total double")
    src = _views(spark, tmp_path, "int")
    sql = (
        f"SELECT k, n FROM parquet.`{src}` GROUP BY KEY k WITH STATE tally_kt_m(value)\nINITIAL STATE FROM no_such_seed"
    )
    with pytest.raises(
        KeyedSQLError, match=r"line 2, column \d+: INITIAL STATE FROM for tally_kt_m: Spark cannot read"
    ):
        ks.sql(sql)


def test_a_float_seed_key_for_a_double_key_is_refused(spark, ks, tmp_path):
    """A float widened to double is another value than the double written (0.1f != 0.1)."""
    ks.register("tally_kt_f", RunningTotal, returns="n bigint, total double")
    spark.createDataFrame([(0.1, 1, 1.0)], "k float, n bigint, total double").createOrReplaceTempView("seed_kt_f")
    spark.createDataFrame([(0.1, 2.0)], "k double, value double").createOrReplaceTempView("events_kt_f")
    sql = "SELECT k, n FROM events_kt_f GROUP BY KEY k WITH STATE tally_kt_f(value) INITIAL STATE FROM seed_kt_f"
    with pytest.raises(KeyedSQLError, match=r"key column k is float and the source's key is double"):
        ks.sql(sql).collect()


def test_a_struct_seed_key_read_back_from_parquet_seeds_its_keys(spark, ks, tmp_path):
    """Parquet reads every nested field as nullable; the source's struct key has a NOT NULL field:
    the same key all the same (nullability does not change how Spark stores it)."""
    ks.register("tally_kt_st", RunningTotal, returns="n bigint, total double")
    seed_dir = str(tmp_path / "seed")
    seed = [((1,), 5, 10.0), ((3,), 1, 1.0)]
    spark.createDataFrame(seed, "s struct<a: int>, n bigint, total double").write.parquet(seed_dir)
    spark.read.parquet(seed_dir).createOrReplaceTempView("seed_kt_st")
    rows = [((k,), v, i) for i, (k, v) in enumerate(EVENTS)]
    spark.createDataFrame(rows, "s struct<a: int NOT NULL>, value double, seq int").createOrReplaceTempView(
        "events_kt_st"
    )
    sql = (
        "SELECT s.a AS a, n, total FROM events_kt_st GROUP BY KEY s WITH STATE tally_kt_st(value) ORDER BY seq "
        "INITIAL STATE FROM seed_kt_st"
    )
    assert sorted(tuple(r) for r in ks.sql(sql).collect()) == _oracle()[0]

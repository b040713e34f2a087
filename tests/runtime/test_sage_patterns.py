"""The SAGE seed's patterns, unchanged but for imports, on 2k keys through every Spark path,
against plain-Python oracles written here."""

import pytest
from data import SCHEMA, by_key_in_ts_order, make_events
from sage_patterns import CounterFunction, FeatureComputer, FlexibleFunction, UserSessionFunction, WindowAggregator

from spark_keyed_sql.engines import engine_names

N_KEYS = 2_000  # (10k until 2026-12-01: CI's budget; every path and oracle the same)
PATHS = [*engine_names(), "table_function"]  # every engine, then the table-function form


@pytest.fixture(scope="module")
def events(spark, ks_auto):
    rows = make_events(N_KEYS, per_key=3, seed=11)
    df = spark.createDataFrame(
        [tuple(r[c] for c in ("user_id", "value", "amount", "merchant", "ts")) for r in rows], SCHEMA
    )
    df.createOrReplaceTempView("sage_events")
    ks_auto.register("sage_sessions", UserSessionFunction, returns="session_count bigint, total_value double")
    ks_auto.register("sage_counter", CounterFunction, returns="counts map<string, bigint>")
    # extra kwargs go to __init__: a window far larger than the test run keeps time.time() in one window
    ks_auto.register(
        "sage_window", WindowAggregator, returns="key string, window bigint, count bigint", window_size=10**12
    )
    ks_auto.register(
        "sage_features",
        FeatureComputer,
        returns="features map<string, struct<mean double, count bigint, min double, max double>>",
    )
    ks_auto.register("sage_flexible", FlexibleFunction, returns="key string, key_count bigint, global_count bigint")
    return rows, df


def run(spark, ks_auto, path, df, name):
    if path in engine_names():
        out = ks_auto.apply(df, name, key="user_id", order_by="ts", engine=path)
    else:
        out = spark.sql(f"SELECT * FROM {name}(TABLE(sage_events), key => 'user_id', order_by => 'ts')")
    return [r.asDict(recursive=True) for r in out.collect()]


def canon(rows):
    return sorted(repr(sorted(r.items())) for r in rows)


@pytest.mark.parametrize("path", PATHS)
def test_user_sessions(spark, ks_auto, events, path):
    rows, df = events
    expected = []
    for user, evs in by_key_in_ts_order(rows).items():
        count, total = 0, 0
        for e in evs:
            count += 1
            total += e["value"]
            expected.append({"user_id": user, "session_count": count, "total_value": total})
    got = run(spark, ks_auto, path, df, "sage_sessions")
    assert len(got) == len(rows)
    assert canon(got) == canon(expected)


@pytest.mark.parametrize("path", PATHS)
def test_counter(spark, ks_auto, events, path):
    rows, df = events
    expected = []
    for user, evs in by_key_in_ts_order(rows).items():
        for i, _ in enumerate(evs, 1):
            expected.append({"user_id": user, "counts": {user: i}})
    assert canon(run(spark, ks_auto, path, df, "sage_counter")) == canon(expected)


@pytest.mark.parametrize("path", PATHS)
def test_window(spark, ks_auto, events, path):
    import time

    rows, df = events
    window = int(time.time() // 10**12)
    expected = []
    for user, evs in by_key_in_ts_order(rows).items():
        for i, _ in enumerate(evs, 1):
            expected.append({"user_id": user, "key": user, "window": window, "count": i})
    assert canon(run(spark, ks_auto, path, df, "sage_window")) == canon(expected)


@pytest.mark.parametrize("path", PATHS)
def test_features(spark, ks_auto, events, path):
    rows, df = events
    expected = {}
    for user, evs in by_key_in_ts_order(rows).items():
        vals = []
        for e in evs:
            vals.append(e["value"])
            expected[(user, len(vals))] = (sum(vals) / len(vals), min(vals), max(vals))
    got = run(spark, ks_auto, path, df, "sage_features")
    assert len(got) == len(expected)
    for r in got:
        f = r["features"][r["user_id"]]
        mean, lo, hi = expected[(r["user_id"], f["count"])]
        assert f["mean"] == pytest.approx(mean)
        assert (f["min"], f["max"]) == (lo, hi)


@pytest.mark.parametrize("path", PATHS)
def test_flexible_keyed(spark, ks_auto, events, path):
    rows, df = events
    expected = []
    for user, evs in by_key_in_ts_order(rows).items():
        for i, _ in enumerate(evs, 1):
            # every attribute is per-key state, so the "global" count is per key too
            expected.append({"user_id": user, "key": user, "key_count": i, "global_count": i})
    assert canon(run(spark, ks_auto, path, df, "sage_flexible")) == canon(expected)


def test_flexible_unkeyed(spark, ks_auto, events):
    rows, df = events
    small = df.limit(50)
    got = [r.asDict() for r in ks_auto.apply(small, "sage_flexible", order_by="ts").collect()]
    assert sorted(r["global_count"] for r in got) == list(range(1, 51))
    assert all(r["key"] is None and r["key_count"] is None for r in got)

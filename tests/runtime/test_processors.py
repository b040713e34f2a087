"""KeyedProcessor classes (ValueState, ListState, MapState) on 2,000 keys against an oracle,
and KeyedTester giving the same rows as Spark."""

import pytest
from data import SCHEMA, by_key_in_ts_order, make_events
from processors import LatestTransaction, Spend

from spark_keyed_sql import KeyedTester
from spark_keyed_sql.engines import engine_names

KEYS = 2_000  # enough keys for many per Python call on bulk; tws and the table function pay per key
PATHS = [*engine_names(), "table_function"]  # every engine (named explicitly), then the table-function form


@pytest.fixture(scope="module")
def tx(spark, ks_auto):
    rows = make_events(KEYS, per_key=3, seed=5)
    df = spark.createDataFrame(
        [tuple(r[c] for c in ("user_id", "value", "amount", "merchant", "ts")) for r in rows], SCHEMA
    )
    df.createOrReplaceTempView("tx_events")
    ks_auto.register("spend", Spend)
    ks_auto.register("latest_tx", LatestTransaction)
    return rows, df


def run(spark, ks_auto, path, df, name):
    if path in engine_names():
        out = ks_auto.apply(df, name, key="user_id", engine=path)
    else:
        out = spark.sql(f"SELECT * FROM {name}(TABLE(tx_events), key => 'user_id')")
    return sorted((tuple(r) for r in out.collect()), key=repr)


def spend_oracle(rows):
    out = []
    for user, evs in by_key_in_ts_order(rows).items():
        total = sum(e["amount"] for e in evs)
        per = {}
        for e in evs:
            per[e["merchant"]] = per.get(e["merchant"], 0.0) + e["amount"]
        top = max(per.items(), key=lambda kv: (kv[1], kv[0]))
        out.append((user, total, min(3, len(evs)), top[0], top[1]))
    return out


@pytest.mark.parametrize("path", PATHS)
def test_spend(spark, ks_auto, tx, path):
    rows, df = tx
    got = run(spark, ks_auto, path, df, "spend")
    exp = {r[0]: r for r in spend_oracle(rows)}
    assert len(got) == len(exp) == KEYS
    for g in got:
        e = exp[g[0]]
        assert g[0] == e[0] and g[2:4] == e[2:4]
        assert g[1] == pytest.approx(e[1]) and g[4] == pytest.approx(e[4])


@pytest.mark.parametrize("path", PATHS)
def test_latest_transaction(spark, ks_auto, tx, path):
    rows, df = tx
    got = run(spark, ks_auto, path, df, "latest_tx")
    exp = sorted(
        ((u, evs[-1]["amount"], evs[-1]["merchant"], len(evs)) for u, evs in by_key_in_ts_order(rows).items()), key=repr
    )
    assert got == exp


def test_tester_matches_spark(spark, ks_auto, tx):
    rows, df = tx
    sample = {u: evs for u, evs in list(by_key_in_ts_order(rows).items())[:200]}
    keys = list(sample)
    small = df.where(df.user_id.isin(keys))
    for name, cls in (("spend", Spend), ("latest_tx", LatestTransaction)):
        tester = KeyedTester(cls)
        from_tester = []
        for u, evs in sample.items():
            from_tester += [(u, *d.values()) for d in tester.run(evs, key=u)]
        from_spark = [tuple(r) for r in ks_auto.apply(small, name, key="user_id").collect()]
        assert sorted(from_tester, key=repr) == sorted(from_spark, key=repr)

"""bulk's one-shot batch without a within-key ORDER BY sorts rows by a 64-bit hash of the key
(a radix sort in Spark) and regroups keys that share a hash in Python. Here the hash is narrowed
to three values, so every Arrow batch holds keys sharing one, interleaved; the results must be
what plain Python computes from the same rows."""

import random

import pytest
from pyspark.sql import functions as F

from spark_keyed_sql import KeyedProcessor, KeyedSQL, StatefulFunction
from spark_keyed_sql.engines.bulk import program
from spark_keyed_sql.runtime.keys import OrderSpec
from spark_keyed_sql.runtime.plan import KeyedPlan
from spark_keyed_sql.runtime.spec import FunctionSpec


class Totals(KeyedProcessor):
    returns = "n bigint, total bigint"
    rows_format = "numpy"

    def process(self, key, rows):
        return [(len(rows), int(rows["v"].sum()))]


class Running(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0

    def execute(self, event):
        self.n += 1
        self.total += event["v"]
        return [(self.n, self.total)]


@pytest.fixture(scope="module")
def hashed_src(spark):
    rng = random.Random(7)
    keys = [f"k{i:03d}" for i in range(300)] + [None]
    rows = [(rng.choice(keys), i, rng.randrange(100)) for i in range(3000)]
    spark.createDataFrame(rows, "k string, seq int, v int").repartition(4).createOrReplaceTempView("hashed_src")
    return rows


@pytest.fixture()
def narrow_hash(monkeypatch):
    monkeypatch.setattr(program, "key_hash", lambda cols: F.xxhash64(*cols) % 3)


def test_processor_keys_sharing_a_hash(spark, hashed_src, narrow_hash):
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("hashed_totals", Totals)
    got = [
        tuple(r)
        for r in ks.sql(
            "SELECT k, t.n, t.total FROM hashed_src GROUP BY KEY k WITH STATE hashed_totals(v) AS t"
        ).collect()
    ]
    want: dict = {}
    for k, _seq, v in hashed_src:
        n, t = want.get(k, (0, 0))
        want[k] = (n + 1, t + v)
    assert len(got) == len(want)  # each key once
    assert {k: (n, t) for k, n, t in got} == want


def test_function_keys_sharing_a_hash_keep_their_state_across_rows(spark, hashed_src, narrow_hash):
    """Row at a time, with pass-through: every key's counter runs 1..n over its rows (never
    restarted part way), and its running totals end at the key's sum."""
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("hashed_running", Running, returns="n bigint, total bigint")
    got = ks.sql(
        "SELECT k, seq, r.n, r.total FROM hashed_src GROUP BY KEY k WITH STATE hashed_running(v) AS r"
    ).collect()
    by_key: dict = {}
    for k, seq, n, total in (tuple(r) for r in got):
        by_key.setdefault(k, []).append((n, total, seq))
    rows_of: dict = {}
    for k, seq, v in hashed_src:
        rows_of.setdefault(k, {})[seq] = v
    assert set(by_key) == set(rows_of)
    for k, outs in by_key.items():
        outs.sort()
        assert [n for n, _, _ in outs] == list(range(1, len(rows_of[k]) + 1)), k
        assert sorted(seq for _, _, seq in outs) == sorted(rows_of[k]), k
        running = 0
        for _n, total, seq in outs:  # each output's total is the previous one plus its row's value
            running += rows_of[k][seq]
            assert total == running, k


def test_which_batches_are_hash_ordered(spark):
    spec = FunctionSpec.build("t", Totals, None, {})
    df = spark.createDataFrame([("a", 1.0, 1)], "s string, d double, v int")
    assert program.hash_ordered(df, KeyedPlan(spec, ["s"], ["v"]), None)
    assert program.hash_ordered(df, KeyedPlan(spec, ["s", "v"], ["v"]), None)
    assert not program.hash_ordered(df, KeyedPlan(spec, ["d"], ["v"]), None)  # -0.0 / NaN: by value
    assert not program.hash_ordered(df, KeyedPlan(spec, ["s"], ["v"], [OrderSpec("v")]), None)  # a within-key ORDER BY
    assert not program.hash_ordered(df, KeyedPlan(spec, ["s"], ["v"]), df)  # initial state
    assert not program.hash_ordered(df, KeyedPlan(spec, [], ["v"]), None)  # unkeyed

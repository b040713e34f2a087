"""The smoke tier: what CI runs on every Spark minor besides the reference pair (tools/smoke.py
builds a venv per pair from the package index and runs this module there, with the README's
Quick start). Each check is against plain Python written here: a keyed query on every engine
the running Spark has, the table-function form (through ks.sql everywhere; plain spark.sql
where Spark's UDTFs have analyze), one incremental ks.run twice with state read back, a
stream started and restarted from its checkpoint, and a class the native planner takes run as
Spark SQL (one-shot and ks.run increments, then a Python increment on the same checkpoint)."""

import random

import pytest
from data import write_parquet

from spark_keyed_sql import KeyedProcessor, StatefulFunction, ValueState
from spark_keyed_sql.compat import Feature, features
from spark_keyed_sql.engines import available

SCHEMA = "user_id string, value double, amount double, merchant string, ts timestamp"


class Running(StatefulFunction):
    n: int  # typed state columns (read_state shows them as bigint / double)
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, event):
        self.n += 1
        self.total += event["value"]
        return {"n": self.n, "total": round(self.total, 6)}


class Totals(StatefulFunction):
    """Running's state without round(): a class the native planner takes (docs/native.md)."""

    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, event):
        self.n += 1
        self.total += event["value"]
        return [(self.n, self.total)]


class Spend(KeyedProcessor):
    returns = "spent double, rows bigint"
    spent = ValueState("double", default=0.0)

    def process(self, key, rows):
        self.spent.update(self.spent.get() + float(rows["amount"].sum()))
        yield (round(self.spent.get(), 6), len(rows))


def events(n_keys, per_key, seed, start=0):
    from data import make_events

    return make_events(n_keys, per_key, seed=seed, start_second=start)


def running_oracle(rows):
    """key -> [(n, total)] in ts order, by hand."""
    out, state = {}, {}
    for r in sorted(rows, key=lambda r: r["ts"]):
        n, t = state.get(r["user_id"], (0, 0.0))
        n, t = n + 1, t + r["value"]
        state[r["user_id"]] = (n, t)
        out.setdefault(r["user_id"], []).append((n, round(t, 6)))
    return out


def by_key(rows):
    out = {}
    for k, n, total in rows:
        out.setdefault(k, []).append((n, round(total, 6)))
    return {k: sorted(v) for k, v in out.items()}


ENGINES = [e.name for e in available(features())]


@pytest.mark.parametrize("engine", ENGINES)
def test_keyed_query_on_each_engine(spark, engine):
    from spark_keyed_sql import KeyedSQL

    ks = KeyedSQL(spark, engine=engine)
    ks.register("smoke_running", Running, returns="n bigint, total double")
    ks.register("smoke_spend", Spend)
    rows = events(30, 4, seed=7)
    spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA).createOrReplaceTempView("smoke_events")
    got = ks.sql(
        "SELECT user_id, n, total FROM smoke_events GROUP BY KEY user_id WITH STATE smoke_running(value) ORDER BY ts"
    )
    assert by_key([tuple(r) for r in got.collect()]) == {k: sorted(v) for k, v in running_oracle(rows).items()}
    spent = {
        r[0]: (r[1], r[2])
        for r in ks.sql(
            "SELECT user_id, spent, rows FROM smoke_events GROUP BY KEY user_id WITH STATE smoke_spend(amount)"
        ).collect()
    }
    expected = {}
    for r in rows:
        s, c = expected.get(r["user_id"], (0.0, 0))
        expected[r["user_id"]] = (s + r["amount"], c + 1)
    assert spent == {k: (round(s, 6), c) for k, (s, c) in expected.items()}


def test_table_function(spark, ks_auto):
    ks_auto.register("smoke_tf", Running, returns="n bigint, total double")
    rows = events(20, 3, seed=11)
    spark.createDataFrame([tuple(r.values()) for r in rows], SCHEMA).createOrReplaceTempView("smoke_tf_events")
    expected = {k: sorted(v) for k, v in running_oracle(rows).items()}
    call = "smoke_tf(TABLE(smoke_tf_events), key => 'user_id', order_by => 'ts')"
    through_ks = ks_auto.sql(f"SELECT user_id, n, total FROM {call}")  # on the engines, every Spark
    assert by_key([tuple(r) for r in through_ks.collect()]) == expected
    if features(spark).has(Feature.UDTF_ANALYZE):  # Spark's own UDTF, plain spark.sql
        assert by_key([tuple(r) for r in spark.sql(f"SELECT user_id, n, total FROM {call}").collect()]) == expected


def test_incremental_run_twice_with_state_read_back(spark, ks_auto, tmp_path):
    ks_auto.register("smoke_inc", Running, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    first, second = events(25, 2, seed=3), events(25, 2, seed=4, start=10_000)
    sql = f"SELECT user_id, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE smoke_inc(value) ORDER BY ts"
    write_parquet(spark, first, src)
    assert ks_auto.run(sql, checkpoint=cp, output=out)["output_rows"] == len(first)
    write_parquet(spark, second, src)
    summary = ks_auto.run(sql, checkpoint=cp, output=out)
    assert summary["output_rows"] == len(second)  # only the new file
    written = by_key([tuple(r) for r in spark.read.parquet(out).select("user_id", "n", "total").collect()])
    # across runs, arrival order: the first file's rows, then the second's
    expected = running_oracle(first)
    after = running_oracle(first + second)
    assert written == {k: sorted(after[k]) for k in after}
    state = {r["user_id"]: (r["n"], round(r["total"], 6)) for r in ks_auto.read_state(cp).collect()}
    assert state == {k: v[-1] for k, v in after.items()} and set(expected) <= set(state)


def test_stream_started_then_restarted(spark, ks_auto, tmp_path):
    ks_auto.register("smoke_stream", Running, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    rng = random.Random(5)
    batches = [events(10, 2, seed=rng.randrange(1000), start=i * 10_000) for i in range(2)]
    sql = (
        f"SELECT user_id, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE smoke_stream(value) ORDER BY ts"
    )
    for b in batches:
        write_parquet(spark, b, src)
        q = ks_auto.start(sql, checkpoint=cp, sink=out)  # started, then restarted from the checkpoint
        q.processAllAvailable()
        q.stop()
        assert q.exception() is None
    written = by_key([tuple(r) for r in spark.read.parquet(out).select("user_id", "n", "total").collect()])
    expected = running_oracle(batches[0] + batches[1])
    assert written == {k: sorted(v) for k, v in expected.items()}


def test_native_plan_one_shot_and_increments_then_a_python_increment(spark, tmp_path):
    """On this Spark: EXPLAIN says native, the one-shot batch and two ks.run increments run as
    Spark SQL, a third increment on the Python path continues the same checkpoint."""
    from spark_keyed_sql import KeyedSQL

    ks = KeyedSQL(spark, engine="bulk")
    ks.register("smoke_native", Totals, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    parts = [events(15, 2, seed=20 + i, start=i * 10_000) for i in range(3)]
    sql = (
        "SELECT user_id, n, total FROM {t} GROUP BY KEY user_id WITH STATE smoke_native(value) ORDER BY ts "
        "OPTIONS (native = {native})"
    )
    spark.createDataFrame([tuple(r.values()) for r in parts[0]], SCHEMA).createOrReplaceTempView("smoke_native_events")
    one_shot = sql.format(t="smoke_native_events", native="true")
    assert "native:    yes" in ks.explain(one_shot)
    assert by_key([tuple(r) for r in ks.sql(one_shot).collect()]) == {
        k: sorted(v) for k, v in running_oracle(parts[0]).items()
    }
    run = sql.format(t=f"parquet.`{src}`", native="{native}")
    for i, (part, native) in enumerate(zip(parts, ("true", "true", "false"))):
        write_parquet(spark, part, src)
        if i == 0:
            assert "native:    yes" in ks.explain(run.format(native="true"))
        assert ks.run(run.format(native=native), checkpoint=cp, output=out)["output_rows"] == len(part)
    after = running_oracle(parts[0] + parts[1] + parts[2])
    written = by_key([tuple(r) for r in spark.read.parquet(out).select("user_id", "n", "total").collect()])
    assert written == {k: sorted(v) for k, v in after.items()}
    state = {r["user_id"]: (r["n"], round(r["total"], 6)) for r in ks.read_state(cp).collect()}
    assert state == {k: v[-1] for k, v in after.items()}

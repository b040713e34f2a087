"""Keyed state of a checkpoint as a table, from Python and from SQL."""

import json

import pytest
from data import by_key_in_ts_order, make_events, write_parquet
from processors import Spend

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.state.checkpoint import CheckpointError


class Tally(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.merchants = set()

    def execute(self, e):
        self.count += 1
        self.merchants.add(e["merchant"])
        return {"count": self.count}


@pytest.fixture(scope="module")
def checkpoints(spark, ks, tmp_path_factory):
    d = tmp_path_factory.mktemp("rs")
    ks.register("tally", Tally, returns="count bigint")
    ks.register("spend_rs", Spend)
    first, second = make_events(30, 2, seed=31), make_events(30, 1, seed=32, start_second=50_000)
    write_parquet(spark, first, str(d / "in"))
    tally_sql = (
        f"SELECT user_id, count FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE tally(merchant) ORDER BY ts"
    )
    spend_sql = (
        f"SELECT user_id, s.* FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE spend_rs(amount, merchant, ts) AS s"
    )
    ks.run(tally_sql, checkpoint=str(d / "cp_tally"), output=str(d / "out_tally"))
    ks.run(spend_sql, checkpoint=str(d / "cp_spend"), output=str(d / "out_spend"))
    write_parquet(spark, second, str(d / "in"))
    ks.run(tally_sql, checkpoint=str(d / "cp_tally"), output=str(d / "out_tally"))
    return d, first, second, tally_sql


def test_attribute_state_as_columns(ks, checkpoints):
    d, first, second, _ = checkpoints
    df = ks.read_state(str(d / "cp_tally"))
    assert df.columns == ["user_id", "count", "merchants", "batch_id"]
    got = {r.user_id: (r["count"], r.merchants, r.batch_id) for r in df.collect()}
    for u, evs in by_key_in_ts_order(first + second).items():
        count, merchants, batch = got[u]
        assert count == len(evs) and batch == 1
        assert sorted(json.loads(merchants)["$set"]) == sorted({e["merchant"] for e in evs})


def test_older_batch(ks, checkpoints):
    d, first, _, _ = checkpoints
    got = {r.user_id: r["count"] for r in ks.read_state(str(d / "cp_tally"), batch_id=0).collect()}
    assert got == {u: len(evs) for u, evs in by_key_in_ts_order(first).items()}


def test_typed_state_as_columns(ks, checkpoints):
    d, first, _, _ = checkpoints
    df = ks.read_state(str(d / "cp_spend"))
    assert set(df.columns) == {"user_id", "total", "by_merchant", "recent", "batch_id"}
    rows = {r.user_id: r for r in df.collect()}
    for u, evs in by_key_in_ts_order(first).items():
        r = rows[u]
        assert r.total == pytest.approx(sum(e["amount"] for e in evs))
        per = {}
        for e in evs:
            per[e["merchant"]] = per.get(e["merchant"], 0.0) + e["amount"]
        assert r.by_merchant == pytest.approx(per)
        assert [x.amount for x in r.recent] == [e["amount"] for e in evs][-3:]


def test_keyed_state_in_sql(ks, checkpoints):
    d, first, second, _ = checkpoints
    got = ks.sql(f"SELECT user_id, count FROM keyed_state('{d}/cp_tally') WHERE count > 2 ORDER BY user_id").collect()
    exp = sorted((u, len(evs)) for u, evs in by_key_in_ts_order(first + second).items() if len(evs) > 2)
    assert [tuple(r) for r in got] == exp
    assert ks.sql(f"SELECT count(*) FROM keyed_state('{d}/cp_spend', 'spend_rs', 0)").collect()[0][0] == 30


def test_checkpoint_of_another_query_is_refused(ks, checkpoints):
    d, _, _, tally_sql = checkpoints
    other = tally_sql.replace("GROUP BY KEY user_id", "GROUP BY KEY merchant")
    with pytest.raises(CheckpointError, match="belongs to another query .*tally keyed by \\['user_id'\\]"):
        ks.run(other, checkpoint=str(d / "cp_tally"), output=str(d / "out_other"))


def test_missing_checkpoint(ks, tmp_path):
    with pytest.raises(CheckpointError, match="nothing' does not exist"):
        ks.read_state(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="/empty' is no query's checkpoint .*it holds nothing\\); check the path"):
        ks.read_state(str(tmp_path / "empty"))
    # a data directory given for a checkpoint (a new user's walk: "holds no stateful operator 0")
    ks.spark.createDataFrame([("a", 1)], "k string, v int").coalesce(1).write.parquet(str(tmp_path / "events"))
    with pytest.raises(CheckpointError, match="/events' is no query's checkpoint .*it holds .*part-.*check the path"):
        ks.read_state(str(tmp_path / "events"))


@pytest.mark.spark_feature("UDTF_ANALYZE")
@pytest.mark.parametrize("name, reader", [("keyed_state", "read_state"), ("keyed_state_changes", "read_state_changes")])
def test_keyed_state_in_plain_spark_sql_names_ks_sql(spark, ks_auto, tmp_path, name, reader):
    """The state readers are views ks.sql makes; plain spark.sql gets a message saying so,
    not Spark's 'could not resolve a table-valued function'."""
    from pyspark.errors import AnalysisException

    with pytest.raises(
        AnalysisException,
        match=rf"{name}\('<checkpoint>', \.\.\.\) is read through KeyedSQL, not plain spark\.sql: "
        rf"run this statement with ks\.sql\(\.\.\.\).*ks\.{reader}\(checkpoint\)",
    ):
        spark.sql(f"SELECT * FROM {name}('{tmp_path}')").collect()

"""A batch that fails in user code commits nothing: the state read afterwards is the last
committed batch's, and after fixing the class a restart continues exactly once."""

import pytest
from data import by_key_in_ts_order, make_events, write_parquet

from spark_keyed_sql import StatefulFunction, UserFunctionError


class Fragile(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, e):
        if e["merchant"] == "boom":
            raise ValueError("cannot handle merchant boom")
        self.count += 1
        return {"count": self.count}


class Fixed(Fragile):
    def execute(self, e):
        self.count += 1
        return {"count": self.count}


def test_failed_batch_commits_nothing_and_fixed_code_continues(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT user_id, count FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE fragile(merchant) ORDER BY ts"
    ks.register("fragile", Fragile, returns="count bigint")
    first = make_events(20, 2, seed=51)
    write_parquet(spark, first, src)
    ks.run(sql, checkpoint=cp, output=out)
    committed = {r.user_id: r["count"] for r in ks.read_state(cp).collect()}
    assert committed == {u: len(e) for u, e in by_key_in_ts_order(first).items()}
    batch = ks.read_state(cp).first()["batch_id"]

    second = make_events(20, 1, seed=52, start_second=80_000)
    second[7]["merchant"] = "boom"
    write_parquet(spark, second, src)
    with pytest.raises(UserFunctionError, match="cannot handle merchant boom") as info:
        ks.run(sql, checkpoint=cp, output=out)
    # our error, not Spark's wrapper: it names the function, the key and the row
    boom = second[7]
    assert info.value.function == "fragile" and info.value.key == boom["user_id"]
    assert "'merchant': 'boom'" in info.value.where
    assert "Traceback" not in str(info.value)
    after = ks.read_state(cp)
    assert {r.user_id: r["count"] for r in after.collect()} == committed
    assert after.first()["batch_id"] == batch
    assert spark.read.parquet(out).count() == len(first)  # no output of the failed batch

    ks.register("fragile", Fixed, returns="count bigint")  # the fix, same function name
    ks.run(sql, checkpoint=cp, output=out)
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    expected = []
    for user, evs in by_key_in_ts_order(first + second).items():
        expected += [(user, i + 1) for i in range(len(evs))]
    assert got == sorted(expected)

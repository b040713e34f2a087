"""OPTIONS (state_partitions = n): a new checkpoint's state is split into n partitions on every
engine, whatever the session's spark.sql.shuffle.partitions, and the session is left as it was."""

import json
import os

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.engines import engine_names


class Count(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return {"n": self.n}


# how many state partitions a checkpoint holds, read from the files each engine writes
STATE_PARTITIONS = {
    "bulk": lambda cp: json.loads(open(os.path.join(cp, "bulk", "commits", "0.json")).read())["partitions"],
    "tws": lambda cp: len([d for d in os.listdir(os.path.join(cp, "state", "0")) if d.isdigit()]),
}


def test_every_engine_is_covered():
    assert sorted(STATE_PARTITIONS) == engine_names()


def test_a_new_checkpoint_takes_the_option(spark, ks, tmp_path):
    ks.register("sp_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    rows = [("u1", 1), ("u2", 2), ("u1", 3), ("u3", 4), ("u1", 5)]
    spark.createDataFrame(rows, "user_id string, ts int").coalesce(1).write.parquet(src)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    sql = (
        f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE sp_count(ts) ORDER BY ts "
        "OPTIONS (state_partitions = 3)"
    )
    ks.run(sql, checkpoint=cp, output=out)
    assert spark.conf.get("spark.sql.shuffle.partitions") == before != "3"
    assert STATE_PARTITIONS[ks.default_engine](cp) == 3
    expected = sorted((u, i) for u in {r[0] for r in rows} for i in range(1, 1 + sum(r[0] == u for r in rows)))
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == expected

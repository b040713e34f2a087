"""A truncated or deleted state file is refused with a clear error before anything runs, and
the checkpoint is left as it was."""
import os

import pytest
from data import make_events, write_parquet

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.snapshots import SnapshotStore


class Count(StatefulFunction):
    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return (self.n,)


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_damaged_bulk_state_is_refused(spark, ks_auto, tmp_path, damage):
    ks = ks_auto
    ks.register("dmg_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE dmg_count(value) OPTIONS (engine = 'bulk')"
    write_parquet(spark, make_events(10, 2, seed=1), src)
    ks.run(sql, checkpoint=cp, output=out)
    store = SnapshotStore(cp)
    version = store.latest().version
    state_dir = store.state_dir(version)
    victim = next(os.path.join(state_dir, f) for f in sorted(os.listdir(state_dir)) if f.endswith(".parquet"))
    if damage == "truncate":
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
    else:
        import shutil

        shutil.rmtree(state_dir)
    write_parquet(spark, make_events(10, 1, seed=2, start_second=50_000), src)
    rows_before = spark.read.parquet(out).count()
    with pytest.raises(CheckpointError, match="damaged"):
        ks.run(sql, checkpoint=cp, output=out)
    assert store.latest().version == version  # nothing committed
    assert spark.read.parquet(out).count() == rows_before

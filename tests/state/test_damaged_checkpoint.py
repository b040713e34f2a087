"""A truncated or deleted state file is refused with a clear error before anything runs, and
the checkpoint is left as it was."""
import os

import pytest
from data import make_events, write_parquet
from keyed_functions import Count

from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.snapshots import SnapshotStore


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
    state_dir = store.state_dirs(version)[-1]  # the last batch's changed state rows
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


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
@pytest.mark.parametrize("damage", ["truncate_snapshot", "delete_snapshot", "delete_sst"])
def test_damaged_tws_state_is_a_clear_error_and_changes_nothing(spark, ks_auto, tmp_path, damage):
    """Spark's RocksDB store refuses damaged files itself (checksums, missing files); ks.run
    turns that into a CheckpointError naming the checkpoint, and nothing is committed."""
    import glob

    ks = ks_auto
    ks.register("dmg_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE dmg_count(value) OPTIONS (engine = 'tws')"
    write_parquet(spark, make_events(10, 2, seed=1), src)
    ks.run(sql, checkpoint=cp, output=out)
    state_before = sorted(tuple(r) for r in ks.read_state(cp).collect())
    snapshots = sorted(glob.glob(f"{cp}/state/0/*/1.zip"))
    assert snapshots, os.listdir(f"{cp}/state/0")
    if damage == "truncate_snapshot":
        with open(snapshots[0], "r+b") as f:
            f.truncate(os.path.getsize(snapshots[0]) // 2)
    elif damage == "delete_snapshot":
        os.remove(snapshots[0])
    else:
        os.remove(sorted(glob.glob(f"{cp}/state/0/*/SSTs/*.sst"))[0])
    commits = sorted(os.listdir(f"{cp}/commits"))
    write_parquet(spark, make_events(10, 1, seed=2, start_second=50_000), src)
    with pytest.raises(CheckpointError, match=f"checkpoint '{cp}': Spark could not load the keyed state") as info:
        ks.run(sql, checkpoint=cp, output=out)
    assert "Traceback" not in str(info.value)
    assert sorted(os.listdir(f"{cp}/commits")) == commits  # the batch was not committed
    assert spark.read.parquet(out).count() == 20  # nor its output
    # reading the damaged state fails loudly too (Spark's own error, when the DataFrame is
    # collected): never a silently shorter table
    with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE"):
        ks.read_state(cp).collect()
    assert len(state_before) == 10

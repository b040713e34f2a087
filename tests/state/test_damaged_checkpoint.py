"""A truncated or deleted state file is refused with a clear error before anything runs, and
the checkpoint is left as it was."""

import os
import re

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
    sql = (
        f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE dmg_count(value) "
        "OPTIONS (engine = 'bulk')"
    )
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
@pytest.mark.parametrize("damage", ["truncate_snapshot", "delete_snapshot", "delete_sst", "truncate_changelog"])
def test_damaged_tws_state_is_a_clear_error_and_changes_nothing(spark, ks_auto, tmp_path, damage):
    """Spark's RocksDB store refuses damaged files itself (checksums, missing files); ks.run
    turns that into a CheckpointError naming the checkpoint, and nothing is committed."""
    import glob

    ks = ks_auto
    ks.register("dmg_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE dmg_count(value) "
        "OPTIONS (engine = 'tws')"
    )
    write_parquet(spark, make_events(10, 2, seed=1), src)
    ks.run(sql, checkpoint=cp, output=out)
    rows = 20
    if damage == "truncate_changelog":  # (a second batch: its state is the first's snapshot and a changelog)
        write_parquet(spark, make_events(10, 1, seed=3, start_second=20_000), src)
        ks.run(sql, checkpoint=cp, output=out)
        rows = 30
    state_before = sorted(tuple(r) for r in ks.read_state(cp).collect())
    snapshots = sorted(glob.glob(f"{cp}/state/0/*/1.zip"))
    assert snapshots, os.listdir(f"{cp}/state/0")
    if damage == "truncate_changelog":
        changelogs = [p for p in sorted(glob.glob(f"{cp}/state/0/*/2.changelog")) if os.path.getsize(p) > 64]
        assert changelogs, sorted(glob.glob(f"{cp}/state/0/*/*"))  # (the engine's streams keep changelogs)
        with open(changelogs[0], "r+b") as f:
            f.truncate(os.path.getsize(changelogs[0]) // 2)
    elif damage == "truncate_snapshot":
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
    assert spark.read.parquet(out).count() == rows  # nor its output
    # reading the damaged state fails loudly too (Spark's own error, when the DataFrame is
    # collected): never a silently shorter table
    with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE"):
        ks.read_state(cp).collect()
    assert len(state_before) == 10


def _bulk_run(spark, ks, tmp_path, fn):
    ks.register(fn, Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {fn}(value) OPTIONS (engine = 'bulk')"
    )
    write_parquet(spark, make_events(10, 2, seed=1), src)
    ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, make_events(10, 1, seed=2, start_second=50_000), src)
    return sql, cp, out


@pytest.mark.parametrize("damage", ["truncated", "a key missing", "not JSON"])
def test_damaged_commit_record_is_named_and_nothing_runs(spark, ks_auto, tmp_path, damage):
    """A commit file that is not a whole record: one CheckpointError naming the file and what to
    do; no batch is committed or written, and none is skipped (the same run works once the
    file is restored)."""
    import json

    sql, cp, out = _bulk_run(spark, ks_auto, tmp_path, "dmg_commit")
    commit = os.path.join(cp, "bulk", "commits", "0.json")
    good = open(commit).read()
    bad = {
        "truncated": good[: len(good) // 2],
        "a key missing": json.dumps({k: v for k, v in json.loads(good).items() if k != "base"}),
        "not JSON": "\x00garbage",
    }[damage]
    with open(commit, "w") as f:
        f.write(bad)
    rows_before = spark.read.parquet(out).count()
    with pytest.raises(
        CheckpointError, match=r"commit file \S*commits/0\.json is damaged .*Restore the checkpoint"
    ) as info:
        ks_auto.run(sql, checkpoint=cp, output=out)
    assert "Traceback" not in str(info.value)
    assert sorted(os.listdir(os.path.join(cp, "bulk", "commits"))) == ["0.json"]  # nothing committed
    assert spark.read.parquet(out).count() == rows_before
    with pytest.raises(CheckpointError, match="is damaged"):
        ks_auto.read_state(cp).collect()
    with open(commit, "w") as f:  # restored from a copy: the batch that was refused runs now
        f.write(good)
    assert ks_auto.run(sql, checkpoint=cp, output=out)["input_rows"] == 10


def test_garbage_lease_is_named_waited_on_and_taken_over(spark, ks_auto, tmp_path, monkeypatch, caplog):
    """A lease file that is not a lease (what a kill between its create and its write leaves) is
    named in a warning and taken over once it is two heartbeats old: the run then goes on, and
    the batch is committed once. ``unlock`` clears one too."""
    from spark_keyed_sql.state.lock import LOCK_FILE, CheckpointLock

    monkeypatch.setattr(CheckpointLock, "HEARTBEAT_S", 0.5)
    sql, cp, out = _bulk_run(spark, ks_auto, tmp_path, "dmg_lease")
    lease = os.path.join(cp, LOCK_FILE)
    with open(lease, "w") as f:
        f.write("{not a lease")
    with caplog.at_level("WARNING", logger="spark_keyed_sql.state.lock"):
        assert ks_auto.run(sql, checkpoint=cp, output=out)["input_rows"] == 10
    assert re.search(rf"lease file \S*{LOCK_FILE} is not a lease .*taken over", caplog.text)
    assert sorted(os.listdir(os.path.join(cp, "bulk", "commits"))) == ["0.json", "1.json"]
    assert not os.path.exists(lease)  # released after the run
    with open(lease, "w") as f:
        f.write("{not a lease")
    assert ks_auto.unlock(cp) == {} and not os.path.exists(lease)

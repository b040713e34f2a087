"""The bulk engine's micro-batches cost what they touch (issue #16): a batch hands Python only
the keys with input, with a timer due, or with state expiring; its state changes are the only
state it writes; a host that lost its local state is fed from the checkpoint; compaction keeps
every retained version readable. Oracles are plain Python counts over the input."""

import shutil

import pytest
from data import clock_moved
from keyed_functions import Count

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.engines.bulk.local_store import cache_root
from spark_keyed_sql.engines.bulk.stream import COMPACT_DELTAS_CONF, LOCAL_STATE_DIR_CONF
from spark_keyed_sql.state.snapshots import SnapshotStore

# the Python step's local stores are what these tests look at (a native step uses none)
SQL = (
    "SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {fn}(value) ORDER BY ts "
    "OPTIONS (engine = 'bulk', native = false)"
)


def write(spark, src, rows):
    spark.createDataFrame(rows, "user_id string, value double, ts bigint").coalesce(1).write.mode("append").parquet(src)


def counts(batches):
    out = {}
    for rows in batches:
        for user, _, _ in rows:
            out[user] = out.get(user, 0) + 1
    return out


def state_of(ks, cp, **kw):
    return {r.user_id: r.n for r in ks.read_state(cp, **kw).collect()}


@pytest.fixture
def local_dir(spark, tmp_path):
    """This test's own local state directory (so tests can drop it), restored afterwards."""
    before = spark.conf.get(LOCAL_STATE_DIR_CONF, None)
    spark.conf.set(LOCAL_STATE_DIR_CONF, str(tmp_path / "local"))
    yield tmp_path / "local"
    if before is None:
        spark.conf.unset(LOCAL_STATE_DIR_CONF)
    else:
        spark.conf.set(LOCAL_STATE_DIR_CONF, before)


def test_a_batch_runs_and_writes_only_the_keys_it_touches(spark, ks_auto, tmp_path, local_dir):
    ks_auto.register("inc_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    first = [(f"u{i:04d}", 1.0, i) for i in range(2000)]
    write(spark, src, first)
    ks_auto.run(SQL.format(src=src, fn="inc_count"), checkpoint=cp, output=out)
    second = [("u0007", 1.0, 5000), ("u0007", 2.0, 5001), ("u1999", 1.0, 5002), ("new", 1.0, 5003)]
    write(spark, src, second)
    summary = ks_auto.run(SQL.format(src=src, fn="inc_count"), checkpoint=cp, output=out)
    touched = {u for u, _, _ in second}
    assert summary["input_rows"] == 4 and summary["keys_touched"] == len(touched)
    store = SnapshotStore(cp)
    latest = store.latest()
    delta = spark.read.parquet(store.state_dirs(latest.version)[-1])  # this batch's state rows
    assert sorted(r["__ks_key0"] for r in delta.collect()) == sorted(touched)
    assert latest.metrics.fed_partitions == {}  # the local stores held the state: nothing read back
    assert state_of(ks_auto, cp) == counts([first, second])
    assert state_of(ks_auto, cp, batch_id=latest.version - 1) == counts([first])


TTL_S = 3600


class Expiring(StatefulFunction):
    state_ttl = f"{TTL_S} seconds"
    n: int

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.n = 0

    def execute(self, event):
        self.n += 1
        return {"n": self.n}


def test_expiring_state_is_dropped_without_input(spark, ks_auto, tmp_path, local_dir):
    """A key whose state expires is visited by the batch it expires in, input or not: its state
    is gone from read_state, and it was handed to Python (keys_touched)."""
    ks_auto.register("inc_expiring", Expiring, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = SQL.format(src=src, fn="inc_expiring")
    write(spark, src, [(f"old{i}", 1.0, i) for i in range(5)])
    ks_auto.run(sql, checkpoint=cp, output=out)
    assert set(state_of(ks_auto, cp)) == {f"old{i}" for i in range(5)}
    write(spark, src, [("fresh", 1.0, 100)])
    with clock_moved(spark, seconds=TTL_S + 60):  # past the TTL, in processing time
        summary = ks_auto.run(sql, checkpoint=cp, output=out)
    assert state_of(ks_auto, cp) == {"fresh": 1}
    # the run's batch: the key with input and the five whose state expired
    assert summary["metrics"][0]["rows_updated"] == 6


def test_lost_local_state_is_fed_from_the_checkpoint(spark, ks_auto, tmp_path, local_dir):
    ks_auto.register("inc_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = SQL.format(src=src, fn="inc_count")
    batches = [[(f"u{(i * 7 + b) % 40}", 1.0, b * 1000 + i) for i in range(30)] for b in range(4)]
    for b, rows in enumerate(batches):
        write(spark, src, rows)
        if b in (1, 3):
            shutil.rmtree(local_dir, ignore_errors=True)  # this host lost its local state
        ks_auto.run(sql, checkpoint=cp, output=out)
        assert state_of(ks_auto, cp) == counts(batches[: b + 1]), b
    fed = SnapshotStore(cp).latest().metrics.fed_partitions
    assert sum(len(v) for v in fed.values()) == SnapshotStore(cp).latest().partitions  # every partition was fed
    got = sorted((r.user_id, r.n) for r in spark.read.parquet(out).collect())
    seen, expected = {}, []
    for rows in batches:
        for u, _, _ in sorted(rows, key=lambda r: r[2]):
            seen[u] = seen.get(u, 0) + 1
            expected.append((u, seen[u]))
    assert got == sorted(expected)  # each row's output once, with the right count


def test_compaction_keeps_every_retained_version_readable(spark, ks_auto, tmp_path, local_dir):
    ks_auto.register("inc_count", Count, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = SQL.format(src=src, fn="inc_count")
    spark.conf.set(COMPACT_DELTAS_CONF, "2")
    try:
        batches = [[(f"u{(i + b * 3) % 25}", 1.0, b * 1000 + i) for i in range(10)] for b in range(6)]
        for rows in batches:
            write(spark, src, rows)
            ks_auto.run(sql, checkpoint=cp, output=out)
    finally:
        spark.conf.unset(COMPACT_DELTAS_CONF)
    store = SnapshotStore(cp)
    assert store.bases(), "no compaction happened"
    latest = store.latest()
    assert latest.base is not None and len(latest.deltas) <= 2
    for version in range(len(batches)):
        assert state_of(ks_auto, cp, batch_id=version) == counts(batches[: version + 1]), version
    # a host without local state now starts from the compacted base
    shutil.rmtree(local_dir, ignore_errors=True)
    more = [("u1", 1.0, 9000)]
    write(spark, src, more)
    ks_auto.run(sql, checkpoint=cp, output=out)
    assert state_of(ks_auto, cp) == counts([*batches, more])
    assert store.latest().metrics.fed_partitions.get("full")  # fed in full: the base, then the deltas


def test_local_state_defaults_under_the_temp_dir():
    import tempfile

    assert cache_root(None).startswith(tempfile.gettempdir())
    assert cache_root("/somewhere") == "/somewhere"

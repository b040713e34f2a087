"""ks.migrate_state(..., dry_run=True): the state of a sample of keys before and after the
migration side by side, after the same checks as the real migration, and nothing written (the
destination is not created, the source's files are unchanged). Expected values come from the
events fed, counted here in plain Python."""

import os
from pathlib import Path

import pytest
from data import by_key_in_ts_order, make_events, write_parquet

from spark_keyed_sql import MigrationError, StatefulFunction, cli


class DryV1(StatefulFunction):
    count: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.total = 0.0

    def execute(self, e):
        self.count += 1
        self.total += e["amount"]
        return {"count": float(self.count), "bonus": 0}


class DryV2(StatefulFunction):
    """Evolved: ``count`` widened to double, ``total`` dropped, ``bonus`` added (5 at start)."""

    count: float
    bonus: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0.0
        self.bonus = 5

    def execute(self, e):
        self.count += 1
        return {"count": self.count, "bonus": self.bonus}


RETURNS = "count double, bonus bigint"
SQL = "SELECT user_id, count, bonus FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE dry_v1(amount) ORDER BY ts"
DOUBLE_THE_BUSY = "SELECT user_id, count * 2 AS count FROM state WHERE count > 1"  # keys seen once dropped


@pytest.fixture(scope="module")
def checkpoint(spark, ks, tmp_path_factory):
    """A checkpoint of ``ks``'s engine: keys u000000..u000005 seen 3 times, u000006..u000011 once."""
    d = tmp_path_factory.mktemp("mig_dry")
    ks.register("dry_v1", DryV1, returns=RETURNS)
    ks.register("dry_v2", DryV2, returns=RETURNS)
    events = make_events(12, 1, seed=51) + make_events(6, 2, seed=52, start_second=1_000)
    write_parquet(spark, events, str(d / "in"))
    ks.run(SQL.format(src=d / "in"), checkpoint=str(d / "cp"), output=str(d / "out"))
    return d, str(d / "cp"), events


def stored(events):
    """Each key's DryV1 state after the events: count and the sum of amounts in ts order."""
    out = {}
    for user, evs in by_key_in_ts_order(events).items():
        total = 0.0
        for e in evs:
            total += e["amount"]
        out[user] = {"count": len(evs), "total": total}
    return out


def files(root):
    """Every file under ``root`` (checksums and hidden files too), path -> bytes."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def side_by_side(df):
    return [(r.user_id, r.old and r.old.asDict(), r.new and r.new.asDict()) for r in df.collect()]


def test_dry_run_shows_old_and_new_state_and_writes_nothing(ks, checkpoint):
    d, src, events = checkpoint
    dst = d / "dst_v2"
    before = files(src)
    df = ks.migrate_state(src, str(dst), to_function="dry_v2", transform=DOUBLE_THE_BUSY, dry_run=True)
    assert df.columns == ["user_id", "old", "new"]
    # old as read_state shows DryV1's state, new as DryV2's would be written (types of the annotations)
    types = [f.dataType.simpleString() for f in df.schema.fields]
    assert types == ["string", "struct<count:bigint,total:double>", "struct<count:double,bonus:bigint>"]
    expected = [
        (user, s, {"count": 2.0 * s["count"], "bonus": 5} if s["count"] > 1 else None)
        for user, s in sorted(stored(events).items())
    ]
    assert len(expected) == 12 and sum(new is None for _, _, new in expected) == 6  # the oracle drops half
    assert side_by_side(df) == expected
    assert side_by_side(df) == expected  # read again: the same rows
    assert not dst.exists()
    assert files(src) == before


def test_dry_run_sample_is_the_smallest_keys(spark, ks, checkpoint):
    d, src, events = checkpoint
    dst = d / "dst_same"
    # the session's 4 shuffle partitions kept apart (not coalesced into one, key-sorted, as data
    # this small would be): the first rows Spark gives are then not the smallest keys by chance
    conf = "spark.sql.adaptive.coalescePartitions.enabled"
    spark.conf.set(conf, "false")
    try:
        df = ks.migrate_state(src, str(dst), dry_run=True, sample=5)
    finally:
        spark.conf.unset(conf)
    # no transform, the same function: the state goes over as it is
    expected = [(user, s, s) for user, s in sorted(stored(events).items())[:5]]
    assert side_by_side(df) == expected
    with pytest.raises(MigrationError, match="sample must be a positive number of keys, got 0"):
        ks.migrate_state(src, str(dst), dry_run=True, sample=0)
    assert not dst.exists()


BAD_SQL = "SELECT user_id,\n cnt FROM state"
LOSSY = "SELECT user_id, 'many' AS count FROM state"


@pytest.mark.parametrize(
    "case, options, error",
    [
        ("bad-sql", {"to_function": "dry_v2", "transform": BAD_SQL}, r"`cnt`.* line 2, column"),
        ("no-key", {"transform": "SELECT count, total FROM state"}, r"key column\(s\) \['user_id'\] missing"),
        ("not-state", {"to_function": "dry_v2"}, r"\['total'\] are not state of DryV2"),
        ("lossy", {"to_function": "dry_v2", "transform": LOSSY}, "value 'many' does not convert"),
        ("partitions", {"partitions": 0}, "partitions must be a positive number"),
        ("unknown-function", {"to_function": "dry_nowhere"}, "dry_nowhere"),
    ],
    ids=["bad-sql", "no-key", "not-state", "lossy", "partitions", "unknown-function"],
)
def test_dry_run_fails_where_the_real_run_fails(ks, checkpoint, case, options, error):
    """The same error, word for word, from the dry run and then the real run into the same
    destination (which the dry run leaves uncreated)."""
    d, src, _ = checkpoint
    dst = d / f"dst_{case}"
    before = files(src)
    with pytest.raises(Exception, match=error) as dry:
        ks.migrate_state(src, str(dst), dry_run=True, **options)
    assert not dst.exists()
    with pytest.raises(Exception, match=error) as real:
        ks.migrate_state(src, str(dst), **options)
    assert (type(dry.value), str(dry.value)) == (type(real.value), str(real.value))
    assert files(src) == before


def test_cli_dry_run_prints_the_table(ks, checkpoint, capsys, monkeypatch):
    d, src, events = checkpoint
    dst = d / "dst_cli"
    monkeypatch.chdir(Path(__file__).parent)  # where --udf finds this module
    transform = "SELECT user_id, count FROM state WHERE user_id <> 'u000001'"
    argv = ["state", "migrate", src, str(dst), "--udf", f"dry_v2_cli=test_migrate_dry_run:DryV2 returns {RETURNS}"]
    argv += ["--to-function", "dry_v2_cli", "--transform", transform, "--dry-run", "--sample", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")]
    expected = [
        [user, f"{{count: {s['count']}, total: {s['total']}}}"]
        + ["NULL" if user == "u000001" else f"{{count: {float(s['count'])}, bonus: 5}}"]
        for user, s in sorted(stored(events).items())[:3]
    ]
    assert rows == [["user_id", "old", "new"], *expected]
    assert f"dry run: nothing written to {dst}" in out
    assert not dst.exists()

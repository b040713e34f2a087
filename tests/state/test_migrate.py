"""ks.migrate_state: a new checkpoint with other partitions, a renamed function or an evolved
state schema continues from the same input position (nothing re-read, nothing skipped)."""

import json

import pytest
from data import by_key_in_ts_order, make_events, write_parquet

from spark_keyed_sql import MigrationError, StatefulFunction
from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.snapshots import SnapshotStore


class TallyV1(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.merchants = set()

    def execute(self, e):
        self.count += 1
        self.merchants.add(e["merchant"])
        return {"count": float(self.count), "bonus": 0}


class TallyV2(StatefulFunction):
    """Evolved: ``count`` widened to double, ``merchants`` dropped, ``bonus`` added."""

    count: float
    bonus: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0.0
        self.bonus = 5

    def execute(self, e):
        self.count += 1
        return {"count": self.count, "bonus": self.bonus}


class TallyMarks(StatefulFunction):
    """TallyV1's count kept as tally marks: a type change (bigint -> string) no cast carries."""

    count: str

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = ""

    def execute(self, e):
        self.count += "|"
        return {"count": float(len(self.count)), "bonus": 1}


class TallyCountOnly(StatefulFunction):
    """TallyV1 without its merchants (a state attribute the class no longer has)."""

    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, e):
        self.count += 1
        return {"count": float(self.count), "bonus": 2}


RETURNS = "count double, bonus bigint"
SQL = "SELECT user_id, count, bonus FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {fn}(merchant) ORDER BY ts"
AFTER = SQL + " OPTIONS (engine = 'bulk')"  # a migrated checkpoint runs on the bulk engine


@pytest.fixture(scope="module")
def first_run(spark, ks, tmp_path_factory):
    d = tmp_path_factory.mktemp("mig")
    ks.register("mig_tally", TallyV1, returns=RETURNS)
    ks.register("mig_tally_v2", TallyV2, returns=RETURNS)
    ks.register("mig_marks", TallyMarks, returns=RETURNS)
    a, b = make_events(40, 2, seed=41), make_events(40, 2, seed=42, start_second=90_000)
    write_parquet(spark, a, str(d / "in"))
    ks.run(SQL.format(src=d / "in", fn="mig_tally"), checkpoint=str(d / "cp"), output=str(d / "out_a"))
    write_parquet(spark, b, str(d / "in"))  # arrives after the checkpoint's last batch
    return d, a, b


def oracle(a, b, bonus_after_a=0):
    out = []
    for user, evs in by_key_in_ts_order(a).items():
        out += [(user, float(i + 1), 0) for i in range(len(evs))]
    counts = {u: len(evs) for u, evs in by_key_in_ts_order(a).items()}
    for user, evs in by_key_in_ts_order(b).items():
        base = counts.get(user, 0)
        out += [(user, float(base + i + 1), bonus_after_a) for i in range(len(evs))]
    return sorted(out)


# CI: more partitions on tws, fewer on bulk; the other two cases in the slow tier
@pytest.mark.slow_on("bulk-8", "tws-2")
@pytest.mark.parametrize("partitions", [8, 2])  # the session runs 4: twice and half as many
def test_migrate_partitions_continues_from_same_position(spark, ks, first_run, partitions):
    d, a, b = first_run
    dst = str(d / f"cp_p{partitions}")
    info = ks.migrate_state(str(d / "cp"), dst, partitions=partitions)
    assert info["keys"] == 40 and info["partitions"] == partitions
    summary = ks.run(AFTER.format(src=d / "in", fn="mig_tally"), checkpoint=dst, output=str(d / f"out_b{partitions}"))
    assert summary["input_rows"] == len(b)  # only the new file: nothing re-read, nothing skipped
    got = [tuple(r) for r in spark.read.parquet(str(d / "out_a")).collect()]
    got += [tuple(r) for r in spark.read.parquet(str(d / f"out_b{partitions}")).collect()]
    assert sorted(got) == oracle(a, b)
    # the migrated base holds one file per state partition: as many as asked for, whatever the session runs
    base = SnapshotStore(dst).state_dirs(info["batch_id"])
    assert len(base) == 1 and len(spark.read.parquet(base[0]).inputFiles()) <= partitions


def test_migrate_renamed_function_with_evolved_schema(spark, ks, first_run):
    d, a, b = first_run
    dst = str(d / "cp_v2")
    ks.migrate_state(str(d / "cp"), dst, to_function="mig_tally_v2", transform="SELECT user_id, count FROM state")
    state = {r.user_id: r for r in ks.read_state(dst).collect()}
    assert {u: s["count"] for u, s in state.items()} == {u: float(len(e)) for u, e in by_key_in_ts_order(a).items()}
    assert {s["bonus"] for s in state.values()} == {5}  # the new attribute takes its __init__ value
    ks.run(AFTER.format(src=d / "in", fn="mig_tally_v2"), checkpoint=dst, output=str(d / "out_v2"))
    got = [tuple(r) for r in spark.read.parquet(str(d / "out_a")).collect()]
    got += [tuple(r) for r in spark.read.parquet(str(d / "out_v2")).collect()]
    assert sorted(got) == oracle(a, b, bonus_after_a=5)


def test_migrate_transform_reads_the_state_not_a_user_view_named_state(spark, ks, first_run):
    """transform= names the checkpoint's state ``state``: a user's own view of that name is
    neither what it reads nor replaced, and nothing of the call's own is left in the catalog."""
    d, a, _ = first_run
    spark.createDataFrame([("CA", "California")], "code string, name string").createOrReplaceTempView("state")
    before = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    transform = """SELECT state.user_id, state.count * 2 AS count  -- doubled
                   FROM state WHERE count > 1;  -- a comment, and a semicolon, at the end"""
    try:
        ks.migrate_state(str(d / "cp"), str(d / "cp_view"), to_function="mig_tally_v2", transform=transform)
        assert [tuple(r) for r in spark.table("state").collect()] == [("CA", "California")]
        assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == before
    finally:
        spark.catalog.dropTempView("state")
    counts = {u: len(e) for u, e in by_key_in_ts_order(a).items()}
    expected = {u: 2.0 * n for u, n in counts.items() if n > 1}
    assert {r.user_id: r["count"] for r in ks.read_state(str(d / "cp_view")).collect()} == expected


def test_migrate_transform_may_be_a_dataframe_function(spark, ks, first_run):
    """transform= also takes a function from the state DataFrame to the new one; anything else,
    or a function that returns no DataFrame, is refused naming what it got."""
    d, a, _ = first_run
    dst = str(d / "cp_fn")
    ks.migrate_state(
        str(d / "cp"),
        dst,
        to_function="mig_tally_v2",
        transform=lambda df: df.select("user_id", (df["count"] * 3).alias("count")),
    )
    expected = {u: 3.0 * len(e) for u, e in by_key_in_ts_order(a).items()}
    assert {r.user_id: r["count"] for r in ks.read_state(dst).collect()} == expected
    with pytest.raises(MigrationError, match=r"it must return the new state as a DataFrame, got NoneType"):
        ks.migrate_state(str(d / "cp"), str(d / "fn_none"), transform=lambda df: None)
    with pytest.raises(MigrationError, match=r"transform= takes SQL text over the view 'state'.*got int"):
        ks.migrate_state(str(d / "cp"), str(d / "fn_int"), transform=3)
    assert not (d / "fn_none").exists() and not (d / "fn_int").exists()


def test_migrate_bad_transform_says_where_in_its_text(spark, ks, first_run):
    d, _, _ = first_run
    src = str(d / "cp")
    with pytest.raises(MigrationError, match=r"transform= failed: .*`cnt`.* line 2, column \d+ of transform=") as e:
        ks.migrate_state(src, str(d / "t1"), to_function="mig_tally_v2", transform="SELECT user_id,\n cnt FROM state")
    assert "__ks_" not in str(e.value)
    with pytest.raises(MigrationError, match=r"transform= failed: .*line 3, column \d+ of transform="):
        ks.migrate_state(src, str(d / "t2"), transform="SELECT user_id,\n count\n FROM state WHERE ) > 1")
    # an unfinished text: Spark finds the error at the closing line the wrapper adds, past the user's text
    with pytest.raises(MigrationError, match=r"transform= failed: .*(line 3, column \d+|at the end) of transform="):
        ks.migrate_state(src, str(d / "t2"), transform="SELECT user_id,\n count\n FROM state WHERE (")
    assert not (d / "t1").exists() and not (d / "t2").exists()
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("__ks_migrate")]


def test_migrate_refusals(spark, ks, first_run):
    d, _, _ = first_run
    src = str(d / "cp")
    (d / "busy").mkdir()
    (d / "busy" / "x").write_text("x")
    with pytest.raises(MigrationError, match="not empty.*no spark-keyed-sql checkpoint.*killed part way"):
        ks.migrate_state(src, str(d / "busy"))
    with pytest.raises(MigrationError, match=r"\['merchants'\] are not state of TallyV2"):
        ks.migrate_state(src, str(d / "r1"), to_function="mig_tally_v2")
    with pytest.raises(MigrationError, match="does not convert"):
        ks.migrate_state(
            src, str(d / "r2"), to_function="mig_tally_v2", transform="SELECT user_id, 'many' AS count FROM state"
        )
    # a path that holds no checkpoint (a typo): said so, not "unknown function ''"
    with pytest.raises(CheckpointError, match=r"'.*typo' holds no keyed query's checkpoint"):
        ks.migrate_state(str(d / "typo"), str(d / "r3"))
    assert not (d / "r3").exists()
    # a session that never registered the function: told which class and how to register it
    from spark_keyed_sql import KeyedSQL, UnknownFunctionError

    with pytest.raises(
        UnknownFunctionError, match=r"its class when the checkpoint was written: .*TallyV1\).*--udf mig_tally="
    ):
        KeyedSQL(spark).migrate_state(src, str(d / "r4"))
    # the old checkpoint is untouched and still runs on
    assert ks.read_state(src).count() == 40


def test_a_migration_failing_while_it_writes_leaves_the_destination_as_it_found_it(spark, ks, first_run):
    d, a, _ = first_run
    src = str(d / "cp")
    # fails while the state is written (Spark evaluates the transform's rows only then)
    bad = "SELECT user_id, IF(count > 1, CAST(raise_error('bad count') AS DOUBLE), count) AS count FROM state"
    (d / "was_empty").mkdir()
    for dst, existed in ((d / "fresh", False), (d / "was_empty", True)):
        with pytest.raises(Exception, match="bad count"):
            ks.migrate_state(src, str(dst), to_function="mig_tally_v2", transform=bad)
        assert dst.exists() == existed and (not existed or not list(dst.iterdir()))
    # the same call without the fault goes into the same directory, and the state is whole
    good = "SELECT user_id, count FROM state"
    ks.migrate_state(src, str(d / "was_empty"), to_function="mig_tally_v2", transform=good)
    counts = {u: float(len(evs)) for u, evs in by_key_in_ts_order(a).items()}
    got = {r["user_id"]: r["count"] for r in ks.read_state(str(d / "was_empty")).collect()}
    assert got == counts


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_migrated_checkpoint_refuses_the_other_engine(spark, ks, first_run):
    d, _, _ = first_run
    dst = str(d / "cp_engine")
    ks.migrate_state(str(d / "cp"), dst)
    with pytest.raises(CheckpointError, match="engine 'bulk'"):
        ks.run(
            SQL.format(src=d / "in", fn="mig_tally") + " OPTIONS (engine = 'tws')",
            checkpoint=dst,
            output=str(d / "o_engine"),
        )


def test_a_migration_waits_for_no_running_query_it_is_refused_while_one_runs(spark, ks, tmp_path):
    """A query running on the source would commit a batch between the migration's read of its
    state and its copy of Spark's position files: the migration is refused while one holds the
    source's lease, names it, writes nothing; once the query stops it goes through."""
    import os

    ks.register("mig_live", TallyV1, returns=RETURNS)
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    write_parquet(spark, make_events(5, 2, seed=43), src)
    spark.readStream.schema("user_id string, value double, amount double, merchant string, ts timestamp").parquet(
        src
    ).createOrReplaceTempView("mig_live_src")
    sql = "SELECT user_id, count, bonus FROM mig_live_src GROUP BY KEY user_id WITH STATE mig_live(merchant)"
    q = ks.start(sql, checkpoint=cp, sink=out)
    try:
        q.processAllAvailable()
        with pytest.raises(CheckpointError, match=r"ks\.start"):
            ks.migrate_state(cp, str(tmp_path / "dst"))
        assert not os.path.exists(tmp_path / "dst") or os.listdir(tmp_path / "dst") == []
    finally:
        q.stop()
    assert ks.migrate_state(cp, str(tmp_path / "dst"))["keys"] == 5


# (the record is written the same from either engine's source: one in CI)
@pytest.mark.slow_on("tws")
def test_migrated_checkpoint_runs_on_with_the_type_the_transform_gave(spark, ks, first_run):
    """The fix a refused type change names (a transform into a new checkpoint) is one the next
    run takes: the migrated checkpoint records the target class's layout, not the source's."""
    d, a, b = first_run
    dst = str(d / "cp_marks")
    marks = "SELECT user_id, repeat('|', count) AS count FROM state"
    ks.migrate_state(str(d / "cp"), dst, to_function="mig_marks", transform=marks)
    ks.run(AFTER.format(src=d / "in", fn="mig_marks"), checkpoint=dst, output=str(d / "out_marks"))
    got = [tuple(r) for r in spark.read.parquet(str(d / "out_a")).collect()]
    got += [tuple(r) for r in spark.read.parquet(str(d / "out_marks")).collect()]
    assert sorted(got) == oracle(a, b, bonus_after_a=1)
    counts = {u: len(e) for u, e in by_key_in_ts_order(a + b).items()}
    assert {r.user_id: r["count"] for r in ks.read_state(dst).collect()} == {u: "|" * n for u, n in counts.items()}


# (the drop is the engine-independent record's: one engine in CI)
@pytest.mark.slow_on("tws")
def test_migrate_with_no_transform_drops_what_the_class_no_longer_has(spark, ks, first_run):
    """The function named in another case in its SQL (Mig_Drop) than registered (mig_drop):
    the same function, so its class's dropped attribute is dropped, as a restart drops it."""
    d, a, b = first_run
    cp, dst = str(d / "cp_drop"), str(d / "cp_drop2")
    ks.register("mig_drop", TallyV1, returns=RETURNS)
    ks.run(
        SQL.format(src=d / "in", fn="Mig_Drop"),
        checkpoint=cp,
        output=str(d / "out_drop"),
    )
    ks.register("mig_drop", TallyCountOnly, returns=RETURNS)
    dry = {
        r.user_id: (r.old.asDict(), r.new.asDict()) for r in ks.migrate_state(cp, dst, dry_run=True, sample=5).collect()
    }
    counts = {u: len(e) for u, e in by_key_in_ts_order(a + b).items()}
    merchants = {u: sorted({e["merchant"] for e in evs}) for u, evs in by_key_in_ts_order(a + b).items()}
    assert len(dry) == 5
    for user, (old, new) in dry.items():
        assert new == {"count": counts[user]}
        assert old["count"] == counts[user] and sorted(json.loads(old["merchants"])["$set"]) == merchants[user]
    assert ks.migrate_state(cp, dst)["keys"] == len(counts)
    assert {r.user_id: r["count"] for r in ks.read_state(dst).collect()} == counts
    assert ks.read_state(dst).columns == ["user_id", "count", "batch_id"]

"""Checkpoint, input, output and state on ``viewfs://`` (tests/viewfs.py), on both engines,
through the public API only: ``ks.run`` increments, ``read_state`` now and at an older batch,
``keyed_state(...)``, the change feed, ``INITIAL STATE FROM``, ``migrate_state``, the CLI's
``state show``, and ``ks.start`` stopped and restarted (a second query on its running
checkpoint refused). Python's ``os`` cannot open these URIs, so a passing test shows the
project went through Spark's file system layer; each test also checks that the files landed
in the mounted directory and nowhere else.

One scenario per engine (two incremental runs) is shared by the read-only tests, to keep the
suite short; every expected value is computed here in plain Python from the rows written."""

import json

import pytest
from data import SCHEMA, by_key_in_ts_order, make_events, write_parquet
from viewfs import assert_nothing_written_on_the_side, new_place

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.api.errors import KeyedSQLError
from spark_keyed_sql.sql.errors import KeyedQueryError
from spark_keyed_sql.state.checkpoint import CheckpointError


class VfsTally(StatefulFunction):
    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total = round(self.total + e["value"], 6)
        return {"n": self.n, "total": self.total}


RETURNS = "n bigint, total double"
QUERY = (
    "SELECT user_id, s.n, s.total FROM {src} GROUP BY KEY user_id WITH STATE vfs_tally(value) AS s ORDER BY ts {extra}"
)


def outputs(rows, start=None):
    """(user_id, n, total) per input row, continuing from ``start`` {user: (n, total)}."""
    out = []
    for u, evs in by_key_in_ts_order(rows).items():
        n, total = (start or {}).get(u, (0, 0.0))
        for e in evs:
            n, total = n + 1, round(total + e["value"], 6)
            out.append((u, n, total))
    return sorted(out)


def states(rows, start=None):
    """{user: (n, total)} after ``rows``, continuing from ``start``."""
    st = dict(start or {})
    for u, evs in by_key_in_ts_order(rows).items():
        n, total = st.get(u, (0, 0.0))
        for e in evs:
            n, total = n + 1, round(total + e["value"], 6)
        st[u] = (n, total)
    return st


def rows_of(spark, uri):
    return sorted((r.user_id, r.n, round(r.total, 6)) for r in spark.read.parquet(uri).collect())


@pytest.fixture(scope="module")
def scenario(spark, ks, viewfs_root):
    """Two incremental ``ks.run``s (batch 0: file a, batch 1: file b) with everything on viewfs."""
    ks.register("vfs_tally", VfsTally, returns=RETURNS)
    place = new_place(viewfs_root, f"vfs-{ks.default_engine}")
    src, cp, out = place.uri("in"), place.uri("cp"), place.uri("out")
    a, b = make_events(30, 2, seed=141), make_events(30, 1, seed=142, start_second=50_000)
    sql = QUERY.format(src=f"parquet.`{src}`", extra="")
    write_parquet(spark, a, src)
    first = ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, b, src)
    second = ks.run(sql, checkpoint=cp, output=out)
    return place, a, b, sql, (first, second)


def test_run_increments(spark, ks, scenario):
    place, a, b, sql, (first, second) = scenario
    assert (first["input_rows"], second["input_rows"]) == (len(a), len(b))
    assert ks.run(sql, checkpoint=place.uri("cp"), output=place.uri("out"))["input_rows"] == 0  # nothing new
    assert rows_of(spark, place.uri("out")) == outputs(a + b)
    assert place.local("cp").is_dir() and any(place.local("cp").iterdir())
    assert place.local("out").is_dir()
    assert_nothing_written_on_the_side(place)


def test_read_state_now_and_at_a_version(ks, scenario):
    place, a, b, _, _ = scenario
    cp = place.uri("cp")
    now = {r.user_id: (r.n, round(r.total, 6), r.batch_id) for r in ks.read_state(cp).collect()}
    assert {u: v[:2] for u, v in now.items()} == states(a + b)
    assert {v[2] for v in now.values()} == {1}
    at0 = {r.user_id: (r.n, round(r.total, 6)) for r in ks.read_state(cp, batch_id=0).collect()}
    assert at0 == states(a)
    in_sql = ks.sql(f"SELECT user_id, n FROM keyed_state('{cp}', 'vfs_tally', 0) WHERE n > 1").collect()
    assert sorted(tuple(r) for r in in_sql) == sorted((u, n) for u, (n, _) in states(a).items() if n > 1)


def changes(a, b):
    """The change feed's oracle: (user, variable, change, new value, batch) of batches 0 and 1."""
    s0, s1 = states(a), states(a + b)
    expected = set()
    for u, (n, total) in s0.items():
        expected |= {(u, "n", "upsert", n, 0), (u, "total", "upsert", total, 0)}
    for u, (n, total) in s1.items():
        old = s0.get(u)
        if old is None or old[0] != n:
            expected.add((u, "n", "upsert", n, 1))
        if old is None or old[1] != total:
            expected.add((u, "total", "upsert", total, 1))
    return expected


def test_change_feed(ks, scenario):
    place, a, b, _, _ = scenario
    got = [
        (r.user_id, r.variable, r.change, json.loads(r.new_value)[r.variable], r.batch_id)
        for r in ks.read_state_changes(place.uri("cp")).collect()
    ]
    got = [(u, v, c, round(x, 6) if v == "total" else x, batch) for u, v, c, x, batch in got]
    assert len(got) == len(set(got))
    assert set(got) == changes(a, b)


def _table(text):
    """Rows of the CLI's printed table as dicts."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]


def test_cli_state_show(ks, scenario, capsys):
    from spark_keyed_sql.cli import main

    place, a, b, _, _ = scenario
    for argv, expected in ((["--limit", "100"], states(a + b)), (["--batch", "0", "--limit", "100"], states(a))):
        assert main(["state", "show", place.uri("cp"), *argv]) == 0
        got = {r["user_id"]: (int(r["n"]), round(float(r["total"]), 6)) for r in _table(capsys.readouterr().out)}
        assert got == expected


def test_cli_state_show_changes_up_to_a_batch(ks, scenario, capsys):
    """``state show --changes``: the whole feed; with ``--batch N``, the feed up to batch N."""
    from spark_keyed_sql.cli import main

    place, a, b, _, _ = scenario
    every = {(u, v, c, batch) for u, v, c, _, batch in changes(a, b)}
    first = {x for x in every if x[3] == 0}
    assert first and first != every
    for argv, expected in ((["--changes"], every), (["--changes", "--batch", "0"], first)):
        assert main(["state", "show", place.uri("cp"), *argv, "--limit", "10000"]) == 0
        rows = _table(capsys.readouterr().out)
        assert {(r["user_id"], r["variable"], r["change"], int(r["batch_id"])) for r in rows} == expected


def test_initial_state_from_a_table_on_viewfs(spark, ks, scenario):
    """State at batch 0 saved as Parquet on viewfs, then a new viewfs checkpoint seeded from it
    over new input on viewfs: continues as if the first run had gone on."""
    place, a, _, _, _ = scenario
    ks.read_state(place.uri("cp"), batch_id=0).select("user_id", "n", "total").write.parquet(place.uri("saved"))
    c = make_events(40, 1, seed=143, start_second=90_000)  # 10 keys a has not seen
    write_parquet(spark, c, place.uri("in_c"))
    sql = QUERY.format(src=f"parquet.`{place.uri('in_c')}`", extra=f"INITIAL STATE FROM parquet.`{place.uri('saved')}`")
    summary = ks.run(sql, checkpoint=place.uri("cp_seeded"), output=place.uri("out_seeded"))
    assert summary["input_rows"] == len(c)
    assert rows_of(spark, place.uri("out_seeded")) == outputs(c, start=states(a))
    assert {r.user_id: (r.n, round(r.total, 6)) for r in ks.read_state(place.uri("cp_seeded")).collect()} == states(
        c, start=states(a)
    )
    assert place.local("cp_seeded").is_dir()
    assert_nothing_written_on_the_side(place)


def test_migrate_state_to_viewfs_and_continue(spark, ks, scenario):
    """Runs last on the scenario (it adds a file to the shared input)."""
    place, a, b, sql, _ = scenario
    dst = place.uri("cp_migrated")
    info = ks.migrate_state(place.uri("cp"), dst, partitions=2)
    assert info["keys"] == len(states(a + b)) and info["partitions"] == 2
    c = make_events(35, 1, seed=144, start_second=120_000)
    write_parquet(spark, c, place.uri("in"))  # after the migration: the migrated checkpoint reads just this
    summary = ks.run(sql + " OPTIONS (engine = 'bulk')", checkpoint=dst, output=place.uri("out_migrated"))
    assert summary["input_rows"] == len(c)
    assert rows_of(spark, place.uri("out_migrated")) == outputs(c, start=states(a + b))
    assert {r.user_id: (r.n, round(r.total, 6)) for r in ks.read_state(dst).collect()} == states(a + b + c)
    assert place.local("cp_migrated").is_dir()
    assert_nothing_written_on_the_side(place)


def test_start_stop_restart(spark, ks, viewfs_root):
    ks.register("vfs_tally", VfsTally, returns=RETURNS)
    place = new_place(viewfs_root, f"vfs-start-{ks.default_engine}")
    src, cp, sink = place.uri("in"), place.uri("cp"), place.uri("out")
    files = [make_events(40, 2, seed=s, start_second=10_000 * s) for s in (151, 152, 153)]
    write_parquet(spark, files[0], src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("vfs_live")
    sql = QUERY.format(src="vfs_live", extra="")
    q = ks.start(sql, checkpoint=cp, sink=sink)
    try:  # the checkpoint's lock works there too (no file locks on such stores)
        with pytest.raises(CheckpointError, match="in use by another running query"):
            ks.start(sql, checkpoint=cp, sink=place.uri("out2"))
        q.processAllAvailable()
    finally:
        q.stop()
    assert rows_of(spark, sink) == outputs(files[0])
    write_parquet(spark, files[1], src)
    write_parquet(spark, files[2], src)
    q = ks.start(sql, checkpoint=cp, sink=sink)
    q.processAllAvailable()
    q.stop()
    assert rows_of(spark, sink) == outputs(files[0] + files[1] + files[2])
    assert_nothing_written_on_the_side(place)


class VfsScaled(StatefulFunction):
    """A running total of ``value`` times the factor the broadcast input holds for 'all'."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, e):
        self.total = round(self.total + e["value"] * self.ctx.broadcast("factors")["all"], 6)
        return {"total": self.total}


@pytest.mark.notyet("tws", raises=KeyedQueryError, reason="broadcast inputs on a stream run on engine 'bulk'")
def test_broadcast_input_on_viewfs(spark, ks, viewfs_root):
    """A broadcast directory, the keyed input, the checkpoint (the broadcast state stored once
    in it) and the output all on viewfs: two ``ks.run`` increments with the factor changed
    between them, the second run's rows at the new factor; ``read_state(broadcast=)`` reads it."""
    ks.register("vfs_scaled", VfsScaled, returns="total double")
    place = new_place(viewfs_root, f"vfs-bc-{ks.default_engine}")
    src, factors, cp, out = place.uri("in"), place.uri("factors"), place.uri("cp"), place.uri("out")
    a, b = make_events(20, 2, seed=171), make_events(20, 1, seed=172, start_second=70_000)
    spark.createDataFrame([("all", 2.0)], "name string, factor double").write.parquet(factors)
    sql = (
        f"SELECT user_id, total FROM vfs_scaled(events => TABLE(parquet.`{src}`), "
        f"factors => TABLE(parquet.`{factors}`), key => 'user_id', order_by => 'ts', broadcast => 'factors')"
    )
    write_parquet(spark, a, src)
    ks.run(sql, checkpoint=cp, output=out)
    spark.createDataFrame([("all", 3.0)], "name string, factor double").write.mode("append").parquet(factors)
    write_parquet(spark, b, src)
    ks.run(sql, checkpoint=cp, output=out)
    expected, totals = [], {}
    for factor, rows in ((2.0, a), (3.0, b)):
        for u, evs in by_key_in_ts_order(rows).items():
            for e in evs:
                totals[u] = round(totals.get(u, 0.0) + e["value"] * factor, 6)
                expected.append((u, totals[u]))
    got = sorted((r.user_id, round(r.total, 6)) for r in spark.read.parquet(out).collect())
    assert got == sorted(expected)
    held = [(r.name, r.factor) for r in ks.read_state(cp, broadcast="factors").collect()]
    assert held == [("all", 3.0)]
    assert_nothing_written_on_the_side(place)


@pytest.mark.parametrize("where", ["nosuchscheme://bucket/cp", "viewfs://ks/not-mounted/cp"])
def test_unreachable_checkpoint_is_named(spark, ks, viewfs_root, where):
    """An unknown scheme, or a viewfs path outside every mount link: a clear error naming the
    URI, and nothing written anywhere (the output is not created)."""
    ks.register("vfs_tally", VfsTally, returns=RETURNS)
    place = new_place(viewfs_root, "vfs-bad")
    write_parquet(spark, make_events(5, 1, seed=155), place.uri("in"))
    with pytest.raises(KeyedSQLError, match=where.replace(".", r"\.")):
        ks.run(QUERY.format(src=f"parquet.`{place.uri('in')}`", extra=""), checkpoint=where, output=place.uri("out"))
    assert not place.local("out").exists()


def test_delete_on_a_running_stream_on_viewfs(spark, ks, viewfs_root):
    """The request queue, the running query's pickup and the erase all go through Spark's file
    system layer (on tws: the query restarted around the erase by Spark's state rewriter): the
    key is gone from every file of the mounted checkpoint, and the query continues with it
    afresh."""
    from spark_keyed_sql.engines.tws.erase import has_state_rewriter

    if ks.default_engine == "tws" and not has_state_rewriter(spark):
        pytest.skip("DELETE on engine 'tws' needs Spark 4.2+ (its state rewriter)")
    ks.register("vfs_tally", VfsTally, returns=RETURNS)
    place = new_place(viewfs_root, f"vfs-erase-{ks.default_engine}")
    src, cp, sink = place.uri("in"), place.uri("cp"), place.uri("out")
    first, second = make_events(40, 2, seed=161), make_events(40, 1, seed=162, start_second=60_000)
    write_parquet(spark, first, src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("vfs_erase_live")
    q = ks.start(QUERY.format(src="vfs_erase_live", extra=""), checkpoint=cp, sink=sink, trigger="1 second")
    try:
        q.processAllAvailable()
        victim = sorted(states(first))[0]
        audit = ks.delete_state(cp, where=f"user_id = '{victim}'", timeout=120)
        assert audit["keys_matched"] == 1 and q.isActive
        assert {r.user_id for r in ks.read_state(cp).collect()} == set(states(first)) - {victim}
        needle = victim.encode()
        holding = [p for p in place.local("cp").rglob("*") if p.is_file() and needle in p.read_bytes()]
        assert holding == []
        # whole files into the running stream's input, as a user places them: a writer's
        # `_temporary` directory there, gone while the stream lists it, fails Hadoop's listing on viewfs
        write_parquet(spark, second, place.uri("staged"))
        for f in place.local("staged").glob("part-*"):
            f.rename(place.local("in", f.name))
        q.processAllAvailable()
    finally:
        q.stop()
    want = states(first)
    want.pop(victim)
    after = states(second, start=want)
    assert {r.user_id: (r.n, round(r.total, 6)) for r in ks.read_state(cp).collect()} == after
    assert_nothing_written_on_the_side(place)

"""ks.start over a streaming view (stop, restart) and ks.run incremental batches."""

import datetime as dt
import os
import time

import pytest
from data import SCHEMA, by_key_in_ts_order, clock_moved, make_events, write_parquet

from spark_keyed_sql import KeyedProcessor, ListState, MapState, StatefulFunction, ValueState
from spark_keyed_sql.api.errors import KeyedSQLError, SchemaError
from spark_keyed_sql.engines import ENGINES
from spark_keyed_sql.sql.errors import KeyedQueryError


class RunningSum(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["value"]
        return {"n": self.n, "total": round(self.total, 6)}


def oracle(all_rows):
    out = []
    for u, evs in by_key_in_ts_order(all_rows).items():
        total = 0.0
        for i, e in enumerate(evs, 1):
            total += e["value"]
            out.append((u, i, round(total, 6)))
    return sorted(out)


def _ks_views(spark):
    for _ in range(20):  # Spark's listTables looks each name up: a view dropped meanwhile (the thread
        try:  # that drops an ended query's views) fails the listing, which is then taken again
            return sorted(t.name for t in spark.catalog.listTables() if t.name.startswith("__ks_"))
        except Exception:  # noqa: BLE001
            time.sleep(0.2)
    return sorted(t.name for t in spark.catalog.listTables() if t.name.startswith("__ks_"))


def _views_gone(spark, before, within_s=30.0):
    """The query's views, dropped once it has ended (by a thread waiting for its end)."""
    deadline = time.monotonic() + within_s
    while _ks_views(spark) != before and time.monotonic() < deadline:
        time.sleep(0.2)
    return _ks_views(spark) == before


def test_start_restart_from_checkpoint(spark, ks, tmp_path):
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, sink, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    files = [make_events(150, per_key=2, seed=s, start_second=10_000 * s) for s in (1, 2, 3)]
    write_parquet(spark, files[0], src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("live_events")
    sql = (
        "SELECT user_id, s.n, s.total FROM live_events GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        "ORDER BY ts"
    )
    if not ENGINES[ks.default_engine].capabilities.streams_as_dataframe:  # it runs per micro-batch
        with pytest.raises(KeyedQueryError, match="ks.start / ks.run"):
            ks.sql(sql)
    else:
        assert ks.sql(sql).isStreaming
    before = _ks_views(spark)
    q = ks.start(sql, checkpoint=cp, sink=sink)
    q.processAllAvailable()
    q.stop()
    write_parquet(spark, files[1], src)
    write_parquet(spark, files[2], src)
    q = ks.start(sql, checkpoint=cp, sink=sink)
    q.processAllAvailable()
    assert _ks_views(spark) != before  # (the running query's, read by name by its micro-batches)
    q.stop()
    assert _views_gone(spark, before)  # dropped once it ended: none kept for the session's lifetime
    got = sorted(tuple(r) for r in spark.read.parquet(sink).collect())
    assert got == oracle(files[0] + files[1] + files[2])


def test_run_incremental_exactly_once(spark, ks, tmp_path):
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, out, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    files = [make_events(120, per_key=2, seed=s, start_second=10_000 * s) for s in (4, 5, 6)]
    write_parquet(spark, files[0], src)
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE running_sum(value) AS s ORDER BY ts"
    )
    before = _ks_views(spark)
    first = ks.run(sql, checkpoint=cp, output=out)
    assert _ks_views(spark) == before  # its step and stream views: dropped once it returned
    assert first["input_rows"] == 240 and first["output_rows"] == 240 and first["batches"] == 1
    again = ks.run(sql, checkpoint=cp, output=out)  # nothing new: nothing changes
    assert again["input_rows"] == 0
    assert spark.read.parquet(out).count() == 240
    write_parquet(spark, files[1], src)
    write_parquet(spark, files[2], src)
    third = ks.run(sql, checkpoint=cp, output=out)
    assert third["input_rows"] == 480
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == oracle(files[0] + files[1] + files[2])


def test_run_into_another_output_directory_continues_the_state_and_reads_back(spark, ks, tmp_path):
    """A later ks.run of a checkpoint into a new output directory: the directory holds that
    run's rows (state continued), readers can read it, and the summary counts them (on tws,
    Spark's file sink would log the run's batch alone, which its reader refuses)."""
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    files = [make_events(60, per_key=2, seed=s, start_second=10_000 * s) for s in (7, 8, 9)]
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE running_sum(value) AS s ORDER BY ts"
    )
    for i, part in enumerate(files):
        write_parquet(spark, part, src)
        ks.run(sql, checkpoint=cp, output=str(tmp_path / ("out0" if i < 2 else "out2")))
    earlier = set(oracle(files[0] + files[1]))
    expected = sorted(set(oracle(files[0] + files[1] + files[2])) - earlier)  # the third run's rows
    assert sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out2")).collect()) == expected
    assert sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out0")).collect()) == sorted(earlier)
    write_parquet(spark, make_events(30, per_key=1, seed=10, start_second=50_000), src)
    summary = ks.run(sql, checkpoint=cp, output=str(tmp_path / "out3"))
    assert summary["output_rows"] == 30 == spark.read.parquet(str(tmp_path / "out3")).count()


@pytest.mark.parametrize("spelling", ["{t} AS e", "STREAM {t}", "STREAM({t}) AS e"])
def test_run_reads_a_catalog_table_as_a_stream(spark, ks_auto, tmp_path, spelling):
    """A catalog table, aliased, and Spark 4.1's ``FROM STREAM t`` / ``FROM STREAM(t)`` (taken
    by ks.run / ks.start on every Spark: the table is streamed as any is): read as a stream, each
    ``ks.run`` taking the rows appended since the last (an alias had been taken into the table's
    name; sqlglot had read ``STREAM t`` as a table named STREAM)."""
    table = f"stream_kw_{len(spelling)}"
    ks_auto.register("running_sum", RunningSum, returns="n bigint, total double")
    cols = ("user_id", "value", "amount", "merchant", "ts")
    files = [make_events(40, per_key=2, seed=s, start_second=10_000 * s) for s in (7, 8)]

    def append(rows):
        spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], SCHEMA).write.mode("append").saveAsTable(table)

    append(files[0])
    sql = (
        f"SELECT user_id, s.n, s.total FROM {spelling.format(t=table)} GROUP BY KEY user_id "
        "WITH STATE running_sum(value) AS s ORDER BY ts"
    )
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")
    try:
        assert ks_auto.run(sql, checkpoint=cp, output=out)["input_rows"] == 80
        append(files[1])
        assert ks_auto.run(sql, checkpoint=cp, output=out)["input_rows"] == 80
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == oracle(files[0] + files[1])


@pytest.mark.parametrize(
    "clause, what",
    [("VERSION AS OF 3", "time travel"), ("TABLESAMPLE (10 PERCENT)", "TABLESAMPLE")],
)
def test_run_refuses_a_table_clause_a_streaming_read_cannot_take(spark, ks_auto, tmp_path, clause, what):
    """Such a clause on the source of ks.run is refused by name at its line:column (it had been
    left out: the whole table streamed)."""
    ks_auto.register("running_sum", RunningSum, returns="n bigint, total double")
    sql = f"SELECT user_id, s.n\nFROM stream_clause_t {clause} GROUP BY KEY user_id WITH STATE running_sum(value) AS s"
    with pytest.raises(KeyedQueryError, match=rf"{what}.* read their source as a stream") as refused:
        ks_auto.run(sql, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    assert (refused.value.line, refused.value.col) == (2, 6)
    assert not (tmp_path / "out").exists()


def test_run_over_a_batch_view_of_files(spark, ks, tmp_path):
    """A view made by spark.read (or CREATE TEMPORARY VIEW ... USING) over a directory is read
    as a stream by ks.run: each run takes the files added since the last one. The outer ORDER BY
    orders each micro-batch on bulk; tws, which returns a streaming DataFrame, refuses it."""
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, out, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    files = [make_events(60, per_key=2, seed=s, start_second=10_000 * s) for s in (7, 8)]
    write_parquet(spark, files[0], src)
    spark.read.parquet(src).createOrReplaceTempView("files_view")
    sql = (
        "SELECT user_id, s.n, s.total FROM files_view GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        "ORDER BY ts"
    )
    if not ENGINES[ks.default_engine].capabilities.ordered_stream_output:
        with pytest.raises(KeyedQueryError, match="ORDER BY after WITH STATE running_sum over a streaming source"):
            ks.run(sql + " ORDER BY user_id", checkpoint=cp, output=out)
    else:
        sql += " ORDER BY user_id, n"
    assert ks.run(sql, checkpoint=cp, output=out)["input_rows"] == 120
    write_parquet(spark, files[1], src)
    assert ks.run(sql, checkpoint=cp, output=out)["input_rows"] == 120  # only the new file
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == oracle(files[0] + files[1])


def test_run_checkpoint_in_options(spark, ks, tmp_path):
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, out, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    rows = make_events(50, per_key=2, seed=9)
    write_parquet(spark, rows, src)
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id "
        f"WITH STATE running_sum(value) AS s ORDER BY ts OPTIONS (checkpoint = '{cp}')"
    )
    summary = ks.run(sql, output=out)
    assert summary["output_rows"] == 100
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == oracle(rows)


def test_run_into_a_table(spark, ks, tmp_path):
    table = f"keyed_run_out_{ks.default_engine}"
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    files = [make_events(40, per_key=2, seed=s, start_second=10_000 * s) for s in (7, 8)]
    write_parquet(spark, files[0], src)
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        "ORDER BY ts"
    )
    assert ks.run(sql, checkpoint=cp, output=table)["output_rows"] == 80
    write_parquet(spark, files[1], src)
    assert ks.run(sql, checkpoint=cp, output=table)["output_rows"] == 80
    got = sorted(tuple(r) for r in spark.table(table).collect())
    assert got == oracle(files[0] + files[1])
    spark.sql(f"DROP TABLE {table}")


def test_run_into_a_table_an_earlier_process_made(spark, ks, tmp_path):
    """Spark's default catalog is in memory: the table a first `ks.run` (or CLI run) made is
    gone from the next process's catalog while its directory stays in the warehouse. The next
    run appends to it (it failed creating it again: LOCATION_ALREADY_EXISTS)."""
    import shutil

    table = f"keyed_run_again_{ks.default_engine}"
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    files = [make_events(30, per_key=2, seed=s, start_second=10_000 * s) for s in (17, 18)]
    write_parquet(spark, files[0], src)
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        "ORDER BY ts"
    )
    assert ks.run(sql, checkpoint=cp, output=table)["output_rows"] == 60
    info = {r[0]: r[1] for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()}
    location = info["Location"].removeprefix("file:")
    # the next process: the catalog without the table, its directory as the first run left it
    shutil.copytree(location, str(tmp_path / "kept"))
    spark.sql(f"DROP TABLE {table}")
    shutil.copytree(str(tmp_path / "kept"), location)
    assert not spark.catalog.tableExists(table)
    write_parquet(spark, files[1], src)
    assert ks.run(sql, checkpoint=cp, output=table)["output_rows"] == 60
    got = sorted(tuple(r) for r in spark.table(table).collect())
    assert got == oracle(files[0] + files[1])
    spark.sql(f"DROP TABLE {table}")


def test_run_into_a_table_whose_left_directory_holds_another_schema_is_refused(spark, ks, tmp_path):
    table = f"keyed_run_other_{ks.default_engine}"
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    root = spark.catalog.getDatabase(spark.catalog.currentDatabase()).locationUri.removeprefix("file:")
    left = os.path.join(root, table)
    spark.createDataFrame([("x", "y")], "a string, b string").write.mode("overwrite").parquet(left)
    src = str(tmp_path / "in")
    write_parquet(spark, make_events(5, per_key=1, seed=3), src)
    sql = f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s"
    with pytest.raises(SchemaError, match=rf"output table '{table}' is not in this session's catalog.*another schema"):
        ks.run(sql, checkpoint=str(tmp_path / "cp"), output=table)
    assert not spark.catalog.tableExists(table)
    assert spark.read.parquet(left).collect() == [("x", "y")]  # (left as it was)


def test_run_and_start_over_a_cte(spark, ks, tmp_path):
    """A keyed select reading a CTE (DESIGN: "a keyed select may stand ... in a CTE"): the
    CTE's own tables become the stream, its name stays the CTE's, on ks.run and ks.start."""
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src = str(tmp_path / "in")
    files = [make_events(30, per_key=2, seed=s, start_second=10_000 * s) for s in (11, 12)]
    write_parquet(spark, files[0], src)
    sql = (
        f"WITH src AS (SELECT * FROM parquet.`{src}` WHERE value > 20), "
        "k AS (SELECT user_id, s.n, s.total FROM src GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        "ORDER BY ts) SELECT * FROM k"
    )
    kept = [[e for e in f if e["value"] > 20] for f in files]
    run_out, start_out = str(tmp_path / "run_out"), str(tmp_path / "start_out")
    ks.run(sql, checkpoint=str(tmp_path / "cp_run"), output=run_out)
    q = ks.start(sql, checkpoint=str(tmp_path / "cp_start"), sink=start_out)
    q.processAllAvailable()
    q.stop()
    write_parquet(spark, files[1], src)
    with pytest.raises(KeyedSQLError, match="give output=.* or sink=.*, not both"):
        ks.run(sql, checkpoint=str(tmp_path / "cp_run"), output=run_out, sink=run_out)
    ks.run(sql, checkpoint=str(tmp_path / "cp_run"), sink=run_out)  # (ks.start's name for output=)
    q = ks.start(sql, checkpoint=str(tmp_path / "cp_start"), sink=start_out)
    q.processAllAvailable()
    q.stop()
    expected = oracle(kept[0] + kept[1])
    assert expected and len(expected) < len(files[0] + files[1])  # the CTE's filter mattered
    assert sorted(tuple(r) for r in spark.read.parquet(run_out).collect()) == expected
    assert sorted(tuple(r) for r in spark.read.parquet(start_out).collect()) == expected


class DoorGate(StatefulFunction):
    """Counts a key's rows from its first, whose time plus five minutes is an event-time timer
    that emits the count and forgets the key."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, e):
        if self.count == 0:
            self.ctx.register_timer(e["ts"] + dt.timedelta(minutes=5))
        self.count += 1

    def on_timer(self, key, ts):
        out = {"count": self.count}
        self.ctx.clear_state()
        return out


def _gate_oracle(batches, watermark=dt.timedelta(minutes=1), after=dt.timedelta(minutes=5)):
    """What has fired once every batch ran: Spark's watermark after a batch is its rows' latest
    time less the delay (timers due by it fire in the batch after, or a no-data batch)."""
    first, count, fired, latest = {}, {}, [], None
    for rows in batches:
        for door, ts in sorted(rows, key=lambda r: r[1]):
            first.setdefault(door, ts)
            count[door] = count.get(door, 0) + 1
        latest = max([ts for _, ts in rows] + ([latest] if latest else []))
        for door in sorted(first, key=first.get):
            if first[door] + after <= latest - watermark:
                fired.append((door, count.pop(door)))
                del first[door]
    return sorted(fired)


def test_process_all_available_returns_with_the_due_timers_fired_and_stop_frees_the_checkpoint(spark, ks, tmp_path):
    """Every engine: processAllAvailable() returns once the timers the processed rows' watermark
    made due have fired and committed (Spark's no-data batch; on bulk the timer pump would fire
    them a moment later), and the checkpoint can be started again the moment stop() returns."""
    ks.register("door_gate", DoorGate, returns="count int")
    src, sink, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    t0 = dt.datetime(2026, 3, 3, 12)
    m = lambda n: t0 + dt.timedelta(minutes=n)  # noqa: E731
    batches = [[("d1", m(0)), ("d1", m(1)), ("d2", m(2)), ("d3", m(20))], [("d3", m(21)), ("d4", m(40))]]
    schema = "door string, ts timestamp"
    spark.createDataFrame(batches[0], schema).coalesce(1).write.parquet(src)
    spark.readStream.schema(schema).parquet(src).createOrReplaceTempView("doors")
    sql = (
        "SELECT door, count FROM doors GROUP BY KEY door WITH STATE door_gate(ts) ORDER BY ts "
        "EVENT TIME ts WATERMARK '1 minute'"
    )
    q = ks.start(sql, checkpoint=cp, sink=sink)
    q.processAllAvailable()
    assert sorted(tuple(r) for r in spark.read.parquet(sink).collect()) == _gate_oracle(batches[:1])
    q.stop()
    spark.createDataFrame(batches[1], schema).coalesce(1).write.mode("append").parquet(src)
    q = ks.start(sql, checkpoint=cp, sink=sink)  # (no CheckpointError: the stopped query's lease went with it)
    try:
        q.processAllAvailable()
        assert sorted(tuple(r) for r in spark.read.parquet(sink).collect()) == _gate_oracle(batches)
    finally:
        q.stop()
    assert _gate_oracle(batches) == [("d1", 2), ("d2", 1), ("d3", 2)]  # (the oracle's own reading of the rows)


class TypedCount(KeyedProcessor):
    n = ValueState("bigint", default=0)  # no TTL of its own: the query's TTL clause gives it one

    def process(self, key, rows):
        self.n.update(self.n.get() + len(rows))
        return {"n": self.n.get()}


def test_ttl_clause_is_the_default_ttl_of_typed_state(spark, ks, tmp_path):
    """DESIGN: ``TTL <interval>`` is the default TTL for the function's state, a KeyedProcessor's
    typed variables included: a key idle for longer starts again from the default."""
    ks.register("typed_count", TypedCount, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE typed_count(value) TTL '1 hour'"

    def write(users):
        spark.createDataFrame([(u, 1.0) for u in users], "user_id string, value double").coalesce(1).write.mode(
            "append"
        ).parquet(src)

    runs = [(["a", "a", "b"], 0), (["a"], 0), (["a", "b"], 2)]  # (rows' keys, hours later)
    expected, counts = [], {}
    for users, hours in runs:
        if hours:  # an hour's TTL: every key idle for two hours starts again
            counts = {}
        for u in sorted(set(users)):
            counts[u] = counts.get(u, 0) + users.count(u)
            expected.append((u, counts[u]))
        write(users)
        with clock_moved(spark, hours=hours):
            ks.run(sql, checkpoint=cp, output=out)
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == sorted(expected)
    assert ("a", 1) in expected  # (the oracle saw the expiry)


class TypedKept(KeyedProcessor):  # a count and a map with a one-hour TTL, a list with a day's
    n = ValueState("bigint", default=0, ttl="1 hour")
    seen = ListState("bigint", ttl="1 day")
    last = MapState("string", "bigint", ttl="1 hour")

    def process(self, key, rows):
        self.n.update(self.n.get() + len(rows))
        self.seen.append(len(rows))
        self.last.put("rows", len(rows))
        return {"n": self.n.get()}


def test_read_state_does_not_show_values_past_their_ttl(spark, ks, tmp_path):
    """A key idle past its values' TTL: read_state shows them unset (as a read in the function
    would get them) on every engine, though transformWithState keeps them on disk until the
    key runs again. The oracle: which key ran in which batch, and the batches' times.

    Processing time moves two hours between the batches (tests/data.py clock_moved), not by
    sleeping: a sleep of a few seconds past a few-second TTL failed under load, the run's own
    no-data step at its end (Spark's, firing what is due) coming later than the TTL after the
    batch's clock."""
    ks.register("typed_kept", TypedKept, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE typed_kept(value)"

    def batch(users):
        spark.createDataFrame([(u, 1.0) for u in users], "user_id string, value double").coalesce(1).write.mode(
            "append"
        ).parquet(src)
        ks.run(sql, checkpoint=cp, output=out)

    batch(["a", "b", "b"])
    with clock_moved(spark, hours=2):
        batch(["a"])
        state = {r["user_id"]: r.asDict() for r in ks.read_state(cp).collect()}
    # two hours between the batches' clocks: a's count expired before the second batch, which
    # counted it again from 0; b ran only in the first, so its count and map are past their
    # hour when read (the list's day has not passed)
    assert (state["a"]["n"], state["a"]["last"], list(state["a"]["seen"])) == (1, {"rows": 1}, [1, 1]), state
    assert (state["b"]["n"], state["b"]["last"], list(state["b"]["seen"])) == (None, None, [2]), state


def test_query_identity_is_case_insensitive_as_sql_is(spark, ks, tmp_path):
    """The same query with its function and key written in other case continues the checkpoint
    (SQL names are case-insensitive; it was refused as "another query")."""
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    files = [make_events(20, per_key=1, seed=s, start_second=10_000 * s) for s in (21, 22)]
    sql = f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s"
    write_parquet(spark, files[0], src)
    ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, files[1], src)
    ks.run(sql.replace("GROUP BY KEY user_id", "GROUP BY KEY USER_ID").replace("running_sum(", "RUNNING_SUM("), cp, out)
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == oracle(files[0] + files[1])


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE")
def test_a_checkpoint_in_options_continues_on_the_engine_that_wrote_it(spark, ks_auto, tmp_path):
    """docs: "a checkpoint continues on the engine that wrote it", whether it is given as
    checkpoint= or in OPTIONS; engine names are case-insensitive (OPTIONS (engine = 'AUTO'))."""
    ks_auto.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    files = [make_events(15, per_key=1, seed=s, start_second=10_000 * s) for s in (31, 32, 33)]
    sql = (
        f"SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s "
        f"OPTIONS (checkpoint = '{cp}'{{engine}})"
    )
    write_parquet(spark, files[0], src)
    ks_auto.run(sql.format(engine=", engine = 'tws'"), output=out)
    write_parquet(spark, files[1], src)
    ks_auto.run(sql.format(engine=", engine = 'AUTO'"), output=out)  # auto: the checkpoint's engine, tws
    write_parquet(spark, files[2], src)
    ks_auto.run(sql.format(engine=""), output=out)  # the session's default, auto: the same
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == oracle(files[0] + files[1] + files[2])
    keys = {r["user_id"] for r in files[0] + files[1] + files[2]}
    # keyed_state(checkpoint, NULL): no function named, as keyed_state(checkpoint)
    assert ks_auto.sql(f"SELECT count(*) AS c FROM keyed_state('{cp}', NULL)").first().c == len(keys)


def test_state_metrics_per_batch(spark, ks, tmp_path):
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    a, b = make_events(30, 1, seed=51), make_events(45, 1, seed=52, start_second=80_000)
    sql = f"SELECT user_id, s.n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running_sum(value) AS s"
    write_parquet(spark, a, src)
    m1 = ks.run(sql, checkpoint=cp, output=out)["metrics"]
    write_parquet(spark, b, src)
    m2 = ks.run(sql, checkpoint=cp, output=out)["metrics"]
    data = [m for m in m1 + m2 if m["rows_updated"]]
    assert [m["function"] for m in data] == ["running_sum", "running_sum"]
    # keys holding state after each batch: 30, then the union of both batches' keys
    assert [m["state_rows"] for m in data] == [30, len({r["user_id"] for r in a + b})]
    assert [m["rows_updated"] for m in data] == [30, 45]
    assert all(m["state_bytes"] > 0 for m in data)


def test_run_over_a_batch_view_that_is_not_files_is_a_sentence(spark, ks, tmp_path):
    """ks.run / ks.start over a batch view they cannot read as a stream (not a plain file
    relation): the same error on every engine, naming what would work, nothing written."""
    ks.register("running_sum", RunningSum, returns="n bigint, total double")
    spark.createDataFrame([("u1", 1.0, 1)], "user_id string, value double, ts int").createOrReplaceTempView("rows_view")
    sql = "SELECT user_id, s.n FROM rows_view GROUP BY KEY user_id WITH STATE running_sum(value) AS s"
    with pytest.raises(SchemaError, match=r"ks.run needs a streaming source .*parquet.`/dir`.*use ks.sql for batch"):
        ks.run(sql, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()

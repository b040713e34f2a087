"""DELETE / UPDATE of keyed state on a stopped transformWithState checkpoint (issue 45, engine tws; Spark
4.2+ has the state rewriter it uses): the audit and the state against a plain-Python oracle, no
state file of the checkpoint left but the rewritten version, that version read back without the
key, older batches said to be erased, the query continuing exactly once (the key afresh); an
UPDATE of attributes and of typed value state the same way (the query continuing from the set
values), what it cannot set refused with nothing written; and both on a running ks.start query,
applied by restarting it around the edit (the user's handle going on), or by the next ks.run."""

from __future__ import annotations

import datetime as dt
import glob
import os

import pytest
from data import by_key_in_ts_order, make_events, write_parquet
from processors import Spend
from test_erase import ERASED, SECRET, SQL, Notes, _all_bytes, _batch, _oracle, _outputs, _rows, _state, _written

from spark_keyed_sql import KeyedProcessor, KeyedSQL, ListState, MapState, ValueState
from spark_keyed_sql.api.errors import KeyedSQLError


@pytest.fixture(scope="module")
def kt(spark):
    from spark_keyed_sql.compat import Feature, features
    from spark_keyed_sql.engines.tws.erase import has_state_rewriter

    if not features(spark).has(Feature.TRANSFORM_WITH_STATE):
        pytest.skip("transformWithState needs Spark 4.0+")
    if not has_state_rewriter(spark):
        pytest.skip("DELETE on engine 'tws' needs Spark 4.2+ (its state rewriter)")
    ks = KeyedSQL(spark, engine="tws")
    ks.register("erase_notes", Notes, returns="n int, total double")
    return ks


def _history(spark, ks, tmp_path, runs=3):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = [_rows(b) for b in range(runs)]
    for rows in batches:
        _batch(spark, src, rows)
        ks.run(SQL.format(src=src), checkpoint=cp, output=out)
    return src, cp, out, batches


def test_delete_on_a_stopped_tws_checkpoint_erases_and_the_query_continues_once(spark, kt, tmp_path):
    src, cp, out, batches = _history(spark, kt, tmp_path)
    audit = kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    assert audit["operation"] == "delete" and audit["keys_matched"] == 1 and audit["batch_id"] == 3
    assert _state(kt, cp) == _oracle(batches, erased_after=2)
    # the state files left: one version, the rewritten one, in every partition
    versions = {os.path.basename(p).split(".")[0] for p in glob.glob(f"{cp}/state/*/*/*.zip")}
    assert versions == {"4"}, versions
    assert not glob.glob(f"{cp}/state/*/*/*.changelog")
    for needle in (ERASED.encode(), SECRET.encode()):
        assert [p for p, data in _all_bytes(os.path.join(cp, "state")).items() if needle in data] == []
    with pytest.raises(KeyedSQLError, match="history before batch 3 was erased"):
        kt.read_state(cp, batch_id=2)
    empty = kt.read_state_changes(cp, from_batch=3)  # (the batch the message names): no change yet
    assert empty.columns == ["user_id", "variable", "change", "new_value", "batch_id"] and empty.collect() == []
    with pytest.raises(KeyedSQLError, match=r"cannot read changes for batches \(3, 4\]; it keeps 3\.\.3"):
        kt.read_state_changes(cp, from_batch=3, to_batch=4).collect()
    batches.append(_rows(3))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kt, cp) == _oracle(batches, erased_after=2)  # the erased key afresh, the others once
    # the output stays readable across the edit's batch (its file sink log has an entry for it)
    assert _written(spark, out) == _outputs(batches, {2: None})
    again = kt.delete_state(cp, where="user_id = 'nobody'")
    assert again["keys_matched"] == 0 and again["batch_id"] is None


def test_the_audit_names_the_batches_that_changed_the_erased_key_and_no_changelog_keeps_it(spark, kt, tmp_path):
    """output_batches on tws: read from Spark's change feed of the checkpoint's changelogs (the
    engine's streams keep them) before the edit removes that history; the erased key ran in
    batches 0, 2 and 4 only. Afterwards no changelog or snapshot holds it."""
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = []
    for b in range(6):
        rows = [r for r in _rows(b) if b % 2 == 0 or r[0] != ERASED]
        batches.append(rows)
        _batch(spark, src, rows)
        kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert glob.glob(f"{cp}/state/*/*/*.changelog")  # (the history the audit reads: it can fail)
    expected = [b for b, rows in enumerate(batches) if any(r[0] == ERASED for r in rows)]
    assert expected == [0, 2, 4]
    audit = kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    assert audit["keys_matched"] == 1 and audit["batch_id"] == 6
    assert audit["output_batches"] == expected
    assert audit["versions_rewritten"] == 6  # the state of batches 0..5, all kept (Spark keeps 100)
    assert not glob.glob(f"{cp}/state/*/*/*.changelog")
    for needle in (ERASED.encode(), SECRET.encode()):
        assert [p for p, data in _all_bytes(os.path.join(cp, "state")).items() if needle in data] == []
    # batches after the erase: their changelogs again, and a second erase reads them
    batches.append(_rows(6))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kt, cp) == _oracle(batches, erased_after=5)
    again = kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    assert again["keys_matched"] == 1 and again["output_batches"] == [7]
    assert again["versions_rewritten"] == 2  # the edit's version and batch 7's: the older were erased


def test_the_audits_look_back_is_bounded_by_the_session(spark, kt, tmp_path):
    """spark.keyedsql.editOutputBatches: the newest batches whose changelogs the audit reads (a
    pass over them, bounded)."""
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    for b in range(4):  # the erased key in batches 0 and 2
        _batch(spark, src, [r for r in _rows(b) if b % 2 == 0 or r[0] != ERASED])
        kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    conf = "spark.keyedsql.editOutputBatches"
    spark.conf.set(conf, "one")
    try:
        with pytest.raises(KeyedSQLError, match=f"{conf} must be a whole number of batches, got 'one'"):
            kt.delete_state(cp, where=f"user_id = '{ERASED}'")
        spark.conf.set(conf, "2")  # batches 2 and 3
        audit = kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    finally:
        spark.conf.unset(conf)
    assert audit["keys_matched"] == 1 and audit["output_batches"] == [2]


def test_an_output_table_reads_whole_after_a_delete(spark, kt, tmp_path):
    """ks.run into a table (a file table: Spark's file sink at its location): after the edit's
    batch, which Spark never ran, the next run's rows and the earlier ones all read back."""
    src, cp, table = str(tmp_path / "in"), str(tmp_path / "cp"), "erase_tws_output_table"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    try:
        batches = [_rows(0)]
        _batch(spark, src, batches[0])
        kt.run(SQL.format(src=src), checkpoint=cp, output=table)
        assert kt.delete_state(cp, where=f"user_id = '{ERASED}'")["batch_id"] == 1
        batches.append(_rows(1))
        _batch(spark, src, batches[-1])
        kt.run(SQL.format(src=src), checkpoint=cp, output=table)
        got = sorted((r.user_id, r.n, r.total) for r in spark.table(table).collect())
        assert got == _outputs(batches, {0: None})
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_session_that_cannot_rewrite_tws_state_refuses_before_queueing_and_explain_says_so(
    spark, kt, tmp_path, monkeypatch
):
    """A Spark before 4.2 (no state rewriter), as a Spark Connect client (no JVM): the edit is
    refused at the call, naming why, with nothing queued in the checkpoint; EXPLAIN KEYED says
    it would not run from this session."""
    from spark_keyed_sql.engines.tws import erase as tws_erase

    _, cp, _, batches = _history(spark, kt, tmp_path, runs=1)
    monkeypatch.setattr(tws_erase, "has_state_rewriter", lambda spark: False)
    with pytest.raises(KeyedSQLError, match=r"engine 'tws'\): needs Spark 4\.2 or newer"):
        kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    assert not glob.glob(f"{cp}/edits/*")
    (plan,) = kt.sql(f"EXPLAIN KEYED DELETE FROM keyed_state('{cp}') WHERE user_id = '{ERASED}'").collect()
    assert "runs:      NOT from this session: needs Spark 4.2 or newer" in plan[0], plan[0]
    assert _state(kt, cp) == _oracle(batches)


def test_an_empty_batch_a_crashed_delete_left_is_taken_over(spark, kt, tmp_path):
    """A DELETE killed after it added its empty batch to the offset log (before the rewrite and
    the commit): the state is the old one; the next DELETE takes the batch over and finishes."""
    src, cp, out, batches = _history(spark, kt, tmp_path, runs=2)
    with open(f"{cp}/offsets/1") as f, open(f"{cp}/offsets/2", "w") as g:
        g.write(f.read())
    assert _state(kt, cp) == _oracle(batches)
    audit = kt.delete_state(cp, where=f"user_id = '{ERASED}'")
    assert audit["keys_matched"] == 1 and audit["batch_id"] == 2
    assert _state(kt, cp) == _oracle(batches, erased_after=1)
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kt, cp) == _oracle(batches, erased_after=1)


@pytest.fixture
def compact_every_3(spark):
    """The file sink log compacted every 3 batches (Spark's default 10): batch 2 is a compaction."""
    key = "spark.sql.streaming.fileSink.log.compactInterval"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "3")
    yield
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


def test_update_on_a_stopped_tws_checkpoint_changes_exactly_the_matched_keys(spark, kt, tmp_path, compact_every_3):
    src, cp, out, batches = _history(spark, kt, tmp_path, runs=2)
    limit = 25.0

    def fix(state):
        for u, (n, total, _note) in list(state.items()):
            if total > limit:
                state[u] = (n, round(total * 10, 6), "fixed")

    def fix_output(state):
        for u, (n, total) in list(state.items()):
            if total > limit:
                state[u] = (n, round(total * 10, 6))

    expected = _oracle(batches, erased_after=1, updates=fix)
    changed = [u for u, (_, t, _) in _oracle(batches).items() if t > limit]
    assert 0 < len(changed) < len(expected)
    row = kt.sql(
        f"UPDATE keyed_state('{cp}', 'erase_notes') SET total = total * 10, note = 'fixed' WHERE total > {limit}"
    )
    (audit,) = row.collect()
    assert audit.operation == "update" and audit.keys_matched == len(changed) and audit.state_rows == len(changed)
    assert audit.batch_id == 2
    assert _state(kt, cp) == expected
    for u in changed:  # the changed keys' old values are in no state file (the history before was dropped)
        assert [
            p for p, data in _all_bytes(os.path.join(cp, "state")).items() if f"SECRET-{u}-xyz".encode() in data
        ] == []
    with pytest.raises(KeyedSQLError, match="history before batch 2 was erased"):
        kt.read_state(cp, batch_id=1)
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kt, cp) == _oracle(batches, erased_after=1, updates=fix)  # continued from the set values
    # the edit's batch 2 is a compaction of the output's file sink log: the output reads whole
    assert os.path.exists(f"{out}/_spark_metadata/2.compact")
    assert _written(spark, out) == _outputs(batches, {1: fix_output})


def test_update_on_tws_refuses_what_it_cannot_set_and_writes_nothing(spark, kt, tmp_path):
    _, cp, _, _ = _history(spark, kt, tmp_path, runs=1)
    before = {k: v for k, v in _all_bytes(cp).items() if "/edits/" not in k}
    cases = [
        ({"n": "'many'"}, r"column 'n' is bigint and cannot hold 'many' \(key user_id="),
        ({"n": "1.5"}, r"column 'n' is bigint and cannot hold"),
        ({"user_id": "'x'"}, "a key column cannot be set"),
        ({"nope": "1"}, r"SET nope: no such state column \(state columns: total, n, note\)"),
        ({"total": "no_such_col + 1"}, "no_such_col"),
    ]
    for assignments, message in cases:
        with pytest.raises(KeyedSQLError, match=message):
            kt.update_state(cp, set=assignments, where="true")
        if "no such" in message:  # a wrong name is refused when the WHERE matches no key too
            with pytest.raises(KeyedSQLError, match=message):
                kt.update_state(cp, set=assignments, where="user_id = 'nobody'")
    after = {k: v for k, v in _all_bytes(cp).items() if "/edits/" not in k}
    assert after == before


def test_delete_and_update_on_a_running_tws_query_restart_it_around_the_edit(spark, kt, tmp_path):
    """ks.start's query holds the checkpoint: the DELETE is queued, the query stopped at a batch
    boundary, the edit applied, the query started again; the caller gets the audit, the user's
    handle (and a thread waiting on it) goes on with the restarted query, which continues
    exactly once (the erased key afresh), and an UPDATE after it goes the same way."""
    import threading

    src, cp, sink, batches = _history(spark, kt, tmp_path, runs=1)  # (the stream goes on writing ks.run's output)
    q = kt.start(SQL.format(src=src), checkpoint=cp, sink=sink)
    waited: list = []
    waiter = threading.Thread(target=lambda: waited.append(q.awaitTermination()), daemon=True)
    try:
        q.processAllAvailable()
        waiter.start()
        audit = kt.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=120)
        assert audit["keys_matched"] == 1 and audit["operation"] == "delete"
        assert _state(kt, cp) == _oracle(batches, erased_after=0)
        for needle in (ERASED.encode(), SECRET.encode()):
            assert [p for p, data in _all_bytes(os.path.join(cp, "state")).items() if needle in data] == []
        assert q.isActive and waiter.is_alive() and waited == []  # the same handle, still running
        batches.append(_rows(1))
        _batch(spark, src, batches[-1])
        q.processAllAvailable()
        assert _state(kt, cp) == _oracle(batches, erased_after=0)  # the erased key afresh, the others once

        def double(state):
            for u, (n, total, _note) in list(state.items()):
                if u == "k01":
                    state[u] = (n, round(total * 2, 6), "doubled")

        audit = kt.update_state(cp, set={"total": "total * 2", "note": "'doubled'"}, where="user_id = 'k01'")
        assert audit["keys_matched"] == 1 and audit["operation"] == "update"
        batches.append(_rows(2))
        _batch(spark, src, batches[-1])
        q.processAllAvailable()

        expected = _oracle(batches[:1], erased_after=0)
        for b, rows in enumerate(batches[1:], start=1):  # the erase after batch 0, the update after batch 1
            for u, v, _ in sorted(rows, key=lambda r: r[2]):
                n, total, _note = expected.get(u, (0, 0.0, ""))
                expected[u] = (n + 1, round(total + v, 6), f"SECRET-{u}-xyz")
            if b == 1:
                double(expected)
        assert _state(kt, cp) == expected
        assert q.isActive and waiter.is_alive()

        # the output, read across the two edits' batches: every event's row, the erased key afresh
        # after batch 0, k01's total doubled after batch 1
        def doubled(state):
            state["k01"] = (state["k01"][0], round(state["k01"][1] * 2, 6))

        assert _written(spark, sink) == _outputs(batches, {0: None, 1: doubled})
    finally:
        q.stop()
    waiter.join(timeout=60)
    assert not waiter.is_alive() and not q.isActive
    assert not glob.glob(f"{cp}/edits/*.request.json")


def test_an_edit_on_a_running_tws_query_into_a_memory_sink_is_refused_and_the_query_runs_on(spark, kt, tmp_path):
    """Spark does not recover a memory sink's query from its checkpoint, so it cannot be
    restarted around the edit: the request is answered with why, nothing changes."""
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    batches = [_rows(0)]
    _batch(spark, src, batches[0])
    q = kt.start(SQL.format(src=src), checkpoint=cp, sink="memory:ks_erase_tws_memory")
    try:
        q.processAllAvailable()
        with pytest.raises(KeyedSQLError, match="writes to a memory sink, which Spark does not recover"):
            kt.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=60)
        assert q.isActive
    finally:
        q.stop()
    assert _state(kt, cp) == _oracle(batches)


def test_a_delete_queued_before_ks_run_is_applied_when_the_run_takes_the_checkpoint(spark, kt, tmp_path):
    """A request left queued (its caller gave up waiting) is applied by the next ks.run before
    its batch: the batch then sees the key afresh."""
    from spark_keyed_sql.state.edit_queue import EditQueue, EditRequest

    src, cp, out, batches = _history(spark, kt, tmp_path, runs=1)
    queue = EditQueue(cp, spark)
    request = EditRequest.new("delete", "erase_notes", f"user_id = '{ERASED}'", ())
    queue.submit(request)
    batches.append(_rows(1))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    answer = queue.answer(request.id)
    assert answer is not None and answer.error is None and answer.audit["keys_matched"] == 1
    assert _state(kt, cp) == _oracle(batches, erased_after=0)


def _spend_run(spark, kt, name, d, events, cp=None):
    """Spend registered as ``name``, run once over ``events`` into a new checkpoint (``cp``, by
    default under ``d``): (its statement, the checkpoint)."""
    kt.register(name, Spend)
    sql = f"SELECT user_id, s.* FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE {name}(amount, merchant, ts) AS s"
    write_parquet(spark, events, str(d / "in"))
    cp = cp or str(d / "cp")
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    return sql, cp


def test_update_of_typed_value_state_keeps_the_rest(spark, kt, tmp_path):
    """Spend (tests/processors.py): ``total`` a ValueState with a TTL, ``recent`` a ListState,
    ``by_merchant`` a MapState. SET total on some keys: their totals move by exactly that, the
    list and map state of every key and the other keys' totals stay as the oracle has them,
    and the next run adds to the set totals (the TTL'd value stored, not expired). SET total =
    NULL unsets it: read as NULL, and the next run starts it from its default (0.0)."""
    d = tmp_path
    first, second = make_events(12, 2, seed=41), make_events(12, 1, seed=42, start_second=50_000)
    sql, cp = _spend_run(spark, kt, "spend_upd", d, first)
    picked = sorted(by_key_in_ts_order(first))[:3]
    audit = kt.update_state(
        cp, set={"total": "total + 1000"}, where="user_id IN (" + ", ".join(f"'{u}'" for u in picked) + ")"
    )
    assert audit["keys_matched"] == 3 and audit["batch_id"] == 1
    unset = sorted(by_key_in_ts_order(first))[3]
    assert kt.update_state(cp, set={"total": "NULL"}, where=f"user_id = '{unset}'")["keys_matched"] == 1

    def check(events, later=()):
        rows = {r.user_id: r for r in kt.read_state(cp).collect()}
        assert set(rows) == set(by_key_in_ts_order(events))
        for u, evs in by_key_in_ts_order(events).items():
            if u == unset:  # unset after the first batch: NULL, then only what came since
                since = [e["amount"] for e in later if e["user_id"] == u]
                assert (rows[u].total is None) if not since else rows[u].total == pytest.approx(sum(since))
            else:
                assert rows[u].total == pytest.approx(sum(e["amount"] for e in evs) + (1000 if u in picked else 0))
            per: dict[str, float] = {}
            for e in evs:
                per[e["merchant"]] = per.get(e["merchant"], 0.0) + e["amount"]
            assert rows[u].by_merchant == pytest.approx(per)
            assert [x.amount for x in rows[u].recent] == [e["amount"] for e in evs][-3:]

    check(first)
    write_parquet(spark, second, str(d / "in"))
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    assert unset in {e["user_id"] for e in second}
    check(first + second, later=second)


def _spend_oracle(events, state=None):
    """Spend's state (tests/processors.py) after ``events``, from ``state`` (user -> dict of
    total, recent [(amount, ts)], by_merchant {m: amount}; None: unset) on."""
    out = {u: dict(s) for u, s in (state or {}).items()}
    for u, evs in by_key_in_ts_order(events).items():
        s = out.setdefault(u, {"total": None, "recent": None, "by_merchant": None})
        s["total"] = (s["total"] or 0.0) + sum(e["amount"] for e in evs)
        recent = list(s["recent"] or [])
        per = dict(s["by_merchant"] or {})
        for e in evs:
            recent.append((e["amount"], e["ts"]))
            per[e["merchant"]] = per.get(e["merchant"], 0.0) + e["amount"]
        s["recent"], s["by_merchant"] = recent[-3:], per
    return out


def _spend_state(kt, cp):
    return {
        r.user_id: {
            "total": r.total,
            "recent": None if r.recent is None else [(x.amount, x.ts) for x in r.recent],
            "by_merchant": r.by_merchant,
        }
        for r in kt.read_state(cp).collect()
    }


def _same_spend(got, want):
    assert set(got) == set(want)
    for u, w in want.items():
        g = got[u]
        assert g["total"] == pytest.approx(w["total"]), u
        assert (g["recent"] is None) == (w["recent"] is None), (u, g, w)
        if w["recent"] is not None:
            assert [ts for _, ts in g["recent"]] == [ts for _, ts in w["recent"]], u
            assert [a for a, _ in g["recent"]] == pytest.approx([a for a, _ in w["recent"]]), u
        assert (g["by_merchant"] is None) == (w["by_merchant"] is None), (u, g, w)
        if w["by_merchant"] is not None:
            assert g["by_merchant"] == pytest.approx(w["by_merchant"]), u


@pytest.mark.parametrize("engine", ["bulk", "tws"])
def test_update_sets_list_and_map_variables_and_the_query_continues_from_them(spark, engine, request, tmp_path):
    """SET of ListState / MapState variables (Spend: ``recent``, ``by_merchant``): replaced on the
    matched keys (several elements in order, a map with new keys), cleared by NULL or an empty
    map, set from their own value (``slice``) beside a value variable; every other key and
    variable as the oracle has them, no old entry of an edited key left in any state file, and
    the next run appends to the set lists and adds to the set maps: the same on both engines
    (tws's checkpoint on viewfs://, which only Spark's file system layer reaches: the state
    schema file the list's row counter is told from is read through it)."""
    import datetime as dt

    from viewfs import assert_nothing_written_on_the_side, new_place

    kt = request.getfixturevalue("kt") if engine == "tws" else KeyedSQL(spark, engine="bulk")
    d = tmp_path
    first, second = make_events(12, 2, seed=43), make_events(12, 2, seed=44, start_second=50_000)
    place = new_place(request.getfixturevalue("viewfs_root"), "vfs-coll") if engine == "tws" else None
    sql, cp = _spend_run(spark, kt, "spend_coll", d, first, cp=place and place.uri("cp"))
    want = _spend_oracle(first)
    _same_spend(_spend_state(kt, cp), want)
    a, b, c, e = sorted(want)[:4]
    old = [x for u in (a, b, c) for x, _ in want[u]["recent"]]
    for where in ("true", "false"):  # a value of a type the column's cannot be cast from: refused, matching or not
        with pytest.raises(KeyedSQLError, match=r"column 'recent' is array<struct<amount:double,ts:timestamp>> and "):
            kt.update_state(cp, set={"recent": "array('x')"}, where=where)
    t0 = dt.datetime(2025, 6, 1, 12, 0, 0)
    audit = kt.update_state(
        cp,
        set={
            "recent": "array(named_struct('amount', 1.25D, 'ts', TIMESTAMP'2025-06-01 12:00:00'), "
            "named_struct('amount', 2.5D, 'ts', TIMESTAMP'2025-06-01 12:00:01'))",
            "by_merchant": "map('zeta', 7.0D, 'acme', 0.5D)",
        },
        where=f"user_id IN ('{a}', '{b}')",
    )
    assert audit["keys_matched"] == 2 and audit["batch_id"] == 1
    for u in (a, b):
        want[u] |= {
            "recent": [(1.25, t0), (2.5, t0 + dt.timedelta(seconds=1))],
            "by_merchant": {"zeta": 7.0, "acme": 0.5},
        }
    assert (
        kt.update_state(cp, set={"recent": "NULL", "by_merchant": "map()"}, where=f"user_id = '{c}'")["keys_matched"]
        == 1
    )
    want[c] |= {"recent": None, "by_merchant": None}
    sql_set = {"total": "total + 1", "recent": "slice(recent, 1, 1)"}
    assert kt.update_state(cp, set=sql_set, where=f"user_id = '{e}'")["keys_matched"] == 1
    want[e] |= {"total": want[e]["total"] + 1, "recent": want[e]["recent"][:1]}
    _same_spend(_spend_state(kt, cp), want)
    # the replaced and cleared keys' old list amounts are in no state file (each a double's 8 bytes)
    import struct

    files = _all_bytes(place.local("cp") if place else cp)
    assert len(files) > 5
    for amount in old:
        needle = struct.pack("<d", amount)
        assert [p for p, data in files.items() if needle in data] == [], amount
    write_parquet(spark, second, str(d / "in"))
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    _same_spend(_spend_state(kt, cp), _spend_oracle(second, want))
    if place:
        assert_nothing_written_on_the_side(place)


class _Seen(KeyedProcessor):
    """List and map state with a TTL, under a key of two columns (a string and an int)."""

    merchants = ListState("string", ttl="1 hour")
    per_minute = MapState("int", "bigint", ttl="1 hour")
    returns = "n bigint"

    def process(self, key, rows):
        for r in rows.sort_values("ts").itertuples():
            self.merchants.append(r.merchant)
            m = int(r.ts.minute)
            self.per_minute.put(m, (self.per_minute.get(m) or 0) + 1)
        yield {"n": len(list(self.merchants.get()))}


@pytest.mark.parametrize("engine", ["bulk", "tws"])
def test_update_of_list_and_map_variables_with_a_ttl_under_a_two_column_key(spark, engine, request, tmp_path):
    """The set entries (a list longer than the one it replaces) live the variable's TTL from the
    edit (tws: read after 30 minutes, there; after 2 hours, expired, as entries a run wrote then
    would be); the key's two columns are matched and written as the engine's own key: the next
    run appends to the set values, and a run two hours on finds every entry expired, the set ones
    too. The same on both engines."""
    import datetime as dt

    from data import clock_moved

    kt = request.getfixturevalue("kt") if engine == "tws" else KeyedSQL(spark, engine="bulk")
    kt.register("seen_coll", _Seen)
    d = tmp_path
    runs = [make_events(6, 3, seed=45), make_events(6, 2, seed=46, start_second=70)]
    for rows in runs:
        for r in rows:  # (a user's rows in both buckets: two keys a user)
            r["bucket"] = r["ts"].second % 2
    sql = (
        f"SELECT user_id, bucket, s.* FROM parquet.`{d}/in` GROUP BY KEY user_id, bucket "
        "WITH STATE seen_coll(merchant, ts) AS s"
    )

    def write(rows):
        spark.createDataFrame(
            [(r["user_id"], r["bucket"], r["merchant"], r["ts"]) for r in rows],
            "user_id string, bucket int, merchant string, ts timestamp",
        ).coalesce(1).write.mode("append").parquet(str(d / "in"))

    def oracle(events, state):
        out = {k: (list(m or []), dict(p or {})) for k, (m, p) in state.items()}
        for r in sorted(events, key=lambda r: r["ts"]):
            m, p = out.setdefault((r["user_id"], r["bucket"]), ([], {}))
            m.append(r["merchant"])
            p[r["ts"].minute] = p.get(r["ts"].minute, 0) + 1
        return out

    def state():
        return {(r.user_id, r.bucket): (r.merchants, r.per_minute) for r in kt.read_state(cp).collect()}

    write(runs[0])
    cp = str(d / "cp")
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    want = oracle(runs[0], {})
    assert state() == want
    picked = sorted(want)[:2]
    where = " OR ".join(f"(user_id = '{u}' AND bucket = {b})" for u, b in picked)
    audit = kt.update_state(
        cp, set={"merchants": "array('zz', 'yy', 'zz', 'xx')", "per_minute": "map(59, 5L)"}, where=where
    )
    assert audit["keys_matched"] == 2
    for k in picked:
        assert len(want[k][0]) < 4
        want[k] = (["zz", "yy", "zz", "xx"], {59: 5})
    assert state() == want
    if engine == "tws":  # (read_state on tws leaves out what is past its TTL at the batch's time)
        with clock_moved(spark, hours=0.5):
            assert state() == want
        with clock_moved(spark, hours=2):  # every entry past its TTL, the set ones too
            assert state() == {k: (None, None) for k in want}
    write(runs[1])
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    want = oracle(runs[1], want)
    assert state() == want
    # one row for every key, two hours on
    runs.append([dict(r, merchant="last", ts=r["ts"] + dt.timedelta(minutes=10)) for r in runs[0]])
    runs[2] = list({(r["user_id"], r["bucket"]): r for r in runs[2]}.values())
    write(runs[2])
    with clock_moved(spark, hours=2):
        kt.run(sql, checkpoint=cp, output=str(d / "out"))
        assert state() == oracle(runs[2], {})


class _Tally(KeyedProcessor):
    """A value variable every key has and a list only some keys have (amounts over 40)."""

    last = ValueState("string")
    items = ListState("double")
    returns = "n bigint"

    def process(self, key, rows):
        for r in rows.sort_values("ts").itertuples():
            self.last.update(r.merchant)
            if r.amount > 40:
                self.items.append(float(r.amount))
        yield {"n": len(list(self.items.get()))}


def _tally_oracle(events, state, key=lambda r: r["user_id"]):
    out = {k: dict(v) for k, v in state.items()}
    for r in sorted(events, key=lambda r: r["ts"]):
        s = out.setdefault(key(r), {"last": None, "items": None})
        s["last"] = r["merchant"]
        if r["amount"] > 40:
            s["items"] = [*(s["items"] or []), r["amount"]]
    return out


# CI: keyed on tws, unkeyed on bulk; the other two pairs in the slow tier (CI's time budget)
@pytest.mark.parametrize(
    "engine, keyed",
    [
        ("tws", True),
        ("bulk", False),
        pytest.param("tws", False, marks=pytest.mark.slow),
        pytest.param("bulk", True, marks=pytest.mark.slow),
    ],
)
def test_update_sets_a_list_where_the_key_had_none_beside_a_value_set_to_null(spark, engine, keyed, request, tmp_path):
    """SET last = NULL (its row, the key's only one, removed) and items = array(...) (a list the
    key never had): the key keeps the new list; keyed and unkeyed (one group: WITH STATE without
    GROUP BY KEY), and the next run appends to it. The same on both engines."""
    kt = request.getfixturevalue("kt") if engine == "tws" else KeyedSQL(spark, engine="bulk")
    kt.register("tally_coll", _Tally)
    d = tmp_path
    first, second = make_events(10, 2, seed=48), make_events(10, 2, seed=49, start_second=500)
    group = "GROUP BY KEY user_id " if keyed else ""
    sql = (
        f"SELECT {'user_id, ' if keyed else ''}s.* FROM parquet.`{d}/in` {group}"
        "WITH STATE tally_coll(merchant, amount, ts) AS s"
    )
    key = (lambda r: r["user_id"]) if keyed else (lambda r: None)
    write_parquet(spark, first, str(d / "in"))
    cp = str(d / "cp")
    kt.run(sql, checkpoint=cp, output=str(d / "out"))

    def state():
        return {
            (r.user_id if keyed else None): {"last": r.last, "items": r["items"]} for r in kt.read_state(cp).collect()
        }

    want = _tally_oracle(first, {}, key)
    assert state() == want
    if keyed:
        bare = sorted(k for k, v in want.items() if v["items"] is None)[0]  # a key with no list yet
        where = f"user_id = '{bare}'"
    else:
        bare, where = None, "true"
    audit = kt.update_state(cp, set={"last": "NULL", "items": "array(1.5D, 2.5D)"}, where=where)
    assert audit["keys_matched"] == 1
    want[bare] = {"last": None, "items": [1.5, 2.5]}
    assert state() == want
    write_parquet(spark, second, str(d / "in"))
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    assert state() == _tally_oracle(second, want, key)


class _Tags(KeyedProcessor):
    """A value variable holding an array (with a TTL): set whole, not as a list variable."""

    tags = ValueState("array<string>", ttl="1 hour")
    returns = "n bigint"

    def process(self, key, rows):
        cur = list(self.tags.get() or [])
        cur += [r.merchant for r in rows.sort_values("ts").itertuples()]
        self.tags.update(cur)
        yield {"n": len(cur)}


@pytest.mark.parametrize("engine", ["bulk", "tws"])
def test_update_of_a_value_variable_holding_an_array_keeps_it_a_value(spark, engine, request, tmp_path):
    """SET of a ValueState<array<string>> with a TTL: set as a value (an empty array stays an
    empty array, one expiry for the value), and the next run appends to it."""
    kt = request.getfixturevalue("kt") if engine == "tws" else KeyedSQL(spark, engine="bulk")
    kt.register("tags_upd", _Tags)
    d = tmp_path
    first, second = make_events(6, 2, seed=50), make_events(6, 1, seed=51, start_second=100)
    sql = f"SELECT user_id, s.* FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE tags_upd(merchant, ts) AS s"
    write_parquet(spark, first, str(d / "in"))
    cp = str(d / "cp")
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    want = {u: [e["merchant"] for e in evs] for u, evs in by_key_in_ts_order(first).items()}
    a, b = sorted(want)[:2]
    assert kt.update_state(cp, set={"tags": "array('a')"}, where=f"user_id = '{a}'")["keys_matched"] == 1
    assert kt.update_state(cp, set={"tags": "array()"}, where=f"user_id = '{b}'")["keys_matched"] == 1
    want[a], want[b] = ["a"], []
    assert {r.user_id: r.tags for r in kt.read_state(cp).collect()} == want
    write_parquet(spark, second, str(d / "in"))
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    for u, evs in by_key_in_ts_order(second).items():
        want[u] = want[u] + [e["merchant"] for e in evs]
    assert {r.user_id: r.tags for r in kt.read_state(cp).collect()} == want


class _LastAt(KeyedProcessor):
    """The key's newest row time kept twice: a wall clock (timestamp_ntz) and an instant."""

    wall = ValueState("timestamp_ntz")
    at = ValueState("timestamp")
    returns = "since_wall double, since_at double"

    def process(self, key, rows):
        ts = rows["ts"].max().to_pydatetime()
        wall, at = self.wall.get(), self.at.get()
        self.wall.update(ts)
        self.at.update(ts)
        yield {
            "since_wall": None if wall is None else (ts - wall).total_seconds(),
            "since_at": None if at is None else (ts - at).total_seconds(),
        }


@pytest.mark.slow_on("tws")  # (CI: bulk; the values are checked by the code both engines share)
@pytest.mark.parametrize("engine", ["bulk", "tws"])
def test_a_timestamp_set_into_the_other_kind_of_timestamp_crosses_at_utc_not_the_sessions_zone(
    spark, engine, request, tmp_path
):
    """In a New York session: a Python datetime (an instant, UTC) set into a timestamp_ntz variable
    holds its UTC wall clock, and a TIMESTAMP_NTZ set into a timestamp variable is that wall clock
    in UTC — as the function sees timestamps — never moved by the session's zone: Spark's cast put
    a summer wall clock four hours off, and refused the wall clock the DST change of 2024-11-03
    repeats (the value did not survive the round trip through New York's zone)."""
    kt = request.getfixturevalue("kt") if engine == "tws" else KeyedSQL(spark, engine="bulk")
    kt.register("last_at", _LastAt)
    d = tmp_path
    first, second = make_events(3, 2, seed=52), make_events(3, 1, seed=53, start_second=400 * 86400)
    sql = f"SELECT user_id, s.* FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE last_at(ts) AS s"
    write_parquet(spark, first, str(d / "in"))
    cp = str(d / "cp")
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    user = sorted({e["user_id"] for e in first})[0]
    wall = dt.datetime(2024, 11, 3, 6, 30, 0, 250)  # 01:30 EST in New York, its second 01:30 that day
    at = dt.datetime(2024, 7, 1, 12, 0, 0, 250)  # (EDT in New York: the offset 1970's January had not)
    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        audit = kt.update_state(
            cp, set={"wall": wall, "at": f"TIMESTAMP_NTZ '{at.isoformat(sep=' ')}'"}, where=f"user_id = '{user}'"
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert audit["keys_matched"] == 1
    assert {r.user_id: r.wall for r in kt.read_state(cp).collect()}[user] == wall  # (a wall clock reads as itself)
    write_parquet(spark, second, str(d / "in"))
    kt.run(sql, checkpoint=cp, output=str(d / "out"))
    rows = spark.read.parquet(str(d / "out")).collect()
    got = {r.user_id: (r.since_wall, r.since_at) for r in rows if r.since_wall is not None}  # (the second run's)
    newest = {u: max(e["ts"] for e in evs) for u, evs in by_key_in_ts_order(second).items()}
    assert got[user] == ((newest[user] - wall).total_seconds(), (newest[user] - at).total_seconds())

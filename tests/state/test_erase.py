"""DELETE / UPDATE of a stopped bulk query's keyed state (issue 45, first slice): the audit
against plain-Python oracles, the erased key's bytes absent from every file of the checkpoint
and of the local state cache, older versions and the change feed saying the history was
erased, the query continuing exactly once, and a kill at each crash point leaving before or
after."""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal

import pytest

from spark_keyed_sql import KeyedSQL, StatefulFunction
from spark_keyed_sql import state_edits as state_edits_module
from spark_keyed_sql.api.errors import KeyedSQLError
from spark_keyed_sql.engines.bulk import erase as erase_module
from spark_keyed_sql.engines.bulk.local_store import cache_root, store_dir
from spark_keyed_sql.state import edit_queue as edit_queue_module
from spark_keyed_sql.state import snapshots as snapshots_module
from spark_keyed_sql.state.filesystems import filesystem
from spark_keyed_sql.state.lock import CheckpointLock

ERASED = "zz-erase-me-u17"
SECRET = f"SECRET-{ERASED}-xyz"
OTHERS = ["k01", "k02", "k03", "k04"]


class Notes(StatefulFunction):
    total: float
    n: int
    note: str

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0
        self.n = 0
        self.note = ""

    def execute(self, e):
        self.n += 1
        self.total = round(self.total + e["value"], 6)
        self.note = f"SECRET-{e['user_id']}-xyz"
        return {"n": self.n, "total": self.total}


SQL = (
    "SELECT user_id, s.n, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE erase_notes(user_id, value) "
    "AS s ORDER BY seq"
)


@pytest.fixture(scope="module")
def kb(spark):
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("erase_notes", Notes, returns="n int, total double")
    return ks


def _batch(spark, src, rows):
    spark.createDataFrame(rows, "user_id string, value double, seq bigint").coalesce(1).write.mode("append").parquet(
        src
    )


def _rows(batch: int):
    users = [ERASED, *OTHERS]
    return [(u, float(10 * batch + i + j), 100 * batch + 10 * i + j) for i, u in enumerate(users) for j in range(2)]


def _oracle(batches, erased_after: int | None = None, updates=None):
    """{user: (n, total, note)} after the batches in order; the erased key's state dropped after
    batch index ``erased_after``; ``updates(state)`` applied after that batch too."""
    state: dict[str, tuple[int, float, str]] = {}
    for b, rows in enumerate(batches):
        for u, v, _ in sorted(rows, key=lambda r: r[2]):
            n, total, _note = state.get(u, (0, 0.0, ""))
            state[u] = (n + 1, round(total + v, 6), f"SECRET-{u}-xyz")
        if erased_after == b:
            if updates is None:
                state.pop(ERASED, None)
            else:
                updates(state)
    return state


def _state(ks, cp, **kw):
    return {r.user_id: (r.n, r.total, r.note) for r in ks.read_state(cp, **kw).collect()}


def _outputs(batches, edits):
    """The query's output rows, sorted: (user, n, total) for each event in order. ``edits``:
    {batch index: None (the erased key dropped) or a function changing {user: (n, total)}},
    applied after that batch."""
    state: dict[str, tuple[int, float]] = {}
    out = []
    for b, rows in enumerate(batches):
        for u, v, _ in sorted(rows, key=lambda r: r[2]):
            n, total = state.get(u, (0, 0.0))
            state[u] = (n + 1, round(total + v, 6))
            out.append((u, *state[u]))
        if b in edits:
            if edits[b] is None:
                state.pop(ERASED, None)
            else:
                edits[b](state)
    return sorted(out)


def _written(spark, out):
    """What a reader of the output directory sees (Spark's reader follows its _spark_metadata)."""
    return sorted((r.user_id, r.n, r.total) for r in spark.read.parquet(out).collect())


def _checkpoint_with_history(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = [_rows(0), _rows(1)]
    for rows in batches:
        _batch(spark, src, rows)
        ks.run(SQL.format(src=src), checkpoint=cp, output=out)
    return src, cp, out, batches


def _cache_dir(spark, cp):
    return store_dir(
        cache_root(spark.conf.get("spark.keyedsql.localStateDir", None) or None),
        filesystem(spark).qualify(cp, "checkpoint"),
    )


def _files_holding(roots, needle: bytes) -> list[str]:
    found = []
    for root in roots:
        for d, _, names in os.walk(root):
            for name in names:
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
    return found


def _all_bytes(root):
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                out[path] = f.read()
    return out


class Killed(BaseException):
    """The process dying at the crash point (nothing after it runs)."""


def _kill_at(point):
    def crash(name):
        if name == point:
            raise Killed(name)

    return crash


# ---------------------------------------------------------------------------- DELETE
def test_delete_erases_the_key_from_every_file_and_the_query_continues_exactly_once(spark, kb, tmp_path):
    src, cp, out, batches = _checkpoint_with_history(spark, kb, tmp_path)
    cache = _cache_dir(spark, cp)
    for needle in (ERASED.encode(), SECRET.encode()):  # the scan finds them before: it can fail
        assert _files_holding([cp], needle), needle
        assert _files_holding([cache], needle), needle

    audit = kb.delete_state(cp, where=f"user_id = '{ERASED}'")

    assert audit["keys_matched"] == 1 and audit["state_rows"] == 1
    assert audit["batch_id"] == 2  # committed after batches 0 and 1
    assert audit["versions_rewritten"] == 2
    assert audit["output_batches"] == [1] or audit["output_batches"] == [0, 1]
    assert audit["files_removed"] > 0 and audit["seconds"] >= 0
    for needle in (ERASED.encode(), SECRET.encode()):
        assert _files_holding([cp, cache], needle) == []
    assert _state(kb, cp) == _oracle(batches, erased_after=1)
    for older in (0, 1):
        with pytest.raises(KeyedSQLError, match="history before batch 2 was erased"):
            kb.read_state(cp, batch_id=older)
    assert kb.read_state_changes(cp).collect() == []  # the whole feed: from the erase on, nothing after it yet
    with pytest.raises(KeyedSQLError, match="history before batch 2 was erased"):
        kb.read_state_changes(cp, to_batch=1).collect()  # (a feed ending before the erase)
    with pytest.raises(KeyedSQLError, match="history before batch 2 was erased"):
        kb.read_state_changes(cp, from_batch=0).collect()
    # the feed after the erase's batch, which the message names, is readable at once: no change yet
    empty = kb.read_state_changes(cp, from_batch=2)
    assert empty.columns == ["user_id", "variable", "change", "new_value", "batch_id"] and empty.collect() == []
    with pytest.raises(KeyedSQLError, match=r"cannot read changes for batches \(2, 3\]; it keeps 2\.\.2"):
        kb.read_state_changes(cp, from_batch=2, to_batch=3).collect()

    # the query goes on: the erased key starts fresh, the others continue, each batch once
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    summary = kb.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert summary is not None
    expected = _oracle(batches, erased_after=1)
    assert _state(kb, cp) == expected
    assert expected[ERASED][0] == 2  # two events of the last batch only
    # the output: every batch once; the erased key counts from 1 again in the last batch
    got = sorted((r.user_id, r.n) for r in spark.read.parquet(out).collect())
    assert got == sorted([(ERASED, n) for n in (1, 2, 3, 4, 1, 2)] + [(u, n) for u in OTHERS for n in range(1, 7)])
    changes = kb.read_state_changes(cp).collect()  # after the erase: the feed from batch 2 on
    assert {r.batch_id for r in changes} == {3}


def test_a_predicate_matching_nothing_says_so_and_writes_nothing(spark, kb, tmp_path):
    _, cp, _, _ = _checkpoint_with_history(spark, kb, tmp_path)
    before = _all_bytes(cp)
    with pytest.warns(UserWarning, match=r"WHERE total > 1e9 matched no key of erase_notes; nothing erased"):
        audit = kb.delete_state(cp, where="total > 1e9")
    assert audit["keys_matched"] == 0 and audit["state_rows"] == 0 and audit["batch_id"] is None
    assert audit["files_removed"] == 0 and audit["versions_rewritten"] == 0
    assert _all_bytes(cp) == before


# ---------------------------------------------------------------------------- UPDATE
def test_update_through_sql_changes_exactly_the_matched_keys(spark, kb, tmp_path):
    src, cp, out, batches = _checkpoint_with_history(spark, kb, tmp_path)
    limit = 25.0

    def fix(state):
        for u, (n, total, _note) in list(state.items()):
            if total > limit:
                state[u] = (n, 0.0, "fixed")

    expected = _oracle(batches, erased_after=1, updates=fix)
    changed = sum(1 for u, (n, t, note) in _oracle(batches).items() if t > limit)
    assert 0 < changed < len(expected)
    row = kb.sql(f"UPDATE keyed_state('{cp}', 'erase_notes') SET total = 0, note = 'fixed' WHERE total > {limit}")
    (audit,) = row.collect()
    assert audit.operation == "update" and audit.keys_matched == changed and audit.state_rows == changed
    assert audit.batch_id == 2
    assert _state(kb, cp) == expected
    for u, (_, total, _) in _oracle(batches).items():  # the old values of changed keys are gone
        if total > limit:
            assert _files_holding([cp], f"SECRET-{u}-xyz".encode()) == []
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kb.run(SQL.format(src=src), checkpoint=cp, output=out)

    def continued():
        state = expected.copy()
        for u, v, _ in sorted(batches[-1], key=lambda r: r[2]):
            n, total, _ = state.get(u, (0, 0.0, ""))
            state[u] = (n + 1, round(total + v, 6), f"SECRET-{u}-xyz")
        return state

    assert _state(kb, cp) == continued()


def test_update_state_takes_python_values_as_well_as_sql_text(spark, kb, tmp_path):
    """set= values: a string is an SQL expression; None, numbers, bools, Decimals and datetimes
    are those values (they were refused: 'set= maps column names to SQL expression text')."""
    _, cp, _, batches = _checkpoint_with_history(spark, kb, tmp_path)
    before = _state(kb, cp)
    audit = kb.update_state(cp, set={"total": 0, "n": 7, "note": None}, where="user_id = 'k01'")
    assert audit["keys_matched"] == 1
    audit = kb.update_state(cp, set={"total": 2.5, "note": "upper(note)"}, where="user_id = 'k02'")
    assert audit["keys_matched"] == 1
    expected = dict(before)
    expected["k01"] = (7, 0.0, None)
    expected["k02"] = (before["k02"][0], 2.5, before["k02"][2].upper())
    assert _state(kb, cp) == expected
    with pytest.raises(KeyedSQLError, match=r"set= value of 'total': list \[1\] is not a value set= takes"):
        kb.update_state(cp, set={"total": [1]}, where="true")


class Untyped(StatefulFunction):
    """Attributes without annotations: kept in their JSON encoding (a datetime, a Decimal, a
    list as such)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.last = None
        self.paid = None
        self.seen = []

    def execute(self, e):
        gap = None if self.last is None else (e["ts"] - self.last).total_seconds()
        self.last = e["ts"]
        self.paid = (self.paid or Decimal(0)) + Decimal(str(e["value"]))
        self.seen = [*self.seen, int(e["value"])][-3:]
        return {"gap": gap, "paid": str(self.paid), "seen": len(self.seen)}


def test_update_state_sets_values_into_untyped_attributes_as_the_python_values_they_read_as(spark, tmp_path):
    """A datetime, a Decimal and lists into attributes kept as JSON: stored as the Python values
    (a datetime was refused as 'not JSON', a Decimal came back a float), whatever the session's
    time zone — at a wall clock its DST change repeats too; the next run reads them as such."""
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("erase_untyped", Untyped, returns="gap double, paid string, seen int")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, s.* FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE erase_untyped(ts, value) AS s "
        "ORDER BY ts"
    )
    t0 = dt.datetime(2024, 11, 1, 12)
    where_a, where_b = "user_id = 'a'", "user_id = 'b'"

    def write(rows):
        spark.createDataFrame(rows, "user_id string, ts timestamp, value double").write.mode("append").parquet(src)

    def seen(user):
        return {r.user_id: json.loads(r.seen) for r in ks.read_state(cp).collect()}[user]

    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # a user's session, not UTC
        write([("a", t0, 1.0), ("b", t0, 2.0), ("a", t0 + dt.timedelta(minutes=1), 3.0)])
        ks.run(sql, checkpoint=cp, output=out)
        # naive: UTC, as state holds it; 01:30 EST in New York, the second 01:30 of 2024-11-03
        new_last = dt.datetime(2024, 11, 3, 6, 30, 0, 250)
        ks.update_state(cp, set={"last": new_last, "paid": Decimal("10.05"), "seen": "array(7, 8)"}, where=where_a)
        assert seen("a") == [7, 8]
        ks.update_state(cp, set={"seen": "named_struct('x', 1, 'y', CAST(NULL AS INT))"}, where=where_b)
        assert seen("b") == {"x": 1, "y": None}  # (to_json left a NULL field out)
        with pytest.raises(KeyedSQLError, match=r"holds no NaN or infinity inside a array<double> \(key user_id='b'\)"):
            ks.update_state(cp, set={"seen": "array(1.5D, CAST('NaN' AS DOUBLE))"}, where=where_b)
        ks.update_state(
            cp,
            set={"last": "TIMESTAMP '2024-11-02 07:00:00'", "paid": "CAST(0.5 AS DECIMAL(4, 2))", "seen": "array()"},
            where=where_b,
        )
        assert seen("b") == []  # (refused as array<void> by the first version of this)
        with pytest.raises(
            KeyedSQLError,
            match=r"attribute 'last' is stored as its JSON encoding, which has no form for a interval day value",
        ):
            ks.update_state(cp, set={"last": "INTERVAL '1' DAY"}, where="true")
        write([("a", dt.datetime(2024, 11, 4), 1.0), ("b", dt.datetime(2024, 11, 4), 1.0)])
        ks.run(sql, checkpoint=cp, output=out)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    got = {(r.user_id, r.gap, r.paid, r.seen) for r in spark.read.parquet(out).collect() if r.gap and r.gap > 600}
    # the oracle: the values set, read as Python values (07:00 in New York on 2024-11-02, EDT, is 11:00 UTC)
    b_last = dt.datetime(2024, 11, 2, 11)
    assert got == {
        ("a", (dt.datetime(2024, 11, 4) - new_last).total_seconds(), str(Decimal("10.05") + Decimal("1.0")), 3),
        ("b", (dt.datetime(2024, 11, 4) - b_last).total_seconds(), str(Decimal("0.50") + Decimal("1.0")), 1),
    }


def test_an_update_the_type_cannot_hold_is_refused_naming_column_and_key_before_writing(spark, kb, tmp_path):
    _, cp, _, _ = _checkpoint_with_history(spark, kb, tmp_path)
    before = _all_bytes(cp)
    with pytest.raises(KeyedSQLError, match=r"column 'n' is bigint.*'abc'.*user_id='k0"):
        kb.update_state(cp, set={"n": "'abc'"}, where="user_id = 'k01'")
    with pytest.raises(KeyedSQLError, match=r"column 'n' is bigint.*1\.5"):
        kb.update_state(cp, set={"n": "1.5"}, where="user_id = 'k02'")
    with pytest.raises(KeyedSQLError, match="key column cannot be set"):
        kb.update_state(cp, set={"user_id": "'x'"}, where="true")
    # names as read_state shows them, never the stored columns' internal ones; and a wrong
    # name is refused whether or not the WHERE matches a key
    shown = ", ".join(kb.read_state(cp).columns)
    for where in ("true", "user_id = 'nobody'"):
        with pytest.raises(KeyedSQLError, match=r"SET nope: no such state column \(state columns: ") as info:
            kb.update_state(cp, set={"nope": "0"}, where=where)
        assert "__ks" not in str(info.value) and all(c in str(info.value) for c in ("total", "n", "note"))
        with pytest.raises(KeyedSQLError, match=r"SET total = totl \+ 1: .*totl") as info:
            kb.update_state(cp, set={"total": "totl + 1"}, where=where)
        assert "__ks" not in str(info.value) and f"(columns: {shown})" in str(info.value)
    # a str from Python is SQL, so text meant as a value is said to need quotes
    for text in ('["reset"]', "reset me"):
        with pytest.raises(KeyedSQLError, match=r"SET note = .*a string value is written quoted, 'text'"):
            kb.update_state(cp, set={"note": text}, where="true")
    with pytest.raises(KeyedSQLError, match=r"WHERE usr = 'k01': .*usr") as info:
        kb.delete_state(cp, where="usr = 'k01'")
    assert "__ks" not in str(info.value) and f"(columns: {shown})" in str(info.value)
    assert _all_bytes(cp) == before


def test_a_wrong_name_in_an_edit_is_said_once_without_pysparks_query_context_log(spark, kb, tmp_path, capfd):
    """PySpark logs an AnalysisException's query context (a JSON ERROR line of kilobytes) before
    raising it; the edit's own error names the column, so that log is not printed first
    (captured at the file descriptors: the log handler writes to the process's stderr)."""
    logger_module = pytest.importorskip("pyspark.logger")
    import logging

    loggers = [
        logger_module.PySparkLogger.getLogger(n) for n in ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.NOTSET)  # as a user's process has them (the CLI's tests silence them for good)
    try:
        _, cp, _, _ = _checkpoint_with_history(spark, kb, tmp_path)
        capfd.readouterr()
        with pytest.raises(KeyedSQLError, match="usr"):
            kb.delete_state(cp, where="usr = 'k01'")
        with pytest.raises(KeyedSQLError, match="totl"):
            kb.update_state(cp, set={"total": "totl + 1"}, where="true")
        err = capfd.readouterr().err
        assert '"level": "ERROR"' not in err and "QueryContext" not in err, err[:2000]
        assert [lg.level for lg in loggers] == [logging.NOTSET] * len(loggers)  # left as they were
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# ---------------------------------------------------------------------------- crash points
@pytest.mark.parametrize(
    "point, after",
    [
        ("edit_queued", False),
        ("erase_written", False),
        ("erase_committed", True),
        # (a real SIGKILL at this point: test_a_sigkill_inside_an_erase_leaves_before_or_after...)
        pytest.param("erase_removing", True, marks=pytest.mark.slow),
        ("edit_answered", True),
    ],
)
def test_a_kill_at_each_point_leaves_before_or_after_and_a_rerun_finishes(
    spark, kb, tmp_path, monkeypatch, point, after
):
    src, cp, out, batches = _checkpoint_with_history(spark, kb, tmp_path)
    modules = (erase_module, snapshots_module, state_edits_module, edit_queue_module)
    for module in modules:
        monkeypatch.setattr(module, "crash_point", _kill_at(point))
    with pytest.raises(Killed):
        kb.delete_state(cp, where=f"user_id = '{ERASED}'")
    for module in modules:
        monkeypatch.setattr(module, "crash_point", lambda name: None)
    assert _state(kb, cp) == _oracle(batches, erased_after=1 if after else None)
    assert len(_requests(cp)) == 1  # the killed call's request: still pending (or committed, not yet answered)
    again = kb.delete_state(cp, where=f"user_id = '{ERASED}'")  # applies (or answers) the pending one first
    assert again["keys_matched"] == 0
    assert _requests(cp) == [] and _erase_commits(spark, cp) == 1  # the killed request applied exactly once
    _answered_once(cp, batch_id=2)
    roots = [cp, _cache_dir(spark, cp)]
    assert _files_holding(roots, ERASED.encode()) == [] and _files_holding(roots, SECRET.encode()) == []
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kb.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kb, cp) == _oracle(batches, erased_after=1)


def _requests(cp):
    d = os.path.join(cp, "edits")
    return sorted(n for n in os.listdir(d) if n.endswith(".request.json")) if os.path.isdir(d) else []


def _answers(cp):
    """The answers left in the queue (their callers never collected them), as written."""
    d = os.path.join(cp, "edits")
    out = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.endswith(".answer.json"):
            with open(os.path.join(d, name)) as f:
                out.append(json.load(f))
    return out


def _answered_once(cp, batch_id: int) -> None:
    """The killed caller's request, answered by the next lease holder: it erased the one key at
    ``batch_id`` (applied again, it would have matched nothing and said so)."""
    (answer,) = _answers(cp)
    assert answer["error"] is None, answer
    assert answer["audit"]["keys_matched"] == 1 and answer["audit"]["batch_id"] == batch_id, answer


def _erase_commits(spark, cp) -> int:
    """Commits that applied a queued edit which matched a key (from the commit files, as written)."""
    d = os.path.join(cp, "bulk", "commits")
    n = 0
    for name in os.listdir(d):
        if name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                edit = json.load(f).get("edit")
            n += bool(edit and edit["keys_matched"])
    return n


# ---------------------------------------------------------------------------- refusals, EXPLAIN
def test_explain_keyed_says_what_would_be_erased_and_writes_nothing(spark, kb, tmp_path):
    _, cp, _, _ = _checkpoint_with_history(spark, kb, tmp_path)
    before = _all_bytes(cp)
    plan = kb.sql(f"EXPLAIN KEYED DELETE FROM keyed_state('{cp}', 'erase_notes') WHERE user_id = 'k01'").first()[0]
    assert cp in plan and "erase_notes" in plan and "user_id = 'k01'" in plan and "'bulk'" in plan
    assert plan.startswith("== Keyed state edit ==\nDELETE")
    text = kb.explain(f"UPDATE keyed_state('{cp}') SET total = 1 WHERE n > 2")
    assert "UPDATE" in text and "total = 1" in text and "n > 2" in text
    assert "function 'erase_notes'" in text  # not named in the statement: the checkpoint's only function
    assert _all_bytes(cp) == before


def test_an_edit_waits_for_the_lease_holder_and_says_what_is_pending(spark, kb, tmp_path):
    """A holder that never reaches a batch boundary (a lease and no query): the call gives up
    after its timeout naming the queued request, which stays queued and changes nothing; the
    next edit that gets the lease applies it first, then its own."""
    _, cp, _, batches = _checkpoint_with_history(spark, kb, tmp_path)
    lock = CheckpointLock(cp, spark, query="a query that is busy").acquire()
    try:
        before = _all_bytes(cp)
        with pytest.raises(KeyedSQLError, match=r"still pending after 1 s: it is queued as .*a query that is busy"):
            kb.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=1)
        assert len(_requests(cp)) == 1
        after = {k: v for k, v in _all_bytes(cp).items() if "/edits/" not in k}
        after.pop(os.path.join(cp, ".spark_keyed_sql.lease"), None)
        before.pop(os.path.join(cp, ".spark_keyed_sql.lease"), None)
        assert after == before  # nothing but the request written
    finally:
        lock.release()
    audit = kb.update_state(cp, set={"total": "0"}, where="user_id = 'k01'")
    assert audit["keys_matched"] == 1 and audit["batch_id"] == 3  # the pending DELETE went first, at batch 2
    assert _requests(cp) == []

    def zero(state):
        state.pop(ERASED)
        n, _, note = state["k01"]
        state["k01"] = (n, 0.0, note)

    assert _state(kb, cp) == _oracle(batches, erased_after=1, updates=zero)
    assert _files_holding([cp], ERASED.encode()) == []


def test_an_edit_names_what_it_cannot_do(spark, kb, tmp_path):
    _, cp, _, _ = _checkpoint_with_history(spark, kb, tmp_path)
    with pytest.raises(KeyedSQLError, match="needs a WHERE"):
        kb.sql(f"DELETE FROM keyed_state('{cp}')")
    with pytest.raises(KeyedSQLError, match="no_such_column"):
        kb.delete_state(cp, where="no_such_column = 1")
    with pytest.raises(KeyedSQLError, match="no function 'other'"):
        kb.delete_state(cp, where="true", function="other")


# ---------------------------------------------------------------------------- timers, the CLI, tws
class Sessions(StatefulFunction):
    """A session per key, closed by an event-time timer 30 minutes after its last event."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.events = 0
        self.last = None

    def execute(self, e):
        if self.last is not None:
            self.ctx.delete_timer(self.last + GAP)
        self.last = max(self.last or e["ts"], e["ts"])
        self.events += 1
        self.ctx.register_timer(self.last + GAP)

    def on_timer(self, key, timestamp):
        out = {"events": self.events}
        self.ctx.clear_state()
        return out


GAP = dt.timedelta(minutes=30)
T0 = dt.datetime(2026, 3, 1, 8, 0)


def test_an_erased_keys_timers_go_with_it(spark, kb, tmp_path):
    kb.register("erase_sessions", Sessions, returns="events bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, s.events FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE erase_sessions(ts) AS s "
        "ORDER BY ts EVENT TIME ts WATERMARK '5 minutes'"
    )

    def write(rows):
        spark.createDataFrame(
            [(u, T0 + dt.timedelta(minutes=m)) for u, m in rows], "user_id string, ts timestamp"
        ).coalesce(1).write.mode("append").parquet(src)

    write([(ERASED, 0), (ERASED, 5), ("k01", 0), ("k02", 10), ("k02", 12)])
    kb.run(sql, checkpoint=cp, output=out)
    assert ERASED in {r.user_id for r in kb.read_state(cp).collect()}  # holding its timer
    kb.delete_state(cp, where=f"user_id = '{ERASED}'")
    write([("z", 600)])  # the watermark passes every open session's timer
    kb.run(sql, checkpoint=cp, output=out)
    kb.run(sql, checkpoint=cp, output=out)  # a run without input lets due timers fire
    got = sorted((r.user_id, r.events) for r in spark.read.parquet(out).collect() if r.events is not None)
    assert got == [("k01", 1), ("k02", 2)]  # the erased key's timer never fired


def test_the_cli_deletes_and_updates(spark, kb, tmp_path, capsys):
    from spark_keyed_sql import cli

    src, cp, out, batches = _checkpoint_with_history(spark, kb, tmp_path)
    # (--udf: how the class stores its attributes, needed to SET its string attribute)
    udf = ["--udf", f"erase_notes={Notes.__module__}:Notes returns n int, total double"]
    assert cli.main(["state", "delete", cp, "--where", "total > 1e9"]) == 0
    assert "no key matched" in capsys.readouterr().out
    assert (
        cli.main(["state", "update", cp, *udf, "--set", "total=-1", "--set", "note='x'", "--where", "user_id = 'k01'"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "updated 1 key(s)" in printed and "at batch 2" in printed
    expected = _oracle(batches)
    expected["k01"] = (expected["k01"][0], -1.0, "x")
    assert _state(kb, cp) == expected
    # `state show` lists the keys in order: --limit shows the smallest, the same ones each time
    assert cli.main(["state", "show", cp, "--limit", "2"]) == 0
    rows = capsys.readouterr().out.splitlines()[3:5]
    assert [row.split("|")[1].strip() for row in rows] == sorted(expected)[:2], rows
    assert cli.main(["state", "delete", cp, "--where", f"user_id = '{ERASED}'"]) == 0
    printed = capsys.readouterr().out
    assert "erased 1 key(s)" in printed and "at batch 3" in printed, printed
    # the change feed after the erase (its history before batch 3 is gone): a batch of two keys
    _batch(spark, src, [("k01", 5.0, 900), ("k02", 6.0, 901)])
    kb.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert cli.main(["state", "show", cp, "--changes", "--from-batch", "3"]) == 0
    shown = capsys.readouterr().out
    lines = [line for line in shown.splitlines() if line.startswith("| k0")]
    assert {line.split("|")[1].strip() for line in lines} == {"k01", "k02"} and "upsert" in shown, shown
    assert all(line.split("|")[-2].strip() == "4" for line in lines), shown  # (batch_id, the last column)
    assert cli.main(["state", "update", cp, "--set", "total", "--where", "true"]) == 2
    assert "--set takes COLUMN=EXPR" in capsys.readouterr().err
    # --from-batch without --changes: a usage error like every other (one `error:` line, status 2)
    assert cli.main(["state", "show", cp, "--from-batch", "3"]) == 2
    assert capsys.readouterr().err.startswith("error: state show: --from-batch goes with --changes")


# ---------------------------------------------------------------------------- a real SIGKILL
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def killed_at(point: str, code: str, tmp_path) -> None:
    """Run ``code`` (Python) in a child process of its own that is SIGKILLed, its JVM with it,
    the first time any of its processes reaches the fault point ``point``."""
    import signal
    import subprocess
    import sys

    hits = tmp_path / "hits"
    hits.mkdir()
    env = dict(os.environ, SPARK_KEYED_SQL_CRASH_AT=f"{point}:1", SPARK_KEYED_SQL_CRASH_DIR=str(hits))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its JVM
        except ProcessLookupError:
            pass
    assert proc.returncode == -signal.SIGKILL, f"the child was not killed at {point}:\n{err.decode()[-3000:]}"


# CI: the kill after the erase's commit (the next call finishes the removal); the kill before
# it in the slow tier (the in-process kills above cover every point)
@pytest.mark.parametrize(
    "point, after", [pytest.param("erase_written", False, marks=pytest.mark.slow), ("erase_removing", True)]
)
def test_a_sigkill_inside_an_erase_leaves_before_or_after_and_the_next_call_takes_the_lease(
    spark, kb, tmp_path, point, after
):
    """The erase in a child process of its own, SIGKILLed at the fault point (its lease left
    behind, its process gone): the state is before or after, the next call takes the lease
    over at once and finishes, and the query continues."""
    src, cp, out, batches = _checkpoint_with_history(spark, kb, tmp_path)
    code = f"""
import os, sys
os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())
sys.path[:0] = [{TESTS!r}, {os.path.join(TESTS, "state")!r}]
from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.local import local_session
from jvm_options import TEST_JAVA_OPTIONS
from test_erase import Notes
ks = KeyedSQL(local_session("erase child", java_options=TEST_JAVA_OPTIONS), engine="bulk")
ks.register("erase_notes", Notes, returns="n int, total double")
ks.delete_state({cp!r}, where="user_id = '{ERASED}'")
"""
    killed_at(point, code, tmp_path)
    assert os.path.exists(os.path.join(cp, ".spark_keyed_sql.lease"))  # left by the killed process
    assert _state(kb, cp) == _oracle(batches, erased_after=1 if after else None)
    again = kb.delete_state(cp, where=f"user_id = '{ERASED}'")  # takes the lease over, applies the pending one first
    assert again["keys_matched"] == 0
    assert _requests(cp) == [] and _erase_commits(spark, cp) == 1
    _answered_once(cp, batch_id=2)
    roots = [cp, _cache_dir(spark, cp)]
    assert _files_holding(roots, ERASED.encode()) == [] and _files_holding(roots, SECRET.encode()) == []
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kb.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kb, cp) == _oracle(batches, erased_after=1)

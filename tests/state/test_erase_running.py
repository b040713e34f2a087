"""DELETE / UPDATE of keyed state while a query runs (issue 45, item 3): the request is queued in
the checkpoint and applied once by the running query at its next batch boundary — a ks.start
stream, and a ks.run in the middle of its batch — with no stop; the call returns the audit. A
SIGKILL at each point of the pickup leaves the state before (the request still pending) or
after, and the next run finishes it exactly once. Oracles: plain Python over the rows written."""

from __future__ import annotations

import os
import threading
import time

import pytest
from test_erase import (
    ERASED,
    SECRET,
    SQL,
    Notes,
    _answered_once,
    _batch,
    _cache_dir,
    _erase_commits,
    _files_holding,
    _oracle,
    _outputs,
    _requests,
    _rows,
    _state,
    _written,
    killed_at,
)

from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.state.lock import lock_holder

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def kr(spark):
    spark.conf.set("spark.keyedsql.editPollInterval", "1 second")
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("erase_notes", Notes, returns="n int, total double")
    yield ks
    spark.conf.unset("spark.keyedsql.editPollInterval")


def _gone(spark, cp):
    roots = [cp, _cache_dir(spark, cp)]
    return _files_holding(roots, ERASED.encode()) == [] and _files_holding(roots, SECRET.encode()) == []


def test_a_delete_on_a_running_stream_is_applied_by_it_at_a_batch_boundary(spark, kr, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = [_rows(0), _rows(1)]
    _batch(spark, src, batches[0])
    q = kr.start(SQL.format(src=src), checkpoint=cp, sink=out, trigger="1 second")
    try:
        q.processAllAvailable()
        _batch(spark, src, batches[1])
        q.processAllAvailable()
        audit = kr.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=120)
        assert q.isActive and lock_holder(cp, spark)["query"] == "ks.start"  # the stream never stopped
        assert audit["operation"] == "delete" and audit["keys_matched"] == 1 and audit["state_rows"] == 1
        assert audit["batch_id"] == 2 and audit["checkpoint"] == cp  # committed after batches 0 and 1
        assert _requests(cp) == [] and _erase_commits(spark, cp) == 1
        assert _state(kr, cp) == _oracle(batches, erased_after=1)
        assert _gone(spark, cp)
        for older in (0, 1):  # the history before the erase: said to be erased, not shown
            with pytest.raises(Exception, match="history before batch 2 was erased"):
                kr.read_state(cp, batch_id=older)
        with pytest.raises(Exception, match="history before batch 2 was erased"):
            kr.read_state_changes(cp, from_batch=0).collect()
        batches.append(_rows(2))
        _batch(spark, src, batches[-1])
        q.processAllAvailable()
        assert _state(kr, cp) == _oracle(batches, erased_after=1)  # the erased key starts afresh, once
        assert _written(spark, out) == _outputs(batches, {1: None})
        # an UPDATE the same way; a refused one answers its error and leaves the stream running
        fixed = kr.update_state(cp, set={"total": "total * 2"}, where="n > 5", timeout=120)
        want = _oracle(batches, erased_after=1)
        doubled = {u: (n, round(t * 2, 6), note) if n > 5 else (n, t, note) for u, (n, t, note) in want.items()}
        assert fixed["keys_matched"] == sum(1 for n, _, _ in want.values() if n > 5) > 0
        assert _state(kr, cp) == doubled
        with pytest.raises(Exception, match="no_such_column"):
            kr.delete_state(cp, where="no_such_column = 1", timeout=120)
        assert q.isActive and _requests(cp) == []
    finally:
        q.stop()


class GatedNotes(Notes):
    """Notes whose rows keyed ``gate:<path>`` wait for that file (the test holds a batch open)."""

    def execute(self, e):
        if e["user_id"].startswith("gate:"):
            open(e["user_id"][5:] + ".entered", "w").close()
            deadline = time.time() + 180
            while not os.path.exists(e["user_id"][5:]) and time.time() < deadline:
                time.sleep(0.1)
        return super().execute(e)


def test_a_delete_during_a_ks_run_is_applied_after_the_batch_in_progress(spark, kr, tmp_path):
    """The run's batch holds the erased key's rows and is held open while the DELETE is queued:
    the DELETE goes after it (the key erased, the batch's rows included), and exactly once."""
    kr.register("gated_notes", GatedNotes, returns="n int, total double")
    src, cp, out, gate = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out"), str(tmp_path / "open")
    sql = SQL.format(src=src).replace("erase_notes", "gated_notes")
    batches = [_rows(0)]
    _batch(spark, src, batches[0])
    kr.run(sql, checkpoint=cp, output=out)
    batches.append(_rows(1) + [(f"gate:{gate}", 1.0, 999)])
    _batch(spark, src, batches[-1])
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(run=kr.run(sql, checkpoint=cp, output=out)))
    runner.start()
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".entered") and time.time() < deadline:
            time.sleep(0.1)  # the run's batch is in progress, held at the gate
        assert (lock_holder(cp, spark) or {}).get("query") == "ks.run"
        eraser = threading.Thread(
            target=lambda: result.update(audit=kr.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=180))
        )
        eraser.start()
        while not _requests(cp) and time.time() < deadline:
            time.sleep(0.05)
        assert len(_requests(cp)) == 1 and "audit" not in result  # queued, waiting for the batch
    finally:
        open(gate, "w").close()
        runner.join(300)
    eraser.join(300)
    assert result["run"]["batches"] == 1
    audit = result["audit"]
    assert audit["keys_matched"] == 1 and audit["batch_id"] == 2  # after batch 1, the one in progress
    gate_key = f"gate:{gate}"
    want = _oracle([[r for r in b if r[0] != gate_key] for b in batches], erased_after=1)
    assert {u: s for u, s in _state(kr, cp, function="gated_notes").items() if u != gate_key} == want
    assert _requests(cp) == [] and _erase_commits(spark, cp) == 1 and _gone(spark, cp)


# ---------------------------------------------------------------------------- a real SIGKILL
# CI: the kill between the erase's commit and its answer; the other two in the slow tier
@pytest.mark.parametrize(
    "point, after",
    [
        pytest.param("erase_written", False, marks=pytest.mark.slow),
        ("erase_committed", True),
        pytest.param("edit_answered", True, marks=pytest.mark.slow),
    ],
)
def test_a_sigkill_inside_a_running_querys_pickup_leaves_before_or_after_and_the_next_run_finishes(
    spark, kr, tmp_path, point, after
):
    """A child process runs the stream and asks for the DELETE; its stream applies it and the
    whole process is SIGKILLed at the point. Then: the state is before (the request pending) or
    after, and the next ks.run applies or answers it exactly once before its first batch."""
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    batches = [_rows(0), _rows(1)]
    for rows in batches:
        _batch(spark, src, rows)
        kr.run(SQL.format(src=src), checkpoint=cp, output=out)
    code = f"""
import os, sys
os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())
sys.path[:0] = [{TESTS!r}, {os.path.join(TESTS, "state")!r}]
from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.local import local_session
from jvm_options import TEST_JAVA_OPTIONS
from test_erase import Notes, SQL
spark = local_session("erase child", java_options=TEST_JAVA_OPTIONS)
spark.conf.set("spark.keyedsql.editPollInterval", "1 second")
ks = KeyedSQL(spark, engine="bulk")
ks.register("erase_notes", Notes, returns="n int, total double")
q = ks.start(SQL.format(src={src!r}), checkpoint={cp!r}, sink={out!r}, trigger="1 second")
q.processAllAvailable()
ks.delete_state({cp!r}, where="user_id = '{ERASED}'", timeout=240)
"""
    killed_at(point, code, tmp_path)
    assert (lock_holder(cp, spark) or {}).get("query") == "ks.start"  # left by the killed stream
    assert _state(kr, cp) == _oracle(batches, erased_after=1 if after else None)
    assert len(_requests(cp)) == 1  # pending, or answered and not yet removed
    ran = kr.run(SQL.format(src=src), checkpoint=cp, output=out)  # takes the lease over, applies the queue
    assert ran["batches"] == 0 and _state(kr, cp) == _oracle(batches, erased_after=1)
    assert _requests(cp) == [] and _erase_commits(spark, cp) == 1 and _gone(spark, cp)
    _answered_once(cp, batch_id=2)  # the killed stream's caller never came for it
    batches.append(_rows(2))
    _batch(spark, src, batches[-1])
    kr.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kr, cp) == _oracle(batches, erased_after=1)
    assert _written(spark, out) == _outputs(batches, {1: None})

"""DELETE of keyed state on a stopped transformWithState checkpoint (issue 45, engine tws; Spark
4.2+ has the state rewriter it uses): the audit and the state against a plain-Python oracle, no
state file of the checkpoint left but the rewritten version, that version read back without the
key, older batches said to be erased, the query continuing exactly once (the key afresh); an
UPDATE refused naming why, and a DELETE while a tws query runs refused at once naming the stop."""

from __future__ import annotations

import glob
import os

import pytest
from test_erase import ERASED, SECRET, SQL, Notes, _all_bytes, _batch, _oracle, _rows, _state

from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.api.errors import KeyedSQLError


@pytest.fixture(scope="module")
def kt(spark):
    from spark_keyed_sql.compat import Feature, features

    if not features(spark).has(Feature.TRANSFORM_WITH_STATE):
        pytest.skip("transformWithState needs Spark 4.0+")
    try:
        spark._jvm.java.lang.Class.forName("org.apache.spark.sql.execution.streaming.state.StateRewriter")
    except Exception:  # noqa: BLE001
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
    batches.append(_rows(3))
    _batch(spark, src, batches[-1])
    kt.run(SQL.format(src=src), checkpoint=cp, output=out)
    assert _state(kt, cp) == _oracle(batches, erased_after=2)  # the erased key afresh, the others once
    again = kt.delete_state(cp, where="user_id = 'nobody'")
    assert again["keys_matched"] == 0 and again["batch_id"] is None


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


def test_update_on_tws_is_refused_and_writes_nothing(spark, kt, tmp_path):
    _, cp, _, _ = _history(spark, kt, tmp_path, runs=1)
    before = _all_bytes(cp)
    with pytest.raises(KeyedSQLError, match="UPDATE is not built on engine 'tws'"):
        kt.update_state(cp, set={"total": "0"}, where="true")
    after = {k: v for k, v in _all_bytes(cp).items() if "/edits/" not in k}
    assert after == {k: v for k, v in before.items() if "/edits/" not in k}


def test_delete_while_a_tws_query_runs_is_refused_naming_the_stop(spark, kt, tmp_path):
    src, cp, out, _ = _history(spark, kt, tmp_path, runs=1)
    q = kt.start(SQL.format(src=src), checkpoint=cp, sink=str(tmp_path / "out2"))
    try:
        q.processAllAvailable()
        with pytest.raises(KeyedSQLError, match="on a stopped query only .* stop it, then run the DELETE again"):
            kt.delete_state(cp, where=f"user_id = '{ERASED}'", timeout=30)
        assert not glob.glob(f"{cp}/edits/*.request.json")  # withdrawn: no query of this engine would apply it
    finally:
        q.stop()

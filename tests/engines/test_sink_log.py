"""A file sink's _spark_metadata log brought up to a checkpoint's commits (engines/sink_log.py),
checked against Spark's rules for its log (CompactibleFileStreamLog) written out here: batch b
is a compaction when (b + 1) % interval == 0, named "<b>.compact", holding every entry since
the previous compaction; other batches are "<b>"; a batch without files is the version line
alone. No Spark: a local directory and a stand-in for the session's conf."""

from __future__ import annotations

import json
import os

import pytest

from spark_keyed_sql.engines.sink_log import fill_sink_log


class LocalFS:
    """The few calls the log needs, on local paths."""

    def exists(self, p):
        return os.path.exists(p)

    def list(self, p):
        return sorted(os.listdir(p))

    def read_text(self, p):
        with open(p) as f:
            return f.read()

    def create_text(self, p, text, overwrite=False):
        with open(p, "w" if overwrite else "x") as f:
            f.write(text)

    def rename(self, src, dst):
        if os.path.exists(dst):
            return False
        os.rename(src, dst)
        return True

    def mkdirs(self, p):
        os.makedirs(p, exist_ok=True)

    def delete(self, p, recursive=True):
        os.remove(p)
        return True


class Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


class Session:
    def __init__(self, interval=None):
        self.conf = Conf({} if interval is None else {INTERVAL: str(interval)})


def entry(b):
    return json.dumps({"path": f"file:///out/part-{b}.parquet", "size": b, "action": "add"})


def make(tmp_path, logged: dict[str, list[str]], committed: int):
    """An output whose log holds ``logged``, and the checkpoint's last committed batch."""
    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    for name, lines in logged.items():
        (out / "_spark_metadata" / name).write_text("\n".join(["v1", *lines]))
    return str(out), committed


def log_files(out):
    d = os.path.join(out, "_spark_metadata")
    return {n: open(os.path.join(d, n)).read() for n in os.listdir(d)}


def test_batches_an_edit_committed_are_logged_empty_and_a_compaction_holds_every_entry_before_it(tmp_path):
    out, last = make(tmp_path, {str(b): [entry(b)] for b in range(8)}, committed=12)  # logged 0..7
    assert fill_sink_log(Session(), LocalFS(), last, out) == [8, 9, 10, 11, 12]
    files = log_files(out)
    assert sorted(files) == sorted([*(str(b) for b in range(9)), "9.compact", "10", "11", "12"])
    for b in (8, 10, 11, 12):
        assert files[str(b)] == "v1"
    assert files["9.compact"] == "\n".join(["v1", *(entry(b) for b in range(8))])
    assert fill_sink_log(Session(), LocalFS(), last, out) == []  # up to date: nothing more


def test_the_interval_comes_from_the_compactions_the_log_holds(tmp_path):
    # one compaction at 4 with the default 10: Spark derives 5, so 9 is the next compaction and
    # holds 4.compact's entries and those of 5..8
    logged = {"4.compact": [entry(b) for b in range(5)], **{str(b): [entry(b)] for b in range(5, 8)}}
    out, last = make(tmp_path, logged, committed=9)
    assert fill_sink_log(Session(), LocalFS(), last, out) == [8, 9]
    assert log_files(out)["9.compact"] == "\n".join(["v1", *(entry(b) for b in range(8))])
    # two compactions: their distance (3) is the interval, whatever the session says
    logged = {"2.compact": [entry(0)], "5.compact": [entry(0), entry(4)]}
    out, last = make(tmp_path / "b", logged, committed=8)
    assert fill_sink_log(Session(interval=10), LocalFS(), last, out) == [6, 7, 8]
    assert log_files(out)["8.compact"] == "\n".join(["v1", entry(0), entry(4)])


def test_deleted_files_leave_a_compaction(tmp_path):
    gone = json.dumps({"path": "file:///out/part-1.parquet", "size": 1, "action": "delete"})
    logged = {"0": [entry(0)], "1": [entry(1)], "2": [gone]}
    out, last = make(tmp_path, logged, committed=4)
    assert fill_sink_log(Session(interval=5), LocalFS(), last, out) == [3, 4]
    assert log_files(out)["4.compact"] == "\n".join(["v1", entry(0)])


def test_a_log_spark_could_not_compact_is_not_written_over(tmp_path):
    # written with interval 10 (no compaction at 4), the session now says 5: Spark's own
    # compaction of 9 would need 4.compact and fail; the fill stops there instead of dropping 0..3
    out, last = make(tmp_path, {str(b): [entry(b)] for b in range(8)}, committed=9)
    with pytest.raises(RuntimeError, match=r"4\.compact is missing"):
        fill_sink_log(Session(interval=5), LocalFS(), last, out)
    assert "9.compact" not in log_files(out)


def test_nothing_is_written_for_a_log_as_new_as_the_checkpoint_or_a_new_output_of_a_new_checkpoint(tmp_path):
    out, last = make(tmp_path, {"0": [entry(0)], "1": [entry(1)]}, committed=1)
    assert fill_sink_log(Session(), LocalFS(), last, out) == []
    assert sorted(log_files(out)) == ["0", "1"]
    assert fill_sink_log(Session(), LocalFS(), None, str(tmp_path / "new-output")) == []  # no batch yet
    assert not os.path.exists(tmp_path / "new-output")


def test_an_output_new_to_a_checkpoint_that_ran_gets_a_log_of_its_batches_so_far(tmp_path):
    # (ks.run into another output: Spark's sink would log the next batch alone, and its reader
    # refuses a log without batch 0)
    out = str(tmp_path / "new-output")
    assert fill_sink_log(Session(interval=5), LocalFS(), 6, out) == list(range(7))
    files = log_files(out)
    assert sorted(files) == sorted(["0", "1", "2", "3", "4.compact", "5", "6"])
    assert all(text == "v1" for text in files.values())  # every batch without a file

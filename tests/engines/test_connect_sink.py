"""A bulk stream's directory and table outputs (Connect: no rename): a crash between the
append and the batch's mark never leaves the batch twice. ``ConnectFS`` does its file work
with DataFrame operations only, which run the same on a classic session: the test drives it
over the shared one and kills the step (an exception at the crash point) between append and
mark, then retries as a restarted query does. The oracle is the list of rows written."""

import pytest

from spark_keyed_sql.engines.bulk import sinks
from spark_keyed_sql.state.connect_fs import ConnectFS

pytestmark = pytest.mark.spark


class Killed(BaseException):
    """The process dying at the crash point (nothing after it runs)."""


def _kill_at(point):
    def crash(name):
        if name == point:
            raise Killed(name)

    return crash


def _batch(spark, version, n, files=3):
    rows = [(f"k{version}-{i}", version, float(i)) for i in range(n)]
    return rows, spark.createDataFrame(rows, "k string, v int, x double").repartition(files)


def _output(spark, out):
    return sorted(tuple(r) for r in spark.read.parquet(out).collect())


def test_a_crash_between_append_and_mark_leaves_the_batch_once(spark, tmp_path, monkeypatch):
    fs, out, cp = ConnectFS(spark), str(tmp_path / "out"), str(tmp_path / "cp")
    rows0, df0 = _batch(spark, 0, 5)
    sinks._write_path_in_place(fs, df0, out, cp, 0)
    rows1, df1 = _batch(spark, 1, 7)
    monkeypatch.setattr(sinks, "crash_point", _kill_at("sink_write"))
    with pytest.raises(Killed):
        sinks._write_path_in_place(fs, df1, out, cp, 1)
    assert _output(spark, out) == sorted(rows0 + rows1)  # appended, not marked
    monkeypatch.setattr(sinks, "crash_point", lambda name: None)
    sinks._write_path_in_place(fs, df1, out, cp, 1)  # the restarted query's retry
    assert _output(spark, out) == sorted(rows0 + rows1)
    sinks._write_path_in_place(fs, df1, out, cp, 1)  # marked: a further retry writes nothing
    assert _output(spark, out) == sorted(rows0 + rows1)


def test_the_retry_keeps_files_of_other_batches_and_other_queries(spark, tmp_path, monkeypatch):
    fs, out = ConnectFS(spark), str(tmp_path / "out")
    cp, other_cp = str(tmp_path / "cp"), str(tmp_path / "other")
    rows1, df1 = _batch(spark, 1, 4)
    monkeypatch.setattr(sinks, "crash_point", _kill_at("sink_write"))
    with pytest.raises(Killed):
        sinks._write_path_in_place(fs, df1, out, cp, 1)
    monkeypatch.setattr(sinks, "crash_point", lambda name: None)
    # after the crash, before the retry: another query sharing the directory writes its batch 1
    other = [("o", 1, 9.0), ("p", 1, 8.0)]
    sinks._write_path_in_place(fs, spark.createDataFrame(other, "k string, v int, x double"), out, other_cp, 1)
    sinks._write_path_in_place(fs, df1, out, cp, 1)
    rows2, df2 = _batch(spark, 2, 3)
    sinks._write_path_in_place(fs, df2, out, cp, 2)
    assert _output(spark, out) == sorted(rows1 + other + rows2)


def test_a_crash_before_the_append_writes_the_batch_once_on_retry(spark, tmp_path, monkeypatch):
    fs, out, cp = ConnectFS(spark), str(tmp_path / "out"), str(tmp_path / "cp")
    rows, df = _batch(spark, 0, 6)

    class Dies:
        def __init__(self, df):
            self.df = df

        @property
        def write(self):
            raise Killed("before the append")

    real = sinks._tagged
    monkeypatch.setattr(sinks, "_tagged", lambda d, tag: Dies(d))
    with pytest.raises(Killed):
        sinks._write_path_in_place(fs, df, out, cp, 0)
    monkeypatch.setattr(sinks, "_tagged", real)
    sinks._write_path_in_place(fs, df, out, cp, 0)
    assert _output(spark, out) == sorted(rows)


@pytest.mark.parametrize("way", ["classic", "connect"])
def test_a_table_output_killed_mid_write_holds_each_batch_once(spark, tmp_path, monkeypatch, way):
    """A bulk stream's table output (a Parquet table, made by the first batch): killed inside
    the write of batch 1, then retried as the restarted query does."""
    if way == "connect":
        monkeypatch.setattr(sinks, "filesystem", lambda s: ConnectFS(s))
    table, cp = f"sink_once_{way}", str(tmp_path / "cp")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    rows0, df0 = _batch(spark, 0, 5)
    sinks.write_batch(spark, df0, table, cp, 0)
    rows1, df1 = _batch(spark, 1, 9)
    monkeypatch.setattr(sinks, "crash_point", _kill_at("sink_write"))
    with pytest.raises(Killed):
        sinks.write_batch(spark, df1, table, cp, 1)
    monkeypatch.setattr(sinks, "crash_point", lambda name: None)
    sinks.write_batch(spark, df1, table, cp, 1)
    sinks.write_batch(spark, df1, table, cp, 1)  # done: once more changes nothing
    got = sorted(tuple(r) for r in spark.table(table).collect())
    spark.sql(f"DROP TABLE {table}")
    assert got == sorted(rows0 + rows1)

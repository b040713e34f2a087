"""A pyspark ``StatefulProcessor`` registered unchanged and run by KeyedTester and both engines.

The processors below follow the processors of Spark's own Python tests
(apache/spark python/pyspark/sql/tests/pandas/helper/helper_pandas_transform_with_state.py:
SimpleStatefulProcessor, ListState/MapState processors, TTLStatefulProcessor,
ProcTimeStatefulProcessor, EventTimeStatefulProcessor, SimpleStatefulProcessorWithInitialState),
with the same state calls and the same input data; the expected outputs are the ones written in
Spark's tests (test_pandas_transform_with_state.py), and two tests also run the same object
through Spark's own ``groupBy(...).transformWithStateInPandas`` / ``transformWithState``.
"""

from collections.abc import Iterator

import pandas as pd
import pytest

pytest.importorskip(
    "pyspark.sql.streaming.stateful_processor", reason="pyspark's StatefulProcessor came with Spark 4.0"
)

from pyspark.errors import PySparkRuntimeError  # noqa: E402
from pyspark.sql import Row  # noqa: E402
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle  # noqa: E402
from pyspark.sql.types import IntegerType, StringType, StructField, StructType  # noqa: E402

from spark_keyed_sql import KeyedTester  # noqa: E402
from spark_keyed_sql.api.errors import RegistrationError, UserFunctionError  # noqa: E402

INT_VALUE = StructType([StructField("value", IntegerType(), True)])
OUT = "id string, countAsString string"
# Spark's test data (_prepare_test_resource1 / 2): id, temperature
BATCH1 = [("0", 123), ("0", 46), ("1", 146), ("1", 346)]
BATCH2 = [("0", 123), ("0", 223), ("0", 323), ("1", 246), ("1", 6)]


def rows_of(batch):
    return [{"id": i, "temperature": t} for i, t in batch]


# --------------------------------------------------------------------------- processors


class PandasViolations(StatefulProcessor):
    """Counts rows and keeps the number of temperatures above 100 (SimpleStatefulProcessor)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.violations = handle.getValueState("numViolations", "value int")  # a DDL schema
        self.temp = handle.getValueState("tempState", INT_VALUE)  # a StructType schema
        handle.deleteIfExists("tempState")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        try:
            self.temp.exists()
            raise AssertionError("a state deleted by deleteIfExists is still usable")
        except PySparkRuntimeError as exc:
            assert "Error checking value state exists" in str(exc)
        seen = self.violations.get()[0] if self.violations.exists() else 0
        count = 0
        for pdf in rows:
            count += int(pdf["temperature"].count())
            seen += int((pdf["temperature"] > 100).sum())
        self.violations.update((seen,))
        yield pd.DataFrame({"id": key, "countAsString": str(count)})


class RowViolations(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.violations = handle.getValueState("numViolations", "value int")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        seen = self.violations.get()[0] if self.violations.exists() else 0
        count = 0
        for row in rows:
            if row.temperature is not None:
                count += 1
                seen += row.temperature > 100
        self.violations.update((seen,))
        yield Row(id=key[0], countAsString=str(count))


class PandasListMap(StatefulProcessor):
    """List state of temperatures, map state per temperature bucket, output from the state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.temps = handle.getListState("temps", "temperature int")
        self.buckets = handle.getMapState("buckets", "bucket string", "n int")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        for pdf in rows:
            vals = pdf["temperature"].tolist()
            if len(vals) > 1:  # Spark refuses an empty appendList
                self.temps.appendList([(int(v),) for v in vals[1:]])
            self.temps.appendValue((int(vals[0]),))
            for v in vals:
                b = "hot" if v > 100 else "cold"
                old = self.buckets.getValue((b,))
                self.buckets.updateValue((b,), ((old[0] if old else 0) + 1,))
        total = sum(t[0] for t in self.temps.get())
        keys = ",".join(sorted(k[0] for k in self.buckets.keys()))  # Spark's map order is its byte order
        hot = self.buckets.getValue(("hot",))[0] if self.buckets.containsKey(("hot",)) else 0
        yield pd.DataFrame({"id": key, "total": [total], "buckets": [keys], "hot": [hot]})


class RowListMap(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.temps = handle.getListState("temps", "temperature int")
        self.buckets = handle.getMapState("buckets", "bucket string", "n int")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        for row in rows:
            self.temps.appendValue((row.temperature,))
            b = "hot" if row.temperature > 100 else "cold"
            old = self.buckets.getValue((b,))
            self.buckets.updateValue((b,), ((old[0] if old else 0) + 1,))
        self.temps.put(sorted(self.temps.get()))
        total = sum(t[0] for t in self.temps.get())
        keys = ",".join(sorted(k[0] for k, _ in self.buckets.iterator()))
        hot = dict((k[0], v[0]) for k, v in self.buckets.iterator()).get("hot", 0)
        yield Row(id=key[0], total=total, buckets=keys, hot=hot)


LISTMAP_OUT = "id string, total bigint, buckets string, hot bigint"


class PandasTTL(StatefulProcessor):
    """TTLStatefulProcessor: value/list/map state with a 10 s TTL next to a state without."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        user_key = StructType([StructField("id", StringType(), True)])
        self.ttl_count = handle.getValueState("ttl-state", INT_VALUE, 10000)
        self.count = handle.getValueState("state", INT_VALUE)
        self.ttl_list = handle.getListState("ttl-list-state", INT_VALUE, 10000)
        self.ttl_map = handle.getMapState("ttl-map-state", user_key, INT_VALUE, 10000)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        id_ = key[0]
        count = self.count.get()[0] if self.count.exists() else 0
        ttl_count = self.ttl_count.get()[0] if self.ttl_count.exists() else 0
        list_count = sum(s[0] for s in self.ttl_list.get()) if self.ttl_list.exists() else 0
        map_count = self.ttl_map.getValue(key)[0] if self.ttl_map.exists() else 0
        n = sum(int(pdf["temperature"].count()) for pdf in rows)
        count, ttl_count, list_count, map_count = count + n, ttl_count + n, list_count + n, map_count + n
        self.count.update((count,))
        if not (ttl_count == 2 and id_ == "0"):  # key 0 skips its TTL updates in batch 2
            self.ttl_count.update((ttl_count,))
            self.ttl_list.put([(list_count,), (list_count,)])
            self.ttl_map.updateValue(key, (map_count,))
        yield pd.DataFrame(
            {
                "id": [f"ttl-count-{id_}", f"count-{id_}", f"ttl-list-state-count-{id_}", f"ttl-map-state-count-{id_}"],
                "count": [ttl_count, count, list_count, map_count],
            }
        )


class PandasProcTimer(StatefulProcessor):
    """ProcTimeStatefulProcessor: a running count; key 0 registers a timer that resets it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count_state", "value string")

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        assert list(self.handle.listTimers()) == list(self.handle.listTimers())
        self.count.clear()
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        yield pd.DataFrame({"id": key, "countAsString": "-1", "timeValues": str(expiredTimerInfo.getExpiryTimeInMs())})

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        count = int(self.count.get()[0]) if self.count.exists() else 0
        if key == ("0",):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        count += sum(len(pdf) for pdf in rows)
        self.count.update((str(count),))
        yield pd.DataFrame(
            {"id": key, "countAsString": str(count), "timeValues": str(timerValues.getCurrentProcessingTimeInMs())}
        )


class RowEventTime(StatefulProcessor):
    """EventTimeStatefulProcessor: the max event time seen; a timer at the watermark clears it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.max_state = handle.getValueState("max_state", "value string")

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        self.max_state.clear()
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        yield Row(id=f"{key[0]}-expired", timestamp=str(expiredTimerInfo.getExpiryTimeInMs()))

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        seconds = [int(row.eventTime.timestamp()) for row in rows]
        cur = int(self.max_state.get()[0]) if self.max_state.exists() else 0
        latest = str(max(cur, max(seconds)))
        self.max_state.update((latest,))
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())
        yield Row(id=key[0], timestamp=latest)


class PandasWithInitialState(StatefulProcessor):
    """SimpleStatefulProcessorWithInitialState: a running sum seeded from an initial state."""

    expected_initial = {("0",): 789, ("3",): 987}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value_state = handle.getValueState("value_state", INT_VALUE)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        acc = self.value_state.get()[0] if self.value_state.exists() else 0
        for pdf in rows:
            acc += pdf["temperature"].astype(int).sum()
        self.value_state.update((acc,))
        yield pd.DataFrame({"id": key, "value": str(acc)})

    def handleInitialState(self, key, initialState, timerValues) -> None:
        init_val = initialState.at[0, "initVal"]
        self.value_state.update((init_val,))
        assert self.expected_initial[key] == init_val


class RowWithInitialState(StatefulProcessor):
    expected_initial = {("0",): 789, ("3",): 987}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value_state = handle.getValueState("value_state", INT_VALUE)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        acc = self.value_state.get()[0] if self.value_state.exists() else 0
        for row in rows:
            acc += row.temperature
        self.value_state.update((acc,))
        yield Row(id=key[0], value=str(acc))

    def handleInitialState(self, key, initialState, timerValues) -> None:
        self.value_state.update((initialState.initVal,))
        assert self.expected_initial[key] == initialState.initVal


# --------------------------------------------------------------------------- KeyedTester


@pytest.mark.parametrize("cls", [PandasViolations, RowViolations])
def test_tester_two_batches_as_in_spark(cls):
    t = KeyedTester(cls, OUT)
    got = [[*t.run(rows_of(b for b in batch if b[0] == k), key=k)] for batch in (BATCH1, BATCH2) for k in ("0", "1")]
    # Spark's test_transform_with_state_in_pandas_basic: batch 0 -> 2, 2; batch 1 -> 3, 2
    assert got == [
        [{"id": "0", "countAsString": "2"}],
        [{"id": "1", "countAsString": "2"}],
        [{"id": "0", "countAsString": "3"}],
        [{"id": "1", "countAsString": "2"}],
    ]
    # the processor's own asserts in Spark: violations 1, 2 after batch 0 and 4, 3 after batch 1
    # a one-field row state is kept as its value: (4,) in pyspark's API, 4 in state tables
    assert t.state("0")["numViolations"] == 4
    assert t.state("1")["numViolations"] == 3
    assert "tempState" not in t.state("0")


def test_tester_ttl_expiry_as_in_spark():
    """Spark's test_value_state_ttl_expiration: three batches 6 s apart, TTL 10 s."""
    t = KeyedTester(PandasTTL(), "id string, count int")  # an instance, as Spark takes it

    def batch(now_ms):
        t.advance_processing_time(now_ms)
        return {r["id"]: r["count"] for k in ("1", "0") for r in t.run([{"id": k, "temperature": 0}], key=k)}

    assert batch(0) == {
        f"{p}-{k}": 1 for k in "01" for p in ("ttl-count", "count", "ttl-list-state-count", "ttl-map-state-count")
    }
    b2 = batch(6000)
    assert b2 == {
        "ttl-count-0": 2,
        "count-0": 2,
        "ttl-list-state-count-0": 3,
        "ttl-map-state-count-0": 2,
        "ttl-count-1": 2,
        "count-1": 2,
        "ttl-list-state-count-1": 3,
        "ttl-map-state-count-1": 2,
    }
    assert batch(12000) == {
        "ttl-count-0": 1,
        "count-0": 3,
        "ttl-list-state-count-0": 1,
        "ttl-map-state-count-0": 1,
        "ttl-count-1": 3,
        "count-1": 3,
        "ttl-list-state-count-1": 7,
        "ttl-map-state-count-1": 3,
    }


def test_tester_processing_time_timer():
    t = KeyedTester(PandasProcTimer, "id string, countAsString string, timeValues string")
    t.advance_processing_time(1000)
    assert t.run([{"id": "0"}, {"id": "0"}], key="0") == [{"id": "0", "countAsString": "2", "timeValues": "1000"}]
    assert t.run([{"id": "1"}], key="1") == [{"id": "1", "countAsString": "1", "timeValues": "1000"}]
    assert t.timers("0") == [1001] and t.timers("1") == []
    # oracle: the timer at 1001 fires once, resets key 0's count and deletes itself
    assert t.advance_processing_time(2000) == [{"id": "0", "countAsString": "-1", "timeValues": "1001"}]
    assert t.state("0") == {} and t.state("1") == {"count_state": "1"}
    assert t.run([{"id": "0"}], key="0") == [{"id": "0", "countAsString": "1", "timeValues": "2000"}]


def test_tester_event_time_timer_row_style():
    import datetime as dt

    t = KeyedTester(RowEventTime, "id string, timestamp string")
    t.set_watermark(5000)
    ev = [{"id": "a", "eventTime": dt.datetime(1970, 1, 1, 0, 0, s)} for s in (7, 12)]
    assert t.run(ev, key="a") == [{"id": "a", "timestamp": "12"}]
    assert t.timers("a") == [5000]
    assert t.set_watermark(6000) == [{"id": "a-expired", "timestamp": "5000"}]
    assert t.state("a") == {} and t.timers("a") == []


def test_tester_positional_rows_and_multi_column_keys():
    class Positional(StatefulProcessor):
        def init(self, handle):
            self.seen = handle.getListState("seen", "a string, b bigint")

        def handleInputRows(self, key, rows, timerValues):
            for row in rows:
                self.seen.appendValue((row.a, row.b))
            yield Row(f"{key[0]}/{key[1]}", len(list(self.seen.get())))  # no field names: by position

    t = KeyedTester(Positional, "k string, n bigint", style="row")
    assert t.run([{"a": "x", "b": 1}, {"a": "y", "b": 2}], key=("u", 7)) == [{"k": "u/7", "n": 2}]
    assert t.run([{"a": "z", "b": 3}], key=("u", 7)) == [{"k": "u/7", "n": 3}]
    # a two-field row state keeps its fields: dicts in the state table, tuples in pyspark's API
    assert t.state(("u", 7)) == {"seen": [{"a": "x", "b": 1}, {"a": "y", "b": 2}, {"a": "z", "b": 3}]}


# --------------------------------------------------------------------------- both engines


def _df(spark, batch):
    return spark.createDataFrame(batch, "id string, temperature int")


@pytest.mark.slow  # two ks.run increments per engine (~20-60 s on tws on a busy 2-core machine)
def test_incremental_runs_as_spark_restart(spark, ks, tmp_path):
    """Spark's test_transform_with_state_in_pandas_query_restarts: two runs on one checkpoint."""
    ks.register("violations", PandasViolations, returns=OUT)
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT s.id, s.countAsString FROM parquet.`{src}` GROUP BY KEY id AS k WITH STATE violations(*) AS s"
    for batch in (BATCH1, BATCH2):
        _df(spark, batch).coalesce(1).write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=out)
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    assert got == [("0", "2"), ("0", "3"), ("1", "2"), ("1", "2")]
    assert {r["k"]: r["numViolations"] for r in ks.read_state(cp).collect()} == {"0": 4, "1": 3}


@pytest.mark.parametrize(
    "style", ["pandas", pytest.param("row", marks=pytest.mark.spark_feature("TRANSFORM_WITH_STATE_ROWS"))]
)
def test_same_output_as_spark_on_the_same_object(spark, ks, style):
    data = BATCH1 + BATCH2 + [("2", 7)]
    proc = PandasListMap() if style == "pandas" else RowListMap()
    ks.register(f"listmap_{style}", proc, returns=LISTMAP_OUT, style=style)
    df = _df(spark, data)
    df.createOrReplaceTempView("sp17_temps")
    ours = ks.sql(f"SELECT s.* FROM sp17_temps GROUP BY KEY id AS k WITH STATE listmap_{style}(*) AS s")
    grouped = df.groupBy("id")
    if style == "pandas":
        theirs = grouped.transformWithStateInPandas(proc, LISTMAP_OUT, "Update", "None")
    else:
        theirs = grouped.transformWithState(proc, LISTMAP_OUT, "Update", "None")
    got = sorted(tuple(r) for r in ours.collect())
    assert got == sorted(tuple(r) for r in theirs.collect())
    # and a plain-Python oracle
    expected = []
    for k in sorted({i for i, _ in data}):
        ts = [t for i, t in data if i == k]
        hot = sum(t > 100 for t in ts)
        expected.append((k, sum(ts), ",".join(b for b, n in (("cold", len(ts) - hot), ("hot", hot)) if n), hot))
    assert got == expected


@pytest.mark.parametrize("cls", [PandasWithInitialState, RowWithInitialState])
def test_initial_state_as_in_spark(spark, ks, cls):
    ks.register("with_init", cls, returns="id string, value string")
    _df(spark, BATCH1).createOrReplaceTempView("sp17_batch1")
    spark.createDataFrame([("0", 789), ("3", 987)], "id string, initVal int").createOrReplaceTempView("sp17_init")
    got = ks.sql(
        "SELECT s.* FROM sp17_batch1 GROUP BY KEY id AS k WITH STATE with_init(*) AS s "
        "INITIAL STATE FROM (SELECT id AS k, initVal FROM sp17_init)"
    ).collect()
    # Spark's test_transform_with_state_init_state: batch 0 -> 0: 789 + 123 + 46, 1: 146 + 346
    assert sorted(tuple(r) for r in got) == [("0", "958"), ("1", "492")]


# --------------------------------------------------------------------------- registration


def test_registration_errors():
    with pytest.raises(RegistrationError, match="style='arrow' is not one of"):
        KeyedTester(PandasViolations, OUT, style="arrow")

    class BadInit(PandasViolations):
        def init(self, handle):
            raise ValueError("boom")

    with pytest.raises(RegistrationError, match=r"BadInit.*init\(handle\) failed at registration: ValueError: boom"):
        KeyedTester(BadInit, OUT)

    class BadClose(PandasViolations):
        def close(self):
            raise OSError("cannot release")

    with pytest.raises(RegistrationError, match=r"BadClose.*close\(\) failed at registration: OSError: cannot release"):
        KeyedTester(BadClose, OUT)

    class CompositeKey(PandasViolations):
        def init(self, handle):
            handle.getMapState("m", "a string, b string", "v int")

    with pytest.raises(RegistrationError, match="getMapState\\('m'\\).*exactly one scalar field"):
        KeyedTester(CompositeKey, OUT)

    class EmptyAppend(RowListMap):
        def handleInputRows(self, key, rows, timerValues):
            self.temps.appendList([])

    with pytest.raises(UserFunctionError, match="empty list"):  # Spark's state store refuses it too
        KeyedTester(EmptyAppend, LISTMAP_OUT).run([{"id": "a", "temperature": 1}], key="a")

    with pytest.raises(RegistrationError, match="constructor arguments"):
        KeyedTester(PandasViolations(), OUT, threshold=3)


# --------------------------------------------------------------------------- docs page


def test_docs_page_examples_run(spark):
    """docs/transform-with-state.md's blocks, checked against the events counted by hand."""
    import re
    from pathlib import Path

    from test_docs import run_python_block

    page = Path(__file__).resolve().parents[2] / "docs" / "transform-with-state.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert len(blocks) == 2
    scope = {"__name__": "docs_transform_with_state", "spark": spark}
    tester_part = run_python_block(blocks[0], scope, "docs/transform-with-state.md")
    assert tester_part == [[{"user_id": "u1", "events": 2}], [{"user_id": "u1", "events": 3}], {"count": 3}]
    sql_part = run_python_block(blocks[1], scope, "docs/transform-with-state.md")
    assert sorted(sql_part[-1]) == [("u1", 2), ("u2", 1)]


@pytest.mark.slow  # three micro-batches per engine
def test_event_time_timers_as_in_spark(spark, ks, tmp_path):
    """Spark's test_transform_with_state_in_pandas_event_time: files a@20s, a@4s, a@11/13/15s read
    one per micro-batch, watermark 10 s; a timer at the current watermark fires in its batch."""
    import datetime as dt

    ks.register("max_event_time", RowEventTime, returns="id string, timestamp string")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    for seconds in ([20], [4], [11, 13, 15]):
        rows = [("a", dt.datetime(1970, 1, 1, 0, 0, s)) for s in seconds]
        spark.createDataFrame(rows, "id string, eventTime timestamp").coalesce(1).write.mode("append").parquet(src)
    sql = (
        f"SELECT s.* FROM parquet.`{src}` GROUP BY KEY id AS k WITH STATE max_event_time(*) AS s "
        "EVENT TIME eventTime WATERMARK '10 seconds' OPTIONS (max_files_per_trigger = 1)"
    )
    assert ks.run(sql, checkpoint=cp, output=out)["batches"] == 3
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())
    # batch 0: ('a', '20'), ('a-expired', '0'); batch 1: ('a', '4'), ('a-expired', '10000');
    # batch 2: ('a', '15'), ('a-expired', '10000')
    assert got == sorted(
        [("a", "20"), ("a-expired", "0"), ("a", "4"), ("a-expired", "10000"), ("a", "15"), ("a-expired", "10000")]
    )


# --------------------------------------------------------------------------- close()


class ClosingCounter(StatefulProcessor):
    """Counts rows per key; close() leaves a marker naming how many keys this instance saw."""

    marker_dir = ""  # set per test (a class attribute: the instance is rebuilt on executors)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "value int")
        self.keys_seen = 0

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        n = sum(1 for _ in rows) + (self.count.get()[0] if self.count.exists() else 0)
        self.count.update((n,))
        self.keys_seen += 1
        yield Row(id=key[0], n=n)

    def close(self) -> None:
        import os
        import uuid

        with open(os.path.join(self.marker_dir, f"{uuid.uuid4().hex}.closed"), "w") as f:
            f.write(str(self.keys_seen))


def _closed(marker_dir):
    """The keys each closed instance had seen (instances that saw none: registration, pre-init)."""
    return [int(p.read_text()) for p in marker_dir.glob("*.closed")]


def _closing_class(marker_dir):
    return type("ClosingCounter", (ClosingCounter,), {"marker_dir": str(marker_dir)})


@pytest.mark.spark_feature("TRANSFORM_WITH_STATE_ROWS")
def test_close_called_by_spark_and_by_every_path(spark, ks, tmp_path):
    """Spark calls close() at the end of each partition's pass; every path here does too, after
    handing the instance all its keys (Spark's own run is the reference)."""
    data = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]
    df = _df(spark, data)
    df.createOrReplaceTempView("sp17_closing")
    keys = len({k for k, _ in data})

    theirs_dir = tmp_path / "spark"
    theirs_dir.mkdir()
    theirs = df.groupBy("id").transformWithState(_closing_class(theirs_dir)(), "id string, n int", "Update", "None")
    expected = sorted(tuple(r) for r in theirs.collect())
    assert sum(_closed(theirs_dir)) == keys  # what Spark does: close() after the instance's keys

    paths = {
        "sql": lambda name: ks.sql(
            f"SELECT s.* FROM sp17_closing GROUP BY KEY id AS k WITH STATE {name}(*) AS s"
        ).collect(),
        "table_function": lambda name: spark.sql(
            f"SELECT id, n FROM {name}(TABLE(SELECT id AS k, temperature FROM sp17_closing), key => 'k')"
        ).collect(),
    }
    for path, run in paths.items():
        d = tmp_path / path
        d.mkdir()
        name = f"closing_{path}"
        ks.register(name, _closing_class(d), returns="id string, n int")
        assert _closed(d) == [0]  # registration's probe instance: init, then close, as Spark's pre-init
        got = sorted(tuple(r) for r in run(name))
        assert got == expected == sorted((k, sum(1 for i, _ in data if i == k)) for k in {k for k, _ in data})
        assert sum(_closed(d)) == keys, path
        assert all(n >= 0 for n in _closed(d))


def test_close_called_by_incremental_runs(spark, ks, tmp_path):
    d = tmp_path / "markers"
    d.mkdir()
    ks.register("closing_run", _closing_class(d), returns="id string, n int")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    _df(spark, [("a", 1), ("b", 2), ("a", 3)]).coalesce(1).write.parquet(src)
    sql = f"SELECT s.* FROM parquet.`{src}` GROUP BY KEY id AS k WITH STATE closing_run(*) AS s"
    ks.run(sql, checkpoint=cp, output=out)
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == [("a", 2), ("b", 1)]
    assert sum(_closed(d)) == 2

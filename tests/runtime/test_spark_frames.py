"""A processor ported from Spark gives Spark's answer: its ``rows`` frame holds what PySpark's
own pandas functions hand (docs/api.md, "What a rows frame holds").

Spark's ``EventTimeStatefulProcessor`` (apache/spark python/pyspark/sql/tests/pandas/helper/
helper_pandas_transform_with_state.py) reads the event time as ``pdf["eventTime"].astype("int64")
// 10**9``: nanoseconds. The oracle is Spark itself: the processor as Spark's test has it, run by
``transformWithStateInPandas`` on the shared session, over the same rows (the first file of
Spark's ``test_transform_with_state_in_pandas_event_time``, a@20s, and a@4s with it). The same
object registered unchanged, its port as a ``KeyedProcessor``, on both engines and in
KeyedTester, must give the same row. (The timer rows, ``a-expired``, depend on when each runner
runs its no-data batch; they are not what this checks.)

The dtype table itself is checked against ``applyInPandas`` in test_key_rows.py; the pandas-2
column of the docs' table was measured with PySpark 4.3.0 and pandas 2.3.3 (CHANGELOG).
"""

import datetime as dt
from collections.abc import Iterator

import pandas as pd
import pytest

pytest.importorskip(
    "pyspark.sql.streaming.stateful_processor", reason="pyspark's StatefulProcessor came with Spark 4.0"
)

from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle  # noqa: E402
from pyspark.sql.types import StringType, StructField, StructType  # noqa: E402

from spark_keyed_sql import KeyedProcessor, KeyedTester, ValueState  # noqa: E402

SCHEMA = "id string, eventTime timestamp"
ROWS = [("a", dt.datetime(1970, 1, 1, 0, 0, 20)), ("a", dt.datetime(1970, 1, 1, 0, 0, 4))]
SPARK_SAYS = [("a", "20")]  # Spark's test: batch 0 outputs Row(id="a", timestamp="20")


class EventTimeStatefulProcessor(StatefulProcessor):
    """As in Spark's tests: the max event time seen; a timer at the watermark clears it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        state_schema = StructType([StructField("value", StringType(), True)])
        self.handle = handle
        self.max_state = handle.getValueState("max_state", state_schema)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        self.max_state.clear()
        self.handle.deleteTimer(expiredTimerInfo.getExpiryTimeInMs())
        str_key = f"{str(key[0])}-expired"
        yield pd.DataFrame({"id": (str_key,), "timestamp": str(expiredTimerInfo.getExpiryTimeInMs())})

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        timestamp_list = []
        for pdf in rows:
            # int64 will represent timestamp in nanosecond, restore to second
            timestamp_list.extend((pdf["eventTime"].astype("int64") // 10**9).tolist())

        if self.max_state.exists():
            cur_max = int(self.max_state.get()[0])
        else:
            cur_max = 0
        max_event_time = str(max(cur_max, max(timestamp_list)))

        self.max_state.update((max_event_time,))
        self.handle.registerTimer(timerValues.getCurrentWatermarkInMs())

        yield pd.DataFrame({"id": key, "timestamp": max_event_time})

    def close(self) -> None:
        pass


class MaxEventTime(KeyedProcessor):
    """The same processor ported: state, timer and the frame idiom unchanged."""

    returns = "id string, timestamp string"
    max_state = ValueState("string")

    def process(self, key, rows):
        timestamp_list = (rows["eventTime"].astype("int64") // 10**9).tolist()
        cur_max = int(self.max_state.get()) if self.max_state.exists() else 0
        max_event_time = str(max(cur_max, max(timestamp_list)))
        self.max_state.update(max_event_time)
        watermark = self.ctx.current_watermark()
        self.ctx.register_timer(watermark if watermark is not None else 0)
        yield pd.DataFrame({"id": [key], "timestamp": [max_event_time]})

    def on_timer(self, key, timestamp):
        self.max_state.clear()
        yield (f"{key}-expired", str(int(timestamp.timestamp() * 1000)))


class MaxEventTimeNumpy(MaxEventTime):
    """The same with rows_format = "numpy": the column is the frame's to_numpy()."""

    rows_format = "numpy"

    def process(self, key, rows):
        seconds = (rows["eventTime"].astype("int64") // 10**9).tolist()
        yield (key, str(max(seconds)))


def _data(rows):
    return [r for r in rows if not r[0].endswith("-expired")]


@pytest.fixture(scope="module")
def event_src(spark, tmp_path_factory):
    src = str(tmp_path_factory.mktemp("event_src"))
    spark.createDataFrame(ROWS, SCHEMA).coalesce(1).write.mode("append").parquet(src)
    return src


@pytest.fixture(scope="module")
def spark_output(spark, event_src, tmp_path_factory):
    """Spark's own run: transformWithStateInPandas over the stream of the file, event time."""
    from spark_keyed_sql.shipping import ship_class

    ship_class(EventTimeStatefulProcessor)  # (this module, by value: Spark's workers cannot import it)
    cp = str(tmp_path_factory.mktemp("spark_cp"))
    stream = (
        spark.readStream.schema(SCHEMA)
        .parquet(event_src)
        .withWatermark("eventTime", "10 seconds")
        .groupBy("id")
        .transformWithStateInPandas(EventTimeStatefulProcessor(), "id string, timestamp string", "Update", "EventTime")
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("spark_frames_event_time")
        .outputMode("update")
        .option("checkpointLocation", cp)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted(tuple(r) for r in spark.table("spark_frames_event_time").collect())


def test_spark_gives_what_its_test_says(spark_output):
    assert _data(spark_output) == SPARK_SAYS


@pytest.mark.parametrize("cls", [EventTimeStatefulProcessor, MaxEventTime, MaxEventTimeNumpy])
def test_spark_processor_and_its_port_give_sparks_answer(spark, ks, event_src, spark_output, tmp_path, cls):
    ks.register("frames_max_event_time", cls, returns="id string, timestamp string")
    out = str(tmp_path / "out")
    sql = (
        f"SELECT s.* FROM parquet.`{event_src}` GROUP BY KEY id AS k WITH STATE frames_max_event_time(*) AS s "
        "EVENT TIME eventTime WATERMARK '10 seconds'"
    )
    ks.run(sql, checkpoint=str(tmp_path / "cp"), output=out)
    assert _data(sorted(tuple(r) for r in spark.read.parquet(out).collect())) == _data(spark_output)


@pytest.mark.parametrize("schema", [SCHEMA, None])
@pytest.mark.parametrize("cls", [EventTimeStatefulProcessor, MaxEventTime, MaxEventTimeNumpy])
def test_the_tester_gives_sparks_answer(spark_output, cls, schema):
    """With the input's schema, or inferring it from the values (a datetime is a timestamp)."""
    tester = KeyedTester(cls, returns="id string, timestamp string", schema=schema)
    got = tester.run([{"id": i, "eventTime": t} for i, t in ROWS], key="a")
    assert _data([(r["id"], r["timestamp"]) for r in got]) == _data(spark_output)


def test_the_tester_types_the_columns_as_spark_does():
    """Without the schema an int column is what Spark infers for a Python int (bigint); with
    it, the declared width; a NULL makes the key's column float64, as in applyInPandas."""

    class Dtypes(KeyedProcessor):
        returns = "c string, dtype string"

        def process(self, key, rows):
            return [(c, str(rows[c].dtype)) for c in rows.columns]

    rows = [{"n": 1, "s": "x", "t": dt.datetime(2026, 1, 1)}]
    inferred = {r["c"]: r["dtype"] for r in KeyedTester(Dtypes).run(rows, key=1)}
    declared = {r["c"]: r["dtype"] for r in KeyedTester(Dtypes, schema="n int, s string, t timestamp").run(rows, key=1)}
    nulls = {r["c"]: r["dtype"] for r in KeyedTester(Dtypes, schema="n smallint").run([{"n": 1}, {"n": None}], key=1)}
    string = str(pd.Series(["x"]).dtype)  # pandas 3: its str dtype; pandas 2: object
    assert inferred == {"n": "int64", "s": string, "t": "datetime64[ns]"}
    assert declared == {"n": "int32", "s": string, "t": "datetime64[ns]"}
    assert nulls == {"n": "float64"}

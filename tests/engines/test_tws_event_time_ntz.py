"""A TIMESTAMP_NTZ event time on engine tws (engines/tws/engine.py): Spark's watermark needs a
TIMESTAMP, so the engine watermarks a column beside it holding the wall clock read as UTC, as
the bulk engine reads a naive time, whatever the session's time zone."""

import dataclasses
import datetime as dt

import pytest
from pyspark.sql import functions as F


@dataclasses.dataclass
class _Plan:  # (the one field the conversion reads and replaces)
    event_time: str


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_the_event_time_instant_is_the_wall_clock_read_as_utc(spark, zone):
    from spark_keyed_sql.engines.tws.engine import _instant_event_time

    walls = [dt.datetime(2026, 1, 15, 9, 30), dt.datetime(2026, 7, 1, 23, 59, 59, 500000), dt.datetime(1999, 12, 31)]
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        df = spark.createDataFrame([(w,) for w in walls], "ts timestamp_ntz")
        out, plan = _instant_event_time(df, _Plan("ts"))
        got = [r[0] for r in out.select(F.unix_micros(plan.event_time)).collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    epoch = dt.datetime(1970, 1, 1)
    assert got == [(w - epoch) // dt.timedelta(microseconds=1) for w in walls]

"""A user's unit tests in a light CI: StatefulFunction, KeyedProcessor, the state descriptors
and KeyedTester with no PySpark installed (tools/smoke.py runs this module in a venv without
it, with --noconftest: the suite's conftest starts Spark). Skipped where PySpark is there."""

import datetime as dt
import importlib.util

import pytest

if importlib.util.find_spec("pyspark") is not None:
    pytest.skip("PySpark is installed here: this module checks a venv without it", allow_module_level=True)

from spark_keyed_sql import (  # noqa: E402
    KeyedProcessor,
    KeyedTester,
    ListState,
    MapState,
    SparkVersionError,
    StatefulFunction,
    ValueState,
)


class Sessions(StatefulFunction):
    __state_exclude__ = ["scratch"]

    def __init__(self, gap_s=30, **kw):
        super().__init__(**kw)
        self.gap_s = gap_s
        self.sessions = 0
        self.last = None
        self.scratch = {}

    def execute(self, event):
        ts = event["ts"]
        if self.last is None or (ts - self.last).total_seconds() > self.gap_s:
            self.sessions += 1
        self.last = ts
        self.scratch[ts] = 1
        return {"sessions": self.sessions}


class Spend(KeyedProcessor):
    returns = "total double, merchants bigint"
    total = ValueState("double", default=0.0, ttl="1 hour")
    recent = ListState("amount double")
    by_merchant = MapState("string", "double")

    def process(self, key, rows):
        for amount, merchant in zip(rows["amount"], rows["merchant"]):
            self.total.update(self.total.get() + float(amount))
            self.recent.append({"amount": float(amount)})
            self.by_merchant.put(merchant, (self.by_merchant.get(merchant) or 0.0) + float(amount))
        self.ctx.register_timer(dt.datetime(2026, 1, 1, 1, 0))
        yield (self.total.get(), len(list(self.by_merchant.keys())))

    def on_timer(self, key, timestamp):
        yield (-1.0, 0)


def test_stateful_function_in_plain_python():
    t0 = dt.datetime(2026, 1, 1)
    events = [{"ts": t0 + dt.timedelta(seconds=s)} for s in (0, 10, 100, 110, 500)]
    tester = KeyedTester(Sessions, returns="sessions bigint", gap_s=30)
    out = tester.run(events, key="u1")
    # by hand: gaps 10, 90, 10, 390 -> new sessions at 0, 100, 500
    assert [o["sessions"] for o in out] == [1, 1, 2, 2, 3]
    state = tester.state("u1")
    assert state["sessions"] == 3 and state["last"] == t0 + dt.timedelta(seconds=500) and "scratch" not in state


def test_keyed_processor_state_ttl_and_timers_in_plain_python():
    tester = KeyedTester(Spend)
    rows = [{"amount": 2.5, "merchant": "a"}, {"amount": 4.0, "merchant": "b"}, {"amount": 1.5, "merchant": "a"}]
    assert tester.run(rows, key="k") == [{"total": 8.0, "merchants": 2}]
    state = tester.state("k")
    assert state["total"] == 8.0 and state["by_merchant"] == {"a": 4.0, "b": 4.0} and len(state["recent"]) == 3
    assert tester.set_watermark(dt.datetime(2026, 1, 1, 2, 0)) == [{"total": -1.0, "merchants": 0}]


class Dtypes(KeyedProcessor):
    returns = "c string, dtype string"

    def process(self, key, rows):
        return [(c, str(rows[c].dtype)) for c in rows.columns]


def test_rows_typed_from_a_ddl_schema_without_pyspark():
    """schema= is parsed without Spark; the frame is typed as applyInPandas types it (docs/api.md):
    the int as int32, the timestamp as datetime64[ns]."""
    rows = [{"n": 1, "ts": dt.datetime(1970, 1, 1, 0, 0, 20)}]
    tester = KeyedTester(Dtypes, schema="n int, ts timestamp")
    assert tester.run(rows, key="k") == [{"c": "n", "dtype": "int32"}, {"c": "ts", "dtype": "datetime64[ns]"}]


def test_keyed_sql_says_pyspark_is_missing():
    with pytest.raises(
        SparkVersionError,
        match=r"KeyedSQL needs PySpark 3\.5 to 4\.3, and no PySpark was found.*spark-keyed-sql\[spark\]",
    ):
        from spark_keyed_sql import KeyedSQL  # noqa: F401

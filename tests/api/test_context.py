"""self.ctx's timers take a UTC datetime or epoch milliseconds in the forms user code has at hand:
Python's, numpy's (a KeyedProcessor's column, ``rows_format = "numpy"``) and pandas'."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from spark_keyed_sql import KeyedProcessor, KeyedTester
from spark_keyed_sql.api.context import to_epoch_ms

MS = 1_704_067_200_123  # 2024-01-01 00:00:00.123 UTC
WHEN = dt.datetime(2024, 1, 1, 0, 0, 0, 123_000)

FORMS = {
    "int": MS,
    "float": float(MS),
    "numpy int64": np.int64(MS),
    "numpy int32 (small)": np.int32(123),
    "numpy float64": np.float64(MS),
    "naive datetime (UTC)": WHEN,
    "aware datetime": WHEN.replace(tzinfo=dt.timezone.utc).astimezone(dt.timezone(dt.timedelta(hours=2))),
    "numpy datetime64[us]": np.datetime64("2024-01-01T00:00:00.123456", "us"),
    "numpy datetime64[ns]": np.datetime64("2024-01-01T00:00:00.123456789", "ns"),
    "pandas Timestamp": pd.Timestamp("2024-01-01 00:00:00.123"),
}
EXPECTED = {"numpy int32 (small)": 123}


@pytest.mark.parametrize("form", FORMS)
def test_epoch_ms_of_every_form(form):
    assert to_epoch_ms(FORMS[form]) == EXPECTED.get(form, MS)


@pytest.mark.parametrize("bad", [True, np.bool_(False), "2024-01-01", float("nan"), np.datetime64("NaT"), None])
def test_not_a_time_is_refused(bad):
    with pytest.raises(TypeError, match="timer timestamp"):
        to_epoch_ms(bad)


class TimerAtColumnMax(KeyedProcessor):
    """Registers a timer at the largest value of a column: an int64 or datetime64 numpy scalar."""

    def process(self, key, rows):
        self.ctx.register_timer(rows["at"].max())
        return []

    def on_timer(self, key, timestamp):
        yield {"key": key, "fired": timestamp}


@pytest.mark.parametrize("rows_format", ["pandas", "numpy"])
@pytest.mark.parametrize("column", ["epoch ms", "timestamp"])
def test_processor_registers_a_timer_from_its_rows(rows_format, column):
    at = [MS - 5, MS] if column == "epoch ms" else [WHEN - dt.timedelta(seconds=1), WHEN]
    t = KeyedTester(TimerAtColumnMax, rows_format=rows_format)
    t.run([{"at": a} for a in at], key="k")
    assert t.timers("k") == [MS]
    fired = t.advance_processing_time(MS)
    assert [(r["key"], r["fired"]) for r in fired] == [("k", WHEN.replace(tzinfo=dt.timezone.utc))]


def test_ctx_outside_a_key_is_a_project_error():
    from spark_keyed_sql import StatefulFunction
    from spark_keyed_sql.api.errors import KeyedSQLError

    class Idle(StatefulFunction):
        def execute(self, e):
            return None

    f = Idle()
    for call in (f.ctx.clear_state, lambda: f.ctx.register_timer(5), f.ctx.list_timers):
        with pytest.raises(KeyedSQLError, match="only available while a key is being processed"):
            call()


@pytest.mark.parametrize("ttl", ["0 seconds", "0 days 0 hours"])
def test_a_ttl_that_is_not_positive_is_refused(ttl):
    """Spark's TTL config requires a positive duration; 0 would expire every value as it is written."""
    from spark_keyed_sql import StatefulFunction, ValueState
    from spark_keyed_sql.api.errors import KeyedSQLError

    with pytest.raises(KeyedSQLError, match="ttl= must be a positive interval"):
        ValueState("bigint", ttl=ttl)

    class Short(StatefulFunction):
        state_ttl = ttl

        def execute(self, e):
            return None

    with pytest.raises(KeyedSQLError, match=r"Short\.state_ttl must be a positive interval"):
        KeyedTester(Short)
    with pytest.raises(KeyedSQLError, match="KeyedTester ttl= must be a positive interval"):
        KeyedTester(TimerAtColumnMax, ttl=ttl)
    with pytest.raises(KeyedSQLError, match="must be a positive interval"):
        ValueState("bigint", ttl=0)  # milliseconds
    with pytest.raises(KeyedSQLError, match="cannot read interval"):
        ValueState("bigint", ttl="-5 minutes")

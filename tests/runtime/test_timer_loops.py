"""An on_timer that keeps registering timers due at once would fire forever: the same timestamp
again (anywhere), or the next periodic timer at end of a one-shot batch's input (every timer is
due there). Both fail with TimerLoopError naming function and key; a long chain that moves time
on up to the watermark, a chain at end of input that ends, and a timestamp re-registered a few
times in a row still fire every timer (oracle: plain arithmetic). KeyedTester, the bulk
engine's one-shot pass and the table function's class in-process, no Spark job; the limits
(millions of timers) are lowered here so a test takes milliseconds."""

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_keyed_sql import KeyedTester, StatefulFunction, TimerLoopError
from spark_keyed_sql.engines.base import output_schema
from spark_keyed_sql.engines.bulk.program import BulkProgram
from spark_keyed_sql.runtime import timers
from spark_keyed_sql.runtime.plan import KeyedPlan
from spark_keyed_sql.runtime.spec import FunctionSpec

MINUTE = 60_000
STUCK, CHAINED = 50, 1_000


@pytest.fixture(autouse=True)
def low_limits(monkeypatch):
    monkeypatch.setattr(timers, "STUCK_LIMIT", STUCK)
    monkeypatch.setattr(timers, "CHAINED_LIMIT", CHAINED)


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class Again(StatefulFunction):
    """Re-registers the timer it is firing."""

    def execute(self, row):
        self.ctx.register_timer(row["t"])
        return None

    def on_timer(self, key, timestamp):
        self.ctx.register_timer(timestamp)
        return None


class Periodic(StatefulFunction):
    """A heartbeat: each timer registers the next one a minute later, up to ``stop`` if given."""

    fired: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.fired = 0
        self.stop = None

    def execute(self, row):
        self.stop = row.get("stop")
        self.ctx.register_timer(row["t"])
        return None

    def on_timer(self, key, timestamp):
        self.fired += 1
        nxt = timestamp + dt.timedelta(minutes=1)
        if self.stop is None or nxt <= EPOCH + dt.timedelta(milliseconds=self.stop):
            self.ctx.register_timer(nxt)
        return [(self.fired,)]


def test_tester_same_timestamp_again_fails_naming_function_and_key():
    t = KeyedTester(Again, returns="x bigint")
    t.run([{"t": 5 * MINUTE}], key="k1")
    with pytest.raises(TimerLoopError, match=r"function 'Again', key 'k1': on_timer keeps registering"):
        t.set_watermark(10 * MINUTE)


def test_tester_periodic_timer_moving_on_fires_up_to_the_watermark():
    """Many more fires than the limits in one pass are fine while each timer is later than the last."""
    t = KeyedTester(Periodic, returns="fired bigint")
    t.run([{"t": 0}], key="k")
    minutes = CHAINED + 500
    out = t.set_watermark(minutes * MINUTE)
    assert [r["fired"] for r in out] == list(range(1, minutes + 2))  # timers at 0, 1, ..., minutes
    assert t.timers("k") == [(minutes + 1) * MINUTE]


SRC = T.StructType([T.StructField("k", T.StringType()), T.StructField("t", T.LongType())])


def one_shot(cls, rows, returns, extra=()):
    spec = FunctionSpec.build("beat", cls, returns, {})
    src = T.StructType([*SRC.fields, *extra])
    names = [f.name for f in src.fields]
    plan = KeyedPlan(spec, ["k"], names[1:])
    out = output_schema(src, plan)
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(names, r)) for r in rows],
        schema=pa.schema([pa.field(n, pa.string() if n == "k" else pa.int64()) for n in names]),
    )
    got = []
    for b in BulkProgram(plan, out, now_ms=0)(iter([batch])):
        got += [tuple(r.values()) for r in b.to_pylist()]
    return got


def test_one_shot_periodic_timer_at_end_of_input_fails_instead_of_firing_forever():
    with pytest.raises(TimerLoopError, match=r"function 'beat', key 'b': on_timer kept registering timers at end"):
        one_shot(Periodic, [("b", 0)], "fired bigint")


def test_one_shot_chain_that_ends_fires_every_timer():
    stop = 30 * MINUTE
    got = one_shot(
        Periodic, [("a", 0, stop), ("b", 5 * MINUTE, stop)], "fired bigint", [T.StructField("stop", T.LongType())]
    )
    expected = [("a", i) for i in range(1, 31 + 1)] + [("b", i) for i in range(1, 26 + 1)]  # a: 0..30, b: 5..30
    assert got == expected


def test_one_shot_chain_just_under_the_limit_fires_every_timer():
    stop = CHAINED * MINUTE  # timers at 0, 1, ..., CHAINED minutes: CHAINED beyond the key's one
    got = one_shot(Periodic, [("a", 0, stop)], "fired bigint", [T.StructField("stop", T.LongType())])
    assert got == [("a", i) for i in range(1, CHAINED + 2)]


class Slices(StatefulFunction):
    """Drains work in slices: each timer re-registers its own timestamp three times, then moves on
    a minute, up to minute 40: far more re-registrations in one pass than STUCK, never many in a row."""

    fired: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.fired = 0

    def execute(self, row):
        self.ctx.register_timer(row["t"])
        return None

    def on_timer(self, key, timestamp):
        self.fired += 1
        if self.fired % 4:
            self.ctx.register_timer(timestamp)
        elif timestamp < EPOCH + dt.timedelta(minutes=40):
            self.ctx.register_timer(timestamp + dt.timedelta(minutes=1))
        return [(self.fired,)]


def test_a_timestamp_re_registered_a_few_times_in_a_row_is_not_a_loop():
    t = KeyedTester(Slices, returns="fired bigint")
    t.run([{"t": 0}], key="k")
    out = t.set_watermark(60 * MINUTE)
    assert [r["fired"] for r in out] == list(range(1, 41 * 4 + 1))  # minutes 0..40, four fires each
    assert 41 * 3 > STUCK
    assert one_shot(Slices, [("s", 0)], "fired bigint") == [("s", i) for i in range(1, 41 * 4 + 1)]


@pytest.mark.spark_feature("UDTF_ANALYZE")  # the table function of plain spark.sql (Spark 4.0+)
def test_table_function_endless_chain_at_end_of_input_fails_naming_function_and_key():
    from pyspark.sql import Row

    from spark_keyed_sql.engines.table_function import make_table_function

    udtf = make_table_function(FunctionSpec.build("beat", Periodic, "fired bigint", {}))()
    list(udtf.eval(Row(k="b", t=0), key="k"))  # (a key's timers fire when the next key starts, or at the end)
    with pytest.raises(TimerLoopError, match=r"function 'beat', key 'b': on_timer kept registering timers at end"):
        list(udtf.terminate())


def test_the_error_from_a_spark_worker_is_raised_as_itself():
    """What the driver gets from a failed job: Spark's exception whose text holds ours."""
    from spark_keyed_sql.streaming.failures import from_spark_failure

    text = (
        "Traceback (most recent call last):\n  File ...\nspark_keyed_sql.api.errors.TimerLoopError: function 'beat', "
        "key 'b': on_timer kept registering timers at end of input (10,000,000 more than the key had, ...)"
    )
    err = from_spark_failure(RuntimeError(text))
    assert type(err) is TimerLoopError and str(err).startswith("function 'beat', key 'b': on_timer kept")

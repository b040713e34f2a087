"""What ``self.ctx``'s timer calls answer, the same on every engine and in KeyedTester: inside
``on_timer`` the timer firing is no longer listed, a timer registered by a class without
``on_timer`` is refused (it would never fire), and ``ks.run``'s ``keys_touched`` counts the
keys each batch ran, timer-only keys included; each against a plain-Python oracle."""

import datetime as dt

import pytest
from data import write_parquet

from spark_keyed_sql import KeyedTester, StatefulFunction
from spark_keyed_sql.api.errors import KeyedSQLError, UserFunctionError

T0 = dt.datetime(2026, 1, 1, 10, 0)
MIN = dt.timedelta(minutes=1)
UTC = dt.timezone.utc


class TwoTimers(StatefulFunction):
    """Each event registers timers 1 and 5 minutes after it; each timer reports the timers left."""

    def execute(self, e):
        self.ctx.register_timer(e["ts"] + MIN)
        self.ctx.register_timer(e["ts"] + 5 * MIN)
        return None

    def on_timer(self, key, timestamp):
        left = ",".join(t.strftime("%H:%M") for t in self.ctx.list_timers())
        return {"fired": timestamp.replace(tzinfo=None), "left": left}


class NoOnTimer(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        self.ctx.register_timer(e["ts"] + MIN)
        return {"n": self.n}


class DeletesOnly(StatefulFunction):
    """No on_timer: deleting a timer (none can exist) and listing them are harmless."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        self.ctx.delete_timer(e["ts"] + MIN)
        return {"n": self.n, "timers": len(self.ctx.list_timers())}


def _event(key, ts):
    return {"user_id": key, "value": 1.0, "amount": 1.0, "merchant": "m", "ts": ts}


def _timer_oracle(events):
    """(key, fired, left): every timer of a key fires once, in time order, and sees the key's
    later timers still registered."""
    out = []
    for key in sorted({k for k, _ in events}):
        timers = sorted({ts + d for k, ts in events if k == key for d in (MIN, 5 * MIN)})
        for i, t in enumerate(timers):
            out.append((key, t, ",".join(x.strftime("%H:%M") for x in timers[i + 1 :])))
    return out


def test_the_firing_timer_is_not_listed_in_the_tester():
    t = KeyedTester(TwoTimers, event_time="ts")
    t.run([{"ts": T0}], key="a")
    fired = t.set_watermark(T0 + 10 * MIN)
    assert [(r["fired"], r["left"]) for r in fired] == [(f, left) for _, f, left in _timer_oracle([("a", T0)])]


def test_the_firing_timer_is_not_listed_and_keys_touched_counts_keys(spark, ks, tmp_path):
    """ks.run in event time on each engine. Run 1: a at 10:00 and b at 10:30; its watermark (10:30)
    fires a's timers in a batch without input. Run 2: c at 10:32, whose watermark fires b's first
    timer (10:31) but not its second (10:35)."""
    ks.register("two_timers", TwoTimers, returns="fired timestamp, left string")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, t.fired, t.left FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE two_timers(ts) AS t EVENT TIME ts WATERMARK '0 seconds'"
    )
    write_parquet(spark, [_event("a", T0), _event("b", T0 + 30 * MIN)], src)
    s1 = ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, [_event("c", T0 + 32 * MIN)], src)
    s2 = ks.run(sql, checkpoint=cp, output=out)
    got = sorted((r[0], r[1], r[2]) for r in spark.read.parquet(out).collect() if r[1] is not None)
    every = _timer_oracle([("a", T0), ("b", T0 + 30 * MIN)])
    assert got == [(k, f, left) for k, f, left in every if f <= T0 + 32 * MIN]
    # the keys each batch ran: a and b (input), then a (timers); c (input) and b (a timer)
    assert (s1["keys_touched"], s2["keys_touched"]) == (3, 2)


def test_a_timer_without_on_timer_is_refused(spark, ks):
    """It could never fire: refused on every engine and in the tester, naming the class."""
    message = "NoOnTimer defines no on_timer"
    with pytest.raises(UserFunctionError, match=message):
        KeyedTester(NoOnTimer).run([{"ts": T0}], key="a")
    ks.register("no_on_timer", NoOnTimer, returns="n bigint")
    spark.createDataFrame([("a", T0)], "user_id string, ts timestamp").createOrReplaceTempView("no_on_timer_src")
    with pytest.raises(KeyedSQLError, match=message):
        ks.sql("SELECT * FROM no_on_timer_src GROUP BY KEY user_id WITH STATE no_on_timer(ts)").collect()


def test_event_time_on_a_column_that_is_not_a_timestamp_is_refused(spark, ks):
    ks.register("two_timers_s", TwoTimers, returns="fired timestamp, left string")
    spark.createDataFrame([("a", "hello", T0)], "user_id string, label string, ts timestamp").createOrReplaceTempView(
        "event_time_string_src"
    )
    sql = (
        "SELECT * FROM event_time_string_src GROUP BY KEY user_id\n"
        "WITH STATE two_timers_s(ts) EVENT TIME label WATERMARK '1 minute'"
    )
    with pytest.raises(
        KeyedSQLError, match=r"line 2, column 40: EVENT TIME of WITH STATE two_timers_s: label is string"
    ):
        ks.sql(sql)


def test_deleting_a_timer_without_on_timer_does_nothing_everywhere(spark, ks, tmp_path):
    """No timer can be registered without on_timer, so deleting one deletes nothing: in the
    tester, a one-shot query and ks.run on each engine (tws raised "timers need a streaming query
    with a time mode")."""
    events = [("a", T0), ("a", T0 + MIN), ("b", T0), ("a", T0 + 2 * MIN), ("b", T0 + 3 * MIN)]
    want, seen = [], {}
    for key, ts in sorted(events, key=lambda e: (e[0], e[1])):
        seen[key] = seen.get(key, 0) + 1
        want.append((key, ts, seen[key], 0))
    t = KeyedTester(DeletesOnly)
    tester = []
    for key, ts in events:
        tester += [(key, ts, r["n"], r["timers"]) for r in t.run([{"ts": ts}], key=key)]
    # the tester takes each call's rows in the order given, which is each key's time order here
    assert sorted(tester) == want
    ks.register("deletes_only", DeletesOnly, returns="n bigint, timers bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    write_parquet(spark, [_event(k, ts) for k, ts in events], src)
    sql = (
        f"SELECT user_id, ts, d.n, d.timers FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE deletes_only(ts) AS d ORDER BY ts"
    )
    assert sorted(tuple(r) for r in ks.sql(sql).collect()) == want
    ks.run(sql, checkpoint=cp, output=out)
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == want


class SessionEnd(StatefulFunction):
    """A session closes 5 minutes after its last event: ``on_timer`` works out the session's
    length from the timer's time and the naive event times it kept, as a user writes it."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.first = None
        self.last = None

    def execute(self, e):
        if self.first is None:
            self.first = e["ts"]
        if self.last is not None and self.last + 5 * MIN in self.ctx.list_timers():
            self.ctx.delete_timer(self.last + 5 * MIN)  # a naive time found among the listed ones
        self.last = e["ts"]
        self.ctx.register_timer(e["ts"] + 5 * MIN)
        return None

    def on_timer(self, key, timestamp):
        assert timestamp.tzinfo is not None and timestamp.utcoffset() == dt.timedelta(0)
        idle = timestamp - self.last  # aware minus naive, naive minus aware: both as UTC
        length = (self.last - self.first) + (timestamp - timestamp)
        out = {
            "ended": timestamp.replace(tzinfo=None),
            "minutes": length / MIN,
            "idle": idle / MIN,
            "after_last": timestamp > self.last and self.last < timestamp,
            "same": timestamp == self.last + 5 * MIN,
        }
        self.ctx.clear_state()
        return out


def _session_oracle(events):
    """One batch, its timers firing at its end: each event moves the key's one timer to 5
    minutes after it, so each key's session runs from its first to its last event."""
    out = []
    for key in sorted({k for k, _ in events}):
        times = sorted(ts for k, ts in events if k == key)
        out.append((key, times[-1] + 5 * MIN, (times[-1] - times[0]) / MIN, 5.0, True, True))
    return out


def test_timer_times_work_with_the_naive_event_times_user_code_keeps(spark, ks):
    """on_timer's timestamp is a UTC datetime that compares with, and subtracts, the naive UTC
    event times (it raised 'can't subtract offset-naive and offset-aware datetimes'), and a naive
    time is found among list_timers(); in the tester and on every engine (a one-shot batch, whose
    timers fire at the end of input)."""
    events = [("a", T0), ("a", T0 + 2 * MIN), ("a", T0 + 20 * MIN), ("b", T0 + 3 * MIN)]
    returns = "ended timestamp, minutes double, idle double, after_last boolean, same boolean"
    t = KeyedTester(SessionEnd, returns=returns, event_time="ts")
    for key, ts in events:
        t.run([{"ts": ts}], key=key)
    fired = t.set_watermark(T0 + 60 * MIN)
    got = sorted((r["ended"], r["minutes"], r["idle"], r["after_last"], r["same"]) for r in fired)
    assert got == sorted(o[1:] for o in _session_oracle(events))
    ks.register("session_end", SessionEnd, returns=returns)
    spark.createDataFrame(events, "user_id string, ts timestamp").createOrReplaceTempView("session_end_events")
    rows = ks.sql(
        "SELECT user_id, s.* FROM session_end_events GROUP BY KEY user_id WITH STATE session_end(ts) AS s "
        "ORDER BY ts EVENT TIME ts WATERMARK '0 seconds'"
    ).collect()
    assert sorted(tuple(r) for r in rows) == _session_oracle(events)


class KeepsFired(StatefulFunction):
    """Keeps the timer's time in a typed attribute and reads it back in a later batch."""

    closed: dt.datetime | None

    def __init__(self, **kw):
        super().__init__(**kw)
        self.closed = None

    def execute(self, e):
        self.ctx.register_timer(e["ts"] + MIN)
        return {"since_close": None if self.closed is None else (e["ts"] - self.closed) / MIN}

    def on_timer(self, key, timestamp):
        assert {timestamp.replace(tzinfo=None): 1}.get(timestamp) == 1  # it hashes as the naive time it equals
        self.closed = timestamp
        return None


def test_a_timers_time_kept_in_state_on_every_engine(spark, ks, tmp_path):
    """The timer's UTC time stored in a typed ``datetime`` attribute (the bulk engine's local store
    refused the new kind: 'cannot store a UTCDateTime') and used in a later run. Each ks.run ends
    with a step that fires the timers its last watermark passed: run 2's fires run 1's timer."""
    ks.register("keeps_fired", KeepsFired, returns="since_close double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, s.since_close FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE keeps_fired(ts) AS s EVENT TIME ts WATERMARK '0 seconds'"
    )
    for minutes in (0, 10, 20):
        write_parquet(spark, [_event("a", T0 + minutes * MIN)], src)
        ks.run(sql, checkpoint=cp, output=out)
    got = [r[1] for r in spark.read.parquet(out).collect() if r[0] == "a"]
    # run 3's row at 10:20 sees the timer of 10:01 (fired at the end of run 2; 10:11's at run 3's end)
    assert sorted(got, key=repr) == sorted([None, None, 19.0], key=repr)

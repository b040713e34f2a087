"""Per-user sessions closed by an event-time timer after 30 minutes of silence, over several
incremental runs, against a plain-Python oracle; late rows are dropped and counted."""

import datetime as dt
import json
from collections import Counter

import numpy as np
import pytest
from data import write_parquet

from spark_keyed_sql import StatefulFunction

GAP = dt.timedelta(minutes=30)
T0 = dt.datetime(2026, 3, 1, 8, 0)


class Sessions(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.start = None
        self.last = None
        self.events = 0

    def _close(self):
        out = {"session_start": self.start, "session_end": self.last, "events": self.events}
        self.start, self.last, self.events = None, None, 0
        return out

    def execute(self, e):
        out = None
        if self.last is not None:
            self.ctx.delete_timer(self.last + GAP)
            if e["ts"] - self.last > GAP:  # the gap closed the session inside this batch
                out = self._close()
        if self.start is None:
            self.start = e["ts"]
        self.last = max(self.last or e["ts"], e["ts"])
        self.events += 1
        self.ctx.register_timer(self.last + GAP)
        return out

    def on_timer(self, key, timestamp):
        out = self._close()
        self.ctx.clear_state()
        return out


def ev(user, minutes):
    return {"user_id": user, "value": 1.0, "amount": 1.0, "merchant": "m", "ts": T0 + dt.timedelta(minutes=minutes)}


# CI runs the TIMESTAMP_NTZ event time on both engines (the same sessions, plus the wall
# clock read as UTC); the plain TIMESTAMP, every other event-time test's, in the slow tier
@pytest.mark.slow_on("bulk-timestamp", "tws-timestamp")
@pytest.mark.parametrize("ts_type", ["timestamp", "timestamp_ntz"])
def test_sessions_close_after_inactivity(spark, ks, tmp_path, ts_type):
    """Also with the event time a TIMESTAMP_NTZ column (what pandas' naive datetimes written to
    Parquet read as), which Spark's own watermark refuses: its wall clock read as UTC."""
    ks.register("sessions", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    if ts_type == "timestamp_ntz":

        def write_parquet(spark, rows, path):
            schema = "user_id string, value double, amount double, merchant string, ts timestamp_ntz"
            spark.createDataFrame([tuple(r.values()) for r in rows], schema).write.mode("append").parquet(path)

    else:
        from data import write_parquet
    runs = [
        [ev("a", 0), ev("a", 10), ev("b", 5), ev("c", 20)],
        [ev("a", 25), ev("b", 50), ev("c", 200)],  # b: 45 min gap closes b's first session in-batch
        [ev("a", 400), ev("late", 1)],  # 'late' is older than the watermark by now: dropped
        [ev("z", 2000)],  # pushes the watermark past every open session
    ]
    sql = (
        f"SELECT user_id, s.* FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE sessions(ts) AS s ORDER BY ts "
        "EVENT TIME ts WATERMARK '5 minutes'"
    )
    late = 0

    def run():
        seen = []
        summary = ks.run(sql, checkpoint=cp, output=out, progress=seen.append)
        ids = [p["batch_id"] for p in seen]
        assert ids == sorted(set(ids))  # each batch once, in order
        if ks.default_engine == "bulk":  # every batch the run committed (the end of input's timers too)
            assert ids == [m["batch_id"] for m in summary["metrics"]], summary
        return summary

    for rows in runs:
        write_parquet(spark, rows, src)
        late += run()["late_rows"]
    run()  # a run without input lets due timers fire
    got = sorted(tuple(r) for r in spark.read.parquet(out).collect())

    # oracle: split each user's on-time events at gaps > 30 minutes; every session ends by the
    # final watermark except z's, which is still open
    events = {}
    for rows in runs:
        for r in rows:
            if r["user_id"] != "late":
                events.setdefault(r["user_id"], []).append(r["ts"])
    expected = []
    for user, ts in events.items():
        ts.sort()
        sessions, cur = [], [ts[0]]
        for t in ts[1:]:
            if t - cur[-1] > GAP:
                sessions.append(cur)
                cur = [t]
            else:
                cur.append(t)
        sessions.append(cur)
        if user == "z":
            sessions = sessions[:-1]
        expected += [(user, s[0], s[-1], len(s)) for s in sessions]
    assert got == sorted(expected)
    assert late == 1


@pytest.mark.spark_feature("UDTF_ANALYZE")
def test_batch_table_function_fires_due_timers_at_end_of_input(spark, ks):
    ks.register("sessions", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    rows = [ev("a", 0), ev("a", 10), ev("a", 100), ev("b", 5), ev("c", 20), ev("c", 45)]
    spark.createDataFrame(
        [(r["user_id"], r["ts"]) for r in rows], "user_id string, ts timestamp"
    ).createOrReplaceTempView("batch_sessions")
    got = sorted(
        tuple(r)
        for r in spark.sql(
            "SELECT * FROM sessions(TABLE(batch_sessions), key => 'user_id', order_by => 'ts')"
        ).collect()
    )
    m = lambda x: T0 + dt.timedelta(minutes=x)  # noqa: E731
    # a's first session closes by the gap, every open session closes at end of input
    assert got == [("a", m(0), m(10), 2), ("a", m(100), m(100), 1), ("b", m(5), m(5), 1), ("c", m(20), m(45), 2)]


def test_batch_sql_fires_due_timers_at_end_of_input(spark, ks):
    """A one-shot batch ks.sql: timers still due at end of input fire then, in timestamp order
    (on 'tws', which has no timers in batch, the query runs on 'bulk')."""
    ks.register("sessions_b", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    rows = [ev("a", 0), ev("a", 10), ev("a", 100), ev("b", 5), ev("c", 20), ev("c", 45)]
    spark.createDataFrame(
        [(r["user_id"], r["ts"]) for r in rows], "user_id string, ts timestamp"
    ).createOrReplaceTempView("batch_sessions_sql")
    got = sorted(
        tuple(r)
        for r in ks.sql(
            "SELECT user_id, s.* FROM batch_sessions_sql GROUP BY KEY user_id WITH STATE sessions_b(ts) AS s "
            "ORDER BY ts EVENT TIME ts WATERMARK '5 minutes'"
        ).collect()
    )
    m = lambda x: T0 + dt.timedelta(minutes=x)  # noqa: E731
    assert got == [("a", m(0), m(10), 2), ("a", m(100), m(100), 1), ("b", m(5), m(5), 1), ("c", m(20), m(45), 2)]


class TimerSeesStoredState(StatefulFunction):
    """on_timer right after the key's events, in the same pass: it sees what storing and
    reloading the state gives (a numpy number comes back a Python float; a clear_state() in the
    last row leaves fresh values and only that row's timer)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.last = None
        self.amount = 0.0

    def execute(self, e):
        self.n += 1
        self.last = e["ts"]
        self.amount = np.float64(e["amount"]) if e["merchant"] == "np" else float(e["amount"])
        if e["merchant"] == "clear":
            self.ctx.clear_state()
        self.ctx.register_timer(e["ts"] - dt.timedelta(hours=1))  # due as soon as the watermark is past it
        return None

    def on_timer(self, key, timestamp):
        seen = (self.n, self.last, type(self.amount).__name__)
        self.n += 100
        return [seen]


def _timer_oracle(rows):
    """Plain Python: per key, the rows in ts order, then every timer left, in time order."""
    by_key = {}
    for r in rows:
        by_key.setdefault(r["user_id"], []).append(r)
    out, final = [], {}
    for user, rs in by_key.items():
        n, last, timers = 0, None, set()
        for r in sorted(rs, key=lambda r: r["ts"]):
            n, last = n + 1, r["ts"]
            if r["merchant"] == "clear":
                n, last, timers = 0, None, set()
            timers.add(r["ts"] - dt.timedelta(hours=1))
        for _ in sorted(timers):
            out.append((user, n, last, "float"))  # state as reloaded: a numpy float comes back a float
            n += 100
        final[user] = (n, last)
    return sorted(out, key=repr), final


def _timer_rows(offset=0):
    def r(user, minutes, merchant="m", amount=1.5):
        return {**ev(user, offset + minutes), "merchant": merchant, "amount": amount}

    return [
        r("plain", 0),
        r("plain", 5),
        r("plain", 9),
        r("np", 0),
        r("np", 3, "np"),  # last row leaves a numpy float in state
        r("np_then_plain", 0, "np"),
        r("np_then_plain", 4),
        r("cleared", 0),
        r("cleared", 7, "clear"),  # last row clears: fresh values, one timer
        r("cleared_early", 0, "clear"),
        r("cleared_early", 8),
    ]


def test_timers_after_events_see_the_stored_state_batch(spark, ks):
    ks.register("timer_sees", TimerSeesStoredState, returns="n bigint, last timestamp, amount_type string")
    rows = _timer_rows()
    spark.createDataFrame(
        [(x["user_id"], x["ts"], x["merchant"], x["amount"]) for x in rows],
        "user_id string, ts timestamp, merchant string, amount double",
    ).createOrReplaceTempView("timer_sees_in")
    got = ks.sql(
        "SELECT user_id, s.* FROM timer_sees_in GROUP BY KEY user_id WITH STATE timer_sees(ts, merchant, amount) AS s "
        "ORDER BY ts EVENT TIME ts WATERMARK '5 minutes'"
    ).collect()
    expected, _ = _timer_oracle(rows)
    assert sorted((tuple(x) for x in got), key=repr) == expected


def test_timers_after_events_see_the_stored_state_stream(spark, ks, tmp_path):
    """In a micro-batch whose watermark is already past the timers the rows register: they fire
    after the key's rows, and the state stored at the end is what on_timer left."""
    ks.register("timer_sees_s", TimerSeesStoredState, returns="n bigint, last timestamp, amount_type string")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, s.* FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE timer_sees_s(ts, merchant, amount) "
        "AS s ORDER BY ts EVENT TIME ts WATERMARK '5 minutes'"
    )
    first = [{**ev("zz", 600), "merchant": "m", "amount": 1.0}]  # moves the watermark to 9h55 past T0
    write_parquet(spark, first, src)
    ks.run(sql, checkpoint=cp, output=out)
    rows = _timer_rows(offset=600)  # on time, and their timers an hour back are already due
    write_parquet(spark, rows, src)
    ks.run(sql, checkpoint=cp, output=out)
    got = sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr)
    expected, final = _timer_oracle(first + rows)  # zz's timer (9h past T0) is due in the second batch too
    assert got == expected
    # read_state shows unannotated attributes as their JSON (a datetime as {"$datetime": iso})
    state = {r["user_id"]: (json.loads(r["n"]), json.loads(r["last"])) for r in ks.read_state(cp).collect()}
    assert state == {
        u: (n, None if last is None else {"$datetime": last.isoformat()}) for u, (n, last) in final.items()
    }


class FollowUp(StatefulFunction):
    """A timer 5 minutes after each event; the timer's row says when it fired."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        self.ctx.register_timer(e["ts"] + dt.timedelta(minutes=5))

    def on_timer(self, key, timestamp):
        return {"fired": timestamp.replace(tzinfo=None), "n": self.n}


def test_a_timer_at_exactly_the_watermark_fires_on_every_engine(spark, ks, tmp_path):
    """Batch 1's event at 0 min sets a timer at 5; batch 2's event at 15 moves the watermark
    (delay 10 minutes) to exactly 5: that timer fires then (at or before the watermark, the
    docs' rule, which tws's operator and bulk keep alike), and batch 3's at 16 (watermark 6)
    fires nothing more than its own events do. The oracle: timers t <= watermark fire."""
    ks.register("follow_up", FollowUp, returns="fired timestamp, n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT user_id, fired, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE follow_up(ts) "
        "ORDER BY ts EVENT TIME ts WATERMARK INTERVAL 10 MINUTES"
    )
    seen: Counter = Counter()
    fired_per_run = []
    events: list = []
    for minute in (0, 15, 16):
        write_parquet(spark, [ev("u1", minute)], src)
        events.append(minute)
        ks.run(sql, checkpoint=cp, output=out)
        rows = Counter((r.fired, r.n) for r in spark.read.parquet(out).collect())
        fired_per_run.append(sorted((rows - seen).elements()))  # this run's rows (a repeat counts too)
        seen = rows
    # the oracle: after each run the watermark is the newest event minus 10 minutes; every
    # timer (event + 5 minutes) at or before it has fired, with the events counted by then
    expected, done = [], set()
    for i in range(len(events)):
        watermark = max(events[: i + 1]) - 10
        due = sorted(m + 5 for m in events[: i + 1] if m + 5 <= watermark and m + 5 not in done)
        done.update(due)
        expected.append([(T0 + dt.timedelta(minutes=t), i + 1) for t in due])
    assert fired_per_run == expected
    assert fired_per_run[1] == [(T0 + dt.timedelta(minutes=5), 2)]  # the boundary itself: fires in run 2

"""Per-user sessions closed by an event-time timer after 30 minutes of silence, over several
incremental runs, against a plain-Python oracle; late rows are dropped and counted."""
import datetime as dt

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


def test_sessions_close_after_inactivity(spark, ks, tmp_path):
    ks.register("sessions", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
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
    for rows in runs:
        write_parquet(spark, rows, src)
        late += ks.run(sql, checkpoint=cp, output=out)["late_rows"]
    ks.run(sql, checkpoint=cp, output=out)  # a run without input lets due timers fire
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


def test_batch_table_function_fires_due_timers_at_end_of_input(spark, ks):
    ks.register("sessions", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    rows = [ev("a", 0), ev("a", 10), ev("a", 100), ev("b", 5), ev("c", 20), ev("c", 45)]
    spark.createDataFrame([(r["user_id"], r["ts"]) for r in rows], "user_id string, ts timestamp").createOrReplaceTempView("batch_sessions")
    got = sorted(tuple(r) for r in spark.sql("SELECT * FROM sessions(TABLE(batch_sessions), key => 'user_id', order_by => 'ts')").collect())
    m = lambda x: T0 + dt.timedelta(minutes=x)  # noqa: E731
    # a's first session closes by the gap, every open session closes at end of input
    assert got == [("a", m(0), m(10), 2), ("a", m(100), m(100), 1), ("b", m(5), m(5), 1), ("c", m(20), m(45), 2)]


def test_batch_sql_fires_due_timers_at_end_of_input(spark, ks):
    """A one-shot batch ks.sql: timers still due at end of input fire then, in timestamp order
    (on 'tws', which has no timers in batch, the query runs on 'bulk')."""
    ks.register("sessions_b", Sessions, returns="session_start timestamp, session_end timestamp, events bigint")
    rows = [ev("a", 0), ev("a", 10), ev("a", 100), ev("b", 5), ev("c", 20), ev("c", 45)]
    spark.createDataFrame([(r["user_id"], r["ts"]) for r in rows], "user_id string, ts timestamp").createOrReplaceTempView("batch_sessions_sql")
    got = sorted(tuple(r) for r in ks.sql(
        "SELECT user_id, s.* FROM batch_sessions_sql GROUP BY KEY user_id WITH STATE sessions_b(ts) AS s ORDER BY ts "
        "EVENT TIME ts WATERMARK '5 minutes'"
    ).collect())
    m = lambda x: T0 + dt.timedelta(minutes=x)  # noqa: E731
    assert got == [("a", m(0), m(10), 2), ("a", m(100), m(100), 1), ("b", m(5), m(5), 1), ("c", m(20), m(45), 2)]

"""Processing-time timers under Spark: registered from the batch's processing time, fired by
later (no-data) batches for keys that get no new input."""

import datetime as dt
import time

from data import SCHEMA, make_events, write_parquet

from spark_keyed_sql import StatefulFunction


class Reminder(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.due = None
        self.seen = 0

    def execute(self, e):
        self.seen += 1
        if self.due is None:
            self.due = self.ctx.current_processing_time() + dt.timedelta(seconds=2)
            self.ctx.register_timer(self.due)
        return {"kind": "row", "at": None, "seen": self.seen}

    def on_timer(self, key, timestamp):
        # both UTC-aware: current_processing_time() and the timer's timestamp
        if timestamp != self.due:
            raise AssertionError(f"timer at {timestamp!r}, registered for {self.due!r}")
        return {"kind": "timer", "at": timestamp, "seen": self.seen}


def test_processing_time_timers_fire_without_new_input(spark, ks, tmp_path):
    ks.register("reminder", Reminder, returns="kind string, at timestamp, seen bigint")
    src = str(tmp_path / "in")
    rows = make_events(20, per_key=2, seed=71)
    write_parquet(spark, rows, src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("reminder_events")
    q = ks.start(
        "SELECT user_id, s.* FROM reminder_events GROUP BY KEY user_id WITH STATE reminder(value) AS s",
        checkpoint=str(tmp_path / "cp"),
        sink="memory:reminders",
        trigger="1 second",
    )
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if spark.sql("SELECT count(*) FROM reminders WHERE kind = 'timer'").collect()[0][0] >= 20:
                break
            time.sleep(1)
    finally:
        q.stop()
    got = spark.sql("SELECT user_id, kind, seen FROM reminders").collect()
    rows_out = sorted((r.user_id, r.seen) for r in got if r.kind == "row")
    timers = sorted((r.user_id, r.seen) for r in got if r.kind == "timer")
    keys = sorted({r["user_id"] for r in rows})
    assert rows_out == sorted((k, i) for k in keys for i in (1, 2))
    assert timers == [(k, 2) for k in keys]  # one timer per key, fired after both rows


class Ticker(StatefulFunction):
    """A timer due at the batch's own processing time: it fires once the batch's rows are in."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = 0

    def execute(self, e):
        self.seen += 1
        self.ctx.register_timer(self.ctx.current_processing_time())
        return []

    def on_timer(self, key, timestamp):
        out = {"kind": "tick", "seen": self.seen}
        self.seen *= 10
        return out


def test_process_all_available_returns_with_processing_time_timers(spark, ks, tmp_path):
    """query.processAllAvailable() on a stream whose function has processing-time timers
    returns once the data written before it is processed and its timers have fired (on tws,
    Spark's own never returns there: its operator asks for a batch on every trigger)."""
    import threading

    ks.register("ticker_paa", Ticker, returns="kind string, seen bigint")
    src = str(tmp_path / "in")
    first, second = make_events(6, per_key=2, seed=72), make_events(4, per_key=3, seed=73)
    write_parquet(spark, first, src)
    spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(src).createOrReplaceTempView(
        "ticker_paa_events"
    )
    q = ks.start(
        "SELECT user_id, s.* FROM ticker_paa_events GROUP BY KEY user_id WITH STATE ticker_paa(value) AS s",
        checkpoint=str(tmp_path / "cp"),
        sink="memory:ticker_paa",
        trigger="200 milliseconds",
    )

    def all_available():
        t = threading.Thread(target=q.processAllAvailable, daemon=True)
        t.start()
        t.join(120)
        assert not t.is_alive(), "processAllAvailable() did not return within 120 s"

    def expected(batches):  # plain Python: per batch and key, seen += rows, a tick, seen *= 10
        seen, out = {}, []
        for rows in batches:
            for k in sorted({r["user_id"] for r in rows}):
                seen[k] = seen.get(k, 0) + sum(1 for r in rows if r["user_id"] == k)
                out.append((k, "tick", seen[k]))
                seen[k] *= 10
        return sorted(out)

    try:
        all_available()
        got = sorted(tuple(r) for r in spark.sql("SELECT user_id, kind, seen FROM ticker_paa").collect())
        assert got == expected([first])
        write_parquet(spark, second, src)
        all_available()
        got = sorted(tuple(r) for r in spark.sql("SELECT user_id, kind, seen FROM ticker_paa").collect())
        assert got == expected([first, second])
    finally:
        q.stop()

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

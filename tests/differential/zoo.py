"""The classes the differential test runs through every path: the SAGE seed's patterns (from
tests/sage_patterns.py, verbatim), KeyedProcessors with Value/List/Map state and TTL, and
processing- and event-time timers."""

import datetime as dt

from spark_keyed_sql import KeyedProcessor, ListState, MapState, StatefulFunction, ValueState

__all__ = ["Typed", "TtlTyped", "EventSessions", "Ticker", "TwoSides", "Whole"]


class Typed(KeyedProcessor):
    """Value / List / Map state; output built from state (lists and dicts returned live)."""

    total = ValueState("double", default=0.0)
    recent = ListState("n bigint, v double")
    by_bucket = MapState("bigint", "bigint")

    def process(self, key, rows):
        for n, v in zip(rows["n"], rows["value"]):
            self.total.update(self.total.get() + float(v))
            kept = list(self.recent.get())[-2:]
            kept.append({"n": int(n), "v": float(v)})
            self.recent.put(kept)
            b = int(n) % 3
            self.by_bucket.put(b, (self.by_bucket.get(b) or 0) + 1)
        yield {
            "total": self.total.get(),
            "recent_n": [r["n"] for r in self.recent.get()],
            "buckets": dict(self.by_bucket.items()),
        }


class TtlTyped(Typed):
    """The same with TTLs far longer than a test run: the TTL code paths, no expiry."""

    total = ValueState("double", default=0.0, ttl="30 days")
    recent = ListState("n bigint, v double", ttl="30 days")
    by_bucket = MapState("bigint", "bigint", ttl="30 days")


class Whole(StatefulFunction):
    """Whole events kept in a list attribute, a dict of sets, and the live list returned."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.events = []
        self.seen = {}

    def execute(self, e):
        self.events.append({"n": e["n"], "v": e["value"]})
        self.events = self.events[-3:]
        self.seen.setdefault(e["n"] % 2, set()).add(e["n"] % 5)
        return {"last_ns": [x["n"] for x in self.events], "odd": sorted(self.seen.get(1, set()))}


class EventSessions(StatefulFunction):
    """Sessions closed by an event-time timer 30 minutes after the last event. ``who`` (the
    key) is in the output because KeyedTester's timer outputs do not carry the key."""

    GAP = dt.timedelta(minutes=30)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.start = None
        self.last = None
        self.count = 0

    def execute(self, e):
        if self.last is not None:
            self.ctx.delete_timer(self.last + self.GAP)
        if self.start is None:
            self.start = e["ts"]
        self.last = e["ts"] if self.last is None else max(self.last, e["ts"])
        self.count += 1
        self.ctx.register_timer(self.last + self.GAP)
        return {"who": self.ctx.get_key(), "kind": "row", "start": self.start, "count": self.count}

    def on_timer(self, key, timestamp):
        out = {"who": key, "kind": "closed", "start": self.start, "count": self.count}
        self.ctx.clear_state()
        return out


class Ticker(KeyedProcessor):
    """A processing-time timer due at once (the batch's own time): it fires at the end of the
    same batch on every path, whatever the wall clock says."""

    seen = ValueState("bigint", default=0)

    def process(self, key, rows):
        self.seen.update(self.seen.get() + len(rows))
        self.ctx.register_timer(self.ctx.current_processing_time())
        yield {"who": key, "kind": "rows", "seen": self.seen.get()}

    def on_timer(self, key, timestamp):
        yield {"who": key, "kind": "tick", "seen": self.seen.get()}
        self.seen.update(self.seen.get() * 10)


class TwoSides(StatefulFunction):
    """Two named inputs, ``evens`` and ``odds``, into one state per key: rows and a total per
    input, emitted on every row; an event-time timer 30 minutes after the key's last row of
    either input closes the key (one watermark over both inputs)."""

    GAP = dt.timedelta(minutes=30)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.evens = 0
        self.odds = 0
        self.total = 0.0
        self.last = None

    def execute(self, e):
        if self.ctx.input == "evens":
            self.evens += 1
        else:
            self.odds += 1
        self.total += e["value"] if e["n"] % 3 else -e["value"]
        if self.last is not None:
            self.ctx.delete_timer(self.last + self.GAP)
        self.last = e["ts"] if self.last is None else max(self.last, e["ts"])
        self.ctx.register_timer(self.last + self.GAP)
        return {
            "who": self.ctx.get_key(),
            "side": self.ctx.input,
            "evens": self.evens,
            "odds": self.odds,
            "total": self.total,
        }

    def on_timer(self, key, timestamp):
        out = {"who": key, "side": "closed", "evens": self.evens, "odds": self.odds, "total": self.total}
        self.ctx.clear_state()
        return out

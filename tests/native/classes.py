"""The classes the native differential test runs both ways: the done-when list of #47 (the
SAGE seed's UserSessionFunction, a gap sessionizer, a running max with the time it was reached,
a conditional counter) and the suite's counter (W1)."""

from __future__ import annotations

import datetime as dt

from sage_patterns import UserSessionFunction  # the SAGE seed's class, verbatim

from spark_keyed_sql import StatefulFunction

__all__ = ["Counter", "UserSessionFunction", "Sessionizer", "RunningMax", "RunningMaxOfFloats", "BigSpends", "GAP"]

GAP = dt.timedelta(minutes=30)


class Counter(StatefulFunction):  # W1, the SAGE per-key counter
    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, row):
        self.n += 1
        self.total += row["value"]
        return [(self.n, self.total)]


class Sessionizer(StatefulFunction):  # a new session after a 30-minute gap
    def __init__(self, **kw):
        super().__init__(**kw)
        self.session = 0
        self.events = 0
        self.last_ts = None

    def execute(self, row):
        ts = row["ts"]
        if self.last_ts is None or ts - self.last_ts > GAP:
            self.session += 1
            self.events = 0
        self.events += 1
        self.last_ts = ts
        return {"session": self.session, "events": self.events}


class RunningMax(StatefulFunction):  # the largest value so far and when it was reached
    def __init__(self, **kw):
        super().__init__(**kw)
        self.best = None
        self.best_at = None

    def execute(self, row):
        if self.best is None or row["amount"] > self.best:
            self.best = row["amount"]
            self.best_at = row["ts"]
        return {"best": self.best, "best_at": self.best_at}


class RunningMaxOfFloats(StatefulFunction):  # the same over floats: NULLs skipped, a NaN taken first stays
    def __init__(self, **kw):
        super().__init__(**kw)
        self.max_v, self.max_at, self.seen = None, None, 0

    def execute(self, row):
        v = row["value"]
        self.seen += 1
        if v is not None:
            if self.max_v is None or v > self.max_v:
                self.max_v = v
                self.max_at = row["ts"]
        return {"max_v": self.max_v, "max_at": self.max_at, "seen": self.seen}


class BigSpends(StatefulFunction):  # a conditional counter and sum, and a flag on the previous row
    def __init__(self, **kw):
        super().__init__(**kw)
        self.big = 0
        self.big_total = 0
        self.was_big = False

    def execute(self, row):
        amount = row["amount"]
        twice = self.was_big and amount > 100
        if amount > 100:
            self.big += 1
            self.big_total += amount
        self.was_big = amount > 100
        return {"big": self.big, "big_total": self.big_total, "twice": twice, "low": min(amount, 10) - abs(amount)}

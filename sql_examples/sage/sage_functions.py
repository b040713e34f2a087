"""The SAGE keyed-state doc's patterns as registered classes (the seed's code, with the
time window on event time so results are reproducible)."""

from spark_keyed_sql import StatefulFunction


class UserSessionFunction(StatefulFunction):
    """Per-user session count and running total."""

    returns = "session_count bigint, total_value double"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.session_count = 0
        self.total_value = 0.0

    def execute(self, event):
        self.session_count += 1
        self.total_value = round(self.total_value + event["value"], 2)
        return {"session_count": self.session_count, "total_value": self.total_value}


class CounterFunction(StatefulFunction):
    """The seed's per-key counter: ``{key: count}``."""

    returns = "counts map<string, bigint>"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.counters = {}

    def execute(self, data):
        key = self.ctx.get_key()
        self.counters[key] = self.counters.get(key, 0) + 1
        return {key: self.counters[key]}


class WindowAggregator(StatefulFunction):
    """Events per key per tumbling window of event time; windows older than two are dropped."""

    returns = "window_start timestamp, count bigint"

    def __init__(self, window_size=3600, **kwargs):
        super().__init__(**kwargs)
        self.window_data = {}  # {window_id: count}
        self.window_size = window_size

    def execute(self, event):
        import datetime as dt

        seconds = int(event["ts"].replace(tzinfo=dt.timezone.utc).timestamp())
        window_id = seconds // self.window_size
        self.window_data[window_id] = self.window_data.get(window_id, 0) + 1
        for w in [w for w in self.window_data if w < window_id - 2]:
            del self.window_data[w]
        start = dt.datetime.fromtimestamp(window_id * self.window_size, dt.timezone.utc).replace(tzinfo=None)
        return {"window_start": start, "count": self.window_data[window_id]}


class FeatureComputer(StatefulFunction):
    """Running mean / count / min / max of ``value`` per entity."""

    returns = "mean double, count bigint, min double, max double"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.features = {"mean": 0.0, "count": 0, "min": None, "max": None}

    def execute(self, event):
        f = self.features
        v = event["value"]
        f["count"] += 1
        f["mean"] = f["mean"] + (v - f["mean"]) / f["count"]
        f["min"] = v if f["min"] is None else min(f["min"], v)
        f["max"] = v if f["max"] is None else max(f["max"], v)
        return {"mean": round(f["mean"], 6), "count": f["count"], "min": f["min"], "max": f["max"]}


class FlexibleFunction(StatefulFunction):
    """Works keyed (per-key count) and unkeyed (one global count)."""

    returns = "scope string, count bigint"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.count = 0

    def execute(self, data):
        self.count += 1
        return {"scope": "per key" if self.ctx.is_keyed else "global", "count": self.count}

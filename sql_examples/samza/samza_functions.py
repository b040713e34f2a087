"""The Samza state doc's stateful stream processing patterns as registered classes."""

import datetime as dt

from spark_keyed_sql import StatefulFunction

EXPIRY = dt.timedelta(minutes=10)


class HourlyPageViews(StatefulFunction):
    """Windowed aggregation: page views per member per hour; a window's count is emitted when
    the member's next view falls in a later hour, and still-open windows at end of input by
    an event-time timer at the hour's end."""

    returns = "hour timestamp, views bigint"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.hour = None
        self.views = 0

    def execute(self, view):
        hour = view["ts"].replace(minute=0, second=0, microsecond=0)
        out = None
        if self.hour is not None and hour != self.hour:
            out = {"hour": self.hour, "views": self.views}
            self.ctx.delete_timer(self.hour + dt.timedelta(hours=1))
            self.hour, self.views = None, 0
        if self.hour is None:
            self.hour = hour
            self.ctx.register_timer(hour + dt.timedelta(hours=1))
        self.views += 1
        return out

    def on_timer(self, key, timestamp):
        out = {"hour": self.hour, "views": self.views}
        self.ctx.clear_state()
        return out


class ProfileSettingsJoin(StatefulFunction):
    """Table-table join of two inputs, ``profiles`` and ``settings``: the latest profile and the
    latest settings of a member; every change to either emits the joined row once both are
    known (the joined changelog)."""

    returns = "ts timestamp, region string, language string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.region = None
        self.language = None

    def execute(self, change):
        if self.ctx.input == "profiles":
            self.region = change["region"]
        else:
            self.language = change["language"]
        if self.region is not None and self.language is not None:
            return {"ts": change["ts"], "region": self.region, "language": self.language}
        return None


class EnrichWithRegion(StatefulFunction):
    """Table-stream join of ``profiles`` and ``page_views``: each view enriched with the
    member's region as of the view."""

    returns = "ts timestamp, page string, region string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.region = None

    def execute(self, e):
        if self.ctx.input == "profiles":
            self.region = e["region"]
            return None
        return {"ts": e["ts"], "page": e["page"], "region": self.region}


class AdClickJoin(StatefulFunction):
    """Stream-stream join of ``impressions`` and ``clicks``: a click joins its impression if it
    comes within 10 minutes; an impression not clicked in time expires (event-time timer) and is
    reported unmatched."""

    returns = "ad string, outcome string, delay_seconds bigint"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.ad = None
        self.shown = None

    def execute(self, e):
        if self.ctx.input == "impressions":
            self.ad, self.shown = e["ad"], e["ts"]
            self.ctx.register_timer(self.shown + EXPIRY)
            return None
        if self.shown is not None and e["ts"] - self.shown <= EXPIRY:
            out = {"ad": self.ad, "outcome": "clicked", "delay_seconds": int((e["ts"] - self.shown).total_seconds())}
            self.ctx.clear_state()  # also deletes the expiry timer
            return out
        return None  # a click for an expired (or unknown) impression

    def on_timer(self, key, timestamp):
        out = {"ad": self.ad, "outcome": "expired", "delay_seconds": None}
        self.ctx.clear_state()
        return out

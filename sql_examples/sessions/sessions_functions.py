"""Per-user sessions closed by an event-time timer after 30 minutes without a click."""

import datetime as dt

from spark_keyed_sql import StatefulFunction

GAP = dt.timedelta(minutes=30)


class ClickSessions(StatefulFunction):
    returns = "session_start timestamp, session_end timestamp, clicks bigint"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.start = None
        self.last = None
        self.clicks = 0

    def _close(self):
        out = {"session_start": self.start, "session_end": self.last, "clicks": self.clicks}
        self.start, self.last, self.clicks = None, None, 0
        return out

    def execute(self, click):
        out = None
        if self.last is not None:
            self.ctx.delete_timer(self.last + GAP)
            if click["ts"] - self.last > GAP:
                out = self._close()
        if self.start is None:
            self.start = click["ts"]
        self.last = click["ts"]
        self.clicks += 1
        self.ctx.register_timer(self.last + GAP)
        return out

    def on_timer(self, key, timestamp):
        out = self._close()
        self.ctx.clear_state()
        return out

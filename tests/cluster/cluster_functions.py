import os

from spark_keyed_sql import StatefulFunction


class Running(StatefulFunction):
    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total = round(self.total + e["value"], 6)
        return (self.n, self.total)


class SlowRunning(Running):
    """Running, slowed down (a sleep per row) so a test can kill a worker mid-query; marks its
    first call in ``marker``."""

    def __init__(self, marker: str = "", **kw):
        super().__init__(**kw)
        self._marker = marker

    def execute(self, e):
        import time

        if self._marker and not os.path.exists(self._marker):
            open(self._marker, "a").close()
        time.sleep(0.02)
        return super().execute(e)

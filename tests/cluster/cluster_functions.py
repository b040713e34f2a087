"""Classes the cluster drivers register: the shared RunningTotal (tests/keyed_functions.py) as
``Running``, and a slowed-down one for the executor-loss test."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyed_functions import RunningTotal as Running  # noqa: E402

from spark_keyed_sql import StatefulFunction  # noqa: E402

__all__ = ["Running", "RunningNative", "SlowRunning"]


class RunningNative(StatefulFunction):
    """Running without its round(): a class the native planner runs as Spark SQL (the data's
    values are whole numbers, so its totals are the oracle's exactly)."""

    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["value"]
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

"""Classes the cluster drivers register: the shared RunningTotal (tests/keyed_functions.py) as
``Running``, and a slowed-down one for the executor-loss test."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyed_functions import RunningTotal as Running  # noqa: E402
from keyed_functions import RunningTotalNative as RunningNative  # noqa: E402

from spark_keyed_sql import StatefulFunction  # noqa: E402

__all__ = ["Running", "RunningNative", "SlowRunning", "TopSeq"]


class TopSeq(StatefulFunction):
    """The largest ``seq`` of a key so far, kept as JSON (unannotated): a class the native
    planner takes."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.top = 0

    def execute(self, e):
        if e["seq"] > self.top:
            self.top = e["seq"]
        return (self.top,)


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

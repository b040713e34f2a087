"""The crash child's classes: the shared RunningTotal (tests/keyed_functions.py), and the same
with the row's ``seq`` in its output (the table-function form returns only key and outputs)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyed_functions import RunningTotal  # noqa: E402

from spark_keyed_sql import StatefulFunction  # noqa: E402

__all__ = ["RunningTotal", "RunningTotalBySeq", "RunningTotalNative"]


class RunningTotalBySeq(RunningTotal):
    def execute(self, e):
        return (e["seq"], *super().execute(e))


class RunningTotalNative(StatefulFunction):
    """RunningTotal without its round(): a class the native planner runs as Spark SQL on
    streams (the harness's values are whole numbers, so the sums are the oracle's exactly)."""

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

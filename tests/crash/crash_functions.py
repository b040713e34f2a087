"""The crash child's classes: the shared RunningTotal (tests/keyed_functions.py), and the same
with the row's ``seq`` in its output (the table-function form returns only key and outputs)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyed_functions import RunningTotal, RunningTotalNative  # noqa: E402

__all__ = ["RunningTotal", "RunningTotalBySeq", "RunningTotalNative"]


class RunningTotalBySeq(RunningTotal):
    def execute(self, e):
        return (e["seq"], *super().execute(e))

"""The crash child's class: the shared RunningTotal (tests/keyed_functions.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyed_functions import RunningTotal  # noqa: E402

__all__ = ["RunningTotal"]

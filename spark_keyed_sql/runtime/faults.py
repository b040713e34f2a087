"""Fault injection for the crash tests (``state/faults.py``, where the checkpoint lease can reach it
too): named points where a test may SIGKILL the driver."""

from ..state.faults import POINTS, crash_point

__all__ = ["crash_point", "POINTS"]

"""A KeyedProcessor's ``rows`` (one pandas DataFrame per key, or its columns as numpy arrays
for ``rows_format = "numpy"``) cut from one conversion per Arrow batch, instead of a frame built
per key (half of such a pass's time, measured).

Each key's frame is what PySpark's ``applyInPandas`` hands for that key's rows
(``runtime/spark_frames.py``): the batch's columns are converted once, and a key whose columns
keep their batch dtype is a zero-copy slice (through pandas' block manager); a key with a NULL
in an int or bool column gets that column's float64 / object form. ``frame_slicer`` answers
``None`` where the conversion cannot be made (the caller then builds frames from the events).
"""

from __future__ import annotations

from typing import Any

from ...runtime.spark_frames import ArrowColumns

__all__ = ["frame_slicer"]


def frame_slicer(names: list[str], cols: list[Any], n: int) -> ArrowColumns | None:
    """The batch's argument columns converted for cutting per key, or None."""
    try:
        return ArrowColumns(names, cols, n)
    except Exception:  # noqa: BLE001 - the caller's per-key way gives the same frames
        return None

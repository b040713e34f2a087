"""Engine ``bulk``: many keys per Python call, state in versioned Parquet snapshots. The names
load on first use (``engines/__init__.py``: a Python worker importing the step's program skips
the engine's driver side)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...compat.lazy import lazy_names

if TYPE_CHECKING:
    from .engine import BulkEngine
    from .layout import BulkLayout

__all__ = ["BulkEngine", "BulkLayout"]

_WHERE = {"BulkEngine": ".engine", "BulkLayout": ".layout"}

__getattr__ = lazy_names(__name__, _WHERE)

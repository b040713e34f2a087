"""Engine ``bulk``: many keys per Python call, state in versioned Parquet snapshots."""

from .engine import BulkEngine
from .layout import BulkLayout

__all__ = ["BulkEngine", "BulkLayout"]

"""Engine ``tws``: Spark's transformWithState with the RocksDB state store."""

from .engine import TransformWithStateEngine
from .layout import ATTRIBUTES_VAR, EXPIRES, TwsLayout

__all__ = ["ATTRIBUTES_VAR", "EXPIRES", "TransformWithStateEngine", "TwsLayout"]

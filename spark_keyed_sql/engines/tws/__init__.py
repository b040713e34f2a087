"""Engine ``tws``: Spark's transformWithState with the RocksDB state store. The names load on
first use (``engines/__init__.py``: a Python worker importing the processor's module skips the
engine's driver side)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...compat.lazy import lazy_names

if TYPE_CHECKING:
    from .engine import TransformWithStateEngine
    from .layout import ATTRIBUTES_VAR, EXPIRES, TwsLayout

__all__ = ["ATTRIBUTES_VAR", "EXPIRES", "TransformWithStateEngine", "TwsLayout"]

_WHERE = {name: ".engine" if name == "TransformWithStateEngine" else ".layout" for name in __all__}

__getattr__ = lazy_names(__name__, _WHERE)

"""Execution engines behind one interface (``base.Engine``), the one registry of them and the
one choice between them (``registry.py``). The session, the SQL rewriter, the CLI and the tests
all take the engines from here; nothing outside this package branches on an engine's name or
type.

The names load on first use: a Python worker unpickling an engine's task function (a bulk
step's program, a tws processor) imports this package on the way to its module, and should not
pay for every engine and the planner beside it: a tws query's first batch runs its processor
in a fresh Python process on the driver, and its imports took 0.9-1.1 s with the engines loaded
eagerly, 0.5-0.9 s without them and sqlglot (``-X importtime``, 2026-12-02, 2 busy cores)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..compat.lazy import lazy_names

if TYPE_CHECKING:
    from .base import Capabilities, Engine, Position, StateLayout, StreamJob, StreamRun, output_schema
    from .registry import (
        AUTO,
        ENGINES,
        LEGACY_ENGINE,
        available,
        choose,
        engine_names,
        get_engine,
        keeps_state_names,
        migration_target,
        require_engine,
    )

__all__ = [
    "AUTO",
    "Capabilities",
    "ENGINES",
    "Engine",
    "LEGACY_ENGINE",
    "Position",
    "StateLayout",
    "StreamJob",
    "StreamRun",
    "available",
    "choose",
    "engine_names",
    "get_engine",
    "keeps_state_names",
    "migration_target",
    "output_schema",
    "require_engine",
]

_BASE = ("Capabilities", "Engine", "Position", "StateLayout", "StreamJob", "StreamRun", "output_schema")
_WHERE = {name: ".base" if name in _BASE else ".registry" for name in __all__}

__getattr__ = lazy_names(__name__, _WHERE)

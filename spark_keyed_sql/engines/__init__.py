"""Execution engines behind one interface (``base.Engine``), the one registry of them and the
one choice between them. The session, the SQL rewriter, the CLI and the tests all take the
engines from here; nothing outside this package branches on an engine's name or type."""

from __future__ import annotations

from ..api.errors import SchemaError
from ..runtime.spec import FunctionSpec
from .base import Capabilities, Engine, Position, StateLayout, StreamJob, StreamRun, output_schema
from .bulk import BulkEngine
from .tws import TransformWithStateEngine

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
    "choose",
    "engine_names",
    "get_engine",
    "migration_target",
    "output_schema",
]

AUTO = "auto"

# In the order 'auto' prefers them (BENCHMARKS.md, docs/concepts.md: many keys per Python call
# wins wherever it can run; transformWithState where a streaming DataFrame is needed).
_PREFERENCE: tuple[Engine, ...] = (BulkEngine(), TransformWithStateEngine())
ENGINES: dict[str, Engine] = {e.name: e for e in _PREFERENCE}

# the engine of checkpoints whose metadata predates recording it (the first engine there was)
LEGACY_ENGINE = TransformWithStateEngine.name


def engine_names() -> list[str]:
    """Every engine's name (for option lists, the CLI's --engine, the tests' matrix)."""
    return sorted(ENGINES)


def get_engine(name: str) -> Engine:
    engine = ENGINES.get(str(name).lower())
    if engine is None:
        raise SchemaError(f"unknown engine '{name}'; choose one of {engine_names() + [AUTO]}")
    return engine


def choose(requested: str, *, streaming: bool, spec: FunctionSpec, per_batch_ok: bool = False, connect: bool = False) -> Engine:
    """The engine that runs a keyed step.

    ``requested`` is an engine's name or ``'auto'``. ``streaming``: the source is a stream;
    ``per_batch_ok``: the stream is run by ks.start / ks.run, so an engine that runs streams
    per micro-batch may take it (ks.sql / ks.apply over a stream must return a streaming
    DataFrame); ``connect``: the session is a Spark Connect client.

    'auto' takes the first engine, in preference order, that can run the step. A named engine
    is taken as named, except that a one-shot batch whose function has timers goes to an
    engine that fires timers at end of input when the named one has no timers in a batch.
    """
    needs_batch_timers = not streaming and spec.has_timers
    if requested != AUTO:
        engine = get_engine(requested)
        if needs_batch_timers and not engine.capabilities.batch_timers:
            return next(e for e in _PREFERENCE if e.capabilities.batch_timers)
        return engine

    def can(e: Engine) -> bool:
        c = e.capabilities
        if not streaming:
            return c.batch_timers or not needs_batch_timers
        if connect and not c.streams_on_connect:
            return False
        return c.streams_as_dataframe or (per_batch_ok and not connect and c.streams_per_batch)

    return next(e for e in _PREFERENCE if can(e))


def migration_target() -> Engine:
    """The engine whose checkpoint layout ``migrate_state`` writes."""
    return next(e for e in _PREFERENCE if e.capabilities.migration_target)

"""The one registry of the engines and the one choice between them (re-exported by the
package: ``spark_keyed_sql.engines``)."""

from __future__ import annotations

import logging

from ..api.errors import SchemaError
from ..compat.features import SparkFeatures
from ..runtime.spec import FunctionSpec
from .base import Engine
from .bulk.engine import BulkEngine
from .tws.engine import TransformWithStateEngine

__all__ = [
    "AUTO",
    "ENGINES",
    "LEGACY_ENGINE",
    "available",
    "choose",
    "engine_names",
    "get_engine",
    "keeps_state_names",
    "migration_target",
    "require_engine",
]

log = logging.getLogger(__name__)

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


def available(features: SparkFeatures) -> list[Engine]:
    """The engines the session's Spark has, in preference order."""
    return [e for e in _PREFERENCE if e.requires is None or features.has(e.requires)]


def require_engine(name: str, features: SparkFeatures, where: str = "") -> Engine:
    """The engine named ``name``, or one error when the session's Spark lacks what it needs."""
    engine = get_engine(name)
    if engine.requires is not None:
        features.require(engine.requires, where or f"engine '{engine.name}'")
    return engine


def choose(
    requested: str,
    *,
    streaming: bool,
    spec: FunctionSpec,
    features: SparkFeatures,
    per_batch_ok: bool = False,
) -> Engine:
    """The engine that runs a keyed step.

    ``requested`` is an engine's name or ``'auto'``. ``streaming``: the source is a stream;
    ``per_batch_ok``: the stream is run by ks.start / ks.run, so an engine that runs streams
    per micro-batch may take it (ks.sql / ks.apply over a stream must return a streaming
    DataFrame); ``features``: what the session's Spark has (and whether it is a Connect client).

    'auto' takes the first engine, in preference order, that the session's Spark has and that
    can run the step. A named engine is taken as named (or refused, naming the Spark version
    it needs), except that a one-shot batch whose function has timers goes to an engine that
    fires timers at end of input when the named one has no timers in a batch.
    """
    needs_batch_timers = not streaming and spec.has_timers
    if requested != AUTO:
        engine = require_engine(requested, features)
        if needs_batch_timers and not engine.capabilities.batch_timers:
            return next(e for e in available(features) if e.capabilities.batch_timers)
        return engine

    def can(e: Engine) -> bool:
        c = e.capabilities
        if not streaming:
            return c.batch_timers or not needs_batch_timers
        return c.streams_as_dataframe or (per_batch_ok and c.streams_per_batch)

    engine = next((e for e in available(features) if can(e)), None)
    log.debug(
        "auto engine for %s (streaming=%s, on %s): %s",
        spec.name,
        streaming,
        features.describe(),
        engine.name if engine else None,
    )
    if engine is None:
        # only an engine this Spark lacks could run the step: name what it needs
        wanted = next(e for e in _PREFERENCE if can(e))
        assert wanted.requires is not None
        features.require(wanted.requires, "this keyed query (a streaming DataFrame from ks.sql / ks.apply)")
    return engine


def keeps_state_names(engine: str | None) -> bool:
    """Does the engine of this name keep state where it was written when a class changes
    (``Capabilities.keeps_state_names``)? False for an unknown name."""
    found = ENGINES.get(engine or "")
    return bool(found and found.capabilities.keeps_state_names)


def migration_target() -> Engine:
    """The engine whose checkpoint layout ``migrate_state`` writes."""
    return next(e for e in _PREFERENCE if e.capabilities.migration_target)

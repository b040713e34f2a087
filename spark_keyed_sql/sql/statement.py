"""What the rewriter makes of a keyed statement: its keyed steps (one per keyed SELECT) and the
plain Spark SQL that reads their results; and how a step's result becomes the view that SQL
reads (``bind``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pyspark.sql import DataFrame

from ..engines import ENGINES, Engine, output_schema
from ..engines.native import NativePlan
from ..runtime.connect import is_connect
from ..runtime.plan import KeyedPlan
from .errors import KeyedQueryError

__all__ = ["KeyedStatement", "KeyedStep", "RunMode", "bind", "drop_views", "release_views"]

log = logging.getLogger(__name__)


class RunMode(str, Enum):
    """How a statement is run: ``SQL`` by ks.sql / ks.explain (its result is a DataFrame, batch
    or streaming), ``STREAM`` by ks.start / ks.run (the project starts the streaming query)."""

    SQL = "sql"
    STREAM = "stream"


@dataclass
class KeyedStep:
    """One keyed SELECT, as the rewriter planned it (what EXPLAIN KEYED shows)."""

    function: str
    class_name: str
    keys: list[str]  # rendered "expr AS name"
    arguments: list[str]
    order: list[str]
    options: dict[str, Any]
    engine: Engine
    source_sql: str
    outer_sql: str
    view: str  # the temp view the statement reads the step's result from
    streaming: bool
    source: DataFrame  # the keyed source: internal columns __ks_k<i>, __ks_a<i>, __ks_o<i>, ...
    plan: KeyedPlan
    columns: list[str]  # select expressions: engine output -> the view's columns
    passthrough: list[str] = field(default_factory=list)
    key_names: list[str] = field(default_factory=list)
    # the INITIAL STATE FROM source as written (a checkpoint records what seeded it)
    initial_source: str | None = None
    # bound as a placeholder: the engine runs this step per micro-batch under ks.start / ks.run
    per_batch: bool = False
    # the step planned as Spark SQL (engines/native: a NativePlan), or why not (Declined); None:
    # OPTIONS (native = false) / spark.keyedsql.native=false
    native: Any = None

    @property
    def bootstrapped(self) -> bool:
        return self.initial_source is not None


@dataclass
class KeyedStatement:
    final_sql: str
    steps: list[KeyedStep]
    # the statement is a query (not e.g. CREATE VIEW / CACHE TABLE ... AS a keyed select, which
    # Spark keeps as SQL text naming the step views and analyzes again at each use)
    is_query: bool = True
    # the temp views of its sources it made (a table read as a stream: ks.start / ks.run)
    source_views: list[str] = field(default_factory=list)

    @property
    def per_batch_steps(self) -> list[KeyedStep]:
        return [s for s in self.steps if s.per_batch]


def release_views(spark: Any, statement: KeyedStatement | None, ended: bool = False) -> None:
    """Drop the statement's step views once the DataFrame over them is made: classic PySpark
    analyzes ``spark.sql`` at once, so the DataFrame keeps the steps' plans by itself, and a view
    left behind holds its plan (with any local data in it) for the session's lifetime: a session
    running many keyed statements ran the driver's heap out. Spark Connect analyzes a DataFrame
    again at each action, by view name: its views stay, as they do under a statement that is not
    a query (``CREATE VIEW v AS`` a keyed select: Spark keeps the view's text, naming them). A
    view that cannot be dropped stays (this runs after the statement's own outcome). ks.start /
    ks.run release theirs, and their sources' stream views, once the query has ended (a
    micro-batch reads them by name): ``ended``, on Spark Connect too (no frame reads them
    afterwards)."""
    if statement is None or not statement.is_query or (is_connect(spark) and not ended):
        return
    drop_views(spark, [*(step.view for step in statement.steps), *statement.source_views])


def drop_views(spark: Any, views: list[str]) -> None:
    """Drop these temp views; one that cannot be dropped is logged and stays."""
    for view in views:
        try:
            spark.catalog.dropTempView(view)
        except Exception:  # noqa: BLE001 - a failing gateway: the statement's own result or error matters
            log.debug("could not drop the temp view %s", view, exc_info=True)


def bind(step: KeyedStep, mode: RunMode) -> None:
    """Make ``step``'s result the view ``step.view``: the engine's (lazy) DataFrame, or, for a
    stream on an engine that runs per micro-batch, an empty placeholder with the same columns
    that the engine's streaming run replaces batch by batch."""
    engine = step.engine
    step.plan.use_schema(step.source.schema)
    if step.streaming and not engine.capabilities.streams_as_dataframe:
        if mode is not RunMode.STREAM:
            others = [e.name for e in ENGINES.values() if e.capabilities.streams_as_dataframe]
            raise KeyedQueryError(
                f"WITH STATE {step.function}: engine '{engine.name}' runs a streaming source per micro-batch, so it "
                "has no streaming DataFrame to return; run the statement with ks.start / ks.run, or use engine "
                f"{' or '.join(repr(o) for o in others)}"
            )
        out = step.source.sparkSession.createDataFrame([], output_schema(step.source.schema, step.plan))
        step.per_batch = True
    elif isinstance(step.native, NativePlan):
        out = step.native.apply(step.source)
    else:
        out = engine.apply(step.source, step.plan)
    out.selectExpr(*step.columns).createOrReplaceTempView(step.view)

"""The engine interface: what every execution engine offers, and what it declares it can do.

An engine runs a registered function over a source DataFrame keyed by some of its columns
(a :class:`~spark_keyed_sql.runtime.plan.KeyedPlan`):

- ``apply``: a one-shot batch (state lives for the query) and, where the engine can, a stream
  returned as a streaming DataFrame;
- ``start_stream``: a streaming run for ``ks.start`` / ``ks.run``, returned as a
  :class:`StreamRun` handle (wait, stop, progress, summary);
- ``layout``: how it keeps state in a checkpoint (:class:`StateLayout`), which ``read_state``,
  the change feed and ``migrate_state`` go through;
- ``capabilities``: what it can and cannot do (:class:`Capabilities`); the rest of the project
  asks these instead of an engine's name.

The registry and the choice between engines are in ``engines/__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..api.errors import SchemaError
from ..compat.features import Feature
from ..runtime.plan import KeyedPlan
from ..runtime.spec import FunctionSpec
from ..state.checkpoint import CheckpointError, MigrationError, OperatorRecord
from ..state.spark_types import to_spark

__all__ = [
    "Capabilities",
    "Engine",
    "Position",
    "StateLayout",
    "StreamJob",
    "StreamRun",
    "new_audit",
    "output_schema",
]


@dataclass(frozen=True)
class Capabilities:
    """What an engine can run. Every flag defaults to the conservative answer."""

    # a stream's keyed result is a streaming DataFrame (ks.sql / ks.apply over a stream)
    streams_as_dataframe: bool = False
    # runs a stream itself, one keyed step per micro-batch (ks.start / ks.run only)
    streams_per_batch: bool = False
    # event- and processing-time timers in a one-shot batch query (fired at end of input)
    batch_timers: bool = False
    # several keyed steps (nested keyed selects) in one streaming statement
    nested_streaming_steps: bool = False
    # ORDER BY after WITH STATE over a stream (each micro-batch's output ordered)
    ordered_stream_output: bool = False
    # ks.migrate_state writes its checkpoint layout
    migration_target: bool = False
    # state stays where it was written when the class changes: a renamed attribute or variable is
    # read under the name it was stored by (``stored`` in the layout record), nothing rewritten;
    # a type change by a declared converter is then refused (the bulk engine rewrites its state)
    keeps_state_names: bool = False
    # broadcast inputs on a stream (each micro-batch's broadcast rows applied by the driver)
    broadcast_streams: bool = False
    # a stream step planned as Spark SQL (engines/native) runs natively, its state in the same layout
    native_streams: bool = False


@dataclass(frozen=True)
class Position:
    """Where a checkpoint's state stands: its state version (batch id), Spark's last committed
    micro-batch and the event-time watermark, for a migrated checkpoint to continue from."""

    version: int
    spark_batch: int | None
    watermark_ms: int | None
    broadcast: str | None = None  # the broadcast state there (runtime/broadcast.py JSON; None: none)


@dataclass
class StreamJob:
    """A planned statement to run as a stream (``ks.start`` / ``ks.run``).

    ``final_sql`` is the whole statement as plain Spark SQL over the keyed steps' views. For an
    engine that runs per micro-batch, ``source``/``plan`` are its keyed step, ``view`` the view
    the statement reads the step's output from, and ``columns`` the select expressions that
    turn the engine's output into that view."""

    spark: SparkSession
    final_sql: str
    checkpoint: str | None
    sink: str
    trigger: str | None
    available_now: bool
    where: str  # "ks.start" / "ks.run", for messages
    functions: list[str] = field(default_factory=list)  # the statement's keyed functions, in step order
    has_timers: bool = False
    # a keyed step with timers and no EVENT TIME: Spark's transformWithState then asks for a
    # batch on every trigger, data or not
    processing_timers: bool = False
    # how many times a micro-batch reads each source (a per-input watermark on transformWithState
    # reads the sources once per input): Spark's numInputRows is divided by it
    input_scans: int = 1
    source: DataFrame | None = None
    plan: KeyedPlan | None = None
    view: str | None = None
    columns: list[str] = field(default_factory=list)
    # called with a dict per committed batch (batch_id, input_rows, keys_touched, state_rows)
    progress: Callable[[dict[str, Any]], None] | None = None
    # OPTIONS (state_partitions = n) of the statement's keyed steps: a new checkpoint's state partitions
    state_partitions: int | None = None
    # the keyed step planned as Spark SQL (engines/native, stream mode), for an engine that runs it
    native: Any = None
    # each keyed step's count of the keys its batches run (KeyedPlan.key_touches; None: not counted)
    key_touches: list[Any] = field(default_factory=list)
    # final_sql, analysed when the stream was planned (what an engine that streams it starts)
    outer: DataFrame | None = None


class StreamRun(ABC):
    """A running streaming query started for ``ks.start`` / ``ks.run``."""

    query: Any  # pyspark StreamingQuery

    @abstractmethod
    def wait(self) -> None:
        """Until an ``availableNow`` run has processed everything there is (raises Spark's
        exception if the query failed)."""

    def stop(self) -> None:
        self.query.stop()

    def close(self) -> None:
        """Once the query has ended and before its lease is released: the run stops what it does
        beside its batches (an edit being applied in this process finishes first, and so does a
        step it runs without input; one on a Connect server stops at its commit, when the lease
        is no longer its query's)."""
        return None

    def settle(self) -> None:
        """After Spark's ``processAllAvailable()`` of a running query: what the query still owes
        for the data it has processed, done now (Spark's no-data batch where Spark runs none)."""
        return None

    @abstractmethod
    def summary(self) -> dict[str, Any]:
        """``ks.run``'s result: batches, input_rows, output_rows, keys_touched, late_rows, metrics."""

    @abstractmethod
    def metrics(self) -> list[dict[str, Any]]:
        """State size per committed batch: batch_id, function, state_rows, rows_updated, state_bytes."""


class StateLayout(ABC):
    """How an engine keeps keyed state in a checkpoint. ``op`` is the operator's record in the
    checkpoint's metadata (None for a checkpoint written by plain Spark)."""

    edits_state: ClassVar[bool] = False  # DELETE / UPDATE of keyed state (``edit``) built
    edits_running: ClassVar[bool] = True  # a running query applies a queued edit at a batch boundary
    # ... or, where its batches cannot (Spark runs them), ks.start's query is stopped at a batch
    # boundary, the edit applied and the query started again (streaming/edit_restarts.py)
    edits_by_restart: ClassVar[bool] = False

    def edit_unavailable(self, spark: SparkSession) -> str | None:
        """Why this session cannot apply a DELETE / UPDATE of this engine's state (None: it can)."""
        return None if self.edits_state else "not built for this engine; it works on checkpoints of engine 'bulk'"

    @abstractmethod
    def read(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None, batch_id: int | None
    ) -> DataFrame:
        """One row per key: key columns, one column per state variable / attribute, batch_id."""

    @abstractmethod
    def batch_range(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None
    ) -> tuple[int, int]:
        """The oldest and newest committed batch whose state the checkpoint keeps."""

    @abstractmethod
    def position(self, spark: SparkSession, checkpoint: str, op: OperatorRecord) -> Position: ...

    def timers(self, spark: SparkSession, checkpoint: str, op: OperatorRecord, version: int) -> DataFrame | None:
        """Key columns and ``timers`` (array of epoch ms) per key, or None when this layout's
        timers cannot be read as a table."""
        return None

    def write(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: OperatorRecord,
        target: FunctionSpec,
        state: DataFrame,
        timers: DataFrame | None,
        position: Position,
        partitions: int | None,
        where: str,
        before_commit: Callable[[], None],
    ) -> dict[str, Any]:
        """Write ``state`` (read_state's columns, transformed) as ``target``'s committed state at
        ``position`` into a new checkpoint (migration): check it against ``target`` first (a
        refusal writes nothing), write it, call ``before_commit``, commit. Returns keys and
        partitions written."""
        raise MigrationError(f"{where}: this engine's checkpoint layout cannot be written by a migration")

    def preview(
        self, spark: SparkSession, op: OperatorRecord, target: FunctionSpec, state: DataFrame, where: str
    ) -> DataFrame:
        """A migration's dry run (``ks.migrate_state(..., dry_run=True)``): ``state`` as ``write``
        would store it for ``target`` and ``read`` would then show it (key columns, one column
        per attribute / state variable), after ``write``'s checks, so a refusal here is the one
        ``write`` gives. Nothing is written."""
        raise MigrationError(f"{where}: this engine's checkpoint layout cannot be written by a migration")

    def edit(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: OperatorRecord | None,
        kind: str,
        where: str,
        assignments: tuple[tuple[str, str], ...],
        spec: FunctionSpec | None,
        engine: str,
        request: str | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """A DELETE (``kind`` "delete") or UPDATE ("update": ``assignments``, column -> SQL
        expression) of the keys whose state matches ``where`` (SQL over ``read``'s columns), by
        the holder of the checkpoint's lease between batches; ``spec``: the function's
        registration, when registered (how its attributes are stored); ``request``: the queued
        request it applies, recorded in its commit (``applied_edit``); ``before_commit``: called
        just before the commit (it raises to stop the edit there, nothing committed). Afterwards no
        file of the checkpoint holds the old state. Returns the audit (``state_edits.AUDIT_COLUMNS``)."""
        raise CheckpointError(
            f"{kind.upper()} of keyed state is not built yet for engine '{engine}' (checkpoint {checkpoint!r}); it "
            "works on checkpoints of engine 'bulk'"
        )

    def applied_edit(self, spark: SparkSession, checkpoint: str, request: str) -> dict[str, Any] | None:
        """The audit recorded by the commit that applied queued request ``request`` (None: no
        commit did); what its writer left unfinished after that commit is finished first."""
        return None

    def erased_before(self, spark: SparkSession, checkpoint: str) -> int | None:
        """The batch before which a DELETE / UPDATE erased the state history (None: never)."""
        return None

    def read_broadcast(self, spark: SparkSession, checkpoint: str, name: str, batch_id: int | None) -> DataFrame:
        """``read_state(..., broadcast=name)``: a broadcast input's state as the checkpoint keeps it."""
        raise CheckpointError(
            f"checkpoint {checkpoint!r} keeps no broadcast state: broadcast inputs on a stream run on engine 'bulk'"
        )


class Engine(ABC):
    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # the Spark feature it is built on (None: every supported Spark has what it needs)
    requires: ClassVar[Feature | None] = None
    layout: StateLayout
    # session settings a stream of this engine starts with (ks.start / ks.run give them to the
    # query while it starts; a streaming DataFrame handed to the user puts them in the session)
    stream_conf: ClassVar[dict[str, str]] = {}
    # the same for settings the session does not set itself (a user's own value is kept)
    stream_defaults: ClassVar[dict[str, str]] = {}

    def stream_settings(self, spark: SparkSession) -> dict[str, str]:
        """What a stream of this engine starts with in ``spark``: ``stream_conf``, and the
        ``stream_defaults`` the session does not set itself."""
        own = {key: value for key, value in self.stream_defaults.items() if spark.conf.get(key, None) is None}
        return own | self.stream_conf

    @abstractmethod
    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        """Run ``plan`` over ``df``: a one-shot batch, or (``streams_as_dataframe``) a stream. The
        result has the key columns, then the function's ``returns`` columns, then the plan's
        pass-through columns."""

    @abstractmethod
    def start_stream(self, job: StreamJob) -> StreamRun:
        """Start ``job`` as a streaming query (``dataframe_stream.DataFrameStreamRun`` runs a
        statement that is one streaming DataFrame, its keyed steps bound with ``apply``)."""


def output_schema(source: T.StructType, plan: KeyedPlan) -> T.StructType:
    by_name = {f.name: f for f in source.fields}
    fields = [T.StructField(k, by_name[k].dataType, True) for k in plan.key_columns]
    assert plan.spec.returns is not None
    taken = {k.lower() for k in plan.key_columns}
    for f in plan.spec.returns.fields:
        if f.name.lower() in taken:
            raise SchemaError(
                f"function '{plan.spec.name}': returns column '{f.name}' has the same name as key column "
                f"'{f.name}'; rename it in returns="
            )
        fields.append(T.StructField(f.name, to_spark(f.type), True))
        taken.add(f.name.lower())
    for c in plan.passthrough:
        if c.lower() in taken:
            raise SchemaError(f"function '{plan.spec.name}': pass-through column '{c}' clashes with an output column")
        fields.append(T.StructField(c, by_name[c].dataType, True))
    return T.StructType(fields)


def new_audit(kind: str, checkpoint: str, function: str, keys_matched: int, state_rows: int = 0) -> dict[str, Any]:
    """A DELETE / UPDATE's audit (docs/erasure.md) before anything is written; an engine's
    edit fills in what it rewrote, removed and where it took effect."""
    return {
        "operation": kind,
        "checkpoint": checkpoint,
        "function": function,
        "keys_matched": keys_matched,
        "state_rows": state_rows,
        "versions_rewritten": 0,
        "files_removed": 0,
        "batch_id": None,
        "output_batches": [],
        "seconds": 0.0,
    }

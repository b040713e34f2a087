"""How the transformWithState engine keeps state in a checkpoint: Spark's own state store
(RocksDB), one Spark state variable per typed state variable, and a StatefulFunction's
attributes as one ValueState ``attributes`` (a struct, one field per attribute). Read back with
Spark's ``statestore`` and ``state-metadata`` readers, so Spark's own tools see the same."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ...compat.features import Feature, features
from ...compat.quirks import ensure_state_store_coordinator
from ...runtime.clock import session_offset_ms
from ...runtime.spec import FunctionKind
from ...state.checkpoint import CheckpointError, MigrationError, OperatorRecord
from ...state.filesystems import filesystem
from ...state.fs import join
from ..base import Position, StateLayout

__all__ = [
    "ADDED",
    "ATTRIBUTES_VAR",
    "EXPIRES",
    "HIDDEN",
    "StoredTarget",
    "TwsLayout",
    "batch_time_ms",
    "operator_info",
    "state_variable",
    "stored_targets",
]

ATTRIBUTES_VAR = "attributes"  # the ValueState holding a StatefulFunction's attributes
EXPIRES = "__expires_ms"  # last field of a stored row with TTL: its expiry (epoch ms)
# once the class has attributes added after its state began: the field naming those of them a
# row holds (a row stored before has none, and Spark's Avro encoding resolves the rest as NULL;
# NULL then stands for the __init__ value, not for a None the class set)
ADDED = "__ks_added"
HIDDEN = (EXPIRES, ADDED)


def _initial_column(name: str, attribute: Mapping[str, Any], marked: bool) -> Any:
    """An attribute added after the state began, as a stored row shows it: its value where the
    row holds it, else the ``__init__`` value recorded with the layout (NULL when not recorded).
    ``marked``: the stored rows have the ADDED field (else a NULL is taken as not held)."""
    value = F.col("value")[name]
    if "initial" not in attribute:
        return value
    fresh = F.lit(attribute["initial"]).cast(attribute["type"])
    if not marked:
        return F.coalesce(value, fresh)
    held = F.array_contains(F.coalesce(F.col("value")[ADDED], F.array().cast("array<string>")), name)
    return F.when(held, value).otherwise(fresh)


def _shown_names(entries: tuple[Mapping[str, Any], ...]) -> dict[str, str]:
    return {str(e["stored"]): str(e["name"]) for e in entries if e.get("stored")}


def _unwrapper(names: list[str]):
    """Stored element (``struct<value>`` for scalars, the struct itself otherwise, without the
    expiry field) -> the user's value."""
    if names == ["value"]:
        return lambda x: x["value"]
    return lambda x: F.struct(*[x[n].alias(n) for n in names])


def _entry(vfn):
    return lambda e: F.struct(e["key"]["value"].alias("key"), vfn(e["value"]).alias("value"))


def batch_time_ms(spark: SparkSession, checkpoint: str, batch: int) -> int | None:
    """The processing time of ``batch`` (its offset log entry's ``batchTimestampMs``, moved by
    the session's clock offset as the processor's clock is: runtime/clock.py): the TTL clock of
    that batch."""
    offset = session_offset_ms(spark)  # (the reading session's: a test knob, set around a run and its read)
    try:
        text = filesystem(spark).read_text(join(checkpoint, "offsets", str(batch)))
        meta = next(json.loads(line) for line in text.splitlines() if line.startswith("{"))
        return int(meta["batchTimestampMs"]) + offset
    except Exception:  # noqa: BLE001 - no such entry (a migrated checkpoint's first batch): shown as stored
        return None


def _live(x: Any, now: int | None) -> Any:
    """A stored value (struct with the expiry field) not expired by ``now``: the processor drops
    a key's expired values when the key next runs, Spark keeps them until then; read_state
    shows what a read of the key would get, as the bulk engine drops them at every batch."""
    if now is None:
        return F.lit(True)
    return x[EXPIRES].isNull() | (x[EXPIRES] > F.lit(now))


def _live_items(items: Any, now: int | None, stored: Any = lambda x: x) -> Any:
    """A list's elements (a map's entries, ``stored`` picking each one's stored value) not
    expired by ``now``; none left: NULL, as a list or map with no entry is stored (none)."""
    kept = F.filter(items, lambda x: _live(stored(x), now))
    return F.when(F.size(kept) > 0, kept)


def operator_info(spark: SparkSession, checkpoint: str, op_index: int) -> Any:
    ensure_state_store_coordinator(spark)  # Spark's statestore reader is a batch query on the state store
    found = features(spark)
    if not found.has(Feature.STATE_READER):
        if not filesystem(spark).exists(join(checkpoint, "commits")):
            raise CheckpointError(
                f"checkpoint {checkpoint!r} holds no stateful operator {op_index} (nothing committed yet?)"
            )
        found.require(
            Feature.STATE_READER, f"reading the state of checkpoint {checkpoint!r} (Spark's transformWithState)"
        )
    try:
        md = spark.read.format("state-metadata").load(checkpoint).collect()
    except Exception as exc:  # noqa: BLE001 - Spark's message is kept, wrapped in ours
        raise CheckpointError(f"checkpoint {checkpoint!r} has no readable state: {str(exc).splitlines()[0]}") from None
    rows = [r for r in md if r.operatorId == op_index]
    if not rows:
        raise CheckpointError(
            f"checkpoint {checkpoint!r} holds no stateful operator {op_index} (nothing committed yet?)"
        )
    return rows[0]


def state_variable(
    spark: SparkSession, checkpoint: str, op_index: int, var: str, batch: int, flatten: bool = True
) -> DataFrame:
    """Spark's ``statestore`` reader over one state variable of operator ``op_index`` at
    ``batch``: ``key``, ``value`` (``list_value`` / ``map_value`` unflattened)."""
    reader = (
        spark.read.format("statestore")
        .option("operatorId", op_index)
        .option("stateVarName", var)
        .option("batchId", batch)
    )
    if not flatten:
        reader = reader.option("flattenCollectionTypes", "false")
    return reader.load(checkpoint)


@dataclass(frozen=True)
class StoredTarget:
    """Where a state column read_state shows is stored: its Spark state variable (column
    family), that variable's kind, and the field of its stored struct (None: the whole struct,
    a struct-valued variable)."""

    family: str
    kind: str  # 'ValueState' | 'ListState' | 'MapState'
    field: str | None


def stored_targets(spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord) -> dict[str, StoredTarget]:
    """Each state column read_state shows (by that name) -> where it is stored."""
    info = operator_info(spark, checkpoint, op_index)
    props = json.loads(info.operatorProperties)
    attribute_names, variable_names = _shown_names(op.attributes), _shown_names(op.variables)
    out: dict[str, StoredTarget] = {}
    for v in props.get("stateVariables", []):
        var, kind = v["stateName"], v["stateVariableType"]
        if kind != "ValueState":
            out[variable_names.get(var, var)] = StoredTarget(var, kind, None)
            continue
        value = state_variable(spark, checkpoint, op_index, var, info.maxBatchId).schema["value"].dataType
        stored = [f.name for f in value.fields]
        fields = [f for f in stored if f not in HIDDEN]
        if var == ATTRIBUTES_VAR and op.kind == FunctionKind.FUNCTION.value:
            out.update({attribute_names.get(f, f): StoredTarget(var, kind, f) for f in fields})
        else:
            out[variable_names.get(var, var)] = StoredTarget(var, kind, "value" if fields == ["value"] else None)
    return out


class TwsLayout(StateLayout):
    edits_state = True  # DELETE / UPDATE on a stopped query, Spark 4.2+ (erase.py)
    edits_running = False  # Spark runs the batches: no boundary inside the query to apply an edit at,
    edits_by_restart = True  # so ks.start's query is stopped at one, and started again after the edit

    def edit(
        self,
        spark: SparkSession,
        checkpoint: str,
        op: OperatorRecord | None,
        kind: str,
        where: str,
        assignments: tuple[tuple[str, str], ...],
        spec: Any,
        engine: str,
        request: str | None = None,
        before_commit: Any = None,
    ) -> dict[str, Any]:
        from ...state.checkpoint import read_metadata
        from .erase import edit_state

        if op is None:
            raise CheckpointError(f"checkpoint {checkpoint!r} has no spark-keyed-sql metadata; nothing to edit")
        meta = read_metadata(checkpoint, spark)
        index = [o.function for o in meta.operators].index(op.function) if meta else 0
        return edit_state(
            spark,
            checkpoint,
            op,
            kind,
            where,
            lambda: self.read(spark, checkpoint, index, op, None),
            request,
            before_commit,
            assignments=assignments,
            spec=spec,
            op_index=index,
        )

    def edit_unavailable(self, spark: SparkSession) -> str | None:
        from .erase import edit_unavailable

        return edit_unavailable(spark)

    def applied_edit(self, spark: SparkSession, checkpoint: str, request: str) -> dict[str, Any] | None:
        from .erase import applied

        return applied(spark, checkpoint, request)

    def erased_before(self, spark: SparkSession, checkpoint: str) -> int | None:
        from .erase import erased_before

        return erased_before(spark, checkpoint)

    def batch_range(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None
    ) -> tuple[int, int]:
        info = operator_info(spark, checkpoint, op_index)
        return info.minBatchId, info.maxBatchId

    def read(
        self, spark: SparkSession, checkpoint: str, op_index: int, op: OperatorRecord | None, batch_id: int | None
    ) -> DataFrame:
        info = operator_info(spark, checkpoint, op_index)
        batch = info.maxBatchId if batch_id is None else int(batch_id)
        erased = self.erased_before(spark, checkpoint)
        if erased is not None and batch < erased:
            raise CheckpointError(
                f"checkpoint {checkpoint!r}: the state history before batch {erased} was erased (a DELETE of "
                f"keyed_state); batch {batch} cannot be read. Batches from {erased} on can"
            )
        if not info.minBatchId <= batch <= info.maxBatchId:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} keeps batches {info.minBatchId}..{info.maxBatchId}; batch {batch} is not "
                "among them"
            )
        props = json.loads(info.operatorProperties)
        variables = [v["stateName"] for v in props.get("stateVariables", [])]
        kinds = {v["stateName"]: v["stateVariableType"] for v in props.get("stateVariables", [])}
        key_names = list(op.keys) if op else None
        # stored name -> the name read_state shows (a renamed attribute / variable: state/evolution.py)
        attribute_names = _shown_names(op.attributes) if op else {}
        variable_names = _shown_names(op.variables) if op else {}

        def load(var: str, flatten: bool = True) -> DataFrame:
            return state_variable(spark, checkpoint, op_index, var, batch, flatten)

        now = batch_time_ms(spark, checkpoint, batch)

        frames: list[DataFrame] = []
        for var in variables:
            kind = kinds[var]
            if kind == "ValueState":
                df = load(var)
                stored = [f.name for f in df.schema["value"].dataType.fields]
                fields = [f for f in stored if f not in HIDDEN]
                if EXPIRES in stored:  # a value past its TTL reads as unset
                    df = df.where(_live(F.col("value"), now))
                if var == ATTRIBUTES_VAR and (op is None or op.kind == FunctionKind.FUNCTION.value):
                    added = set(op.absent_attributes) if op else set()
                    record = {a["name"]: a for a in (op.attributes if op else ())}
                    marked = ADDED in stored
                    cols = []
                    for f in fields:  # f: the stored name; shown under the attribute's
                        name = attribute_names.get(f, f)
                        value = F.col("value")[f]
                        if name in added and name in record:
                            value = _initial_column(f, record[name], marked)
                        cols.append(value.alias(name))
                elif fields == ["value"]:
                    cols = [F.col("value")["value"].alias(variable_names.get(var, var))]
                else:
                    cols = [F.struct(*[F.col("value")[f].alias(f) for f in fields]).alias(variable_names.get(var, var))]
                frames.append(df.select("key", *cols))
            elif kind == "ListState":
                df = load(var, flatten=False)
                elem = df.schema["list_value"].dataType.elementType
                fn = _unwrapper([f.name for f in elem.fields if f.name != EXPIRES])
                items = F.col("list_value")
                if EXPIRES in elem.names:
                    items = _live_items(items, now)
                frames.append(df.select("key", F.transform(items, fn).alias(variable_names.get(var, var))))
            elif kind == "MapState":
                df = load(var, flatten=False)
                vtype = df.schema["map_value"].dataType.valueType
                vfn = _unwrapper([f.name for f in vtype.fields if f.name != EXPIRES])
                pairs = F.map_entries("map_value")
                if EXPIRES in vtype.names:
                    pairs = _live_items(pairs, now, lambda e: e["value"])
                entries = F.transform(pairs, _entry(vfn))
                frames.append(df.select("key", F.map_from_entries(entries).alias(variable_names.get(var, var))))
        if not frames:
            raise CheckpointError(f"checkpoint {checkpoint!r}: operator {op_index} has no state variables")
        out = frames[0]
        for f in frames[1:]:
            out = out.join(f, on="key", how="full_outer")
        key_fields = out.schema["key"].dataType.fields
        if key_names is None:
            key_names = [f.name for f in key_fields]
        key_cols: list[Any] = (
            [] if op and not op.keys else [F.col("key")[f.name].alias(n) for f, n in zip(key_fields, key_names)]
        )
        rest = [c for c in out.columns if c != "key"]
        return out.select(*key_cols, *rest, F.lit(batch).cast("long").alias("batch_id"))

    def position(self, spark: SparkSession, checkpoint: str, op: OperatorRecord) -> Position:
        """Spark's last committed micro-batch (its state is that batch's) and the watermark
        its offset log recorded."""
        fs = filesystem(spark)
        commits = [int(f) for f in fs.list(join(checkpoint, "commits")) if f.isdigit()]
        if not commits:
            raise MigrationError(f"checkpoint {checkpoint!r} holds no committed batch to migrate")
        last = max(commits)
        watermark = None
        try:
            meta = json.loads(fs.read_text(join(checkpoint, "offsets", str(last))).splitlines()[1])
            watermark = meta.get("batchWatermarkMs") or None
        except (OSError, ValueError, IndexError):
            pass
        return Position(last, last, watermark)

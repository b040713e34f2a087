"""What a streaming query records in its checkpoint beside Spark's own files, and what it checks
there before it runs: the checkpoint is given once, belongs to this query (function, keys,
engine), and INITIAL STATE FROM seeds it once."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession

from ..api.errors import SchemaError
from ..engines import LEGACY_ENGINE, keeps_state_names, migration_target
from ..runtime.spec import FunctionKind, FunctionSpec
from ..sql.statement import KeyedStatement, KeyedStep
from ..state.attributes import AttributeLayout
from ..state.checkpoint import (
    CheckpointError,
    OperatorRecord,
    check_compatible,
    last_committed_batch,
    read_metadata,
    write_metadata,
)
from ..state.evolution import Evolution, StateEvolutionError, absent_attributes, check_layouts, stored_names
from ..state.filesystems import filesystem
from ..state.fs import join

__all__ = ["checkpoint_in_sql", "engine_of", "function_record", "prepare_checkpoint"]

log = logging.getLogger(__name__)


def checkpoint_in_sql(statement: KeyedStatement | None) -> str | None:
    """The checkpoint a statement names in OPTIONS (checkpoint = '...'), if any."""
    found = [s.options.get("checkpoint") for s in (statement.steps if statement else []) if s.options.get("checkpoint")]
    return str(found[0]) if found else None


def engine_of(spark: SparkSession, checkpoint: str) -> str | None:
    """The engine that wrote ``checkpoint`` (a query continues on it), None for a new one."""
    try:
        meta = read_metadata(checkpoint, spark)
    except CheckpointError:
        return None
    return meta.operators[0].engine_or(LEGACY_ENGINE) if meta and meta.operators else None


def prepare_checkpoint(
    spark: SparkSession,
    statement: KeyedStatement | None,
    given: str | None,
    where: str,
    function: Callable[[str], FunctionSpec],
) -> str | None:
    """The query's checkpoint (given to ks.start / ks.run, or in OPTIONS, not both), checked
    against what it already holds and with this query's record written into it."""
    in_sql = checkpoint_in_sql(statement)
    if given and in_sql:
        raise SchemaError(f"checkpoint given twice: in {where}(checkpoint=...) and in OPTIONS; give it once")
    checkpoint = given or in_sql
    if not checkpoint or statement is None:
        return checkpoint
    specs = [function(s.function) for s in statement.steps]
    operators = [operator_record(s, spec) for s, spec in zip(statement.steps, specs)]
    check_compatible(checkpoint, operators, spark)
    old = read_metadata(checkpoint, spark)
    previous = list(old.operators) if old else []
    _check_engines(checkpoint, previous, operators)
    # state by name: refuses a change it cannot carry
    changes = check_layouts(checkpoint, previous, operators, [(s.renames, set(s.converters)) for s in specs])
    operators = [
        _continued(checkpoint, new, was, spec, change)
        for new, was, spec, change in zip(operators, previous, specs, changes)
    ] + operators[len(previous) :]
    if previous:  # until a batch commits, the record keeps the layout the committed state has
        last = last_committed_batch(checkpoint, spark)
        operators = [new.pending_since(was, last) for new, was in zip(operators, previous)] + operators[len(previous) :]
    operators = seeded_records(checkpoint, operators, previous, lambda: _has_commits(spark, checkpoint))
    write_metadata(checkpoint, operators, spark)
    log.debug(
        "%s: checkpoint %s %s (%s)",
        where,
        checkpoint,
        "continued" if old else "started",
        ", ".join(f"{o.function} on {o.engine}" for o in operators),
    )
    return checkpoint


def _continued(
    checkpoint: str, new: OperatorRecord, was: OperatorRecord, spec: FunctionSpec, change: tuple[Evolution, Evolution]
) -> OperatorRecord:
    """``new``'s record continuing ``was``'s state: the attributes added since the state began,
    the partition count migrate_state chose, and, on an engine that keeps state where it was
    written, the name each attribute / variable is stored under."""
    renames = spec.renames
    attributes, variables = new.attributes, new.variables
    if keeps_state_names(new.engine):
        converted = sorted({*change[0].converted, *change[1].converted})
        if converted:
            raise StateEvolutionError(
                f"{new.function}: {converted} changed type with a converter; engine '{new.engine}' keeps its state "
                f"where Spark wrote it and converts in place only by widening. With the class registered as it is "
                f"now, ks.migrate_state({checkpoint!r}, <new checkpoint>, function='{new.function}') writes the state "
                "through its converter into a new checkpoint (engine bulk; dry_run=True shows it first): run the query "
                "there. Or keep the stored type. Nothing was written to the checkpoint"
            )
        attributes = _with_stored(attributes, stored_names(was, [a["name"] for a in attributes], renames, False))
        variables = _with_stored(variables, stored_names(was, [v["name"] for v in variables], renames, True))
    return replace(
        new,
        attributes=attributes,
        variables=variables,
        # (the plan read them from the record before this run)
        absent_attributes=tuple(absent_attributes(was, [a["name"] for a in new.attributes], renames)),
        partitions=was.partitions or new.partitions,  # chosen by migrate_state
    )


def _with_stored(entries: tuple, stored: dict[str, str]) -> tuple:
    return tuple(dict(e) | ({"stored": stored[e["name"]]} if e["name"] in stored else {}) for e in entries)


def operator_record(step: KeyedStep, spec: FunctionSpec) -> OperatorRecord:
    """One keyed step as the checkpoint's metadata records it."""
    return function_record(
        spec, step.function, tuple(step.key_names), step.engine.name, _seed_record(step.initial_source)
    )


def function_record(
    spec: FunctionSpec,
    function: str,
    keys: tuple[str, ...],
    engine: str,
    initial_state: dict[str, Any] | None = None,
) -> OperatorRecord:
    """``spec``'s class as a checkpoint records it under ``function`` (its state's layout: the
    attributes with their types and ``__init__`` values, the typed variables)."""
    layout = AttributeLayout(spec.instantiate()) if spec.kind is FunctionKind.FUNCTION else None
    return OperatorRecord(
        function=function,
        class_name=f"{spec.cls.__module__}.{spec.cls.__qualname__}",
        kind=spec.kind.value,
        keys=keys,
        returns=spec.returns.field_ddl() if spec.returns else None,
        attributes=tuple(
            {"name": n, "type": layout.column_type(n).ddl(), "encoded": layout.is_encoded(n)} | _initial(v)
            for n, v in zip(layout.names, layout.fresh_row)
        )
        if layout
        else (),
        variables=tuple(
            {"name": n, "kind": d.kind.value, "type": d.type.ddl(), "ttl_ms": d.ttl_ms}
            | ({"key_type": d.key_type.ddl()} if getattr(d, "key_type", None) is not None else {})
            for n, d in spec.descriptors.items()
        ),
        ttl_ms=spec.ttl_ms,
        engine=engine,
        initial_state=initial_state,
    )


def _initial(stored: Any) -> dict[str, Any]:
    """An attribute's ``__init__`` value as stored, for ``read_state`` to show for rows stored
    before the attribute was added (tws): scalars as JSON, dates and times as the text Spark
    casts back; a list or struct is not recorded (shown NULL)."""
    if stored is None or isinstance(stored, (bool, int, float, str)):
        return {"initial": stored}
    if isinstance(stored, (dt.date, dt.datetime, Decimal)):
        return {"initial": str(stored)}
    return {}


def _check_engines(checkpoint: str, previous: list[OperatorRecord], operators: list[OperatorRecord]) -> None:
    target = migration_target().name
    for o, n in zip(previous, operators):
        was, now = o.engine_or(LEGACY_ENGINE), n.engine
        if was != now:
            hint = f" (ks.migrate_state moves it into a new checkpoint on engine '{target}')" if was != target else ""
            raise CheckpointError(
                f"checkpoint {checkpoint!r} holds state of engine '{was}' for {o.function}; this query runs on "
                f"engine '{now}'. Run it with OPTIONS (engine = '{was}'){hint}"
            )


def _seed_record(source: str | None) -> dict | None:
    """What seeded a checkpoint: the INITIAL STATE FROM source as written, and its digest."""
    if source is None:
        return None
    return {
        "source": source if len(source) <= 300 else source[:297] + "...",
        "sha256": hashlib.sha256(source.encode()).hexdigest(),
    }


def seeded_records(
    checkpoint: str, operators: list[OperatorRecord], previous: list[OperatorRecord], has_commits: Callable[[], bool]
) -> list[OperatorRecord]:
    """INITIAL STATE FROM seeds a new checkpoint once, at its first batch; the same query run
    again on the checkpoint it seeded continues (both engines apply initial state only when
    the checkpoint has no state yet). A checkpoint holding state it was not seeded with, or
    seeded from another source, is refused: the initial state would be silently ignored.
    Returns the records to write (a later run without INITIAL STATE keeps the seed's record)."""
    committed: bool | None = None
    out = []
    for i, new in enumerate(operators):
        seeded = previous[i].initial_state if i < len(previous) else None
        if new.initial_state is None:
            out.append(replace(new, initial_state=seeded))
            continue
        out.append(new)
        if committed is None:
            committed = has_commits()
        if not committed or (seeded is not None and seeded["sha256"] == new.initial_state["sha256"]):
            continue
        now = new.initial_state["source"]
        if seeded is None:
            raise CheckpointError(
                f"checkpoint {checkpoint!r} already holds state of {new.function} that INITIAL STATE FROM {now} did "
                "not seed; initial state only seeds a new checkpoint (Spark would silently ignore it). Use a new "
                "checkpoint, or drop INITIAL STATE FROM"
            )
        raise CheckpointError(
            f"checkpoint {checkpoint!r} was seeded from INITIAL STATE FROM {seeded['source']}; this query seeds "
            f"{new.function} from {now}. Initial state applies once, to a new checkpoint: use a new checkpoint, "
            f"or run the query with the INITIAL STATE FROM it was seeded with (or without one)"
        )
    return out


def _has_commits(spark: SparkSession, checkpoint: str) -> bool:
    return any(not f.startswith(".") for f in filesystem(spark).list(join(checkpoint, "commits")))

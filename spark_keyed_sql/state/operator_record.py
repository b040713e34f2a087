"""What this project records in a checkpoint beside Spark's files and its own state:
``spark_keyed_sql.json``, one :class:`OperatorRecord` per keyed step of the query (function,
class, keys, the state's layout, engine, what seeded it). ``format`` is the file's layout; this
release reads and writes ``METADATA_FORMAT`` only, and refuses another, or a file that is not a
whole record, naming the file (as the commit records do).

A record is written when a run starts, before its first commit. When its state layout differs
from the one the committed state has, it keeps that one too (``committed_layout``) with the
last committed batch at the time (``since_batch``): until a batch commits after it, the
committed layout is the one that holds (``state/checkpoint.read_metadata``), so a run that fails
before committing leaves the checkpoint described as its state is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import CheckpointError

__all__ = ["METADATA_FILE", "METADATA_FORMAT", "CheckpointMeta", "OperatorRecord"]

METADATA_FILE = "spark_keyed_sql.json"
METADATA_FORMAT = 1  # (kept in the file's "version" field)


@dataclass(frozen=True)
class OperatorRecord:
    """One keyed step as the checkpoint records it."""

    function: str
    class_name: str  # module.qualname of the registered class ("class" in the file)
    kind: str  # FunctionKind's value
    keys: tuple[str, ...]
    returns: str | None = None  # the output columns (DDL)
    # the state's layout: attributes {name, type, encoded[, initial]}, variables {name, kind,
    # type, ttl_ms[, key_type]} (state/evolution.py compares them by name)
    attributes: tuple[Mapping[str, Any], ...] = ()
    variables: tuple[Mapping[str, Any], ...] = ()
    ttl_ms: int | None = None
    engine: str | None = None  # None: written before engines were recorded
    initial_state: Mapping[str, Any] | None = None  # {source, sha256} of what seeded it
    absent_attributes: tuple[str, ...] = ()  # attributes added since the state began
    partitions: int | None = None  # state partitions chosen by migrate_state
    # the layout of the committed state, while no batch has committed since this record was
    # written (its attributes, variables and absent_attributes), and the last batch committed then
    committed_layout: Mapping[str, Any] | None = None
    since_batch: int | None = None

    def variable(self, name: str) -> Mapping[str, Any] | None:
        """The recorded state variable ``name`` (its ``ttl_ms`` the one it runs with: the
        class's own, else the function's), or None."""
        return next((v for v in self.variables if v.get("name") == name), None)

    @property
    def layout(self) -> dict[str, Any]:
        """The state layout part of the record (what ``committed_layout`` keeps)."""
        return {
            "attributes": [dict(a) for a in self.attributes],
            "variables": [dict(v) for v in self.variables],
            "absent_attributes": list(self.absent_attributes),
        }

    def pending_since(self, was: OperatorRecord, last_batch: int | None) -> OperatorRecord:
        """This record written over ``was`` (the committed view) at ``last_batch``: keeping
        ``was``'s layout until a batch commits when the layout changes."""
        if self.layout == was.layout:
            return replace(self, committed_layout=None, since_batch=None)
        return replace(self, committed_layout=was.layout, since_batch=last_batch)

    def as_of(self, last_batch: int | None) -> OperatorRecord:
        """The record as the checkpoint's state is at ``last_batch`` (its last committed batch):
        the committed layout while no batch committed since the record was written."""
        if self.committed_layout is None:
            return self
        if last_batch != self.since_batch:  # a batch committed in the new layout: it holds
            return replace(self, committed_layout=None, since_batch=None)
        c = self.committed_layout
        return replace(
            self,
            attributes=tuple(dict(a) for a in c.get("attributes") or ()),
            variables=tuple(dict(v) for v in c.get("variables") or ()),
            absent_attributes=tuple(str(a) for a in c.get("absent_attributes") or ()),
            committed_layout=None,
            since_batch=None,
        )

    def engine_or(self, legacy: str) -> str:
        return self.engine or legacy

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "function": self.function,
            "class": self.class_name,
            "kind": self.kind,
            "keys": list(self.keys),
            "returns": self.returns,
            "attributes": [dict(a) for a in self.attributes],
            "variables": [dict(v) for v in self.variables],
            "ttl_ms": self.ttl_ms,
            "engine": self.engine,
            "initial_state": dict(self.initial_state) if self.initial_state is not None else None,
        }
        if self.absent_attributes:
            out["absent_attributes"] = list(self.absent_attributes)
        if self.partitions is not None:
            out["partitions"] = self.partitions
        if self.committed_layout is not None:
            out["committed_layout"] = dict(self.committed_layout)
            out["since_batch"] = self.since_batch
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OperatorRecord:
        """Raises KeyError / TypeError / ValueError on a record that is not whole."""
        return cls(
            function=str(d["function"]),
            class_name=str(d.get("class") or ""),
            kind=str(d["kind"]),
            keys=tuple(str(k) for k in d["keys"]),
            returns=d.get("returns"),
            attributes=tuple(dict(a) for a in d.get("attributes") or ()),
            variables=tuple(dict(v) for v in d.get("variables") or ()),
            ttl_ms=int(d["ttl_ms"]) if d.get("ttl_ms") is not None else None,
            engine=d.get("engine"),
            initial_state=dict(d["initial_state"]) if d.get("initial_state") else None,
            absent_attributes=tuple(str(a) for a in d.get("absent_attributes") or ()),
            partitions=int(d["partitions"]) if d.get("partitions") else None,
            committed_layout=dict(d["committed_layout"]) if d.get("committed_layout") else None,
            since_batch=int(d["since_batch"]) if d.get("since_batch") is not None else None,
        )


@dataclass(frozen=True)
class CheckpointMeta:
    """The whole file: the query's keyed steps, in order."""

    operators: tuple[OperatorRecord, ...] = field(default_factory=tuple)

    def operator(self, function: str) -> OperatorRecord | None:
        """The step of ``function`` (SQL names: case does not matter)."""
        return next((o for o in self.operators if o.function.lower() == function.lower()), None)

    def to_text(self) -> str:
        body = {"version": METADATA_FORMAT, "operators": [o.to_json() for o in self.operators]}
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_text(cls, text: str, where: str) -> CheckpointMeta:
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise CheckpointError(f"{where} is unreadable ({exc}); restore it from a copy of the checkpoint") from None
        if not isinstance(d, dict):
            raise CheckpointError(f"{where} is not a JSON object; restore it from a copy of the checkpoint")
        if d.get("version") != METADATA_FORMAT:
            raise CheckpointError(
                f"{where} has format {d.get('version')!r}; this spark-keyed-sql reads format {METADATA_FORMAT} (a "
                "checkpoint written by another release of it). Run the query on a new checkpoint, or bootstrap one "
                "from a saved read_state table with INITIAL STATE FROM"
            )
        try:
            return cls(tuple(OperatorRecord.from_json(o) for o in d["operators"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"{where} is damaged (a record lacks {exc!s} or holds a wrong type); restore it from a copy of the "
                "checkpoint"
            ) from None

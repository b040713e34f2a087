"""What this project records in a checkpoint beside Spark's files and its own state:
``spark_keyed_sql.json``, one :class:`OperatorRecord` per keyed step of the query (function,
class, keys, the state's layout, engine, what seeded it). ``format`` is the file's layout; this
release reads and writes ``METADATA_FORMAT`` only, and refuses another, or a file that is not a
whole record, naming the file (as the commit records do)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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

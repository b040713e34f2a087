"""What the bulk engine's jobs exchange with the driver, named and typed in one place.

- :class:`InputKind`: what a row of a job's input is, in the order a state partition's rows
  arrive (the input is sorted by it): a TICK per partition, then REBUILD rows (state fed from
  the checkpoint), INIT rows (``INITIAL STATE FROM``), then the batch's EVENT rows. A one-shot
  batch uses INIT and EVENT.
- :class:`OutputKind`: what a row a micro-batch task writes is: OUT (the function's output),
  DELTA (a changed state row or a tombstone) or STATS (one per state partition). A job writes
  them partitioned by kind, so ``__ks_kind=1`` (DELTA) is a directory name that commit records
  keep: the codes are part of the checkpoint format.
- :class:`TaskStats`: one state partition's STATS row; its columns come from its fields, so a
  stat is added in one place.

Both kinds go into the one ``KIND`` column, of the input and of the output respectively.
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass, fields
from enum import Enum, IntEnum, unique
from typing import Any, ClassVar

from pyspark.sql import types as T

from ...state.commit_record import StoreToken

__all__ = ["KIND", "STATS_PREFIX", "Feed", "InputKind", "OutputKind", "TaskStats", "earliest"]

KIND = "__ks_kind"
STATS_PREFIX = "__ks_st_"


@unique
class InputKind(IntEnum):
    TICK = 0
    REBUILD = 1
    INIT = 2
    EVENT = 3


@unique
class OutputKind(IntEnum):
    OUT = 0
    DELTA = 1
    STATS = 2

    @property
    def directory(self) -> str:
        """The directory a job writes this kind's rows to (``partitionBy(KIND)``)."""
        return f"{KIND}={int(self)}"


@unique
class Feed(str, Enum):
    """How a state partition whose local store missed is fed from the checkpoint: all its
    state, or the deltas since a committed state the store holds (kept in commit records'
    ``fed_partitions`` by value)."""

    FULL = "full"
    CATCH_UP = "catch-up"


def earliest(*values: int | None) -> int | None:
    """The smallest of the values that are not None (None when there is none)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


_SPARK_TYPES = {bool: T.BooleanType(), str: T.StringType(), int: T.LongType()}


@dataclass(frozen=True)
class TaskStats:
    """One state partition's stats of one job. ``hit``: the partition's local store held the
    committed state the batch starts from (else the partition did nothing and is run again, fed
    from the checkpoint; ``token`` then names the state the store does hold)."""

    hit: bool
    token: str
    late: int | None = None  # rows dropped as late
    max_event_time_ms: int | None = None
    events: int | None = None
    keys: int | None = None  # keys run
    timers_fired: int | None = None
    inserted: int | None = None  # keys that got state
    deleted: int | None = None  # keys whose state is gone
    changed: int | None = None  # state rows written (upserts and tombstones)
    next_timer_ms: int | None = None  # the earliest timer the partition holds after the batch
    next_expiry_ms: int | None = None
    max_event_times: str | None = None  # several inputs: {input: its newest event time} as JSON

    COLUMNS: ClassVar[list[str]]

    @classmethod
    def struct_fields(cls) -> list[T.StructField]:
        hints = {"hit": bool, "token": str, "max_event_times": str}
        return [T.StructField(STATS_PREFIX + f.name, _SPARK_TYPES[hints.get(f.name, int)], True) for f in fields(cls)]

    def values(self) -> tuple:
        return astuple(self)

    @classmethod
    def from_row(cls, row: Any) -> TaskStats:
        return cls(*(row[c] for c in cls.COLUMNS))

    @property
    def input_max_event_times(self) -> dict[str, int]:
        """Each input's newest event time in the partition (several inputs; else empty)."""
        return {str(k): int(v) for k, v in json.loads(self.max_event_times).items()} if self.max_event_times else {}

    @property
    def task(self) -> str:
        """The task whose local store holds the partition now (the token's last part)."""
        token = StoreToken.parse(self.token)
        return token.task if token is not None else ""


TaskStats.COLUMNS = [STATS_PREFIX + f.name for f in fields(TaskStats)]

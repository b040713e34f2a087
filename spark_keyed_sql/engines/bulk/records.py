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
  stat is added in one place. The figures keep one name from the key pass that counts them
  (:class:`PassCounts`) through the step's total (``TaskStats.total``) to the commit record's
  ``BatchMetrics`` and ``ks.run``'s summary: ``events`` (rows run), ``late_rows`` (rows dropped
  as late; ``input_rows`` = events + late_rows), ``keys_touched``, ``timers_fired``,
  ``max_event_time_ms`` (and ``max_event_times`` per input).

Each code set has its own column: ``INPUT_KIND`` of a job's input, ``KIND`` of its output (the
output's is part of the checkpoint format: directory names).
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass, field, fields
from enum import Enum, IntEnum, unique
from typing import Any, ClassVar

from pyspark.sql import types as T

from ...state.commit_record import StoreToken

__all__ = [
    "INPUT_KIND",
    "KIND",
    "STATS_PREFIX",
    "Feed",
    "InputKind",
    "OutputKind",
    "PassCounts",
    "TaskStats",
    "earliest",
]

KIND = "__ks_kind"  # OutputKind of a job's output row
INPUT_KIND = "__ks_input_kind"  # InputKind of a job's input row
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


@dataclass(slots=True)
class PassCounts:
    """What a task's key pass counts over one state partition (program.py), under the names
    :class:`TaskStats` reports them by."""

    events: int = 0
    late_rows: int = 0
    keys_touched: int = 0
    timers_fired: int = 0
    max_event_time_ms: int | None = None
    max_event_times: dict[str, int] = field(default_factory=dict)  # several inputs: each one's newest


@dataclass(frozen=True)
class TaskStats:
    """One state partition's stats of one job. ``hit``: the partition's local store held the
    committed state the batch starts from (else the partition did nothing and is run again, fed
    from the checkpoint; ``token`` then names the state the store does hold)."""

    hit: bool
    token: str
    late_rows: int | None = None  # rows dropped as late
    max_event_time_ms: int | None = None
    events: int | None = None
    keys_touched: int | None = None  # keys run
    timers_fired: int | None = None
    inserted: int | None = None  # keys that got state
    deleted: int | None = None  # keys whose state is gone
    changed: int | None = None  # state rows written (upserts and tombstones)
    next_timer_ms: int | None = None  # the earliest timer the partition holds after the batch
    next_expiry_ms: int | None = None
    max_event_times: str | None = None  # several inputs: {input: its newest event time} as JSON

    COLUMNS: ClassVar[list[str]]

    @classmethod
    def counted(cls, token: str, counts: PassCounts, **partition: Any) -> TaskStats:
        """A partition's stats from its key pass's counts and its own figures (inserted, ...)."""
        by_input = json.dumps(counts.max_event_times, sort_keys=True) if counts.max_event_times else None
        return cls(
            hit=True,
            token=token,
            late_rows=counts.late_rows,
            max_event_time_ms=counts.max_event_time_ms,
            events=counts.events,
            keys_touched=counts.keys_touched,
            timers_fired=counts.timers_fired,
            max_event_times=by_input,
            **partition,
        )

    @classmethod
    def total(cls, stats: list[TaskStats]) -> TaskStats:
        """The step's stats: counts summed over its partitions, the newest event time, the
        earliest timer and expiry (``token`` empty: no one store holds a total)."""

        def total(name: str) -> int:
            return int(sum(getattr(s, name) or 0 for s in stats))

        times = [s.max_event_time_ms for s in stats if s.max_event_time_ms is not None]
        by_input: dict[str, int] = {}
        for s in stats:
            for name, t in s.input_max_event_times.items():
                by_input[name] = max(by_input.get(name, t), t)
        return cls(
            hit=all(s.hit for s in stats),
            token="",
            late_rows=total("late_rows"),
            max_event_time_ms=max(times) if times else None,
            events=total("events"),
            keys_touched=total("keys_touched"),
            timers_fired=total("timers_fired"),
            inserted=total("inserted"),
            deleted=total("deleted"),
            changed=total("changed"),
            next_timer_ms=earliest(*(s.next_timer_ms for s in stats)),
            next_expiry_ms=earliest(*(s.next_expiry_ms for s in stats)),
            max_event_times=json.dumps(by_input, sort_keys=True) if by_input else None,
        )

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

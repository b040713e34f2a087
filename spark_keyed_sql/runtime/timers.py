"""Timers due in a batch, handed out in time order: the one loop every engine fires a key's
timers with (a timer that ``on_timer`` registers, if due, is handed out too; at end of a
one-shot batch's input every timer is due, Flink's batch rule)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["pop_due"]


def pop_due(timers: set[int], until: int | None) -> Iterator[int]:
    """The timers at or before ``until`` (every one when None: end of input), earliest first,
    each removed from ``timers`` as it is handed out."""
    while timers:
        t = min(timers)
        if until is not None and t > until:
            return
        timers.discard(t)
        yield t

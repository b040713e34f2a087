"""Timers due in a batch, handed out in time order: the one loop every engine fires a key's
timers with (a timer that ``on_timer`` registers, if due, is handed out too; at end of a
one-shot batch's input every timer is due, Flink's batch rule).

A timer that ``on_timer`` registers and that is due at once fires in the same pass, so an
``on_timer`` that always registers another due timer would fire forever: at end of input a
periodic timer (every timer is due there), anywhere a timer registered at or before the one
firing. ``FireGuard`` stops both with a ``TimerLoopError`` naming the function and the key."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..api.context import from_epoch_ms
from ..api.errors import TimerLoopError

__all__ = ["CHAINED_LIMIT", "STUCK_LIMIT", "FireGuard", "pop_due"]

# end of input: timers one key may fire beyond those it had when its firing began (a finite chain,
# e.g. one a minute up to the key's last event, stays far below: 10 million minutes are 19 years)
CHAINED_LIMIT = 10_000_000
# anywhere: timers one key may fire in a row, each at or before the timer fired just before it
STUCK_LIMIT = 1_000_000


class FireGuard:
    """One key's firing pass: ``check(t)`` before each timer ``t`` is fired."""

    __slots__ = ("allowed", "fired", "stuck", "last", "who")

    def __init__(self, pending: int, end_of_input: bool, who: Callable[[], str], first: int | None = None):
        self.allowed = pending + CHAINED_LIMIT if end_of_input else None
        self.fired = 0 if first is None else 1  # (``first``: fired already, before the guard)
        self.stuck = 0
        self.last: int | None = first
        self.who = who  # "function 'f', key 'k'" (built only for the error)

    def check(self, t: int) -> None:
        self.fired += 1
        if self.last is not None and t <= self.last:
            self.stuck += 1
            if self.stuck > STUCK_LIMIT:
                raise TimerLoopError(
                    f"{self.who()}: on_timer keeps registering a timer at or before the one it fires ({self.stuck:,} "
                    f"in a row, now {from_epoch_ms(t).isoformat()}); such a timer is due at once, so the firing "
                    "would never end. Register the next timer after the one firing (on_timer's timestamp)"
                )
        elif self.allowed is not None and self.fired > self.allowed:
            raise TimerLoopError(
                f"{self.who()}: on_timer kept registering timers at end of input ({CHAINED_LIMIT:,} more than the key "
                f"had, the next at {from_epoch_ms(t).isoformat()}). In a one-shot batch query every timer is due at "
                "end of input (Flink's batch rule), so a timer that always registers the next one fires forever; "
                "register the next only while there is more to do (e.g. not past the key's last event time)"
            )
        else:
            self.stuck = 0
        self.last = t


def pop_due(timers: set[int], until: int | None, who: Callable[[], str]) -> Iterator[int]:
    """The timers at or before ``until`` (every one when None: end of input), earliest first,
    each removed from ``timers`` as it is handed out; ``who()`` names the function and the key
    in the ``TimerLoopError`` of an endless firing (see ``FireGuard``)."""
    pending, last, guard = len(timers), None, None
    while timers:
        t = min(timers)
        if until is not None and t > until:
            return
        if last is not None:  # a second timer in this pass (most keys fire one): watched from here
            if guard is None:
                guard = FireGuard(pending, until is None, who, first=last)
            guard.check(t)
        last = t
        timers.discard(t)
        yield t

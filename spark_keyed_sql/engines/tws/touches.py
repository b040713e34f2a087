"""The keys each micro-batch of a ``tws`` stream ran, for ``ks.run``'s ``keys_touched``: Spark's
operator reports state rows updated (one per value written, timers included), not keys.

Each task's processor counts its keys: one per key with input (Spark groups a key's rows into
one call) and one per key whose timers fired without input in that batch (Spark runs a task's
input keys before its timers). The counts reach the driver through a Spark accumulator, in
classic sessions; through Spark Connect there is none, and the count is not known."""

from __future__ import annotations

from typing import Any

__all__ = ["KeyTouches"]


class KeyTouches:
    """Shipped with the processor; ``reset`` once per task (the processor's ``init``). Without an
    accumulator (Spark Connect) it counts nothing and its ``value`` is None."""

    def __init__(self, accumulator: Any | None, has_timers: bool):
        self.accumulator = accumulator
        self.has_timers = has_timers
        self._inputs: set[Any] = set()
        self._timers: set[Any] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"accumulator": self.accumulator, "has_timers": self.has_timers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["accumulator"], state["has_timers"])  # type: ignore[misc]

    def reset(self) -> None:
        self._inputs, self._timers = set(), set()

    def input(self, key: Any) -> None:
        if self.accumulator is None:
            return
        self.accumulator.add(1)
        if self.has_timers:  # (a key with input then a timer in one batch counts once)
            self._inputs.add(key)

    def timer(self, key: Any) -> None:
        if self.accumulator is None or key in self._inputs or key in self._timers:
            return
        self._timers.add(key)
        self.accumulator.add(1)

    @property
    def value(self) -> int | None:
        """The keys counted so far (on the driver: every finished task's); None: not counted."""
        return None if self.accumulator is None else int(self.accumulator.value)

"""KeyBinding over in-memory per-key state (KeyedTester, the table function)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..api.context import TimerService
from ..api.state import StateDescriptor, StateStorage
from ..state.memory import MemoryKeyState, MemoryTimers, MemoryVariable
from .runner import KeyBinding

__all__ = ["MemoryBinding"]


class MemoryBinding(KeyBinding):
    def __init__(self, ks: MemoryKeyState, clock: Callable[[], int | None], attr_ttl_ms: int | None = None):
        self.ks, self.clock, self.attr_ttl_ms = ks, clock, attr_ttl_ms

    def load_attributes(self) -> Any:
        if self.ks.attributes is None:
            return None
        now = self.clock()
        if self.ks.attributes_expire is not None and now is not None and now >= self.ks.attributes_expire:
            self.ks.attributes = None
            self.ks.attributes_expire = None
            return None
        return self.ks.attributes

    def save_attributes(self, row: tuple) -> None:
        self.ks.attributes = row
        now = self.clock()
        self.ks.attributes_expire = None if self.attr_ttl_ms is None or now is None else now + self.attr_ttl_ms

    def clear_attributes(self) -> None:
        self.ks.attributes = None
        self.ks.attributes_expire = None

    def variable(self, desc: StateDescriptor) -> StateStorage:
        return MemoryVariable(self.ks, desc, self.clock)

    def timers(self) -> TimerService:
        return MemoryTimers(self.ks)

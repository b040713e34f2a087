"""One key's time in the runner's instance: its state loaded into the instance (attributes
decoded, or state variables bound), the key's call context set, and at the end its state
stored, dropped (cleared) or kept live for its timers of the same pass. ``KeyedRunner`` is a
``KeyLifecycle``; the engines call only the runner's entry points and ``release`` / ``discard``.
"""

from __future__ import annotations

from typing import Any

from ..api.errors import KeyedSQLError
from ..api.state import ACCESSORS, bind_accessors, current_accessors, unbind_accessors
from ..state.attributes import AttributeLayout
from ..state.binding import KeyBinding

__all__ = ["KeyLifecycle"]

_NO_ACCESSORS: dict[str, Any] = {}  # a class without state variables (never written to)


class KeyLifecycle:
    """Begin, hold, resume and end keys on ``instance``; set up by ``KeyedRunner``."""

    instance: Any
    call: Any  # the instance's api/context.KeyCall, re-pointed at each key
    layout: AttributeLayout | None  # a StatefulFunction's attributes (None: state variables)
    descriptors: dict[str, Any]
    keyed: bool
    spec: Any
    _binding: KeyBinding | None
    _may_hold: bool
    _clear_fn: Any  # what ctx.clear_state() calls

    def _begin(self, key: Any, binding: KeyBinding, processing_ms: int | None, watermark_ms: int | None) -> None:
        call = self.call
        call.cleared = False
        call.as_of_ms = None  # (broadcast state: the newest, until a row or a timer says its time)
        call.processing_ms = processing_ms
        call.watermark_ms = watermark_ms
        call.timers = binding  # (a TimerService over the key's timers)
        call.clear = self._clear_fn
        self._binding = binding
        if self.layout is not None:
            row = binding.load_attributes()
            if row is None:
                self.layout.reset(self.instance)
            else:
                self.layout.decode_into(self.instance, row)
        else:  # (an empty mapping still says a key is being run)
            bind_accessors(
                self.instance,
                {name: ACCESSORS[d.kind](d, binding.variable(d)) for name, d in self.descriptors.items()}
                if self.descriptors
                else _NO_ACCESSORS,
            )
        call.key, call.keyed = key, self.keyed

    def _hold_or_end(self, key: Any, binding: KeyBinding, hold: bool) -> bool:
        """End the key, or (``hold``, and nothing would change by it) keep it live: True if held."""
        if hold and self.stays_live():
            return True
        self._end(key, binding)
        return False

    def _resume(self, key: Any, processing_ms: int | None, watermark_ms: int | None) -> None:
        """Continue a held key: what ``_begin`` sets per call, without reloading the state."""
        call = self.call
        call.cleared = False
        call.processing_ms = processing_ms
        call.watermark_ms = watermark_ms
        call.key, call.keyed = key, self.keyed

    def release(self, key: Any, binding: KeyBinding) -> None:
        """End a key that a ``hold=True`` call left live: its state is stored now."""
        self._end(key, binding)

    def discard(self, key: Any, binding: KeyBinding) -> None:
        """End a key left live whose state nobody reads again (a one-shot batch's key, its
        timers fired): not stored, unless storing could fail, which must fail here as it would
        anywhere (an attribute the state encoding refuses)."""
        if self.layout is not None and not self.call.cleared and self.layout.live_safe(self.instance):
            self._leave()
        else:
            self._end(key, binding)

    def _clear_current(self) -> None:
        """``self.ctx.clear_state()``: all state of the key being run."""
        if self.layout is not None:
            self.layout.reset(self.instance)
            self.call.cleared = True
        accessors = current_accessors(self.instance)
        for name in self.descriptors:
            accessors[name].clear()
        self._binding.clear_timers()

    def _end(self, key: Any, binding: KeyBinding) -> None:
        try:
            if self.layout is not None:
                row = self._encoded(key)
                # cleared, and nothing after it set an attribute to other than __init__'s value:
                # the key is gone (a later row that set state keeps it)
                if self.call.cleared and row == self.layout.fresh_row:
                    binding.clear_attributes()
                else:
                    binding.save_attributes(row)
        finally:
            self._leave()

    def _leave(self) -> None:
        """Nothing of the key is reachable from user code any more."""
        self.call.leave()
        self._binding = None
        if self.layout is None:  # (a KeyedProcessor: its state variables; a function has none)
            unbind_accessors(self.instance)

    def _encoded(self, key: Any) -> tuple:
        """The instance's attribute row (an attribute the state encoding refuses: the error,
        naming the function and the key)."""
        assert self.layout is not None
        try:
            return self.layout.encode(self.instance)
        except KeyedSQLError as exc:
            raise type(exc)(f"{self.naming(key)}: {exc}") from None

    def naming(self, key: Any) -> str:
        """``function 'f', key 'k'``: how an error names where it happened."""
        return f"function '{self.spec.name}', key {key!r}"

    def stays_live(self) -> bool:
        """May the key left live by ``run_function(hold=True)`` run its timers without storing
        and reloading its state (nothing would change by it)?"""
        return (
            self._may_hold
            and self.layout is not None
            and not self.call.cleared  # (a cleared key is stored or dropped by _end)
            and self.layout.live_safe(self.instance)
        )

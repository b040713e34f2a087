"""``self.ctx``: the current key, state clearing and timers, as the runtime provides them."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["KeyContext", "TimerService", "to_epoch_ms", "from_epoch_ms"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_datetime = _dt.datetime


def to_epoch_ms(ts: Any) -> int:
    """A UTC ``datetime`` (naive means UTC) or epoch milliseconds as epoch milliseconds."""
    if type(ts) is _datetime and ts.tzinfo is None:  # what every engine hands user code: one subtraction
        d = ts - _EPOCH_NAIVE  # (days may be negative; seconds and microseconds never are: this floors)
        return d.days * 86_400_000 + d.seconds * 1000 + d.microseconds // 1000
    if isinstance(ts, bool):
        raise TypeError(f"timer timestamp must be a datetime or epoch milliseconds, got {ts!r}")
    if isinstance(ts, (int, float)):
        return int(ts)
    if hasattr(ts, "to_pydatetime"):
        ts = ts.to_pydatetime()
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        return int((ts - _EPOCH) // _dt.timedelta(milliseconds=1))
    raise TypeError(f"timer timestamp must be a datetime or epoch milliseconds, got {type(ts).__name__} {ts!r}")


def from_epoch_ms(ms: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(milliseconds=int(ms))


class TimerService(Protocol):
    def register(self, ms: int) -> None: ...
    def delete(self, ms: int) -> None: ...
    def list(self) -> list[int]: ...


class KeyContext:
    """What ``self.ctx`` offers inside ``execute`` / ``process`` / ``on_timer``."""

    def __init__(self) -> None:
        self._key: Any = None
        self._keyed = False
        self._timers: TimerService | None = None
        self._clear: Callable[[], None] | None = None
        self._processing_ms: int | None = None
        self._watermark_ms: int | None = None

    # -- set by the runtime (SAGE: set_current_key / clear_key)
    def set_current_key(self, key: Any, keyed: bool = True) -> None:
        self._key = key
        self._keyed = keyed

    def clear_key(self) -> None:
        self._key = None
        self._keyed = False

    # -- user API
    def get_key(self) -> Any:
        """The current key: a scalar for one key column, a tuple for several, None when unkeyed."""
        return self._key

    @property
    def is_keyed(self) -> bool:
        """True inside a keyed query, even when the current key is NULL."""
        return self._keyed

    def clear_state(self) -> None:
        """Drop all state of the current key."""
        if self._clear is None:
            raise RuntimeError("clear_state() is only available while a key is being processed")
        self._clear()

    def _timer_service(self) -> TimerService:
        if self._timers is None:
            raise RuntimeError("timers are only available while a key is being processed")
        return self._timers

    def register_timer(self, ts: Any) -> None:
        (self._timers or self._timer_service()).register(to_epoch_ms(ts))

    def delete_timer(self, ts: Any) -> None:
        (self._timers or self._timer_service()).delete(to_epoch_ms(ts))

    def list_timers(self) -> list[_dt.datetime]:
        return [from_epoch_ms(ms) for ms in sorted(self._timer_service().list())]

    def current_processing_time(self) -> _dt.datetime | None:
        return None if self._processing_ms is None else from_epoch_ms(self._processing_ms)

    def current_watermark(self) -> _dt.datetime | None:
        return None if self._watermark_ms is None else from_epoch_ms(self._watermark_ms)

"""``self.ctx``: the current key, state clearing and timers, as the runtime provides them."""

from __future__ import annotations

import datetime as _dt
import numbers
from collections.abc import Callable
from typing import Any, Protocol

from .errors import StateAccessError, StateTypeError

__all__ = ["KeyCall", "KeyContext", "TimerService", "UTCDateTime", "to_epoch_ms", "from_epoch_ms"]

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
    if isinstance(ts, numbers.Real):  # int, float and numpy's numbers (a KeyedProcessor's column max)
        if ts != ts:
            raise TypeError(f"timer timestamp is NaN: {ts!r}")
        return int(ts)
    if type(ts).__name__ == "datetime64":  # numpy's (rows_format = "numpy")
        if ts != ts:
            raise TypeError(f"timer timestamp is NaT: {ts!r}")
        return int(ts.astype("datetime64[ms]").astype("int64"))
    if hasattr(ts, "to_pydatetime"):
        ts = ts.to_pydatetime()
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        return int((ts - _EPOCH) // _dt.timedelta(milliseconds=1))
    raise TypeError(f"timer timestamp must be a datetime or epoch milliseconds, got {type(ts).__name__} {ts!r}")


def _as_utc(other: Any) -> Any:
    if isinstance(other, _dt.datetime) and other.tzinfo is None:
        return _dt.datetime.replace(other, tzinfo=_dt.timezone.utc)
    return other


class UTCDateTime(_dt.datetime):
    """The UTC ``datetime`` (``tzinfo=timezone.utc``) ``on_timer``, ``list_timers()`` and the
    clocks hand over, which also compares with and subtracts naive datetimes as UTC: the events'
    timestamps are naive UTC, so ``timestamp - self.last_seen`` and ``ts in
    self.ctx.list_timers()`` work as they read, and it hashes as the naive UTC datetime it equals
    (so a plain aware datetime equal to it hashes otherwise). ``replace(tzinfo=None)`` gives a
    plain naive datetime."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return _dt.datetime.__eq__(self, _as_utc(other))

    def __ne__(self, other: object) -> bool:
        return _dt.datetime.__ne__(self, _as_utc(other))

    def __lt__(self, other: Any) -> bool:
        return _dt.datetime.__lt__(self, _as_utc(other))

    def __le__(self, other: Any) -> bool:
        return _dt.datetime.__le__(self, _as_utc(other))

    def __gt__(self, other: Any) -> bool:
        return _dt.datetime.__gt__(self, _as_utc(other))

    def __ge__(self, other: Any) -> bool:
        return _dt.datetime.__ge__(self, _as_utc(other))

    def __hash__(self) -> int:  # as the naive UTC datetime it equals (a dict of event times finds it)
        return hash(_dt.datetime.combine(self.date(), self.time()) - (self.utcoffset() or _dt.timedelta(0)))

    def __sub__(self, other: Any) -> Any:
        return _dt.datetime.__sub__(self, _as_utc(other))

    def __rsub__(self, other: Any) -> Any:
        if isinstance(other, _dt.datetime):
            return _dt.datetime.__sub__(_as_utc(other), _dt.datetime.combine(self.date(), self.timetz()))
        return NotImplemented

    def replace(self, *args: Any, **kwargs: Any) -> _dt.datetime:  # type: ignore[override]
        r = _dt.datetime.replace(self, *args, **kwargs)
        return r if r.tzinfo is not None else _dt.datetime.combine(r.date(), r.timetz(), tzinfo=None)


_UTC_EPOCH = UTCDateTime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def from_epoch_ms(ms: int) -> UTCDateTime:
    return _UTC_EPOCH + _dt.timedelta(milliseconds=int(ms))


class TimerService(Protocol):
    def register(self, ms: int) -> None: ...
    def delete(self, ms: int) -> None: ...
    def list(self) -> list[int]: ...


class KeyCall:
    """The key a runner is running, re-pointed by the runtime at each key (one per runner, not
    one per key): ``self.ctx`` reads it. The runtime's side of ``self.ctx``."""

    __slots__ = (
        "key",
        "keyed",
        "timers",
        "clear",
        "processing_ms",
        "watermark_ms",
        "cleared",
        "input",
        "broadcasts",
        "as_of_ms",
        "no_on_timer",
    )

    def __init__(self) -> None:
        self.key: Any = None
        self.keyed = False
        self.timers: TimerService | None = None  # the key's timers (None: no key is being run)
        self.clear: Callable[[], None] | None = None  # what clear_state() calls
        self.processing_ms: int | None = None
        self.watermark_ms: int | None = None
        self.cleared = False  # clear_state() was called since the last row began
        self.input: str | None = None  # the named input the row came from (several inputs)
        self.no_on_timer: str | None = None  # the class's name when it defines no on_timer
        # the query's broadcast state (runtime/broadcast.BroadcastState; None: no broadcast input)
        self.broadcasts: Any = None
        self.as_of_ms: int | None = None  # the time broadcast state is read as of (versioned: the row's event time)

    @property
    def active(self) -> bool:
        """Is a key being run?"""
        return self.timers is not None

    def leave(self) -> None:
        """The key is done: nothing of it is reachable through ``self.ctx`` any more."""
        self.key, self.keyed, self.timers, self.clear, self.input = None, False, None, None, None


class KeyContext:
    """What ``self.ctx`` offers inside ``execute`` / ``process`` / ``on_timer``."""

    __slots__ = ("_call",)

    def __init__(self) -> None:
        self._call = KeyCall()

    @property
    def call(self) -> KeyCall:
        """The runtime's handle on the current key (not for user code)."""
        return self._call

    # -- SAGE's set_current_key / clear_key (the runtime sets the key; these remain for code
    # written against SAGE's context)
    def set_current_key(self, key: Any, keyed: bool = True) -> None:
        self._call.key = key
        self._call.keyed = keyed

    def clear_key(self) -> None:
        self._call.key = None
        self._call.keyed = False

    # -- user API
    def get_key(self) -> Any:
        """The current key: a scalar for one key column, a tuple for several, None when unkeyed."""
        return self._call.key

    @property
    def input(self) -> str | None:
        """The named input (table argument) the current row came from, when a function has
        several inputs; None for one input, and in ``on_timer``."""
        return self._call.input

    def broadcast(self, name: str, as_of: Any = None) -> Any:
        """A broadcast input's state (``broadcast => '<name>'``): a read-only mapping from its
        ``broadcast_key`` to the latest row (or its one value column). With ``event_time`` it is
        the state as of the current row's event time (in ``on_timer``, the timer's time);
        ``as_of=`` (a datetime or epoch milliseconds) reads it as of another time. Inside
        ``on_broadcast`` it is writable."""
        states = self._call.broadcasts
        if states is None:
            raise StateAccessError(
                f"self.ctx.broadcast({name!r}): this query has no broadcast input; name one with "
                f"broadcast => '{name}' (and {name} => TABLE(...)) in the table-function call"
            )
        if as_of is None:
            return states.view(name, self._call.as_of_ms)
        where = f"self.ctx.broadcast({name!r}, as_of={as_of!r})"
        try:
            at = to_epoch_ms(as_of)
        except TypeError:
            raise StateTypeError(f"{where}: as_of is a datetime or epoch milliseconds") from None
        if states.versioned(name) is False:
            raise StateAccessError(
                f"{where}: broadcast input {name!r} is not versioned (it has no event_time column), so it "
                "holds only its newest rows; read it without as_of=, or give the input the event_time column"
            )
        return states.view(name, at)

    @property
    def is_keyed(self) -> bool:
        """True inside a keyed query, even when the current key is NULL."""
        return self._call.keyed

    def clear_state(self) -> None:
        """Drop all state of the current key."""
        clear = self._call.clear
        if clear is None:
            raise StateAccessError("self.ctx.clear_state() is only available while a key is being processed")
        clear()

    def _timer_service(self) -> TimerService:
        timers = self._call.timers
        if timers is None:
            raise StateAccessError("self.ctx timers are only available while a key is being processed")
        return timers

    def register_timer(self, ts: Any) -> None:
        if self._call.no_on_timer is not None:
            raise StateAccessError(
                f"self.ctx.register_timer({ts!r}): {self._call.no_on_timer} defines no on_timer(self, key, "
                "timestamp), so the timer would never fire; define on_timer on the class"
            )
        (self._call.timers or self._timer_service()).register(to_epoch_ms(ts))

    def delete_timer(self, ts: Any) -> None:
        (self._call.timers or self._timer_service()).delete(to_epoch_ms(ts))

    def list_timers(self) -> list[_dt.datetime]:
        return [from_epoch_ms(ms) for ms in sorted(self._timer_service().list())]

    def current_processing_time(self) -> _dt.datetime | None:
        ms = self._call.processing_ms
        return None if ms is None else from_epoch_ms(ms)

    def current_watermark(self) -> _dt.datetime | None:
        ms = self._call.watermark_ms
        return None if ms is None else from_epoch_ms(ms)

"""Run a pyspark ``StatefulProcessor`` (written for ``transformWithStateInPandas`` or
``transformWithState``) unchanged, as one of our ``KeyedProcessor`` classes.

The processor's ``init(handle)`` runs once at registration with a recording handle: the state
variables it declares become typed state descriptors of a generated ``KeyedProcessor``
subclass, so every engine, ``KeyedTester`` and ``ks.read_state`` see ordinary typed state. At
run time each generated instance owns one copy of the user's processor, ``init`` is called
again with a live handle (processor_handle.py). This module: which API a processor was written
for, its rows in and out, and the generated class.
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
from collections.abc import Callable
from typing import Any

from ..api.context import to_epoch_ms
from ..api.errors import KeyedSQLError, RegistrationError
from ..api.function import KeyedProcessor
from .processor_handle import Declared, Handle

__all__ = ["STYLES", "is_stateful_processor", "adapt_processor", "processor_style"]

STYLES = ("pandas", "row")


def _base() -> type | None:
    try:
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return StatefulProcessor


def is_stateful_processor(obj: Any) -> bool:
    """A pyspark ``StatefulProcessor`` subclass or instance."""
    base = _base()
    if base is None:
        return False
    return (inspect.isclass(obj) and issubclass(obj, base)) or isinstance(obj, base)


def processor_style(user_cls: type, style: str | None, name: str) -> str:
    """``style`` when given; else what ``handleInputRows``'s return annotation says
    (``Iterator[pd.DataFrame]`` -> pandas, ``Iterator[Row]`` -> row); else pandas."""
    if style is not None:
        if style not in STYLES:
            raise RegistrationError(
                f"'{name}': style={style!r} is not one of {', '.join(repr(s) for s in STYLES)} "
                "('pandas' for transformWithStateInPandas processors, 'row' for transformWithState)"
            )
        return style
    fn = getattr(user_cls, "handleInputRows", None)
    ann = getattr(fn, "__annotations__", {}).get("return")
    text = ann if isinstance(ann, str) else repr(ann) if ann is not None else ""
    if "DataFrame" in text:
        return "pandas"
    if "Row" in text:
        return "row"
    return "pandas"


# ---------------------------------------------------------------------- rows in, rows out


def _timer_values(ctx: Any) -> Any:
    from pyspark.sql.streaming.stateful_processor import TimerValues

    p, w = ctx.call.processing_ms, ctx.call.watermark_ms
    return TimerValues(-1 if p is None else int(p), -1 if w is None else int(w))


def _key_tuple(owner: Any, key: Any) -> tuple:
    if not owner.ctx.is_keyed:
        return ()
    return key if isinstance(key, tuple) else (key,)


def _pandas_frame(rows: Any) -> Any:
    import pandas as pd

    if not isinstance(rows, pd.DataFrame):
        rows = pd.DataFrame.from_records(rows)
    for c in rows.columns:  # Spark hands timestamps as datetime64[ns]
        dt = rows[c].dtype
        if str(dt).startswith("datetime64[") and str(dt) != "datetime64[ns]" and getattr(dt, "tz", None) is None:
            rows[c] = rows[c].astype("datetime64[ns]")
    return rows


def _row(d: dict) -> Any:
    from pyspark.sql import Row

    vals = {}
    for k, v in d.items():
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        if isinstance(v, _dt.datetime) and v.tzinfo is None:  # as transformWithState gives them
            v = v.replace(tzinfo=_dt.timezone.utc)
        vals[k] = v
    return Row(**vals)


def _collect(result: Any, style: str) -> list[Any]:
    """Consume what a handler returned (now, while the key's state is bound)."""
    if result is None:
        return []
    out: list[Any] = []
    for item in result if not hasattr(result, "to_dict") else [result]:
        if item is None:
            continue
        if hasattr(item, "to_dict") and hasattr(item, "columns"):  # a pandas DataFrame
            out.extend(item.to_dict("records"))
        elif hasattr(item, "asDict") and hasattr(item, "__fields__"):
            out.append(item.asDict())  # a Row with field names: matched to returns by name
        elif isinstance(item, tuple):
            out.append(tuple(item))  # a positional Row or a tuple: by position
        else:
            out.append(item)
    return out


# ---------------------------------------------------------------------- the generated class


def _overrides(user_cls: type, method: str) -> bool:
    base = _base()
    for k in user_cls.__mro__:
        if k is base:
            return False
        if method in k.__dict__:
            return True
    return False


def adapt_processor(name: str, obj: Any, kwargs: dict[str, Any], style: str | None) -> type:
    """A ``KeyedProcessor`` subclass running the pyspark StatefulProcessor ``obj`` (a class,
    built with ``kwargs``, or an instance, copied once per runner)."""
    user_cls: type = obj if inspect.isclass(obj) else type(obj)
    where = f"'{name}' ({user_cls.__name__})"
    if not inspect.isclass(obj) and kwargs:
        raise RegistrationError(f"{where}: constructor arguments {sorted(kwargs)} given with an instance")
    if not _overrides(user_cls, "handleInputRows"):
        raise RegistrationError(f"{where}: does not define handleInputRows(self, key, rows, timerValues)")
    resolved = processor_style(user_cls, style, name)
    template = None if inspect.isclass(obj) else obj
    ctor_kwargs = dict(kwargs)

    def make() -> Any:
        if template is not None:
            return copy.deepcopy(template)
        return user_cls(**ctor_kwargs)

    declared = Declared(where)
    probe: list[Any] = []
    # built, init, then close, as Spark does with the driver's pre-init copy
    steps = (
        ("building it", lambda: probe.append(make())),
        ("init(handle)", lambda: probe[0].init(Handle(declared))),
        ("close()", lambda: probe[0].close()),
    )
    for step, call in steps:
        try:
            call()
        except KeyedSQLError:
            raise
        except Exception as exc:
            raise RegistrationError(f"{where}: {step} failed at registration: {type(exc).__name__}: {exc}") from exc

    namespace: dict[str, Any] = dict(declared.descriptors)
    namespace.update(_methods(user_cls, make, declared.where, resolved))
    namespace["__module__"] = __name__
    namespace["__qualname__"] = user_cls.__name__
    returns = getattr(user_cls, "returns", None)
    namespace["returns"] = returns if isinstance(returns, str) else None
    return type(user_cls.__name__, (KeyedProcessor,), namespace)


def _methods(user_cls: type, make: Callable[[], Any], where: str, style: str) -> dict[str, Any]:
    pandas = style == "pandas"

    def __init__(self: Any, **kwargs: Any) -> None:
        KeyedProcessor.__init__(self)
        user = make()
        self._deleted_state = set()
        self._user = user
        try:
            user.init(Handle(Declared(where), self))
        except KeyedSQLError:
            raise
        except Exception as exc:
            raise RegistrationError(f"{where}: init(handle) failed: {type(exc).__name__}: {exc}") from exc

    def process(self: Any, key: Any, rows: Any) -> list[Any]:
        k = _key_tuple(self, key)
        data = iter([_pandas_frame(rows)]) if pandas else iter([_row(r) for r in rows])
        return _collect(self._user.handleInputRows(k, data, _timer_values(self.ctx)), style)

    def on_initial_state(self: Any, key: Any, state_row: dict) -> None:
        import pandas as pd

        k = _key_tuple(self, key)
        init = _pandas_frame(pd.DataFrame([state_row])) if pandas else _row(state_row)
        self._user.handleInitialState(k, init, _timer_values(self.ctx))

    def close(self: Any) -> None:
        self._user.close()

    methods: dict[str, Any] = {
        "__init__": __init__,
        "close": close,
        "process": process,
        "on_initial_state": on_initial_state,
        # the runner hands row-style processors the rows as dicts, not a pandas frame
        "rows_format": "pandas" if pandas else "records",
    }
    if _overrides(user_cls, "handleExpiredTimer"):

        def on_timer(self: Any, key: Any, timestamp: Any) -> list[Any]:
            from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

            k = _key_tuple(self, key)
            info = ExpiredTimerInfo(to_epoch_ms(timestamp))
            return _collect(self._user.handleExpiredTimer(k, _timer_values(self.ctx), info), style)

        methods["on_timer"] = on_timer
    return methods

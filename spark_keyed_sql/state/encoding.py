"""A safe, self-describing JSON encoding for attribute state. Never pickle.

Plain JSON covers str/int/float/bool/None, lists and dicts with string keys; everything else
is a one-key object tagged with ``$``: ``{"$tuple": [...]}``, ``{"$set": [...]}``,
``{"$dict": [[k, v], ...]}`` (non-string keys), ``{"$datetime": "iso"}``,
``{"$utc": "iso"}`` (the UTC time a timer gives), ``{"$date": ...}``,
``{"$float": "inf"}``, ``{"$decimal": "1.5"}``, ``{"$bytes": "base64"}``,
``{"$defaultdict": [factory, [[k, v], ...]]}``, ``{"$odict": [[k, v], ...]}``. The result is readable in ``read_state``.
"""

from __future__ import annotations

import base64
import collections
import datetime as _dt
import decimal
import json
import math
from typing import Any

from ..api.context import UTCDateTime
from ..api.errors import StateEncodingError
from ..api.values import short_repr

__all__ = ["encode_value", "decode_value", "dumps", "loads", "check_encodable"]

_FACTORIES = {"int": int, "float": float, "list": list, "dict": dict, "set": set, "str": str}


def encode_value(v: Any, where: str = "value") -> Any:
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v
    if t is float:
        if math.isfinite(v):
            return v
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if t is list:
        return [encode_value(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if t is tuple:
        return {"$tuple": [encode_value(x, f"{where}[{i}]") for i, x in enumerate(v)]}
    if t in (set, frozenset):
        items = [encode_value(x, f"{where} item") for x in v]
        items.sort(key=lambda e: json.dumps(e, sort_keys=True))
        return {"$set" if t is set else "$frozenset": items}
    if t is collections.defaultdict:
        fname = getattr(v.default_factory, "__name__", None)
        if v.default_factory is not None and fname not in _FACTORIES:
            raise StateEncodingError(
                f"{where}: defaultdict with default_factory {v.default_factory!r} cannot be stored; "
                f"use one of {sorted(_FACTORIES)} or a plain dict"
            )
        return {"$defaultdict": [fname, _encode_items(v, where)]}
    if t is collections.OrderedDict:  # its own methods (move_to_end, popitem(last=False)) come back too
        return {"$odict": _encode_items(v, where)}
    if t is dict:
        if all(type(k) is str and not k.startswith("$") for k in v):
            return {k: encode_value(x, f"{where}[{k!r}]") for k, x in v.items()}
        return {"$dict": _encode_items(v, where)}
    if t is _dt.datetime:
        return {"$datetime": v.isoformat()}
    if t is UTCDateTime:  # a time a timer or a clock gave: back as one, naive datetimes compare with it
        return {"$utc": v.isoformat()}
    if t is _dt.date:
        return {"$date": v.isoformat()}
    if t is _dt.timedelta:
        return {"$timedelta": [v.days, v.seconds, v.microseconds]}
    if t is decimal.Decimal:
        return {"$decimal": str(v)}
    if t is bytes:
        return {"$bytes": base64.b64encode(v).decode("ascii")}
    if hasattr(v, "dtype") and type(v).__module__ == "numpy" and getattr(v, "ndim", 1) == 0:
        return encode_value(v.item(), where)
    if t.__module__ == "pandas._libs.tslibs.timestamps":
        return encode_value(v.to_pydatetime(), where)
    raise StateEncodingError(
        f"{where} holds a {t.__module__}.{t.__qualname__} ({short_repr(v, 60)}), which keyed state cannot store. "
        "Attribute state may hold None, bool, int, float, str, bytes, datetime, date, timedelta, "
        "Decimal, and lists, tuples, sets and dicts of those; exclude the attribute with "
        "__state_exclude__ or keep it in a name starting with '_'"
    )


def _encode_items(v: dict, where: str) -> list:
    return [[encode_value(k, f"{where} key"), encode_value(x, f"{where}[{k!r}]")] for k, x in v.items()]


def decode_value(e: Any) -> Any:
    if isinstance(e, list):
        return [decode_value(x) for x in e]
    if not isinstance(e, dict):
        return e
    if len(e) == 1:
        ((tag, body),) = e.items()
        if tag.startswith("$"):
            return _decode_tagged(tag, body)
    return {k: decode_value(x) for k, x in e.items()}


def _decode_tagged(tag: str, body: Any) -> Any:
    if tag == "$tuple":
        return tuple(decode_value(x) for x in body)
    if tag == "$set":
        return {decode_value(x) for x in body}
    if tag == "$frozenset":
        return frozenset(decode_value(x) for x in body)
    if tag == "$dict":
        return {_hashable(decode_value(k)): decode_value(x) for k, x in body}
    if tag == "$odict":
        return collections.OrderedDict((_hashable(decode_value(k)), decode_value(x)) for k, x in body)
    if tag == "$defaultdict":
        fname, items = body
        d = collections.defaultdict(_FACTORIES[fname] if fname else None)
        d.update({_hashable(decode_value(k)): decode_value(x) for k, x in items})
        return d
    if tag == "$datetime":
        return _dt.datetime.fromisoformat(body)
    if tag == "$utc":
        value = _dt.datetime.fromisoformat(body)
        return UTCDateTime.combine(value.date(), value.time(), tzinfo=value.tzinfo)
    if tag == "$date":
        return _dt.date.fromisoformat(body)
    if tag == "$timedelta":
        return _dt.timedelta(days=body[0], seconds=body[1], microseconds=body[2])
    if tag == "$float":
        return float(body)
    if tag == "$decimal":
        return decimal.Decimal(body)
    if tag == "$bytes":
        return base64.b64decode(body)
    raise StateEncodingError(f"unknown tag {tag!r} in stored state; was it written by a newer version?")


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def dumps(v: Any, where: str = "value") -> str:
    try:
        return json.dumps(encode_value(v, where), separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # an int past Python's int <-> str digit limit
        raise StateEncodingError(f"{where}: cannot be stored ({exc})") from None


def loads(text: str) -> Any:
    return decode_value(json.loads(text))


def check_encodable(v: Any, where: str) -> None:
    encode_value(v, where)

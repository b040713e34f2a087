"""Python values checked against, and converted by, the Spark SQL type model: what user code
hands (state, output rows) becomes what Spark expects, and stored values what user code sees."""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import Any

from .errors import StateTypeError
from .types import ArrayType, AtomicType, DecimalType, MapType, SqlType, StructType

__all__ = ["FAST_CHECK_NAMES", "coerce", "fast_check", "short_repr", "struct_to_tuple", "to_user"]

_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}


def _fail(where: str, t: SqlType, value: Any) -> StateTypeError:
    return StateTypeError(f"{where}: expected {t.ddl()}, got {type(value).__name__} {value!r}")


def coerce(value: Any, t: SqlType, where: str) -> Any:
    """Check ``value`` against ``t`` and return the Python value Spark expects for it."""
    if value is None:
        return None
    if isinstance(t, AtomicType):
        n = t.name
        if n == "boolean":
            if isinstance(value, bool) or (
                type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")
            ):
                return bool(value)
            raise _fail(where, t, value)
        if n in _INT_RANGES:
            if isinstance(value, bool) or not _is_integral(value):
                raise _fail(where, t, value)
            iv = int(value)
            lo, hi = _INT_RANGES[n]
            if not lo <= iv <= hi:
                raise StateTypeError(f"{where}: {iv} does not fit {t.ddl()}")
            return iv
        if n in ("float", "double"):
            if isinstance(value, bool):
                raise _fail(where, t, value)
            if isinstance(value, (int, float)) or _is_numpy_number(value):
                return float(value)
            if isinstance(value, decimal.Decimal):
                return float(value)
            raise _fail(where, t, value)
        if n == "string":
            if isinstance(value, str):
                return value
            raise _fail(where, t, value)
        if n == "binary":
            if isinstance(value, (bytes, bytearray)):
                return bytes(value)
            raise _fail(where, t, value)
        if n == "date":
            if isinstance(value, _dt.datetime):
                raise _fail(where, t, value)
            if isinstance(value, _dt.date):
                return value
            raise _fail(where, t, value)
        if n in ("timestamp", "timestamp_ntz"):
            if type(value).__name__ == "datetime64":  # numpy's (a rows_format = "numpy" column's element)
                value = value.astype("datetime64[us]").item()  # (NaT: None)
                if value is None:
                    return None
            if hasattr(value, "to_pydatetime"):
                if value != value:  # pandas' NaT: NULL
                    return None
                value = value.to_pydatetime()
            if isinstance(value, _dt.datetime):  # (a subclass, a timer's UTC time: a plain datetime)
                return value if type(value) is _dt.datetime else _dt.datetime.combine(value.date(), value.timetz())
            raise _fail(where, t, value)
    if isinstance(t, DecimalType):
        if isinstance(value, bool):
            raise _fail(where, t, value)
        if isinstance(value, (int, decimal.Decimal)):
            return decimal.Decimal(value)
        raise _fail(where, t, value)
    if isinstance(t, ArrayType):
        if isinstance(value, (list, tuple, set, frozenset)) or _is_ndarray(value):
            items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            return [coerce(v, t.element, f"{where}[{i}]") for i, v in enumerate(items)]
        raise _fail(where, t, value)
    if isinstance(t, MapType):
        if isinstance(value, dict):
            if None in value:  # Spark (and Arrow) maps have no NULL keys: say so here, on every path
                raise StateTypeError(
                    f"{where}: a map key cannot be None (Spark maps have no NULL keys); got {short_repr(value)}"
                )
            return {coerce(k, t.key, f"{where} key"): coerce(v, t.value, f"{where}[{k!r}]") for k, v in value.items()}
        raise _fail(where, t, value)
    if isinstance(t, StructType):
        return struct_to_tuple(value, t, where)
    raise _fail(where, t, value)  # pragma: no cover


def short_repr(v: Any, limit: int = 120) -> str:
    """``repr(v)`` cut to ``limit`` characters, for error messages that quote user values."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def fast_check(t: SqlType, var: str, ranged: bool = True) -> str | None:
    """A Python expression, over the variable ``var``, that is true when ``coerce`` would return
    the value unchanged (the common case, checked inline by generated converters); None when
    there is no such shortcut for ``t``. ``ranged=False``: an integer's range is not checked
    (left to an Arrow conversion, which refuses a value out of range)."""
    if not isinstance(t, AtomicType):
        return None
    n = t.name
    if n in _INT_RANGES:
        lo, hi = _INT_RANGES[n]
        return f"(type({var}) is int and {lo} <= {var} <= {hi})" if ranged else f"type({var}) is int"
    exact = {"double": "float", "float": "float", "string": "str", "boolean": "bool"}.get(n)
    if exact:
        return f"type({var}) is {exact}"
    # coerce returns a datetime / date unchanged (the generated code's module has these names)
    if n in ("timestamp", "timestamp_ntz"):
        return f"type({var}) is __datetime"
    if n == "date":
        return f"type({var}) is __date"
    return None


FAST_CHECK_NAMES = {"__datetime": _dt.datetime, "__date": _dt.date}  # names fast_check's expressions use


def struct_to_tuple(value: Any, t: StructType, where: str) -> tuple:
    """A dict (by name) or a tuple/Row (by position) as a tuple in field order."""
    if isinstance(value, dict):
        extra = [k for k in value if k not in {f.name for f in t.fields}]
        if extra:
            raise StateTypeError(f"{where}: unknown field(s) {extra}; expected fields {t.names}")
        return tuple(coerce(value.get(f.name), f.type, f"{where}.{f.name}") for f in t.fields)
    if isinstance(value, (tuple, list)):
        if len(value) != len(t.fields):
            raise StateTypeError(
                f"{where}: expected {len(t.fields)} values ({', '.join(t.names)}), got {len(value)}: {value!r}"
            )
        return tuple(coerce(v, f.type, f"{where}.{f.name}") for v, f in zip(value, t.fields))
    raise _fail(where, t, value)


def _is_integral(value: Any) -> bool:
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu"


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def _is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray"


def to_user(value: Any, t: SqlType) -> Any:
    """Storage form (tuples/Rows for structs) back to the user form (dicts for structs)."""
    if value is None:
        return None
    if isinstance(t, StructType):
        if isinstance(value, dict):
            return {f.name: to_user(value.get(f.name), f.type) for f in t.fields}
        return {f.name: to_user(v, f.type) for v, f in zip(value, t.fields)}
    if isinstance(t, ArrayType):
        return [to_user(v, t.element) for v in value]
    if isinstance(t, MapType):
        items = value.items() if isinstance(value, dict) else value
        return {to_user(k, t.key): to_user(v, t.value) for k, v in items}
    return value

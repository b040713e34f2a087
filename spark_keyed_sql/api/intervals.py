"""Interval strings such as ``"30 minutes"`` or ``"7 days"`` to milliseconds."""

from __future__ import annotations

import re

from .errors import SchemaError

__all__ = ["parse_interval_ms", "parse_ttl_ms"]

_UNIT_MS = {
    "millisecond": 1,
    "ms": 1,
    "second": 1_000,
    "sec": 1_000,
    "s": 1_000,
    "minute": 60_000,
    "min": 60_000,
    "m": 60_000,
    "hour": 3_600_000,
    "hr": 3_600_000,
    "h": 3_600_000,
    "day": 86_400_000,
    "d": 86_400_000,
    "week": 7 * 86_400_000,
}

# a number (quoted as in Spark's INTERVAL '10' MINUTES, or not) and its unit
_PART = re.compile(r"\s*'?(\d+(?:\.\d+)?)'?\s*([a-zA-Z]+)\s*")
_UNFIXED = {"month", "mon", "year", "yr", "y"}  # no fixed length in milliseconds


def parse_interval_ms(text: str | int | float) -> int:
    """Parse ``"10 minutes"``, ``"1 hour 30 minutes"``, ``"INTERVAL 2 DAYS"`` or a number of ms."""
    if isinstance(text, bool):
        raise SchemaError(f"interval must be a string like '10 minutes', got {text!r}")
    if isinstance(text, (int, float)):
        return int(text)
    if not isinstance(text, str):
        raise SchemaError(f"interval must be a string like '10 minutes', got {text!r}")
    body = text.strip().strip("'\"")
    if body.upper().startswith("INTERVAL"):
        body = body[len("INTERVAL") :].strip().strip("'\"")
    pos, total = 0, 0.0
    if not body:
        raise SchemaError(f"empty interval {text!r}")
    while pos < len(body):
        m = _PART.match(body, pos)
        if not m:
            raise SchemaError(f"cannot read interval {text!r}; expected e.g. '30 minutes' or '7 days'")
        unit = m.group(2).lower()
        if unit not in _UNIT_MS and unit.endswith("s"):
            unit = unit[:-1]
        if unit in _UNFIXED:
            raise SchemaError(f"interval {text!r}: a {unit} has no fixed length; give it in days or weeks")
        if unit not in _UNIT_MS:
            raise SchemaError(f"unknown interval unit {m.group(2)!r} in {text!r}")
        total += float(m.group(1)) * _UNIT_MS[unit]
        pos = m.end()
    return int(total)


def parse_ttl_ms(text: str | int | float, where: str = "TTL") -> int:
    """A TTL: an interval (``parse_interval_ms``) that is positive, as Spark's TTL config requires
    (a TTL of 0 would expire every value the moment it is written)."""
    ms = parse_interval_ms(text)
    if ms <= 0:
        raise SchemaError(f"{where} must be a positive interval, got {text!r}")
    return ms

"""Expression nodes of the keyed clause (sqlglot expression classes)."""

from __future__ import annotations

from sqlglot import exp

__all__ = ["KNOWN_OPTIONS", "STREAMING_ONLY_OPTIONS", "ExplainKeyed", "KeyedGroup", "KeyedOption", "without_first_part"]


class KeyedGroup(exp.Expression):
    """``GROUP BY KEY k [AS n], ... WITH STATE fn(args) [AS alias] [ORDER BY ...] [EVENT TIME c
    WATERMARK i] [TTL i] [INITIAL STATE FROM t] [OPTIONS (...)]``; stored in a Select's
    ``group`` arg. ``keys`` empty (``keyed`` False) is the unkeyed ``WITH STATE`` form."""

    arg_types = {
        "keys": False,
        "keyed": False,
        "function": True,
        "alias": False,
        "order": False,
        "event_time": False,
        "watermark": False,
        "ttl": False,
        "initial_state": False,
        "options": False,
    }

    @property
    def keys(self) -> list[exp.Expression]:
        return self.args.get("keys") or []

    @property
    def function(self) -> exp.Expression:
        return self.args["function"]

    @property
    def function_name(self) -> str:
        f = self.function
        return f.name if isinstance(f, exp.Anonymous) else f.sql_name().lower()

    @property
    def alias_name(self) -> str | None:
        a = self.args.get("alias")
        return a.name if a is not None else None

    @property
    def options(self) -> dict[str, exp.Expression]:
        return {o.name.lower(): o.args["value"] for o in self.args.get("options") or []}


# OPTIONS (name = value) of WITH STATE, also named arguments of the table-function form
KNOWN_OPTIONS = {
    "engine",
    "checkpoint",
    "output_mode",
    "trigger",
    "max_files_per_trigger",
    "state_partitions",
    "native",
}
STREAMING_ONLY_OPTIONS = {"output_mode", "trigger", "max_files_per_trigger"}


class KeyedOption(exp.Expression):
    """``name = literal`` inside ``OPTIONS (...)``."""

    arg_types = {"this": True, "value": True}


class ExplainKeyed(exp.Expression):
    """``EXPLAIN KEYED <query>``."""

    arg_types = {"this": True}


def without_first_part(col: exp.Column) -> exp.Column:
    """``col`` without its first name part (``s.profile.country`` -> ``profile.country``: a
    qualifier taken off); as it is when it has one part, or more than a column holds."""
    parts = col.parts
    if not 1 < len(parts) <= 5:
        return col
    return exp.column(*reversed([p.copy() for p in parts[1:]]))

"""The text EXPLAIN KEYED / ks.explain shows."""

from __future__ import annotations

from sqlglot import exp

from .statement import KeyedStatement, KeyedStep

__all__ = ["explain_text", "format_plan"]


def _arguments(s: KeyedStep) -> str:
    if s.plan.inputs or s.plan.broadcasts:  # named inputs: each with the columns its rows carry
        return f"    inputs:    {'; '.join(s.arguments)}"
    return f"    arguments: {', '.join(s.arguments) or '(none)'}"


def _native(s: KeyedStep) -> list[str]:
    """Whether the step runs as Spark SQL (native) and that SQL, or what kept it on Python."""
    from ..engines.native import NativePlan

    if s.native is None:
        return ["    native:    off (OPTIONS (native = false) or spark.keyedsql.native=false): the Python path"]
    if isinstance(s.native, NativePlan) and s.native.stream is not None:
        sql = s.native.sql("keyed_source LEFT JOIN stored_state").replace("\n", "\n        ")
        when = (
            "every micro-batch (native = true)"
            if s.native.every_batch
            else "a micro-batch of at least half the stored state's bytes, or of a size Spark cannot estimate "
            "(Spark Connect, unsized sources); a smaller one runs on the Python path when this application's local "
            "stores hold the state, or after 3 small native batches in a row (native = 'auto'; native = true: every "
            "micro-batch)"
        )
        return [
            "    native:    yes, no Python worker: a micro-batch runs this Spark SQL over its rows joined with",
            "               their keys' stored state (the checkpoint's last commit); a key's last row is its new state",
            f"               when: {when}",
            f"        {sql}",
        ]
    if isinstance(s.native, NativePlan):
        sql = s.native.sql("keyed_source").replace("\n", "\n        ")
        return [
            "    native:    yes, no Python worker: the step runs as this Spark SQL over its source SQL",
            f"        {sql}",
        ]
    return [f"    native:    no, the Python path: {s.native}"]


def format_plan(rw: KeyedStatement) -> str:
    lines = ["== Keyed plan =="]
    for i, s in enumerate(rw.steps, 1):
        lines += [
            f"[{i}] WITH STATE {s.function} ({s.class_name}) on engine '{s.engine.name}'"
            + (" (streaming source)" if s.streaming else " (batch source)"),
            f"    keys:      {', '.join(s.keys) or '(unkeyed: one global state)'}",
            _arguments(s),
            f"    order:     {', '.join(s.order) or '(arrival order)'}",
            f"    options:   {s.options or '{}'}",
            f"    pass-through columns: {', '.join(s.passthrough) or '(none)'}",
            *_native(s),
            f"    source SQL: {s.source_sql}",
            f"    result view: {s.view}",
            f"    outer SQL:  {s.outer_sql}",
        ]
    lines.append(f"== Final Spark SQL ==\n{rw.final_sql}")
    return "\n".join(lines)


def explain_text(query: str, statement: KeyedStatement | None, explained: exp.Expression | None) -> str:
    """What EXPLAIN KEYED / ks.explain show: the keyed plan, or that Spark runs the query as is
    (``explained``: the parsed query after EXPLAIN KEYED, shown as Spark SQL from its tree)."""
    if statement is not None:
        return format_plan(statement)
    if explained is not None:
        from .parse import render

        query = render(explained)
    return "== Keyed plan ==\n(no GROUP BY KEY / WITH STATE: runs as plain Spark SQL)\n" + query

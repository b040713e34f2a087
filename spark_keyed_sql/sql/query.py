"""A statement given to ``ks.sql`` / ``ks.run`` / ``ks.start``, read once: plain Spark SQL (None),
a DELETE / UPDATE of ``keyed_state`` (a ``StateEdit``), or keyed selects planned into a
``KeyedStatement``; with, for ``EXPLAIN KEYED``, the parsed query it explains."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import SparkSession
from sqlglot import exp

from ..runtime.spec import FunctionSpec
from .edits import state_edit
from .errors import KeyedQueryError
from .expressions import ExplainKeyed
from .parse import has_keyed_parts, read_statement
from .rewriter import plan_statement
from .statement import RunMode, bind
from .table_calls import expand_table_calls, source_schema

__all__ = ["plan_query"]


def plan_query(
    spark: SparkSession,
    query: str,
    functions: Mapping[str, FunctionSpec],
    function: Callable[[str], FunctionSpec],
    default_engine: str,
    mode: RunMode,
    checkpoint: str | None = None,
    bind_as: RunMode | None = None,
    written_by: Callable[[str], str | None] | None = None,
) -> tuple[Any, exp.Expression | None]:
    """The statement's plan (None for plain Spark SQL; a ``StateEdit`` for a DELETE / UPDATE of
    keyed_state) and, for EXPLAIN KEYED, the parsed query after it (else None). ``functions``:
    the registered ones by lower-case name, ``function``: one by name (raising when unknown);
    ``bind_as``: the mode its steps' results are bound in (default ``mode``); ``written_by``:
    the engine that wrote a checkpoint. The text is tokenized and parsed once; plain Spark SQL
    not parsed."""

    def registered(name: str) -> bool:
        return name.lower() in functions

    tree = read_statement(query, registered)
    if tree is None:
        return None, None
    explained = None
    if isinstance(tree, ExplainKeyed):
        tree = explained = tree.this
    try:
        edit = state_edit(tree)  # DELETE / UPDATE of keyed_state(...)
        if edit is not None:
            if mode is not RunMode.SQL:
                raise KeyedQueryError(f"{edit.verb} of keyed state runs through ks.sql, not ks.start / ks.run")
            return edit, explained
        # fn(TABLE(t), key => ...) of a registered function: the keyed select it stands for
        tree = expand_table_calls(tree, registered, source_schema(spark))
        if not has_keyed_parts(tree):
            return None, explained  # e.g. `GROUP BY key` of a column named key: Spark's, as written
        # an EXPLAIN binds a stream's steps as ks.start / ks.run would (no result is returned), and
        # 'auto' picks the engine they would
        bound = bind_as or (RunMode.STREAM if explained is not None else mode)
        statement = plan_statement(
            spark,
            tree,
            function,
            lambda step: bind(step, bound),
            default_engine=default_engine,
            mode=mode,
            checkpoint=checkpoint,
            written_by=written_by,
            per_batch=bound is RunMode.STREAM,
        )
    except KeyedQueryError as exc:  # one that knows where: shown with the statement's line
        raise exc.in_statement(query) from None
    return statement, explained

"""The per-row loop of a StatefulFunction, generated per ``returns`` schema.

One output row per input row (a counter, a running total) is the engines' hottest path: the
loop below checks the common result, ``[(v0, v1, ...)]`` with every value already of the exact
Python type Spark wants, inline, without a call per row; every other result (several rows, a
dict, None inside, numpy values, a generator, a wrong type) goes to the runner's general path,
which says what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..api.types import FAST_CHECK_NAMES, StructType, fast_check
from ..compat.codegen import generated_function

__all__ = ["RowLoop", "row_loop"]

# (events, position of the first event's input row, execute, out, src, runner, call, key,
# inputs: each event's input name when the function has several inputs, else None)
RowLoop = Callable[[list, int, Callable[[Any], Any], list, list, Any, Any, Any, Any], None]

_LOOP = """\
def loop(events, i, execute, out, src, runner, call, key, inputs=None):
    append, src_append = out.append, src.append
    {start}for event in events:
        # a clear_state() in an earlier row is followed by this row's updates
        call.cleared = False{set_input}
        try:
            result = execute(event)
        except Exception as exc:
            runner._row_failed(key, event, exc)
        if result is None:  # no row (most rows of a sessionizer)
            i += 1
            continue
        if type(result) is list:
            if not result:
                i += 1
                continue
{fast}
        runner._general_row(key, event, result, i, out, src)
        i += 1
"""

_FAST = """\
            if len(result) == 1:
                item = result[0]
                if type(item) is tuple and len(item) == {width}:
                    {unpack}, = item
                    if {checks}:
                        append(item)
                        src_append(i)
                        i += 1
                        continue"""


def row_loop(schema: StructType | None, several_inputs: bool = False) -> RowLoop:
    """The loop for functions returning ``schema`` (None: no declared returns, every result
    goes the general way). Output rows are appended to ``out`` (tuples in returns order) and,
    for each, the position of its input row to ``src``; a row whose result is not the common
    shape calls ``runner._general_row(key, event, result, i, out, src)``, a row whose user code
    raised ``runner._row_failed(key, event, exc)`` (which raises). ``several_inputs``: each
    row's ``call.input`` is set from ``inputs`` (one name per event)."""
    checks = None
    if schema is not None and schema.fields:
        parts = [fast_check(f.type, f"v{i}") for i, f in enumerate(schema.fields)]
        if all(parts):
            checks = parts
    return _generated(tuple(checks) if checks else None, several_inputs)


@lru_cache(maxsize=64)
def _generated(checks: tuple[str, ...] | None, several_inputs: bool = False) -> RowLoop:
    if checks is None:
        fast = "            pass"
    else:
        unpack = ", ".join(f"v{i}" for i in range(len(checks)))
        fast = _FAST.format(width=len(checks), unpack=unpack, checks=" and ".join(checks))
    env: dict[str, Any] = dict(FAST_CHECK_NAMES)
    start, set_input = ("", "")
    if several_inputs:
        start, set_input = "k = 0\n    ", "\n        call.input = inputs[k]\n        k += 1"
    source = _LOOP.format(fast=fast, start=start, set_input=set_input)
    return generated_function(source, "loop", env, "row loop")

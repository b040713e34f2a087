"""The per-row loop of a StatefulFunction, generated per ``returns`` schema.

One output row per input row (a counter, a running total) is the engines' hottest path: the
loop below checks the common result, ``[(v0, v1, ...)]`` with every value already of the exact
Python type Spark wants, inline, without a call per row; every other result (several rows, a
dict, None inside, numpy values, a generator, a wrong type) goes to the runner's general path,
which says what is wrong.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..api.types import StructType
from ..api.values import FAST_CHECK_NAMES, fast_check
from ..compat.codegen import generated_function
from ..state.attributes import LIVE_NAMES

__all__ = ["KeysLoop", "RowLoop", "keys_loop", "row_loop"]

# (events, position of the first event's input row, execute, out, src, runner, call, key,
# inputs: each event's input name when the function has several inputs, else None)
RowLoop = Callable[[list, int, Callable[[Any], Any], list, list, Any, Any, Any, Any], None]
# (keys, starts, ends, columns, names, execute, out, src, runner, call, next_key, instance,
# layout, inputs): see keys_loop
KeysLoop = Callable[..., bool]

# the user's call, the same in both loops' rows
_CALL = """\
try:
    result = execute(event)
except Exception as exc:
    runner._row_failed(key, event, exc)
"""

# one row: ``event`` at input position ``i`` (advanced past it on every path)
_ROW = """\
{set_input}{call}if result is None:  # no row (most rows of a sessionizer)
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

_LOOP = """\
def loop(events, i, execute, out, src, runner, call, key, inputs=None):
    append, src_append = out.append, src.append
    k = 0
    for event in events:
{row}"""

# every key of a one-shot batch in one call (runner.run_fresh_keys): each from __init__'s
# attributes, its rows in order, then checked as storing it would check it. ``plain``: the
# instance holds exactly the attributes __init__ made (checked after each key), so the next
# key's reset is one dict update. ``dense``: every row so far made one row on the fast path, so
# output row j is input row first + j and ``src`` is left empty (the loop returns whether that
# held to the end); the first other row fills ``src`` in and from then on every output row has
# its input row there. Each event is built where it is used (cheaper than a list of them
# built first); integer ranges are left to the Arrow conversion, which refuses a value out of
# range (the caller then checks the rows the general way: KeyedRunner.check_rows).
_KEYS = """\
def keys_loop(
    keys, starts, ends, columns, names, execute, out, src, runner, call, next_key, instance, layout, inputs=None
):
    append, src_append = out.append, src.append
    reset, shared, known = layout.reset, layout.fresh_values, layout.known
{prologue}
    reset(instance)
    plain = instance.__dict__.keys() == known
    dense = True
    first = starts[0] if starts else 0
    for key, i, end in zip(keys, starts, ends):
        next_key()
        d = instance.__dict__  # (each key: user code may have replaced it)
{reset}
        call.key = key
        while i < end:
            {event}
{row}
        # AttributeLayout.live_safe inline: storing it could fail, so it must fail here as anywhere
        if d.keys() != known:
            runner._encoded(key)
            plain = False
        elif not ({live}):
            runner._encoded(key)
    return dense
"""

# one row of the keys loop: ``event`` at input position ``i`` (advanced past it on every path)
_KEYS_ROW = """\
{set_input}{call}{fast}
if dense:  # a row other than one fast-path row: src from here on
    src.extend(range(first, i))
    dense = False
if result is None or (type(result) is list and not result):  # no row
    i += 1
    continue
runner._general_row(key, event, result, i, out, src)
i += 1
"""

_KEYS_FAST = """\
if type(result) is list and len(result) == 1:
    item = result[0]
    if type(item) is tuple:
        try:
            {unpack}, = item
        except ValueError:  # another width: the general path says so
            pass
        else:
            if {checks}:
                append(item)
                if not dense:
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
    return _generated(_checks(schema), several_inputs)


def keys_loop(
    schema: StructType | None,
    arity: int | None,
    copies: bool = False,
    live: str = "False",
) -> KeysLoop:
    """The loop over every key of a one-shot batch of a StatefulFunction without timers or TTL
    (``KeyedRunner.run_fresh_keys``), with ``row_loop``'s per-row body inline: key ``keys[j]``
    runs rows ``starts[j]`` to ``ends[j]`` (contiguous: each key's rows end where the next
    key's start) after ``next_key()`` emptied the binding's state and the instance got
    ``__init__``'s attributes back (``layout``: the class's ``AttributeLayout``; ``copies``: some
    of them are copied per key). ``arity``: the function's argument count, each row's event
    built from ``columns`` (one list per argument) and ``names``; None: several inputs, and
    ``columns`` is ``[events]``, each row's event prebuilt (with its input in ``inputs``). A key
    whose attributes storing might refuse (``live``, the layout's ``live_source``, false) calls
    ``runner._encoded(key)``, which raises if storing does. Output rows as ``row_loop``'s, except
    that ``src`` stays empty while every row made one fast-path row (see ``_KEYS``; the loop
    returns True when that held to the end), and integers are not range-checked here."""
    checks = _checks(schema, ranged=False)
    return _generated(checks, arity is None, keys=True, copies=copies, live=live, arity=arity or 0)


def _checks(schema: StructType | None, ranged: bool = True) -> tuple[str, ...] | None:
    if schema is not None and schema.fields:
        parts = [fast_check(f.type, f"v{i}", ranged) for i, f in enumerate(schema.fields)]
        if all(parts):
            return tuple(parts)
    return None


_PLAIN_RESET = """\
        if plain:
            d.update(shared)
        else:
            reset(instance)
            plain = d.keys() == known"""


@lru_cache(maxsize=64)
def _generated(
    checks: tuple[str, ...] | None,
    several_inputs: bool = False,
    keys: bool = False,
    copies: bool = False,
    live: str = "False",
    arity: int = 0,
) -> Any:
    env: dict[str, Any] = dict(FAST_CHECK_NAMES)
    unpack = ", ".join(f"v{i}" for i in range(len(checks))) if checks else ""
    if keys:
        fast = _KEYS_FAST.format(unpack=unpack, checks=" and ".join(checks)) if checks else ""
        set_input = "call.input = inputs[i]\n" if several_inputs else ""
        row = _KEYS_ROW.format(call=_CALL, fast=fast, set_input=set_input)
        if several_inputs:
            prologue, event = "    events, = columns", "event = events[i]"
        elif arity:
            cs = ", ".join(f"c{j}" for j in range(arity))
            ns = ", ".join(f"n{j}" for j in range(arity))
            prologue = f"    {cs}, = columns\n    {ns}, = names"
            event = "event = {" + ", ".join(f"n{j}: c{j}[i]" for j in range(arity)) + "}"
        else:
            prologue, event = "", "event = {}"
        # AttributeLayout.reset, its common case inline: the attributes __init__ made, all immutable
        reset = "        reset(instance)" if copies else _PLAIN_RESET
        row = textwrap.indent(row, " " * 12)
        source = _KEYS.format(prologue=prologue, event=event, row=row, reset=reset, live=live)
        env.update(LIVE_NAMES)
        return generated_function(source, "keys_loop", env, "keys loop")
    if checks is None:
        fast = "    pass"
    else:
        fast = _FAST.format(width=len(checks), unpack=unpack, checks=" and ".join(checks))
    set_input = "call.input = inputs[k]\nk += 1\n" if several_inputs else ""
    row = _ROW.format(call=_CALL, fast=fast, set_input=set_input)
    return generated_function(_LOOP.format(row=textwrap.indent(row, " " * 8)), "loop", env, "row loop")

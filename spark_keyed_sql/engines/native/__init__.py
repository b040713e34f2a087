"""Native plans: a StatefulFunction whose ``execute`` is a running aggregate with a little
logic, planned as Spark SQL with window functions, no Python worker (docs/native.md).

``plan_native`` answers a ``NativePlan`` or the reason the class stays on the Python path."""

from __future__ import annotations

import logging
from typing import Any

from ...runtime.plan import KeyedPlan
from ...runtime.spec import FunctionKind
from .analyze import Declined, analyze
from .plan import NativePlan, build
from .stored import check_typed_attributes

__all__ = ["AUTO", "NATIVE_CONF", "OFF", "ON", "Declined", "NativePlan", "native_mode", "plan_native"]

log = logging.getLogger(__name__)

# the session default of OPTIONS (native = ...): auto (docs/native.md)
NATIVE_CONF = "spark.keyedsql.native"


AUTO, ON, OFF = "auto", "on", "off"
_WORDS = {
    "auto": AUTO,
    "true": ON,
    "1": ON,
    "yes": ON,
    "on": ON,
    "false": OFF,
    "0": OFF,
    "no": OFF,
    "off": OFF,
}


def native_mode(option: Any, conf: str | None) -> str | None:
    """OPTIONS (native = ...) if given, else the session's ``spark.keyedsql.native``: ``auto``
    (the default: planned when the class is in the subset; a stream step chooses per micro-batch,
    ``engines/bulk/native_choice.py``), ``on`` (``true``: every micro-batch native), ``off``
    (``false``). None: a value that is none of them."""
    value = option if option is not None else (conf if conf not in (None, "") else AUTO)
    if isinstance(value, bool):
        return ON if value else OFF
    return _WORDS.get(str(value).strip().lower())


def plan_native(plan: KeyedPlan, *, streaming: bool, native_streams: bool = False) -> NativePlan | Declined:
    """The step as Spark SQL, or why it stays on the Python path (``Declined``'s message).
    ``streaming``: a stream step, each micro-batch starting from the keys' stored state, when
    the engine runs native stream steps (``native_streams``)."""
    spec = plan.spec
    try:
        if spec.kind is not FunctionKind.FUNCTION:
            raise Declined("a KeyedProcessor (only a StatefulFunction's execute is planned)")
        if streaming and not native_streams:
            raise Declined("a stream on this engine (native stream steps run on engine 'bulk')")
        if streaming and not plan.key_columns:
            raise Declined("a stream without a key")
        for what, present in (
            ("an INITIAL STATE", plan.initial_state is not None),
            ("several inputs", bool(plan.inputs)),
            ("a broadcast input", bool(plan.broadcasts)),
            ("a TTL", spec.has_ttl),
            ("timers", spec.has_timers),
            ("EVENT TIME", plan.event_time is not None),
        ):
            if present:
                raise Declined(f"{what} (not planned natively)")
        if len(plan.key_columns) > 1:
            raise Declined("a key of several columns")
        if spec.returns is None:
            raise Declined("no returns schema")
        from ...state.attributes import AttributeLayout

        instance = spec.instantiate()
        layout = AttributeLayout(instance)
        types = plan.arg_types or {}
        fields = {n: (c, types.get(c, "")) for n, c in zip(plan.event_names, plan.arg_columns)}
        key = (plan.key_columns[0], types.get(plan.key_columns[0], "")) if plan.key_columns else None
        if key is not None and key[1].lower() not in ("string", "bigint", "int", "smallint", "tinyint", "boolean"):
            raise Declined(f"a key of type {key[1] or 'unknown'} (planned: strings, integers, booleans)")
        program = analyze(spec.cls, instance, layout.names, fields, key)
        if not streaming:
            # the Python path checks each key's typed attributes against their annotations when it
            # stores them (a float in an int attribute: StateTypeError), in a one-shot batch too
            check_typed_attributes(layout, program.initial)
        return build(program, plan, spec.returns, layout if streaming else None)
    except Declined as d:
        return d
    except Exception as exc:  # noqa: BLE001 - a planner gap never fails the statement: it runs on Python
        log.warning("native planner: %s stays on the Python path (%s: %s)", spec.name, type(exc).__name__, exc)
        return Declined(f"the planner could not read it ({type(exc).__name__}: {exc})")

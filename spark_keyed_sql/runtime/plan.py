"""What an engine is asked to run: a function over a source DataFrame's columns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..api.errors import SchemaError
from ..compat.names import named
from .broadcast import BroadcastInput
from .columns import parse_column_list, parse_order_list, quote
from .keys import OrderSpec
from .spark_frames import column_ddl
from .spec import FunctionSpec

__all__ = ["KeyedPlan", "PlanInput", "dataframe_plan", "plain_names"]


@dataclass(frozen=True)
class PlanInput:
    """One of several named inputs: its rows are the source rows whose ``input_column`` is its
    index; ``event_map`` gives its event dict / frame (its own column name -> source column)."""

    name: str
    event_map: tuple[tuple[str, str], ...]

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.event_map]

    @property
    def columns(self) -> list[str]:
        return [c for _, c in self.event_map]


@dataclass
class KeyedPlan:
    spec: FunctionSpec
    key_columns: list[str]  # columns of the source frame; empty = unkeyed
    arg_columns: list[str]  # the event dict / rows frame columns, in order
    order: list[OrderSpec] = field(default_factory=list)
    initial_state: Any = None  # a DataFrame with the key columns + state columns
    output_mode: str = "Append"
    arg_names: list[str] | None = None  # event dict keys, when they differ from arg_columns
    passthrough: list[str] = field(default_factory=list)  # source columns copied to each output row
    event_time: str | None = None  # source column with the event time (watermarked on streams)
    watermark_ms: int | None = None  # allowed lateness behind the largest event time seen
    # OPTIONS (state_partitions = n): the state partitions of a new checkpoint (bulk and tws), and
    # a one-shot bulk batch's hash partitions (None: spark.sql.shuffle.partitions; adaptive on batch)
    partitions: int | None = None
    # processing time's offset from the wall clock (runtime/clock.py; tests move time with it)
    clock_offset_ms: int = 0
    # several named inputs (the table-function form): each row's input index is in input_column
    inputs: list[PlanInput] | None = None
    input_column: str | None = None
    # the engine's count of the keys each batch runs, where Spark reports none (engines/tws/touches.py)
    key_touches: Any = None
    # attributes added to the class since its checkpoint's state began (state/evolution.py): a
    # stored row written before may lack them, and an engine that reads rows by name with a
    # NULL for a missing field (tws) reads that NULL as the attribute's __init__ value
    absent_attributes: tuple[str, ...] = ()
    # attribute / state variable -> the name its values are stored under, where a rename left
    # them (an engine that keeps state where it was written: tws; state/evolution.py)
    stored_names: dict[str, str] = field(default_factory=dict)
    # source column -> its Spark type (DDL), for a KeyedProcessor's rows as PySpark types them
    # (runtime/spark_frames.py); set by the engine's caller from the source's schema
    arg_types: dict[str, str] | None = None
    # broadcast inputs (runtime/broadcast.py): their rows are the source rows whose
    # broadcast_column holds their index; an engine takes them out before the keyed rows run and
    # ships broadcast_state (BroadcastState, built by the driver) with the program
    broadcasts: list[BroadcastInput] | None = None
    broadcast_column: str | None = None
    broadcast_state: Any = None
    # initial_broadcast => TABLE(...): rows per broadcast input applied before the first batch's
    broadcast_seed: dict[str, list[dict[str, Any]]] | None = None

    @property
    def event_time_name(self) -> tuple[str, ...] | None:
        """The event time's name(s) in the event dicts (one per spelling: each input has its
        own); None: no event time, or not in the events."""
        if self.event_time is None:
            return None
        maps = [i.event_map for i in self.inputs] if self.inputs else [tuple(zip(self.event_names, self.arg_columns))]
        names = tuple(dict.fromkeys(n for m in maps for n, c in m if c == self.event_time))
        return names or None

    def use_schema(self, schema: Any) -> None:
        """Take the argument columns' Spark types from the source's (pyspark) schema."""
        self.arg_types = column_ddl(schema.fields)

    @property
    def watermarked_inputs(self) -> int:
        """How many inputs carry a watermark of their own (several inputs with an event time,
        whose one watermark Spark's rule chooses over theirs); 0 otherwise."""
        several = self.event_time is not None and self.inputs is not None and len(self.inputs) > 1
        return len(self.inputs or []) if several else 0

    def stored_name(self, name: str) -> str:
        return self.stored_names.get(name, name)

    @property
    def input_names(self) -> list[str] | None:
        return [i.name for i in self.inputs] if self.inputs else None

    @property
    def event_names(self) -> list[str]:
        return self.arg_names if self.arg_names is not None else self.arg_columns

    @property
    def keyed(self) -> bool:
        return bool(self.key_columns)


def dataframe_plan(
    spec: FunctionSpec,
    df: Any,
    key: str | list[str] | None,
    order_by: str | list[str] | None,
    args: list[str] | None,
    initial_state: Any,
    clock_offset_ms: int,
) -> KeyedPlan:
    """``ks.apply``'s plan: ``key``, ``order_by`` and ``args`` (default: every column) named
    against ``df``'s columns (SQL names: case does not matter), refused by name when absent."""
    keys = parse_column_list(key, "key")
    order = parse_order_list(order_by)
    columns = {c.lower(): c for c in df.columns}
    arg_cols = list(df.columns) if args is None else parse_column_list(args, "args")
    for what, cols in (("key", keys), ("order_by", [o.column for o in order]), ("argument", arg_cols)):
        missing = [c for c in cols if c.lower() not in columns]
        if missing:
            raise SchemaError(
                f"{spec.name}: {what} column(s) {missing} not in the source (columns: {', '.join(df.columns)})"
            )
    # (named as the frame spells them: SQL names are case-insensitive, and an engine finds an
    # ORDER BY column in its rows by that spelling: `order_by="SEQ"` left tws rows unsorted)
    order = [dataclasses.replace(o, column=columns[o.column.lower()]) for o in order]
    if initial_state is not None:
        initial_state = _seed_in_key_types(spec, df, [columns[k.lower()] for k in keys], initial_state)
    plan = KeyedPlan(
        spec,
        [columns[k.lower()] for k in keys],
        [columns[c.lower()] for c in arg_cols],
        order,
        initial_state,
        clock_offset_ms=clock_offset_ms,
    )
    plan.use_schema(df.schema)
    return plan


def plain_names(df: Any, plan: KeyedPlan) -> tuple[Any, KeyedPlan, dict[str, str]]:
    """``df`` and ``plan`` with no column named with a dot or a backtick: PySpark's
    ``mapInArrow`` / ``groupBy`` take a frame's columns by name and read ``u.id`` as a field
    (UNRESOLVED_COLUMN). Such columns run as ``__ks_c_<hex of the name>``; the function's events keep the
    names it was given; the returned map (internal -> name) gives the output's key columns
    theirs back. Unchanged (and an empty map) when no name needs it."""
    # (named after the name, not its position: a column added to the frame renames no other)
    unsafe = {c: f"__ks_c_{c.encode().hex()}" for c in df.columns if "." in c or "`" in c}
    if not unsafe:
        return df, plan, {}

    def renamed(frame: Any) -> Any:
        return frame.select(*[named(c).alias(unsafe[c]) if c in unsafe else named(c) for c in frame.columns])

    out = dataclasses.replace(
        plan,
        key_columns=[unsafe.get(k, k) for k in plan.key_columns],
        arg_columns=[unsafe.get(c, c) for c in plan.arg_columns],
        arg_names=list(plan.event_names),
        order=[dataclasses.replace(o, column=unsafe.get(o.column, o.column)) for o in plan.order],
        initial_state=renamed(plan.initial_state) if plan.initial_state is not None else None,
    )
    source = renamed(df)
    out.use_schema(source.schema)
    return source, out, {unsafe[k]: k for k in plan.key_columns if k in unsafe}


def _seed_in_key_types(spec: FunctionSpec, df: Any, keys: list[str], seed: Any) -> Any:
    """``initial_state=``'s key columns (named as ``df``'s) in ``df``'s key types."""
    from .seed_keys import seed_key_sql  # (PySpark's types: KeyedTester imports this module without it)

    seed_cols = {c.lower(): c for c in seed.columns}
    missing = [k for k in keys if k.lower() not in seed_cols]
    if missing:
        raise SchemaError(
            f"{spec.name}: initial_state has no key column(s) {missing} (columns: {', '.join(seed.columns)})"
        )
    types = {f.name: f.dataType for f in seed.schema.fields}
    key_types = {f.name: f.dataType for f in df.schema.fields}
    exprs = []
    for c in seed.columns:
        key = next((k for k in keys if k.lower() == c.lower()), None)
        if key is None:
            exprs.append(quote(c))
        else:
            what = f"{spec.name}: initial_state's key column {c}"
            # (named as the source's key: the engines look the seed's keys up by those names)
            exprs.append(f"{seed_key_sql(quote(c), types[c], key_types[key], what)} AS {quote(key)}")
    return seed.selectExpr(*exprs)

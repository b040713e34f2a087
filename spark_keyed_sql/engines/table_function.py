"""The table-function form: ``fn(TABLE(t), key => 'a, b', order_by => 'ts')`` as a Python UDTF.

``analyze`` asks Spark to partition the table by a hash bucket of the key and to order each
bucket by key then ``order_by``, so one UDTF instance sees many keys, each contiguously; the
instance switches state when the key changes instead of paying one Python instance per key.
State lives for the query (batch only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import types as T

from ..api.errors import SchemaError
from ..runtime.clock import now_ms
from ..runtime.columns import parse_column_list, parse_order_list, quote
from ..runtime.keys import user_key
from ..runtime.runner import KeyedRunner
from ..runtime.spark_frames import arrow_types, column_ddl
from ..runtime.spec import FunctionSpec
from ..runtime.timers import pop_due
from ..state.memory import MemoryKeyState, memory_binding
from ..state.spark_types import to_spark

__all__ = ["make_table_function", "BUCKETS"]

BUCKETS = 64


def _literal(arg: Any, name: str, fn: str) -> str | None:
    if arg is None:
        return None
    if not arg.isConstantExpression or not isinstance(arg.value, str):
        raise SchemaError(f"{fn}: {name} => must be a string literal such as '{name}_column', got {arg.value!r}")
    return arg.value


def make_table_function(spec: FunctionSpec) -> type:
    """The UDTF class of ``spec`` (Spark 4.0 and newer: it needs ``analyze``)."""
    import dataclasses

    from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult, OrderingColumn, PartitioningColumn

    @dataclasses.dataclass
    class Analyzed(AnalyzeResult):
        """What analyze saw, handed to each instance's __init__ by Spark: the input's column
        types (Spark DDL), for a KeyedProcessor's rows typed as PySpark types them."""

        arg_types: tuple = ()  # ((column, DDL), ...)

    fn = spec.name
    assert spec.returns is not None
    returns_fields = [T.StructField(f.name, to_spark(f.type), True) for f in spec.returns.fields]

    class KeyedTableFunction:
        @staticmethod
        def analyze(*args: AnalyzeArgument, **named: AnalyzeArgument) -> AnalyzeResult:
            tables = [a for a in args if a.isTable] + [a for a in named.values() if a.isTable]
            if len(tables) > 1 or [n for n, a in named.items() if a.isTable]:
                inputs = [n for n, a in named.items() if a.isTable]
                raise SchemaError(
                    f"{fn}: named inputs ({', '.join(inputs)}) are run by ks.sql / ks.run / ks.start, not plain "
                    "spark.sql (Spark's Python UDTFs take one table): give the same statement to ks.sql(...)"
                )
            unknown = sorted(set(named) - {"key", "order_by"})
            if unknown and len(args) == 1:
                raise SchemaError(
                    f"{fn}: got {', '.join(f'{n} =>' for n in unknown)}; in plain spark.sql the table function takes "
                    f"only {fn}(TABLE(...), key => '...', order_by => '...') (one query: no watermark, TTL or "
                    "checkpoint); the form's other arguments (event_time, watermark, ttl, initial_state, broadcast, "
                    "OPTIONS' names; docs/sql.md) are taken by ks.sql(...) with the same statement"
                )
            if unknown or len(args) != 1:
                raise SchemaError(
                    f"{fn}: plain spark.sql takes {fn}(TABLE(...), key => '...', order_by => '...'); got "
                    f"{len(args)} positional argument(s) and {', '.join(unknown) or 'no other named ones'}"
                )
            table, key, order_by = args[0], named.get("key"), named.get("order_by")
            if not table.isTable:
                raise SchemaError(f"{fn}: the first argument must be TABLE(<table or query>)")
            source: T.StructType = table.dataType  # type: ignore[assignment]
            names = {f.name.lower(): f for f in source.fields}
            keys = parse_column_list(_literal(key, "key", fn), "key")
            order = parse_order_list(_literal(order_by, "order_by", fn))
            for what, cols in (("key", keys), ("order_by", [o.column for o in order])):
                missing = [c for c in cols if c.lower() not in names]
                if missing:
                    raise SchemaError(
                        f"{fn}: {what} column(s) {missing} not in the input table (columns: {', '.join(source.names)})"
                    )
            taken = {k.lower() for k in keys}
            clash = [f.name for f in returns_fields if f.name.lower() in taken]
            if clash:
                raise SchemaError(f"{fn}: returns column(s) {clash} have the same name as key columns")
            out = T.StructType(
                [T.StructField(names[k.lower()].name, names[k.lower()].dataType, True) for k in keys] + returns_fields
            )
            ordering = [OrderingColumn(quote(names[k.lower()].name)) for k in keys] + [
                OrderingColumn(
                    quote(names[o.column.lower()].name), ascending=o.ascending, overrideNullsFirst=o.nulls_first
                )
                for o in order
            ]
            arg_types = tuple(column_ddl(source.fields).items())
            if not keys:
                return Analyzed(schema=out, withSinglePartition=True, orderBy=ordering, arg_types=arg_types)
            bucket = f"pmod(hash({', '.join(quote(names[k.lower()].name) for k in keys)}), {BUCKETS})"
            return Analyzed(schema=out, partitionBy=[PartitioningColumn(bucket)], orderBy=ordering, arg_types=arg_types)

        def __init__(self, analyze_result: Any = None) -> None:
            self.arg_types = dict(getattr(analyze_result, "arg_types", ()) or ())
            self.runner: KeyedRunner | None = None
            self.current: tuple | None = None
            self.buffer: list[tuple] = []
            # the processing time of this one-shot query (current_processing_time(), timers)
            self.now_ms = now_ms()

        def _setup(self, row: Any, key: str | None, order_by: str | None) -> None:
            self.fields = list(row.__fields__)
            lower = {f.lower(): f for f in self.fields}
            self.keys = [lower[k.lower()] for k in parse_column_list(key, "key")]
            # keys by position: a Row's row["name"] searches its field list on every call
            self.key_at = [self.fields.index(k) for k in self.keys]
            self.one_key = self.key_at[0] if len(self.key_at) == 1 else None
            # rows arrive in key, order_by order (analyze asked Spark for it); the runner's sort is stable
            self.runner = KeyedRunner(spec, [], bool(self.keys))
            self.runner.column_types = arrow_types(self.arg_types)

        def _flush(self) -> Iterator[tuple]:
            """The finished key's rows as one group: state is decoded and encoded once per key
            (keys arrive contiguously and in order, so the key's state is then done)."""
            if self.buffer:
                assert self.runner is not None and self.current is not None
                kv, buffered, self.buffer = self.current, self.buffer, []
                fields = self.fields
                rows = [dict(zip(fields, r)) for r in buffered]  # a fresh dict per event, once per key
                state = MemoryKeyState()
                binding = memory_binding(state, lambda: self.now_ms, None)
                key = user_key(kv, bool(self.keys))
                runner = self.runner
                for out in runner.process_key(key, rows, binding, self.now_ms):
                    yield (*kv, *out)
                # end of input for this key: timers still due fire now, in timestamp order
                # (Flink's batch rule); a timer registered by on_timer fires too
                for t in pop_due(state.timers, None, lambda: runner.naming(key)):
                    for out in runner.fire_timer(key, t, binding, self.now_ms, t):
                        yield (*kv, *out)

        def eval(self, row: Any, key: str | None = None, order_by: str | None = None) -> Iterator[tuple]:
            if self.runner is None:
                self._setup(row, key, order_by)
            i = self.one_key
            kv = (row[i],) if i is not None else tuple(row[j] for j in self.key_at)
            if kv != self.current:
                if self.buffer:
                    yield from self._flush()
                self.current = kv
            self.buffer.append(tuple(row))

        def terminate(self) -> Iterator[tuple]:
            yield from self._flush()
            if self.runner is not None:
                self.runner.close()

    KeyedTableFunction.__name__ = f"KeyedTableFunction_{fn}"
    KeyedTableFunction.__qualname__ = KeyedTableFunction.__name__
    return KeyedTableFunction

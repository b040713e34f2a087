"""Engine ``tws``: Spark's row-based ``transformWithState`` with the RocksDB state store.

Attribute state of a StatefulFunction is one ValueState ``attributes`` (a struct, one field
per attribute: typed or JSON-encoded), read once and written once per key per batch. The
typed state of a KeyedProcessor maps one to one onto Spark ValueState/ListState/MapState, so
Spark's own ``statestore`` reader sees them (``layout.py``).
"""

from __future__ import annotations

import dataclasses

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.errors import SchemaError
from ...runtime.plan import KeyedPlan
from ..base import Capabilities, Engine, output_schema
from .layout import TwsLayout
from .processor import KeyedStatefulProcessor

__all__ = ["TransformWithStateEngine", "UNKEYED_COLUMN"]

UNKEYED_COLUMN = "__ks_unkeyed__"  # the one group of an unkeyed query


class TransformWithStateEngine(Engine):
    name = "tws"
    capabilities = Capabilities(
        streams_as_dataframe=True,
        streams_on_connect=True,
        nested_streaming_steps=True,
    )
    layout = TwsLayout()

    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        streaming = df.isStreaming
        if not streaming and plan.spec.has_timers:
            raise SchemaError(
                f"function '{plan.spec.name}' uses timers, and engine 'tws' (transformWithState) has no timers in a "
                "batch query; the engine choice picks one that fires them at end of input"
            )
        schema = output_schema(df.schema, plan)
        # TTL is applied by the runner's binding; only timers need a Spark time mode, and Spark
        # allows one per operator: event time when the query names one, else processing time
        needs_time = streaming and plan.spec.has_timers
        time_mode = ("EventTime" if plan.event_time else "ProcessingTime") if needs_time else "None"
        source = df
        if streaming and plan.event_time is not None:
            # late rows (older than the previous batch's watermark) are dropped by Spark
            source = source.withWatermark(plan.event_time, f"{plan.watermark_ms or 0} milliseconds")
        group_cols = list(plan.key_columns)
        if not plan.keyed:
            source = df.withColumn(UNKEYED_COLUMN, F.lit(0))
            group_cols = [UNKEYED_COLUMN]
        initial = None
        if plan.initial_state is not None:
            initial = plan.initial_state.groupBy(*group_cols)
        # timestamps travel as epoch microseconds (the processor turns them back), except the
        # keys (the state's key schema) and the event time (Spark's watermark reads it)
        stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)]
        ts_columns = [c for c in stamps if c not in group_cols and c != plan.event_time]
        aware = [c for c in stamps if c == plan.event_time or c in group_cols]
        # the processor is pickled to executors: it must not carry the initial-state DataFrame
        shipped = dataclasses.replace(plan, initial_state=None)
        proc = KeyedStatefulProcessor(shipped, time_mode, [f.name for f in schema.fields], ts_columns, aware)
        if ts_columns:
            source = source.select(*[F.unix_micros(F.col(c)).alias(c) if c in ts_columns else F.col(c) for c in source.columns])
        return source.groupBy(*group_cols).transformWithState(proc, schema, plan.output_mode, time_mode, initial)

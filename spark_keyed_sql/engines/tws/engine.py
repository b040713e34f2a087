"""Engine ``tws``: Spark's row-based ``transformWithState`` with the RocksDB state store.

A key's rows cross the operator in chunks (``chunks.py``), except in a stream with an event
time, where Spark's watermark needs every row's event time.

Attribute state of a StatefulFunction is one ValueState ``attributes`` (a struct, one field
per attribute: typed or JSON-encoded), read once and written once per key per batch. The
typed state of a KeyedProcessor maps one to one onto Spark ValueState/ListState/MapState, so
Spark's own ``statestore`` reader sees them (``layout.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...api.errors import SchemaError
from ...compat.features import Feature, features
from ...compat.names import named
from ...compat.quirks import ensure_state_store_coordinator
from ...runtime.connect import is_connect
from ...runtime.plan import KeyedPlan
from ..base import Capabilities, Engine, StreamJob, StreamRun, output_schema
from ..broadcast_rows import take_broadcasts
from ..dataframe_stream import DataFrameStreamRun
from ..settings import TWS_STREAM_DEFAULTS, TWS_STREAM_SETTINGS
from .chunks import CHUNK_COLUMN, ROWS_COLUMN, ChunkFormat, ChunkPacker, ChunkUnpacker, chunk_schema, column_kinds
from .layout import TwsLayout
from .touches import KeyTouches

__all__ = ["TransformWithStateEngine", "UNKEYED_COLUMN", "watermarked"]

log = logging.getLogger(__name__)

UNKEYED_COLUMN = "__ks_unkeyed__"  # the one group of an unkeyed query
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


def watermarked(df: DataFrame, plan: KeyedPlan, event_time: str) -> DataFrame:
    """``df`` with the plan's watermark on ``event_time``. Several inputs: one watermark per
    input (a branch per input index, unioned), so Spark's rule for several watermarked sources
    (``spark.sql.streaming.multipleWatermarkPolicy``, the minimum by default) makes the query's
    one watermark, as the bulk engine does (engines/bulk/watermarks.py)."""
    delay = f"{plan.watermark_ms or 0} milliseconds"
    if not plan.watermarked_inputs or plan.input_column is None:
        return df.withWatermark(event_time, delay)
    # each branch reads every source (the stream's numInputRows counts each read: StreamJob.input_scans)
    which = F.col(plan.input_column)
    branches = [df.filter(which == i).withWatermark(event_time, delay) for i in range(plan.watermarked_inputs)]
    out = branches[0]
    for b in branches[1:]:
        out = out.union(b)
    return out


EVENT_INSTANT = "__ks_et_instant"


def _instant_event_time(df: DataFrame, plan: KeyedPlan) -> tuple[DataFrame, KeyedPlan]:
    """A ``TIMESTAMP_NTZ`` event time (pandas' naive datetimes written to Parquet read so),
    which Spark's watermark refuses: the watermark and the timers run on a ``TIMESTAMP`` column
    beside it holding its wall clock as UTC, as the bulk engine reads a naive time; the column
    itself goes to the function unchanged."""
    zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    # the cast places the wall clock in the session's zone; from_utc_timestamp reads that
    # instant's wall clock there and places it in UTC (to_utc_timestamp would move it twice)
    instant = F.from_utc_timestamp(F.col(plan.event_time).cast("timestamp"), zone)
    return df.withColumn(EVENT_INSTANT, instant), dataclasses.replace(plan, event_time=EVENT_INSTANT)


class TransformWithStateEngine(Engine):
    name = "tws"
    requires = Feature.TRANSFORM_WITH_STATE
    capabilities = Capabilities(
        streams_as_dataframe=True,
        nested_streaming_steps=True,
        keeps_state_names=True,
    )
    layout = TwsLayout()
    # Avro state encoding for a new checkpoint (an existing one keeps the encoding it has)
    stream_conf = TWS_STREAM_SETTINGS
    # RocksDB changelogs: Spark's change feed then tells a DELETE's audit the batches that changed a key
    stream_defaults = TWS_STREAM_DEFAULTS

    def start_stream(self, job: StreamJob) -> StreamRun:
        return DataFrameStreamRun.start(job, conf=self.stream_settings(job.spark))

    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        provider = df.sparkSession.conf.get(PROVIDER_CONF, None) or ""
        if "RocksDB" not in provider:
            raise SchemaError(
                f"engine 'tws' (transformWithState) needs the RocksDB state store: {PROVIDER_CONF} = "
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider (the session has "
                f"{provider!r}; KeyedSQL(spark) sets it unless given configure=False)"
            )
        streaming = df.isStreaming
        if streaming:  # (set on the step's plan: the run reads it; Spark Connect has no accumulators)
            spark = df.sparkSession
            plan.key_touches = KeyTouches(
                None if is_connect(spark) else spark.sparkContext.accumulator(0), plan.spec.has_timers
            )
        if not streaming:
            ensure_state_store_coordinator(df.sparkSession)
        if not streaming and plan.spec.has_timers:
            raise SchemaError(
                f"function '{plan.spec.name}' uses timers, and engine 'tws' (transformWithState) has no timers in a "
                "batch query; the engine choice picks one that fires them at end of input"
            )
        schema = output_schema(df.schema, plan)
        if streaming and plan.event_time and isinstance(df.schema[plan.event_time].dataType, T.TimestampNTZType):
            df, plan = _instant_event_time(df, plan)
        if plan.broadcasts:  # (a one-shot batch: a stream with broadcast inputs is refused when planned)
            df, plan, _ = take_broadcasts(df, plan)
        # TTL is applied by the runner's binding; timers need a Spark time mode, and Spark allows
        # one per operator: event time when the query names one, else processing time. A stream
        # with an event time runs in event time even without timers: only then does Spark's
        # operator drop late rows (as the bulk engine does)
        needs_time = streaming and (plan.spec.has_timers or plan.event_time is not None)
        time_mode = ("EventTime" if plan.event_time else "ProcessingTime") if needs_time else "None"
        log.info(
            "function %s on engine 'tws': Spark's transformWithState over a %s source, time mode %s%s",
            plan.spec.name,
            "streaming" if streaming else "batch",
            time_mode,
            ", seeded from INITIAL STATE" if plan.initial_state is not None else "",
        )
        source = df
        group_cols = list(plan.key_columns)
        if not plan.keyed:
            source = source.withColumn(UNKEYED_COLUMN, F.lit(0))
            group_cols = [UNKEYED_COLUMN]
        # the processor is pickled to executors: it must not carry the initial-state DataFrame
        shipped = dataclasses.replace(plan, initial_state=None)
        event_time = plan.event_time if streaming else None
        if not features(df.sparkSession).has(Feature.TRANSFORM_WITH_STATE_ROWS):
            return self._pandas(source, group_cols, plan, shipped, schema, time_mode, event_time)
        if event_time is not None:
            # late rows (older than the previous batch's watermark) are dropped by Spark
            source = watermarked(source, plan, event_time)
        initial = None
        if plan.initial_state is not None:
            initial = plan.initial_state.groupBy(*map(named, group_cols))
        names = [f.name for f in schema.fields]
        if event_time is None:
            return self._chunked(source, group_cols, plan, shipped, schema, time_mode, initial)
        # timestamps travel as epoch microseconds (the processor turns them back), except the
        # keys (the state's key schema) and the event time (Spark's watermark reads it)
        stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)]
        ts_columns = [c for c in stamps if c not in group_cols and c != plan.event_time]
        aware = [c for c in stamps if c == plan.event_time or c in group_cols]
        from .processor import KeyedStatefulProcessor

        proc = KeyedStatefulProcessor(shipped, time_mode, names, ts_columns, aware)
        if ts_columns:
            source = source.select(
                *[F.unix_micros(named(c)).alias(c) if c in ts_columns else named(c) for c in source.columns]
            )
        return source.groupBy(*map(named, group_cols)).transformWithState(
            proc, schema, plan.output_mode, time_mode, initial
        )

    @staticmethod
    def _formats(
        source: DataFrame, group_cols: list[str], plan: KeyedPlan, schema: T.StructType
    ) -> tuple[list[str], ChunkFormat]:
        """The chunk columns (every source column but the keys) and what the processor reads
        and writes of them: timestamps and dates travel as integers, and only what user code
        sees is turned back (arguments); ORDER BY and pass-through columns stay integers."""
        values = [c for c in source.columns if c not in group_cols]
        n_keys = len(plan.key_columns) if plan.keyed else 0
        seen = set(plan.arg_columns)
        kinds = [
            k if c in seen else None for c, k in zip(values, column_kinds([source.schema[c].dataType for c in values]))
        ]
        out_fields = schema.fields[n_keys:]
        n_returns = len(out_fields) - len(plan.passthrough)
        out_kinds = column_kinds([f.dataType for f in out_fields])
        out_kinds[n_returns:] = [k if c in seen else None for c, k in zip(plan.passthrough, out_kinds[n_returns:])]
        return values, ChunkFormat(values, kinds, out_kinds)

    def _pandas(
        self,
        source: DataFrame,
        group_cols: list[str],
        plan: KeyedPlan,
        shipped: KeyedPlan,
        schema: T.StructType,
        time_mode: str,
        event_time: str | None,
    ) -> DataFrame:
        """Spark 4.0: transformWithStateInPandas, always chunked (pandas_processor.py). With an
        event time, a chunk per row and the event-time column beside it, watermarked after the
        packing (the watermark must sit on the column the operator sees)."""
        from .pandas_processor import PandasKeyedStatefulProcessor

        values, fmt = self._formats(source, group_cols, plan, schema)
        keep = [event_time] if event_time is not None else []
        if keep and plan.watermarked_inputs and plan.input_column:  # a watermark per input (watermarked())
            keep.append(plan.input_column)
        packed = chunk_schema([source.schema[c] for c in [*group_cols, *keep]], CHUNK_COLUMN)
        chunks = source.mapInArrow(ChunkPacker(group_cols, values, packed, keep=keep, per_row=bool(keep)), packed)
        if event_time is not None:
            chunks = watermarked(chunks, plan, event_time)
        initial, initial_fmt = None, None
        if plan.initial_state is not None:
            init_df = plan.initial_state
            init_values = [c for c in init_df.columns if c not in group_cols]
            init_schema = chunk_schema([init_df.schema[c] for c in group_cols], CHUNK_COLUMN)
            kinds = column_kinds([init_df.schema[c].dataType for c in init_values])
            initial_fmt = ChunkFormat(init_values, kinds, [])
            initial = init_df.mapInArrow(ChunkPacker(group_cols, init_values, init_schema), init_schema).groupBy(
                *map(named, group_cols)
            )
        n_keys = len(plan.key_columns) if plan.keyed else 0
        returned = chunk_schema(list(schema.fields[:n_keys]), ROWS_COLUMN)
        proc = PandasKeyedStatefulProcessor(shipped, time_mode, [f.name for f in returned.fields], fmt, initial_fmt)
        out = chunks.groupBy(*map(named, group_cols)).transformWithStateInPandas(
            proc, returned, plan.output_mode, time_mode, initial
        )
        return out.mapInArrow(ChunkUnpacker(n_keys, schema), schema)

    @staticmethod
    def _chunked(
        source: DataFrame,
        group_cols: list[str],
        plan: KeyedPlan,
        shipped: KeyedPlan,
        schema: T.StructType,
        time_mode: str,
        initial: Any,
    ) -> DataFrame:
        """The chunked transport (chunks.py): a key's rows of a partition go through the operator
        as one row, and its output comes back as one. Not for a stream with an event time: Spark's
        watermark and late-row filter read the event-time column of each input row."""
        values, fmt = TransformWithStateEngine._formats(source, group_cols, plan, schema)
        packed = chunk_schema([source.schema[c] for c in group_cols], CHUNK_COLUMN)
        n_keys = len(plan.key_columns) if plan.keyed else 0
        returned = chunk_schema(list(schema.fields[:n_keys]), ROWS_COLUMN)
        from .processor import KeyedStatefulProcessor

        proc = KeyedStatefulProcessor(shipped, time_mode, [f.name for f in returned.fields], [], [], chunks=fmt)
        chunks = source.mapInArrow(ChunkPacker(group_cols, values, packed), packed)
        out = chunks.groupBy(*map(named, group_cols)).transformWithState(
            proc, returned, plan.output_mode, time_mode, initial
        )
        return out.mapInArrow(ChunkUnpacker(n_keys, schema), schema)

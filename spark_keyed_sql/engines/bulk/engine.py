"""Engine ``bulk``: many keys per Python call (``mapInArrow`` over key-sorted partitions).

A one-shot batch is one pass (``program.py``); a stream runs per micro-batch through
``foreachBatch`` with state in versioned Parquet snapshots in the checkpoint (``stream.py``,
``layout.py``), so it has no streaming DataFrame to return.
"""

from __future__ import annotations

import dataclasses

from pyspark.sql import DataFrame

from ...api.errors import SchemaError
from ...runtime.clock import now_ms
from ...runtime.plan import KeyedPlan
from ..base import Capabilities, Engine, StreamJob, StreamRun, output_schema
from ..broadcast_rows import take_broadcasts
from .layout import BulkLayout
from .program import BulkProgram, combine, hash_ordered
from .stream import BulkStreamRun

__all__ = ["BulkEngine"]


class BulkEngine(Engine):
    name = "bulk"
    capabilities = Capabilities(
        streams_per_batch=True,
        batch_timers=True,
        ordered_stream_output=True,
        migration_target=True,
        broadcast_streams=True,
        native_streams=True,
    )
    layout = BulkLayout()

    def apply(self, df: DataFrame, plan: KeyedPlan) -> DataFrame:
        if df.isStreaming:
            raise SchemaError(
                f"engine {self.name!r} runs streams per micro-batch and has no streaming DataFrame to return; "
                "use engine='tws' with ks.apply, or a SQL statement with ks.start / ks.run"
            )
        schema = output_schema(df.schema, plan)
        if plan.broadcasts:  # the broadcast rows to the driver, their state into the program
            df, plan, _ = take_broadcasts(df, plan)
        shipped = dataclasses.replace(plan, initial_state=None)
        # a one-shot batch has a processing time too (the query's, as Spark's batch has one):
        # current_processing_time() and processing-time timers work as they do in the tester
        program = BulkProgram(
            shipped,
            schema,
            now_ms=now_ms(plan.clock_offset_ms),
            has_initial=plan.initial_state is not None,
            hashed=hash_ordered(df, plan, plan.initial_state),
        )
        return combine(df, plan, plan.initial_state).mapInArrow(program, schema)

    def start_stream(self, job: StreamJob) -> StreamRun:
        return BulkStreamRun.start(job)

"""A bulk stream, run: Spark's ``foreachBatch`` over the keyed step's source, each micro-batch
a :class:`~spark_keyed_sql.engines.bulk.step.BulkStream` step (on a Connect server, a
:class:`~spark_keyed_sql.engines.bulk.server_step.ServerStep`), the timer pump beside it; the
run's summary and metrics read back from the commit records. What a step does is in step.py."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from pyspark.sql import DataFrame

from ...api.intervals import parse_interval_ms
from ...runtime.connect import is_connect
from ...runtime.plan import KeyedPlan
from ...state.commit_record import CommitRecord
from ...state.fs import temp_dir
from ..background import fail_query
from ..base import StreamJob, StreamRun
from ..streams import configure_writer, not_a_stream, wait_until_done
from .compaction import COMPACT_DELTAS, COMPACT_DELTAS_CONF, COMPACT_MIN_ROWS
from .server_step import ServerStep
from .step import LOCAL_STATE_DIR_CONF, BulkStream

__all__ = [
    "COMPACT_DELTAS",
    "COMPACT_DELTAS_CONF",
    "COMPACT_MIN_ROWS",
    "LOCAL_STATE_DIR_CONF",
    "BulkStreamRun",
    "FinalSQL",
]


@dataclass(frozen=True)
class FinalSQL:
    """The statement's outer SQL over one batch's keyed output (``view`` the name it reads the
    output by): what the sink receives."""

    view: str
    columns: list[str]
    final_sql: str

    def __call__(self, out: DataFrame) -> DataFrame:
        out.selectExpr(*self.columns).createOrReplaceTempView(self.view)
        return out.sparkSession.sql(self.final_sql)


def _idle_steps(plan: KeyedPlan) -> bool:
    """Does a stream of ``plan`` need steps without input (Spark's no-data batches): timers to
    fire, state to expire, a watermark to advance?"""
    return plan.spec.has_timers or plan.spec.has_ttl or plan.event_time is not None


class BulkStreamRun(StreamRun):
    """A bulk stream: Spark's ``foreachBatch`` over the keyed step's source, each micro-batch a
    :class:`BulkStream` step; ks.run's summary and the metrics come from the commit records."""

    def __init__(self, job: StreamJob, query: Any, stream: BulkStream, version_before: int):
        self.job, self.query, self.stream, self.version_before = job, query, stream, version_before
        self.reported = version_before  # the last commit the progress callback got

    @classmethod
    def start(cls, job: StreamJob) -> BulkStreamRun:
        if job.source is None or not job.source.isStreaming:
            raise not_a_stream(job)
        assert job.plan is not None and job.view is not None
        checkpoint = job.checkpoint or temp_dir("spark-keyed-sql-checkpoint-")
        view, columns, final_sql = job.view, list(job.columns), job.final_sql

        finish = FinalSQL(view, list(columns), final_sql)
        stream = BulkStream(
            job.spark,
            job.plan,
            job.source.schema,
            checkpoint,
            job.sink,
            finish,
            job.plan.spec.name,
            on_commit=None,  # (ks.run's progress callback runs on the caller's thread: wait())
            native=job.native,
        ).prepare()
        latest = stream.store.latest()
        pump_s = None
        if not job.available_now and _idle_steps(job.plan):
            pump_s = parse_interval_ms(job.trigger) / 1000 if job.trigger else 1.0
        batch_fn: Any = stream
        if is_connect(job.spark):  # foreachBatch runs on the server: the step goes there
            batch_fn = ServerStep(stream, job.spark.session_id, pump_s, stream.edit_poll_s())
        query = configure_writer(job.source.writeStream.foreachBatch(batch_fn), job, checkpoint).start()
        if batch_fn is stream:
            if pump_s is not None:
                stream.pump_timers(pump_s, lambda: query.isActive, lambda exc, what: fail_query(query, exc, what))
            stream.poll_edits(stream.edit_poll_s(), lambda: query.isActive and not stream.closed)
        return cls(job, query, stream, -1 if latest is None else latest.version)

    def wait(self) -> None:
        # the progress callback runs here, on the caller's thread, not inside Spark's batch: what it
        # raises (or an interrupt) leaves ks.run, which stops the query, rather than failing a batch
        poll = self._report_commits if self.job.progress is not None else None
        try:
            wait_until_done(self.query, poll)
            if poll is not None:
                poll()  # the batches committed since the last look
            if self.job.plan is not None and _idle_steps(self.job.plan):
                self.stream.flush_timers()  # Spark's no-data batch: timers due by the last watermark fire
                if poll is not None:
                    poll()  # (the flush's own commit)
        finally:
            self.stream.compactor.join()  # a compaction the run started finishes before it returns
        self.stream.compactor.check(finished=True)

    def close(self) -> None:
        self.stream.close()

    def settle(self) -> None:
        # the pump fires timers a moment later; processAllAvailable() returns with them fired
        # (on Connect the step and its pump run on the server)
        if self.job.plan is not None and _idle_steps(self.job.plan) and not is_connect(self.job.spark):
            self.stream.flush_timers()

    def _report_commits(self) -> None:
        """Each commit since the last look to the progress callback, in order: those this
        process made, and on Spark Connect (whose batches commit on the server) those read back
        from the checkpoint."""
        assert self.job.progress is not None
        if is_connect(self.job.spark):
            commits = self._new_commits()
        else:
            commits = sorted(self.stream.committed, key=attrgetter("version"))  # (reported: from version_before)
        for c in commits:
            if c.version > self.reported:
                self.reported = c.version
                self.job.progress(c.progress())

    def _new_commits(self) -> list[CommitRecord]:
        """The versions committed since the run started: those this process committed (an edit
        between batches removes the commits before it from the checkpoint) and those listed now
        (a Connect server's)."""
        by_version = {c.version: c for c in self.stream.committed}
        by_version.update({c.version: c for c in self.stream.store.commits() if c.version > self.version_before})
        return [by_version[v] for v in sorted(by_version)]

    def summary(self) -> dict[str, Any]:
        new = self._new_commits()
        return {
            "batches": sum(1 for c in new if c.metrics.input_rows),
            "input_rows": sum(c.metrics.input_rows for c in new),
            "output_rows": sum(c.metrics.output_rows or 0 for c in new),
            "keys_touched": sum(c.metrics.keys_touched for c in new),
            "late_rows": sum(c.metrics.late_rows for c in new),
            "metrics": self.metrics(),
        }

    def metrics(self) -> list[dict[str, Any]]:
        return [
            {
                "batch_id": c.version,
                "function": c.function,
                "state_rows": c.state_rows,
                "rows_updated": c.metrics.keys_touched,
                "state_bytes": c.state_bytes,
                "native": c.metrics.native,  # the batch ran as the step's native plan
            }
            for c in self._new_commits()
        ]

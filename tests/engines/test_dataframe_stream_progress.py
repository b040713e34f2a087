"""A ks.run on a Spark-run stream (engine tws) reports every batch to its progress callback and
counts every batch in its summary, however many: Spark's ``recentProgress`` keeps only the last
100, so the run keeps what it polled (here a stand-in query whose buffer keeps the last 3)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from spark_keyed_sql.engines.dataframe_stream import DataFrameStreamRun


class _Progress:
    def __init__(self, d):
        self.json = json.dumps(d)


class _Query:
    """Runs ``batches`` batches, ``per_poll`` between two looks, keeping the last ``keep``."""

    id = "q-test"

    def __init__(self, batches: int, per_poll: int, keep: int = 3):
        self.done, self.total, self.per_poll, self.keep = 0, batches, per_poll, keep
        self.recentProgress: list[_Progress] = []

    @property
    def isActive(self) -> bool:
        return self.done < self.total

    def awaitTermination(self, timeout=None):
        for _ in range(self.per_poll):
            if self.done < self.total:
                b = self.done
                op = {"operatorName": "transformWithStateExec", "numRowsTotal": b, "numRowsUpdated": 1}
                self.recentProgress.append(_Progress({"batchId": b, "numInputRows": b + 1, "stateOperators": [op]}))
                self.done += 1
        self.recentProgress = self.recentProgress[-self.keep :]

    def exception(self):
        return None


def test_every_batch_reaches_the_callback_once_and_in_order_beyond_sparks_buffer():
    seen = []
    job = SimpleNamespace(
        progress=seen.append, input_scans=1, key_touches=[], has_timers=False, processing_timers=False
    )
    run = DataFrameStreamRun(job, _Query(batches=12, per_poll=2), rows_before=0, functions=["f"])
    run.wait()
    assert [p["batch_id"] for p in seen] == list(range(12))
    assert [p["input_rows"] for p in seen] == [b + 1 for b in range(12)]
    assert sorted(run.batches) == list(range(12))
    assert sum(p["numInputRows"] for p in run._progress()) == sum(b + 1 for b in range(12))
    assert [m["batch_id"] for m in run.metrics()] == list(range(12))  # (ks.run's summary "metrics")

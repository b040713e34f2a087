"""The benchmark's workloads, each as the classes our paths run and the hand-written PySpark
equivalents it is measured against. Every path of a workload produces the same rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

try:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
except ImportError:  # Spark 3.5: no transformWithState; its hand-written paths are not run there
    StatefulProcessor = object  # type: ignore[assignment,misc]
    StatefulProcessorHandle = object  # type: ignore[assignment,misc]

from spark_keyed_sql import KeyedProcessor, StatefulFunction

__all__ = [
    "Counter",
    "Aggregate",
    "AggregateColumns",
    "Sessions",
    "GAP",
    "counter_apply_in_pandas_with_state",
    "aggregate_apply_in_pandas_with_state",
    "digest",
]


def digest(df: DataFrame) -> tuple[int, int]:
    """Row count and a sum of row hashes (doubles rounded to 6 places): what says two paths gave
    the same rows, taken apart from their timing."""
    cols = [
        F.round(F.col(f.name), 6).alias(f.name) if f.dataType.simpleString() == "double" else F.col(f.name)
        for f in df.schema.fields
    ]
    r = (
        df.select(*cols)
        .agg(F.count(F.lit(1)), F.sum(F.hash(*[F.col(f.name) for f in df.schema.fields]).cast("decimal(38,0)")))
        .collect()[0]
    )
    return int(r[0]), int(r[1] or 0)


GAP = dt.timedelta(minutes=30)


# ---------------------------------------------------------------- W1: SAGE per-key counter
class Counter(StatefulFunction):
    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, row):
        self.n += 1
        self.total += row["value"]
        return [(self.n, self.total)]


class CounterTWSRows(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("s", "n long, total double")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        n, total = self.state.get() if self.state.exists() else (0, 0.0)
        for r in sorted(rows, key=lambda r: r.ts):
            n += 1
            total += r.value
            yield Row(user_id=key[0], ts=r.ts.replace(tzinfo=None) if r.ts.tzinfo is None else r.ts, n=n, total=total)
        self.state.update((n, total))

    def close(self) -> None:
        pass


class CounterTWSPandas(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("s", "n long, total double")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        n, total = self.state.get() if self.state.exists() else (0, 0.0)
        for pdf in rows:
            pdf = pdf.sort_values("ts")
            ns = n + pd.Series(range(1, len(pdf) + 1), index=pdf.index)
            totals = total + pdf["value"].cumsum()
            n, total = int(ns.iloc[-1]), float(totals.iloc[-1])
            yield pd.DataFrame({"user_id": key[0], "ts": pdf["ts"], "n": ns, "total": totals})
        self.state.update((n, total))

    def close(self) -> None:
        pass


def counter_apply_in_pandas_with_state(key, pdfs, state) -> Iterator[pd.DataFrame]:
    """W1 hand-written for applyInPandasWithState (one call per key, pandas per group)."""
    n, total = state.get if state.exists else (0, 0.0)
    pdf = pd.concat(list(pdfs)).sort_values("ts")
    ns = n + np.arange(1, len(pdf) + 1)
    totals = total + pdf["value"].cumsum().to_numpy()
    state.update((int(ns[-1]), float(totals[-1])))
    yield pd.DataFrame({"user_id": key[0], "ts": pdf["ts"].to_numpy(), "n": ns, "total": totals})


# ---------------------------------------------------------------- W2: per-key aggregate
class Aggregate(KeyedProcessor):
    returns = "n bigint, total double"

    def process(self, key, rows):
        return [(len(rows), float(rows["value"].sum()))]


class AggregateColumns(Aggregate):
    """W2's ``process``, unchanged, with ``rows_format = "numpy"``: ``rows["value"]`` is the
    key's column as a numpy array (no frame built, no Series, numpy's sum). The bench data has
    no NULLs, so numpy's sum and pandas' NaN-skipping sum agree."""

    rows_format = "numpy"


def aggregate_apply_in_pandas_with_state(key, pdfs, state) -> Iterator[pd.DataFrame]:
    """W2 hand-written for applyInPandasWithState."""
    n, total = 0, 0.0
    for pdf in pdfs:
        n += len(pdf)
        total += float(pdf["value"].sum())
    state.update((n, total))
    yield pd.DataFrame({"user_id": [key[0]], "n": [n], "total": [total]})


class AggregateTWSPandas(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        n, total = 0, 0.0
        for pdf in rows:
            n += len(pdf)
            total += float(pdf["value"].sum())
        yield pd.DataFrame({"user_id": [key[0]], "n": [n], "total": [total]})

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- W3: sessions, event-time timers
class Sessions(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.start = None
        self.last = None
        self.events = 0

    def _close(self):
        out = (self.start, self.events)
        self.start, self.last, self.events = None, None, 0
        return [out]

    def execute(self, e):
        out = []
        if self.last is not None:
            self.ctx.delete_timer(self.last + GAP)
            if e["ts"] - self.last >= GAP:
                out = self._close()
        if self.start is None:
            self.start = e["ts"]
        self.last = e["ts"]
        self.events += 1
        self.ctx.register_timer(self.last + GAP)
        return out

    def on_timer(self, key, timestamp):
        out = self._close()
        self.ctx.clear_state()
        return out

"""``make bench`` / ``make bench-quick``: every workload through every path, in one process, on
the same generated data; each path's rows are checked against native Spark SQL's before its
time counts. Writes BENCHMARKS.md (or --out).

A path is timed as one Spark action computing ``count(*)`` and ``sum(hash(row))`` of its full
output (doubles rounded to 6 places), so no path pays for writing files and every path's
output is compared on the same digest.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyspark  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from bench.workloads import (  # noqa: E402
    GAP,
    Aggregate,
    AggregateColumns,
    AggregateTWSPandas,
    Counter,
    CounterTWSPandas,
    CounterTWSRows,
    Sessions,
    aggregate_apply_in_pandas_with_state,
    counter_apply_in_pandas_with_state,
    digest,
)
from spark_keyed_sql import KeyedSQL, KeyedTester  # noqa: E402
from spark_keyed_sql.local import local_session  # noqa: E402

W1_OUT = "user_id string, ts timestamp, n bigint, total double"


SLOW_PATHS = {
    "ks.sql engine=tws",
    "table function in plain spark.sql (UDTF)",
    "plain UDTF PARTITION BY",
    "transformWithState rows (hand-written)",
    "transformWithStateInPandas (hand-written)",
    "applyInPandasWithState (hand-written)",
}


BUDGET = 600.0  # seconds; main() sets it from --budget


class OverBudget(Exception):
    pass


def to_noop(df: DataFrame) -> None:
    """The whole of ``df`` produced and dropped (Spark's ``noop`` sink)."""
    df.write.format("noop").mode("overwrite").save()


def alternate(paths: dict[str, Callable[[], DataFrame]], rounds: int) -> tuple[dict[str, list[float]], str]:
    """Each path's whole output to the ``noop`` sink: a warm-up of every path, then ``rounds``
    rounds of them in turn. Returns each path's times and those times as text."""
    for build in paths.values():  # warm-up
        to_noop(build())
    times: dict[str, list[float]] = {p: [] for p in paths}
    for _ in range(rounds):
        for p, build in paths.items():
            t0 = time.perf_counter()
            to_noop(build())
            times[p].append(time.perf_counter() - t0)
    return times, "; ".join(f"{p} {', '.join(f'{x:.2f}' for x in t)} s" for p, t in times.items())


def timed(spark: SparkSession, fn: Callable[[], Any], budget: float) -> tuple[float, Any]:
    """Run ``fn`` (which runs Spark jobs); cancel its jobs when over ``budget`` seconds."""
    group = f"bench-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "benchmark path", interruptOnCancel=True)
    timer = threading.Timer(budget, lambda: spark.sparkContext.cancelJobGroup(group))
    timer.start()
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception:  # noqa: BLE001 - a cancelled job surfaces as some Spark error
        if time.perf_counter() - t0 >= budget * 0.99:
            raise OverBudget(f"over the {budget:.0f} s budget") from None
        raise
    finally:
        timer.cancel()
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return time.perf_counter() - t0, out


def make_events(spark: SparkSession, keys: int, rows: int) -> DataFrame:
    df = spark.range(rows).select(
        F.concat(F.lit("u"), (F.col("id") % keys).cast("string")).alias("user_id"),
        # per key: one event per minute, with a 45-minute pause every 7th (sessions in W3)
        F.timestamp_seconds(
            F.lit(1_700_000_000) + (F.floor(F.col("id") / keys) * 60) + F.floor(F.col("id") / keys / 7) * 2700
        ).alias("ts"),
        ((F.col("id") * 7919) % 1000 / 10.0).alias("value"),
    )
    path = os.path.join(tempfile.gettempdir(), f"ks-bench-{keys}-{rows}")
    if not os.path.exists(path):
        df.repartition(4).write.parquet(path + ".tmp")
        os.replace(path + ".tmp", path)
    out = spark.read.parquet(path)
    out.createOrReplaceTempView("bench_events")
    return out


# ------------------------------------------------------------------ paths
def as_stream(spark: SparkSession, df: DataFrame, build: Callable[[DataFrame], DataFrame], budget: float) -> DataFrame:
    """For operators Spark allows only on streams (applyInPandasWithState): the same files read
    as a stream, one availableNow run into a Parquet directory, read back for the digest. The
    time includes writing and reading that output, which batch paths do not pay."""
    src = os.path.dirname(df.inputFiles()[0])
    out = tempfile.mkdtemp(prefix="ks-bench-stream-")
    stream = build(spark.readStream.schema(df.schema).parquet(src))
    # applyInPandasWithState refuses Avro state encoding, which the session holds once a
    # streaming DataFrame of engine tws was handed out (KeyedSQL.sql / apply)
    key = "spark.sql.streaming.stateStore.encodingFormat"
    before = spark.conf.get(key)
    spark.conf.set(key, "unsaferow")
    try:
        q = (
            stream.writeStream.format("parquet")
            .option("path", f"{out}/data")
            .option("checkpointLocation", f"{out}/cp")
            .trigger(availableNow=True)
            .start()
        )
    finally:
        spark.conf.set(key, before)
    if not q.awaitTermination(budget):
        q.stop()
        raise OverBudget(f"over the {budget:.0f} s budget")
    return spark.read.parquet(f"{out}/data")


def floor_pass(batches):
    """W1 hand-written over key-sorted Arrow batches: the counter's state in two locals."""
    import pyarrow as pa

    cur, n, total = None, 0, 0.0
    for b in batches:
        users, vals = b.column("user_id").to_pylist(), b.column("value").to_pylist()
        on, ot = [], []
        for u, v in zip(users, vals):
            if u != cur:
                cur, n, total = u, 0, 0.0
            n += 1
            total += v
            on.append(n)
            ot.append(total)
        yield pa.RecordBatch.from_arrays(
            [b.column("user_id"), b.column("ts"), pa.array(on, pa.int64()), pa.array(ot, pa.float64())],
            names=["user_id", "ts", "n", "total"],
        )


def floor_counter(df: DataFrame) -> DataFrame:
    """The practical Python floor: mapInArrow over key-sorted partitions (``floor_pass``)."""
    return df.repartition("user_id").sortWithinPartitions("user_id", "ts").mapInArrow(floor_pass, W1_OUT)


def floor_aggregate(df: DataFrame) -> DataFrame:
    def fn(batches):
        import pyarrow as pa

        acc: dict[str, list] = {}
        for b in batches:
            for u, v in zip(b.column("user_id").to_pylist(), b.column("value").to_pylist()):
                a = acc.get(u)
                if a is None:
                    acc[u] = [1, v]
                else:
                    a[0] += 1
                    a[1] += v
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(list(acc), pa.string()),
                pa.array([a[0] for a in acc.values()], pa.int64()),
                pa.array([a[1] for a in acc.values()], pa.float64()),
            ],
            names=["user_id", "n", "total"],
        )

    return df.repartition("user_id").mapInArrow(fn, "user_id string, n bigint, total double")


def pandas_per_key(df: DataFrame) -> DataFrame:
    """What handing each key a pandas DataFrame costs with nothing else around it: mapInArrow
    over key-sorted partitions, one frame per Arrow batch, each key's rows as ``iloc`` of it,
    and W2's own ``len(rows)`` and ``rows["value"].sum()`` (the floor of any path whose
    contract is a pandas frame per key)."""

    def fn(batches):
        import numpy as np
        import pyarrow as pa

        users, ns, totals = [], [], []
        pending = None

        def run(table, upto):
            part = table.slice(0, upto)
            pdf = part.select(["value"]).to_pandas()  # the frame holds the call's arguments
            keys = part.column("user_id").to_numpy(zero_copy_only=False)
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
            ends = np.r_[starts[1:], len(keys)]
            for s, e in zip(starts.tolist(), ends.tolist()):
                rows = pdf.iloc[s:e]
                users.append(keys[s])
                ns.append(len(rows))
                totals.append(float(rows["value"].sum()))

        for b in batches:
            t = (
                pa.Table.from_batches([b])
                if pending is None
                else pa.concat_tables([pending, pa.Table.from_batches([b])])
            )
            keys = t.column("user_id").to_numpy(zero_copy_only=False)
            last = int(np.flatnonzero(keys != keys[-1])[-1]) + 1 if (keys != keys[-1]).any() else 0
            if last:
                run(t, last)
            pending = t.slice(last)
            if len(users) >= 10_000:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(users, pa.string()), pa.array(ns, pa.int64()), pa.array(totals, pa.float64())],
                    names=["user_id", "n", "total"],
                )
                users, ns, totals = [], [], []
        if pending is not None and pending.num_rows:
            run(pending, pending.num_rows)
        yield pa.RecordBatch.from_arrays(
            [pa.array(users, pa.string()), pa.array(ns, pa.int64()), pa.array(totals, pa.float64())],
            names=["user_id", "n", "total"],
        )

    return (
        df.repartition("user_id")
        .sortWithinPartitions("user_id")
        .mapInArrow(fn, "user_id string, n bigint, total double")
    )


def plain_udtf(spark: SparkSession) -> DataFrame:
    from pyspark.sql.functions import udtf

    @udtf(returnType="user_id string, ts timestamp, n bigint, total double")
    class CounterUDTF:
        def __init__(self):
            self.n, self.total = 0, 0.0

        def eval(self, row):
            self.n += 1
            self.total += row["value"]
            yield row["user_id"], row["ts"], self.n, self.total

    spark.udtf.register("bench_plain_udtf", CounterUDTF)
    return spark.sql("SELECT * FROM bench_plain_udtf(TABLE(bench_events) PARTITION BY user_id ORDER BY ts)")


def tester_rows(rows: list[dict]) -> list[tuple]:
    """W1 through KeyedTester: each key's rows in ts order, output row i belongs to input row i."""
    t = KeyedTester(Counter, returns="n bigint, total double")
    by_key: dict[str, list[dict]] = {}
    for r in rows:
        by_key.setdefault(r["user_id"], []).append(r)
    out = []
    for k, rs in by_key.items():
        rs.sort(key=lambda r: r["ts"])
        out += [(k, r["ts"], *o.values()) for r, o in zip(rs, t.run(rs, key=k))]
    return out


def workloads(spark: SparkSession, ks: KeyedSQL, df: DataFrame) -> dict[str, dict[str, Callable[[], DataFrame]]]:
    w1_sql = (
        "SELECT user_id, ts, n, total FROM bench_events GROUP BY KEY user_id WITH STATE bench_counter(value) "
        "ORDER BY ts OPTIONS (engine = '{e}')"
    )
    w2_sql = (
        "SELECT user_id, n, total FROM bench_events GROUP BY KEY user_id WITH STATE bench_aggregate(value) "
        "OPTIONS (engine = '{e}')"
    )
    w3_sql = (
        "SELECT user_id, session_start, events FROM bench_events GROUP BY KEY user_id WITH STATE bench_sessions(ts) "
        "ORDER BY ts OPTIONS (engine = 'bulk')"
    )
    return {
        "W1 per-key counter (row out per row in)": {
            "native Spark SQL (window)": lambda: spark.sql(
                "SELECT user_id, ts, count(*) OVER w AS n, sum(value) OVER w AS total FROM bench_events "
                "WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS UNBOUNDED PRECEDING)"
            ),
            "mapInArrow floor (hand-written)": lambda: floor_counter(df),
            "ks.sql engine=bulk": lambda: ks.sql(w1_sql.format(e="bulk")),
            "ks.sql native plan": lambda: ks.sql(w1_sql.format(e="bulk").replace("engine = 'bulk'", "native = true")),
            "ks.sql engine=tws": lambda: ks.sql(w1_sql.format(e="tws")),
            "table function through ks.sql": lambda: ks.sql(
                "SELECT user_id, ts, n, total FROM bench_counter_ts(TABLE(bench_events), "
                "key => 'user_id', order_by => 'ts')"
            ),
            "table function in plain spark.sql (UDTF)": lambda: spark.sql(
                "SELECT user_id, ts, n, total FROM bench_counter_ts(TABLE(bench_events), "
                "key => 'user_id', order_by => 'ts')"
            ),
            "plain UDTF PARTITION BY": lambda: plain_udtf(spark),
            "transformWithState rows (hand-written)": lambda: df.groupBy("user_id").transformWithState(
                CounterTWSRows(), W1_OUT, "Append", "None"
            ),
            "transformWithStateInPandas (hand-written)": lambda: df.groupBy("user_id").transformWithStateInPandas(
                CounterTWSPandas(), W1_OUT, "Append", "None"
            ),
            "applyInPandasWithState (hand-written)": lambda: as_stream(
                spark,
                df,
                lambda s: s.groupBy("user_id").applyInPandasWithState(
                    counter_apply_in_pandas_with_state, W1_OUT, "n long, total double", "append", "NoTimeout"
                ),
                BUDGET,
            ),
            "KeyedTester (pure Python)": "tester:w1",
        },
        "W2 per-key aggregate (row out per key)": {
            "native Spark SQL (GROUP BY)": lambda: spark.sql(
                "SELECT user_id, count(*) AS n, sum(value) AS total FROM bench_events GROUP BY user_id"
            ),
            "mapInArrow floor (hand-written)": lambda: floor_aggregate(df),
            "ks.sql engine=bulk": lambda: ks.sql(w2_sql.format(e="bulk")),
            "mapInArrow + a pandas frame per key (hand-written)": lambda: pandas_per_key(df),
            "ks.sql engine=bulk, rows_format=numpy": lambda: ks.sql(
                w2_sql.replace("bench_aggregate", "bench_aggregate_np").format(e="bulk")
            ),
            "ks.sql engine=tws": lambda: ks.sql(w2_sql.format(e="tws")),
            "transformWithStateInPandas (hand-written)": lambda: df.groupBy("user_id").transformWithStateInPandas(
                AggregateTWSPandas(), "user_id string, n bigint, total double", "Append", "None"
            ),
            "applyInPandasWithState (hand-written)": lambda: as_stream(
                spark,
                df,
                lambda s: s.groupBy("user_id").applyInPandasWithState(
                    aggregate_apply_in_pandas_with_state,
                    "user_id string, n bigint, total double",
                    "n long, total double",
                    "append",
                    "NoTimeout",
                ),
                BUDGET,
            ),
        },
        "W3 sessions closed by event-time timers": {
            "native Spark SQL (session_window)": lambda: spark.sql(
                f"SELECT user_id, session_window.start AS session_start, count(*) AS events FROM bench_events "
                f"GROUP BY user_id, session_window(ts, '{int(GAP.total_seconds() // 60)} minutes')"
            ),
            "ks.sql engine=bulk": lambda: ks.sql(w3_sql),
            "table function through ks.sql": lambda: ks.sql(
                "SELECT * FROM bench_sessions(TABLE(bench_events), key => 'user_id', order_by => 'ts')"
            ),
            "table function in plain spark.sql (UDTF)": lambda: spark.sql(
                "SELECT * FROM bench_sessions(TABLE(bench_events), key => 'user_id', order_by => 'ts')"
            ),
        },
    }


class CounterTs(Counter):
    """W1 for the table-function form, which returns key + returns only: ts travels in returns."""

    def execute(self, row):
        self.n += 1
        self.total += row["value"]
        return [(row["ts"], self.n, self.total)]


CROSSOVER_SIZES = (1_000, 20_000, 200_000)


def stream_costs(spark: SparkSession, ks: KeyedSQL, keys: int, rows: int, engine: str, budget: float) -> dict[Any, Any]:
    """ks.run over ``rows`` events of ``keys`` keys (the first run fills the state), then one
    more run per size in CROSSOVER_SIZES adding that many rows: the time of a restart from a
    checkpoint holding every key, and how a run's cost grows with its input at fixed state."""
    d = tempfile.mkdtemp(prefix="ks-bench-restart-")
    out: dict[Any, Any] = {}
    try:
        data = os.path.join(tempfile.gettempdir(), f"ks-bench-{keys}-{rows}")
        flat = os.path.join(d, "flat")
        os.makedirs(flat)
        for f in os.listdir(data):
            if f.endswith(".parquet"):
                shutil.copy(os.path.join(data, f), os.path.join(flat, f))
        sql = (
            f"SELECT user_id, n, total FROM parquet.`{flat}` GROUP BY KEY user_id WITH STATE bench_counter(value) "
            f"ORDER BY ts OPTIONS (engine = '{engine}')"
        )
        run = lambda: ks.run(sql, checkpoint=os.path.join(d, "cp"), output=os.path.join(d, "out"))  # noqa: E731
        out["first"], _ = timed(spark, run, budget)
        for n in CROSSOVER_SIZES:
            more = os.path.join(d, f"more-{n}")
            spark.read.parquet(data).limit(n).write.parquet(more)
            for f in os.listdir(more):
                if f.endswith(".parquet"):
                    shutil.copy(os.path.join(more, f), os.path.join(flat, f"more-{n}-{f}"))
            out[n], _ = timed(spark, run, budget)
    except OverBudget as exc:
        out["error"] = str(exc)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


STATE_SIZES = (100_000, 1_000_000, 10_000_000)
GROWTH_ENGINES = ("bulk", "tws", "auto")
INCREMENT = 1_000


class MemorySampler:
    """The largest resident set (VmRSS) seen, every 0.2 s, of the driver JVM (in local mode also
    the executor) and of the Python workers, while it runs."""

    def __init__(self) -> None:
        self.peak = {"driver JVM": 0.0, "python workers (max)": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            for name, mib in rss_mb().items():
                self.peak[name] = max(self.peak[name], mib)


def rss_mb(field: str = "VmRSS") -> dict[str, float]:
    """Resident memory (``field``: VmRSS now, VmHWM the peak) of the driver JVM and of the largest
    Python worker alive now, in MiB."""
    out = {"driver JVM": 0.0, "python workers (max)": 0.0}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="ignore")
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        mib = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith(field)), 0.0)
        if "org.apache.spark.deploy.SparkSubmit" in cmd:
            out["driver JVM"] = max(out["driver JVM"], mib)
        elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            out["python workers (max)"] = max(out["python workers (max)"], mib)
    return out


def _state_sql(src: str, engine: str, max_files: int | None = None) -> str:
    options = ([] if engine == "auto" else [f"engine = '{engine}'"]) + (
        [f"max_files_per_trigger = {max_files}"] if max_files else []
    )
    opts = f" OPTIONS ({', '.join(options)})" if options else ""
    return (
        f"SELECT user_id, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE bench_counter(value) "
        f"ORDER BY ts{opts}"
    )


def _write_keys(spark: SparkSession, path: str, keys: int, rows: int, seed: int, files: int = 1) -> None:
    """``rows`` events over ``keys`` keys (one per key, in order, when rows == keys; else random keys)."""
    ids = F.col("id") if rows == keys else F.floor(F.rand(seed) * keys).cast("long")
    (
        spark.range(rows)
        .select(
            F.concat(F.lit("u"), ids.cast("string")).alias("user_id"),
            F.timestamp_seconds(F.lit(1_800_000_000 + seed * 1_000_000) + F.col("id")).alias("ts"),
            ((F.col("id") * 7919) % 1000 / 10.0).alias("value"),
        )
        .repartition(files)
        .write.mode("append")
        .parquet(path)
    )


def state_growth(spark: SparkSession, ks: KeyedSQL, sizes: tuple[int, ...], budget: float, tws_max: int) -> list[dict]:
    """One 1,000-row ks.run increment on a checkpoint holding ``n`` keys of state, per engine:
    the fill (one run over n rows, one per key) then the increment, timed and sampled for
    memory. tws is not filled above ``tws_max`` keys (its per-key round trips: the rate measured
    at the smaller sizes says how long)."""
    out = []
    for engine in GROWTH_ENGINES:
        rate = None
        for n in sizes:
            row: dict[str, Any] = {"engine": engine, "keys": n}
            out.append(row)
            if engine == "tws" and n > tws_max:
                row["note"] = (
                    f"not filled: at the measured {rate:,.0f} keys/s the fill would take ~{n / rate / 60:.0f} min"
                    if rate
                    else "not filled (per-key round trips)"
                )
                continue
            d = tempfile.mkdtemp(prefix="ks-bench-growth-")
            try:
                src, cp, res = os.path.join(d, "in"), os.path.join(d, "cp"), os.path.join(d, "out")
                _write_keys(spark, src, n, n, seed=1, files=8)
                sql = _state_sql(src, engine)
                print(f"[state growth] {engine} {n:,} keys: fill ...", flush=True)
                run = lambda q=sql, c=cp, o=res: ks.run(q, checkpoint=c, output=o)  # noqa: E731
                row["fill"], _ = timed(spark, run, budget)
                rate = n / row["fill"]
                _write_keys(spark, src, n, INCREMENT, seed=2)
                print(f"[state growth] {engine} {n:,} keys: +{INCREMENT:,} rows ...", flush=True)
                with MemorySampler() as mem:
                    row["increment"], summary = timed(spark, run, budget)
                row |= {"peak": dict(mem.peak), "keys_touched": summary["keys_touched"]}
            except OverBudget as exc:
                row["note"] = str(exc)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    return out


def many_batches(
    spark: SparkSession, ks: KeyedSQL, engine: str, keys: int, batches: int, rows: int, budget: float
) -> dict:
    """``batches`` micro-batches of ``rows`` rows through ks.start on a checkpoint holding
    ``keys`` keys of state (filled by ks.run first): per-batch times from Spark's progress."""
    d = tempfile.mkdtemp(prefix="ks-bench-batches-")
    out: dict[str, Any] = {"engine": engine, "keys": keys, "batches": batches}
    try:
        src, cp, res = os.path.join(d, "in"), os.path.join(d, "cp"), os.path.join(d, "out")
        _write_keys(spark, src, keys, keys, seed=1, files=8)
        sql = _state_sql(src, engine)
        print(f"[many batches] {engine}: fill {keys:,} keys ...", flush=True)
        out["fill"], _ = timed(spark, lambda: ks.run(sql, checkpoint=cp, output=res), budget)
        for b in range(batches):
            _write_keys(spark, src, keys, rows, seed=100 + b)
        stream_sql = _state_sql(src, engine, max_files=1)
        print(f"[many batches] {engine}: {batches} micro-batches ...", flush=True)
        t0 = time.perf_counter()
        q = ks.start(stream_sql, checkpoint=cp, sink=res)
        deadline = t0 + budget
        while q.isActive and time.perf_counter() < deadline:
            done = [p for p in q.recentProgress if p.numInputRows > 0]
            if len(done) >= batches:
                break
            time.sleep(0.5)
        total = time.perf_counter() - t0
        progress = [p for p in q.recentProgress if p.numInputRows > 0]
        q.stop()
        secs = [p.durationMs.get("triggerExecution", 0) / 1000 for p in progress]
        out |= {"total": total, "done": len(secs), "times": secs}
        if len(secs) < batches:
            out["note"] = f"{len(secs)} of {batches} batches within the {budget:.0f} s budget"
    except OverBudget as exc:
        out["note"] = str(exc)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory (VmHWM) of the JVM driver and of the Python workers alive now."""
    return rss_mb("VmHWM")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes everywhere (a few minutes)")
    ap.add_argument("--keys", default=None, help="comma-separated key counts (default 1000,100000,1000000)")
    ap.add_argument("--rows", type=int, default=None, help="rows per run (default 2,000,000)")
    ap.add_argument("--budget", type=float, default=None, help="seconds before a path is cancelled")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument(
        "--sections",
        default="workloads,crossover,growth,batches",
        help="which sections to run (comma-separated: workloads, crossover, growth, batches)",
    )
    ap.add_argument(
        "--state-keys", type=int, default=None, help="keys of state for the crossover (default: the largest --keys)"
    )
    ap.add_argument(
        "--growth-sizes",
        default=None,
        help="keys of state for the state-growth table (default 100000,1000000,10000000)",
    )
    ap.add_argument(
        "--tws-max-keys", type=int, default=1_000_000, help="largest state the growth table fills through tws"
    )
    ap.add_argument(
        "--batch-keys", type=int, default=None, help="keys of state for the many-batches table (default 1,000,000)"
    )
    ap.add_argument("--batches", default=None, help="micro-batches per engine there, as bulk,tws (default 500,200)")
    ap.add_argument(
        "--skip-paths",
        default="",
        help="comma-separated path names not to run in this invocation (e.g. 'plain UDTF PARTITION BY')",
    )
    ap.add_argument(
        "--slow-max-keys",
        type=int,
        default=None,
        help="skip the per-key-round-trip paths (tws, UDTFs, hand-written transformWithState*) above this many keys",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each workload path this many times and report its fastest run (2: every path warm, "
        "not only those after another path of the same operator)",
    )
    a = ap.parse_args()
    sections = set(a.sections.split(","))
    skip_paths = {p.strip() for p in a.skip_paths.split(",") if p.strip()}
    keys = [int(k) for k in (a.keys or ("1000,10000" if a.quick else "1000,100000,1000000")).split(",")]
    rows = a.rows or (200_000 if a.quick else 2_000_000)
    budget = a.budget or (120.0 if a.quick else 600.0)
    growth_sizes = (
        tuple(int(k) for k in a.growth_sizes.split(","))
        if a.growth_sizes
        else (10_000, 100_000)
        if a.quick
        else STATE_SIZES
    )
    batch_keys = a.batch_keys or (100_000 if a.quick else 1_000_000)
    n_bulk, n_tws = (int(x) for x in (a.batches or ("50,20" if a.quick else "500,200")).split(","))
    global BUDGET
    BUDGET = budget

    spark = local_session(
        "spark-keyed-sql bench",
        shuffle_partitions=8,
        # the Python paths measured as such: native plans (docs/native.md) only where a path asks
        conf={
            "spark.sql.streaming.numRecentProgressUpdates": str(max(n_bulk, n_tws) + 10),
            "spark.keyedsql.native": "false",
        },
    )
    ks = KeyedSQL(spark)
    ks.register("bench_counter", Counter, returns="n bigint, total double")
    ks.register("bench_counter_ts", CounterTs, returns="ts timestamp, n bigint, total double")
    ks.register("bench_aggregate", Aggregate)
    ks.register("bench_aggregate_np", AggregateColumns)
    ks.register("bench_sessions", Sessions, returns="session_start timestamp, events bigint")

    results: list[tuple] = []
    for k in keys if "workloads" in sections else []:
        df = make_events(spark, k, rows)
        for wname, paths in workloads(spark, ks, df).items():
            reference = None
            native_t = floor_t = None
            for pname, path in paths.items():
                print(f"[{k} keys] {wname} :: {pname} ...", flush=True)
                if pname in skip_paths:
                    results.append((k, wname, pname, None, "not run in this invocation (--skip-paths)", None, None))
                    continue
                if a.slow_max_keys is not None and k > a.slow_max_keys and pname in SLOW_PATHS:
                    results.append(
                        (
                            k,
                            wname,
                            pname,
                            None,
                            f"skipped above {a.slow_max_keys:,} keys (per-key round trips; keeps the run under an "
                            "hour)",
                            None,
                            None,
                        )
                    )
                    continue
                try:
                    if isinstance(path, str):  # KeyedTester: no Spark at all
                        if k * 1 > 100_000:
                            raise OverBudget("skipped above 100k keys (driver-only, single core)")
                        local = [r.asDict() for r in df.collect()]
                        t0 = time.perf_counter()
                        got = tester_rows(local)
                        t = time.perf_counter() - t0
                        check = spark.createDataFrame(got, W1_OUT)
                        d = digest(check)
                    else:
                        # timed as a user sees it: the whole output to the noop sink; the
                        # digest that checks the rows is taken apart, untimed
                        runs = [timed(spark, lambda p=path: to_noop(p()), budget) for _ in range(a.repeat)]
                        t = min(r[0] for r in runs)
                        d = digest(path())
                except OverBudget as exc:
                    results.append((k, wname, pname, None, str(exc), None, None))
                    continue
                except Exception as exc:  # noqa: BLE001 - reported in the table, not hidden
                    results.append((k, wname, pname, None, f"failed: {str(exc).splitlines()[0][:120]}", None, None))
                    continue
                if reference is None:
                    reference, native_t = d, t
                ok = d == reference
                if pname.startswith("mapInArrow floor"):
                    floor_t = t
                results.append(
                    (
                        k,
                        wname,
                        pname,
                        t,
                        "same rows as native" if ok else f"DIFFERENT rows: {d} vs {reference}",
                        native_t,
                        floor_t,
                    )
                )
    costs = {}
    if "crossover" in sections:
        state_keys = a.state_keys or max(keys)
        make_events(spark, state_keys, rows)
        costs = {e: stream_costs(spark, ks, state_keys, rows, e, budget) for e in ("bulk", "tws")}
    growth = state_growth(spark, ks, growth_sizes, budget, a.tws_max_keys) if "growth" in sections else []
    batches = (
        [
            many_batches(spark, ks, e, batch_keys, n, INCREMENT, budget * 4)
            for e, n in (("bulk", n_bulk), ("tws", n_tws))
        ]
        if "batches" in sections
        else []
    )
    mem = peak_rss_mb()
    write_report(a.out, results, rows, keys, costs, mem, a.quick, growth, batches, a.repeat)
    spark.stop()


def write_report(
    path: str,
    results: list[tuple],
    rows: int,
    keys: list[int],
    costs: dict,
    mem: dict,
    quick: bool,
    growth: list[dict],
    batches: list[dict],
    repeat: int = 1,
) -> None:
    import multiprocessing

    try:
        mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_total = float("nan")
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `make bench{'-quick' if quick else ''}` (bench/run.py) on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Machine: {multiprocessing.cpu_count()} cores, {mem_total:.0f} GiB, {platform.platform()}; Python "
        f"{platform.python_version()}, PySpark {pyspark.__version__}, local[2], 8 shuffle partitions. {rows:,} rows "
        "per run.",
        "",
        (
            "Each time is the path's whole output written to Spark's `noop` sink; a digest of its rows, taken"
            if repeat == 1
            else (
                f"Each time is the fastest of {repeat} runs writing the path's whole output to Spark's `noop` "
                "sink; a digest of its rows, taken"
            )
        ),
        "apart and untimed, is compared with native Spark SQL's. Ratios: time / native time, and",
        "time / the hand-written mapInArrow floor (the practical Python floor). µs/row over floor: the",
        "path's wall-clock time above the floor's, per input row (2 cores), i.e. what the path adds per row.",
        "",
    ]
    by_w: dict[tuple[int, str], list[tuple]] = {}
    for r in results:
        by_w.setdefault((r[0], r[1]), []).append(r)
    for (k, w), rs in by_w.items():
        native = next((r[3] for r in rs if r[3] is not None and r[2].startswith("native")), None)
        floor = next((r[3] for r in rs if r[3] is not None and r[2].startswith("mapInArrow floor")), None)
        base = floor if floor is not None else native
        lines += [
            f"## {w} — {k:,} keys",
            "",
            "| path | time (s) | rows/s | × native | × floor "
            f"| µs/row over {'floor' if floor is not None else 'native'} | check |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for _, _, p, t, check, _, _ in rs:
            if t is None:
                lines.append(f"| {p} | — | — | — | — | — | {check} |")
                continue
            over = "" if base is None else f"{(t - base) * 1e6 / rows:.2f}"
            lines.append(
                f"| {p} | {t:.2f} | {rows / t:,.0f} | {t / native:.1f} | {'' if floor is None else f'{t / floor:.1f}'} "
                f"| {over} | {check} |"
                if native
                else f"| {p} | {t:.2f} | {rows / t:,.0f} | | | | {check} |"
            )
        lines.append("")
    if costs:
        lines += [
            "## Restart and per-run cost at fixed state (the engine crossover)",
            "",
            f"W1 through `ks.run`: a first run over {rows:,} rows fills the state of {max(keys):,} keys; each later "
            "run restarts",
            "from the checkpoint and adds the given number of rows. `tws` touches only keys with input; `bulk`",
            "rewrites its whole snapshot each run, so its cost has a floor set by the state size.",
            "",
            "| engine | first run (s) | " + " | ".join(f"+{n:,} rows (s)" for n in CROSSOVER_SIZES) + " |",
            "|---|---:|" + "---:|" * len(CROSSOVER_SIZES),
        ]
        for e, c in costs.items():
            cells = [f"{c[n]:.1f}" if n in c else "—" for n in CROSSOVER_SIZES]
            first = f"{c['first']:.1f}" if "first" in c else "—"
            lines.append(f"| {e} | {first} | " + " | ".join(cells) + " |" + (f" {c['error']}" if "error" in c else ""))
    lines += growth_lines(growth) + batch_lines(batches)
    lines += (
        ["", "## Peak memory of the whole run (VmHWM)", ""] + [f"- {k}: {v:,.0f} MiB" for k, v in mem.items()] + [""]
    )
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def growth_lines(growth: list[dict]) -> list[str]:
    if not growth:
        return []
    lines = [
        "",
        "## State growth: one 1,000-row increment on a checkpoint holding N keys",
        "",
        "`ks.run` (W1's counter): a first run over N rows (one per key) fills the state, then one run adds "
        f"{INCREMENT:,} rows",
        "of random keys. Time of that increment, and the largest resident memory seen during it (local mode:",
        "the driver JVM is the executor too).",
        "",
        "| engine | keys of state | fill (s) | +1,000 rows (s) | × the smallest state | driver JVM (MiB) "
        "| Python workers (MiB) | keys touched | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for engine in GROWTH_ENGINES:
        rows = [g for g in growth if g["engine"] == engine]
        first = next((g.get("increment") for g in rows if g.get("increment")), None)
        for g in sorted(rows, key=lambda g: g["keys"]):
            inc = g.get("increment")
            peak = g.get("peak", {})
            lines.append(
                f"| {engine} | {g['keys']:,} | {g['fill']:.1f} | "
                if "fill" in g
                else f"| {engine} | {g['keys']:,} | — | "
            )
            lines[-1] += (
                f"{inc:.2f} | {inc / first:.2f} | {peak.get('driver JVM', 0):,.0f} | "
                f"{peak.get('python workers (max)', 0):,.0f} | {g.get('keys_touched', '')} | {g.get('note', '')} |"
                if inc
                else f"— | — | — | — | — | {g.get('note', '')} |"
            )
    return lines


def batch_lines(batches: list[dict]) -> list[str]:
    if not batches:
        return []
    import statistics

    lines = [
        "",
        "## Many small batches: 1,000-row micro-batches through ks.start on a checkpoint holding N keys",
        "",
        "W1's counter over a file source, one 1,000-row file per micro-batch (`max_files_per_trigger = 1`), after",
        "a `ks.run` filled the state. Per-batch time is Spark's `triggerExecution` for the batch. The last",
        "columns compare the median of batches 6-15 with the median of the last ten (the history must not",
        "make later batches slower).",
        "",
        "| engine | keys of state | batches | total (s) | median (s) | p95 (s) | batches 6-15 (median, s) "
        "| last 10 (median, s) | last / early | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for b in batches:
        t = b.get("times") or []
        if len(t) < 20:
            lines.append(f"| {b['engine']} | {b['keys']:,} | {len(t)} | — | — | — | — | — | — | {b.get('note', '')} |")
            continue
        p95 = sorted(t)[int(0.95 * (len(t) - 1))]
        early, late = statistics.median(t[5:15]), statistics.median(t[-10:])
        lines.append(
            f"| {b['engine']} | {b['keys']:,} | {len(t)} | {b['total']:.1f} | {statistics.median(t):.2f} | {p95:.2f} | "
            f"{early:.2f} | {late:.2f} | {late / early:.2f} | {b.get('note', '')} |"
        )
    return lines


if __name__ == "__main__":
    main()

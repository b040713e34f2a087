"""``make bench-stream``: W1 (the per-key counter) through ``ks.run`` increments on engine bulk,
planned natively (``OPTIONS (native = true)``: Spark SQL over the batch's rows joined with their
keys' stored state) against the Python path (``native = false``: the mapInArrow step with its
local stores) and the default ``native = 'auto'`` (each batch chooses one of them,
engines/bulk/native_choice.py), side by side in one session on the same files.

A checkpoint of ``--keys`` keys is built by one ``ks.run`` (one event a key) and copied, one
copy per path (setup, reported apart; the Python path's copy is the one built, so its local
stores start warm, auto's start cold). Then ``--rounds`` times: a new file of ``--touched`` keys
with ``--per-key`` events each is added, and each path's ``ks.run`` reads it, alternating which
runs first; each is timed as ``ks.run`` returns (output written to a Parquet directory, the
commit made). The report gives every time (auto's with the path it took: N native, P Python),
each path's best and their ratios, and checks that the checkpoints hold the same state at the
end (a count of differing rows, outside the timing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--touched", default="100000,1000000", help="comma-separated: keys in each new file")
    ap.add_argument("--per-key", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    from pyspark.sql import functions as F

    from bench.workloads import Counter
    from spark_keyed_sql import KeyedSQL
    from spark_keyed_sql.local import local_session

    spark = local_session("spark-keyed-sql bench stream", shuffle_partitions=8)
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("stream_counter", Counter, returns="n bigint, total double")
    root = tempfile.mkdtemp(prefix="ks-bench-stream-")
    src = os.path.join(root, "in")
    paths = ("native", "python", "auto")
    cps = {p: os.path.join(root, f"cp-{p}") for p in paths}
    outs = {p: os.path.join(root, f"out-{p}") for p in paths}
    files = iter(range(1, 1_000_000))

    def add_file(keys: int, per_key: int) -> None:
        i = next(files)
        spark.range(keys * per_key).select(
            F.concat(F.lit("u"), (((F.col("id") % keys) * 7919) % a.keys).cast("string")).alias("user_id"),
            F.timestamp_seconds(F.lit(1_700_000_000 + 3600 * i) + F.col("id") % 3600).alias("ts"),
            ((F.col("id") * 31 + i) % 1000 / 10.0).alias("value"),
        ).repartition(4).write.mode("append").parquet(src)

    sql = (
        f"SELECT user_id, ts, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE "
        "stream_counter(value) ORDER BY ts OPTIONS (native = {native})"
    )
    native = {"native": "true", "python": "false", "auto": "'auto'"}
    t0 = time.perf_counter()
    add_file(a.keys, 1)
    ks.run(sql.format(native="false"), checkpoint=cps["python"], output=outs["python"])
    for p in ("native", "auto"):
        shutil.copytree(cps["python"], cps[p])
        shutil.copytree(outs["python"], outs[p])
    print(f"setup: {a.keys:,} keys of state in {time.perf_counter() - t0:.1f} s (not in the figures)", flush=True)
    for touched in (int(t) for t in a.touched.split(",")):
        times: dict[str, list[float]] = {p: [] for p in native}
        took: list[str] = []
        why: list[str] = []  # auto's reasons, batch by batch
        for r in range(a.rounds):
            add_file(touched, a.per_key)  # (written before the timers start)
            order = list(native)[r % len(native) :] + list(native)[: r % len(native)]
            for p in order:
                t0 = time.perf_counter()
                summary = ks.run(
                    sql.format(native=native[p]),
                    checkpoint=cps[p],
                    output=outs[p],
                    progress=(lambda d, why=why: why.append(str(d.get("native_choice")))) if p == "auto" else None,
                )
                times[p].append(time.perf_counter() - t0)
                assert summary["input_rows"] == touched * a.per_key, summary
                if p == "auto":
                    took.append("".join("N" if m["native"] else "P" for m in summary["metrics"]))
        best = {p: min(t) for p, t in times.items()}
        runs = ", ".join(f"{p} {' / '.join(f'{t:.1f}' for t in ts)} s" for p, ts in times.items())
        print(
            f"W1 increments: {a.keys:,} keys of state, {touched * a.per_key:,} rows over {touched:,} keys a run: "
            f"{runs} (auto took {' / '.join(took)}) | best native / python {best['native'] / best['python']:.2f}x, "
            f"auto / best of the two {best['auto'] / min(best['native'], best['python']):.2f}x",
            flush=True,
        )
        print(f"  auto's last choice: {why[-1] if why else '?'}", flush=True)
    states = {p: ks.read_state(cps[p]).select("user_id", "n", "total") for p in native}
    for p in ("native", "auto"):
        differing = states[p].exceptAll(states["python"]).count() + states["python"].exceptAll(states[p]).count()
        print(f"state rows differing between the {p} and python checkpoints: {differing}", flush=True)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""``make bench-rounds``: W1 (the per-key counter) through native Spark SQL, ``ks.sql`` planned
natively (``OPTIONS (native = true)``: window functions, no Python worker), a ``mapInArrow``
that does no Python work (each batch's columns handed back: what moving the rows through a
Python worker costs by itself), the hand-written ``mapInArrow`` floor and ``ks.sql`` on
``bulk``, alternating in one session, each path's whole output to Spark's ``noop`` sink: after a
warm-up of every path, ``--rounds`` rounds of the four, each ratio from each path's best time.
What a ratio near its target needs: native Spark's own time moves 20-40% between runs, and
alternating puts every path under the same conditions. A second line gives the median of the
ratios taken within each round (less moved by one lucky round than a ratio of bests).

``--root DIR`` runs another checkout's package and bench (e.g. ``git archive <rev> spark_keyed_sql
bench | tar -x -C DIR``) on the same data, for a before/after pair of runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys


def no_work_pass(batches):
    """W1's output columns with no Python work per row: the key and ``ts`` handed back, ``value``
    as both ``total`` and (cast in C) ``n``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for b in batches:
        value = b.column("value")
        yield pa.RecordBatch.from_arrays(
            [b.column("user_id"), b.column("ts"), pc.cast(value, pa.int64(), safe=False), value],
            names=["user_id", "ts", "n", "total"],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", default="1000000,100000", help="comma-separated key counts")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    sys.path.insert(0, root)

    import spark_keyed_sql
    from bench.run import W1_OUT, alternate, floor_counter, make_events
    from bench.workloads import Counter
    from spark_keyed_sql import KeyedSQL
    from spark_keyed_sql.local import local_session

    if not os.path.abspath(spark_keyed_sql.__file__).startswith(root + os.sep):
        raise SystemExit(f"spark_keyed_sql was imported from {spark_keyed_sql.__file__}, not from {root}")
    # bulk is the Python path (native plans off for the session); ks-native asks for its plan
    spark = local_session("spark-keyed-sql bench rounds", shuffle_partitions=8, conf={"spark.keyedsql.native": "false"})
    ks = KeyedSQL(spark)
    ks.register("bench_counter", Counter, returns="n bigint, total double")
    for keys in (int(k) for k in a.keys.split(",")):
        df = make_events(spark, keys, a.rows)
        paths = {
            "native": lambda: spark.sql(
                "SELECT user_id, ts, count(*) OVER w AS n, sum(value) OVER w AS total FROM bench_events "
                "WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS UNBOUNDED PRECEDING)"
            ),
            "no-work": lambda df=df: (
                df.repartition("user_id").sortWithinPartitions("user_id", "ts").mapInArrow(no_work_pass, W1_OUT)
            ),
            "floor": lambda df=df: floor_counter(df),
            "bulk": lambda: ks.sql(
                "SELECT user_id, ts, n, total FROM bench_events GROUP BY KEY user_id WITH STATE "
                "bench_counter(value) ORDER BY ts OPTIONS (engine = 'bulk')"
            ),
            # the same statement planned as Spark SQL (docs/native.md): no Python worker
            "ks-native": lambda: ks.sql(
                "SELECT user_id, ts, n, total FROM bench_events GROUP BY KEY user_id WITH STATE "
                "bench_counter(value) ORDER BY ts OPTIONS (native = true)"
            ),
        }
        times, runs = alternate(paths, a.rounds)
        best = {p: min(t) for p, t in times.items()}
        print(
            f"W1 {keys:,} keys, {a.rows:,} rows ({root}): {runs} | best bulk / native "
            f"{best['bulk'] / best['native']:.2f}x, no-work / native {best['no-work'] / best['native']:.2f}x, "
            f"floor / native {best['floor'] / best['native']:.2f}x, bulk / floor {best['bulk'] / best['floor']:.2f}x, "
            f"bulk / no-work {best['bulk'] / best['no-work']:.2f}x, "
            f"ks-native / native {best['ks-native'] / best['native']:.2f}x",
            flush=True,
        )
        # the same ratios round by round (each round runs every path once, one after the other:
        # a ratio within a round shares the machine's moment), their median: one lucky best
        # round of either side moves it far less than it moves a ratio of bests
        pairs = {"bulk / no-work": ("bulk", "no-work"), "ks-native / native": ("ks-native", "native")}
        paired = {
            name: statistics.median(x / y for x, y in zip(times[a_], times[b_])) for name, (a_, b_) in pairs.items()
        }
        print("  median of the rounds' ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in paired.items()), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

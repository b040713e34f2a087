"""``make bench-erase``: erasing 1,000 keys out of 1M keys of state against one ordinary batch
over 1M keys of state (issue 45's figure), on one engine (``--engine``: bulk, the default, or
tws), side by side in one session.

A checkpoint is built by ``ks.run`` over one event per key (``--keys``, W1's counter). Then,
``--rounds`` times, alternating:

- **batch**: one more ``ks.run`` over a new file holding one event per key: every key's state
  read, run and written, its output to a Parquet directory (what a user's incremental run does);
- **erase**: ``ks.delete_state`` of ``--erase`` keys (spread over the key range), which rewrites
  the newest state without them and removes the history before it.

Last, the same erase on a running ``ks.start`` over the checkpoint (queued, applied by the
query between batches; on tws by restarting the query around it), timed as its caller waits.
Each erase is timed as the user sees it (the call, until the audit returns); each batch as
``ks.run`` returns. The report gives both times, their ratio, and the audit's figures. Setting
up the checkpoint is reported apart and is in neither figure.
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
    ap.add_argument("--erase", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engine", choices=("bulk", "tws"), default="bulk")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    from pyspark.sql import functions as F

    from bench.workloads import Counter
    from spark_keyed_sql import KeyedSQL
    from spark_keyed_sql.local import local_session

    # the ordinary batch on the Python path (native plans off), as the recorded figure was measured
    spark = local_session("spark-keyed-sql bench erase", shuffle_partitions=8, conf={"spark.keyedsql.native": "false"})
    ks = KeyedSQL(spark, engine=a.engine)
    ks.register("erase_counter", Counter, returns="n bigint, total double")
    root = tempfile.mkdtemp(prefix="ks-bench-erase-")
    src, cp, out = (os.path.join(root, p) for p in ("in", "cp", "out"))

    def add_file(i: int) -> None:
        spark.range(a.keys).select(
            F.concat(F.lit("u"), F.col("id").cast("string")).alias("user_id"),
            F.timestamp_seconds(F.lit(1_700_000_000 + 60 * i) + F.col("id") % 60).alias("ts"),
            ((F.col("id") * 7919 + i) % 1000 / 10.0).alias("value"),
        ).repartition(4).write.mode("append").parquet(src)

    sql = (
        f"SELECT user_id, ts, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE "
        "erase_counter(value) ORDER BY ts"
    )
    t0 = time.perf_counter()
    add_file(0)
    ks.run(sql, checkpoint=cp, output=out)
    print(f"setup: {a.keys:,} keys of state in {time.perf_counter() - t0:.1f} s (not in the figures)", flush=True)
    step = max(1, a.keys // a.erase)
    batches, erases = [], []
    for r in range(a.rounds):
        add_file(r + 1)  # (the file is written before the timer starts)
        t0 = time.perf_counter()
        ks.run(sql, checkpoint=cp, output=out)
        batches.append(time.perf_counter() - t0)
        doomed = [f"'u{k}'" for k in range(r, a.keys, step)][: a.erase]
        t0 = time.perf_counter()
        audit = ks.delete_state(cp, where=f"user_id IN ({', '.join(doomed)})")
        erases.append(time.perf_counter() - t0)
        print(
            f"round {r + 1}: batch {batches[-1]:.1f} s, erase {erases[-1]:.1f} s (keys matched "
            f"{audit['keys_matched']:,}, versions rewritten {audit['versions_rewritten']}, files removed "
            f"{audit['files_removed']}, output batches {audit['output_batches']})",
            flush=True,
        )
    print(
        f"[{a.engine}] erase {a.erase:,} of {a.keys:,} keys: best {min(erases):.1f} s vs one batch over "
        f"{a.keys:,} keys best {min(batches):.1f} s: erase / batch {min(erases) / min(batches):.2f}x",
        flush=True,
    )
    # on a running query: the same erase queued, applied by the stream between batches
    q = ks.start(sql, checkpoint=cp, sink=out, trigger="10 seconds")
    try:
        q.processAllAvailable()
        doomed = [f"'u{k}'" for k in range(a.rounds, a.keys, step)][: a.erase]
        t0 = time.perf_counter()
        audit = ks.delete_state(cp, where=f"user_id IN ({', '.join(doomed)})")
        running = time.perf_counter() - t0
        print(
            f"erase {a.erase:,} of {a.keys:,} keys on a running ks.start: {running:.1f} s as the caller waits "
            f"(keys matched {audit['keys_matched']:,}; includes up to one look interval before the query "
            f"picks it up{', and the query restarted around it' if a.engine == 'tws' else ''}): erase / batch "
            f"{running / min(batches):.2f}x; the query ran on: {q.isActive}",
            flush=True,
        )
    finally:
        q.stop()
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

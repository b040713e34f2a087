"""Driver for the executor-loss test: an incremental ks.run whose class is slow enough for the
test to kill a worker while tasks run. Marks the first Python call in ``<work>/started``; prints
JSON results (output, state, executors alive at the end) for the test's oracle."""

import json
import os
import sys

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_functions import SlowRunning  # noqa: E402

from spark_keyed_sql import KeyedSQL  # noqa: E402


def main(master: str, data: str, work: str, engine: str) -> None:
    spark = (
        SparkSession.builder.master(master)
        .appName(f"ks executor loss {engine}")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executor.memory", "768m")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ks = KeyedSQL(spark)
    ks.register("slow_running", SlowRunning, returns="n bigint, total double", marker=f"{work}/started")
    cp, sink = f"{work}/cp", f"{work}/out"
    summary = ks.run(
        f"SELECT user_id, seq, n, total FROM parquet.`{data}` GROUP BY KEY user_id WITH STATE slow_running(value) "
        f"ORDER BY seq OPTIONS (engine = '{engine}')",
        checkpoint=cp,
        output=sink,
    )
    executors = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    out = {
        "rows": sorted(map(list, spark.read.parquet(sink).collect())),
        "state": sorted([r.user_id, r.n, r.total] for r in ks.read_state(cp).collect()),
        "executors_alive": len(executors) - 1,  # without the driver
        "batches": summary["batches"],
    }
    print("RESULT " + json.dumps(out, default=str))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])

"""One ``ks.run`` through a Spark Connect client, for the fault tests: appends the data's parts
named to the input directory of ``faults/WORK`` (through the server), runs the running total over it (slowed down
and marking its first call in ``marker`` when one is given), and prints output and state.

    python connect_run.py sc://... viewfs://m/ks ENGINE PARTS WORK [MARKER]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_functions import Running, SlowRunning  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from spark_keyed_sql import KeyedSQL  # noqa: E402


def main(url: str, root: str, engine: str, parts: str, work: str, marker: str = "") -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "4")  # a user's setting for small data
    ks = KeyedSQL(spark)
    if marker:
        ks.register("running", SlowRunning, returns="n bigint, total double", marker=marker)
    else:
        ks.register("running", Running, returns="n bigint, total double")
    w = f"{root}/faults/{work}"
    for part in filter(None, parts.split(",")):
        spark.read.parquet(f"{root}/data/{part}").write.mode("append").parquet(f"{w}/src")
    print("ADDED", flush=True)
    ks.run(
        f"SELECT user_id, seq, n, total FROM parquet.`{w}/src` GROUP BY KEY user_id "
        f"WITH STATE running(value) ORDER BY seq "
        f"OPTIONS (engine = '{engine}')",
        checkpoint=f"{w}/cp",
        output=f"{w}/out",
    )
    out = {
        "rows": sorted(map(list, spark.read.parquet(f"{w}/out").collect())),
        "state": sorted([r.user_id, r.n, r.total] for r in ks.read_state(f"{w}/cp").collect()),
    }
    print("RESULT " + json.dumps(out, default=str))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

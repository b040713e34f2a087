"""The SQL scenarios, run against a master given on the command line; prints JSON results
for the test to compare with its oracle (and with local mode)."""

import atexit
import json
import os
import shutil
import sys
import tempfile

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_functions import Running  # noqa: E402

from spark_keyed_sql import KeyedSQL  # noqa: E402
from spark_keyed_sql.engines import engine_names  # noqa: E402


def main(master: str, data: str) -> None:
    work = tempfile.mkdtemp(prefix="ks-scen-")
    atexit.register(shutil.rmtree, work, True)  # removed when this child exits
    # viewfs://ks/data/... is `work` (driver and workers share this disk), resolved by Spark's
    # file system layer on the driver and on the executors, never by Python's os
    spark = (
        SparkSession.builder.master(master)
        .appName("ks cluster scenarios")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.hadoop.fs.viewfs.mounttable.ks.link./data", f"file://{work}")
        .config("spark.executor.memory", "768m")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ks = KeyedSQL(spark)
    ks.register("running", Running, returns="n bigint, total double")
    out = {}
    # where executors import the package from (KeyedSQL ships it as a zip to a cluster)
    out["executor_package"] = (
        spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("spark_keyed_sql").__file__).collect()[0]
    )
    spark.read.parquet(f"{data}/a").createOrReplaceTempView("events")
    sql = "SELECT user_id, seq, n, total FROM events GROUP BY KEY user_id WITH STATE running(value) ORDER BY seq"
    for engine in engine_names():
        out[f"batch_{engine}"] = sorted(map(list, ks.sql(sql + f" OPTIONS (engine = '{engine}')").collect()))
    # incremental runs: a then b, state carried in the checkpoint, for both engines; then the
    # bulk engine again with input, checkpoint and output on viewfs://
    src = f"{work}/src"
    os.makedirs(src)
    for name, engine, base in [*((e, e, work) for e in engine_names()), ("viewfs", "bulk", "viewfs://ks/data")]:
        cp, sink = f"{base}/cp_{name}", f"{base}/out_{name}"
        run_sql = (
            f"SELECT user_id, seq, n, total FROM parquet.`{base}/src` GROUP BY KEY user_id WITH STATE running(value) "
            f"ORDER BY seq OPTIONS (engine = '{engine}')"
        )
        for part in ("a", "b"):
            for f in sorted(os.listdir(f"{data}/{part}")):
                if f.endswith(".parquet") and not os.path.exists(f"{src}/{part}-{f}"):
                    os.link(f"{data}/{part}/{f}", f"{src}/{part}-{f}")
            ks.run(run_sql, checkpoint=cp, output=sink)
        out[f"run_{name}"] = sorted(map(list, spark.read.parquet(sink).collect()))
        out[f"state_{name}"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(cp).collect())
        for f in os.listdir(src):
            os.remove(f"{src}/{f}")
    out["viewfs_on_disk"] = sorted(n for n in os.listdir(work) if n.endswith("_viewfs"))
    print("RESULT " + json.dumps(out, default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""The scenarios through a Spark Connect client session (given ``sc://`` URL): batch on both
engines and the table-function form, incremental ks.run (tws) with state carried, a ks.start
stream into a memory sink, state read back, and what is refused (bulk streams). Prints JSON
results for the test's oracle."""

import atexit
import json
import os
import shutil
import sys
import tempfile

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_functions import Running  # noqa: E402

from spark_keyed_sql import KeyedSQL, KeyedSQLError  # noqa: E402


def rows(df):
    return sorted(map(list, df.collect()))


def main(url: str, data: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    ks = KeyedSQL(spark)
    ks.register("running", Running, returns="n bigint, total double")
    out = {"session": type(spark).__module__}
    spark.read.parquet(f"{data}/a").createOrReplaceTempView("events")
    sql = "SELECT user_id, seq, n, total FROM events GROUP BY KEY user_id WITH STATE running(value) ORDER BY seq"
    out["batch_bulk"] = rows(ks.sql(sql + " OPTIONS (engine = 'bulk')"))
    out["batch_tws"] = rows(ks.sql(sql + " OPTIONS (engine = 'tws')"))
    out["table_function"] = rows(
        ks.sql("SELECT user_id, n, total FROM running(TABLE(events), key => 'user_id', order_by => 'seq')")
    )

    work = tempfile.mkdtemp(prefix="ks-connect-")
    atexit.register(shutil.rmtree, work, True)  # removed when this child exits
    src, cp, sink = f"{work}/src", f"{work}/cp", f"{work}/out"
    os.makedirs(src)
    run_sql = (
        f"SELECT user_id, seq, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running(value) "
        "ORDER BY seq"
    )
    for part in ("a", "b"):
        for f in sorted(os.listdir(f"{data}/{part}")):
            os.link(f"{data}/{part}/{f}", f"{src}/{part}-{f}")
        ks.run(run_sql, checkpoint=cp, output=sink)  # engine auto: tws on Connect
    out["run"] = rows(spark.read.parquet(sink))
    out["state"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(cp).collect())
    out["engine"] = json.load(open(f"{cp}/spark_keyed_sql.json"))["operators"][0]["engine"]

    q = ks.start(run_sql, checkpoint=f"{work}/cp_start", sink="memory:connect_out")
    q.processAllAvailable()
    q.stop()
    out["start"] = rows(spark.table("connect_out"))

    try:
        ks.run(run_sql + " OPTIONS (engine = 'bulk')", checkpoint=f"{work}/cp_bulk", output=f"{work}/out_bulk")
        out["bulk_stream"] = "ran"
    except KeyedSQLError as exc:
        out["bulk_stream"] = f"{type(exc).__name__}: {exc}"
    try:
        ks.migrate_state(cp, f"{work}/migrated")
        out["migrate"] = "ran"
    except KeyedSQLError as exc:
        out["migrate"] = f"{type(exc).__name__}: {exc}"
    print("RESULT " + json.dumps(out, default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

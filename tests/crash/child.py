"""One incarnation of the crash-test query: ks.run over the input directory, one file per
micro-batch, until everything is processed (or the harness kills it)."""
import os
import sys

os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())  # before Spark starts: workers inherit it
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from crash_functions import RunningTotal  # noqa: E402

from spark_keyed_sql import KeyedSQL  # noqa: E402
from spark_keyed_sql.local import local_session  # noqa: E402

SQL = (
    "SELECT user_id, seq, n, total FROM parquet.`{src}` GROUP BY KEY user_id "
    "WITH STATE running_total(value) ORDER BY seq OPTIONS (engine = '{engine}', max_files_per_trigger = 1)"
)


def main(engine: str, src: str, cp: str, out: str) -> None:
    spark = local_session("crash child", shuffle_partitions=2)
    ks = KeyedSQL(spark)
    ks.register("running_total", RunningTotal, returns="n bigint, total double")
    ks.run(SQL.format(src=src, engine=engine), checkpoint=cp, output=out)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])

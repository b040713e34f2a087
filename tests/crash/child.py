"""One incarnation of the crash-test query over the input directory, one file per micro-batch,
until everything is processed (or the harness kills it). Mode ``run``: an incremental
``ks.run``; mode ``start``: a continuous ``ks.start`` stream (processing-time trigger),
stopped once all available input is processed. ``inputs`` 2: the input is two directories,
two named inputs of one function."""

import os
import sys

os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())  # before Spark starts: workers inherit it
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # (crash's modules, and the tests' jvm_options)

from crash_functions import RunningTotal, RunningTotalBySeq, RunningTotalNative  # noqa: E402
from harness import CACHE_ENV, VIEWFS_ENV, child_conf  # noqa: E402
from jvm_options import TEST_JAVA_OPTIONS  # noqa: E402

from spark_keyed_sql import KeyedSQL  # noqa: E402
from spark_keyed_sql.local import local_session  # noqa: E402

SQL = (
    "SELECT user_id, seq, n, total FROM parquet.`{src}` GROUP BY KEY user_id "
    "WITH STATE running_total(value) ORDER BY seq OPTIONS (engine = '{engine}', max_files_per_trigger = 1)"
)

# two named inputs (the input split in src/a and src/b): one running total over both
SQL_TWO_INPUTS = (
    "SELECT * FROM running_total_by_seq(a => TABLE(parquet.`{src}/a`), b => TABLE(parquet.`{src}/b`), "
    "key => 'user_id', order_by => 'seq', engine => '{engine}', max_files_per_trigger => 1)"
)


NATIVE = "bulk-native"  # the harness's name for engine bulk running native stream steps


def _stream_view(spark, src: str) -> str:
    """The input as a streaming view (what EXPLAIN plans a stream statement over)."""
    spark.readStream.schema(spark.read.parquet(src).schema).parquet(src).createOrReplaceTempView("crash_input")
    return "crash_input"


def main(engine: str, src: str, cp: str, out: str, mode: str = "run", inputs: str = "1") -> None:
    spark = local_session(
        "crash child",
        shuffle_partitions=2,
        conf=child_conf(os.environ.get(VIEWFS_ENV), os.environ.get(CACHE_ENV)),
        java_options=TEST_JAVA_OPTIONS,
    )
    ks = KeyedSQL(spark)
    ks.register("running_total", RunningTotal, returns="n bigint, total double")
    ks.register("running_total_by_seq", RunningTotalBySeq, returns="seq bigint, n bigint, total double")
    ks.register("running_total_native", RunningTotalNative, returns="n bigint, total double")
    sql = (SQL if inputs == "1" else SQL_TWO_INPUTS).format(src=src, engine=engine)
    if engine == NATIVE:  # engine bulk, each micro-batch planned as Spark SQL (docs/native.md)
        sql = SQL.format(src=src, engine="bulk").replace("running_total(", "running_total_native(")
        sql = sql.replace("OPTIONS (", "OPTIONS (native = true, ")  # every micro-batch (not 'auto''s choice)
        assert "native:    yes" in ks.explain(sql.replace(f"parquet.`{src}`", _stream_view(spark, src)))
    if mode == "start":
        q = ks.start(sql, checkpoint=cp, sink=out, trigger="500 milliseconds")
        q.processAllAvailable()
        q.stop()
    else:
        ks.run(sql, checkpoint=cp, output=out)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])

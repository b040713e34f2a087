"""State partitions and tasks of the bulk engine: Spark's own hash, reproduced; every task
serving as many state partitions as the others."""

import pytest

from spark_keyed_sql.engines.bulk.partitioning import spark_hash_int, task_keys


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 16, 200])
def test_task_keys_hash_to_their_task(n):
    keys = task_keys(n)
    assert len(keys) == n
    assert [spark_hash_int(x) % n for x in keys] == list(range(n))


def test_hash_matches_spark(spark):
    from pyspark.sql import functions as F

    values = [0, 1, 2, 3, 17, -5, 2**31 - 1, -(2**31)]
    df = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h"))
    assert {r.v: r.h for r in df.collect()} == {v: spark_hash_int(v) for v in values}


def test_a_batch_spreads_state_partitions_evenly_over_tasks(spark):
    from pyspark.sql import functions as F

    from spark_keyed_sql.engines.bulk.partitioning import PART, TASK, task_column

    parts, tasks = 12, 4
    df = spark.range(parts).select(F.col("id").cast("int").alias(PART))
    df = df.withColumn(TASK, task_column(PART, tasks)).repartition(tasks, TASK)
    per_task = df.rdd.glom().map(lambda rows: sorted(r[PART] for r in rows)).collect()
    assert sorted(len(p) for p in per_task) == [3, 3, 3, 3]
    assert sorted(sum(per_task, [])) == list(range(parts))


def test_a_keys_state_partition_is_sparks_hash_of_its_key_columns(spark):
    """The partition a checkpoint keeps a key in is fixed: pmod(hash(key columns), P) exactly as
    Spark's own functions compute it (several key columns, quoted names, NULLs)."""
    from pyspark.sql import functions as F

    from spark_keyed_sql.engines.bulk.partitioning import part_column

    rows = [("a", 1), ("b", None), (None, 2), ("x y", 3), ("a", 4)] + [(f"u{i}", i) for i in range(200)]
    df = spark.createDataFrame(rows, "`user id` string, n int")
    got = df.select(
        part_column(["user id", "n"], 7).alias("p"),
        F.pmod(F.hash(F.col("`user id`"), F.col("n")), F.lit(7)).alias("expected"),
    ).collect()
    assert [r.p for r in got] == [r.expected for r in got]
    assert len({r.p for r in got}) == 7

"""One running query per checkpoint: a second one is refused, in this process or another."""

import subprocess
import sys

import pytest
from data import SCHEMA, make_events, write_parquet
from keyed_functions import Count

from spark_keyed_sql.state.checkpoint import CheckpointError


def test_second_query_on_a_running_checkpoint_is_refused(spark, ks, tmp_path):
    ks.register("lock_count", Count, returns="n bigint")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    write_parquet(spark, make_events(10, 1, seed=3), src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("lock_events")
    sql = "SELECT user_id, n FROM lock_events GROUP BY KEY user_id WITH STATE lock_count(value)"
    q = ks.start(sql, checkpoint=cp, sink=str(tmp_path / "out"))
    try:
        with pytest.raises(CheckpointError, match="in use by another running query"):
            ks.start(sql, checkpoint=cp, sink=str(tmp_path / "out2"))
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from spark_keyed_sql.state.lock import CheckpointLock; CheckpointLock({cp!r}).acquire()",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode != 0 and "in use by another running query" in other.stderr
    finally:
        q.stop()
    q2 = ks.start(sql, checkpoint=cp, sink=str(tmp_path / "out"))  # free again once stopped
    q2.processAllAvailable()
    q2.stop()

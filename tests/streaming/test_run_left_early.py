"""A ks.run left before its query ended (here its progress callback raises after the first
batch, as a KeyboardInterrupt in a notebook cell would leave it) stops its query before the
checkpoint's lease is released: no batch commits unleased, and the next ks.run on the
checkpoint finishes the rest, every row once (a plain-Python count per key as the oracle)."""

from __future__ import annotations

import pytest
from data import make_events, write_parquet

from spark_keyed_sql import StatefulFunction


class Seen(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return {"n": self.n}


class Stop(Exception):
    pass


def test_a_run_left_early_stops_its_query_and_the_next_run_finishes_once(spark, ks, tmp_path):
    ks.register("left_early", Seen, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    files = [make_events(5, 2, seed=60 + i, start_second=1000 * i) for i in range(3)]
    for rows in files:
        write_parquet(spark, rows, src)
    sql = (
        f"SELECT user_id, ts, s.n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE left_early(value) AS s "
        "ORDER BY ts OPTIONS (max_files_per_trigger = 1)"
    )
    active = {q.id for q in spark.streams.active}

    def stop(progress):
        raise Stop(f"left after batch {progress['batch_id']}")

    with pytest.raises(Stop):
        ks.run(sql, checkpoint=cp, output=out, progress=stop)
    assert {q.id for q in spark.streams.active} == active  # its query stopped with it
    ks.run(sql, checkpoint=cp, output=out)
    got = sorted((r.user_id, r.ts, r.n) for r in spark.read.parquet(out).collect())
    want, counts = [], {}
    for r in sorted((r for rows in files for r in rows), key=lambda r: r["ts"]):
        counts[r["user_id"]] = counts.get(r["user_id"], 0) + 1
        want.append((r["user_id"], r["ts"], counts[r["user_id"]]))
    assert got == sorted(want)


def test_a_run_without_output_is_refused_before_the_checkpoint_is_touched(spark, ks_auto, tmp_path):
    import os

    from spark_keyed_sql.api.errors import SchemaError

    ks_auto.register("left_early", Seen, returns="n bigint")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    write_parquet(spark, make_events(3, 1, seed=70), src)
    sql = f"SELECT user_id, s.n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE left_early(value) AS s"
    with pytest.raises(SchemaError, match=r"ks.run needs output="):
        ks_auto.run(sql, checkpoint=cp)
    assert not os.path.exists(cp) or os.listdir(cp) == []  # nothing recorded: the next run may change the query

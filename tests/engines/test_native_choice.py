"""The per-batch choice of a natively planned stream step (engines/bulk/native_choice.py): the
rule on made-up commit records, and the batch size it reads from Spark's plan statistics against
the files' sizes on disk."""

from __future__ import annotations

import itertools
import os

from spark_keyed_sql.engines.bulk.native_choice import LARGE, SMALL_IN_A_ROW, choose, input_bytes
from spark_keyed_sql.state.commit_record import CommitRecord, DeltaEntry

_places = itertools.count()


def record(version: int, base_bytes: int, delta_bytes: tuple[int, ...] = (), base_version: int = -1) -> CommitRecord:
    return CommitRecord(
        version=version,
        attempt="a",
        partitions=4,
        function="f",
        schema=None,
        base="base" if base_bytes else None,
        base_version=base_version,
        base_rows=0,
        base_bytes=base_bytes,
        deltas=tuple(DeltaEntry(version - i, ("d",), 1, b) for i, b in enumerate(delta_bytes)),
        stores={},
        spark_batch=version,
        watermark_ms=None,
        evict_watermark_ms=None,
        next_timer_ms=None,
        next_expiry_ms=None,
    )


def test_a_stream_of_small_batches_moves_to_the_python_step_and_large_ones_stay_native():
    cp = f"file:/choice/{next(_places)}"

    def state(version: int, deltas: tuple[int, ...] = (20_000,), base_version: int = -1) -> CommitRecord:
        return record(version, 100_000, deltas, base_version)  # 100,000 bytes of base and the deltas

    small, large = int(LARGE * 120_000) - 1, int(LARGE * 120_000)
    assert choose("app", cp, 0, False, 5_000, None).native  # nothing stored yet
    paths = [choose("app", cp, v, False, small, state(v - 1)).native for v in range(1, SMALL_IN_A_ROW + 3)]
    assert paths == [True] * SMALL_IN_A_ROW + [False, False]  # cold stores: native, then loaded once
    python = SMALL_IN_A_ROW + 2  # the last Python batch
    assert choose("app", cp, python + 1, False, large, state(python)).native
    # the stores hold the batch before the last Python one: caught up from the deltas since the
    # base while those and the batch stay under LARGE of the state, else (a base newer) cold
    caught = choose("app", cp, python + 2, False, 100, state(python + 1, (20_000, 9_000)))
    assert not caught.native and "caught up from 29,000 bytes of deltas" in caught.why
    assert choose("app", cp, python + 3, False, 100, state(python + 2)).native is False  # warm: the last ran Python
    # that batch failed before its commit: its retry finds the stores at the last commit, warm
    retry = choose("app", cp, python + 3, False, 100, state(python + 2))
    assert not retry.native and "local stores" in retry.why
    assert choose("app", cp, python + 4, False, large, state(python + 3)).native
    heavy = record(python + 4, 50_000, (60_000, 5_000))  # 115,000 bytes, 65,000 of deltas to catch up: cold
    assert choose("app", cp, python + 5, False, 100, heavy).native
    compacted = record(python + 6, 150_000, base_version=python + 6)  # a base newer than the stores: cold
    assert choose("app", cp, python + 7, False, 100, compacted).native
    # another application (another cluster, a new session) has its own stores: cold
    assert choose("other app", cp, 1, False, small, state(0)).native


def test_native_true_runs_every_batch_natively_and_an_unknown_size_runs_natively():
    cp = f"file:/choice/{next(_places)}"
    state = record(3, 1_000_000)
    assert all(choose("app", cp, v, True, 10, state).native for v in range(SMALL_IN_A_ROW + 2))
    cp = f"file:/choice/{next(_places)}"
    unknown = [choose("app", cp, v, False, None, state) for v in range(SMALL_IN_A_ROW + 2)]
    assert all(c.native for c in unknown) and "not known" in unknown[-1].why


def test_the_batch_size_is_the_size_of_its_files(spark, tmp_path):
    path = str(tmp_path / "batch")
    spark.range(5_000).selectExpr("id", "cast(id * 7 as string) AS s").repartition(3).write.parquet(path)
    on_disk = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".parquet"))
    assert input_bytes(spark.read.parquet(path)) == on_disk
    assert input_bytes(spark.read.parquet(path).select("id")) < on_disk  # Spark scales by the columns read
    assert input_bytes(object()) is None

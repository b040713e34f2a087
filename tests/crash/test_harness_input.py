"""The crash harness's own input keeps the order rule (issue 43, 59a945d): Spark's file source
takes the oldest files first by modification time in milliseconds and breaks ties in listing
order (hash order on ext4), so two input files of one millisecond may be read swapped, and the
rows of the later one reach their keys out of ``seq`` order — a failure no engine causes. Each
file must get its own second, in ``seq`` order. No Spark needed."""

import os

import pandas as pd
import pytest
from crash.harness import make_input


@pytest.mark.parametrize("inputs", [1, 2])
def test_each_input_file_has_its_own_second_in_seq_order(tmp_path, inputs):
    make_input(str(tmp_path / "in"), files=12, keys=5, per_file=4, seed=3, inputs=inputs)
    files = sorted(
        (os.path.join(d, f) for d, _, names in os.walk(tmp_path / "in") for f in names if f.endswith(".parquet")),
        key=lambda p: os.stat(p).st_mtime_ns // 1_000_000,  # Spark's order: oldest first, in ms
    )
    assert len(files) == 12
    mtimes_ms = [os.stat(p).st_mtime_ns // 1_000_000 for p in files]
    # the rule: a second apart (so no two share a millisecond, whatever the file system's clock)
    assert all(b - a >= 1000 for a, b in zip(mtimes_ms, mtimes_ms[1:])), mtimes_ms
    # read in that order, the rows come in seq order (the oracle's order)
    seqs = [s for p in files for s in pd.read_parquet(p)["seq"].tolist()]
    assert seqs == sorted(seqs) == list(range(12 * 4))

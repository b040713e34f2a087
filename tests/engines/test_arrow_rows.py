"""key_runs: every key's rows handed over together, in their order, whatever the Arrow batch
boundaries, for input sorted by key or (bulk's hash-ordered one-shot batch) by a hash of the key
that several keys may share. The oracle groups the rows in plain Python."""

import random

import pyarrow as pa
import pytest

from spark_keyed_sql.engines.arrow_rows import key_runs


def _batches(rows, size):
    """rows (key, hash, seq) cut into Arrow batches of ``size`` rows."""
    out = []
    for i in range(0, len(rows), size):
        part = rows[i : i + size]
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array([r[0] for r in part], pa.string()),
                    pa.array([r[1] for r in part], pa.int64()),
                    pa.array([r[2] for r in part], pa.int64()),
                ],
                names=["k", "h", "seq"],
            )
        )
    return out


def _groups(runs):
    """[(key, [seq, ...]), ...] in the order key_runs hands them over."""
    out = []
    for rb, starts in runs:
        keys, seqs = rb.column("k").to_pylist(), rb.column("seq").to_pylist()
        ends = [*starts[1:].tolist(), rb.num_rows]
        out += [(keys[s], seqs[s:e]) for s, e in zip(starts.tolist(), ends)]
    return out


def _oracle(rows):
    by_key: dict = {}
    for k, _h, seq in rows:
        by_key.setdefault(k, []).append(seq)
    return by_key


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("buckets", [1, 3, 1000])
def test_keys_sharing_a_hash_are_regrouped_in_order(seed, buckets):
    """Rows sorted by a hash that ``buckets`` values take (1: every key shares one), keys of one
    hash interleaved at random, rows in random batch sizes: each key comes out once, whole, its
    rows in their input order; NULL keys are one key."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(rng.randrange(1, 40))] + [None]
    hash_of = {k: hash((k, seed)) % buckets for k in keys}
    rows = [(k, hash_of[k], 0) for k in (rng.choice(keys) for _ in range(rng.randrange(1, 300)))]
    rows.sort(key=lambda r: r[1])  # by hash only (Python's sort is stable: keys stay interleaved)
    rows = [(k, h, i) for i, (k, h, _) in enumerate(rows)]
    got = _groups(key_runs(iter(_batches(rows, rng.randrange(1, 50))), ["k"], "h"))
    assert len(got) == len({k for k, _ in got})  # no key handed over twice
    assert dict(got) == _oracle(rows)


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_rows_sorted_by_key_come_out_as_they_are(size):
    rows = [(k, 0, i) for i, k in enumerate(["a", "b", "b", "c", "c", "c", None, None])]
    got = _groups(key_runs(iter(_batches(rows, size)), ["k"]))
    assert got == list(_oracle(rows).items())


def test_batch_events_are_the_rows_as_dicts_named_by_the_arguments():
    """One input: each row a fresh dict {argument name: value}; several inputs: each row holds
    only its own input's columns, under that input's names, with the input's name beside it
    (NULL input: a row of INITIAL STATE, no event). The oracle: the rows built by hand."""
    from types import SimpleNamespace

    from spark_keyed_sql.engines.arrow_rows import BatchEvents
    from spark_keyed_sql.runtime.plan import PlanInput

    rb = pa.RecordBatch.from_pydict({"c0": [1, 2, None], "c1": ["x", None, "z"], "w": [0, 1, None]})
    one = BatchEvents(SimpleNamespace(arg_columns=["c0", "c1"], event_names=["n", "s"], inputs=None))
    events, names = one(rb)
    assert events == [{"n": 1, "s": "x"}, {"n": 2, "s": None}, {"n": None, "s": "z"}] and names is None
    assert events[0] is not events[1]
    assert one(rb, one.columns(rb)) == (events, None)
    none = BatchEvents(SimpleNamespace(arg_columns=[], event_names=[], inputs=None))
    assert none(rb) == ([{}, {}, {}], None)
    several = BatchEvents(
        SimpleNamespace(
            arg_columns=["c0", "c1", "w"],
            event_names=["c0", "c1", "w"],
            inputs=[PlanInput("clicks", (("n", "c0"),)), PlanInput("views", (("s", "c1"),))],
            input_column="w",
        )
    )
    assert several(rb) == ([{"n": 1}, {"s": None}, {}], ["clicks", "views", None])

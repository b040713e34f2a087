"""A one-shot bulk batch of a StatefulFunction without timers or TTL runs its keys in one call
(``KeyedRunner.run_fresh_keys``): every key from __init__'s state, rows in order, nothing kept,
and an attribute the state encoding refuses still fails, naming function and key. Run
in-process through BulkProgram over Arrow batches (the Python side of a task); the oracle is
plain Python."""

import random

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.api.errors import StateEncodingError, UserFunctionError
from spark_keyed_sql.engines.base import output_schema
from spark_keyed_sql.engines.bulk.program import BulkProgram
from spark_keyed_sql.runtime.plan import KeyedPlan
from spark_keyed_sql.runtime.spec import FunctionSpec

SRC = T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.DoubleType())])


class Running(StatefulFunction):
    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.seen = []  # mutable, encoded: not live-safe, so each key is checked by encoding

    def execute(self, e):
        self.n += 1
        self.seen.append(e["v"])
        if e["v"] < 0:
            self.ctx.clear_state()  # the next row of the key starts over
            return None
        return [(self.n, self.ctx.get_key(), len(self.seen))]


class Unstorable(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.handle = None

    def execute(self, e):
        if self.ctx.get_key() == "bad":
            self.handle = open  # a builtin function: no safe encoding
        return [(1,)]


def run(cls, returns, rows, batch_rows=7, key_type=None, passthrough=False):
    """``rows``: (key, v) pairs, or (key, v, p) with ``passthrough``: ``p`` (bigint) goes
    through to the output beside each output row."""
    key_type = key_type or pa.string()
    src = SRC if key_type == pa.string() else T.StructType([T.StructField("k", T.DoubleType()), SRC["v"]])
    if passthrough:
        src = T.StructType([*src.fields, T.StructField("p", T.LongType())])
    spec = FunctionSpec.build("f", cls, returns, {})
    plan = KeyedPlan(spec, ["k"], ["v"], passthrough=["p"] if passthrough else [])
    out = output_schema(src, plan)
    rows = sorted(rows, key=lambda r: r[0])  # what combine hands a task: key-sorted
    names = ["k", "v", "p"] if passthrough else ["k", "v"]
    types = [key_type, pa.float64(), pa.int64()]
    batches = [
        pa.RecordBatch.from_arrays(
            [pa.array([r[j] for r in rows[s : s + batch_rows]], types[j]) for j in range(len(names))],
            names=names,
        )
        for s in range(0, len(rows), batch_rows)
    ]
    got = []
    for b in BulkProgram(plan, out, now_ms=0)(iter(batches)):
        got += [tuple(r.values()) for r in b.to_pylist()]
    return got


def test_each_key_starts_from_init_and_clear_state_starts_it_over():
    rng = random.Random(3)
    rows = [(f"k{rng.randrange(12)}", float(rng.choice([1, 2, -1, 3]))) for _ in range(120)]
    got = run(Running, "n bigint, key string, seen bigint", rows)
    expected = []
    for k in sorted({r[0] for r in rows}):
        n, seen = 0, 0
        for _, v in [r for r in sorted(rows, key=lambda r: r[0]) if r[0] == k]:
            n, seen = n + 1, seen + 1
            if v < 0:
                n, seen = 0, 0
                continue
            expected.append((k, n, k, seen))
    assert got == expected  # key-sorted input: output in the same order


def test_an_attribute_the_encoding_refuses_fails_naming_function_and_key():
    rows = [("a", 1.0), ("bad", 1.0), ("c", 1.0)]
    with pytest.raises(StateEncodingError, match=r"function 'f', key 'bad': .*handle"):
        run(Unstorable, "one bigint", rows)


def test_a_failing_row_names_the_key_and_the_row():
    class Boom(StatefulFunction):
        def execute(self, e):
            if e["v"] == 13.0:
                raise ValueError("unlucky")
            return [(1,)]

    with pytest.raises(UserFunctionError, match=r"function 'f' failed for key 'x' on row \{'v': 13\.0\}"):
        run(Boom, "one bigint", [("w", 1.0), ("x", 2.0), ("x", 13.0), ("y", 1.0)])


def test_keys_split_across_batches_and_nothing_kept_between_keys():
    """Keys split across Arrow batches are gathered whole (key_runs), and the instance a key
    leaves behind never leaks into the next key."""
    rows = [("a", float(i)) for i in range(10)] + [("b", 1.0)]
    got = run(Running, "n bigint, key string, seen bigint", rows, batch_rows=3)
    assert [g for g in got if g[0] == "b"] == [("b", 1, "b", 1)]
    assert [g[1] for g in got if g[0] == "a"] == list(range(1, 11))


class Scratch(StatefulFunction):
    """Sets a private (non-state) attribute on some keys: the keys after it still start from
    __init__'s state."""

    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, e):
        if e["v"] == 5.0:
            self._scratch = e["v"]  # not state: names starting with "_" are not stored
        self.total += e["v"]
        return [(self.total, getattr(self, "_scratch", None) is not None)]


def test_a_private_attribute_set_on_one_key_leaves_the_other_keys_fresh():
    rows = [("a", 1.0), ("a", 2.0), ("b", 5.0), ("b", 1.0), ("c", 3.0), ("d", 5.0), ("e", 4.0)]
    got = run(Scratch, "total double, scratch boolean", rows, batch_rows=3)
    totals = {}
    expected = []
    for k, v in rows:  # oracle: a running total per key, from 0.0
        totals[k] = totals.get(k, 0.0) + v
        expected.append((k, totals[k]))
    assert [(g[0], g[1]) for g in got] == expected
    assert [g[2] for g in got][:2] == [False, False]  # (the scratch attribute was set, from b on)
    assert got[2][2] is True


class Typed(StatefulFunction):
    n: int
    ratio: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.ratio = 0.0

    def execute(self, e):
        self.n += 1
        if e["v"] == 2.0:
            self.ratio = 1  # an int for a double attribute: storing converts it
        if e["v"] == -1.0:
            self.n = "many"  # a string for a bigint attribute: storing refuses it
        if e["v"] == -2.0:
            del self.ratio  # a state attribute deleted: storing refuses it
        return [(1,)]


def test_a_value_storing_converts_passes_and_one_it_refuses_fails_naming_key_and_attribute():
    from spark_keyed_sql.api.errors import StateTypeError

    assert run(Typed, "one bigint", [("a", 1.0), ("b", 2.0), ("c", 3.0)]) == [("a", 1), ("b", 1), ("c", 1)]
    with pytest.raises(StateTypeError, match=r"function 'f', key 'b': .*Typed\.n"):
        run(Typed, "one bigint", [("a", 1.0), ("b", -1.0), ("c", 1.0)])
    with pytest.raises(StateTypeError, match=r"function 'f', key 'c': .*Typed\.ratio was deleted"):
        run(Typed, "one bigint", [("a", 1.0), ("b", 2.0), ("c", -2.0)])


class Repeat(StatefulFunction):
    """0 to 3 output rows per input row: each output row's key is its own key's, wherever the
    rows fall in the batch."""

    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return [(self.n, j) for j in range(int(e["v"]))]


@pytest.mark.parametrize("batch_rows", [1, 4, 100])
def test_keys_with_no_one_or_several_output_rows_keep_their_key(batch_rows):
    rng = random.Random(11)
    rows = [(f"k{rng.randrange(9)}", float(rng.choice([0, 0, 1, 2, 3]))) for _ in range(80)]
    got = run(Repeat, "n bigint, j bigint", rows, batch_rows=batch_rows)
    expected, n = [], {}
    for k, v in sorted(rows, key=lambda r: r[0]):
        n[k] = n.get(k, 0) + 1
        expected += [(k, n[k], j) for j in range(int(v))]
    assert got == expected


class Swap(StatefulFunction):
    """Replaces its own ``__dict__`` (same attributes, a new dict object) on some rows."""

    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        if e["v"] == 9.0:
            self.__dict__ = dict(self.__dict__)
        if e["v"] == -1.0:
            self.n = "many"  # storing refuses it
            return [(0,)]
        self.n += 1
        return [(self.n,)]


def test_a_replaced_instance_dict_still_starts_each_key_fresh_and_is_still_checked():
    from spark_keyed_sql.api.errors import StateTypeError

    got = run(Swap, "n bigint", [("a", 9.0), ("a", 1.0), ("b", 1.0), ("c", 9.0), ("d", 1.0)])
    assert got == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    with pytest.raises(StateTypeError, match=r"function 'f', key 'b': .*Swap\.n"):
        run(Swap, "n bigint", [("a", 9.0), ("b", -1.0), ("c", 1.0)])


class Wide(StatefulFunction):
    """Returns ``v`` as an integer of the returns' type: the loop leaves its range to the Arrow
    conversion, which must still name the key and the row of a value that does not fit."""

    def execute(self, e):
        if e["v"] == 9.0:
            raise ValueError("a later row fails too")
        return [(int(e["v"]) if e["v"] < 1e6 else BIG[e["v"]],)]


BIG = {2e6: 2**63, 3e6: -(2**63) - 1, 4e6: 2**31, 5e6: 2**15, 6e6: -129}


@pytest.mark.parametrize(
    "returns,value",
    [("x bigint", 2e6), ("x bigint", 3e6), ("x int", 4e6), ("x smallint", 5e6), ("x tinyint", 6e6)],
)
def test_an_integer_out_of_range_names_the_key_and_the_row(returns, value):
    from spark_keyed_sql.api.errors import OutputSchemaError

    rows = [("a", 1.0), ("b", 2.0), ("b", value), ("b", 3.0), ("c", 1.0)]
    with pytest.raises(OutputSchemaError, match=rf"key 'b', row \{{'v': {value}\}}.*does not fit"):
        run(Wide, returns, rows)
    # in range the same values pass, every row as it came
    assert run(Wide, returns, [r for r in rows if r[1] != value]) == [("a", 1), ("b", 2), ("b", 3), ("c", 1)]


def test_the_first_bad_row_is_named_when_a_later_row_fails_as_well():
    from spark_keyed_sql.api.errors import OutputSchemaError

    # b: out of range; c: execute raises (d: the batch's last key, held back for the next batch)
    rows = [("a", 1.0), ("b", 2e6), ("c", 9.0), ("d", 1.0)]
    with pytest.raises(OutputSchemaError, match=r"key 'b', row \{'v': 2000000\.0\}"):
        run(Wide, "x bigint", rows, batch_rows=100)


class Sparse(StatefulFunction):
    """One row per input row, except: v == 0 no row, v == 2 two rows, v == 3 a dict (the
    general path): so batches are all one-row-per-row or not, from their first row or later."""

    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        v = int(e["v"])
        if v == 0:
            return None
        if v == 2:
            return [(self.n, 0), (self.n, 1)]
        if v == 3:
            return [{"n": self.n, "j": 9}]
        return [(self.n, -1)]


@pytest.mark.parametrize(
    "seed,choices", [(1, [1]), (2, [1, 1, 1, 0]), (3, [1, 2, 3, 0]), (4, [0, 1]), (5, [1, 1, 1, 2]), (6, [1, 1, 1, 3])]
)
@pytest.mark.parametrize("batch_rows", [1, 5, 1000])
def test_pass_through_columns_follow_their_rows(seed, choices, batch_rows):
    rng = random.Random(seed)
    rows = [(f"k{rng.randrange(7)}", float(rng.choice(choices)), i) for i in range(60)]
    got = run(Sparse, "n bigint, j bigint", rows, batch_rows=batch_rows, passthrough=True)
    expected, n = [], {}
    for k, v, p in sorted(rows, key=lambda r: r[0]):  # oracle: plain Python
        n[k] = n.get(k, 0) + 1
        made = {0: [], 1: [-1], 2: [0, 1], 3: [9]}[int(v)]
        expected += [(k, n[k], j, p) for j in made]
    assert got == expected


def test_a_float_key_gives_each_output_row_its_runs_first_value():
    """0.0 and -0.0 are one key (equal): every output row of the run carries the run's first
    value, whichever row made it."""
    rows = [(-0.0, 1.0), (0.0, 1.0), (1.5, 1.0)]
    got = run(Sparse, "n bigint, j bigint", rows, key_type=pa.float64())
    assert [(str(g[0]), g[1]) for g in got] == [("-0.0", 1), ("-0.0", 2), ("1.5", 1)]

"""What a KeyedProcessor's ``rows`` hold, by ``rows_format``, on every path: a one-shot batch on
each engine, an incremental ``ks.run`` and KeyedTester (given the input's schema). The oracle
is PySpark itself: ``applyInPandas`` over the same rows in the same session, each key's frame
described the same way (``rows_format = "numpy"``: each column's ``to_numpy()``; "records":
the input's Python values).

The data has the NULL patterns that change a pandas column's dtype: int columns of each width
with a NULL in some keys (float64 there), NULL in every row of a key, bool with a NULL
(object), and NaN-able floats, doubles, timestamps, dates and strings."""

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

from spark_keyed_sql import KeyedProcessor, KeyedTester, RegistrationError
from spark_keyed_sql.api.rows import ColumnRows

NAMES = ["i", "n", "h", "f", "d", "b", "s", "t", "day"]
SCHEMA = "k string, seq int, i bigint, n int, h smallint, f float, d double, b boolean, s string, t timestamp, day date"
T0 = dt.datetime(2026, 3, 1, 12, 0, 0)


def _rows():
    """(k, seq, i, d, b, s, t, day) rows: keys with each NULL pattern, and enough plain keys that
    a bulk Arrow batch holds many keys."""
    out = []
    patterns = {
        "all-set": lambda j: (j, j * 1.5, j % 2 == 0, f"s{j}", T0 + dt.timedelta(minutes=j), dt.date(2026, 1, 1 + j)),
        "int-null": lambda j: (
            None if j == 1 else j,
            None if j == 2 else 0.25 * j,
            True,
            None if j == 0 else "x",
            T0,
            dt.date(2026, 2, 1),
        ),
        "all-null": lambda j: (None, None, None, None, None, None),
        "bool-null": lambda j: (
            7,
            float("nan") if j == 0 else 1.0,
            None if j == 1 else False,
            "y",
            None if j == 2 else T0,
            None,
        ),
        "one-row": lambda j: (-3, -0.5, False, "", T0 - dt.timedelta(days=400), dt.date(1999, 12, 31)),
    }

    def widen(i, d, *rest):  # an int, a smallint and a float beside the bigint and the double
        return (i, i, None if i is None else i % 1000, d, d, *rest)

    for k, make in patterns.items():
        for j in range(1 if k == "one-row" else 3):
            out.append((k, j, *widen(*make(j))))
    for n in range(40):
        for j in range(2):
            out.append(
                (
                    f"plain{n:02d}",
                    j,
                    *widen(n * 10 + j, n + j / 4)[:5],
                    bool(j),
                    f"p{n}",
                    T0 + dt.timedelta(seconds=n),
                    dt.date(2026, 5, 1 + j),
                )
            )
    return out


def _value(v):
    return "nan" if isinstance(v, float) and math.isnan(v) else repr(v)


def _describe_array(a):
    """dtype and values of a numpy array, NaN spelled out (so that equal means equal)."""
    return (str(a.dtype), [_value(v) for v in a.tolist()])


class _Shapes(KeyedProcessor):
    returns = "desc string"

    def process(self, key, rows):
        return [(repr(self.describe(rows)),)]


class ShapesPandas(_Shapes):
    @staticmethod
    def describe(rows):
        assert isinstance(rows, pd.DataFrame)
        assert list(rows.index) == list(range(len(rows)))
        return (
            len(rows),
            list(rows.columns),
            [_describe_array(rows[c].to_numpy()) for c in NAMES],
            [str(t) for t in rows.dtypes],
        )


class ShapesNumpy(_Shapes):
    rows_format = "numpy"

    @staticmethod
    def describe(rows):
        assert isinstance(rows, ColumnRows)
        assert all(isinstance(rows[c], np.ndarray) for c in rows)
        return (
            len(rows),
            list(rows),
            [_describe_array(rows[c]) for c in NAMES],
            [str(rows[c].dtype) for c in rows],
        )


class ShapesRecords(_Shapes):
    rows_format = "records"

    @staticmethod
    def describe(rows):
        assert isinstance(rows, list) and all(type(r) is dict for r in rows)
        return (len(rows), [list(r) for r in rows], [[_value(r[c]) for c in NAMES] for r in rows])


CLASSES = {"pandas": ShapesPandas, "numpy": ShapesNumpy, "records": ShapesRecords}


def _events(rows, names=NAMES):
    """key -> its events in seq order: ``names`` of (k, seq, *NAMES)."""
    out = {}
    for r in sorted(rows, key=lambda r: (r[0], r[1])):
        out.setdefault(r[0], []).append({c: v for c, v in zip(["k", "seq", *NAMES], r) if c in names})
    return out


def _spark_frames(spark, rows, names, numpy):
    """key -> the description of the frame PySpark's applyInPandas hands for the key's rows
    (in seq order, only ``names``): the oracle of the pandas and numpy formats."""

    import pyspark

    # PySpark 3.5 keeps pyarrow's microseconds for `timestamp` (4.0 coerced them to ns): the one
    # place this project deliberately differs from it (docs/api.md), so the oracle takes 4.x's unit
    before_4 = pyspark.__version__ < "4"

    def describe(key, pdf):
        pdf = pdf.sort_values("seq", kind="stable").reset_index(drop=True)[names]
        if before_4:
            for c in names:
                if str(pdf[c].dtype) == "datetime64[us]":
                    pdf[c] = pdf[c].astype("datetime64[ns]")
        desc = (
            len(pdf),
            names,
            [(str(pdf[c].to_numpy().dtype), [_value(v) for v in pdf[c].to_numpy().tolist()]) for c in NAMES],
            [str(pdf[c].to_numpy().dtype) if numpy else str(pdf[c].dtype) for c in names],
        )
        return pd.DataFrame({"k": [key[0]], "desc": [repr(desc)]})

    got = spark.createDataFrame(rows, SCHEMA).groupBy("k").applyInPandas(describe, "k string, desc string")
    return dict(tuple(r) for r in got.collect())


def _oracle(rows, fmt, names=NAMES, spark=None):
    """key -> the description the class should give: PySpark's frames (pandas, numpy), or the
    input's values (records)."""
    if fmt != "records":
        return _spark_frames(spark, rows, names, fmt == "numpy")
    out = {}
    for k, evs in _events(rows, names).items():
        out[k] = repr((len(evs), [names] * len(evs), [[_value(e[c]) for c in NAMES] for e in evs]))
    return out


@pytest.fixture(scope="module")
def key_rows_src(spark):
    rows = _rows()
    spark.createDataFrame(rows, SCHEMA).repartition(3).createOrReplaceTempView("key_rows_src")
    return rows


@pytest.mark.parametrize("fmt", list(CLASSES))
def test_rows_hold_what_pyspark_apply_in_pandas_holds(spark, ks, key_rows_src, fmt):
    ks.register(f"shapes_{fmt}", CLASSES[fmt])
    out = ks.sql(
        f"SELECT k, s.desc FROM key_rows_src GROUP BY KEY k WITH STATE shapes_{fmt}({', '.join(NAMES)}) AS s "
        "ORDER BY seq"
    )
    assert dict(tuple(r) for r in out.collect()) == _oracle(key_rows_src, fmt, spark=spark)


@pytest.mark.spark_feature("UDTF_ANALYZE")
@pytest.mark.parametrize("fmt", list(CLASSES))
def test_table_function_rows_hold_the_same(spark, ks_auto, key_rows_src, fmt):
    ks_auto.register(f"shapes_tf_{fmt}", CLASSES[fmt])
    out = spark.sql(
        f"SELECT k, desc FROM shapes_tf_{fmt}(TABLE(SELECT k, seq, {', '.join(NAMES)} "
        "FROM key_rows_src), key => 'k', order_by => 'seq')"
    )
    # the table function's rows hold every column of its TABLE argument, key and order too
    assert dict(tuple(r) for r in out.collect()) == _oracle(key_rows_src, fmt, ["k", "seq", *NAMES], spark=spark)


# CI: each format on one engine (every format on both in the one-shot tests above)
@pytest.mark.slow_on("bulk-numpy", "tws-records")
@pytest.mark.parametrize("fmt", ["numpy", "records"])
def test_incremental_runs_hand_the_same_rows(spark, ks, tmp_path, fmt):
    """ks.run over files (micro-batches with state): each key's rows of each run."""
    ks.register(f"shapes_inc_{fmt}", CLASSES[fmt])
    rows = _rows()
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    parts = [r for r in rows if r[1] == 0], [r for r in rows if r[1] > 0]
    sql = (
        f"SELECT k, s.desc FROM parquet.`{src}` GROUP BY KEY k WITH STATE shapes_inc_{fmt}({', '.join(NAMES)}) AS s "
        "ORDER BY seq"
    )
    for part in parts:
        spark.createDataFrame(part, SCHEMA).coalesce(1).write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=out)
    got = sorted(tuple(r) for r in spark.read.parquet(out).select("k", "desc").collect())
    assert got == sorted(kv for part in parts for kv in _oracle(part, fmt, spark=spark).items())


@pytest.mark.parametrize("fmt", list(CLASSES))
def test_tester_hands_the_same_rows(spark, key_rows_src, fmt):
    """KeyedTester given the input's schema builds the frames Spark builds."""
    tester = KeyedTester(CLASSES[fmt], schema=SCHEMA)
    got = {k: tester.run(evs, key=k)[0]["desc"] for k, evs in _events(key_rows_src).items()}
    assert got == _oracle(key_rows_src, fmt, spark=spark)


class Count(KeyedProcessor):
    returns = "n bigint, cols bigint"

    def process(self, key, rows):
        return [(len(rows), len(list(rows)))]


class CountNumpy(Count):
    rows_format = "numpy"


@pytest.mark.parametrize("cls", [Count, CountNumpy])
def test_a_processor_without_arguments_sees_its_row_count(spark, ks, cls):
    """f() on a KeyedProcessor: no columns, but len(rows) is the key's row count."""
    spark.createDataFrame([("a", 1), ("a", 2), ("b", 3)], "k string, v int").createOrReplaceTempView("count_src")
    ks.register("count_rows", cls)
    got = ks.sql("SELECT k, c.n, c.cols FROM count_src GROUP BY KEY k WITH STATE count_rows() AS c").collect()
    assert sorted(tuple(r) for r in got) == [("a", 2, 0), ("b", 1, 0)]


def test_an_unknown_rows_format_is_refused_at_registration(ks_auto):
    class Bad(KeyedProcessor):
        returns = "n bigint"
        rows_format = "arrow"

        def process(self, key, rows):
            return [(len(rows),)]

    with pytest.raises(
        RegistrationError, match=r"'bad_rows'.*Bad\.rows_format = 'arrow' is not one of 'pandas', 'numpy', 'records'"
    ):
        ks_auto.register("bad_rows", Bad)


def test_column_rows_names_a_missing_column():
    rows = ColumnRows({"a": np.array([1, 2])}, 2)
    with pytest.raises(KeyError, match=r"no column 'b' in this key's rows; columns: \['a'\]"):
        rows["b"]
    assert len(rows) == 2 and list(rows) == ["a"] and "a" in rows and rows.columns == ["a"]
    assert rows.to_pandas().equals(pd.DataFrame({"a": [1, 2]}))


def test_numpy_rows_are_the_frame_columns_to_numpy():
    """The engine-neutral builder: for every mix of values (NULLs included) of each Spark type,
    rows_format "numpy" gives each column as the "pandas" frame's ``to_numpy()`` (dtype and values)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spark_keyed_sql.runtime.key_rows import rows_builder
    from spark_keyed_sql.runtime.spark_frames import arrow_type

    values = {
        "int": st.integers(-(2**31), 2**31 - 1),
        "bigint": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(allow_nan=True, width=32),
        "double": st.floats(allow_nan=True),
        "boolean": st.booleans(),
        "string": st.text(max_size=3),
        "date": st.dates(),
        "timestamp": st.datetimes(min_value=dt.datetime(1700, 1, 1), max_value=dt.datetime(2200, 1, 1)),
    }

    @settings(max_examples=200, deadline=None)
    @given(
        st.sampled_from(sorted(values)).flatmap(
            lambda t: st.tuples(st.just(t), st.lists(st.one_of(st.none(), values[t]), min_size=1, max_size=5))
        )
    )
    def check(case):
        t, column = case
        events = [{"a": v} for v in column]
        types = [arrow_type(t)]
        got = rows_builder("numpy", ["a"], types)(events)["a"]
        frame = rows_builder("pandas", ["a"], types)(events)
        assert _describe_array(got) == _describe_array(frame["a"].to_numpy()), (t, column)

    check()


def test_timestamps_beyond_datetime64_ns_are_python_datetimes():
    """A year-9999 "end of time" (beyond datetime64[ns], where applyInPandas fails) does not fail
    the batch: that column is Python datetimes (naive UTC); a column within range stays datetime64[ns]."""

    class Stamps(KeyedProcessor):
        returns = "dtype string, v string"

        def process(self, key, rows):
            return [(str(rows[c].dtype), repr(rows[c].tolist())) for c in rows.columns]

    rows = [{"far": dt.datetime(9999, 12, 31), "near": T0}, {"far": None, "near": None}]
    got = KeyedTester(Stamps, schema="far timestamp, near timestamp").run(rows, key=1)
    assert got == [
        {"dtype": "object", "v": repr([dt.datetime(9999, 12, 31), None])},
        {"dtype": "datetime64[ns]", "v": repr([pd.Timestamp(T0), pd.NaT])},
    ]


ALL_TYPES = (
    "k string, seq int, b tinyint, h smallint, n int, l bigint, f float, d double, dec decimal(10,2), "
    "bo boolean, s string, bin binary, day date, t timestamp, ntz timestamp_ntz, "
    "arr array<int>, st struct<x:int,y:string>, m map<string,int>"
)
ALL_NAMES = [c.split()[0] for c in ALL_TYPES.split(", ")][2:]


def _all_types_rows():
    import decimal

    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    full = (1, 2, 3, 4, 1.5, 2.5, decimal.Decimal("1.25"), True, "x", b"ab", dt.date(2024, 1, 2), ts, ts)
    full += ([1, None], (1, "a"), {"k": 1})
    nulls = (None,) * len(full)
    # a: no NULL; m: a NULL in every column; z: NULL in every row
    return [("a", 0, *full), ("a", 1, *full), ("m", 0, *full), ("m", 1, *nulls), ("z", 0, *nulls)]


def _describe_frame(pdf):
    return repr([(c, str(pdf[c].dtype), [f"{v!r}:{type(v).__name__}" for v in pdf[c].tolist()]) for c in ALL_NAMES])


class AllTypes(KeyedProcessor):
    returns = "desc string"

    def process(self, key, rows):
        return [(_describe_frame(rows),)]


@pytest.mark.skipif(
    __import__("pyspark").__version__ < "4", reason="PySpark 3.5's applyInPandas differs here (docs/api.md)"
)
def test_every_spark_type_as_apply_in_pandas(spark, ks, tmp_path):
    """Every Spark type, with and without NULLs, on the engine and in KeyedTester (given the
    schema), against applyInPandas over the same rows: dtype, and each value with its type."""
    ks.register("all_types", AllTypes)  # (first: it ships this module to Spark's workers by value)
    df = spark.createDataFrame(_all_types_rows(), ALL_TYPES)
    df.createOrReplaceTempView("all_types_src")

    def describe(key, pdf):
        pdf = pdf.sort_values("seq", kind="stable").reset_index(drop=True)
        return pd.DataFrame({"k": [key[0]], "desc": [_describe_frame(pdf)]})

    theirs = dict(tuple(r) for r in df.groupBy("k").applyInPandas(describe, "k string, desc string").collect())
    ours = ks.sql(
        f"SELECT k, s.desc FROM all_types_src GROUP BY KEY k WITH STATE all_types({', '.join(ALL_NAMES)}) AS s "
        "ORDER BY seq"
    )
    assert dict(tuple(r) for r in ours.collect()) == theirs
    tester = KeyedTester(AllTypes, schema=ALL_TYPES)
    by_key = {}
    for r in _all_types_rows():
        by_key.setdefault(r[0], []).append(dict(zip(ALL_NAMES, r[2:])))
    assert {k: tester.run(rows, key=k)[0]["desc"] for k, rows in by_key.items()} == theirs

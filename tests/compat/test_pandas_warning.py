"""PySpark's pandas-3 FutureWarning: muted around this package's own calls, kept for a user's
own pandas functions, and the mute never outlives the calls (threads included)."""

import threading
import warnings

import pytest

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.compat.pandas_warning import MESSAGE, quiet_pandas_warning, quietly

TEXT = MESSAGE + " >= 3.0.0. Some features may not work correctly."


def _warn():
    warnings.warn(TEXT, FutureWarning, stacklevel=1)


def _caught(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen]


def test_muted_inside_and_shown_after():
    def inside():
        with quiet_pandas_warning():
            _warn()
            warnings.warn("another FutureWarning", FutureWarning, stacklevel=1)

    assert _caught(inside) == ["another FutureWarning"]
    assert _caught(_warn) == [TEXT]


def test_nested_and_decorated_calls_leave_no_filter_behind():
    before = list(warnings.filters)

    @quietly
    def inner():
        _warn()
        return 7

    with quiet_pandas_warning():
        assert inner() == 7
        with quiet_pandas_warning():
            _warn()
    assert warnings.filters == before


def test_a_filter_the_user_adds_meanwhile_is_kept():
    with warnings.catch_warnings():
        with quiet_pandas_warning():
            warnings.filterwarnings("error", message="user's own")
        assert any(f[1] is not None and f[1].pattern == "user's own" for f in warnings.filters)
        assert not any(f[1] is not None and f[1].pattern == MESSAGE for f in warnings.filters)


def test_two_threads_interleaving_leave_the_filters_as_they_were():
    """Thread A enters, B enters, A leaves, B leaves: a saved-and-restored filter list would
    keep the mute for good; the counted one is gone after the last exit."""
    before = list(warnings.filters)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a():
        with quiet_pandas_warning():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with quiet_pandas_warning():
            b_in.set()
            a_out.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert warnings.filters == before
    assert _caught(_warn) == [TEXT]


class Count(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, event):
        self.n += 1
        return {"n": self.n}


@pytest.mark.spark
def test_a_keyed_query_prints_no_pyspark_pandas_warning_and_a_users_pandas_udf_still_does(spark, tmp_path):
    from pyspark.sql.functions import pandas_udf

    from spark_keyed_sql import KeyedSQL

    def user_udf():
        @pandas_udf("long")
        def plus_one(s):
            return s + 1

        return plus_one

    if not any(MESSAGE in m for m in _caught(user_udf)):
        pytest.skip("this PySpark / pandas pair does not warn about pandas (PySpark < 4.2, or pandas 2)")

    rows = [("a", 1), ("a", 2), ("b", 3)]
    df = spark.createDataFrame(rows, "k string, ts long")
    df.createOrReplaceTempView("pandas_warning_events")
    df.write.parquet(str(tmp_path / "in"))
    got = {}

    def ours():
        ks = KeyedSQL(spark)
        ks.register("pw_count", Count, returns="n long")
        q = "SELECT k, c.n FROM {} GROUP BY KEY k WITH STATE pw_count(ts) AS c ORDER BY ts"
        got["sql"] = sorted(tuple(r) for r in ks.sql(q.format("pandas_warning_events")).collect())
        ks.run(q.format(f"parquet.`{tmp_path / 'in'}`"), checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
        got["run"] = sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect())

    assert [m for m in _caught(ours) if MESSAGE in m] == []
    oracle = []
    for k in sorted({k for k, _ in rows}):
        oracle += [(k, i + 1) for i in range(sum(1 for kk, _ in rows if kk == k))]
    assert got["sql"] == oracle and got["run"] == oracle
    assert any(MESSAGE in m for m in _caught(user_udf))  # the user's own pandas UDF keeps PySpark's warning

"""Bad input gets a clear error naming what was wrong and where."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from spark_keyed_sql import (
    CheckpointError,
    KeyedProcessor,
    KeyedQueryError,
    KeyedSQLError,
    KeyedTester,
    StatefulFunction,
)
from spark_keyed_sql.api.errors import (
    JavaMissingError,
    OutputSchemaError,
    RegistrationError,
    SchemaError,
    StateEncodingError,
    StateTypeError,
    UnknownFunctionError,
    UserFunctionError,
)


class Boom(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, event):
        self.n += 1
        if event["value"] < 0:
            raise ValueError("negative value")
        return {"n": self.n}


class WrongKeys(StatefulFunction):
    def execute(self, event):
        return {"n": 1, "zzz": 2}


class WrongType(StatefulFunction):
    def execute(self, event):
        return {"n": "not a number"}


class HoldsFile(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.handle = open(os.devnull)  # noqa: SIM115

    def execute(self, event):
        return {"n": 1}


class LateFile(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.thing = None

    def execute(self, event):
        self.thing = open(os.devnull)  # noqa: SIM115
        return {"n": 1}


class Annotated(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, event):
        self.count = "many" if event["value"] > 50 else self.count + 1
        return {"n": 1}


@pytest.fixture(scope="module")
def bad_df(spark):
    df = spark.createDataFrame([("u1", 1.0), ("u7", -3.5), ("u2", 60.0)], "user_id string, value double")
    df.createOrReplaceTempView("bad_events")
    return df


def test_unknown_function(ks, bad_df):
    with pytest.raises(UnknownFunctionError, match="unknown function 'nope'"):
        ks.apply(bad_df, "nope", key="user_id")


def test_key_not_in_source(ks, bad_df):
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(SchemaError, match=r"key column\(s\) \['userid'\] not in the source"):
        ks.apply(bad_df, "boom", key="userid")


@pytest.mark.spark_feature("UDTF_ANALYZE")
def test_table_function_key_not_in_table(spark, ks_auto, bad_df):
    """Plain spark.sql: Spark's own analysis error, carrying ours."""
    from pyspark.errors import AnalysisException

    ks_auto.register("boom", Boom, returns="n bigint")
    with pytest.raises(AnalysisException, match=r"key column\(s\) \['nokey'\] not in the input table"):
        spark.sql("SELECT * FROM boom(TABLE(bad_events), key => 'nokey')").collect()


def test_table_call_key_not_in_table_through_ks_sql(ks, bad_df):
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(
        KeyedQueryError,
        match=r"^line 1, column 46: boom: key column 'nokey' is not a column of the input "
        r"\(its columns: user_id, value\)",
    ):
        ks.sql("SELECT * FROM boom(TABLE(bad_events), key => 'nokey')").collect()


@pytest.mark.parametrize("path", ["apply", "table_call"])
def test_user_exception_names_function_key_and_row(spark, ks, bad_df, path):
    """On the engine of the `ks` fixture: ks.apply, and the table-function form through ks.sql."""
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(UserFunctionError) as info:
        if path == "apply":
            ks.apply(bad_df, "boom", key="user_id").collect()
        else:
            ks.sql("SELECT * FROM boom(TABLE(bad_events), key => 'user_id')").collect()
    msg = str(info.value)
    assert "function 'boom' failed for key 'u7'" in msg
    assert "'value': -3.5" in msg and "ValueError: negative value" in msg


@pytest.mark.spark_feature("UDTF_ANALYZE")
def test_user_exception_in_plain_spark_sql_table_function(spark, ks_auto, bad_df):
    """Plain spark.sql is Spark's: its PythonException, whose text names function, key and row."""
    from pyspark.errors import PythonException

    ks_auto.register("boom", Boom, returns="n bigint")
    with pytest.raises(PythonException) as info:
        spark.sql("SELECT * FROM boom(TABLE(bad_events), key => 'user_id')").collect()
    msg = str(info.value)
    assert "function 'boom' failed for key 'u7'" in msg and "ValueError: negative value" in msg


def test_user_exception_in_tester_is_typed():
    t = KeyedTester(Boom, returns="n bigint")
    with pytest.raises(UserFunctionError) as info:
        t.run([{"value": -1.0}], key="k9")
    assert info.value.function == "Boom" and info.value.key == "k9"
    assert isinstance(info.value.cause, ValueError)


@pytest.mark.parametrize("path", ["apply", "table_call"])
def test_output_not_matching_returns(spark, ks, bad_df, path):
    ks.register("wrong_keys", WrongKeys, returns="n bigint, m bigint")
    ks.register("wrong_type", WrongType, returns="n bigint")
    for name, pattern in (
        ("wrong_keys", r"key\(s\) \['zzz'\] that are not columns"),
        ("wrong_type", r"column 'n': expected BIGINT, got str"),
    ):
        with pytest.raises(OutputSchemaError, match=pattern) as info:
            if path == "apply":
                ks.apply(bad_df, name, key="user_id").collect()
            else:
                ks.sql(f"SELECT * FROM {name}(TABLE(bad_events), key => 'user_id')").collect()
        assert f"function '{name}'" in str(info.value)


def test_tuple_of_wrong_length():
    class T2(StatefulFunction):
        def execute(self, e):
            return (1, 2, 3)

    with pytest.raises(OutputSchemaError, match=r"returned 3 value\(s\) .* but returns has 2 column\(s\)"):
        KeyedTester(T2, returns="a bigint, b bigint").run([{}], key=1)


def test_file_handle_attribute_refused_at_register(ks):
    with pytest.raises(RegistrationError) as info:
        ks.register("holds_file", HoldsFile, returns="n bigint")
    msg = str(info.value)
    assert "HoldsFile.handle" in msg and "TextIOWrapper" in msg


def test_file_handle_assigned_in_execute(spark, ks, bad_df):
    with pytest.raises(StateEncodingError, match=r"LateFile\.thing holds a _io\.TextIOWrapper"):
        KeyedTester(LateFile, returns="n bigint").run([{"value": 1.0}], key="a")
    ks.register("late_file", LateFile, returns="n bigint")
    with pytest.raises(Exception, match=r"LateFile\.thing holds a _io\.TextIOWrapper"):
        ks.apply(bad_df, "late_file", key="user_id").collect()


def test_annotated_attribute_wrong_type(spark, ks, bad_df):
    with pytest.raises(StateTypeError, match=r"attribute Annotated\.count: expected BIGINT, got str 'many'"):
        KeyedTester(Annotated, returns="n bigint").run([{"value": 60.0}], key="a")
    ks.register("annotated", Annotated, returns="n bigint")
    with pytest.raises(Exception, match=r"attribute Annotated\.count: expected BIGINT, got str 'many'"):
        ks.apply(bad_df, "annotated", key="user_id").collect()


def test_annotated_attribute_wrong_type_in_init():
    class BadInit(StatefulFunction):
        total: float

        def __init__(self, **kw):
            super().__init__(**kw)
            self.total = "zero"

        def execute(self, e):
            return None

    with pytest.raises(RegistrationError, match=r"BadInit\.total: expected DOUBLE, got str 'zero'"):
        KeyedTester(BadInit)


def test_register_errors(ks):
    with pytest.raises(RegistrationError, match="no output schema"):
        ks.register("no_returns", Boom)
    with pytest.raises(RegistrationError, match="not a valid SQL identifier"):
        ks.register("bad name", Boom, returns="n bigint")
    with pytest.raises(RegistrationError, match="unknown type 'bigintt'"):
        ks.register("bad_type", Boom, returns="n bigintt")
    with pytest.raises(RegistrationError, match="not a subclass of StatefulFunction or KeyedProcessor"):
        ks.register("not_a_class", dict, returns="n bigint")

    class Strict(StatefulFunction):
        def __init__(self, threshold):
            super().__init__()
            self.threshold = threshold

        def execute(self, e):
            return None

    with pytest.raises(
        RegistrationError, match=r"Strict\(\*\*\{'nope': 1\}\) failed .* unexpected keyword argument 'nope'"
    ):
        ks.register("bad_kwargs", Strict, returns="n bigint", nope=1)
    assert issubclass(RegistrationError, KeyedSQLError)


def test_java_missing_is_a_sentence(monkeypatch, tmp_path):
    from spark_keyed_sql.java import require_java

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaMissingError, match="Java was not found: Spark needs Java 17"):
        require_java()


def test_make_says_java_missing(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("make", "sh", "bash"):
        p = shutil.which(tool)
        if p:
            (bindir / tool).symlink_to(p)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {"PATH": str(bindir), "HOME": os.environ.get("HOME", "/tmp")}
    res = subprocess.run(["make", "-s", "-C", root, "check-java"], env=env, capture_output=True, text=True)
    assert res.returncode != 0
    assert "Java was not found: Spark needs Java 17" in res.stderr
    assert "Exception" not in res.stderr and sys.executable  # a sentence, not a stack trace


class NeedsAmount(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, event):
        self.total += event["amount"]
        return (self.total,)


def test_missing_argument_and_wrong_argument_type_name_function_key_row(spark, ks, bad_df):
    """Arguments become the event dict: there is no fixed arity, so a missing argument or one
    of the wrong type surfaces where the class uses it, named with function, key and row."""
    ks.register("needs_amount", NeedsAmount, returns="total double")
    with pytest.raises(Exception) as missing:
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE needs_amount(value)").collect()
    assert "function 'needs_amount' failed for key" in str(missing.value) and "KeyError: 'amount'" in str(missing.value)
    with pytest.raises(Exception) as wrong:
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE needs_amount(user_id AS amount)").collect()
    assert "function 'needs_amount' failed for key" in str(wrong.value) and "TypeError" in str(wrong.value)


def _line_of(cls, text: str) -> int:
    """The file line of ``text`` in ``cls``'s source (the oracle for the user's frame)."""
    import inspect

    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_sql_actions_raise_user_function_error_with_users_frame(spark, ks, bad_df):
    """ks.sql's DataFrame (and what is derived from it) raises our error, not pyspark's wrapper:
    a short message with function, key, row and the user's own frame (file and line)."""
    from pyspark.sql import DataFrame

    ks.register("boom", Boom, returns="n bigint")
    df = ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE boom(value)")
    assert isinstance(df, DataFrame)
    frame = f'{os.path.abspath(__file__)}", line {_line_of(Boom, "negative value")}, in execute'
    for action in (
        df.collect,
        lambda: df.filter("n > 0").select("n").toPandas(),
        lambda: df.groupBy("user_id").count().count(),
    ):
        with pytest.raises(UserFunctionError) as info:
            action()
        err = info.value
        first, *rest = str(err).splitlines()
        assert first == "function 'boom' failed for key 'u7' on row {'value': -3.5}: ValueError: negative value"
        assert frame in str(err) and len(rest) <= 6, str(err)
        # the key and the cause as values again (the message is all Spark's worker brings back)
        assert err.function == "boom" and err.key == "u7" and frame in err.frames
        assert isinstance(err.cause, ValueError) and str(err.cause) == "negative value"
        assert err.spark_error is not None and err.__cause__ is None


class FrameBoom(KeyedProcessor):
    returns = "n bigint"

    def process(self, key, rows):
        if (rows["value"] < 0).any():
            raise ValueError("a negative value")
        return [(len(rows),)]


def test_processor_error_names_key_row_count_and_first_row(spark, ks):
    """A KeyedProcessor gets a frame per key; its error names the key, the key's row count and
    its first row (in the within-key order)."""
    spark.createDataFrame(
        [("u1", 1, 1.0), ("u7", 3, -3.5), ("u7", 2, 5.0), ("u2", 1, 60.0)], "user_id string, seq int, value double"
    ).createOrReplaceTempView("bad_frames")
    ks.register("frame_boom", FrameBoom)
    with pytest.raises(UserFunctionError) as info:
        ks.sql("SELECT * FROM bad_frames GROUP BY KEY user_id WITH STATE frame_boom(value) ORDER BY seq").collect()
    first = str(info.value).splitlines()[0]
    assert (
        first
        == "function 'frame_boom' failed for key 'u7' on 2 row(s), first {'value': 5.0}: ValueError: a negative value"
    ), first


class FrameWrongType(KeyedProcessor):
    returns = "n bigint, total double"

    def process(self, key, rows):
        return [(len(rows), "not a number")]


def test_processor_wrong_output_type_names_function_key_and_column(spark, ks, bad_df):
    ks.register("frame_wrong", FrameWrongType)
    with pytest.raises(
        OutputSchemaError,
        match=(
            r"function 'frame_wrong' \(key '(u1|u7|u2)', 1 row\(s\), first "
            r".*column 'total': expected DOUBLE, got str"
        ),
    ):
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE frame_wrong(value)").collect()


def test_sql_output_schema_error_is_top(spark, ks, bad_df):
    ks.register("wrong_type", WrongType, returns="n bigint")
    with pytest.raises(
        OutputSchemaError, match=r"function 'wrong_type' .* column 'n': expected BIGINT, got str"
    ) as info:
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE wrong_type(value)").show()
    assert len(str(info.value).splitlines()) == 1


def test_tiny_input_runs_few_tasks_in_a_default_session(spark, ks_auto, bad_df):
    """A user's session keeps spark.sql.shuffle.partitions = 200: the bulk engine (auto's batch
    choice) leaves the count to adaptive execution, so three rows do not run 200 tasks."""
    ks_auto.register("boom", Boom, returns="n bigint")
    sc = spark.sparkContext
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    try:
        sc.setJobGroup("ks-few-tasks", "tiny input")
        rows = ks_auto.sql(
            "SELECT * FROM bad_events WHERE value > 0 GROUP BY KEY user_id WITH STATE boom(value)"
        ).collect()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert sorted((r["user_id"], r["n"]) for r in rows) == [("u1", 1), ("u2", 1)]
    tracker = sc.statusTracker()
    stages = [
        s
        for j in tracker.getJobIdsForGroup("ks-few-tasks")
        for s in (tracker.getJobInfo(j).stageIds if tracker.getJobInfo(j) else [])
    ]
    tasks = [tracker.getStageInfo(s).numTasks for s in stages if tracker.getStageInfo(s)]
    assert tasks and max(tasks) <= 4, tasks


def test_workers_interpreter_fixed_in_a_session_started_without_it(spark, monkeypatch):
    """A local session started with PYSPARK_PYTHON pointing at an interpreter that cannot
    import the package: KeyedSQL points the workers at this one and says so in one line."""
    from spark_keyed_sql import KeyedSQL

    sc = spark.sparkContext
    bare = shutil.which("python3", path="/usr/bin:/bin") or "/nonexistent/python3"
    monkeypatch.setattr(sc, "pythonExec", bare)
    with pytest.warns(UserWarning) as warned:
        KeyedSQL(spark)
    assert sc.pythonExec == sys.executable
    (w,) = [w for w in warned if "cannot import spark_keyed_sql" in str(w.message)]
    assert f"set PYSPARK_PYTHON={sys.executable}" in str(w.message) and "\n" not in str(w.message)
    monkeypatch.setattr(sc, "pythonExec", "python3")  # not chosen by the user: fixed silently
    KeyedSQL(spark)
    assert sc.pythonExec == sys.executable


def test_nanosecond_parquet_gets_a_hint(spark, ks_auto, tmp_path):
    import pandas as pd

    ks_auto.register("boom", Boom, returns="n bigint")
    path = tmp_path / "nanos.parquet"
    pd.DataFrame(
        {"user_id": ["u1"], "value": [1.0], "ts": pd.to_datetime(["2024-01-01 00:00:00.123456789"])}
    ).to_parquet(path, version="2.6")  # pyarrow 13+'s default; older pyarrow writes 2.4 (no nanoseconds)
    with pytest.raises(
        KeyedSQLError,
        match=r"(PARQUET_TYPE_ILLEGAL|Illegal Parquet type).*NANOS.*coerce_timestamps='us'.*nanosAsLong=true",
    ):
        ks_auto.sql(f"SELECT * FROM parquet.`{path}` GROUP BY KEY user_id WITH STATE boom(value)")
    # the remedy the hint gives works
    pd.DataFrame(
        {"user_id": ["u1"], "value": [1.0], "ts": pd.to_datetime(["2024-01-01 00:00:00.123456789"])}
    ).to_parquet(path, coerce_timestamps="us", allow_truncated_timestamps=True)
    rows = ks_auto.sql(f"SELECT * FROM parquet.`{path}` GROUP BY KEY user_id WITH STATE boom(value)").collect()
    assert [(r["user_id"], r["n"]) for r in rows] == [("u1", 1)]


def test_started_query_raises_user_function_error(spark, ks, tmp_path):
    """ks.start's StreamingQuery (still a pyspark StreamingQuery) reports our error from
    processAllAvailable / awaitTermination and exception()."""
    from pyspark.sql.streaming import StreamingQuery

    ks.register("boom", Boom, returns="n bigint")
    src = tmp_path / "src"
    spark.createDataFrame([("u1", 1.0), ("u7", -3.5)], "user_id string, value double").write.parquet(str(src))
    q = ks.start(
        f"SELECT * FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE boom(value)",
        checkpoint=str(tmp_path / "ck"),
        sink=f"memory:boom_{ks.default_engine}",
    )
    assert isinstance(q, StreamingQuery)
    try:
        with pytest.raises(
            UserFunctionError, match=r"^function 'boom' failed for key 'u7' on row \{'value': -3\.5\}: ValueError"
        ):
            q.processAllAvailable()
        assert isinstance(q.exception(), UserFunctionError)
    finally:
        q.stop()


class TimerBoom(StatefulFunction):
    def execute(self, event):
        self.ctx.register_timer(self.ctx.current_processing_time())
        return {"n": 1}

    def on_timer(self, key, timestamp):
        raise ValueError(f"timer boom for {key}")


def test_started_query_raises_a_failing_timer_as_user_function_error(spark, ks, tmp_path):
    """A timer that keeps failing after its input ran (bulk: fired by the pump beside the
    query; tws: by Spark's no-data batch) stops the query with our error, not Spark's."""
    ks.register("timer_boom", TimerBoom, returns="n bigint")
    src = tmp_path / "src"
    spark.createDataFrame([("u1", 1.0)], "user_id string, value double").write.parquet(str(src))
    q = ks.start(
        f"SELECT * FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE timer_boom(value)",
        checkpoint=str(tmp_path / "ck"),
        sink=f"memory:timer_boom_{ks.default_engine}",
        trigger="1 second",
    )
    try:
        with pytest.raises(UserFunctionError, match=r"function 'timer_boom' failed for key 'u1'.*timer boom for"):
            q.awaitTermination(120)
        assert isinstance(q.exception(), UserFunctionError)
        assert not q.isActive
    finally:
        q.stop()


class EchoDoor(StatefulFunction):
    def execute(self, event):
        return {"door": "out", "n": 1}


def test_a_returns_column_named_as_the_key_and_selected_is_refused_before_anything_runs(spark, ks, tmp_path):
    """The output holds the key columns, then the returns columns: a returns column of a key's
    name makes two columns of that name, and an outer SELECT naming it is ambiguous. ks.sql said
    so; ks.run and ks.start failed mid-run with Spark's exception. All three raise ks.sql's
    KeyedQueryError before anything runs, and nothing is written."""
    ks.register("echo_door", EchoDoor, returns="door string, n int")
    src = tmp_path / "src"
    spark.createDataFrame([("d1", 1)], "door string, v int").write.parquet(str(src))
    spark.readStream.schema("door string, v int").parquet(str(src)).createOrReplaceTempView("door_stream")
    keyed = "SELECT door, n FROM {src} GROUP BY KEY door WITH STATE echo_door(v)"
    calls = {
        "ks.sql": lambda: ks.sql(keyed.format(src=f"parquet.`{src}`")).collect(),
        "ks.run": lambda: ks.run(
            keyed.format(src=f"parquet.`{src}`"), checkpoint=str(tmp_path / "cp1"), output=str(tmp_path / "o1")
        ),
        "ks.start": lambda: ks.start(
            keyed.format(src="door_stream"), checkpoint=str(tmp_path / "cp2"), sink=str(tmp_path / "o2")
        ),
    }
    for call in calls.values():
        with pytest.raises(KeyedQueryError, match=r"^Spark cannot run the statement's outer part: .*door.* ambiguous"):
            call()
    assert not any(os.path.exists(tmp_path / d) for d in ("o1", "o2")), "no output written"
    renamed = "SELECT d, n FROM {src} GROUP BY KEY door AS d WITH STATE echo_door(v)"
    assert [tuple(r) for r in ks.sql(renamed.format(src=f"parquet.`{src}`")).collect()] == [("d1", 1)]


def test_an_outer_select_spark_refuses_fails_ks_run_and_ks_start_before_a_batch(spark, ks, tmp_path):
    """What Spark refuses in the SQL around the keyed select (here a function it does not know)
    is ks.sql's KeyedQueryError on ks.run and ks.start too, raised before a batch runs (it
    failed the first micro-batch with Spark's exception); the checkpoint then runs the corrected
    statement as if nothing had happened."""
    ks.register("echo_n", EchoDoor, returns="door string, n int")
    src = tmp_path / "src"
    rows = [("d1", 1), ("d2", 2), ("d1", 3)]
    spark.createDataFrame(rows, "gate string, v int").write.parquet(str(src))
    spark.readStream.schema("gate string, v int").parquet(str(src)).createOrReplaceTempView("gate_stream")
    bad = "SELECT gate, no_such_fn(n) AS m FROM {src} GROUP BY KEY gate WITH STATE echo_n(v)"
    good = "SELECT gate, n + 1 AS m FROM {src} GROUP BY KEY gate WITH STATE echo_n(v)"
    expected = sorted((g, 2) for g, _ in rows)  # (echo_n returns n = 1 for every row)
    run_cp, start_cp = str(tmp_path / "cp_run"), str(tmp_path / "cp_start")
    run_out, start_out = str(tmp_path / "out_run"), str(tmp_path / "out_start")
    outer = r"^Spark cannot run the statement's outer part: .*no_such_fn"
    with pytest.raises(KeyedQueryError, match=outer) as refused:
        ks.run(bad.format(src=f"parquet.`{src}`"), checkpoint=run_cp, output=run_out)
    assert not re.search(r"line \d+,? pos \d+", str(refused.value))  # (Spark's place in the rewritten SQL)
    with pytest.raises(KeyedQueryError, match=outer):
        ks.start(bad.format(src="gate_stream"), checkpoint=start_cp, sink=start_out)
    assert not os.path.exists(run_out) and not os.path.exists(start_out)
    ks.run(good.format(src=f"parquet.`{src}`"), checkpoint=run_cp, output=run_out)
    q = ks.start(good.format(src="gate_stream"), checkpoint=start_cp, sink=start_out)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    for out in (run_out, start_out):
        assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == expected


class CountRows(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, event):
        self.n += 1
        return {"n": self.n}


def test_a_memory_sink_started_again_on_its_checkpoint(spark, ks, tmp_path):
    """A memory sink holds one run's output. bulk (foreachBatch) goes on from the checkpoint's
    state into a fresh memory table; on tws Spark refuses to recover a memory sink from a
    checkpoint at all, which is said as what to do (Spark's own message advises deleting the
    offsets, which would start the state over)."""
    ks.register("count_rows", CountRows, returns="n int")
    src = str(tmp_path / "src")
    spark.createDataFrame([("a", 1), ("a", 2), ("b", 3)], "k string, v int").write.parquet(src)
    spark.readStream.schema("k string, v int").parquet(src).createOrReplaceTempView("mem_src")
    sql = "SELECT k, n FROM mem_src GROUP BY KEY k WITH STATE count_rows(v)"
    cp, table = str(tmp_path / "cp"), f"mem_again_{ks.default_engine}"
    q = ks.start(sql, checkpoint=cp, sink=f"memory:{table}")
    q.processAllAvailable()
    q.stop()
    assert sorted(tuple(r) for r in spark.table(table).collect()) == [("a", 1), ("a", 2), ("b", 1)]
    spark.createDataFrame([("a", 4)], "k string, v int").write.mode("append").parquet(src)
    if ks.default_engine == "tws":
        with pytest.raises(CheckpointError, match=r"a memory sink \(memory:mem_again_tws\) cannot continue one.*"):
            ks.start(sql, checkpoint=cp, sink=f"memory:{table}")
        return
    q = ks.start(sql, checkpoint=cp, sink=f"memory:{table}")
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert [tuple(r) for r in spark.table(table).collect()] == [("a", 3)]  # a's third row, from the state


class ExtraKey(StatefulFunction):
    def execute(self, event):
        return {"acc": 1, "extra": 2}


def test_a_dict_with_a_key_outside_a_one_column_returns_names_the_key():
    """With one returns column a dict is that column's value only when the column holds dicts
    (a map or struct); else a dict with other keys is the same mistake as with several columns,
    and says so (it said "expected BIGINT, got dict")."""
    with pytest.raises(OutputSchemaError, match=r"with key\(s\) \['extra'\] that are not columns of returns"):
        KeyedTester(ExtraKey, returns="acc bigint").run([{"v": 1}], key="k")
    assert KeyedTester(ExtraKey, returns="m map<string, bigint>").run([{"v": 1}], key="k") == [
        {"m": {"acc": 1, "extra": 2}}
    ]

"""A quiet local session (``local_session()``, the default): a class that raises inside ks.run
gives the caller the project's error and nothing else on the console (no executor, writer or
query stack traces repeating it, no tws worker prints), and so does a SQL error (no PySpark
JSON log line of it); a ks.start query that dies in the
background still says so in the log, where nothing else would.

A child process of its own: the JVM's standard error is the console being checked (the test
session's JVM writes to whatever its standard error was when it started)."""

import os
import subprocess
import sys
import textwrap

from spark_keyed_sql.jvm_stderr import CHATTER

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from spark_keyed_sql import KeyedSQL, StatefulFunction
    from spark_keyed_sql.local import local_session

    work = sys.argv[1]
    spark = local_session()
    ks = KeyedSQL(spark)

    class Boom(StatefulFunction):
        def __init__(self):
            self.n = 0

        def execute(self, row):
            self.n += 1
            if row["v"] > 2:
                raise ValueError("v is too big: " + str(row["v"]))
            return {"n": self.n}

    ks.register("boom", Boom, returns="n bigint")
    spark.createDataFrame([("a", 1), ("a", 3), ("b", 2)], "k string, v int").write.parquet(work + "/in")
    q = "SELECT k, n FROM parquet.`" + work + "/in` GROUP BY KEY k WITH STATE boom(v) OPTIONS (engine = '{}')"
    print("CONSOLE-MARK", file=sys.stderr, flush=True)
    for engine in sys.argv[2].split(","):
        try:
            ks.run(q.format(engine), checkpoint=work + "/cp_" + engine, output=work + "/out_" + engine)
            print("NO ERROR", engine)
        except Exception as exc:
            print("RAISED", engine, type(exc).__name__, str(exc).splitlines()[0], flush=True)
    spark.read.parquet(work + "/in").createOrReplaceTempView("events")
    statements = {
        "ks.sql": lambda: ks.sql("SELECT nope FROM events").collect(),
        "spark.sql": lambda: spark.sql("SELECT * FROM boom(TABLE(events), key => 'k', ttl => '1 hour')").collect(),
    }
    for what, call in statements.items():
        try:
            call()
            print("NO ERROR", what)
        except Exception as exc:
            print("RAISED", what, type(exc).__name__, str(exc).replace(chr(10), " ")[:600], flush=True)
    print("STARTING-MARK", file=sys.stderr, flush=True)
    query = ks.start(q.format("bulk"), checkpoint=work + "/cp_start", sink=work + "/out_start")
    deadline = time.time() + 120
    while query.isActive and time.time() < deadline:
        time.sleep(0.5)
    print("STARTED QUERY ACTIVE", query.isActive, flush=True)
    """
)


def test_a_failing_run_shows_its_error_alone_and_a_failing_stream_is_still_logged(tmp_path):
    from tests.conftest import spark_lacks  # (tws needs Spark 4's transformWithStateInPandas)

    engines = "bulk" if spark_lacks("tws") else "bulk,tws"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), engines], capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for engine in engines.split(","):
        # the error names the function, key and row, and what Python raised
        assert f"RAISED {engine} UserFunctionError function 'boom' failed for key 'a'" in run.stdout, run.stdout
        assert "ValueError: v is too big: 3" in run.stdout
    # SQL errors: the caller's exception (Spark's, naming the column; ours, naming what plain
    # spark.sql takes), and no line of PySpark's own log of it (PySpark 4 writes one, with the JVM's stack)
    assert "RAISED ks.sql AnalysisException" in run.stdout and "`nope`" in run.stdout, run.stdout
    if not spark_lacks("table_function"):
        assert "RAISED spark.sql AnalysisException" in run.stdout and "got ttl =>" in run.stdout, run.stdout
    during_runs = run.stderr.split("CONSOLE-MARK", 1)[1].split("STARTING-MARK", 1)[0]
    assert during_runs.strip() == "", during_runs[:3000]  # not one line while the runs failed
    assert CHATTER not in run.stderr
    after = run.stderr.split("STARTING-MARK", 1)[1]
    assert "STARTED QUERY ACTIVE False" in run.stdout
    # the stream's end is in the log, with the class's error in it
    assert "terminated with error" in after and "v is too big: 3" in after, after[:3000]

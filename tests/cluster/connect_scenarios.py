"""Every entry point through a Spark Connect client (``pyspark-client``: no JVM, no classic
pyspark), with inputs, checkpoints and outputs under ``root``: a ``viewfs://`` mount only the
server knows. Run by tests/cluster/test_connect.py in the client's own venv; prints JSON
results for the test's plain-Python oracle.

    python connect_scenarios.py sc://127.0.0.1:PORT viewfs://m/ks [full|smoke]
"""

import datetime
import importlib.util
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_functions import Running, RunningNative, TopSeq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from spark_keyed_sql import KeyedSQL, KeyedSQLError, StatefulFunction  # noqa: E402

ENGINES = ("bulk", "tws")


class Remind(StatefulFunction):
    """A processing-time timer per key, 1 s after its first row: emits 'reminder' for the key."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = False

    def execute(self, e):
        if not self.seen:
            self.seen = True
            self.ctx.register_timer(self.ctx.current_processing_time() + datetime.timedelta(seconds=1))
        return None

    def on_timer(self, key, timestamp):
        return ("reminder",)


class RemindAfterSeen(Remind):
    """Remind, also emitting 'seen' for a key's first row."""

    def execute(self, e):
        first = not self.seen
        super().execute(e)
        return ("seen",) if first else None


class Scaled(StatefulFunction):
    """A running total of ``value`` times the factor a broadcast input holds for 'all'."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, e):
        self.total = round(self.total + e["value"] * self.ctx.broadcast("factors")["all"], 6)
        return (e["seq"], self.total)


def ks_views(spark):
    return [t.name for t in spark.catalog.listTables() if t.name.startswith("__ks_")]


def rows(df):
    return sorted(map(list, df.collect()))


def error(fn) -> str:
    try:
        fn()
    except KeyedSQLError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def running_over(src: str, engine: str, clauses: str = "") -> str:
    """The running total over the files in ``src`` (rows of a key in ``seq`` order) on ``engine``."""
    return (
        f"SELECT user_id, seq, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE running(value) "
        f"ORDER BY seq {clauses} OPTIONS (engine = '{engine}')"
    )


def add_part(spark, root: str, part: str, dst: str) -> None:
    """The data's part ``part`` appended to the input directory ``dst`` (through the server)."""
    spark.read.parquet(f"{root}/data/{part}").write.mode("append").parquet(dst)


def main(url: str, root: str, tier: str = "full") -> None:
    """``tier``: ``full`` (every entry point, both engines) or ``smoke`` (CI: one-shot batches,
    ``ks.run`` twice on bulk and its state read back)."""
    engines = ENGINES if tier == "full" else ("bulk",)
    out: dict = {"py4j": importlib.util.find_spec("py4j") is not None}
    spark = SparkSession.builder.remote(url).getOrCreate()
    out["session"] = type(spark).__module__
    spark.conf.set("spark.sql.shuffle.partitions", "4")  # a user's setting for small data
    ks = KeyedSQL(spark)
    ks.register("running", Running, returns="n bigint, total double")
    ks.register("remind", Remind, returns="what string")
    ks.register("remind_seen", RemindAfterSeen, returns="what string")
    spark.read.parquet(f"{root}/data/a").createOrReplaceTempView("events")

    # one-shot batches
    sql = "SELECT user_id, seq, n, total FROM events GROUP BY KEY user_id WITH STATE running(value) ORDER BY seq"
    for engine in engines:
        out[f"batch_{engine}"] = rows(ks.sql(sql + f" OPTIONS (engine = '{engine}')"))
    out["table_function"] = rows(
        ks.sql("SELECT user_id, n, total FROM running(TABLE(events), key => 'user_id', order_by => 'seq')")
    )
    out["apply"] = rows(
        ks.apply(spark.table("events"), "running", key="user_id", order_by="seq").select("user_id", "n", "total")
    )
    out["explain"] = ks.explain(sql)

    # ks.run twice, state read back, the change feed; on each engine
    for engine in engines:
        w = f"{root}/work/{engine}"
        run_sql = running_over(f"{w}/src", engine)
        add_part(spark, root, "a", f"{w}/src")
        views = ks_views(spark)
        first = ks.run(run_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
        add_part(spark, root, "b", f"{w}/src")
        seen = []  # the progress callback: on bulk the batches commit on the server
        second = ks.run(run_sql, checkpoint=f"{w}/cp", output=f"{w}/out", progress=seen.append)
        out[f"run_views_left_{engine}"] = sorted(set(ks_views(spark)) - set(views))  # (dropped once run)
        out[f"progress_{engine}"] = sum(p.get("input_rows") or 0 for p in seen)
        out[f"run_{engine}"] = rows(spark.read.parquet(f"{w}/out"))
        out[f"run_inputs_{engine}"] = [first["input_rows"], second["input_rows"]]
        out[f"state_{engine}"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(f"{w}/cp").collect())
        out[f"keyed_state_{engine}"] = rows(ks.sql(f"SELECT user_id, n, total FROM keyed_state('{w}/cp')"))
        changes = ks.read_state_changes(f"{w}/cp").filter("variable = 'n'").collect()
        out[f"changes_{engine}"] = len(changes)
        out[f"migrate_{engine}"] = error(lambda w=w: ks.migrate_state(f"{w}/cp", f"{w}/migrated"))

    if tier != "full":
        print("RESULT " + json.dumps(out, default=str))
        return

    # DELETE of keyed state through Connect: on a stopped checkpoint (the client applies it), then
    # on a running stream (the query applies it on the server, between batches)
    w = f"{root}/work/erase"
    erase_sql = running_over(f"{w}/src", "bulk")
    add_part(spark, root, "a", f"{w}/src")
    ks.run(erase_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    first, second = sorted({r.user_id for r in spark.read.parquet(f"{root}/data/a").collect()})[:2]
    out["erase_victims"] = [first, second]
    stopped = ks.delete_state(f"{w}/cp", where=f"user_id = '{first}'")
    q = ks.start(erase_sql, checkpoint=f"{w}/cp", sink=f"{w}/out_started", trigger="1 second")
    q.processAllAvailable()
    add_part(spark, root, "b", f"{w}/src")
    q.processAllAvailable()
    running = ks.delete_state(f"{w}/cp", where=f"user_id = '{second}'", timeout=300)
    out["erase_running_active"] = q.isActive
    # (what the handle said then, for the failure message: a rare False seen on 2026-11-29 with
    # the server's log showing the query running until the client stopped it)
    out["erase_running_said"] = [str(q.status), str(q.exception()), q.runId]
    q.stop()
    out["erase_matched"] = [stopped["keys_matched"], running["keys_matched"]]
    out["erase_state"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(f"{w}/cp").collect())

    # a broadcast input through Connect: a one-shot batch, then ks.run twice with the factor
    # changed between the runs (the second run's rows at the new factor; the state on the server)
    ks.register("scaled", Scaled, returns="seq bigint, total double")
    w = f"{root}/work/broadcast"
    spark.createDataFrame([("all", 2.0)], "name string, factor double").write.parquet(f"{w}/factors")
    scaled_sql = (
        f"SELECT user_id, seq, total FROM scaled(events => TABLE(parquet.`{w}/src`), "
        f"factors => TABLE(parquet.`{w}/factors`), key => 'user_id', order_by => 'seq', broadcast => 'factors')"
    )
    add_part(spark, root, "a", f"{w}/src")
    out["broadcast_batch"] = rows(ks.sql(scaled_sql))
    ks.run(scaled_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    spark.createDataFrame([("all", 3.0)], "name string, factor double").write.mode("append").parquet(f"{w}/factors")
    add_part(spark, root, "b", f"{w}/src")
    ks.run(scaled_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    out["broadcast_run"] = rows(spark.read.parquet(f"{w}/out"))
    out["broadcast_state"] = rows(ks.read_state(f"{w}/cp", broadcast="factors").select("name", "factor"))

    # a class the planner takes: ks.run's micro-batches as Spark SQL on the server (no Python
    # worker), then a run on the Python path continuing from the state the native one wrote
    ks.register("running_native", RunningNative, returns="n bigint, total double")
    w = f"{root}/work/native"
    native_sql = running_over(f"{w}/src", "bulk").replace("running(", "running_native(")
    add_part(spark, root, "a", f"{w}/src")
    spark.readStream.schema(spark.read.parquet(f"{w}/src").schema).parquet(f"{w}/src").createOrReplaceTempView(
        "native_src"
    )
    out["native_explain"] = "native:    yes" in ks.explain(native_sql.replace(f"parquet.`{w}/src`", "native_src"))
    ks.run(native_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    add_part(spark, root, "b", f"{w}/src")
    ks.run(native_sql.replace("OPTIONS (", "OPTIONS (native = false, "), checkpoint=f"{w}/cp", output=f"{w}/out")
    out["native_run"] = rows(spark.read.parquet(f"{w}/out"))
    out["native_state"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(f"{w}/cp").collect())

    # a stored value the native plan cannot read (a float in an int attribute, set by UPDATE):
    # native = 'auto' runs that batch on the Python path instead, in a directory of its own (the
    # native job's cannot be removed through Connect)
    ks.register("top_seq", TopSeq, returns="top bigint")
    w = f"{root}/work/fallback"
    top_sql = (
        f"SELECT user_id, seq, top FROM parquet.`{w}/src` GROUP BY KEY user_id WITH STATE top_seq(seq) "
        "ORDER BY seq OPTIONS (engine = 'bulk')"
    )
    add_part(spark, root, "a", f"{w}/src")
    first = ks.run(top_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    key = min(r.user_id for r in ks.read_state(f"{w}/cp").collect())
    ks.update_state(f"{w}/cp", set={"top": "'2.5'"}, where=f"user_id = '{key}'")
    add_part(spark, root, "b", f"{w}/src")
    second = ks.run(top_sql, checkpoint=f"{w}/cp", output=f"{w}/out")
    out["fallback_native"] = [[m["native"] for m in run["metrics"]] for run in (first, second)]
    out["fallback_run"] = rows(spark.read.parquet(f"{w}/out").select("user_id", "seq", "top"))

    # the table-function form through ks.run, and a view over files read by spark.read
    w = f"{root}/work/tf"
    add_part(spark, root, "a", f"{w}/src")
    add_part(spark, root, "b", f"{w}/src")
    ks.run(
        f"SELECT user_id, n, total FROM running(TABLE(parquet.`{w}/src`), key => 'user_id', order_by => 'seq')",
        checkpoint=f"{w}/cp",
        output=f"{w}/out",
    )
    out["run_table_function"] = rows(spark.read.parquet(f"{w}/out"))
    spark.read.parquet(f"{w}/src").createOrReplaceTempView("files_view")
    out["files_view"] = error(
        lambda: ks.run(
            "SELECT user_id, n FROM files_view GROUP BY KEY user_id WITH STATE running(value)",
            checkpoint=f"{w}/cp_view",
            output=f"{w}/out_view",
        )
    )

    # several named inputs: parts a and b as two inputs of one running total, in seq order
    for engine in ENGINES:
        w = f"{root}/work/two_{engine}"
        add_part(spark, root, "a", f"{w}/a")
        add_part(spark, root, "b", f"{w}/b")
        ks.run(
            f"SELECT user_id, n, total FROM running(a => TABLE(parquet.`{w}/a`), b => TABLE(parquet.`{w}/b`), "
            f"key => 'user_id', order_by => 'seq', engine => '{engine}')",
            checkpoint=f"{w}/cp",
            output=f"{w}/out",
        )
        out[f"two_inputs_{engine}"] = rows(spark.read.parquet(f"{w}/out"))

    # INITIAL STATE FROM: part b's keys continue from the state part a left
    for engine in ENGINES:
        w = f"{root}/work/init_{engine}"
        spark.createDataFrame(
            ks.read_state(f"{root}/work/{engine}/cp").select("user_id", "n", "total").collect(),
            "user_id string, n bigint, total double",
        ).createOrReplaceTempView("seed")
        add_part(spark, root, "b", f"{w}/src")
        ks.run(
            running_over(f"{w}/src", engine, "INITIAL STATE FROM seed"),
            checkpoint=f"{w}/cp",
            output=f"{w}/out",
        )
        out[f"initial_{engine}"] = sorted([r.user_id, r.n, r.total] for r in ks.read_state(f"{w}/cp").collect())

    # ks.start into a directory, stopped and restarted (a second starter refused meanwhile); and
    # into a memory sink
    for engine in ENGINES:
        w = f"{root}/work/start_{engine}"
        start_sql = running_over(f"{w}/src", engine)
        add_part(spark, root, "a", f"{w}/src")
        q = ks.start(start_sql, checkpoint=f"{w}/cp", sink=f"{w}/out")
        q.processAllAvailable()
        out[f"lease_{engine}"] = error(lambda s=start_sql, w=w: ks.start(s, checkpoint=f"{w}/cp", sink=f"{w}/out"))
        q.stop()
        add_part(spark, root, "b", f"{w}/src")
        q = ks.start(start_sql, checkpoint=f"{w}/cp", sink=f"{w}/out")
        q.processAllAvailable()
        q.stop()
        out[f"start_{engine}"] = rows(spark.read.parquet(f"{w}/out"))
        q = ks.start(start_sql, checkpoint=f"{w}/cp_memory", sink=f"memory:started_{engine}")
        q.processAllAvailable()
        q.stop()
        out[f"memory_{engine}"] = rows(spark.table(f"started_{engine}"))

    # processing-time timers fire in a running stream with no new input (bulk: the timer pump)
    for engine in ENGINES:
        w = f"{root}/work/timers_{engine}"
        add_part(spark, root, "a", f"{w}/src")
        q = ks.start(
            f"SELECT user_id, what FROM parquet.`{w}/src` GROUP BY KEY user_id WITH STATE remind(value) "
            f"OPTIONS (engine = '{engine}')",
            checkpoint=f"{w}/cp",
            sink=f"memory:reminders_{engine}",
            trigger="1 second",
        )
        q.processAllAvailable()
        deadline = time.time() + 60
        while time.time() < deadline and spark.table(f"reminders_{engine}").count() < 25:
            time.sleep(1)
        q.stop()
        out[f"timers_{engine}"] = rows(spark.table(f"reminders_{engine}"))

    # ks.run into a memory sink: the batches run on the server; the timers due at end of input
    # fire from the client, and the view shows both
    w = f"{root}/work/run_memory"
    add_part(spark, root, "a", f"{w}/src")
    ks.run(
        f"SELECT user_id, what FROM parquet.`{w}/src` GROUP BY KEY user_id WITH STATE remind_seen(value) "
        "OPTIONS (engine = 'bulk')",
        checkpoint=f"{w}/cp",
        output="memory:run_memory",
    )
    out["run_memory"] = rows(spark.table("run_memory"))

    print("RESULT " + json.dumps(out, default=str))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])

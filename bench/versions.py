"""``make bench-versions``: W1 and W2 at 100k keys (2M rows) on several Spark minors, side by
side on the same Parquet data, each minor in its own venv (tools/venvs.py; pip's cache makes a
rebuild cheap). Every path is timed as a user sees it: its whole output written to Spark's
``noop`` sink, in a plain local[2] session; each path's output is checked against native Spark
SQL's (by a digest taken apart from the timing) before its time counts. Writes the section
between the markers of BENCHMARKS.md.

    python bench/versions.py --spark 3.5,4.3            # oldest and newest (the default)
    python bench/versions.py --spark 4.0 --repeat 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

REPORT = ROOT / "BENCHMARKS.md"
START, END = "<!-- versions:start -->", "<!-- versions:end -->"
KEYS, ROWS = 100_000, 2_000_000


# ------------------------------------------------------------------ in the venv of one Spark
def _child(repeat: int, data: str) -> dict:
    import pyspark
    from pyspark.sql import functions as F

    from bench.workloads import Aggregate, Counter, digest
    from spark_keyed_sql import KeyedSQL
    from spark_keyed_sql.compat import features
    from spark_keyed_sql.engines import available
    from spark_keyed_sql.local import local_session

    spark = local_session("spark-keyed-sql bench-versions", conf={"spark.keyedsql.native": "false"})  # the Python path
    if not os.path.exists(data):
        df = spark.range(ROWS).select(
            F.concat(F.lit("u"), (F.col("id") % KEYS).cast("string")).alias("user_id"),
            F.timestamp_seconds(F.lit(1_700_000_000) + F.floor(F.col("id") / KEYS) * 60).alias("ts"),
            ((F.col("id") * 7919) % 1000 / 10.0).alias("value"),
        )
        df.repartition(4).write.parquet(data + ".tmp")
        os.replace(data + ".tmp", data)
    spark.read.parquet(data).createOrReplaceTempView("bench_events")
    ks = KeyedSQL(spark)
    ks.register("bench_counter", Counter, returns="n bigint, total double")
    ks.register("bench_aggregate", Aggregate, returns="n bigint, total double")
    engines = [e.name for e in available(features(spark))]
    w1 = (
        "SELECT user_id, ts, n, total FROM bench_events GROUP BY KEY user_id WITH STATE bench_counter(value) "
        "ORDER BY ts OPTIONS (engine = '{e}')"
    )
    w2 = (
        "SELECT user_id, n, total FROM bench_events GROUP BY KEY user_id WITH STATE bench_aggregate(value) "
        "OPTIONS (engine = '{e}')"
    )
    paths = {
        "W1": {
            "native Spark SQL (window)": lambda: spark.sql(
                "SELECT user_id, ts, count(*) OVER w AS n, sum(value) OVER w AS total FROM bench_events "
                "WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS UNBOUNDED PRECEDING)"
            ),
            **{f"ks.sql engine={e}": (lambda e=e: ks.sql(w1.format(e=e))) for e in engines},
        },
        "W2": {
            "native Spark SQL (GROUP BY)": lambda: spark.sql(
                "SELECT user_id, count(*) AS n, sum(value) AS total FROM bench_events GROUP BY user_id"
            ),
            **{f"ks.sql engine={e}": (lambda e=e: ks.sql(w2.format(e=e))) for e in engines},
        },
    }

    out: dict = {"pyspark": pyspark.__version__, "python": sys.version.split()[0], "workloads": {}}
    for workload, by_path in paths.items():
        expected = None
        results = {}
        for name, build in by_path.items():
            got = digest(build())  # apart from the timing: the rows are the native ones
            if expected is None:
                expected = got
            elif got != expected:
                raise SystemExit(f"{workload} {name}: output differs from native Spark SQL's ({got} vs {expected})")
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                build().write.format("noop").mode("overwrite").save()
                times.append(time.perf_counter() - t0)
            results[name] = min(times)
        out["workloads"][workload] = results
    spark.stop()
    return out


# ------------------------------------------------------------------ the driver
def _report(runs: dict[str, dict], repeat: int) -> str:
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Run {when}: `python bench/versions.py --spark {','.join(runs)} --repeat {repeat}` (fastest of {repeat} "
        f"per path), {KEYS:,} keys, {ROWS:,} rows, local[2], every path's whole output to the `noop` sink.",
        "",
        "| workload | path | "
        + " | ".join(f"Spark {r['pyspark']} (Python {r['python']})" for r in runs.values())
        + " |",
        "|---|---|" + "---|" * len(runs),
    ]
    for workload in ("W1", "W2"):
        names: list[str] = []
        for r in runs.values():
            names += [n for n in r["workloads"][workload] if n not in names]
        natives = {v: r["workloads"][workload][next(iter(r["workloads"][workload]))] for v, r in runs.items()}
        for name in names:
            cells = []
            for v, r in runs.items():
                t = r["workloads"][workload].get(name)
                cells.append("—" if t is None else f"{t:.2f} s ({t / natives[v]:.1f}x native)")
            lines.append(f"| {workload} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spark", default="3.5,4.3")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), f"ks-bench-versions-{KEYS}-{ROWS}"))
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(_child(args.repeat, args.data)), flush=True)
        return 0
    from pairs import pythons_for
    from venvs import make_venv

    runs = {}
    for spark in args.spark.split(","):
        python = "3.11" if "3.11" in pythons_for(spark) else pythons_for(spark)[0]
        print(f"[bench-versions] Spark {spark} / Python {python}: venv ...", flush=True)
        py = make_venv(spark, python, extras="spark", name=f"bench-spark{spark}-py{python}", log=subprocess.DEVNULL)
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
        env["PYSPARK_PYTHON"] = str(py)
        res = subprocess.run(
            [str(py), __file__, "--child", "--repeat", str(args.repeat), "--data", args.data],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if res.returncode or line is None:
            print(res.stdout[-3000:], res.stderr[-3000:])
            return 1
        runs[spark] = json.loads(line[len("RESULT ") :])
        print(f"[bench-versions] Spark {spark}: {runs[spark]['workloads']}", flush=True)
    section = _report(runs, args.repeat)
    text = REPORT.read_text()
    if START in text:
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = f"{head}{START}\n{section}\n{END}{tail}"
    else:
        text += f"\n## Across Spark versions (W1, W2 at 100k keys)\n\n{START}\n{section}\n{END}\n"
    REPORT.write_text(text)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

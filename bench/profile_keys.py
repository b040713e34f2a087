"""``make bench-profile``: the bulk engine's Python pass for W1 in-process, no Spark: what one
task's ``mapInArrow`` function costs per key and per row, against a function that does no work
on the same batches (W1's columns handed back) and the hand-written floor — and, with
``--profile``, where the time goes (cProfile, by function).

The batches are what a task gets: key-sorted Arrow batches of 10,000 rows (Spark's
``maxRecordsPerBatch``), W1's columns (``user_id`` string, ``ts`` timestamp, ``value`` double).
CPU time of the whole pass (every output batch built), best of ``--rounds``, each path in turn.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def batches(keys: int, per_key: int, batch_rows: int = 10_000) -> list:
    import pyarrow as pa

    n = keys * per_key
    users = [f"u{k}" for k in sorted(range(keys), key=str) for _ in range(per_key)]  # sorted as strings
    start = dt.datetime(2024, 1, 1)
    ts = [start + dt.timedelta(minutes=i % per_key) for i in range(n)]
    value = [((i * 7919) % 1000) / 10.0 for i in range(n)]
    out = []
    for s in range(0, n, batch_rows):
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(users[s : s + batch_rows], pa.string()),
                    pa.array(ts[s : s + batch_rows], pa.timestamp("us", tz="UTC")),
                    pa.array(value[s : s + batch_rows], pa.float64()),
                ],
                names=["user_id", "ts", "value"],
            )
        )
    return out


def bulk_program():
    from pyspark.sql import types as T

    from bench.workloads import Counter
    from spark_keyed_sql.engines.base import output_schema
    from spark_keyed_sql.engines.bulk.program import BulkProgram
    from spark_keyed_sql.runtime.plan import KeyedPlan, OrderSpec
    from spark_keyed_sql.runtime.spec import FunctionSpec

    src = T.StructType(
        [
            T.StructField("user_id", T.StringType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("value", T.DoubleType()),
        ]
    )
    spec = FunctionSpec.build("bench_counter", Counter, "n bigint, total double", {})
    plan = KeyedPlan(spec, ["user_id"], ["value"], [OrderSpec("ts")], passthrough=["ts"])
    return BulkProgram(plan, output_schema(src, plan), now_ms=0)


def _skeleton(runs, d, fresh, execute, event: bool):
    """The keys loop's walk with only some of its work: per key the attributes reset, per row
    (``event``) a dict built and (``execute``) the user's method called on it."""
    for c0, starts, ends in runs:
        for i, end in zip(starts, ends):
            d.update(fresh)
            while i < end:
                if event:
                    e = {"value": c0[i]}
                    if execute is not None:
                        execute(e)
                i += 1


def parts(program, bs, keys: int) -> dict[str, float]:
    """Where one pass's CPU time goes, in µs a key: the keys loop (``run_fresh_keys``, timed
    inside the pass) against the rest of the pass (Arrow batches in: key runs, columns as lists;
    output batches out); inside the loop, by ablation of a skeleton of the same walk over the same
    key runs (per key the attribute reset, per row nothing / an event dict / the event and
    ``execute``): what the walk, the events and the user's ``execute`` take, and the loop's own
    bookkeeping (the key's context and state check per key, the result check and append per row)
    as what is left."""
    from bench.workloads import Counter
    from spark_keyed_sql.engines.arrow_rows import fewer_collections, run_starts
    from spark_keyed_sql.runtime.runner import KeyedRunner

    inner = [0.0]
    original = KeyedRunner.run_fresh_keys

    def timed_loop(self, *args, **kw):
        t = time.process_time()
        try:
            return original(self, *args, **kw)
        finally:
            inner[0] += time.process_time() - t

    KeyedRunner.run_fresh_keys = timed_loop
    try:
        t = time.process_time()
        for _ in program(iter(bs)):
            pass
        total = time.process_time() - t
    finally:
        KeyedRunner.run_fresh_keys = original
    runs = []
    for b in bs:  # (key runs crossing a batch boundary are cut there: a few keys of 250k)
        starts = run_starts([b.column("user_id")], b.num_rows).tolist()
        runs.append((b.column("value").to_pylist(), starts, [*starts[1:], b.num_rows]))
    c = Counter()
    d, fresh = c.__dict__, {"n": 0, "total": 0.0}
    took = {}
    with fewer_collections():
        for name, event, execute in (("walk", False, None), ("events", True, None), ("execute", True, c.execute)):
            t = time.process_time()
            _skeleton(runs, d, fresh, execute, event)
            took[name] = time.process_time() - t
    us = 1e6 / keys
    return {
        "pass": total * us,
        "outside the loop (batches in and out)": (total - inner[0]) * us,
        "keys loop": inner[0] * us,
        "  walk (keys, rows, attribute reset)": took["walk"] * us,
        "  events (a dict a row)": (took["events"] - took["walk"]) * us,
        "  execute (user code)": (took["execute"] - took["events"]) * us,
        "  bookkeeping (context, checks, append)": (inner[0] - took["execute"]) * us,
    }


def timed(fn, bs, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        for _ in fn(iter(bs)):
            pass
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="250000x2,50000x10", help="KEYSxROWS_A_KEY, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile the bulk pass (top functions by own time)")
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    from bench.rounds import no_work_pass
    from bench.run import floor_pass

    program = bulk_program()
    for shape in a.shapes.split(","):
        keys, per_key = (int(x) for x in shape.split("x"))
        bs = batches(keys, per_key)
        rows = keys * per_key
        times = {}
        for _ in range(a.rounds):  # alternating, one round each, best kept
            for name, fn in (("no-work", no_work_pass), ("floor", floor_pass), ("bulk", program)):
                t = timed(fn, bs, 1)
                times[name] = min(times.get(name, t), t)
        over = times["bulk"] - times["no-work"]
        print(
            f"W1 {keys:,} keys x {per_key} rows ({rows:,} rows, CPU s, best of {a.rounds}): "
            + ", ".join(f"{k} {v:.3f}" for k, v in times.items())
            + f" | bulk over no-work: {over / keys * 1e6:.2f} us a key, {over / rows * 1e6:.3f} us a row"
            + f" | floor over no-work: {(times['floor'] - times['no-work']) / keys * 1e6:.2f} us a key",
            flush=True,
        )
        split = min((parts(program, bs, keys) for _ in range(a.rounds)), key=lambda p: p["pass"])
        print(
            "  where a key's time goes (us a key, the round with the fastest pass): "
            + "; ".join(f"{k.strip()} {v:.2f}" for k, v in split.items())
        )
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in program(iter(bs)):
                pass
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            print(s.getvalue())


if __name__ == "__main__":
    main()

"""`make crash`: the full crash run, 20+ SIGKILLs per engine at named points (inside lease writes
too) and random times over incremental ks.run batches, more over a continuous ks.start stream,
then the figures written to docs/reliability.md (between its markers), after every run so a loop
cut short leaves what it did. ``--loops N`` repeats it on N inputs (CRASH_ARGS="--loops 3" for
200+ kills); ``--lock FILE`` holds a flock only around each run (a shared machine)."""

import argparse
import contextlib
import fcntl
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from crash.harness import run  # noqa: E402

PLANS = {
    # one spec per incarnation, in order: each must fire, or that incarnation runs every file to
    # the end and the rest of the plan has nothing left to interrupt (the run fails then).
    # before_rebuild fires on even incarnations (they start with an empty local state
    # directory) when the checkpoint holds a committed batch, so each comes after a driver point
    # at its 2nd hit (one batch committed first); compaction runs every 3 batches
    "bulk": [
        "processing:3",
        "state_written:2",
        "before_rebuild:1",
        "sink_write:2",
        "before_rebuild:1",
        "after_sink:2",
        "before_rebuild:1",
        "local_state_written:3",
        "compaction_written:1",
        "processing:3",
        "after_compaction:1",
        "state_written:1",
        "local_state_written:2",
        "sink_write:1",
        "after_sink:1",
        "processing:5",
        # inside lease writes (a heartbeat a second): a renewal before its move, a start between
        # its lease's create and write, twice each
        "lease_renewing:2",
        "lease_created:1",
        "lease_renewing:4",
        "lease_created:1",
    ],
    # one hit per key per batch: 24 files x up to 40 keys
    # counted from 0 in each incarnation (about one hit per key per batch): small, varied n
    "tws": [f"processing:{n}" for n in (10, 25, 40, 55) * 3 + (15, 30)]
    + ["lease_renewing:2", "lease_created:1", "lease_renewing:4", "lease_created:1"],
    # engine bulk with every micro-batch planned as Spark SQL (docs/native.md): no Python worker,
    # so no processing or local-store points; the step's own protocol, its sink, compaction
    "bulk-native": [
        "state_written:2",
        "sink_write:2",
        "after_sink:2",
        "compaction_written:1",
        "after_compaction:1",
        "state_written:1",
        "sink_write:1",
        "after_sink:1",
        "lease_renewing:2",
        "lease_created:1",
    ],
}
RANDOM = {"bulk": 8, "tws": 8, "bulk-native": 6}
# the continuous ks.start stream: every named point once more, and random kills
START_PLANS = {
    "bulk": ["processing:2", "state_written:2", "sink_write:3", "after_sink:3", "lease_renewing:3", "lease_created:1"],
    "tws": ["processing:10", "processing:30", "processing:50", "lease_renewing:3", "lease_created:1"],
    "bulk-native": ["state_written:2", "sink_write:3", "after_sink:3", "lease_renewing:3", "lease_created:1"],
}
START_RANDOM = 4
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")
BEGIN, END = "<!-- crash-results:begin -->", "<!-- crash-results:end -->"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loops", type=int, default=1, help="full runs in a row, each on its own input (seed)")
    ap.add_argument("--doc", default=DOC, help="the file whose crash-results markers get the figures")
    ap.add_argument("--lock", help="a flock file held around each run only (others run in between)")
    ap.add_argument("--engines", default=",".join(PLANS), help="the engines to run, comma-separated (default: all)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    unknown = sorted(set(engines) - set(PLANS))
    if unknown:
        ap.error(f"unknown engine(s) {unknown}: known are {sorted(PLANS)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows: list[str] = []
    totals = Counter()
    runs = [(e, "run", PLANS[e], RANDOM[e], 24) for e in engines] + [
        (e, "start", START_PLANS[e], START_RANDOM, 12) for e in engines
    ]
    failures: list[str] = []
    for loop in range(args.loops):
        for engine, mode, plan, random_kills, files in runs:
            t0 = time.time()
            query = "`ks.run` (incremental)" if mode == "run" else "`ks.start` (continuous)"
            with _locked(args.lock):
                try:
                    r = run(
                        engine,
                        plan,
                        files=files,
                        keys=40,
                        per_file=50,
                        seed=7 + loop,
                        random_kills=random_kills,
                        timeout=600,
                        mode=mode,
                    )
                except AssertionError as exc:  # an incarnation failed or hung (e.g. a refused restart)
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    failures.append(f"loop {loop + 1} {engine} {mode}: {first}")
                    totals["failed runs"] += 1
                    rows.append(f"| {loop + 1} | {engine} | {query} | FAILED: {first[:200]} | | | | | | |")
                    print(rows[-1], f"({time.time() - t0:.0f} s)", flush=True)
                    _write(args.doc, started, loop, args.loops, len(runs), rows, totals, failures)
                    continue
            kills = ", ".join(f"{k}: {v}" for k, v in sorted(r.kills.items()))
            rows.append(
                f"| {loop + 1} | {engine} | {query} | {kills} (total {sum(r.kills.values())}) | {r.restarts} | "
                f"{r.rows_expected} | {r.rows_out} | {r.lost} | {r.duplicated} | {r.wrong_state} |"
            )
            print(rows[-1], f"({time.time() - t0:.0f} s)", flush=True)
            totals.update(
                kills=sum(r.kills.values()),
                lease_kills=sum(v for k, v in r.kills.items() if k.startswith("lease_")),
                restarts=r.restarts,
                lost=r.lost,
                duplicated=r.duplicated,
                wrong=r.wrong_state,
                runs=1,
            )
            planned = Counter(spec.split(":")[0] for spec in plan)
            missed = {p: n - r.kills.get(p, 0) for p, n in planned.items() if r.kills.get(p, 0) < n}
            if missed:
                failures.append(f"loop {loop + 1} {engine} {mode}: planned kills that did not happen: {missed}")
            _write(args.doc, started, loop, args.loops, len(runs), rows, totals, failures)
    if failures:
        sys.exit("\n".join(failures))


@contextlib.contextmanager
def _locked(path: str | None):
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write(
    doc: str, started: str, loop: int, loops: int, per_loop: int, rows: list[str], totals: Counter, failures: list
) -> None:
    """The figures so far between the markers (a loop cut short leaves what it did, said so)."""
    done = totals["runs"] + totals["failed runs"]
    lines = [
        f"Run started {started} (`make crash`, {loops} loop(s) of {per_loop} runs; "
        f"{done} run(s) done at {time.strftime('%H:%M UTC', time.gmtime())}"
        + ("" if done == loops * per_loop else ", partial")
        + "):",
        "",
        f"**Totals: {totals['kills']} kills ({totals['lease_kills']} inside lease writes), {totals['restarts']} "
        f"restarts, {totals['lost']} lost, {totals['duplicated']} duplicated, {totals['wrong']} keys with wrong "
        f"state, {totals['failed runs']} failed runs (a refused or failed restart fails its run).**",
        "",
        "| loop | engine | query | kills per point | restarts | rows expected | rows out | lost | duplicated "
        "| keys with wrong state |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    if failures:
        lines += ["", "Failures:", "", *[f"- {f}" for f in failures]]
    text = open(doc).read()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    with open(doc, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)


if __name__ == "__main__":
    main()

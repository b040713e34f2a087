"""`make crash`: the full crash run, 20+ SIGKILLs per engine at named points and random
times over incremental ks.run batches, more over a continuous ks.start stream, then the
figures written to docs/reliability.md (between its markers)."""

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
    ],
    # one hit per key per batch: 24 files x up to 40 keys
    # counted from 0 in each incarnation (about one hit per key per batch): small, varied n
    "tws": [f"processing:{n}" for n in (10, 25, 40, 55) * 3 + (15, 30)],
}
RANDOM = {"bulk": 8, "tws": 8}
# the continuous ks.start stream: every named point once more, and random kills
START_PLANS = {
    "bulk": ["processing:2", "state_written:2", "sink_write:3", "after_sink:3"],
    "tws": ["processing:10", "processing:30", "processing:50"],
}
START_RANDOM = 4
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")
BEGIN, END = "<!-- crash-results:begin -->", "<!-- crash-results:end -->"


def main() -> None:
    lines = [
        f"Full run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (`make crash`):",
        "",
        "| engine | query | kills per point | restarts | rows expected | rows out | lost | duplicated "
        "| keys with wrong state |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    runs = [(e, "run", p, RANDOM[e], 24) for e, p in PLANS.items()] + [
        (e, "start", p, START_RANDOM, 12) for e, p in START_PLANS.items()
    ]
    for engine, mode, plan, random_kills, files in runs:
        t0 = time.time()
        r = run(engine, plan, files=files, keys=40, per_file=50, random_kills=random_kills, timeout=600, mode=mode)
        kills = ", ".join(f"{k}: {v}" for k, v in sorted(r.kills.items()))
        query = "`ks.run` (incremental)" if mode == "run" else "`ks.start` (continuous)"
        lines.append(
            f"| {engine} | {query} | {kills} (total {sum(r.kills.values())}) | {r.restarts} | {r.rows_expected} | "
            f"{r.rows_out} | {r.lost} | {r.duplicated} | {r.wrong_state} |"
        )
        print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
        planned = Counter(spec.split(":")[0] for spec in plan)
        missed = {p: n - r.kills.get(p, 0) for p, n in planned.items() if r.kills.get(p, 0) < n}
        if missed:
            sys.exit(f"{engine} {mode}: planned kills that did not happen (the plan no longer fits the run): {missed}")
    text = open(DOC).read()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    with open(DOC, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)


if __name__ == "__main__":
    main()

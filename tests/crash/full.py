"""`make crash`: the full crash run, 20+ SIGKILLs per engine at named points and random
times, then the figures written to docs/reliability.md (between its markers)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from crash.harness import run  # noqa: E402

PLANS = {
    "bulk": [f"{p}:{n}" for n in (1, 2, 3) for p in ("processing", "state_written", "sink_write", "after_sink")] + ["processing:7", "after_sink:5"],
    # one hit per key per batch: 24 files x up to 40 keys
    # counted from 0 in each incarnation (about one hit per key per batch): small, varied n
    "tws": [f"processing:{n}" for n in (10, 25, 40, 55) * 3 + (15, 30)],
}
RANDOM = {"bulk": 8, "tws": 8}
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")
BEGIN, END = "<!-- crash-results:begin -->", "<!-- crash-results:end -->"


def main() -> None:
    lines = [f"Full run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (`make crash`):", "",
             "| engine | kills per point | restarts | rows expected | rows out | lost | duplicated | keys with wrong state |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for engine, plan in PLANS.items():
        t0 = time.time()
        r = run(engine, plan, files=24, keys=40, per_file=50, random_kills=RANDOM[engine], timeout=600)
        kills = ", ".join(f"{k}: {v}" for k, v in sorted(r.kills.items()))
        lines.append(f"| {engine} | {kills} (total {sum(r.kills.values())}) | {r.restarts} | {r.rows_expected} | {r.rows_out} | "
                     f"{r.lost} | {r.duplicated} | {r.wrong_state} |")
        print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    text = open(DOC).read()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    with open(DOC, "w") as f:
        f.write(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)


if __name__ == "__main__":
    main()

"""``make test-matrix``: the whole suite on every supported (Spark minor, Python) pair this
machine has, each in a fresh venv of its own, one pair at a time. The outcome of each pair goes
to docs/compatibility-matrix.json and the table between the markers of docs/compatibility.md.

    python tools/matrix.py                        # every pair (hours on 2 cores)
    python tools/matrix.py --spark 3.5,4.0        # those Spark minors
    python tools/matrix.py --python 3.12          # those Pythons
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pairs import PAIRS, REFERENCE, SPARK, venv_name  # noqa: E402
from venvs import DEV_PINS, ROOT, VENVS, find_python, make_venv  # noqa: E402

__all__ = ["main", "write_table"]

RESULTS = ROOT / "docs" / "compatibility-matrix.json"
PAGE = ROOT / "docs" / "compatibility.md"
START, END = "<!-- matrix:start -->", "<!-- matrix:end -->"


def _versions(py: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, sys; print(sys.version.split()[0]); "
        "[print(m.version(p)) for p in ('pyspark', 'pandas', 'pyarrow', 'numpy', 'sqlglot')]"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(["python", "pyspark", "pandas", "pyarrow", "numpy", "sqlglot"], out))


def _counts(junit: Path) -> dict[str, int]:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"{c.get('classname')}::{c.get('name')}"
        for s in suites
        for c in s.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    total["failed_tests"] = failed  # type: ignore[assignment]
    return total


def run_pair(spark: str, python: str) -> dict:
    name = venv_name(spark, python)
    t0 = time.time()
    log_path = VENVS / f"matrix-{name}.log"
    junit = VENVS / f"matrix-{name}.xml"
    VENVS.mkdir(exist_ok=True)
    with open(log_path, "w") as log:
        py = make_venv(spark, python, extras="dev", pins=DEV_PINS.get(spark), log=log)
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
        env["PYSPARK_PYTHON"] = str(py)
        code = subprocess.run(
            [
                str(py),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "not slow and not cluster",
                f"--junitxml={junit}",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    result = {
        "spark": spark,
        "python": python,
        "exit_code": code,
        "minutes": round((time.time() - t0) / 60, 1),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": _versions(py),
    }
    if junit.exists():
        result.update(_counts(junit))
    return result


def write_table(results: list[dict]) -> None:
    lines = [
        "| Spark | Python | passed | failed | skipped (not on this Spark, or by marker) "
        "| PySpark, pandas, pyarrow, numpy | run |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(
        results, key=lambda r: (tuple(map(int, r["spark"].split("."))), tuple(map(int, r["python"].split("."))))
    ):
        v = r.get("versions", {})
        failed = r.get("failures", 0) + r.get("errors", 0)
        lines.append(
            f"| {r['spark']} | {r['python']} | {r.get('passed', '?')} | {failed if failed else 0}"
            f"{' ❌' if r['exit_code'] else ''} | {r.get('skipped', '?')} | {v.get('pyspark')}, {v.get('pandas')}, "
            f"{v.get('pyarrow')}, {v.get('numpy')} | {r['date']}, {r['minutes']} min |"
        )
    missing = [(s, p) for s, p in PAIRS if not any(r["spark"] == s and r["python"] == p for r in results)]
    others = [f"{s}/{p}" for s, p in missing if (s, p) != REFERENCE]
    if REFERENCE in missing:  # CI's `make test` runs the whole suite there at every stop
        lines.append(
            f"\n{REFERENCE[0]} / {REFERENCE[1]}, the reference pair, is not run by `make test-matrix`: CI's "
            "`make test` runs the whole suite on it for every change that lands."
        )
    if others:
        lines.append(f"\nNot run yet: {', '.join(others)}.")
    text = PAGE.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    PAGE.write_text(f"{head}{START}\n" + "\n".join(lines) + f"\n{END}{tail}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spark", help="comma-separated Spark minors (default: all)")
    ap.add_argument("--python", help="comma-separated Python minors (default: all)")
    args = ap.parse_args(argv)
    sparks = args.spark.split(",") if args.spark else list(SPARK)
    pythons = args.python.split(",") if args.python else None
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    failed = 0
    for spark, python in PAIRS:
        if spark not in sparks or (pythons and python not in pythons):
            continue
        if find_python(python) is None:
            print(f"[matrix] Spark {spark} / Python {python}: no Python {python} on this machine, skipped", flush=True)
            continue
        print(f"[matrix] Spark {spark} / Python {python} ...", flush=True)
        r = run_pair(spark, python)
        failed += r["exit_code"] != 0
        print(
            f"[matrix] Spark {spark} / Python {python}: {r.get('passed')} passed, "
            f"{r.get('failures', 0) + r.get('errors', 0)} failed, {r.get('skipped')} skipped in {r['minutes']} min",
            flush=True,
        )
        for t in r.get("failed_tests", [])[:20]:
            print(f"           FAILED {t}", flush=True)
        results = [x for x in results if (x["spark"], x["python"]) != (spark, python)] + [r]
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        write_table(results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

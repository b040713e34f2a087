"""CI's smoke tier (``make test`` runs it after the full suite on the reference pair): on every
other Spark minor, a fresh venv from the package index (pip's cache makes a second build cheap),
installed as a user installs (``pip install pyspark==X.Y.Z``, then this package with no other
pin: pip brings the newest pandas / pyarrow / NumPy they allow, pandas 3 on Python 3.11+),
runs the README's Quick start as pasted and tests/smoke/test_smoke.py; the oldest pair (Spark
3.5, Python 3.10) with every dependency at its lower bound (``lowest_pins``: what pyproject.toml claims it
runs on), which also installs the built wheel alone and runs its demo (tests/test_packaging.py;
the reference pair's full run does on the newest Spark); and a venv with no PySpark at all runs
KeyedTester (tests/smoke/test_without_pyspark.py).

    python tools/smoke.py              # every smoke pair
    python tools/smoke.py 3.5 4.1      # those Spark minors only
    python tools/smoke.py --all-pythons  # every supported (Spark, Python) pair, installed the same way
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pairs import NEWEST, OLDEST, PAIRS, SMOKE  # noqa: E402
from venvs import ROOT, VENVS, lowest_pins, make_venv  # noqa: E402

__all__ = ["main"]


def _run(py: Path, args: list[str], log) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PYSPARK_PYTHON"] = str(py)
    # SMOKE_LOCK=<file>: each test run holds that flock (a machine shared with other Spark jobs)
    lock = ["flock", os.environ["SMOKE_LOCK"]] if os.environ.get("SMOKE_LOCK") else []
    return subprocess.run(
        [*lock, str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    ).returncode


LOWEST = f"Spark {OLDEST[0]} / Python {OLDEST[1]}, lowest dependencies"


def _venv(name: str, spark: str | None, python: str) -> str:
    if spark is None:
        return "no-pyspark"
    return f"{'lowest-' if name == LOWEST else ''}spark{spark}-py{python}"


def main(argv: list[str]) -> int:
    every = "--all-pythons" in argv  # every supported pair, not CI's selection
    wanted = set(argv) - {"--all-pythons"}
    VENVS.mkdir(exist_ok=True)
    pairs = [(s, p) for s, p in (PAIRS if every else SMOKE) if not wanted or s in wanted]
    jobs = [(f"Spark {s} / Python {p}", s, p) for s, p in pairs]
    if not wanted or OLDEST[0] in wanted:
        jobs.append((LOWEST, *OLDEST))
    if not wanted:
        jobs.append(("no PySpark (KeyedTester)", None, NEWEST[1]))
    # the next venv is built (pip: downloads, wheels) while the tests of the one before run
    builder = ThreadPoolExecutor(max_workers=1)
    logs = {name: open(VENVS / f"smoke-{_venv(name, s, p)}.log", "w") for name, s, p in jobs}

    def build(name: str, spark: str | None, python: str) -> Path:
        if spark is None:
            return make_venv(None, python, extras="test", name="nospark", log=logs[name])
        packages = lowest_pins() if name == LOWEST else None
        return make_venv(
            spark, python, extras="spark,test", name=_venv(name, spark, python), packages=packages, log=logs[name]
        )

    futures = {name: builder.submit(build, name, s, p) for name, s, p in jobs}
    results = []
    for name, spark, _python in jobs:
        t0 = time.time()
        log = logs[name]
        try:
            py = futures[name].result()
        except Exception as exc:  # noqa: BLE001 - reported with the rest
            print(f"[smoke] {name}: venv FAILED: {exc}", flush=True)
            results.append((name, 1, log.name))
            continue
        if spark is None:
            code = _run(py, ["--noconftest", "tests/smoke/test_without_pyspark.py"], log)
        else:
            tests = ["tests/smoke/test_smoke.py", "tests/test_readme.py"]
            # the lowest-bounds job only: the wheel beside the oldest PySpark, pandas, pyarrow and
            # NumPy it claims (test_packaging pins those four); the newest Spark's wheel is the
            # reference pair's full run
            if name == LOWEST:
                tests.append("tests/test_packaging.py")
            elif spark == OLDEST[0]:  # (the oldest Spark's log lines and logger names differ)
                tests.append("tests/test_local_quiet.py")
            code = _run(py, ["-m", "not slow and not cluster", *tests], log)
        log.flush()
        results.append((name, code, log.name))
        print(f"[smoke] {name}: {'passed' if code == 0 else 'FAILED'} (tests {time.time() - t0:.0f} s)", flush=True)
    builder.shutdown()
    failed = [r for r in results if r[1] != 0]
    for name, _, log_path in failed:
        print(f"\n[smoke] {name} FAILED; the end of {log_path}:")
        print("".join(Path(log_path).read_text().splitlines(keepends=True)[-60:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

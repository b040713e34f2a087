"""CI's smoke tier (``make test`` runs it after the full suite on the reference pair): on every
other Spark minor, a fresh venv from the package index (pip's cache makes a second build cheap)
runs the README's Quick start as pasted and tests/smoke/test_smoke.py; the oldest and the newest
pair also install the built wheel alone and run its demo (tests/test_packaging.py); and a venv
with no PySpark at all runs KeyedTester (tests/smoke/test_without_pyspark.py).

    python tools/smoke.py              # every smoke pair
    python tools/smoke.py 3.5 4.1      # those Spark minors only
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pairs import NEWEST, OLDEST, SMOKE  # noqa: E402
from venvs import ROOT, VENVS, make_venv  # noqa: E402

__all__ = ["main"]


def _run(py: Path, args: list[str], log) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PYSPARK_PYTHON"] = str(py)
    return subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                          stdout=log, stderr=subprocess.STDOUT).returncode


def main(argv: list[str]) -> int:
    wanted = set(argv)
    VENVS.mkdir(exist_ok=True)
    results = []
    for spark, python in SMOKE:
        if wanted and spark not in wanted:
            continue
        t0 = time.time()
        log_path = VENVS / f"smoke-spark{spark}-py{python}.log"
        with open(log_path, "w") as log:
            print(f"[smoke] Spark {spark} / Python {python}: venv ...", flush=True)
            py = make_venv(spark, python, extras="spark,test", log=log)
            tests = ["tests/smoke/test_smoke.py", "tests/test_readme.py"]
            if (spark, python) in (OLDEST, NEWEST):
                tests.append("tests/test_packaging.py")
            code = _run(py, ["-m", "not slow and not cluster", *tests], log)
        results.append((f"Spark {spark} / Python {python}", code, time.time() - t0, log_path))
        print(f"[smoke] Spark {spark} / Python {python}: {'passed' if code == 0 else 'FAILED'} in {time.time() - t0:.0f} s",
              flush=True)
    if not wanted:
        t0 = time.time()
        log_path = VENVS / "smoke-no-pyspark.log"
        with open(log_path, "w") as log:
            py = make_venv(None, NEWEST[1], extras="test", name="nospark", log=log)
            code = _run(py, ["--noconftest", "tests/smoke/test_without_pyspark.py"], log)
        results.append(("no PySpark (KeyedTester)", code, time.time() - t0, log_path))
        print(f"[smoke] no PySpark: {'passed' if code == 0 else 'FAILED'} in {time.time() - t0:.0f} s", flush=True)
    failed = [r for r in results if r[1] != 0]
    for name, _, _, log_path in failed:
        print(f"\n[smoke] {name} FAILED; the end of {log_path}:")
        print("".join(log_path.read_text().splitlines(keepends=True)[-60:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

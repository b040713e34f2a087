"""Virtual environments for the matrix and the smoke tier: one per (Spark minor, Python) pair,
made fresh each time and filled from pip's cache (a second build of the same pair downloads
and compiles nothing), never kept by hand.

    python tools/venvs.py 4.1 3.12            # -> .venvs/spark4.1-py3.12, prints its python
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pairs import SPARK, venv_name  # noqa: E402

__all__ = ["DEV_PINS", "ROOT", "VENVS", "find_python", "lowest_pins", "make_venv"]

ROOT = Path(__file__).resolve().parents[1]
# the matrix's venvs take the `dev` extra, whose `connect` extra makes PySpark 3.5 cap NumPy
# below 2; pyarrow 26 needs NumPy 2 without declaring it, so that stack adds pyarrow<26
# (docs/compatibility.md). A user's install (the smoke tier) takes no pin at all.
DEV_PINS: dict[str, list[str]] = {"3.5": ["pyarrow<26"]}
VENVS = ROOT / ".venvs"
# NumPy is not a dependency of ours; the lowest-bounds venv takes the one Databricks 14.3 LTS
# ships beside pandas 1.5.3 and pyarrow 8.0 (pyarrow 8 has no wheels past Python 3.10)
LOWEST_NUMPY = "numpy==1.23.5"


def lowest_pins() -> list[str]:
    """Each dependency in pyproject.toml pinned to its lower bound, plus ``LOWEST_NUMPY``: the
    oldest stack the package says it runs on, which the smoke tier installs and runs."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        name, sep, bounds = dep.partition(">=")
        if not sep:
            raise ValueError(f"pyproject.toml: dependency {dep!r} has no lower bound (>=)")
        pins.append(f"{name.strip()}=={bounds.split(',')[0].split(';')[0].strip()}")
    return pins + [LOWEST_NUMPY]


def find_python(minor: str) -> str | None:
    """An interpreter of Python ``minor`` ("3.12") on this machine: on the PATH, or pyenv's."""
    found = shutil.which(f"python{minor}")
    candidates = [found] if found else []
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", f"python{minor}")), reverse=True)
    for c in candidates:
        try:
            out = subprocess.run(
                [c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == minor:
            return c
    return None


def make_venv(
    spark: str | None,
    python: str,
    *,
    extras: str = "dev",
    name: str | None = None,
    constraints: str | None = None,
    packages: list[str] | None = None,
    pins: list[str] | None = None,
    log=None,
) -> Path:
    """A fresh venv with PySpark ``spark`` (a minor: the newest patch; None: no PySpark at all),
    this project installed editable with ``extras`` in a second pip call (a user's order), and
    ``pins`` and ``packages`` beside it (pip keeps the PySpark installed: the extras' ranges
    hold it). Returns its python. ``constraints``: a pip constraints file."""
    interpreter = find_python(python)
    if interpreter is None:
        raise RuntimeError(f"no Python {python} on this machine (pyenv versions)")
    env_dir = VENVS / (name or venv_name(spark or "none", python))
    if env_dir.exists():
        shutil.rmtree(env_dir)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([interpreter, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True, stdout=log, stderr=log)
    if spark is not None:
        # as a user installs it: `pip install pyspark==X.Y.Z` first (or the platform has it),
        # then this package, which keeps that PySpark and brings the newest pandas / pyarrow
        # they allow; ``pins`` only where a stack needs one (DEV_PINS)
        subprocess.run(pip + [f"pyspark=={SPARK[spark]}"], check=True, stdout=log, stderr=log)
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    wanted = ["-e", target] + list(pins or []) + list(packages or [])
    if constraints:
        wanted += ["-c", constraints]
    subprocess.run(pip + wanted, check=True, stdout=log, stderr=log)
    return py


if __name__ == "__main__":
    spark_arg, python_arg = sys.argv[1], sys.argv[2]
    print(make_venv(None if spark_arg == "none" else spark_arg, python_arg))

"""The built wheel works alone: installed into a fresh venv (no access to this source tree),
its demo runs on the packaged sample data and its CLI answers --version and runs a SQL file.

About 60 s here, measured on the shared 2-core machine (wheel 3 s, venv + install of the
dependencies from the local pip cache ~20 s, the demo and the CLI side by side ~35 s), so it
stays in the CI tier."""

import csv
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_packaged_events_are_the_examples_events():
    """The demo's data (spark_keyed_sql/data) is the file sql_examples/README.md describes."""
    assert (ROOT / "spark_keyed_sql" / "data" / "events.csv").read_bytes() == (
        ROOT / "sql_examples" / "data" / "events.csv"
    ).read_bytes()


def test_metadata_says_license_and_python():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and "Apache License" in (ROOT / "LICENSE").read_text()
    lowest = re.fullmatch(r">=3\.(\d+)", meta["requires-python"]).group(1)
    versions = sorted(
        int(c.rsplit(".", 1)[1])
        for c in meta["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert versions[0] == int(lowest), "the classifiers start at requires-python"
    assert (ROOT / "CHANGELOG.md").read_text().count(meta["version"]) >= 1


def _clean_env(tmp: Path) -> dict:
    keep = {
        k: os.environ[k]
        for k in ("PATH", "HOME", "JAVA_HOME", "LANG", "PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE")
        if k in os.environ
    }
    return keep | {"TMPDIR": str(tmp)}


def test_wheel_installs_alone_and_runs_demo_and_cli(tmp_path):
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs Java")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(dist)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = dist.glob("spark_keyed_sql-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "spark_keyed_sql/data/events.csv" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = _clean_env(tmp_path)
    # the `spark` extra brings PySpark; the versions of this test run's own environment are
    # pinned (pip takes them from its cache), so the wheel runs beside the Spark under test
    pins = [f"{name}=={metadata.version(name)}" for name in ("pyspark", "pandas", "pyarrow", "numpy")]
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", f"{wheel}[spark]", *pins],
        check=True,
        timeout=900,
        env=env,
        capture_output=True,
    )
    work = tmp_path / "elsewhere"  # not the source tree: only the installed package is importable
    work.mkdir()

    version = subprocess.run(
        [str(env_dir / "bin" / "spark-keyed-sql"), "--version"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    expected_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version.returncode == 0 and version.stdout.strip() == f"spark-keyed-sql {expected_version}", version

    # the oracle: user_01's running count and total over the sample events, by hand
    with open(ROOT / "sql_examples" / "data" / "events.csv") as f:
        mine = sorted((r for r in csv.DictReader(f) if r["user_id"] == "user_01"), key=lambda r: r["ts"])
    count, total = len(mine), round(sum(float(r["value"]) for r in mine), 2)

    sql = work / "count.sql"
    data = next((env_dir / "lib").glob("python3*/site-packages/spark_keyed_sql/data/events.csv"))
    sql.write_text(
        "-- udf: session_counter = spark_keyed_sql.demo:UserSessionFunction "
        "returns session_count bigint, total_value double\n"
        f"CREATE TEMPORARY VIEW events USING csv OPTIONS (path '{data}', header 'true', inferSchema 'true');\n"
        "SELECT user_id, s.session_count, s.total_value FROM events\n"
        "GROUP BY KEY user_id WITH STATE session_counter(value) AS s ORDER BY ts\n"
        "HAVING user_id = 'user_01' ORDER BY session_count DESC LIMIT 1\n"
    )
    # the demo and the CLI side by side: two Spark start-ups overlap
    procs = {
        name: subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in (
            ("demo", [str(py), "-m", "spark_keyed_sql.demo"]),
            ("cli", [str(env_dir / "bin" / "spark-keyed-sql"), "run", str(sql)]),
        )
    }
    done = {name: p.communicate(timeout=600) + (p.returncode,) for name, p in procs.items()}
    for name, (stdout, stderr, code) in done.items():
        assert code == 0, f"{name}: {stdout}{stderr[-3000:]}"
        assert re.search(rf"\|\s*user_01\s*\|\s*{count}\s*\|\s*{total}\s*\|", stdout), (name, stdout)

    demo = done["demo"][0]
    assert "site-packages" in demo  # it read the packaged data
    used = re.search(r"on engine '(\w+)'", demo).group(1)
    heading = next(ln for ln in demo.splitlines() if ln.startswith("GROUP BY KEY ... WITH STATE for user_01"))
    assert used in heading and ("transformWithState" in heading) == (used == "tws"), heading

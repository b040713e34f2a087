"""KeyedSQL through Spark Connect: a server started with docs/operations.md's command (from the
installed pyspark's sbin/start-connect-server.sh), a client session in a child process running
the supported scenarios against a plain-Python oracle, and the documented refusals."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import progress_lines as progress
import pytest
from standalone import _free_port
from test_cluster import make_data, oracle

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    block = re.search(
        r"### Spark Connect.*?```bash\n(.*?)```", (ROOT / "docs" / "operations.md").read_text(), re.S
    ).group(1)
    port = _free_port()
    logs = tmp_path_factory.mktemp("connect-server")
    env = dict(os.environ, SPARK_LOG_DIR=str(logs), SPARK_PID_DIR=str(logs), SPARK_IDENT_STRING=f"ks{port}")
    script = block.replace("15002", str(port))
    progress.note("starting a Spark Connect server ...")
    start = subprocess.run(["bash", "-ec", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stderr
    stop = script.split("\n")[0] + '\n"$SPARK_HOME/sbin/stop-connect-server.sh"\n'
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline, "Connect server did not start: " + "".join(
                    p.read_text() for p in logs.glob("*.out")
                )
                time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(["bash", "-ec", stop], cwd=ROOT, env=env, capture_output=True, timeout=120)


def test_scenarios_through_spark_connect(connect_url, tmp_path):
    frames = make_data(tmp_path / "data")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    res = subprocess.run(
        [sys.executable, str(HERE / "connect_scenarios.py"), connect_url, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stderr[-4000:]
    got = json.loads(line[len("RESULT ") :])
    assert got["session"].startswith("pyspark.sql.connect")
    batch_rows, _ = oracle(frames["a"])
    all_rows, all_state = oracle(pd.concat([frames["a"], frames["b"]]))
    assert got["batch_bulk"] == batch_rows
    assert got["batch_tws"] == batch_rows
    assert got["table_function"] == sorted([u, n, t] for u, _, n, t in batch_rows)
    assert got["run"] == all_rows and got["state"] == all_state and got["engine"] == "tws"
    assert got["start"] == all_rows
    assert (
        "engine 'bulk' runs a stream through foreachBatch" in got["bulk_stream"]
        and "KeyedQueryError" in got["bulk_stream"]
    )
    assert "not supported on Spark Connect" in got["migrate"] and "MigrationError" in got["migrate"]


def test_cli_with_a_connect_master(connect_url):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_keyed_sql.cli",
            "--master",
            connect_url,
            "run",
            "sql_examples/sage/user_sessions.sql",
            "--limit",
            "1000",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    events = pd.read_csv(ROOT / "sql_examples" / "data" / "events.csv")
    printed = [line.split("|")[1:-1] for line in res.stdout.splitlines() if line.startswith("| ")][1:]
    got = sorted((r[0].strip(), int(r[2]), round(float(r[3]), 2)) for r in printed)
    expected = []
    for user, g in events.sort_values("ts").groupby("user_id"):
        total = 0.0
        for i, v in enumerate(g["value"], 1):
            total = round(total + float(v), 2)
            expected.append((user, i, total))
    assert got == sorted(expected)

"""KeyedSQL through Spark Connect, as a Databricks serverless user meets it: the client is
``pyspark-client`` in a venv of its own (no classic pyspark, no py4j, no Java on its PATH) and
this package; the server is started with docs/operations.md's command (from the classic
PySpark) plus a ``viewfs://`` mount table that only the server knows. Every input, checkpoint
and output of the tests lives under that mount, so a client that touched a checkpoint file
itself could not even resolve its name. Every entry point is compared with a plain-Python
oracle; then the faults: the client SIGKILLed mid ``ks.run`` and the server restarted."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import progress_lines as progress
import pytest
from standalone import _free_port
from test_cluster import make_data, oracle

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from venvs import make_venv  # noqa: E402

pytestmark = pytest.mark.cluster

CLIENT = "4.2.0"  # pyspark-client: the newest on the index (the server is the classic PySpark 4.3)


class Server:
    """A Connect server on loopback with ``viewfs://<mount>/ks`` -> ``disk``."""

    def __init__(self, disk: Path, logs: Path, python: str | None = None):
        """``python``: the interpreter (and so the PySpark) the server runs, instead of the
        command's ``.venv/bin/python``."""
        self.disk, self.logs = disk, logs
        self.port = _free_port()
        self.mount = f"m{uuid.uuid4().hex[:8]}"
        self.root = f"viewfs://{self.mount}/ks"
        block = re.search(
            r"### Spark Connect.*?```bash\n(.*?)```", (ROOT / "docs" / "operations.md").read_text(), re.S
        ).group(1)
        mount = f"--conf spark.hadoop.fs.viewfs.mounttable.{self.mount}.link./ks={disk.as_uri()}"
        self.script = block.replace("15002", f"{self.port} {mount}")
        if python is not None:
            self.script = re.sub(r"(\$PWD/)?\.venv/bin/python", lambda _: python, self.script)
        self.env = dict(
            os.environ, SPARK_LOG_DIR=str(logs), SPARK_PID_DIR=str(logs), SPARK_IDENT_STRING=f"ks{self.port}"
        )
        self.url = f"sc://127.0.0.1:{self.port}"

    def start(self) -> Server:
        progress.note("starting a Spark Connect server ...")
        res = subprocess.run(
            ["bash", "-ec", self.script], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stderr
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                assert time.time() < deadline, "Connect server did not start: " + "".join(
                    p.read_text() for p in self.logs.glob("*.out")
                )
                time.sleep(1)

    def stop(self) -> None:
        stop = (
            self.script.split("\n")[0]
            + '\n"$SPARK_HOME/sbin/spark-daemon.sh" stop org.apache.spark.sql.connect.service.SparkConnectServer 1\n'
        )
        subprocess.run(["bash", "-ec", stop], cwd=ROOT, env=self.env, capture_output=True, timeout=120)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                time.sleep(1)
            except OSError:
                return


@pytest.fixture(scope="module")
def client_python():
    """A fresh venv with only ``pyspark-client`` and this package (the Python minor of the
    server's workers, which unpickle what the client sends)."""
    progress.note("making the pyspark-client venv ...")
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return str(
        make_venv(None, minor, extras="test", name=f"connect-client-py{minor}", packages=[f"pyspark-client=={CLIENT}"])
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    disk = tmp_path_factory.mktemp("server-only")
    s = Server(disk, tmp_path_factory.mktemp("connect-server")).start()
    frames = make_data(disk / "data")
    try:
        yield s, frames
    finally:
        s.stop()


def client_env() -> dict[str, str]:
    """No Java for the client: JAVA_HOME unset and no java on its PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_PYTHON")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "java").exists())
    return env


def run_client(python: str, *args: str, timeout: int = 1500, cwd: Path | None = None) -> dict:
    res = subprocess.run(
        [python, *args], capture_output=True, text=True, timeout=timeout, env=client_env(), cwd=cwd or ROOT
    )
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    # the client's own lines: not the server's JSON log records nor Java stack frames
    lines = [x for x in res.stderr.splitlines() if not x.startswith('{"ts"') and not x.lstrip().startswith("at ")]
    tail = "\n".join(lines)[-4000:]
    assert line is not None, tail
    return json.loads(line[len("RESULT ") :])


def test_every_entry_point_through_a_pyspark_client_client(client_python, server, tmp_path):
    s, frames = server
    got = run_client(client_python, str(HERE / "connect_scenarios.py"), s.url, s.root, cwd=tmp_path)
    assert got["session"].startswith("pyspark.sql.connect") and got["py4j"] is False  # no JVM on the client
    assert list(tmp_path.iterdir()) == []  # nothing written beside the client

    a_rows, a_state = oracle(frames["a"])
    all_rows, all_state = oracle(pd.concat([frames["a"], frames["b"]]))
    short = lambda rs: sorted([u, n, t] for u, _, n, t in rs)  # noqa: E731 - without seq
    for engine in ("bulk", "tws"):
        assert got[f"batch_{engine}"] == a_rows, engine
        assert got[f"run_{engine}"] == all_rows, engine
        assert got[f"run_inputs_{engine}"] == [len(frames["a"]), len(frames["b"])], engine  # only new files read
        assert got[f"progress_{engine}"] == len(frames["b"]), engine  # the callback saw the second run's batches
        assert got[f"run_views_left_{engine}"] == [], engine  # ks.run's step and stream views dropped
        assert got[f"state_{engine}"] == all_state, engine
        assert got[f"keyed_state_{engine}"] == all_state, engine
        touched = frames["a"].user_id.nunique() + frames["b"].user_id.nunique()
        assert got[f"changes_{engine}"] == touched, engine  # each touched key's n changed, per run
        assert "through Spark Connect" in got[f"migrate_{engine}"] and "part-files" in got[f"migrate_{engine}"]
        assert got[f"start_{engine}"] == all_rows, engine
        assert got[f"memory_{engine}"] == all_rows, engine
        assert "in use by another running query" in got[f"lease_{engine}"], got[f"lease_{engine}"]
        # INITIAL STATE FROM the state of all the data, then part b again: b's rows count twice
        b_again = {u: [u, n, t] for u, n, t in all_state}
        for r in frames["b"].itertuples():
            b_again[r.user_id][1] += 1
            b_again[r.user_id][2] = round(b_again[r.user_id][2] + r.value, 6)
        assert got[f"initial_{engine}"] == sorted(b_again.values()), engine
        assert got[f"timers_{engine}"] == sorted([u, "reminder"] for u in frames["a"].user_id.unique()), engine
    assert got["table_function"] == short(a_rows)
    assert got["apply"] == short(a_rows)
    assert got["run_table_function"] == short(all_rows)
    for engine in ("bulk", "tws"):
        assert got[f"two_inputs_{engine}"] == short(all_rows), engine
    users = frames["a"].user_id.unique()
    assert got["run_memory"] == sorted([u, w] for u in users for w in ("reminder", "seen"))
    assert "cannot be traced to its files" in got["files_view"] and "parquet.`/dir`" in got["files_view"]
    assert "WITH STATE running" in got["explain"]
    # every file of the runs went through the mount into the server's directory
    assert (s.disk / "work" / "bulk" / "cp" / "bulk" / "commits").is_dir()
    # native stream steps on the server, then the Python path from the state they wrote
    assert got["native_explain"] is True
    assert got["native_run"] == all_rows and got["native_state"] == all_state
    # after UPDATE left a float in an int attribute, the batch ran on the Python path (each row's
    # top is its own seq: a key's rows come in seq order and part b's follow part a's)
    assert got["fallback_native"] == [[True], [False]]
    both = pd.concat([frames["a"], frames["b"]])
    assert got["fallback_run"] == sorted([u, s, s] for u, s in zip(both["user_id"], both["seq"]))
    # DELETE through Connect: the first key erased on the stopped checkpoint (part b's rows then
    # start it afresh), the second by the running stream after part b (gone)
    first, second = got["erase_victims"]
    assert got["erase_matched"] == [1, 1]
    assert got["erase_running_active"] is True, got["erase_running_said"]
    _, b_state = oracle(frames["b"])
    want = {u: [u, n, t] for u, n, t in all_state if u not in (first, second)}
    want.update({u: [u, n, t] for u, n, t in b_state if u == first})
    assert got["erase_state"] == sorted(want.values())

    # a broadcast input: part a at factor 2 (one-shot and the first run), part b at factor 3
    def scaled(parts):
        out, totals = [], {}
        for df, factor in parts:
            for r in df.sort_values("seq").itertuples():
                totals[r.user_id] = round(totals.get(r.user_id, 0.0) + r.value * factor, 6)
                out.append([r.user_id, int(r.seq), totals[r.user_id]])
        return sorted(out)

    assert got["broadcast_batch"] == scaled([(frames["a"], 2.0)])
    assert got["broadcast_run"] == scaled([(frames["a"], 2.0), (frames["b"], 3.0)])
    assert got["broadcast_state"] == [["all", 3.0]]


@pytest.mark.parametrize("engine", ["bulk", "tws"])
def test_client_killed_mid_run_then_the_same_run_from_a_new_client(client_python, server, tmp_path, engine):
    """SIGKILL the client while its ks.run's keyed tasks are running on the server, then the same
    ks.run from a new client: the lease of the dead client is taken over, and output and state
    hold every row exactly once."""
    s, frames = server
    marker = s.disk / f"started-{engine}"
    script = str(HERE / "connect_run.py")
    proc = subprocess.Popen(
        [client_python, script, s.url, s.root, engine, "a,b", f"killed_{engine}", str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env(),
        cwd=tmp_path,
    )
    try:
        deadline = time.time() + 600
        while not marker.exists():  # the slowed function's first call, on the server's executor
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-4000:] if proc.poll() else ""
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None  # mid-run
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = run_client(client_python, script, s.url, s.root, engine, "", f"killed_{engine}", cwd=tmp_path)
    rows, state = oracle(pd.concat([frames["a"], frames["b"]]))
    assert got["rows"] == rows
    assert got["state"] == state


def test_server_restarted_between_two_runs(client_python, server, tmp_path):
    s, frames = server
    script = str(HERE / "connect_run.py")
    first = run_client(client_python, script, s.url, s.root, "bulk", "a", "restart", cwd=tmp_path)
    assert first["rows"] == oracle(frames["a"])[0]
    s.stop()
    s.start()
    got = run_client(client_python, script, s.url, s.root, "bulk", "b", "restart", cwd=tmp_path)
    rows, state = oracle(pd.concat([frames["a"], frames["b"]]))
    assert got["rows"] == rows
    assert got["state"] == state


def test_cli_with_a_connect_master(client_python, server, tmp_path):
    """The CLI from the pyspark-client venv: a SQL example against the server."""
    s, _ = server
    res = subprocess.run(
        [
            client_python,
            "-m",
            "spark_keyed_sql.cli",
            "--master",
            s.url,
            "run",
            str(ROOT / "sql_examples" / "sage" / "user_sessions.sql"),
            "--limit",
            "1000",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=client_env(),
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

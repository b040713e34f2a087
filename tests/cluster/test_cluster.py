"""The SQL scenarios on a real Spark standalone cluster (master + 2 workers on loopback, from
the installed pyspark): batch on both engines, incremental runs with state carried, state read
back — all equal to a plain-Python oracle; the package reaches executors as a zip."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import progress_lines as progress  # noqa: E402  (tests/ is on sys.path: conftest)
from standalone import StandaloneCluster  # noqa: E402

from spark_keyed_sql.engines import engine_names  # noqa: E402

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster():
    progress.note("starting a standalone cluster (master + 2 workers) ...")
    c = StandaloneCluster(workers=2).start()
    yield c
    c.stop()


def make_data(d):
    os.makedirs(d, exist_ok=True)
    rng = random.Random(5)
    frames = {}
    seq = 0
    for part in ("a", "b"):
        rows = []
        for _ in range(300):
            rows.append({"user_id": f"u{rng.randrange(25):02d}", "seq": seq, "value": float(rng.randrange(50))})
            seq += 1
        os.makedirs(d / part)
        df = pd.DataFrame(rows)
        for i in range(3):
            df.iloc[i::3].to_parquet(d / part / f"p{i}.parquet", index=False)
        frames[part] = df
    return frames


def oracle(df):
    rows, state = [], {}
    for user, g in df.sort_values("seq").groupby("user_id"):
        n, total = 0, 0.0
        for r in g.itertuples():
            n += 1
            total = round(total + r.value, 6)
            rows.append([user, int(r.seq), n, total])
        state[user] = [user, n, total]
    return sorted(rows), sorted(state.values())


def test_sql_scenarios_on_standalone_cluster(cluster, tmp_path):
    frames = make_data(tmp_path)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    res = subprocess.run(
        [sys.executable, str(HERE / "scenarios.py"), cluster.url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stderr[-4000:]
    got = json.loads(line[len("RESULT ") :])
    assert ".zip" in got["executor_package"], got["executor_package"]  # shipped by KeyedSQL, not the venv
    batch_rows, _ = oracle(frames["a"])
    all_rows, all_state = oracle(pd.concat([frames["a"], frames["b"]]))
    for engine in engine_names():
        assert got[f"batch_{engine}"] == batch_rows, engine
    for name in (*engine_names(), "viewfs"):  # viewfs: bulk with input, checkpoint and output on viewfs://
        assert got[f"run_{name}"] == all_rows, name
        assert got[f"state_{name}"] == all_state, name
    assert got["viewfs_on_disk"] == ["cp_viewfs", "out_viewfs"]  # through the mount, into its directory


@pytest.mark.slow  # make test-cluster / make test-slow; result recorded in docs/operations.md
@pytest.mark.parametrize("engine", engine_names())
def test_worker_killed_mid_query_then_results_equal_the_oracle(cluster, tmp_path, engine):
    """SIGKILL one worker (its executor and Python workers with it) while the keyed run's tasks
    are running: Spark reschedules them on the other worker, and output and state still equal
    the oracle, exactly once."""
    import time

    frames = make_data(tmp_path / "data")
    data = tmp_path / "events"
    data.mkdir()
    for part in ("a", "b"):
        for f in os.listdir(tmp_path / "data" / part):
            os.link(tmp_path / "data" / part / f, data / f"{part}-{f}")
    work = tmp_path / "work"
    work.mkdir()
    killed = False
    try:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "executor_loss.py"), cluster.url, str(data), str(work), engine],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.time() + 300
        while not (work / "started").exists():
            assert proc.poll() is None and time.time() < deadline, (
                proc.stderr.read()[-4000:] if proc.poll() is not None else "no start"
            )
            time.sleep(0.2)
        assert proc.poll() is None  # mid-query
        cluster.kill_worker(0)
        killed = True
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if killed:
            cluster.restart_worker(0)  # two workers again for the next test
        elif proc.poll() is None:
            proc.kill()
    line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, stderr[-4000:]
    got = json.loads(line[len("RESULT ") :])
    assert got["executors_alive"] == 1, got["executors_alive"]  # the loss happened while the app ran
    rows, state = oracle(pd.concat([frames["a"], frames["b"]]))
    assert got["rows"] == rows
    assert got["state"] == state


@pytest.mark.slow  # make test-cluster / make test-slow; result recorded in docs/operations.md
def test_spark_submit_as_documented(cluster, tmp_path):
    """docs/operations.md's spark-submit block, run by bash as written (master and /tmp paths
    moved to the test's), then its output compared with the CSV data's running counts."""
    import csv
    import re

    root = HERE.parents[1]
    block = re.search(
        r"### spark-submit.*?```bash\n(.*?)```", (root / "docs" / "operations.md").read_text(), re.S
    ).group(1)
    before = cluster.applications()
    script = block.replace("spark://127.0.0.1:7077", cluster.url).replace("/tmp/ks-submit/", f"{tmp_path}/")
    res = subprocess.run(["bash", "-ec", script], cwd=root, capture_output=True, text=True, timeout=600)
    apps = cluster.applications()
    assert res.returncode == 0, res.stderr[-4000:]
    assert len(apps) == len(before) + 1, apps  # it ran on the cluster, not in local mode
    with open(root / "sql_examples" / "data" / "events.csv") as f:
        events = list(csv.DictReader(f))
    expected = []
    for user in sorted({e["user_id"] for e in events}):
        total = 0.0
        for i, e in enumerate(sorted((e for e in events if e["user_id"] == user), key=lambda e: e["ts"]), 1):
            total = round(total + float(e["value"]), 2)
            expected.append((user, i, total))
    assert f"1 batch(es), {len(events)} rows in, {len(events)} rows out" in res.stdout, res.stdout
    out = pd.read_parquet(tmp_path / "out")
    got = sorted(zip(out.user_id, out.session_count, out.total_value.round(2)))
    assert got == expected

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

from standalone import StandaloneCluster  # noqa: E402

pytestmark = pytest.mark.cluster


def make_data(d):
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


def test_sql_scenarios_on_standalone_cluster(tmp_path):
    frames = make_data(tmp_path)
    cluster = StandaloneCluster(workers=2).start()
    try:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        res = subprocess.run([sys.executable, str(HERE / "scenarios.py"), cluster.url, str(tmp_path)],
                             capture_output=True, text=True, timeout=900, env=env)
    finally:
        cluster.stop()
    line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, res.stderr[-4000:]
    got = json.loads(line[len("RESULT "):])
    assert ".zip" in got["executor_package"], got["executor_package"]  # shipped by KeyedSQL, not the venv
    batch_rows, _ = oracle(frames["a"])
    all_rows, all_state = oracle(pd.concat([frames["a"], frames["b"]]))
    for engine in ("bulk", "tws"):
        assert got[f"batch_{engine}"] == batch_rows, engine
        assert got[f"run_{engine}"] == all_rows, engine
        assert got[f"state_{engine}"] == all_state, engine

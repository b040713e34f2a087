"""CI's short Spark Connect scenario (the whole Connect suite is tests/cluster/test_connect.py,
under ``make test-cluster``): a Connect server with a ``viewfs://`` mount only it knows, and a
client process with no Java on its PATH running ``ks.run`` twice on the default engine, the
state read back and a batch query, everything under the mount, against the plain-Python oracle."""

import sys
from pathlib import Path

import pandas as pd
import pytest
from test_cluster import make_data, oracle
from test_connect import HERE, Server, run_client


def test_connect_smoke_runs_state_and_batch_under_a_server_only_mount(tmp_path):
    import pyspark

    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 0):
        pytest.skip("PySpark 3.5's pip package has no Spark Connect server (it needs --packages, from Maven)")
    server = Server(tmp_path / "server-only", tmp_path / "logs", python=sys.executable)
    (tmp_path / "logs").mkdir()
    frames = make_data(tmp_path / "server-only" / "data")
    server.start()
    try:
        client_dir = tmp_path / "client"
        client_dir.mkdir()
        got = run_client(
            sys.executable, str(HERE / "connect_scenarios.py"), server.url, server.root, "smoke", cwd=client_dir
        )
    finally:
        server.stop()
    assert got["session"].startswith("pyspark.sql.connect")
    assert list(client_dir.iterdir()) == []  # nothing written beside the client
    a_rows, _ = oracle(frames["a"])
    all_rows, all_state = oracle(pd.concat([frames["a"], frames["b"]]))
    assert got["batch_bulk"] == a_rows
    assert got["run_bulk"] == all_rows
    assert got["run_inputs_bulk"] == [len(frames["a"]), len(frames["b"])]
    assert got["progress_bulk"] == len(frames["b"])  # the callback saw the second run's batches
    assert got["state_bulk"] == all_state and got["keyed_state_bulk"] == all_state
    # native stream steps on the server, then the Python path from the state they wrote
    assert got["native_explain"] is True
    assert got["native_run"] == all_rows and got["native_state"] == all_state
    # after UPDATE left a float in an int attribute, the batch ran on the Python path (each row's
    # top is its own seq: a key's rows come in seq order and part b's follow part a's)
    assert got["fallback_native"] == [[True], [False]]
    both = pd.concat([frames["a"], frames["b"]])
    assert got["fallback_run"] == sorted([u, s, s] for u, s in zip(both["user_id"], both["seq"]))
    assert Path(server.disk / "work" / "bulk" / "cp" / "bulk" / "commits").is_dir()  # through the mount
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

"""CI's short Spark Connect scenario (the whole Connect suite is tests/cluster/test_connect.py,
under ``make test-cluster``: both engines, DELETE on a running stream, broadcast inputs, native
steps, timers, faults): a Connect server with a ``viewfs://`` mount only it knows, and a client
process with no Java on its PATH running ``ks.run`` twice on the default engine, the state read
back and a batch query, everything under the mount, against the plain-Python oracle."""

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
    assert Path(server.disk / "work" / "bulk" / "cp" / "bulk" / "commits").is_dir()  # through the mount

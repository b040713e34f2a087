"""Crash harness: run the child query, SIGKILL it at named fault points or at random times,
restart from the same checkpoint, and at the end compare sink and state with an oracle."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


@dataclass
class CrashReport:
    engine: str
    mode: str = "run"
    kills: Counter = field(default_factory=Counter)  # per point (or "random")
    restarts: int = 0
    rows_expected: int = 0
    rows_out: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong_state: int = 0


def make_input(src: str, files: int, keys: int, per_file: int, seed: int, inputs: int = 1) -> pd.DataFrame:
    """``files`` Parquet files of rising ``seq`` and modification time; with ``inputs`` 2,
    alternately in ``src/a`` and ``src/b`` (one file of each per micro-batch keeps every
    batch's rows after the last one's)."""
    rng = random.Random(seed)
    dirs = [src] if inputs == 1 else [os.path.join(src, d) for d in "ab"[:inputs]]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    frames = []
    seq = 0
    # Spark's file source reads files oldest first by modification time (in ms): files written
    # within one ms would be read in listing order, i.e. maybe out of seq order, so each file
    # gets its own second
    mtime = int(time.time()) - files - 60
    for i in range(files):
        rows = []
        for _ in range(per_file):
            rows.append({"user_id": f"u{rng.randrange(keys):03d}", "seq": seq, "value": float(rng.randrange(100))})
            seq += 1
        df = pd.DataFrame(rows)
        path = os.path.join(dirs[i % inputs], f"part-{i:04d}.parquet")
        df.to_parquet(path, index=False)
        os.utime(path, (mtime + i, mtime + i))
        frames.append(df)
    return pd.concat(frames)


def oracle(events: pd.DataFrame) -> tuple[set, dict]:
    rows, state = set(), {}
    for user, g in events.sort_values("seq").groupby("user_id"):
        n, total = 0, 0.0
        for r in g.itertuples():
            n += 1
            total += r.value
            rows.add((user, int(r.seq), n, round(total, 6)))
        state[user] = (n, round(total, 6))
    return rows, state


VIEWFS_ENV = "SPARK_KEYED_SQL_TEST_VIEWFS"  # a local dir: child and checker mount viewfs://ks/data on it
CACHE_ENV = "SPARK_KEYED_SQL_TEST_CACHE"  # the bulk engine's local state directory of one incarnation


def _child(
    engine: str,
    mode: str,
    src: str,
    cp: str,
    out: str,
    crash_at: str | None,
    crash_dir: str,
    viewfs_root: str | None = None,
    cache_dir: str | None = None,
    inputs: int = 1,
) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(VIEWFS_ENV, None)
    env.pop(CACHE_ENV, None)
    if cache_dir:
        env[CACHE_ENV] = cache_dir
    if viewfs_root:
        env[VIEWFS_ENV] = viewfs_root
    env.pop("SPARK_KEYED_SQL_CRASH_AT", None)
    if crash_at:
        env["SPARK_KEYED_SQL_CRASH_AT"] = crash_at
        env["SPARK_KEYED_SQL_CRASH_DIR"] = crash_dir
    return subprocess.Popen(
        [sys.executable, CHILD, engine, src, cp, out, mode, str(inputs)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def run(
    engine: str,
    plan: list[str],
    *,
    files: int = 8,
    keys: int = 30,
    per_file: int = 60,
    seed: int = 7,
    random_kills: int = 0,
    workdir: str | None = None,
    timeout: float = 300,
    mode: str = "run",
    viewfs: bool = False,
    inputs: int = 1,
) -> CrashReport:
    """``plan``: fault specs ('point:n') used one per incarnation; then ``random_kills``
    incarnations killed after a random delay; then one incarnation runs to the end.
    ``mode``: ``run`` (incremental ks.run) or ``start`` (a continuous ks.start stream).
    ``viewfs``: input, checkpoint and output as ``viewfs://ks/data/...`` URIs mounted on the
    work directory (tests/viewfs.py), which only Spark's file system layer resolves.
    ``inputs``: 2 splits the input in two directories read as two named inputs of one function."""
    if workdir is None:  # make crash: its own temp dir, removed afterwards (KS_CRASH_KEEP=1 keeps it)
        d = tempfile.mkdtemp(prefix="ks-crash-")
        try:
            return run(
                engine,
                plan,
                files=files,
                keys=keys,
                per_file=per_file,
                seed=seed,
                random_kills=random_kills,
                workdir=d,
                timeout=timeout,
                mode=mode,
                viewfs=viewfs,
                inputs=inputs,
            )
        finally:
            if not os.environ.get("KS_CRASH_KEEP"):
                shutil.rmtree(d, ignore_errors=True)
    d = workdir
    events = make_input(os.path.join(d, "in"), files, keys, per_file, seed, inputs)
    base = "viewfs://ks/data" if viewfs else d
    src, cp, out = base + "/in", base + "/cp", base + "/out"
    mount = d if viewfs else None
    report = CrashReport(engine, mode)
    rng = random.Random(seed)
    schedule = [("point", p) for p in plan] + [("random", None)] * random_kills + [("finish", None)]
    for i, (kind, spec) in enumerate(schedule):
        crash_dir = tempfile.mkdtemp(prefix="hits-", dir=d)
        # every other restart finds its host's local state gone (bulk): the batch is fed from
        # the checkpoint, so its crash points are hit too
        cache_dir = os.path.join(d, f"cache-{i // 2}")
        proc = _child(
            engine, mode, src, cp, out, spec if kind == "point" else None, crash_dir, mount, cache_dir, inputs
        )
        if kind == "random":
            time.sleep(rng.uniform(8, 25))  # Spark takes ~8 s to start: land in the work
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"{engine}: incarnation {i} ({kind} {spec}) hung") from None
        if proc.returncode == -signal.SIGKILL:
            report.kills[spec.split(":")[0] if spec else "random"] += 1
            _reap(proc)
        elif proc.returncode != 0:
            raise AssertionError(f"{engine}: incarnation {i} ({kind} {spec}) failed:\n{err.decode()[-3000:]}")
        if i:
            report.restarts += 1
    expected_rows, expected_state = oracle(events)
    got_rows, got_state = _read_back(cp, out, mount)
    if viewfs:  # a viewfs URI given to Python's os would have made ./viewfs:/... here
        assert not os.path.exists(os.path.join(os.getcwd(), "viewfs:")), "files written beside the working directory"
    counts = Counter(got_rows)
    report.rows_expected = len(expected_rows)
    report.rows_out = len(got_rows)
    report.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    report.lost = len(expected_rows - set(counts))
    extra = set(counts) - expected_rows
    assert not extra, f"{engine}: rows no oracle has: {sorted(extra)[:5]}"
    report.wrong_state = sum(1 for k, v in expected_state.items() if got_state.get(k) != v) + len(
        set(got_state) - set(expected_state)
    )
    return report


def _reap(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the JVM and Python workers of the killed driver
    except ProcessLookupError:
        pass


# a heartbeat a second, so that an incarnation renews its lease many times and a kill (planned at
# lease_renewing / lease_created, or random) can land inside a lease write
LEASE_CONF = {"spark.keyedsql.leaseHeartbeatSeconds": "1"}


def child_conf(viewfs_root: str | None, cache_dir: str | None) -> dict[str, str]:
    """A child's session: the viewfs mount, its local state directory, compactions every few
    batches (so a kill can land in one) and a lease renewed every second (so a kill can land in
    a heartbeat)."""
    conf = session_conf(viewfs_root) | {"spark.keyedsql.compactDeltas": "3"} | LEASE_CONF
    if cache_dir:
        conf["spark.keyedsql.localStateDir"] = cache_dir
    return conf


def session_conf(viewfs_root: str | None) -> dict[str, str]:
    """The mount of ``viewfs://ks/data`` on ``viewfs_root`` (none when not given)."""
    if not viewfs_root:
        return {}
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    from viewfs import mount_conf

    return mount_conf(viewfs_root)


def _read_back(cp: str, out: str, viewfs_root: str | None = None) -> tuple[list[tuple], dict]:
    """The sink as Spark's readers see it (a file sink's _spark_metadata log decides which
    files count) and the state as a table, read by a fresh process."""
    code = (
        "import json; from spark_keyed_sql.local import local_session; from spark_keyed_sql import KeyedSQL;"
        f"ks = KeyedSQL(local_session('crash check', shuffle_partitions=2, conf={session_conf(viewfs_root)!r}));"
        f"rows = [[r.user_id, r.seq, r.n, r.total] for r in ks.spark.read.parquet({out!r}).collect()];"
        f"state = {{r['user_id']: [r['n'], r['total']] for r in ks.read_state({cp!r}).collect()}};"
        "print(json.dumps({'rows': rows, 'state': state}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise AssertionError(res.stderr[-3000:])
    import json

    got = json.loads(res.stdout.strip().splitlines()[-1])
    rows = [(u, int(s), int(n), round(float(t), 6)) for u, s, n, t in got["rows"]]
    state = {k: (int(v[0]), round(float(v[1]), 6)) for k, v in got["state"].items()}
    return rows, state

"""The file system layer (state/fs.py) and the checkpoint lease, on Spark's viewfs:// (which
Python's os does not understand, so anything bypassing the layer fails), plus a guard that no
other module touches checkpoint or output files with os / open / shutil / pathlib / pyarrow."""

import ast
import json
import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from data import make_events, write_parquet
from keyed_functions import Count

from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.filesystems import filesystem as CheckpointFS
from spark_keyed_sql.state.fs import FSError
from spark_keyed_sql.state.lock import LOCK_FILE, CheckpointLock, lock_holder, unlock


@pytest.fixture
def viewfs(spark, tmp_path):
    """A fresh viewfs mount: viewfs://<name>/data -> tmp_path (a new name per test, since
    Hadoop caches a FileSystem per scheme and authority)."""
    name = f"ks{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"fs.viewfs.mounttable.{name}.link./data", tmp_path.as_uri())
    return f"viewfs://{name}/data", tmp_path


def test_fs_operations_on_viewfs(spark, viewfs):
    root, disk = viewfs
    fs = CheckpointFS(spark)
    fs.create_text(f"{root}/a/b.json", '{"x": 1}')
    assert (disk / "a" / "b.json").read_text() == '{"x": 1}'  # oracle: the mounted directory
    with pytest.raises(FileExistsError):
        fs.create_text(f"{root}/a/b.json", "other")
    assert (disk / "a" / "b.json").read_text() == '{"x": 1}'
    fs.write_text(f"{root}/a/b.json", "replaced")
    assert fs.read_text(f"{root}/a/b.json") == "replaced"
    fs.create_text(f"{root}/a/c.txt", "12345")
    assert fs.list(f"{root}/a") == sorted(p.name for p in (disk / "a").iterdir() if not p.name.endswith(".crc"))
    assert fs.list(f"{root}/missing") == []
    assert fs.is_dir(f"{root}/a") and not fs.is_dir(f"{root}/a/c.txt") and not fs.exists(f"{root}/nope")
    assert fs.size(f"{root}/a") == len("replaced") + 5
    assert fs.tail(f"{root}/a/c.txt", 2) == b"45"
    fs.copy(f"{root}/a", f"{root}/copy")
    assert (disk / "copy" / "c.txt").read_text() == "12345"
    assert fs.delete(f"{root}/a") and not (disk / "a").exists()
    assert not fs.delete(f"{root}/a")
    with pytest.raises(FileNotFoundError):
        fs.read_text(f"{root}/a/b.json")
    assert fs.qualify("relative/dir") == "file:" + os.path.abspath("relative/dir")


class _CountingFS:
    """A Hadoop FileSystem stand-in counting the exists() questions asked of it."""

    def __init__(self, there):
        self.there, self.asked = there, 0

    def exists(self, _p):
        self.asked += 1
        return self.there


@pytest.mark.parametrize(
    "path, there, missing, asked",
    [
        ("file:/tmp/x", False, True, 1),
        ("/tmp/x", True, False, 1),
        ("viewfs://ks/data/x", False, True, 1),
        ("hdfs://nn/x", False, True, 1),
        ("s3a://bucket/x", False, False, 0),  # an object store: the call's own exception answers
        ("ABFSS://c@a.dfs.core.windows.net/x", False, False, 0),
        ("gs://bucket/x", True, False, 0),
    ],
)
def test_a_missing_path_is_asked_first_except_on_object_stores(path, there, missing, asked):
    from spark_keyed_sql.state.hadoop_fs import HadoopFS

    fs = _CountingFS(there)
    assert HadoopFS._missing(fs, None, path) is missing
    assert fs.asked == asked


@pytest.mark.parametrize("where", ["local", "viewfs"])
def test_list_names_odd_and_many_entries(spark, viewfs, where):
    """A listing comes back from the JVM as one string split at the parent's path; names with
    commas, spaces and '=' and a directory of a thousand files must come back exactly."""
    root, disk = viewfs
    base = f"{root}/d" if where == "viewfs" else str(disk / "d")
    odd = ["a b.txt", "x, y", ", z", "k=1", "_tmp", "p%20q"]
    for name in odd:
        (disk / "d" / name).mkdir(parents=True)
    for i in range(1000):
        (disk / "d" / f"part-{i:05d}.parquet").write_bytes(b"")
    fs = CheckpointFS(spark)
    assert fs.list(base) == sorted(os.listdir(disk / "d"))  # oracle: the local directory itself
    assert fs.list(f"{base}/k=1") == []


@pytest.mark.parametrize(
    "uri, reason", [("nosuchfs://x/y", "No FileSystem for scheme"), ("s3a://bucket/x", "S3AFileSystem")]
)
def test_unreachable_location_is_named_before_anything_is_written(spark, ks_auto, tmp_path, uri, reason):
    with pytest.raises(FSError, match=reason) as info:
        CheckpointFS(spark).probe(uri)
    assert uri in str(info.value)
    ks_auto.register("fs_count", Count, returns="n bigint")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    write_parquet(spark, make_events(3, 1, seed=1), src)
    sql = f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE fs_count(value)"
    with pytest.raises(FSError, match=reason):
        ks_auto.run(sql, checkpoint=uri, output=str(tmp_path / "out"))
    with pytest.raises(FSError, match=reason):
        ks_auto.run(sql, checkpoint=cp, output=uri)
    assert not (tmp_path / "cp").exists() and not (tmp_path / "out").exists()
    with pytest.raises(FSError, match=reason):
        ks_auto.read_state(uri)


def _record_dir(spark, path: str, text: str | None) -> None:
    """A record as a Spark Connect session writes it (state/connect_fs.py): Spark's text writer,
    one row (None: an empty overwrite, what a removal through Connect leaves)."""
    rows = [] if text is None else [(text,)]
    spark.createDataFrame(rows, "value string").coalesce(1).write.mode("overwrite").text(path)


def test_classic_reads_records_a_connect_session_wrote(spark, viewfs):
    """A checkpoint moves between a Connect and a classic session: records written as
    directories (one part file) read as their text; a removed one (emptied) reads as absent and
    may be created again; a live one is not overwritten by an exclusive create."""
    root, disk = viewfs
    fs = CheckpointFS(spark)
    _record_dir(spark, f"{root}/r/a.json", '{"x": 1}\nsecond line')
    assert fs.read_text(f"{root}/r/a.json") == '{"x": 1}\nsecond line'
    part = next(p for p in (disk / "r" / "a.json").iterdir() if p.name.startswith("part-"))
    assert abs(fs.modified_ms(f"{root}/r/a.json") - part.stat().st_mtime * 1000) < 1000  # the part file's
    with pytest.raises(FileExistsError):
        fs.create_text(f"{root}/r/a.json", "other")
    assert fs.read_text(f"{root}/r/a.json") == '{"x": 1}\nsecond line'
    _record_dir(spark, f"{root}/r/a.json", None)
    with pytest.raises(FileNotFoundError):
        fs.read_text(f"{root}/r/a.json")
    fs.create_text(f"{root}/r/a.json", "again")
    assert (disk / "r" / "a.json").read_text() == "again"  # oracle: the mounted directory
    # a live record overwritten (a lease's heartbeat, a marker rewritten) becomes a file
    _record_dir(spark, f"{root}/r/b.json", "old")
    fs.create_text(f"{root}/r/b.json", "new", overwrite=True)
    assert (disk / "r" / "b.json").read_text() == "new"
    # a lease a Connect client holds is seen, and refused, by a classic starter
    holder = {"owner": "x", "host": socket.gethostname(), "pid": os.getpid(), "query": "ks.start"}
    holder |= {"started_ms": int(time.time() * 1000), "heartbeat_ms": int(time.time() * 1000)}
    _record_dir(spark, f"{root}/cp/{LOCK_FILE}", json.dumps(holder))
    assert lock_holder(f"{root}/cp", spark) == holder


def _lease(disk: Path) -> dict:
    return json.loads((disk / "cp" / LOCK_FILE).read_text())


def test_lease_refuses_a_live_holder_and_is_released(spark, viewfs):
    root, disk = viewfs
    cp = f"{root}/cp"
    first = CheckpointLock(cp, spark, query="ks.start").acquire()
    try:
        held = _lease(disk)
        assert (held["pid"], held["host"], held["query"]) == (os.getpid(), socket.gethostname(), "ks.start")
        with pytest.raises(
            CheckpointError, match=rf"in use by another running query \(process {os.getpid()} on"
        ) as info:
            CheckpointLock(cp, spark).acquire()
        assert "ks.unlock" in str(info.value) and "state unlock" in str(info.value)
    finally:
        first.release()
    assert not (disk / "cp" / LOCK_FILE).exists()
    CheckpointLock(cp, spark).acquire().release()


def test_heartbeat_refreshes_the_lease(spark, viewfs):
    root, disk = viewfs
    lock = CheckpointLock(f"{root}/cp", spark)
    lock.HEARTBEAT_S = 0.2
    lock.acquire()
    try:
        first = _lease(disk)["heartbeat_ms"]
        deadline = time.time() + 30
        while _lease(disk)["heartbeat_ms"] == first and time.time() < deadline:
            time.sleep(0.1)
        assert _lease(disk)["heartbeat_ms"] > first
    finally:
        lock.release()


def _plant(disk: Path, **holder) -> None:
    (disk / "cp").mkdir(exist_ok=True)
    body = {"owner": "someone", "host": "elsewhere", "pid": 1, "query": "ks.run", "started_ms": 0} | holder
    (disk / "cp" / LOCK_FILE).write_text(json.dumps(body))


def _dead_pid() -> int:
    pid = 999_999
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


@pytest.mark.parametrize("case", ["dead_pid_same_host", "old_heartbeat_other_host", "unreadable"])
def test_a_dead_holders_lease_is_taken_over(spark, viewfs, case):
    root, disk = viewfs
    now = int(time.time() * 1000)
    if case == "dead_pid_same_host":
        _plant(disk, host=socket.gethostname(), pid=_dead_pid(), heartbeat_ms=now)
    elif case == "old_heartbeat_other_host":
        _plant(disk, heartbeat_ms=now - int(CheckpointLock.TIMEOUT_S * 1000) - 5_000)
    else:  # a half-written lease no one has touched for longer than the timeout
        (disk / "cp").mkdir()
        (disk / "cp" / LOCK_FILE).write_text('{"owner": "half-writ')
        old = time.time() - CheckpointLock.TIMEOUT_S - 5
        os.utime(disk / "cp" / LOCK_FILE, (old, old))
    lock = CheckpointLock(f"{root}/cp", spark).acquire()
    try:
        assert _lease(disk)["pid"] == os.getpid()
    finally:
        lock.release()


def test_a_fresh_unreadable_lease_is_waited_on_then_taken_over_within_two_heartbeats(spark, viewfs, monkeypatch):
    """A lease being written right now reads as garbage too: it is not taken over before it is
    two heartbeats old (a live writer fills it in milliseconds), and not refused either: the
    start waits that long at most (tests/state/test_lease.py kills a real writer there)."""
    monkeypatch.setattr(CheckpointLock, "HEARTBEAT_S", 1.0)
    root, disk = viewfs
    (disk / "cp").mkdir()
    (disk / "cp" / LOCK_FILE).write_text('{"owner": "half-writ')
    written = (disk / "cp" / LOCK_FILE).stat().st_mtime
    lock = CheckpointLock(f"{root}/cp", spark).acquire()
    try:
        held = _lease(disk)
        assert held["owner"] == lock.token
        assert held["heartbeat_ms"] >= int(written * 1000) + 2_000 - 50  # not before two heartbeats
        assert time.time() - written <= 2 * 1.0 + 1.5  # nor much after
    finally:
        lock.release()


def test_a_fresh_lease_elsewhere_blocks_until_unlocked(spark, viewfs):
    root, disk = viewfs
    _plant(disk, heartbeat_ms=int(time.time() * 1000) - 3_000)
    with pytest.raises(CheckpointError, match=r"process 1 on elsewhere, query 'ks.run', last heartbeat [0-9]+ s ago"):
        CheckpointLock(f"{root}/cp", spark).acquire()
    assert lock_holder(f"{root}/cp", spark)["host"] == "elsewhere"
    assert unlock(f"{root}/cp", spark)["host"] == "elsewhere"
    assert not (disk / "cp" / LOCK_FILE).exists() and unlock(f"{root}/cp", spark) is None
    CheckpointLock(f"{root}/cp", spark).acquire().release()


# ---------------------------------------------------------------------------- guard
PACKAGE = Path(__file__).resolve().parents[2] / "spark_keyed_sql"
# modules that handle checkpoint / output paths: every file access must go through state/fs.py
GUARDED = sorted(
    [p for p in (PACKAGE / "state").glob("*.py") if p.name != "fs.py"]
    + [p for p in (PACKAGE / "runtime").glob("*.py") if p.name != "faults.py"]  # faults: the crash harness's own dir
    # local_store: the bulk engine's host-local cache of state (SQLite files in a local directory
    # of the executor's host, by design never the checkpoint, which stays the truth)
    + [p for p in (PACKAGE / "engines").rglob("*.py") if p.name != "local_store.py"]
    + list((PACKAGE / "streaming").glob("*.py"))
    + [PACKAGE / name for name in ("session.py", "cli.py", "migrate.py", "shipping.py", "testing.py")]
)
FORBIDDEN_MODULES = {"shutil", "fcntl", "pathlib", "glob", "pyarrow.parquet", "pyarrow.fs", "tempfile"}
FORBIDDEN_OS = {
    "path",
    "listdir",
    "makedirs",
    "mkdir",
    "remove",
    "unlink",
    "rename",
    "replace",
    "rmdir",
    "walk",
    "scandir",
    "stat",
    "open",
    "fsync",
    "pread",
    "pwrite",
    "ftruncate",
}
# (module, function) allowed to use local files for things that are not checkpoints or outputs
ALLOWED = {
    ("shipping.py", "_package_zip"),  # zips this package to ship to executors
    ("shipping.py", "_same_python"),  # compares interpreter paths (which python the workers run)
    ("cli.py", "read_sql_file"),  # the user's SQL file
    ("cli.py", "_load"),  # the SQL file's directory, to find its UDF modules
    ("faults.py", "crash_point"),  # the crash tests' hit counter: a local test directory, never a checkpoint
    ("step.py", "_stats"),  # parses stats files' bytes that CheckpointFS read (pq over a BytesIO, no path)
}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        allowed = (path.name, func) in ALLOWED
        bad = None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            bad = next((n for n in names if n in FORBIDDEN_MODULES), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            bad = "open()"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in FORBIDDEN_OS
        ):
            bad = f"os.{node.attr}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pq":
            bad = f"pq.{node.attr}"
        if bad and not allowed:
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {bad} in {func or 'module'}")
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "")
    return out


def test_no_file_access_outside_the_fs_layer():
    assert len(GUARDED) > 30
    offences = [o for p in GUARDED for o in _offences(p)]
    assert offences == [], "use spark_keyed_sql.state.fs.CheckpointFS for checkpoint/output files:\n" + "\n".join(
        offences
    )

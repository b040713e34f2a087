"""The checkpoint lease under faults (DESIGN.md, "Leases"), on Spark's viewfs:// (a stand-in for a
remote store: Python's os cannot open it, so the real file system code is what runs):

- a SIGKILL inside a lease write never blocks the next start longer than two heartbeats (the kill
  is real: a child process killed at the lease's fault points, state/faults.py);
- a holder whose storage refuses renewals stops, with an error saying why, before its takeover
  window ends, and a second starter takes over only after it.

Short periods keep it fast: the class settings here, ``spark.keyedsql.leaseHeartbeatSeconds`` /
``spark.keyedsql.leaseTimeoutSeconds`` in the child. The only time bounds asserted are the
features themselves (two heartbeats; the takeover window)."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from data import SCHEMA, make_events, write_parquet
from keyed_functions import Count

from spark_keyed_sql.state import lock as lock_module
from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.filesystems import filesystem
from spark_keyed_sql.state.fs import FSError
from spark_keyed_sql.state.lock import LOCK_FILE, CheckpointLock, check_lease, lock_holder

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def viewfs(spark, tmp_path):
    """viewfs://<new name>/data mounted on tmp_path (a new name per test: Hadoop caches a
    FileSystem per scheme and authority); the mount name is given for a child's session too."""
    name = f"ks{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"fs.viewfs.mounttable.{name}.link./data", tmp_path.as_uri())
    return f"viewfs://{name}/data", tmp_path, name


@pytest.fixture
def periods(monkeypatch):
    """Short lease periods for this test's locks."""

    def set_(heartbeat: float, timeout: float) -> None:
        monkeypatch.setattr(CheckpointLock, "HEARTBEAT_S", heartbeat)
        monkeypatch.setattr(CheckpointLock, "TIMEOUT_S", timeout)

    return set_


def _lease_on_disk(disk: Path) -> dict:
    return json.loads((disk / "cp" / LOCK_FILE).read_text())


# ---------------------------------------------------------------------------- a kill inside a write
def _killed_child(viewfs, crash_at: str, heartbeat: float, timeout: float = 60.0) -> tuple[float, int]:
    """A child process takes the lease on ``<root>/cp`` through its own session (the viewfs mount
    of the test) and is SIGKILLed at the fault point ``crash_at``. Returns when it died (the
    moment its exit was seen) and its pid."""
    root, disk, name = viewfs
    code = f"""
import os, sys, time
os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())
sys.path.insert(0, {str(TESTS)!r})
from viewfs import mount_conf
from spark_keyed_sql.local import local_session
from spark_keyed_sql.state.lock import CheckpointLock
spark = local_session("lease child", conf=mount_conf({str(disk)!r}, {name!r}) | {{
    "spark.keyedsql.leaseHeartbeatSeconds": "{heartbeat}", "spark.keyedsql.leaseTimeoutSeconds": "{timeout}"}})
CheckpointLock({root + "/cp"!r}, spark).acquire()
time.sleep(120)  # the heartbeats run; the fault point kills this process
"""
    hits = disk / "hits"
    hits.mkdir(exist_ok=True)
    env = dict(os.environ, SPARK_KEYED_SQL_CRASH_AT=crash_at, SPARK_KEYED_SQL_CRASH_DIR=str(hits))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its JVM
        except ProcessLookupError:
            pass
    died = time.time()
    assert proc.returncode == -signal.SIGKILL, f"the child was not killed at {crash_at}:\n{err.decode()[-3000:]}"
    return died, proc.pid


def test_a_kill_between_the_lease_create_and_its_write_blocks_the_next_start_at_most_two_heartbeats(
    spark, viewfs, periods
):
    root, disk, _ = viewfs
    died, _ = _killed_child(viewfs, "lease_created:1", heartbeat=1.0)
    lease = disk / "cp" / LOCK_FILE
    assert lease.exists() and lease.read_bytes() == b""  # the torn lease a kill leaves, as it left it
    torn_at = lease.stat().st_mtime
    periods(heartbeat=1.0, timeout=60.0)
    lock = CheckpointLock(root + "/cp", spark).acquire()
    took = time.time()
    try:
        held = _lease_on_disk(disk)
        assert (held["owner"], held["pid"]) == (lock.token, os.getpid())
        # not taken over while it might still be a live writer's, never blocked beyond two heartbeats
        assert held["heartbeat_ms"] >= int(torn_at * 1000) + 2 * 1000 - 50
        assert took - max(died, torn_at) <= 2 * 1.0 + 1.5
    finally:
        lock.release()


def test_a_kill_inside_a_heartbeat_leaves_the_old_lease_whole_and_the_next_start_goes_at_once(spark, viewfs, periods):
    root, disk, _ = viewfs
    _, pid = _killed_child(viewfs, "lease_renewing:1", heartbeat=0.3)
    held = _lease_on_disk(disk)  # whole: the renewal was written beside it, not over it
    assert (held["pid"], held["host"]) == (pid, socket.gethostname())
    leftovers = [p for p in (disk / "cp").iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and json.loads(leftovers[0].read_text())["pid"] == pid  # the renewal it was moving
    periods(heartbeat=0.3, timeout=60.0)
    time.sleep(0.7)  # the leftover is two heartbeats old: no live writer's
    lock = CheckpointLock(root + "/cp", spark).acquire()  # its process is gone: taken over at once
    try:
        assert _lease_on_disk(disk)["owner"] == lock.token
        assert not [p for p in (disk / "cp").iterdir() if p.name.endswith(".tmp")]
    finally:
        lock.release()


def test_a_torn_lease_filled_in_meanwhile_is_a_live_writers_and_refused(spark, viewfs, periods):
    """The empty file may be a live starter's between its create and its write: the waiting
    starter then sees the lease it became, and is refused."""
    root, disk, _ = viewfs
    periods(heartbeat=1.0, timeout=60.0)
    (disk / "cp").mkdir()
    lease = disk / "cp" / LOCK_FILE
    lease.write_bytes(b"")
    body = {"owner": "other", "host": "elsewhere", "pid": 1, "query": "ks.run", "started_ms": 0}

    def fill() -> None:
        time.sleep(0.5)
        lease.write_text(json.dumps(body | {"heartbeat_ms": int(time.time() * 1000), "timeout_ms": 60_000}))

    t = threading.Thread(target=fill)
    t.start()
    with pytest.raises(CheckpointError, match=r"in use by another running query \(process 1 on elsewhere"):
        CheckpointLock(root + "/cp", spark).acquire()
    t.join()
    assert _lease_on_disk(disk)["owner"] == "other"


# ---------------------------------------------------------------------------- renewals refused
class RefusingFS:
    """The session's real CheckpointFS, except that once ``refuse`` is set every write or delete
    of the lease (and of anything beside it) fails, as a storage outage would make it."""

    def __init__(self, real, path: str):
        self.real, self.path, self.refuse = real, path, threading.Event()
        self.refused = 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def _guard(self, path: str) -> None:
        if self.refuse.is_set() and path.startswith(self.path.rsplit("/", 1)[0]):
            self.refused += 1
            raise FSError(f"file {path!r}: storage unavailable (injected)")

    def create_text(self, path, text, overwrite=False, midway=None):
        self._guard(path)
        return self.real.create_text(path, text, overwrite, midway)

    def write_text(self, path, text):
        self._guard(path)
        return self.real.write_text(path, text)

    def replace_text(self, path, text, midway=None):
        self._guard(path)
        return self.real.replace_text(path, text, midway)

    def delete(self, path, recursive=True):
        self._guard(path)
        return self.real.delete(path, recursive)


def test_a_holder_that_cannot_renew_stops_before_anyone_may_take_over(spark, viewfs, periods):
    root, disk, _ = viewfs
    heartbeat, window = 0.25, 2.5
    periods(heartbeat=heartbeat, timeout=window)
    cp = root + "/cp"
    holder = CheckpointLock(cp, spark)
    holder.fs = RefusingFS(holder.fs, holder.path)
    stopped: list[tuple[float, CheckpointError]] = []
    holder.acquire()
    holder.on_lost = lambda err: stopped.append((time.time(), err))
    try:
        time.sleep(3 * heartbeat)  # renewed a few times
        holder.fs.refuse.set()
        time.sleep(heartbeat)  # a renewal in flight lands or fails: the lease on disk is the last one
        last = _lease_on_disk(disk)
        assert last["owner"] == holder.token and last["timeout_ms"] == int(window * 1000)
        window_ends = last["heartbeat_ms"] / 1000 + window  # the oracle: what the lease on disk says
        attempts: list[tuple[float, str]] = []
        taker = None
        while taker is None and time.time() < window_ends + 10:
            try:
                taker = CheckpointLock(cp, spark).acquire()
                attempts.append((time.time(), "taken"))
            except CheckpointError as exc:
                attempts.append((time.time(), str(exc)))
                time.sleep(0.05)
        assert taker is not None, attempts[-1]
        try:
            assert holder.fs.refused > 0  # renewals were tried and refused
            assert len(stopped) == 1, stopped
            when, err = stopped[0]
            assert "lease was not renewed since" in str(err) and "takeover window of 2.5 s" in str(err)
            assert "another query may start on this checkpoint, so this one stops now" in str(err)
            # the holder stopped strictly before its window ended, and before anyone took over
            assert when < window_ends and when < attempts[-1][0]
            # every start before the window ended was refused as in use; the takeover came after it
            early = [a for a in attempts if a[0] < window_ends]
            assert early and all("in use by another running query" in msg for _, msg in early)
            assert attempts[-1][0] >= window_ends
            assert _lease_on_disk(disk)["owner"] == taker.token
            # and the stopped holder refuses to commit anything on that checkpoint
            with pytest.raises(CheckpointError, match="was not renewed since"):
                holder.check()
        finally:
            taker.release()
    finally:
        holder.release()


def test_a_query_whose_lease_cannot_be_renewed_fails_saying_why_and_restarts(spark, ks, viewfs, periods, monkeypatch):
    """End to end on each engine: the running query fails with the lease's error (not a warning in a
    log), before the window ends; restarted, it gives the oracle's answer."""
    root, disk, _ = viewfs
    heartbeat, window = 0.5, 4.0
    periods(heartbeat=heartbeat, timeout=window)
    made: list[RefusingFS] = []

    def refusing(spark_=None):
        fs = RefusingFS(filesystem(spark_), root + "/cp/" + LOCK_FILE)
        made.append(fs)
        return fs

    monkeypatch.setattr(lock_module, "filesystem", refusing)
    ks.register("lease_count", Count, returns="n bigint")
    src, cp, out = root + "/in", root + "/cp", root + "/out"
    events = make_events(6, 3, seed=5)
    write_parquet(spark, events, src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("lease_events")
    sql = "SELECT user_id, n FROM lease_events GROUP BY KEY user_id WITH STATE lease_count(value)"
    q = ks.start(sql, checkpoint=cp, sink=out, trigger="200 milliseconds")
    q.processAllAvailable()
    for fs in made:
        fs.refuse.set()
    refused_at = time.time()
    with pytest.raises(CheckpointError, match=r"lease was not renewed since .* takeover window of 4 s"):
        q.awaitTermination(window + 20)
    failed_at = time.time()
    assert not q.isActive
    assert failed_at - refused_at < window  # stopped before anyone could take over
    monkeypatch.setattr(lock_module, "filesystem", filesystem)
    second = make_events(6, 2, seed=6, start_second=10_000)
    write_parquet(spark, second, src)
    q2 = ks.start(sql, checkpoint=cp, sink=out, trigger="200 milliseconds")
    q2.processAllAvailable()
    q2.stop()
    got = sorted((r.user_id, r.n) for r in spark.read.parquet(out).collect())
    counts: dict[str, int] = {}
    for e in events + second:
        counts[e["user_id"]] = counts.get(e["user_id"], 0) + 1
    assert got == sorted((u, i) for u, c in counts.items() for i in range(1, c + 1))


def test_check_lease_refuses_a_commit_only_under_a_lost_lease(spark, viewfs, periods):
    root, _, _ = viewfs
    periods(heartbeat=0.25, timeout=2.5)
    lock = CheckpointLock(root + "/cp", spark).acquire()
    try:
        check_lease(filesystem(spark).qualify(root + "/cp/state/x"))  # held: nothing
        check_lease(root + "/elsewhere/x", filesystem(spark))
        lock.deadline_ms = 0  # as if no renewal had landed for the window less two heartbeats
        with pytest.raises(CheckpointError, match="was not renewed since"):
            check_lease(root + "/cp/state/x", filesystem(spark))
        check_lease(root + "/elsewhere/x", filesystem(spark))  # another checkpoint: not concerned
        assert lock_holder(root + "/cp", spark)["owner"] == lock.token
    finally:
        lock.release()
    check_lease(root + "/cp/state/x", filesystem(spark))  # released: no lease of this process there


# ---------------------------------------------------------------------------- a store without a move
class RecordStore:
    """In memory, a store like Spark Connect's for small records (state/connect_fs.py): no
    rename, an overwrite removes the record and writes it anew ``gap`` seconds later (Spark's
    overwrite job: a reader meanwhile finds nothing there, and a create-if-absent succeeds), and
    a failed overwrite leaves the record half there. ``fail`` makes writes fail (of the paths
    containing ``failing``): torn, or (``landed``) written whole and then reported failed."""

    spark = None
    renames = False

    def __init__(self, gap: float = 0.0):
        self.files: dict[str, tuple[str, int]] = {}
        self.fail = threading.Event()
        self.failing = ""
        self.landed = False
        self.gap = gap

    def qualify(self, path, what="path"):
        return path

    def probe(self, path, what="checkpoint"):
        pass

    def mkdirs(self, path):
        pass

    def replaces_whole(self, path):
        return False

    def list(self, path):
        return sorted({p[len(path) + 1 :].split("/")[0] for p in self.files if p.startswith(path + "/")})

    def modified_ms(self, path):
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][1]

    def read_text(self, path):
        if path not in self.files or self.files[path][0] == "":
            raise FileNotFoundError(path)  # an emptied record reads as absent
        return self.files[path][0]

    def create_text(self, path, text, overwrite=False, midway=None):
        if not overwrite and self.files.get(path, ("", 0))[0]:
            raise FileExistsError(path)
        if self.fail.is_set() and self.failing in path:
            kept = text if self.landed else text[: len(text) // 2]  # else torn by the failure
            self.files[path] = (kept, int(time.time() * 1000))
            raise FSError(f"file {path!r}: storage unavailable (injected)")
        if overwrite and self.gap:
            self.files.pop(path, None)
            time.sleep(self.gap)
        self.files[path] = (text, int(time.time() * 1000))

    def replace_text(self, path, text, midway=None):
        self.create_text(path, text, overwrite=True)
        return False

    def delete(self, path, recursive=True):
        return self.files.pop(path, None) is not None


def _beats_landed(store: RecordStore, owner: str) -> list[int]:
    """The heartbeats an owner's beat records hold whole (the oracle: the store's records)."""
    out = []
    for path, (text, _) in store.files.items():
        if ".beat" in path:
            try:
                beat = json.loads(text)
            except ValueError:
                continue
            if beat["owner"] == owner:
                out.append(beat["heartbeat_ms"])
    return out


def test_on_a_store_without_a_move_a_starter_never_takes_a_live_lease_between_its_renewals(monkeypatch, periods):
    """Connect's overwrite removes a record for as long as its write job runs: were the lease
    rewritten at each heartbeat, a starter (a DELETE FROM keyed_state's editor trying the lease
    every few seconds) would find it free in that gap, take it, and stop the running query. The
    lease is written once; renewals go to the beat records beside it."""
    store = RecordStore(gap=0.02)
    monkeypatch.setattr(lock_module, "filesystem", lambda spark=None: store)
    periods(heartbeat=0.05, timeout=1.0)
    holder = CheckpointLock("mem://cp").acquire()
    lost: list[CheckpointError] = []
    holder.on_lost = lost.append
    lease = store.files["mem://cp/" + LOCK_FILE]
    taken, refused = 0, 0
    try:
        until = time.time() + 2.0
        while time.time() < until:
            try:
                CheckpointLock("mem://cp").acquire().release()
                taken += 1
            except CheckpointError as exc:
                assert "in use by another running query" in str(exc)
                refused += 1
            time.sleep(0.001)
        assert taken == 0 and refused > 100 and not lost, (taken, refused, lost)
        holder._stop.set()  # the heartbeats end: the store holds still while it is looked at
        holder._thread.join()
        assert store.files["mem://cp/" + LOCK_FILE] == lease  # never rewritten while held
        landed = _beats_landed(store, holder.token)
        assert landed and max(landed) > json.loads(lease[0])["heartbeat_ms"]  # renewed all along
        assert lock_holder("mem://cp")["heartbeat_ms"] == max(landed)  # the newest beat is the lease's
    finally:
        holder.release()
    assert store.files == {}  # the lease and its beat records are gone


@pytest.mark.parametrize("failure", ["torn", "landed"])
def test_on_a_store_without_a_move_failed_renewals_leave_the_lease_whole_until_the_deadline(
    monkeypatch, periods, failure
):
    """Renewals that fail, halfway (``torn``) or after writing (``landed``), leave the lease and
    the newest beat that landed whole: the holder runs on until its deadline (two heartbeats
    before the takeover window ends after the last beat it saw land), starters are refused until
    the window after the newest beat on the store ends, and one takes over after it."""
    store = RecordStore()
    store.landed = failure == "landed"
    monkeypatch.setattr(lock_module, "filesystem", lambda spark=None: store)
    heartbeat, window = 0.2, 1.5
    periods(heartbeat=heartbeat, timeout=window)
    holder = CheckpointLock("mem://cp")
    stopped: list[tuple[float, CheckpointError]] = []
    holder.acquire()
    holder.on_lost = lambda err: stopped.append((time.time(), err))
    lease = store.files["mem://cp/" + LOCK_FILE]
    try:
        time.sleep(3 * heartbeat)
        store.failing = ".beat"  # the renewals fail; the starters' lease writes below do not
        store.fail.set()
        failed_at = time.time()
        time.sleep(2.5 * heartbeat)  # two renewals fail
        torn = [p for p, (t, _) in list(store.files.items()) if ".beat" in p and not t.endswith("}")]
        assert bool(torn) == (failure == "torn"), store.files  # the torn failures did tear a beat record
        attempts: list[tuple[float, str]] = []

        def start() -> CheckpointLock | None:
            try:
                lock = CheckpointLock("mem://cp").acquire()
                attempts.append((time.time(), "taken"))
                return lock
            except CheckpointError as exc:
                attempts.append((time.time(), str(exc)))
                time.sleep(0.02)
                return None

        taker = None
        while taker is None and not stopped and time.time() < failed_at + window + 3:
            taker = start()
        assert stopped and store.files["mem://cp/" + LOCK_FILE] == lease  # never rewritten while held
        last = max(_beats_landed(store, holder.token)) / 1000  # the newest beat on the store, whole
        window_ends = last + window  # the oracle: what the store says
        while taker is None and time.time() < window_ends + 5:
            taker = start()
        assert taker is not None, attempts[-1]
        try:
            assert len(stopped) == 1 and "was not renewed since" in str(stopped[0][1])
            when = stopped[0][0]
            # two heartbeats before anyone may take over; after torn renewals, not before that
            assert when <= window_ends - 2 * heartbeat + 0.05
            if failure == "torn":  # (renewals that landed unbeknown to it make it stop earlier)
                assert window_ends - 2 * heartbeat - 0.05 <= when
            early = [msg for at, msg in attempts if at < window_ends]
            assert early and all("in use by another running query" in msg for msg in early)
            assert attempts[-1][0] >= window_ends
            assert json.loads(store.read_text("mem://cp/" + LOCK_FILE))["owner"] == taker.token
        finally:
            taker.release()
    finally:
        holder.release()

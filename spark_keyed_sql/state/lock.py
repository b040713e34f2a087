"""One running query per checkpoint, across processes and machines: a lease file in the
checkpoint (Spark itself does not lock across processes).

The lease is created without overwrite (``create(path, overwrite=false)``), so of two
starters only one gets it; it names its owner (host, process, query, start time), its last
heartbeat and its takeover window, and a heartbeat thread renews it every ``HEARTBEAT_S``
seconds while the query runs. No file locks are needed, so it works on object stores and HDFS
alike. The two promises (DESIGN.md, "Leases"):

- **A kill never blocks the next start longer than two heartbeats.** A heartbeat writes the new
  lease beside the old one and moves it over it in one step (``CheckpointFS.replace_text``), so
  a reader sees the old lease or the new one, never a torn one. Where no such replacement exists
  (``replaces_whole`` False: Spark Connect, whose overwrite removes the record for as long as its
  write job runs, during which a starter would find the checkpoint free and take it) the lease is
  written once and never rewritten while held: it says ``"beats": true`` and the heartbeats go to
  two *beat records* beside it (``<lease>.beat0`` / ``.beat1``, owner and time), written in turn,
  never over the one holding the newest beat that landed, so a reader always finds that one
  whole; the lease's heartbeat is the newest of its own and its owner's beats (all processes
  sharing a checkpoint must run a version that reads beat records). A kill between the create
  and the write of a new lease leaves an empty file: a starter that finds a lease it cannot read
  waits until the file is two heartbeats old (a live writer fills it in milliseconds), then
  takes it over. A whole lease left by a process that died is taken over at once when its owner
  ran on this host and that process is gone, by anyone once its heartbeat is older than its
  takeover window (``TIMEOUT_S``); ``unlock`` (``ks.unlock`` / ``spark-keyed-sql state unlock``)
  removes one by hand.
- **A writer that cannot renew stops before anyone may take over.** The holder's deadline is its
  last renewal that landed plus the takeover window, less two heartbeats: a watchdog fails the
  query then (``on_lost``), and :func:`check_lease` refuses every later commit of that
  checkpoint in this process, so two writers never overlap. The window a starter honours is the
  one written in the lease (``timeout_ms``), not its own setting.

``spark.keyedsql.leaseHeartbeatSeconds`` and ``spark.keyedsql.leaseTimeoutSeconds`` set the two
periods (10 s and 120 s by default; the timeout must be more than three heartbeats).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .checkpoint import CheckpointError
from .faults import crash_point
from .filesystems import filesystem
from .fs import join

__all__ = [
    "CheckpointLock",
    "LOCK_FILE",
    "BEAT_FILES",
    "unlock",
    "lock_holder",
    "check_lease",
    "HEARTBEAT_CONF",
    "TIMEOUT_CONF",
]

log = logging.getLogger(__name__)

LOCK_FILE = ".spark_keyed_sql.lease"
BEAT_FILES = (LOCK_FILE + ".beat0", LOCK_FILE + ".beat1")  # where replacing the lease is not whole
HEARTBEAT_CONF = "spark.keyedsql.leaseHeartbeatSeconds"
TIMEOUT_CONF = "spark.keyedsql.leaseTimeoutSeconds"
_OWN: set[str] = set()  # lease tokens held by this process
_HELD: dict[str, CheckpointLock] = {}  # qualified checkpoint -> the lock this process holds on it
_HELD_LOCK = threading.Lock()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def check_lease(path: str, fs: Any = None) -> None:
    """Raise the lease's failure if this process held a lease on the checkpoint holding
    ``path`` (qualified, or qualified by ``fs``) and lost it or let it run out (called before a
    commit: a writer past its deadline never commits). Nothing when this process holds no lease
    there (e.g. Connect's server-side step: its client's watchdog stops the query)."""
    with _HELD_LOCK:
        held = list(_HELD.items())
    if not held:
        return
    where = path.rstrip("/")
    if fs is not None:
        try:
            where = fs.qualify(path).rstrip("/")
        except Exception:  # noqa: BLE001 - unresolvable here: the path as given
            pass
    for root, lock in held:
        if where == root or where.startswith(root + "/"):
            lock.check()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_record(fs: Any, path: str) -> dict | None:
    """A JSON record's content, ``{}`` when unreadable, None when absent."""
    try:
        text = fs.read_text(path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {}


def _last_beat_ms(fs: Any, checkpoint: str, holder: dict) -> Any:
    """The newest heartbeat of a lease renewed through beat records: its own, or its owner's
    newest beat (a beat being rewritten, torn, or another owner's is passed over)."""
    newest = holder.get("heartbeat_ms")
    for name in BEAT_FILES:
        beat = _read_record(fs, join(checkpoint, name)) or {}
        at = beat.get("heartbeat_ms")
        if beat.get("owner") == holder.get("owner") and isinstance(at, int) and isinstance(newest, int):
            newest = max(newest, at)
    return newest


def lock_holder(checkpoint: str, spark: Any = None, *, beats: bool = True) -> dict | None:
    """The lease's content (``owner``, ``host``, ``pid``, ``query``, ``started_ms``,
    ``heartbeat_ms``), ``{}`` when unreadable, None when the checkpoint is not locked.
    ``heartbeat_ms`` is the holder's newest beat; ``beats=False``: the lease alone (who holds
    it, one read)."""
    fs = filesystem(spark)
    holder = _read_record(fs, join(checkpoint, LOCK_FILE))
    if holder and beats and holder.get("beats") is True:
        holder = holder | {"heartbeat_ms": _last_beat_ms(fs, checkpoint, holder)}
    return holder


def unlock(checkpoint: str, spark: Any = None) -> dict | None:
    """Remove the checkpoint's lease whoever holds it (the way out when a query's process is
    gone and its lease has not timed out yet). Returns what the lease said, or None."""
    holder = lock_holder(checkpoint, spark)
    if holder is not None:
        fs = filesystem(spark)
        fs.delete(join(checkpoint, LOCK_FILE), recursive=False)
        if holder.get("beats") is True:
            for name in BEAT_FILES:
                fs.delete(join(checkpoint, name), recursive=False)
    return holder


class CheckpointLock:
    HEARTBEAT_S = 10.0  # how often a running query renews its lease
    TIMEOUT_S = 120.0  # a lease not renewed for this long belongs to nobody (the takeover window)

    def __init__(self, checkpoint: str, spark: Any = None, query: str | None = None):
        """``on_lost`` (set by the caller once its query runs) is called, once, if someone else
        takes the lease over while this process holds it, or if it could not be renewed in time."""
        self._on_lost: Callable[[CheckpointError], None] | None = None
        self.checkpoint = checkpoint
        self.fs = filesystem(spark)
        self.path = join(checkpoint, LOCK_FILE)
        self.query = query
        self.token = uuid.uuid4().hex
        self.started_ms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._root: str | None = None
        self.lost = False  # set when the lease was taken over, or ran out, while we held it
        self.failure: CheckpointError | None = None
        self.renewed_ms = 0  # the heartbeat_ms of the last lease we know landed whole
        self.deadline_ms = 0  # past this moment this holder must not write: it stops
        self._beats = False  # renewed through beat records (the lease itself is not replaced whole here)
        self._next_beat = 0  # the beat record the next heartbeat writes (never the one holding the newest)
        self._beat_files: set[str] = set()  # the beat records this holder wrote to (removed at release)
        self._failed_lock = threading.Lock()
        self._settings(self.fs.spark)

    def _settings(self, spark: Any) -> None:
        for attr, conf in (("HEARTBEAT_S", HEARTBEAT_CONF), ("TIMEOUT_S", TIMEOUT_CONF)):
            try:
                value = spark.conf.get(conf, None) if spark is not None else None
            except Exception:  # noqa: BLE001 - a session without a readable conf: the defaults
                value = None
            if value not in (None, ""):
                setattr(self, attr, float(value))
        if self.TIMEOUT_S <= 3 * self.HEARTBEAT_S:
            raise CheckpointError(
                f"{TIMEOUT_CONF} ({self.TIMEOUT_S:g} s) must be more than three times {HEARTBEAT_CONF} "
                f"({self.HEARTBEAT_S:g} s): a lease's holder stops two heartbeats before others may take it over"
            )

    @property
    def on_lost(self) -> Callable[[CheckpointError], None] | None:
        return self._on_lost

    @on_lost.setter
    def on_lost(self, fn: Callable[[CheckpointError], None] | None) -> None:
        self._on_lost = fn
        if fn is not None and self.failure is not None and not self._stop.is_set():
            fn(self.failure)  # lost before the query was there to stop: stopped now

    @property
    def margin_ms(self) -> int:
        """How long before the takeover window ends the holder stops: two heartbeats."""
        return int(2 * self.HEARTBEAT_S * 1000)

    # ------------------------------------------------------------------ content
    def _body(self, beat_ms: int) -> str:
        body = {
            "owner": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "query": self.query,
            "started_ms": self.started_ms,
            "heartbeat_ms": beat_ms,
            "timeout_ms": int(self.TIMEOUT_S * 1000),
        }
        if self._beats:
            body["beats"] = True
        return json.dumps(body, sort_keys=True)

    def _torn_age_s(self) -> float | None:
        """Seconds since the unreadable lease file was last written (None: it is gone)."""
        try:
            return (_now_ms() - self.fs.modified_ms(self.path)) / 1000
        except (OSError, FileNotFoundError):
            return None

    def _await_torn(self) -> dict | None:
        """The lease file is not a lease: a kill between its create and its write left it empty
        (or it was damaged). A live writer fills its lease in milliseconds, so such a file is
        waited on until it is two heartbeats old, then taken over (the next start is never
        blocked longer). Returns what the lease became meanwhile ({} when still not a lease:
        take it over; None when it went away)."""
        limit = 2 * self.HEARTBEAT_S
        age = self._torn_age_s()
        if age is None:
            return None
        if age < limit:
            log.warning(
                "lease file %s is not a lease (empty or damaged, written %.1f s ago): waiting until it is %.0f s old, "
                "then taking it over",
                self.path,
                age,
                limit,
            )
        while age is not None and age < limit:
            time.sleep(min(max(limit - age, 0.01), max(self.HEARTBEAT_S / 4, 0.05)))
            holder = lock_holder(self.checkpoint, self.fs.spark)
            if holder != {}:
                return holder  # written meanwhile (a live starter) or removed
            age = self._torn_age_s()
        if age is None:
            return None
        log.warning("lease file %s is not a lease (empty or damaged, %.1f s old): taken over", self.path, age)
        return {}

    def _stale(self, holder: dict) -> bool:
        if not isinstance(holder.get("heartbeat_ms"), int):
            return True  # not a lease we wrote
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            if holder["pid"] == os.getpid():
                if holder.get("owner") not in _OWN:
                    return True  # an earlier life of this pid (container restart)
            elif not _pid_alive(holder["pid"]):
                return True
        return _now_ms() - holder["heartbeat_ms"] > self._window_ms(holder)

    def _window_ms(self, holder: dict) -> int:
        """The takeover window the holder wrote in its lease (its promise to stop within it), else ours."""
        window = holder.get("timeout_ms")
        return window if isinstance(window, int) and window > 0 else int(self.TIMEOUT_S * 1000)

    def _refuse(self, holder: dict) -> CheckpointError:
        age = (_now_ms() - holder.get("heartbeat_ms", 0)) / 1000
        query = f", query {holder['query']!r}" if holder.get("query") else ""
        return CheckpointError(
            f"checkpoint {self.checkpoint!r} is in use by another running query (process {holder.get('pid')} on "
            f"{holder.get('host')}{query}, last heartbeat {age:.0f} s ago); stop it first, or use another checkpoint. "
            f"If that process is gone, its lock is taken over once the heartbeat is "
            f"{self._window_ms(holder) / 1000:.0f} s old, or at once after ks.unlock({self.checkpoint!r}) / "
            f"spark-keyed-sql state unlock {self.checkpoint}"
        )

    # ------------------------------------------------------------------ acquire / release
    def acquire(self) -> CheckpointLock:
        self.fs.probe(self.checkpoint)
        self.fs.mkdirs(self.checkpoint)
        self._beats = not self.fs.replaces_whole(self.path)
        self.started_ms = _now_ms()
        for _ in range(5):
            beat_ms = _now_ms()
            try:
                self.fs.create_text(self.path, self._body(beat_ms), midway=lambda: crash_point("lease_created"))
                break
            except FileExistsError:
                holder = lock_holder(self.checkpoint, self.fs.spark)
                if holder == {}:
                    holder = self._await_torn()
                if holder is None:
                    continue  # released meanwhile: try again
                if holder and not self._stale(holder):
                    raise self._refuse(holder) from None
                # take over: only if the lease is still the stale one we judged
                if lock_holder(self.checkpoint, self.fs.spark) == holder:
                    self.fs.delete(self.path, recursive=False)
                    if holder:
                        log.warning(
                            "checkpoint %s: took over the lease of %s (process %s on %s, last heartbeat %.1f s ago)",
                            self.checkpoint,
                            holder.get("query") or "a query",
                            holder.get("pid"),
                            holder.get("host"),
                            (_now_ms() - holder["heartbeat_ms"]) / 1000
                            if isinstance(holder.get("heartbeat_ms"), int)
                            else float("nan"),
                        )
        else:
            raise CheckpointError(f"checkpoint {self.checkpoint!r}: could not take its lock (others kept taking it)")
        # a starter that judged our lease torn (were we paused for two heartbeats between its
        # create and its write) may have taken it: ours only if it reads back as ours
        holder = lock_holder(self.checkpoint, self.fs.spark, beats=False)
        if not holder or holder.get("owner") != self.token:
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r}: its lock was taken by another starter while this one wrote it "
                f"(now held by process {(holder or {}).get('pid')} on {(holder or {}).get('host')})"
            )
        self.renewed_ms = beat_ms
        self.deadline_ms = self._deadline(beat_ms)
        _OWN.add(self.token)
        self._tidy()
        try:
            self._root = self.fs.qualify(self.checkpoint).rstrip("/")
        except Exception:  # noqa: BLE001 - as given
            self._root = self.checkpoint.rstrip("/")
        with _HELD_LOCK:
            _HELD[self._root] = self
        self._thread = threading.Thread(target=self._beat, name=f"spark-keyed-sql lease {self.checkpoint}", daemon=True)
        self._thread.start()
        self._watchdog = threading.Thread(
            target=self._watch, name=f"spark-keyed-sql lease deadline {self.checkpoint}", daemon=True
        )
        self._watchdog.start()
        return self

    def _deadline(self, beat_ms: int) -> int:
        return beat_ms + int(self.TIMEOUT_S * 1000) - self.margin_ms

    def _tidy(self) -> None:
        """Remove the temporary files of heartbeats killed before their move (two heartbeats
        old: no live writer's), and beat records an earlier holder left (it is gone: the lease is
        ours). Only what a listing shows: Connect's passes over hidden names, and there a leftover
        beat record (another owner's, so ignored) stays until this holder's beats replace it."""
        prefix = "." + LOCK_FILE + "."
        try:
            for name in self.fs.list(self.checkpoint):
                path = join(self.checkpoint, name)
                if name in BEAT_FILES or (
                    name.startswith(prefix)
                    and name.endswith(".tmp")
                    and _now_ms() - self.fs.modified_ms(path) > self.margin_ms
                ):
                    self.fs.delete(path, recursive=False)
        except Exception:  # noqa: BLE001 - leftovers are harmless: tried again at the next start
            log.debug("lease %s: leftover temporary files not removed", self.path, exc_info=True)

    def _beat(self) -> None:
        missed = 0
        while not self._stop.wait(self.HEARTBEAT_S):
            if self.lost:
                return
            beat_ms = _now_ms()
            try:
                holder = lock_holder(self.checkpoint, self.fs.spark, beats=False)
                if not holder or holder.get("owner") != self.token:
                    self._lose(holder)
                    return
                self._renew(beat_ms)
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried until the deadline
                missed += 1
                log.warning(
                    "lease %s: heartbeat %d missed (%s); last renewed at %s, this query stops at %s unless renewed "
                    "before (others may take the lease over from %s)",
                    self.path,
                    missed,
                    exc,
                    _when(self.renewed_ms),
                    _when(self.deadline_ms),
                    _when(self.deadline_ms + self.margin_ms),
                )
                continue
            if not self.lost:
                self.renewed_ms = beat_ms
                self.deadline_ms = self._deadline(beat_ms)
            missed = 0

    def _renew(self, beat_ms: int) -> None:
        """Write this heartbeat: the lease replaced whole, or (``_beats``) the beat record that does
        not hold the newest beat that landed (a write that fails there, even halfway, leaves the
        newest one as it was: the next heartbeat tries the same record again)."""
        midway = lambda: crash_point("lease_renewing")  # noqa: E731
        if not self._beats:
            self.fs.replace_text(self.path, self._body(beat_ms), midway=midway)
            return
        beat = json.dumps({"owner": self.token, "heartbeat_ms": beat_ms}, sort_keys=True)
        path = join(self.checkpoint, BEAT_FILES[self._next_beat])
        self._beat_files.add(path)
        self.fs.create_text(path, beat, overwrite=True, midway=midway)
        self._next_beat = 1 - self._next_beat

    def _watch(self) -> None:
        """Fail the query at the deadline unless a renewal moved it (independent of the heartbeat
        thread, which may hang in a call to an unreachable store)."""
        while not self._stop.is_set() and not self.lost:
            left = (self.deadline_ms - _now_ms()) / 1000
            if left <= 0:
                self._expire()
                return
            self._stop.wait(min(left, self.HEARTBEAT_S))

    def _expire(self) -> None:
        self._fail(self._expired())

    def _expired(self) -> CheckpointError:
        window = self.TIMEOUT_S
        return CheckpointError(
            f"checkpoint {self.checkpoint!r}: this query's lease was not renewed since {_when(self.renewed_ms)} "
            f"(its storage refused or did not answer the heartbeats since); after the takeover window of "
            f"{window:g} s ({_when(self.renewed_ms + int(window * 1000))}) another query may start on this "
            "checkpoint, so this one stops now, before that. Its committed batches are intact; start it again "
            "once the checkpoint's storage is reachable"
        )

    def _lose(self, holder: dict | None) -> None:
        who = f"process {holder.get('pid')} on {holder.get('host')}" if holder else "nobody (the lease file is gone)"
        self._fail(
            CheckpointError(
                f"checkpoint {self.checkpoint!r}: this query's lease was taken over (it is now held by {who}); two "
                "queries must not write one checkpoint, so this one stops. Its committed batches are intact"
            )
        )

    def _fail(self, err: CheckpointError) -> None:
        with self._failed_lock:
            if self._stop.is_set() or self.lost:
                return  # released meanwhile, or already failed
            self.lost = True
            self.failure = err
        log.error("%s", err)
        if self._on_lost is not None:
            self._on_lost(err)

    def check(self) -> None:
        """Raise if this holder may no longer write: its lease was lost, or its deadline passed
        (before a commit; the watchdog may not have run yet)."""
        if self.failure is not None:
            raise self.failure
        if _now_ms() >= self.deadline_ms:
            # raised only: the watchdog stops the query (stopping it from here, inside its own
            # batch, would wait for this very batch)
            raise self._expired()

    def release(self) -> None:
        self._stop.set()
        # a renewal under way would write the lease back after it is deleted: let it finish (a
        # heartbeat hung on an unreachable store is not waited for past a few seconds)
        beat = self._thread
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=max(5.0, 2 * self.HEARTBEAT_S))
        with _HELD_LOCK:
            if self._root is not None and _HELD.get(self._root) is self:
                del _HELD[self._root]
        if self.token not in _OWN:
            return
        try:
            holder = lock_holder(self.checkpoint, self.fs.spark, beats=False)
            if holder and holder.get("owner") == self.token:
                # the lease first: were its beats removed first, a reader meanwhile would find it as
                # old as its start and take it over while this holder still counts as its owner
                self.fs.delete(self.path, recursive=False)
                for path in sorted(self._beat_files):  # then those beat records still ours
                    if (_read_record(self.fs, path) or {}).get("owner") == self.token:
                        self.fs.delete(path, recursive=False)
        except Exception:  # noqa: BLE001 - at interpreter exit the JVM may be gone; the lease times out
            pass
        finally:
            _OWN.discard(self.token)  # after the removal: until then a starter here sees a live lease

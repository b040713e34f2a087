"""One running query per checkpoint, across processes and machines: a lease file in the
checkpoint (Spark itself does not lock across processes).

The lease is created without overwrite (``create(path, overwrite=false)``), so of two
starters only one gets it; it names its owner (host, process, query, start time) and a
heartbeat thread rewrites it every ``HEARTBEAT_S`` seconds while the query runs. No file locks
are needed, so it works on object stores and HDFS alike. A lease left by a process that died
never blocks for good: it is taken over at once when its owner ran on this host and that
process is gone, and by anyone once its heartbeat is older than ``TIMEOUT_S``; ``unlock``
(``ks.unlock`` / ``spark-keyed-sql state unlock``) removes it by hand.
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
from .filesystems import filesystem
from .fs import join

__all__ = ["CheckpointLock", "LOCK_FILE", "unlock", "lock_holder"]

log = logging.getLogger(__name__)

LOCK_FILE = ".spark_keyed_sql.lease"
_OWN: set[str] = set()  # lease tokens held by this process


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: existence check only
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(checkpoint: str, spark: Any = None) -> dict | None:
    """The lease's content (``owner``, ``host``, ``pid``, ``query``, ``started_ms``,
    ``heartbeat_ms``), ``{}`` when unreadable, None when the checkpoint is not locked."""
    try:
        text = filesystem(spark).read_text(join(checkpoint, LOCK_FILE))
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
        return holder if isinstance(holder, dict) else {}
    except ValueError:
        return {}


def unlock(checkpoint: str, spark: Any = None) -> dict | None:
    """Remove the checkpoint's lease whoever holds it (the way out when a query's process is
    gone and its lease has not timed out yet). Returns what the lease said, or None."""
    holder = lock_holder(checkpoint, spark)
    if holder is not None:
        filesystem(spark).delete(join(checkpoint, LOCK_FILE), recursive=False)
    return holder


class CheckpointLock:
    HEARTBEAT_S = 10.0  # how often a running query refreshes its lease
    TIMEOUT_S = 120.0  # a lease not refreshed for this long belongs to nobody

    def __init__(self, checkpoint: str, spark: Any = None, query: str | None = None):
        """``on_lost`` (set by the caller once its query runs) is called, once, if someone else
        takes the lease over while this process holds it."""
        self.on_lost: Callable[[CheckpointError], None] | None = None
        self.checkpoint = checkpoint
        self.fs = filesystem(spark)
        self.path = join(checkpoint, LOCK_FILE)
        self.query = query
        self.token = uuid.uuid4().hex
        self.started_ms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False  # set when someone else took the lease over while we held it

    # ------------------------------------------------------------------ content
    def _body(self) -> str:
        return json.dumps(
            {
                "owner": self.token,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "query": self.query,
                "started_ms": self.started_ms,
                "heartbeat_ms": _now_ms(),
            },
            sort_keys=True,
        )

    def _garbage(self) -> None:
        """The lease file is not a lease (damaged, or half-written by a process that died): taken
        over once it is older than the timeout, refused before (it may be a live writer's)."""
        try:
            age_s = (_now_ms() - self.fs.modified_ms(self.path)) / 1000
        except (OSError, FileNotFoundError):
            return
        if age_s > self.TIMEOUT_S:
            log.warning(
                "lease file %s is not a lease (damaged or half-written, %.0f s old): taken over", self.path, age_s
            )
            return
        raise CheckpointError(
            f"lease file {self.path} is not a lease (damaged, or being written, {age_s:.0f} s ago); if no query runs "
            f"on checkpoint {self.checkpoint!r}, remove it with ks.unlock({self.checkpoint!r}) or spark-keyed-sql "
            f"state unlock {self.checkpoint}; it is taken over by itself once it is {self.TIMEOUT_S:.0f} s old"
        )

    def _stale(self, holder: dict) -> bool:
        if not isinstance(holder.get("heartbeat_ms"), int):
            return True  # not a lease we wrote
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            if holder["pid"] == os.getpid():
                return holder.get("owner") not in _OWN  # an earlier life of this pid (container restart)
            if not _pid_alive(holder["pid"]):
                return True
        return _now_ms() - holder["heartbeat_ms"] > self.TIMEOUT_S * 1000

    def _refuse(self, holder: dict) -> CheckpointError:
        age = (_now_ms() - holder.get("heartbeat_ms", 0)) / 1000
        query = f", query {holder['query']!r}" if holder.get("query") else ""
        return CheckpointError(
            f"checkpoint {self.checkpoint!r} is in use by another running query (process {holder.get('pid')} on "
            f"{holder.get('host')}{query}, last heartbeat {age:.0f} s ago); stop it first, or use another checkpoint. "
            f"If that process is gone, its lock is taken over once the heartbeat is {self.TIMEOUT_S:.0f} s old, or at "
            f"once after ks.unlock({self.checkpoint!r}) / spark-keyed-sql state unlock {self.checkpoint}"
        )

    # ------------------------------------------------------------------ acquire / release
    def acquire(self) -> CheckpointLock:
        self.fs.probe(self.checkpoint)
        self.fs.mkdirs(self.checkpoint)
        self.started_ms = _now_ms()
        for _ in range(5):
            try:
                self.fs.create_text(self.path, self._body())
                break
            except FileExistsError:
                holder = lock_holder(self.checkpoint, self.fs.spark)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder == {}:
                    self._garbage()
                elif not self._stale(holder):
                    raise self._refuse(holder) from None
                # take over: only if the lease is still the stale one we judged
                if lock_holder(self.checkpoint, self.fs.spark) == holder:
                    self.fs.delete(self.path, recursive=False)
        else:
            raise CheckpointError(f"checkpoint {self.checkpoint!r}: could not take its lock (others kept taking it)")
        _OWN.add(self.token)
        self._thread = threading.Thread(target=self._beat, name=f"spark-keyed-sql lease {self.checkpoint}", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        missed = 0
        while not self._stop.wait(self.HEARTBEAT_S):
            try:
                holder = lock_holder(self.checkpoint, self.fs.spark)
                if not holder or holder.get("owner") != self.token:
                    self._lose(holder)
                    return
                self.fs.write_text(self.path, self._body())
                missed = 0
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the timeout is generous
                missed += 1
                log.warning(
                    "lease %s: heartbeat %d missed (%s); taken over by others after %.0f s without one",
                    self.path,
                    missed,
                    exc,
                    self.TIMEOUT_S,
                )

    def _lose(self, holder: dict | None) -> None:
        if self._stop.is_set():
            return  # released meanwhile
        self.lost = True
        who = f"process {holder.get('pid')} on {holder.get('host')}" if holder else "nobody (the lease file is gone)"
        err = CheckpointError(
            f"checkpoint {self.checkpoint!r}: this query's lease was taken over (it is now held by {who}); two queries "
            "must not write one checkpoint, so this one stops. Its committed batches are intact"
        )
        log.error("%s", err)
        if self.on_lost is not None:
            self.on_lost(err)

    def release(self) -> None:
        self._stop.set()
        if self.token not in _OWN:
            return
        _OWN.discard(self.token)
        try:
            holder = lock_holder(self.checkpoint, self.fs.spark)
            if holder and holder.get("owner") == self.token:
                self.fs.delete(self.path, recursive=False)
        except Exception:  # noqa: BLE001 - at interpreter exit the JVM may be gone; the lease times out
            pass

"""The bulk engine's executor-local state: one SQLite database per (checkpoint, state
partition) on the host that ran the partition last, so a micro-batch reads and writes only the
keys it touches.

The checkpoint stays the source of truth (a base snapshot plus per-batch deltas, written
through Spark's file system layer: ``stream.py``); this store is a cache of one partition of it
that a task validates before use. Each committed batch names, per partition, the token of the
task whose changes it committed. A task records its changes as *pending* under its own token
(and the token of the state it started from); the next batch's task finds the token its
predecessor committed and either sees the store already at it, or applies that pending change
set, or — the store is missing, behind, ahead, or from another attempt — reports a miss, and the
driver feeds the partition's state from the checkpoint instead (a rebuild). Tokens are unique
per task attempt, so a store can never be taken for a state it does not hold: not after a crash
(uncommitted pending sets are discarded), a restore of the checkpoint, or a checkpoint deleted
and made anew at the same path. One shortcut: a task whose store is empty (a new checkpoint's
first batch, a backfill) writes its changes straight into the state, marked ``direct:<token>``;
the next batch keeps them if it names that token and empties the store otherwise, so a large
first batch is not copied a second time by the small batch after it.

Rows are stored as bytes: ``marshal`` (no code runs on load; pickle is never used) of the state
row, with the values marshal cannot hold (datetime, date, Decimal) tagged.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import logging
import marshal
import os
import sqlite3
import sys
import tempfile
import time
from enum import IntEnum, unique
from typing import Any, NamedTuple

__all__ = ["Change", "LocalStore", "cache_root", "decode", "encode", "remove_store", "store_dir"]

log = logging.getLogger(__name__)

# a tuple whose first element is this complex number is a tagged value (no Spark type is complex)
_TAG = 0j


@unique
class ValueTag(IntEnum):
    """What a tagged value ``(_TAG, tag, payload)`` of the local store holds (the store's format:
    a code is never reused)."""

    DATETIME = 0  # payload: microseconds since the epoch, naive UTC
    DATE = 1  # payload: the proleptic ordinal
    DECIMAL = 2  # payload: its text


# (plain ints in the hot loops, and marshal writes no enum)
_DATETIME, _DATE, _DECIMAL = int(ValueTag.DATETIME), int(ValueTag.DATE), int(ValueTag.DECIMAL)
_SIMPLE = frozenset({int, float, str, bytes, bool, type(None)})
_EPOCH = dt.datetime(1970, 1, 1)
_MICRO = dt.timedelta(microseconds=1)
_PLAIN, _TAGGED = b"\x00", b"\x01"
MARSHAL_VERSION = 2  # no back-references: equal values give equal bytes (keys are compared as bytes)
KEEP_UNUSED_S = 7 * 24 * 3600  # a checkpoint's cache unused this long is removed


def _enc(v: Any) -> Any:
    t = type(v)
    if t in _SIMPLE:
        return v
    if t is list:
        return [_enc(x) for x in v]
    if t is tuple:
        return tuple(_enc(x) for x in v)
    if t is dict:
        return {_enc(k): _enc(x) for k, x in v.items()}
    if t is dt.datetime or (isinstance(v, dt.datetime) and t.__module__ != "pandas._libs.tslibs.timestamps"):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return (_TAG, _DATETIME, (v - _EPOCH) // _MICRO)
    if t is dt.date:
        return (_TAG, _DATE, v.toordinal())
    if t is decimal.Decimal:
        return (_TAG, _DECIMAL, str(v))
    if t is bytearray:
        return bytes(v)
    raise TypeError(f"cannot store a {t.__name__} in the bulk engine's local state")


def _dec(v: Any) -> Any:
    t = type(v)
    if t is tuple:
        if v and type(v[0]) is complex:
            kind, payload = v[1], v[2]
            if kind == _DATETIME:
                return _EPOCH + dt.timedelta(microseconds=payload)
            if kind == _DATE:
                return dt.date.fromordinal(payload)
            if kind == _DECIMAL:
                return decimal.Decimal(payload)
            raise ValueError(f"local state: a value tagged {kind!r}, which this release does not know")
        return tuple(_dec(x) for x in v)
    if t is list:
        return [_dec(x) for x in v]
    if t is dict:
        return {_dec(k): _dec(x) for k, x in v.items()}
    return v


def encode(values: tuple) -> bytes:
    """A row (or key) as bytes; equal values give equal bytes."""
    if all(type(v) in _SIMPLE for v in values):
        return _PLAIN + marshal.dumps(values, MARSHAL_VERSION)
    return _TAGGED + marshal.dumps(_enc(values), MARSHAL_VERSION)


def decode(data: bytes) -> tuple:
    value = marshal.loads(data[1:])
    return value if data[:1] == _PLAIN else _dec(value)


def cache_root(configured: str | None = None) -> str:
    """Where this host keeps local state: ``configured`` (the session's
    ``spark.keyedsql.localStateDir``), else a directory of this user's under the temp dir."""
    if configured:
        return configured
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"spark-keyed-sql-state-{uid}")


def store_dir(root: str, checkpoint: str) -> str:
    """The local directory of one checkpoint (by its qualified URI)."""
    return os.path.join(root, hashlib.sha1(checkpoint.encode()).hexdigest()[:20])


def remove_store(root: str, checkpoint: str) -> int:
    """Remove this host's local state of one checkpoint (an erase: no copy of the erased state
    may stay); returns the files removed. The next batch feeds every partition anew."""
    path = store_dir(root, checkpoint)
    if not os.path.isdir(path):
        return 0
    n = 0
    for d, _, files in os.walk(path, topdown=False):
        for f in files:
            os.remove(os.path.join(d, f))
            n += 1
        os.rmdir(d)
    return n


_SWEPT: set[str] = set()


def _sweep(root: str) -> None:
    """Once per process and root: remove caches of checkpoints unused for ``KEEP_UNUSED_S``."""
    if root in _SWEPT:
        return
    _SWEPT.add(root)
    now = time.time()
    try:
        for name in os.listdir(root):
            path = os.path.join(root, name)
            try:
                if now - os.path.getmtime(path) > KEEP_UNUSED_S:
                    for f in os.listdir(path):
                        os.remove(os.path.join(path, f))
                    os.rmdir(path)
            except OSError:
                continue  # in use by another process, or already gone
    except OSError:
        pass


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


_BOOT = _boot_id()
_FORMAT = f"1 python{sys.version_info[0]}.{sys.version_info[1]} marshal{MARSHAL_VERSION} boot{_BOOT}"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state (k BLOB PRIMARY KEY, row BLOB NOT NULL, timer_at INTEGER, expire_at INTEGER) \
WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS state_timer ON state (timer_at) WHERE timer_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS state_expire ON state (expire_at) WHERE expire_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS pending (token TEXT, k BLOB, row BLOB, timer_at INTEGER, expire_at INTEGER,
                                    PRIMARY KEY (token, k)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending_base (token TEXT PRIMARY KEY, base TEXT) WITHOUT ROWID;
"""

_DIRECT = "direct:"  # meta 'applied' of an empty store holding one task's uncommitted changes


class Change(NamedTuple):
    """One key's change by a task, a row of the store's ``state`` / ``pending`` tables."""

    key: bytes
    row: bytes | None  # None: the key's state is deleted
    timer_at: int | None
    expire_at: int | None


_LOOKUP_CHUNK = 500


class LocalStore:
    """One state partition of one checkpoint on this host."""

    def __init__(self, root: str, checkpoint: str, part: int):
        directory = store_dir(root, checkpoint)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        _sweep(root)
        os.utime(directory)
        self.path = os.path.join(directory, f"part-{part}.sqlite")
        self.db = sqlite3.connect(self.path, timeout=600, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        # atomic even if the process is killed; only an OS crash could damage the file, and a
        # store written before the machine's last boot is not used (the boot id check below)
        self.db.execute("PRAGMA synchronous=" + ("OFF" if _BOOT else "NORMAL"))
        self.db.executescript(_SCHEMA)
        made = self.db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        if made is None or made[0] != _FORMAT:
            # another Python (marshal's format), another boot, or a new file: start empty
            if made is not None:
                log.info(
                    "local state store %s was written by %r, not %r: starts empty (fed from the checkpoint)",
                    self.path,
                    made[0],
                    _FORMAT,
                )
            for table in ("state", "pending", "pending_base", "meta"):
                self.db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
            self.db.execute("INSERT INTO meta VALUES ('format', ?)", (_FORMAT,))

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ validity
    def applied(self) -> str:
        """The token of the committed state the store holds ("" for none; ``direct:<token>``
        for an empty store's state written by a task whose commit is not yet known)."""
        row = self.db.execute("SELECT value FROM meta WHERE name = 'applied'").fetchone()
        return "" if row is None else row[0]

    def _undo_direct(self, applied: str) -> str:
        """Drop changes written straight into an empty store by a task not (or not yet) known
        committed: the store is empty again and holds no state ("")."""
        if not applied.startswith(_DIRECT):
            return applied
        self.db.execute("DELETE FROM state")
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('applied', '')")
        return ""

    def ensure(self, expected: str) -> bool:
        """Bring the store to the committed state ``expected`` names, if it can: True when the
        store now holds it, False for a miss (the partition must be rebuilt)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            applied = self.applied()
            if applied == _DIRECT + expected:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('applied', ?)", (expected,))
                applied = expected
            applied = self._undo_direct(applied)
            if applied != expected:
                base = db.execute("SELECT base FROM pending_base WHERE token = ?", (expected,)).fetchone()
                if base is None or base[0] != applied:
                    db.execute("COMMIT")
                    return False
                db.execute(
                    "DELETE FROM state WHERE k IN (SELECT k FROM pending WHERE token = ? AND row IS NULL)", (expected,)
                )
                db.execute(
                    "INSERT OR REPLACE INTO state SELECT k, row, timer_at, expire_at FROM pending WHERE token = ? AND "
                    "row IS NOT NULL",
                    (expected,),
                )
                db.execute("INSERT OR REPLACE INTO meta VALUES ('applied', ?)", (expected,))
            db.execute("DELETE FROM pending")  # any other change set belongs to an attempt that was not committed
            db.execute("DELETE FROM pending_base")
            db.execute("COMMIT")
            return True
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def load_begin(self, clear: bool) -> None:
        """Start feeding the partition rows from the checkpoint, in one transaction until
        ``load_end``: all its state (``clear``: a full rebuild) or the changes since the state
        the store holds (a catch-up)."""
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("DELETE FROM pending")
        self.db.execute("DELETE FROM pending_base")
        if clear:
            self.db.execute("DELETE FROM state")
        self._upserts: list[Change] = []
        self._deletes: list[tuple[bytes]] = []

    def load(self, key: bytes, row: bytes | None, timer_at: int | None, expire_at: int | None) -> None:
        if row is None:
            self._deletes.append((key,))
        else:
            self._upserts.append((key, row, timer_at, expire_at))
        if len(self._upserts) + len(self._deletes) >= 10_000:
            self._load_flush()

    def _load_flush(self) -> None:
        self.db.executemany("DELETE FROM state WHERE k = ?", self._deletes)
        self.db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?)", self._upserts)
        self._upserts, self._deletes = [], []

    def load_end(self, token: str) -> None:
        """The partition now holds the committed state ``token`` names."""
        try:
            self._load_flush()
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('applied', ?)", (token,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ reading
    def get(self, keys: list[bytes]) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for i in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[i : i + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            out.update(self.db.execute(f"SELECT k, row FROM state WHERE k IN ({marks})", chunk))  # noqa: S608 - placeholders only
        return out

    def due(self, timer_until: int | None, expire_until: int | None) -> list[tuple[bytes, bytes]]:
        """Keys with a timer due at ``timer_until`` or state expiring by ``expire_until``."""
        rows: dict[bytes, bytes] = {}
        if timer_until is not None:
            rows.update(self.db.execute("SELECT k, row FROM state WHERE timer_at <= ?", (timer_until,)))
        if expire_until is not None:
            rows.update(self.db.execute("SELECT k, row FROM state WHERE expire_at <= ?", (expire_until,)))
        return sorted(rows.items())

    def next_due(self) -> tuple[int | None, int | None]:
        """The earliest timer and the earliest expiry held (for the driver's timer pump)."""
        # one query per column, so each reads its partial index (both MINs in one query scan the table)
        timer = self.db.execute("SELECT MIN(timer_at) FROM state WHERE timer_at IS NOT NULL").fetchone()
        expiry = self.db.execute("SELECT MIN(expire_at) FROM state WHERE expire_at IS NOT NULL").fetchone()
        return (timer[0] if timer else None, expiry[0] if expiry else None)

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM state").fetchone()[0]

    # ------------------------------------------------------------------ writing
    def stage(self, token: str, base: str, changes: list[Change]) -> None:
        """Record a task's changes, to apply once its batch is known committed."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            applied = self.applied()
            if applied == _DIRECT + token:
                applied = self._undo_direct(applied)  # staged again: the new change set replaces it
            if base == "" == applied and db.execute("SELECT 1 FROM state LIMIT 1").fetchone() is None:
                # an empty store (a new checkpoint's first batch, a backfill): the changes go
                # straight into the state, marked as this task's until a commit names it, so
                # the next batch need not copy a large first batch out of pending
                db.executemany(
                    "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?)", (c for c in changes if c.row is not None)
                )
                db.execute("INSERT OR REPLACE INTO meta VALUES ('applied', ?)", (_DIRECT + token,))
            else:
                db.execute("DELETE FROM pending WHERE token = ?", (token,))
                db.executemany("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)", ((token, *c) for c in changes))
                db.execute("INSERT OR REPLACE INTO pending_base VALUES (?, ?)", (token, base))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

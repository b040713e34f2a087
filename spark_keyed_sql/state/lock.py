"""One running query per checkpoint, across processes: an exclusive ``flock`` on a file in the
checkpoint, held while the query runs (Spark itself does not lock across processes)."""

from __future__ import annotations

import fcntl
import os

from .checkpoint import CheckpointError, local_path

__all__ = ["CheckpointLock", "LOCK_FILE"]

LOCK_FILE = ".spark_keyed_sql.lock"


class CheckpointLock:
    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self.path = os.path.join(local_path(checkpoint), LOCK_FILE)
        self.fd: int | None = None

    def acquire(self) -> CheckpointLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="ignore").strip() or "unknown"
            os.close(fd)
            raise CheckpointError(
                f"checkpoint {self.checkpoint!r} is in use by another running query (process {holder}); "
                "stop it first, or use another checkpoint"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

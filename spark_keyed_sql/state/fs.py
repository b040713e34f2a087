"""The one place this project touches checkpoint, state and output files: :class:`CheckpointFS`,
with one implementation per kind of session, both reaching files through Spark so that any URI
Spark accepts works (plain and relative paths, ``file:``, ``hdfs://``, ``s3a://``, ``abfss://``,
``gs://``, ``dbfs:/``, ``viewfs://``):

- a classic session: Hadoop's ``FileSystem`` through the driver's JVM (``hadoop_fs.py``);
- a Spark Connect session, which has no JVM on this side: DataFrame reads and writes done by the
  server (``connect_fs.py``); the client itself never opens a checkpoint file.

``filesystems.filesystem(spark)`` gives the one for a session.

What the commit protocols built on this rely on (see docs/reliability.md):

- ``create_text(path, text)`` without overwrite fails when a record exists there; on HDFS and on
  object stores a record appears whole or not at all.
- ``write_text(..., overwrite=True)`` replaces a small record; on object stores that is one PUT.
- ``replace_text`` replaces one so a reader never sees it torn: a temporary file moved over it
  where the store moves atomically (local disks, HDFS), one PUT on object stores; it says when
  neither holds (Connect's overwrite of a record directory, which a reader may find removed for
  as long as the write job runs); ``replaces_whole`` says it beforehand.
- ``list`` sees every file created before it was called (S3, GCS and ADLS list consistently).
- ``rename`` is NOT relied on for atomicity: on object stores it is copy + delete.

A small record (a commit, the lease, the checkpoint's metadata) is a file when a classic session
wrote it and a *record directory* when a Connect session did: Spark's writers make directories,
so there it is ``<path>/part-*.txt`` holding the text and a newline. Both implementations read
both shapes. A record directory with no content left is a removed record (Connect cannot delete:
it overwrites with nothing), and reads as absent.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..api.errors import KeyedSQLError

__all__ = ["CheckpointFS", "FSError", "join", "is_path", "record_part", "record_text", "temp_dir"]


class FSError(KeyedSQLError):
    """A checkpoint or output location Spark's file system layer cannot reach or use."""


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a path or URI (never ``os.path``: URIs keep their ``//``)."""
    out = base.rstrip("/") if base not in ("/", "") else base
    for p in parts:
        out = (out + "/" if not out.endswith("/") else out) + p.strip("/")
    return out


def record_part(names: list[str]) -> str | None:
    """The file holding a record directory's text, among the names in it (Spark's text writer
    names it ``part-*``; its markers and checksums are hidden names)."""
    parts = sorted(n for n in names if n.startswith("part-") and not n.endswith(".crc"))
    return parts[-1] if parts else None


def record_text(data: bytes) -> bytes:
    """A record directory's text from its part file's bytes: without the line end the text
    writer adds after its one row."""
    return data[:-1] if data.endswith(b"\n") else data


class CheckpointFS(ABC):
    """File operations on paths/URIs, done by Spark for the session ``spark``."""

    spark: Any
    renames: bool = True  # ``rename`` moves a file (else callers write in place)
    names_files: bool = True  # a file can be written under a name of the caller's (not only record directories)

    # ------------------------------------------------------------------ resolution
    @abstractmethod
    def qualify(self, path: str, what: str = "path") -> str:
        """The absolute URI Spark would use for ``path`` (``/a/b`` -> ``file:/a/b``)."""

    @abstractmethod
    def probe(self, path: str, what: str = "checkpoint") -> None:
        """Fail now, with the URI and Spark's reason, if ``path`` cannot be reached (unknown
        scheme, connector not on the classpath, no credentials): before anything is written."""

    # ------------------------------------------------------------------ queries
    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def list(self, path: str) -> list[str]:
        """Names in directory ``path`` (empty when it does not exist), checksum files left out."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Bytes under ``path`` (a file or a directory tree)."""

    @abstractmethod
    def modified_ms(self, path: str) -> int: ...

    def files_since(self, path: str, since_ms: int) -> list[str]:
        """Paths of the files directly in directory ``path`` modified at or after ``since_ms``."""
        out = []
        for name in self.list(path):
            child = join(path, name)
            if not self.is_dir(child) and self.modified_ms(child) >= since_ms:
                out.append(child)
        return out

    # ------------------------------------------------------------------ reading
    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """A file's bytes, or a record directory's text; ``FileNotFoundError`` when neither."""

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    @abstractmethod
    def tail(self, path: str, n: int) -> bytes:
        """The last ``n`` bytes of a file (fewer if it is shorter)."""

    # ------------------------------------------------------------------ writing
    @abstractmethod
    def create_text(
        self, path: str, text: str, overwrite: bool = False, midway: Callable[[], None] | None = None
    ) -> None:
        """Write a small record. Without ``overwrite``: ``FileExistsError`` if one exists.
        ``midway``: called once the record exists and before its text is in (a fault point)."""

    def write_text(self, path: str, text: str) -> None:
        """Replace a small record's content (one PUT on object stores)."""
        self.create_text(path, text, overwrite=True)

    def replaces_whole(self, path: str) -> bool:
        """Whether :meth:`replace_text` of ``path`` is never seen torn or absent by a reader
        (False here, as on Connect: an overwrite removes the record, then writes it anew)."""
        return False

    def replace_text(self, path: str, text: str, midway: Callable[[], None] | None = None) -> bool:
        """Replace a small record so that no reader sees it torn, where the store allows: True
        when a reader sees the old text or the new one, whole; False when the replacement may be
        seen half done (here: an overwrite in place). ``midway``: a fault point inside it."""
        if midway is not None:
            midway()
        self.write_text(path, text)
        return False

    @abstractmethod
    def mkdirs(self, path: str) -> None: ...

    @abstractmethod
    def delete(self, path: str, recursive: bool = True) -> bool:
        """Delete ``path``; False when there was nothing to delete."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (which must not exist); never used as a commit."""

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy a file or directory tree, possibly across file systems."""


def is_path(target: str) -> bool:
    """A sink / output given as a path or URI (else a table name, ``console`` or ``memory:``)."""
    return "/" in target or target.startswith(".") or "://" in target


def temp_dir(prefix: str) -> str:
    """A local temporary directory removed when the process exits (not before: Spark's file
    server and a running query may read it until then). For things that are not the user's
    checkpoints or outputs: the package zip shipped to executors, and the checkpoint of a
    stream started without one (Spark gives those a temporary directory too)."""
    import atexit
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path

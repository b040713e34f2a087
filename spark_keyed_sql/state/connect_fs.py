"""Spark Connect sessions: checkpoint files through DataFrame operations the server runs.

A Connect client has no JVM, and neither has the server side's Python (``foreachBatch`` runs in
a server-side worker that is itself a Connect client), so Hadoop's ``FileSystem`` is out of
reach from any Python this project runs. What Spark offers instead, and what this uses:

- listing and reading: the ``binaryFile`` source (``path``, ``length``, ``modificationTime``,
  ``content``; recursive; only the columns asked for are read). Like every file source it passes
  over hidden names (``_x``, ``.x``) below the path it is given, and over empty files;
- writing a record: one row through the ``text`` writer into a directory of its own
  (``<path>/part-*.txt``, a *record directory*), with save mode ``error`` for create-if-absent
  (Spark checks that nothing is there, then writes: on object stores that is the same
  check-then-write as a Hadoop ``create(overwrite=false)`` there) and ``overwrite`` to replace;
- deleting: there is no delete, so a path is overwritten with an empty frame. What was there is
  gone; an empty directory stays, which listings and reads here treat as absent;
- rename and byte-exact copies of another writer's files have no DataFrame form: refused.

The client never opens a checkpoint file: every call here is a Spark job on the server (a
fraction of a second each), over any URI the server reaches.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from ..compat.exceptions import first_line
from .fs import CheckpointFS, FSError, record_part, record_text

__all__ = ["ConnectFS"]


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_MISSING = ("PATH_NOT_FOUND", "Path does not exist")
# a file listed, then gone before the server read its status: a writer (a lease's beat record, a
# running query's commit) replaced or removed it meanwhile; the listing is taken again
_VANISHED = ("No such file or directory", "FileNotFoundException", "FILE_NOT_EXIST")
_LISTING_TRIES = 8  # (a beat record is replaced every few seconds: a retry rarely meets it again)

log = logging.getLogger(__name__)


def _path_part(path: str) -> str:
    """``path`` without scheme and authority (``viewfs://m/a/b`` -> ``/a/b``, ``file:///a`` -> ``/a``)."""
    if "://" in path:
        rest = path.split("://", 1)[1]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    if _SCHEME.match(path) and len(path.split(":", 1)[0]) > 1:
        return path.split(":", 1)[1]
    return path


class ConnectFS(CheckpointFS):
    """File operations as Spark jobs on the Connect server."""

    renames = False
    names_files = False

    def __init__(self, spark: Any):
        self.spark = spark

    # ------------------------------------------------------------------ the two primitives
    def _files(self, path: str, content: str | None = None) -> list[Any] | None:
        """The non-empty files under ``path`` (itself when it is one): rows of (path, length,
        mtime[, content]); None when nothing is at ``path``. ``content``: a SQL expression over
        the ``content`` column to fetch too."""
        from pyspark.sql import functions as F

        cols = [F.col("path"), F.col("length"), F.expr("unix_millis(modificationTime)").alias("mtime")]
        if content is not None:
            cols.append(F.expr(content).alias("content"))
        attempt = 0
        while True:
            attempt += 1
            try:
                df = self.spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
                return [r for r in df.select(*cols).collect() if not r.path.endswith(".crc")]
            except Exception as exc:  # noqa: BLE001 - the server's reason is kept in our message
                text = str(exc)
                if any(m in text for m in _MISSING):
                    return None
                if attempt < _LISTING_TRIES and any(m in text for m in _VANISHED):
                    log.debug("listing %s: a file went while it was listed (%s); listing again", path, first_line(exc))
                    time.sleep(0.1 * attempt)
                    continue
                raise FSError(
                    f"path {path!r} is not reachable through the Spark Connect server's file system layer: "
                    f"{first_line(exc)}"
                ) from None

    def _write(self, path: str, text: str | None, mode: str) -> None:
        rows = [] if text is None else [(text,)]
        df = self.spark.createDataFrame(rows, "value string").coalesce(1)
        try:
            df.write.mode(mode).text(path)
        except Exception as exc:  # noqa: BLE001
            if "PATH_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc):
                raise FileExistsError(path) from None
            raise FSError(f"file {path!r}: {first_line(exc)}") from None

    def _is_self(self, row_path: str, path: str) -> bool:
        """The listed file is ``path`` itself (not a file inside a directory at ``path``)."""
        return row_path.rstrip("/").endswith(_path_part(path).rstrip("/").lstrip("."))

    def _is_file(self, rows: list[Any], path: str) -> bool:
        """The listing of ``path`` is ``path`` itself: a file."""
        return len(rows) == 1 and self._is_self(rows[0].path, path)

    def _below(self, rows: list[Any], path: str) -> list[tuple[Any, str]]:
        """(row, its path below ``path``) for the listed files (their paths are qualified:
        ``path``'s own part is looked for after the scheme and authority)."""
        marker = "/" + _path_part(path).strip("/").lstrip("./") + "/"
        if marker == "//":
            marker = "/"
        out = []
        for r in rows:
            start = r.path.find("/", r.path.find("://") + 3) if "://" in r.path else r.path.find("/")
            i = r.path.find(marker, max(start, 0))
            if i >= 0:
                out.append((r, r.path[i + len(marker) :]))
        return out

    def _children(self, rows: list[Any], path: str) -> list[str]:
        """The names directly under ``path`` among the listed files."""
        return sorted({rest.split("/", 1)[0] for _, rest in self._below(rows, path)} - {""})

    # ------------------------------------------------------------------ resolution
    def qualify(self, path: str, what: str = "path") -> str:
        # the server qualifies paths; without a JVM here a scheme-less path stays as given
        if path.startswith("file:"):
            return "file:" + _path_part(path)
        return path

    def probe(self, path: str, what: str = "checkpoint") -> None:
        try:
            self._files(path)
        except FSError as exc:
            raise FSError(str(exc).replace("path ", f"{what} ", 1)) from None

    # ------------------------------------------------------------------ queries
    def exists(self, path: str) -> bool:
        return bool(self._files(path))

    def is_dir(self, path: str) -> bool:
        rows = self._files(path)
        return bool(rows) and not self._is_file(rows, path)

    def list(self, path: str) -> list[str]:
        rows = self._files(path) or []
        if self._is_file(rows, path):
            return []
        return self._children(rows, path)

    def size(self, path: str) -> int:
        return sum(r.length for r in self._files(path) or [])

    def modified_ms(self, path: str) -> int:
        rows = self._files(path)
        if not rows:
            raise FileNotFoundError(path)
        return max(r.mtime for r in rows)

    def files_since(self, path: str, since_ms: int) -> list[str]:
        """One listing job: the files directly in ``path`` (as the server names them)."""
        rows = self._files(path) or []
        if self._is_file(rows, path):
            return []
        return [r.path for r, rest in self._below(rows, path) if rest and "/" not in rest and r.mtime >= since_ms]

    # ------------------------------------------------------------------ reading
    def read_bytes(self, path: str) -> bytes:
        rows = self._files(path, "content")
        if not rows:
            raise FileNotFoundError(path)
        if self._is_file(rows, path):
            return bytes(rows[0].content)
        by_name = {
            r.path.rsplit("/", 1)[-1]: r
            for r in rows
            if r.path.rsplit("/", 2)[-2] == path.rstrip("/").rsplit("/", 1)[-1]
        }
        part = record_part(list(by_name))
        if part is None:
            raise FSError(f"{path!r} is a directory, not a file or a record")
        return record_text(bytes(by_name[part].content))

    def tail(self, path: str, n: int) -> bytes:
        rows = self._files(path, f"substring(content, -{int(n)}, {int(n)})")
        if not rows:
            raise FileNotFoundError(path)
        return bytes(rows[0].content)

    # ------------------------------------------------------------------ writing
    def create_text(
        self, path: str, text: str, overwrite: bool = False, midway: Callable[[], None] | None = None
    ) -> None:
        if overwrite:
            self._write(path, text, "overwrite")
            return
        try:
            self._write(path, text, "error")
            return
        except FileExistsError:
            if self.exists(path):
                raise
        # a removed record (an empty directory): replaced, then read back, so that of two
        # writers racing for it the one whose text is not there learns it lost
        self._write(path, text, "overwrite")
        if self.read_text(path) != text:
            raise FileExistsError(path)

    def mkdirs(self, path: str) -> None:
        """Nothing: a directory comes into being with its first file (as on object stores)."""

    def delete(self, path: str, recursive: bool = True) -> bool:
        if not self.exists(path):
            return False
        self._write(path, None, "overwrite")
        return True

    def rename(self, src: str, dst: str) -> bool:
        raise FSError(
            f"rename {src!r} -> {dst!r}: Spark Connect offers no file rename (the client has no JVM); "
            "internal: callers write in place on Connect"
        )

    def copy(self, src: str, dst: str) -> None:
        """Records are copied as records; a file cannot be written under its name here."""
        names = self.list(src)
        if not names:
            raise FSError(
                f"copy {src!r} -> {dst!r}: a file cannot be written under a name of its own through Spark Connect "
                "(its writers make directories of part-files)"
            )
        if record_part(names) is not None and len(names) == 1:
            self.create_text(dst, self.read_text(src), overwrite=True)
            return
        for name in names:
            self.copy(f"{src.rstrip('/')}/{name}", f"{dst.rstrip('/')}/{name}")

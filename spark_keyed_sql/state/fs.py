"""The one place this project touches checkpoint, state and output files: Hadoop's
``FileSystem`` (the layer Spark's own checkpoints use), reached from the driver through the
session's JVM. Any URI Spark accepts works: plain and relative paths, ``file:``, ``hdfs://``,
``s3a://``, ``abfss://``, ``gs://``, ``dbfs:/``, ``viewfs://``. The Hadoop configuration is the
session's (``sessionState.newHadoopConf()``), so ``spark.hadoop.*`` settings apply.

What the commit protocols built on this rely on (see docs/reliability.md):

- ``create_text(path, text)`` without overwrite fails when the file exists; on HDFS and on
  object stores a file appears whole or not at all.
- ``write_text(..., overwrite=True)`` replaces a small file; on object stores that is one PUT.
- ``list`` sees every file created before it was called (S3, GCS and ADLS list consistently).
- ``rename`` is NOT relied on for atomicity: on object stores it is copy + delete.

A Spark Connect client has no JVM: there the local file system is used for plain and
``file:`` paths (the server must share that disk, as it does in a one-machine setup), and any
other URI is refused with a message saying why.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from ..api.errors import KeyedSQLError
from ..compat.exceptions import first_line

__all__ = ["CheckpointFS", "FSError", "join", "filesystem", "is_path", "temp_dir"]


class FSError(KeyedSQLError):
    """A checkpoint or output location Spark's file system layer cannot reach or use."""


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a path or URI (never ``os.path``: URIs keep their ``//``)."""
    out = base.rstrip("/") if base not in ("/", "") else base
    for p in parts:
        out = (out + "/" if not out.endswith("/") else out) + p.strip("/")
    return out


def _is_local_uri(path: str) -> bool:
    return (
        "://" not in path
        and not path.startswith(("dbfs:", "hdfs:", "s3a:", "s3:", "gs:", "abfss:", "viewfs:"))
        or path.startswith("file:")
    )


def _local(path: str) -> str:
    if path.startswith("file:"):
        path = path[len("file:") :]
        while path.startswith("//"):
            path = path[1:]
    return os.path.abspath(path)


class CheckpointFS:
    """File operations on paths/URIs through the session's Hadoop ``FileSystem``."""

    def __init__(self, spark: Any = None):
        from pyspark.sql import SparkSession

        if spark is None:
            spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        self.connect = type(spark).__module__.startswith("pyspark.sql.connect")  # no JVM on this side
        self.spark = spark
        if not self.connect:
            self.jvm = spark._jvm  # type: ignore[attr-defined]
            self.conf = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ resolution
    def _path(self, path: str):
        return self.jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, path: str, what: str = "path"):
        try:
            p = self._path(path)
            return p.getFileSystem(self.conf), p
        except Exception as exc:  # noqa: BLE001 - Spark/Hadoop's reason is kept in our message
            raise FSError(
                f"{what} {path!r} is not reachable through Spark's file system layer: {first_line(exc)}"
            ) from None

    @staticmethod
    def _raw(fs: Any) -> Any:
        """The file system under Hadoop's checksum layer (local disks): this package's small files
        (commit records, leases) carry no ``.crc`` beside them, so a record restored or edited by
        hand is judged by its own content (a damaged one is refused as such), not by a stale
        checksum file."""
        try:
            return fs.getRawFileSystem() if fs.getClass().getName().endswith("LocalFileSystem") else fs
        except Exception:  # noqa: BLE001 - not a ChecksumFileSystem
            return fs

    def _connect_local(self, path: str) -> str:
        if not _is_local_uri(path):
            raise FSError(
                f"{path!r}: on Spark Connect the client has no JVM, so spark-keyed-sql can reach only local (or "
                "file:) checkpoint paths that the server shares; run from a classic SparkSession (e.g. on the "
                "cluster's driver) for other file systems"
            )
        return _local(path)

    def _call(self, path: str, what: str, fn):
        fs, p = self._fs(path, what)
        try:
            return fn(fs, p)
        except (FSError, FileExistsError, FileNotFoundError):
            raise
        except Exception as exc:  # noqa: BLE001
            name = type(exc).__name__
            if name in ("Py4JJavaError",) and "FileAlreadyExistsException" in str(exc):
                raise FileExistsError(path) from None
            raise FSError(f"{what} {path!r}: {first_line(exc)}") from None

    def qualify(self, path: str, what: str = "path") -> str:
        """The absolute URI Spark would use for ``path`` (``/a/b`` -> ``file:/a/b``)."""
        if self.connect:
            return "file:" + self._connect_local(path)
        fs, p = self._fs(path, what)
        return str(fs.makeQualified(p).toString())

    def probe(self, path: str, what: str = "checkpoint") -> None:
        """Fail now, with the URI and Spark's reason, if ``path`` cannot be reached (unknown
        scheme, connector not on the classpath, no credentials): before anything is written."""
        if self.connect:
            self._connect_local(path)
            return
        fs, p = self._fs(path, what)
        try:
            fs.exists(p)
        except Exception as exc:  # noqa: BLE001
            raise FSError(
                f"{what} {path!r} is not reachable through Spark's file system layer: {first_line(exc)}"
            ) from None

    # ------------------------------------------------------------------ queries
    def exists(self, path: str) -> bool:
        if self.connect:
            return os.path.exists(self._connect_local(path))
        return bool(self._call(path, "path", lambda fs, p: fs.exists(p)))

    def is_dir(self, path: str) -> bool:
        if self.connect:
            return os.path.isdir(self._connect_local(path))

        def f(fs, p):
            try:
                return fs.getFileStatus(p).isDirectory()
            except Exception as exc:  # noqa: BLE001
                if "FileNotFoundException" in str(exc):
                    return False
                raise

        return bool(self._call(path, "path", f))

    def list(self, path: str) -> list[str]:
        """Names in directory ``path`` (empty when it does not exist), Hadoop's checksum files left out."""
        if self.connect:
            d = self._connect_local(path)
            return sorted(os.listdir(d)) if os.path.isdir(d) else []

        def f(fs, p):
            try:
                statuses = fs.listStatus(p)
            except Exception as exc:  # noqa: BLE001
                if "FileNotFoundException" in str(exc):
                    return []
                raise
            return self._names(fs, p, statuses)

        return sorted(n for n in self._call(path, "directory", f) if not n.endswith(".crc"))

    def _names(self, fs: Any, p: Any, statuses: Any) -> list[str]:
        """The names of a listing in a few JVM calls, not three per entry (an output directory
        of a long-running stream holds thousands of files): the paths as one string, split at
        the parent's qualified path; entry by entry only when that does not add up."""
        n = len(statuses)
        if n == 0:
            return []
        jvm = self.jvm
        # "{<path>,<path>,...}" (commons-lang3, on Spark's classpath; takes the array as one Object)
        text = str(
            jvm.org.apache.commons.lang3.ArrayUtils.toString(jvm.org.apache.hadoop.fs.FileUtil.stat2Paths(statuses))
        )
        head = str(fs.makeQualified(p).toString()).rstrip("/") + "/"
        names = text[1:-1].split("," + head)
        if names and names[0].startswith(head):
            names[0] = names[0][len(head) :]
            if len(names) == n and not any("/" in x for x in names):
                return names
        return [str(s.getPath().getName()) for s in statuses]

    def size(self, path: str) -> int:
        """Bytes under ``path`` (a file or a directory tree)."""
        if self.connect:
            d = self._connect_local(path)
            return sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(d) for n in ns)
        return int(self._call(path, "path", lambda fs, p: fs.getContentSummary(p).getLength()))

    def modified_ms(self, path: str) -> int:
        if self.connect:
            return int(os.path.getmtime(self._connect_local(path)) * 1000)
        return int(self._call(path, "path", lambda fs, p: fs.getFileStatus(p).getModificationTime()))

    # ------------------------------------------------------------------ reading
    def read_bytes(self, path: str) -> bytes:
        if self.connect:
            with open(self._connect_local(path), "rb") as f:
                return f.read()

        def f(fs, p):
            stream = self._raw(fs).open(p)
            try:
                return bytes(stream.readAllBytes())
            finally:
                stream.close()

        try:
            return self._call(path, "file", f)
        except FSError as exc:
            if "FileNotFoundException" in str(exc) or "does not exist" in str(exc).lower():
                raise FileNotFoundError(path) from None
            raise

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def tail(self, path: str, n: int) -> bytes:
        """The last ``n`` bytes of a file (fewer if it is shorter)."""
        if self.connect:
            with open(self._connect_local(path), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read()

        def f(fs, p):
            fs = self._raw(fs)
            length = fs.getFileStatus(p).getLen()
            stream = fs.open(p)
            try:
                stream.seek(max(0, length - n))
                return bytes(stream.readAllBytes())
            finally:
                stream.close()

        return self._call(path, "file", f)

    # ------------------------------------------------------------------ writing
    def create_text(self, path: str, text: str, overwrite: bool = False) -> None:
        """Write a small file. Without ``overwrite``: ``FileExistsError`` if it exists (Hadoop
        ``create(path, overwrite=false)``, atomic where the store offers exclusive create)."""
        data = text.encode("utf-8")
        if self.connect:
            local = self._connect_local(path)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb" if overwrite else "xb") as fh:
                fh.write(data)
            return

        def f(fs, p):
            try:
                out = self._raw(fs).create(p, bool(overwrite))
            except Exception as exc:  # noqa: BLE001
                if "FileAlreadyExistsException" in str(exc) or "already exists" in str(exc):
                    raise FileExistsError(path) from None
                raise
            try:
                out.write(bytearray(data))
            finally:
                out.close()

        self._call(path, "file", f)

    def write_text(self, path: str, text: str) -> None:
        """Replace a small file's content (one PUT on object stores)."""
        self.create_text(path, text, overwrite=True)

    def mkdirs(self, path: str) -> None:
        if self.connect:
            os.makedirs(self._connect_local(path), exist_ok=True)
            return
        self._call(path, "directory", lambda fs, p: fs.mkdirs(p))

    def delete(self, path: str, recursive: bool = True) -> bool:
        """Delete ``path``; False when there was nothing to delete."""
        if self.connect:
            local = self._connect_local(path)
            if os.path.isdir(local):
                shutil.rmtree(local, ignore_errors=True)
                return True
            try:
                os.remove(local)
                return True
            except FileNotFoundError:
                return False
        return bool(self._call(path, "path", lambda fs, p: fs.delete(p, bool(recursive))))

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (which must not exist). Atomic on HDFS and local disks; on
        object stores a copy then a delete, so callers never use it as a commit."""
        if self.connect:
            os.replace(self._connect_local(src), self._connect_local(dst))
            return True
        fs, dp = self._fs(dst, "path")
        return bool(self._call(src, "path", lambda sfs, sp: sfs.rename(sp, dp)))

    def copy(self, src: str, dst: str) -> None:
        """Copy a file or directory tree (``FileUtil.copy``), possibly across file systems."""
        if self.connect:
            s, d = self._connect_local(src), self._connect_local(dst)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, d)
            return
        dfs, dp = self._fs(dst, "path")
        copier = self.jvm.org.apache.hadoop.fs.FileUtil
        self._call(src, "path", lambda sfs, sp: copier.copy(sfs, sp, dfs, dp, False, self.conf))


def filesystem(spark: Any = None) -> CheckpointFS:
    """A :class:`CheckpointFS` for ``spark`` (the active session when not given)."""
    return CheckpointFS(spark)


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

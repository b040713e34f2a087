"""Classic sessions: checkpoint files through Hadoop's ``FileSystem`` (the layer Spark's own
checkpoints use), reached from the driver through the session's JVM. The Hadoop configuration
is the session's (``sessionState.newHadoopConf()``), so ``spark.hadoop.*`` settings apply."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from ..compat.exceptions import first_line
from .fs import CheckpointFS, FSError, record_part, record_text

__all__ = ["HadoopFS"]

# stores whose objects appear whole once written (an overwrite is one PUT): no torn read
_WHOLE_OBJECT_SCHEMES = frozenset({"s3a", "s3", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "dbfs"})


class HadoopFS(CheckpointFS):
    """File operations on paths/URIs through the session's Hadoop ``FileSystem``."""

    _classes: dict[tuple[int, str], Any] = {}  # (the JVM view, a class name) -> the class: ``_class``

    def __init__(self, spark: Any):
        self.spark = spark
        self.jvm = spark._jvm
        self.conf = spark._jsparkSession.sessionState().newHadoopConf()

    # ------------------------------------------------------------------ resolution
    def _class(self, name: str) -> Any:
        """The JVM class ``name``, looked up once (each ``jvm.org.apache...`` walk is a JVM call
        per dotted name: 5 ms a Path, against 0.3 with the class kept)."""
        key = (id(self.jvm), name)
        if key not in HadoopFS._classes:
            found = self.jvm
            for part in name.split("."):
                found = getattr(found, part)
            HadoopFS._classes[key] = found
        return HadoopFS._classes[key]

    def _path(self, path: str):
        return self._class("org.apache.hadoop.fs.Path")(path)

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

    def _direct(self, fs: Any, p: Any) -> tuple[Any, Any]:
        """The file system and path a small file is read and written through: through a
        ``viewfs://`` mount, the store it resolves to (so that, as on a plain local path, no
        checksum layer sits between: a lease moved into place by a rename must not be judged
        by a checksum file of the lease it replaced); else ``fs`` itself, checksum layer skipped."""
        if str(fs.getScheme()) != "viewfs":
            return self._raw(fs), p
        names: list[str] = []
        at = p
        while True:
            try:
                target = str(fs.resolvePath(at).toString()).rstrip("/")
                break
            except Exception as exc:  # noqa: BLE001 - not there yet: resolve the nearest directory that is
                if "FileNotFoundException" not in str(exc) or at.getParent() is None:
                    raise
                names.insert(0, str(at.getName()))
                at = at.getParent()
        resolved = self._path("/".join([target, *names]))
        return self._raw(resolved.getFileSystem(self.conf)), resolved

    @staticmethod
    def _missing(fs: Any, p: Any, path: str) -> bool:
        """Is ``path`` missing, asked before a call that throws on a missing path, where asking is
        the cheaper answer: on local disks and HDFS a metadata question costs well under a
        millisecond and py4j's exception for a missing path 30-40 ms. (On an object store
        ``exists()`` is one or two more requests for every path that is there: False, and the
        call's own exception answers.)"""
        if urlparse(path).scheme.lower() in _WHOLE_OBJECT_SCHEMES:
            return False
        return not fs.exists(p)

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
        fs, p = self._fs(path, what)
        return str(fs.makeQualified(p).toString())

    def probe(self, path: str, what: str = "checkpoint") -> None:
        """Fail now, with the URI and Spark's reason, if ``path`` cannot be reached (unknown
        scheme, connector not on the classpath, no credentials): before anything is written."""
        fs, p = self._fs(path, what)
        try:
            fs.exists(p)
        except Exception as exc:  # noqa: BLE001
            raise FSError(
                f"{what} {path!r} is not reachable through Spark's file system layer: {first_line(exc)}"
            ) from None

    # ------------------------------------------------------------------ queries
    def exists(self, path: str) -> bool:
        return bool(self._call(path, "path", lambda fs, p: fs.exists(p)))

    def _status(self, path: str) -> Any | None:
        """``path``'s Hadoop ``FileStatus``; None when it does not exist."""

        def f(fs, p):
            if self._missing(fs, p, path):
                return None
            try:
                return fs.getFileStatus(p)
            except Exception as exc:  # noqa: BLE001 - removed in between (or missing, on an object store)
                if "FileNotFoundException" in str(exc):
                    return None
                raise

        return self._call(path, "path", f)

    def is_dir(self, path: str) -> bool:
        status = self._status(path)
        return status is not None and bool(status.isDirectory())

    def list(self, path: str) -> list[str]:
        """Names in directory ``path`` (empty when it does not exist), Hadoop's checksum files left out."""

        def f(fs, p):
            if self._missing(fs, p, path):
                return []
            try:
                statuses = fs.listStatus(p)
            except Exception as exc:  # noqa: BLE001 - removed in between
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
        # "{<path>,<path>,...}" (commons-lang3, on Spark's classpath; takes the array as one Object)
        paths = self._class("org.apache.hadoop.fs.FileUtil").stat2Paths(statuses)
        text = str(self._class("org.apache.commons.lang3.ArrayUtils").toString(paths))
        head = str(fs.makeQualified(p).toString()).rstrip("/") + "/"
        names = text[1:-1].split("," + head)
        if names and names[0].startswith(head):
            names[0] = names[0][len(head) :]
            if len(names) == n and not any("/" in x for x in names):
                return names
        return [str(s.getPath().getName()) for s in statuses]

    def size(self, path: str) -> int:
        """Bytes under ``path`` (a file or a directory tree)."""
        return int(self._call(path, "path", lambda fs, p: fs.getContentSummary(p).getLength()))

    def modified_ms(self, path: str) -> int:
        part = self._record(path)
        return int(self._call(part or path, "path", lambda fs, p: fs.getFileStatus(p).getModificationTime()))

    def _record(self, path: str) -> str | None:
        """The part file of a record directory a Connect session wrote at ``path`` (None when
        ``path`` is not a directory); ``FileNotFoundError`` for a removed record (no content)."""
        return self._part(path) if self.is_dir(path) else None

    def _part(self, directory: str) -> str:
        part = record_part(self.list(directory))
        if part is None or self.size(f"{directory.rstrip('/')}/{part}") == 0:
            raise FileNotFoundError(directory)
        return f"{directory.rstrip('/')}/{part}"

    # ------------------------------------------------------------------ reading
    def read_bytes(self, path: str) -> bytes:
        # one status answers missing, a record directory (a Connect session wrote it) or a file
        status = self._status(path)
        if status is None:
            raise FileNotFoundError(path)
        if status.isDirectory():
            return record_text(self._read(self._part(path)))
        return self._read(path)

    def _read(self, path: str) -> bytes:
        """The bytes of a file ``read_bytes`` found (one removed since: ``FileNotFoundError``)."""

        def f(fs, p):
            dfs, dp = self._direct(fs, p)
            stream = dfs.open(dp)
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

    def tail(self, path: str, n: int) -> bytes:
        """The last ``n`` bytes of a file (fewer if it is shorter)."""

        def f(fs, p):
            fs, p = self._direct(fs, p)
            length = fs.getFileStatus(p).getLen()
            stream = fs.open(p)
            try:
                stream.seek(max(0, length - n))
                return bytes(stream.readAllBytes())
            finally:
                stream.close()

        return self._call(path, "file", f)

    # ------------------------------------------------------------------ writing
    def create_text(
        self, path: str, text: str, overwrite: bool = False, midway: Callable[[], None] | None = None
    ) -> None:
        """Write a small file. Without ``overwrite``: ``FileExistsError`` if it exists (Hadoop
        ``create(path, overwrite=false)``, atomic where the store offers exclusive create).
        ``midway`` is called between the create and the write (the crash tests' fault point)."""
        data = text.encode("utf-8")
        if self.is_dir(path):  # a record directory (a Connect session wrote it)
            if overwrite:
                self.delete(path)  # replaced by a file (an overwrite is no atomic swap here either)
            else:
                try:
                    self._part(path)
                    raise FileExistsError(path)
                except FileNotFoundError:
                    self.delete(path)  # a removed record: nothing there

        def f(fs, p):
            try:
                dfs, dp = self._direct(fs, p)
                out = dfs.create(dp, bool(overwrite))
            except Exception as exc:  # noqa: BLE001
                if "FileAlreadyExistsException" in str(exc) or "already exists" in str(exc):
                    raise FileExistsError(path) from None
                raise
            try:
                if midway is not None:
                    midway()
                out.write(bytearray(data))
            finally:
                out.close()

        self._call(path, "file", f)

    def _store(self, path: str) -> tuple[Any, Any, str]:
        """The file system ``path`` resolves to (through ``viewfs://``, the one it mounts), the
        path there, and how a file is replaced on it: ``posix`` / ``hdfs`` (a move over it),
        ``object`` (one PUT, whole), ``other`` (an overwrite in place)."""
        fs, p = self._fs(path, "file")
        try:
            tfs, target = self._direct(fs, p)
        except Exception as exc:  # noqa: BLE001
            raise FSError(f"file {path!r}: {first_line(exc)}") from None
        kind = str(tfs.getClass().getName()).rsplit(".", 1)[-1]
        how = {"RawLocalFileSystem": "posix", "DistributedFileSystem": "hdfs"}.get(kind)
        if how is None:
            how = "object" if str(tfs.getScheme()) in _WHOLE_OBJECT_SCHEMES else "other"
        return tfs, target, how

    def replaces_whole(self, path: str) -> bool:
        return self._store(path)[2] != "other"

    def replace_text(self, path: str, text: str, midway: Callable[[], None] | None = None) -> bool:
        """Replace a small file so that a reader never sees it torn: the text is written to a
        hidden temporary file beside it, then moved over it in one step where the store has one
        (a POSIX rename on local disks, HDFS's ``rename(OVERWRITE)``; through ``viewfs://`` that of
        the store it resolves to). Object stores have no such move, but write an object whole:
        there the file is overwritten in place. True when the replacement is whole in either way;
        False when it was an in-place overwrite on a store that may show it torn."""
        if self.is_dir(path):  # a record directory a Connect session wrote: no file to move over
            self.create_text(path, text, overwrite=True)
            return False
        tfs, target, how = self._store(path)
        if how not in ("posix", "hdfs"):
            self.create_text(path, text, overwrite=True, midway=midway)
            return how == "object"
        tmp = self._path(f"{target.getParent().toString()}/.{target.getName()}.{uuid.uuid4().hex[:12]}.tmp")
        data = text.encode("utf-8")
        jvm = self.jvm

        def f(_fs, _p):
            out = tfs.create(tmp, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            try:
                if midway is not None:
                    midway()
                if how == "posix":
                    moved = tfs.rename(tmp, target)  # File.renameTo: rename(2), which replaces atomically
                else:
                    opts = self.spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
                    opts[0] = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
                    tfs.rename(tmp, target, opts)
                    moved = True
                if not moved:
                    raise OSError(f"rename {tmp} -> {target} refused")
            except BaseException:
                tfs.delete(tmp, False)
                raise

        self._call(path, "file", f)
        return True

    def mkdirs(self, path: str) -> None:
        self._call(path, "directory", lambda fs, p: fs.mkdirs(p))

    def delete(self, path: str, recursive: bool = True) -> bool:
        """Delete ``path``; False when there was nothing to delete."""
        return bool(self._call(path, "path", lambda fs, p: fs.delete(p, bool(recursive))))

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (which must not exist). Atomic on HDFS and local disks; on
        object stores a copy then a delete, so callers never use it as a commit."""
        fs, dp = self._fs(dst, "path")
        return bool(self._call(src, "path", lambda sfs, sp: sfs.rename(sp, dp)))

    def copy(self, src: str, dst: str) -> None:
        """Copy a file or directory tree (``FileUtil.copy``), possibly across file systems."""
        dfs, dp = self._fs(dst, "path")
        copier = self._class("org.apache.hadoop.fs.FileUtil")
        self._call(src, "path", lambda sfs, sp: copier.copy(sfs, sp, dfs, dp, False, self.conf))

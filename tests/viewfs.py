"""Spark's ``viewfs://`` in the tests: ``viewfs://ks/data/...`` is mounted on a local temporary
directory by the test session's configuration (``spark.hadoop.fs.viewfs.mounttable.ks.link./data``,
given when the session starts, as a user gives ``spark.hadoop.*`` settings for S3 or ADLS).
Spark's file system layer resolves such a URI; Python's ``os`` does not: a checkpoint, output
or state file that reaches the disk under the mounted directory went through Spark's layer, and
one opened with ``os``/``open`` either fails or lands beside the working directory as
``./viewfs:/ks/...``, which :func:`assert_nothing_written_on_the_side` looks for."""

from __future__ import annotations

import glob
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

MOUNT = "ks"
LINK = "/data"

__all__ = ["MOUNT", "LINK", "Place", "mount_conf", "new_place", "assert_nothing_written_on_the_side"]


def mount_conf(local_dir: str | os.PathLike, mount: str = MOUNT) -> dict[str, str]:
    """The session settings that mount ``viewfs://<mount>/data`` on ``local_dir``."""
    return {f"spark.hadoop.fs.viewfs.mounttable.{mount}.link.{LINK}": Path(local_dir).resolve().as_uri()}


@dataclass(frozen=True)
class Place:
    """A fresh directory on the mount: ``uri(...)`` for Spark and the project, ``local(...)``
    for the test's own look at the disk behind it."""

    root: Path  # the mounted local directory
    name: str  # unique: it must appear nowhere else on disk

    def uri(self, *parts: str) -> str:
        return "/".join([f"viewfs://{MOUNT}{LINK}", self.name, *parts])

    def local(self, *parts: str) -> Path:
        return self.root.joinpath(self.name, *parts)


def new_place(root: str | os.PathLike, prefix: str = "vfs") -> Place:
    return Place(Path(root), f"{prefix}-{uuid.uuid4().hex[:10]}")


def assert_nothing_written_on_the_side(place: Place) -> None:
    """Nothing named after the place exists outside the mounted directory (the working
    directory, the temp directory), and no ``viewfs:`` directory appeared there: a path
    handed to ``os`` turns ``viewfs://ks/x`` into ``./viewfs:/ks/x``."""
    for base in {os.getcwd(), tempfile.gettempdir(), str(Path.home())}:
        assert not os.path.exists(os.path.join(base, "viewfs:")), f"a 'viewfs:' directory was made in {base}"
    stray = [p for p in glob.glob(os.path.join(os.getcwd(), "**", place.name), recursive=True)]
    stray += [p for p in glob.glob(os.path.join(tempfile.gettempdir(), "*", place.name))]
    stray = [p for p in stray if not Path(p).resolve().is_relative_to(place.root.resolve())]
    assert not stray, f"files of {place.uri()} written outside the mount: {stray}"
    assert place.local().is_dir(), f"nothing of {place.uri()} reached the mounted directory {place.local()}"

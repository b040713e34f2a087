"""ConnectFS's reading of the qualified paths Spark's file listing returns (the listing itself
runs on a Connect server: tests/cluster/test_connect_smoke.py and test_connect.py)."""

import os
import threading
import time
from types import SimpleNamespace

import pytest
from viewfs import new_place

from spark_keyed_sql.state.connect_fs import ConnectFS


def listed(*paths: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(path=p) for p in paths]


@pytest.mark.parametrize(
    "path, files, names",
    [
        # a mount (authority) named like the directory: the names come from after the authority
        ("viewfs://ks/ks", ["viewfs://ks/ks/a/f1", "viewfs://ks/ks/b/c/f2"], ["a", "b"]),
        # the path's own part repeated below it
        ("/data/x", ["file:/data/x/data/x/f"], ["data"]),
        (
            "file:///tmp/cp/commits",
            ["file:/tmp/cp/commits/0.json/part-0.txt", "file:/tmp/cp/commits/1"],
            ["0.json", "1"],
        ),
        ("s3a://bucket/cp/", ["s3a://bucket/cp/offsets/0", "s3a://bucket/cp/metadata"], ["metadata", "offsets"]),
    ],
)
def test_names_under_a_path_from_qualified_listings(path, files, names):
    assert ConnectFS(None)._children(listed(*files), path) == names


def test_a_listed_file_is_told_from_a_directory_of_that_name():
    fs = ConnectFS(None)
    assert fs._is_self("viewfs://m/ks/cp/commits/0.json", "viewfs://m/ks/cp/commits/0.json")
    assert fs._is_self("file:/tmp/cp/lease", "/tmp/cp/lease")
    assert not fs._is_self("viewfs://m/ks/cp/commits/0.json/part-00000-x.txt", "viewfs://m/ks/cp/commits/0.json")


def test_files_since_keeps_the_files_directly_in_the_directory_written_at_or_after_the_time():
    rows = [
        SimpleNamespace(path="viewfs://m/ks/out/a.parquet", mtime=10),
        SimpleNamespace(path="viewfs://m/ks/out/b.parquet", mtime=5),
        SimpleNamespace(path="viewfs://m/ks/out/c.parquet/part-0.txt", mtime=20),  # a removed file's directory
        SimpleNamespace(path="viewfs://m/ks/out/d.parquet", mtime=30),
    ]
    fs = ConnectFS(None)
    fs._files = lambda path, content=None: rows
    assert fs.files_since("viewfs://m/ks/out", 10) == ["viewfs://m/ks/out/a.parquet", "viewfs://m/ks/out/d.parquet"]


def test_a_listing_while_a_file_comes_and_goes_is_taken_again(spark, viewfs_root):
    """A lease's beat record is replaced while a checkpoint is listed (CI, 2026-11-30: read_state
    through Connect failed with the server's ``ls: cannot access '.../.spark_keyed_sql.lease.beat1'``).
    On ``viewfs://`` Hadoop reads each listed file's permissions after the listing, so a file that
    went meanwhile failed the whole listing. Here a thread writes and removes a hidden file beside
    fifty others while the directory is listed thirty times: every listing answers."""
    place = new_place(viewfs_root, "connect-fs-churn")
    place.local().mkdir(parents=True)
    for i in range(50):
        place.local(f"f{i}").write_text("x")
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            beat = place.local(f".beat{i % 2}")
            beat.write_text("y" * 10)
            time.sleep(0.002)
            os.remove(beat)
            time.sleep(0.008)  # (a beat every 10 ms: far denser than a lease's, sparse enough that
            # a listing taken again under two workers' load does not meet it eight times running)
            i += 1

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    fs = ConnectFS(spark)
    try:
        answers = [fs.is_dir(place.uri()) for _ in range(30)]
    finally:
        stop.set()
        writer.join()
    assert answers == [True] * 30
    assert fs.list(place.uri()) == sorted(f"f{i}" for i in range(50))

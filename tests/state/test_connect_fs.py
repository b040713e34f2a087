"""ConnectFS's reading of the qualified paths Spark's file listing returns (the listing itself
runs on a Connect server: tests/cluster/test_connect_smoke.py and test_connect.py)."""

from types import SimpleNamespace

import pytest

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

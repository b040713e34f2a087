"""compat.arrow: the same Arrow values whichever pyarrow runs (8 lacks dict -> map conversion
and RecordBatch.select). Each test runs the fallback too, on any pyarrow."""

import pyarrow as pa
import pytest

from spark_keyed_sql.compat import arrow

MAPS = pa.struct([("m", pa.map_(pa.string(), pa.list_(pa.map_(pa.int64(), pa.float64())))), ("x", pa.int64())])
VALUES = [{"m": {"a": [{1: 2.0}, None], "b": []}, "x": 1}, None, {"m": None, "x": 2}, {"x": 3}]
# what Spark reads back: a map as its (key, value) pairs in insertion order, a missing field as null
EXPECTED = [{"m": [("a", [[(1, 2.0)], None]), ("b", [])], "x": 1}, None, {"m": None, "x": 2}, {"m": None, "x": 3}]


@pytest.fixture(params=["running pyarrow", "without dict to map"])
def conversion(request, monkeypatch):
    if request.param != "running pyarrow":
        monkeypatch.setattr(arrow, "_dicts_convert_to_maps", lambda: False)


def test_dicts_become_maps_at_any_depth(conversion):
    assert arrow.to_array(VALUES, MAPS).to_pylist() == EXPECTED
    top = pa.map_(pa.string(), pa.int64())
    assert arrow.to_array([{"k": 1, "j": None}, {}, None], top).to_pylist() == [[("k", 1), ("j", None)], [], None]


def test_the_fallback_gives_maps_as_pairs():
    """What pyarrow 8 is handed: no dict left where the type has a map (a struct stays a dict)."""
    assert [arrow._as_pairs(v, MAPS) for v in VALUES] == EXPECTED


def test_columns_without_maps_are_left_to_pyarrow(conversion):
    assert arrow.to_array([1, None, 3], pa.int64()).to_pylist() == [1, None, 3]
    nested = pa.list_(pa.struct([("a", pa.string())]))
    assert arrow.to_array([[{"a": "x"}], None], nested).to_pylist() == [[{"a": "x"}], None]


class _OldBatch:
    """A RecordBatch as pyarrow 8 has it: no ``select``."""

    def __init__(self, rb):
        self.schema, self.column = rb.schema, rb.column


@pytest.mark.parametrize("old", [False, True])
def test_select(old):
    rb = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["a", "b"]), pa.array([0.5, 1.5])], ["i", "s", "f"])
    got = arrow.select(_OldBatch(rb) if old else rb, ["f", "i"])
    assert got.schema.names == ["f", "i"] and got.to_pylist() == [{"f": 0.5, "i": 1}, {"f": 1.5, "i": 2}]

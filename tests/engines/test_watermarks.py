"""The bulk engine's watermark over several inputs (engines/bulk/watermarks.py) against Spark's
rule as its documentation states it. No Spark session needed."""

import pytest

from spark_keyed_sql.api.errors import SchemaError
from spark_keyed_sql.engines.bulk.watermarks import next_watermarks, watermark_policy


def test_min_waits_for_the_slowest_input_that_has_had_rows():
    # clicks lag: the query's watermark is theirs (newest 40, delay 5)
    wm, inputs = next_watermarks(0, {}, {"views": 100, "clicks": 40}, 5)
    assert (wm, inputs) == (35, {"views": 95, "clicks": 35})
    # a batch with only views: clicks' watermark holds the query's where it was
    wm, inputs = next_watermarks(wm, inputs, {"views": 200}, 5)
    assert (wm, inputs) == (35, {"views": 195, "clicks": 35})
    # clicks catch up past views
    wm, inputs = next_watermarks(wm, inputs, {"clicks": 300}, 5)
    assert (wm, inputs) == (195, {"views": 195, "clicks": 295})


def test_max_follows_the_fastest_input():
    wm, inputs = next_watermarks(0, {}, {"views": 100, "clicks": 40}, 5, policy="max")
    assert (wm, inputs) == (95, {"views": 95, "clicks": 35})


def test_no_watermark_moves_back():
    # an input's older rows leave its watermark; a new input behind the query's leaves the query's
    wm, inputs = next_watermarks(50, {"views": 50}, {"views": 20}, 0)
    assert (wm, inputs) == (50, {"views": 50})
    wm, inputs = next_watermarks(wm, inputs, {"clicks": 10}, 0)
    assert (wm, inputs) == (50, {"views": 50, "clicks": 10})


def test_a_batch_without_event_times_keeps_everything():
    assert next_watermarks(7, {"a": 7}, {}, 3) == (7, {"a": 7})
    assert next_watermarks(None, {}, {}, 3) == (None, {})


class _Conf:
    def __init__(self, value):
        self.value = value

    def get(self, key, default=None):
        return self.value if self.value is not None else default


class _Session:
    def __init__(self, value):
        self.conf = _Conf(value)


def test_the_policy_comes_from_sparks_conf():
    assert watermark_policy(_Session(None)) == "min"
    assert watermark_policy(_Session("MAX")) == "max"
    with pytest.raises(SchemaError, match=r"multipleWatermarkPolicy = 'median'.*'min' and 'max'"):
        watermark_policy(_Session("median"))

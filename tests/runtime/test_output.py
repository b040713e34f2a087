"""Output rows against ``returns``: the generated per-schema converters (the hot path) give
what the rules say for every shape and edge value, the same through ``normalizer`` and
``normalize_output``."""

import datetime as dt
import re

import numpy as np
import pytest

from spark_keyed_sql.api.errors import OutputSchemaError, StateTypeError
from spark_keyed_sql.api.types import parse_schema
from spark_keyed_sql.runtime.output import normalize_output, normalizer, tuple_converter

SCHEMA = parse_schema("n bigint, total double, name string, ok boolean, small int")

# (returned, expected rows) - expected written out by hand from the rules in docs/concepts.md
GOOD = [
    ((1, 2.5, "a", True, 3), [(1, 2.5, "a", True, 3)]),
    ({"n": 1, "total": 2.5, "name": "a", "ok": False, "small": 3}, [(1, 2.5, "a", False, 3)]),
    ({"n": 1}, [(1, None, None, None, None)]),  # missing names are NULL
    ((None, None, None, None, None), [(None, None, None, None, None)]),
    ((2, 3, "b", True, 1), [(2, 3.0, "b", True, 1)]),  # an int where a double goes: widened
    ((np.int64(7), np.float32(0.5), "c", np.bool_(True), np.int8(1)), [(7, 0.5, "c", True, 1)]),
    ([(1, 1.0, "x", True, 1), {"n": 2}], [(1, 1.0, "x", True, 1), (2, None, None, None, None)]),
    ([(1, 1.0, "x", True, 1), None], [(1, 1.0, "x", True, 1)]),  # None items yield nothing
    ((x for x in [(5, 5.0, "g", True, 5)]), [(5, 5.0, "g", True, 5)]),
    (None, []),
    ([], []),
    ((2**63 - 1, 0.0, "", False, 2**31 - 1), [(2**63 - 1, 0.0, "", False, 2**31 - 1)]),
]

BAD = [
    ((True, 1.0, "a", True, 1), "expected bigint, got bool"),
    ((2**63, 1.0, "a", True, 1), "does not fit bigint"),
    ((1, 1.0, "a", True, 2**31), "does not fit int"),
    ((1, "1.0", "a", True, 1), "expected double, got str"),
    ((1, 1.0, 5, True, 1), "expected string, got int"),
    ((1, 1.0, "a", 1, 1), "expected boolean, got int"),
    ((1, 1.0, "a"), "returned 3 value(s)"),
    ({"n": 1, "colour": "red"}, "key(s) ['colour'] that are not columns"),
    ([(1, 1.0, "a", True, 1), (1.5, 1.0, "a", True, 1)], "expected bigint, got float"),
    (dt.date(2026, 1, 1), "returned date"),
]


@pytest.mark.parametrize("returned, expected", GOOD)
def test_rows_as_the_rules_say(returned, expected):
    if hasattr(returned, "__next__"):
        items = list(returned)
        assert normalize_output(iter(items), SCHEMA, "f") == expected
        assert normalizer(SCHEMA)(iter(items), "f") == expected
    else:
        assert normalize_output(returned, SCHEMA, "f") == expected
        assert normalizer(SCHEMA)(returned, "f") == expected


@pytest.mark.parametrize("returned, message", BAD)
def test_mismatches_are_named(returned, message):
    for normalize in (lambda r, w: normalize_output(r, SCHEMA, w), normalizer(SCHEMA)):
        with pytest.raises(OutputSchemaError, match="(?i)" + re.escape(message)) as info:
            normalize(returned, lambda: "function 'f' (key 'u1', row 3)")
        assert "function 'f' (key 'u1', row 3)" in str(info.value)


def test_a_one_column_schema_takes_a_bare_value_and_a_timestamp():
    one = parse_schema("at timestamp")
    t = dt.datetime(2026, 1, 1, 12)
    assert normalizer(one)(t, "f") == [(t,)]
    assert normalizer(one)({"at": t}, "f") == [(t,)]
    assert normalize_output([(t,), (None,)], one, "f") == [(t,), (None,)]


def test_the_single_tuple_fast_path_agrees_or_defers():
    """The runners hand a lone tuple of the returns' width to ``tuple_converter`` first: it gives
    what the rules give, or raises StateTypeError so the full check names the problem."""
    one = tuple_converter(SCHEMA)
    for returned, expected in GOOD:
        if type(returned) is tuple and len(returned) == len(SCHEMA.fields):
            assert [one(returned)] == expected
    wide = [r for r, _ in BAD if type(r) is tuple and len(r) == len(SCHEMA.fields)]
    assert len(wide) == 6
    for returned in wide:
        with pytest.raises(StateTypeError):
            one(returned)

import collections
import datetime as dt
import decimal
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_keyed_sql.api.errors import StateEncodingError
from spark_keyed_sql.state.encoding import dumps, loads

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
)
hashables = st.recursive(
    st.one_of(st.integers(), st.text(max_size=5), st.booleans()), lambda c: st.tuples(c, c), max_leaves=4
)
values = st.recursive(
    scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=4),
        st.tuples(c, c),
        st.sets(hashables, max_size=4),
        st.dictionaries(st.text(max_size=5), c, max_size=4),
        st.dictionaries(hashables, c, max_size=4),
    ),
    max_leaves=20,
)


def exact(a, b):
    """Equal and of the same types all the way down (True == 1 would hide a bool/int swap)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (
            list(a.keys()) == list(b.keys())
            and all(exact(k1, k2) for k1, k2 in zip(a, b))
            and all(exact(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(exact(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b and sorted(map(repr, a)) == sorted(map(repr, b))
    return a == b


@settings(max_examples=300, deadline=None)
@given(values)
def test_round_trip_exact(v):
    assert exact(loads(dumps(v)), v)


def test_seed_shapes_round_trip():
    v = {
        "user_sessions": {"u1": {"session_count": 2, "total_value": 3.5}},
        "by_int": {1: {(2, "a"): {3, 4}}, -7: {}},
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, 678),
        "aware": dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc),
        "day": dt.date(2026, 1, 2),
        "inf": [float("inf"), float("-inf")],
        "frozen": frozenset({1, 2}),
        "dec": decimal.Decimal("1.25"),
        "raw": b"\x00\x01",
        "gap": dt.timedelta(minutes=30),
        "$looks_tagged": 1,
        "dd": collections.defaultdict(int, {"a": 1}),
        "lru": collections.OrderedDict([("b", 1), (("t", 2), [3]), ("a", {"x": 1})]),
    }
    back = loads(dumps(v))
    assert exact(back, v)
    assert back["dd"].default_factory is int
    # an OrderedDict stays one, in its order (move_to_end / popitem(last=False) after a reload)
    assert type(back["lru"]) is collections.OrderedDict and list(back["lru"]) == ["b", ("t", 2), "a"]
    assert math.isnan(loads(dumps(float("nan"))))


def test_encoding_is_readable_json():
    text = dumps({"counts": {1: 2}, "seen": {"a"}})
    assert json.loads(text) == {"counts": {"$dict": [[1, 2]]}, "seen": {"$set": ["a"]}}


@pytest.mark.parametrize("bad", [object(), open, lambda: 1, collections.defaultdict(lambda: 0)])
def test_refuses_unknown_types(bad):
    with pytest.raises(StateEncodingError, match="attribute C.x"):
        dumps({"k": bad}, "attribute C.x")


def test_an_int_past_pythons_digit_limit_is_refused_by_name():
    with pytest.raises(StateEncodingError, match=r"attribute C\.x: cannot be stored \(.*digits"):
        dumps({"n": 10**5000}, "attribute C.x")


def test_live_safe_only_when_a_store_and_reload_gives_the_same_values():
    """A runtime may skip storing and reloading attribute state only when that would change
    nothing: simple immutable values and naive datetimes, typed values of their exact type."""
    import datetime as dt

    import numpy as np

    from spark_keyed_sql import StatefulFunction
    from spark_keyed_sql.state.attributes import AttributeLayout

    class F(StatefulFunction):
        n: int

        def __init__(self, **kw):
            super().__init__(**kw)
            self.n = 0
            self.v = None

    f = F()
    layout = AttributeLayout(f)
    cases = [
        (1.5, True),
        ("s", True),
        (dt.datetime(2026, 1, 1), True),
        (dt.timedelta(1), True),
        (None, True),
        (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), False),
        ([1], False),
        ((1, 2), False),
        (np.float64(1.5), False),
        ({"a": 1}, False),
    ]
    for value, expected in cases:
        f.v = value
        assert layout.live_safe(f) is expected, value
        if expected:  # and it really does round trip to an equal value of the same type
            g = F()
            layout.decode_into(g, layout.encode(f))
            assert type(g.v) is type(value) and g.v == value
    f.v, f.n = 1, True  # a bool in an int column: coerce would change it
    assert not layout.live_safe(f)
    f.n, f.extra = 1, 2  # an attribute __init__ did not make
    assert not layout.live_safe(f)


def test_a_timers_utc_time_comes_back_as_one():
    """The UTC datetime on_timer gets (it compares with naive event times as UTC) is stored and
    comes back as that kind, so a later batch's ``event["ts"] - self.closed_at`` works; a plain
    aware datetime stays plain."""
    from spark_keyed_sql.api.context import UTCDateTime, from_epoch_ms

    fired = from_epoch_ms(1_767_261_600_123)
    back = loads(dumps(fired))
    assert type(back) is UTCDateTime and back == fired and back.utcoffset() == dt.timedelta(0)
    assert dt.datetime(2026, 1, 1, 11, 0) - back == dt.datetime(2026, 1, 1, 11, 0) - dt.datetime(
        2026, 1, 1, 10, 0, 0, 123000
    )
    plain = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    assert type(loads(dumps(plain))) is dt.datetime

"""The broadcast state on its own (no Spark): rows apply in one order whatever order they come
in (time, order_by columns, then values), versioned reads, NULL removals, pruning below a
watermark, the checkpoint's JSON copy, and the read-only views."""

import datetime as dt
import decimal
import pickle
import random

import pytest

from spark_keyed_sql import KeyedSQLError
from spark_keyed_sql.runtime.broadcast import BroadcastInput, BroadcastState
from spark_keyed_sql.runtime.keys import OrderSpec

RATES = BroadcastInput("rates", 1, (("currency", "c"), ("ts", "t"), ("rate", "r")), ("currency",), time="ts")
LATEST = BroadcastInput(
    "rates", 1, (("currency", "c"), ("seq", "s"), ("rate", "r")), ("currency",), order=(OrderSpec("seq"),)
)


def _rows():
    return [
        {"currency": "USD", "ts": dt.datetime(2024, 1, 1, 0, 5), "rate": 0.9},
        {"currency": "USD", "ts": dt.datetime(2024, 1, 1, 0, 1), "rate": 0.8},
        {"currency": "USD", "ts": dt.datetime(2024, 1, 1, 0, 5), "rate": 0.7},  # a tie at 0:05: by value
        {"currency": "GBP", "ts": dt.datetime(2024, 1, 1, 0, 2), "rate": 1.2},
        {"currency": "GBP", "ts": dt.datetime(2024, 1, 1, 0, 4), "rate": None},  # removed from 0:04
    ]


def _epoch(minutes):
    return int((dt.datetime(2024, 1, 1, 0, minutes) - dt.datetime(1970, 1, 1)).total_seconds() * 1000)


@pytest.mark.parametrize("seed", range(5))
def test_versioned_reads_do_not_depend_on_arrival_order(seed):
    rows = _rows()
    random.Random(seed).shuffle(rows)
    s = BroadcastState()
    s.apply([RATES], {"rates": rows})
    at = {m: dict(s.view("rates", _epoch(m))) for m in (0, 1, 3, 4, 5, 9)}
    # the oracle: per time, the rows at or before it; a tie at one time: the larger repr last
    assert at == {
        0: {},
        1: {"USD": 0.8},
        3: {"USD": 0.8, "GBP": 1.2},
        4: {"USD": 0.8},
        5: {"USD": 0.9},  # repr '0.9' > '0.7': applied last
        9: {"USD": 0.9},
    }


def test_unversioned_applies_by_order_column_then_value_and_null_removes():
    rows = [
        {"currency": "USD", "seq": 2, "rate": 0.5},
        {"currency": "USD", "seq": 1, "rate": 0.9},
        {"currency": "JPY", "seq": 1, "rate": 0.006},
        {"currency": "JPY", "seq": 3, "rate": None},
    ]
    for seed in range(4):
        random.Random(seed).shuffle(rows)
        s = BroadcastState()
        s.apply([LATEST], {"rates": rows})
        assert dict(s.view("rates")) == {"USD": 0.5}


def test_json_copy_keeps_types_and_versions_and_pickles_without_its_views():
    s = BroadcastState()
    row = {"currency": "X", "ts": dt.datetime(2024, 1, 1), "rate": decimal.Decimal("1.25")}
    s.apply([RATES], {"rates": [row]})
    back = BroadcastState.from_json(s.to_json())
    assert back.view("rates", _epoch(0))["X"] == decimal.Decimal("1.25")
    assert back.rows("rates") == s.rows("rates")
    s.view("rates")  # (a versioned view: nothing cached; an unversioned one is cached)
    assert pickle.loads(pickle.dumps(back)).rows("rates") == s.rows("rates")


def test_prune_keeps_what_a_read_at_or_after_the_watermark_sees():
    s = BroadcastState()
    s.apply([RATES], {"rates": _rows()})
    before = {m: dict(s.view("rates", _epoch(m))) for m in (4, 5, 9)}
    s.prune(_epoch(4))
    assert {m: dict(s.view("rates", _epoch(m))) for m in (4, 5, 9)} == before
    # USD at 0:01 (still seen at 0:04) and 0:05; GBP's removal stays (a late row of an older
    # time must not bring GBP back); reads before the watermark are refused, not answered wrong
    assert [(k, v) for k, _, v in s.rows("rates")] == [("GBP", None), ("USD", 0.8), ("USD", 0.9)]
    s.apply([RATES], {"rates": [{"currency": "GBP", "ts": dt.datetime(2024, 1, 1, 0, 1), "rate": 5.0}]})
    assert "GBP" not in s.view("rates", _epoch(9))
    with pytest.raises(KeyedSQLError, match="no longer kept"):
        s.view("rates", _epoch(3)).get("USD")


def test_views_are_read_only_and_a_missing_input_is_named():
    s = BroadcastState()
    s.apply([LATEST], {"rates": [{"currency": "USD", "seq": 1, "rate": 1.0}]})
    with pytest.raises(KeyedSQLError, match="read-only"):
        s.view("rates")["USD"] = 2.0
    with pytest.raises(KeyedSQLError, match="read-only"):
        s.view("rates", _epoch(0))["USD"] = 2.0
    with pytest.raises(KeyedSQLError, match=r"no broadcast input of that name \(this query has: rates\)"):
        s.view("fx")


def test_a_versioned_row_without_its_time_is_refused():
    with pytest.raises(KeyedSQLError, match="a row has no ts"):
        BroadcastState().apply([RATES], {"rates": [{"currency": "USD", "ts": None, "rate": 1.0}]})


def test_views_iterate_in_one_order_whatever_order_the_rows_came_in():
    rows = [{"currency": c, "seq": 1, "rate": 1.0} for c in ("USD", "GBP", "JPY", "CHF", "AUD")]
    seen = set()
    for seed in range(6):
        random.Random(seed).shuffle(rows)
        s = BroadcastState()
        s.apply([LATEST], {"rates": rows})
        seen.add(tuple(s.view("rates")))
    assert seen == {tuple(sorted(("USD", "GBP", "JPY", "CHF", "AUD"), key=repr))}


class _Hook:
    def __init__(self):
        from spark_keyed_sql.api.context import KeyContext

        self.ctx = KeyContext()

    def on_broadcast(self, name, row):
        self.ctx.broadcast(name)[row["currency"]] = (row["rate"], "pair")


def test_a_hooks_values_are_kept_as_the_checkpoint_keeps_them():
    s = BroadcastState()
    hook = _Hook()
    hook.ctx.call.broadcasts = s
    s.apply([LATEST], {"rates": [{"currency": "USD", "seq": 1, "rate": 1.0}]}, hook)
    assert s.view("rates")["USD"] == [1.0, "pair"]  # a list now, as after a restart
    assert BroadcastState.from_json(s.to_json()).view("rates")["USD"] == [1.0, "pair"]


def test_a_tester_broadcast_key_the_input_lacks_is_refused_naming_it():
    from spark_keyed_sql import KeyedTester, StatefulFunction

    class W(StatefulFunction):
        def execute(self, e):
            return None

    with pytest.raises(
        KeyedSQLError, match=r"broadcast input 'rates' has none of the broadcast_key column\(s\) currency"
    ):
        KeyedTester(W, broadcast={"rates": [{"c": "USD", "rate": 1.0}]}, broadcast_key="currency")


def test_a_tester_input_declared_empty_is_versioned_by_its_first_rows():
    """broadcast={"rates": []} at construction, rows later through .broadcast(): an event reads the
    rate as of its own time, as when the rows come at construction (it read the newest: the
    empty input was taken for an unversioned one)."""
    from spark_keyed_sql import KeyedTester, StatefulFunction

    class Convert(StatefulFunction):
        def execute(self, e):
            return {"rate": self.ctx.broadcast("rates").get("USD")}

    t7, t8, t9 = (dt.datetime(2026, 1, 1, h) for h in (7, 8, 9))
    rates = [{"currency": "USD", "rate": 1.0, "ts": t7}, {"currency": "USD", "rate": 2.0, "ts": t9}]
    want = [{"rate": 1.0}]  # as of 08:00: the 07:00 rate
    late = KeyedTester(Convert, event_time="ts", broadcast={"rates": []})
    late.broadcast("rates", rates)
    early = KeyedTester(Convert, event_time="ts", broadcast={"rates": rates})
    for tester in (late, early):
        assert tester.run([{"ts": t8}], key="u1") == want

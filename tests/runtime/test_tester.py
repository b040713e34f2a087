"""KeyedTester semantics (no Spark): ordering, key handling, state visibility, TTL, timers."""

import datetime as dt

import pytest

from spark_keyed_sql import KeyedProcessor, KeyedTester, ListState, MapState, StatefulFunction, ValueState
from spark_keyed_sql.api.errors import KeyedSQLError, StateAccessError


class Recorder(StatefulFunction):
    __state_exclude__ = ["temp_cache"]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = []
        self.temp_cache = {}
        self._private = 0
        self.logger = None

    def execute(self, event):
        self.seen.append(event["x"])
        self.temp_cache["last"] = event["x"]
        return {"key": repr(self.ctx.get_key()), "keyed": self.ctx.is_keyed, "seen": list(self.seen)}


def test_order_within_key_and_state_visibility():
    t = KeyedTester(Recorder, returns="key string, keyed boolean, seen array<bigint>", order_by="x DESC")
    out = t.run([{"x": 1}, {"x": 3}, {"x": 2}], key="a")
    assert [o["seen"] for o in out] == [[3], [3, 2], [3, 2, 1]]
    assert t.state("a") == {"seen": [3, 2, 1]}  # temp_cache, _private and logger are not state


def test_key_shapes_and_null_key():
    t = KeyedTester(Recorder, returns="key string, keyed boolean, seen array<bigint>")
    assert t.run([{"x": 1}], key=("a", 1))[0]["key"] == "('a', 1)"
    null = t.run([{"x": 1}], key=None)[0]
    assert null["key"] == "None" and null["keyed"] is True
    unkeyed = t.run([{"x": 1}])[0]
    assert unkeyed["key"] == "None" and unkeyed["keyed"] is False
    # the null key and unkeyed use are separate states
    assert t.run([{"x": 2}], key=None)[0]["seen"] == [1, 2]
    # a key of several columns given as a list is the tuple get_key() returns: the same key
    assert t.run([{"x": 3}], key=["a", 1])[0] == {"key": "('a', 1)", "keyed": True, "seen": [1, 3]}
    assert t.state(["a", 1]) == t.state(("a", 1)) == {"seen": [1, 3]}


def test_key_is_cleared_after_each_row():
    class K(StatefulFunction):
        def execute(self, e):
            return {"k": self.ctx.get_key()}

    t = KeyedTester(K, returns="k string")
    inst = t._runner(True).instance
    t.run([{}], key="z")
    assert inst.ctx.get_key() is None


def test_state_include():
    class Inc(StatefulFunction):
        __state_include__ = ["_kept"]

        def __init__(self, **kw):
            super().__init__(**kw)
            self._kept = 0
            self.other = 0

        def execute(self, e):
            self._kept += 1
            self.other += 1

    t = KeyedTester(Inc)
    t.run([{}, {}], key="a")
    assert t.state("a") == {"_kept": 2}


def test_clear_state():
    class C(StatefulFunction):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.n = 0

        def execute(self, e):
            self.n += 1
            if e.get("reset"):
                self.ctx.clear_state()
            return {"n": self.n}

    t = KeyedTester(C, returns="n bigint")
    # clear_state() puts the attributes back to their __init__ values at once
    assert [o["n"] for o in t.run([{}, {}, {"reset": True}], key="a")] == [1, 2, 0]
    assert t.state("a") == {} and t.keys() == []
    assert [o["n"] for o in t.run([{"reset": True}, {}], key="a")] == [0, 1]
    assert t.state("a") == {"n": 1}


class Ops(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.tags = []

    def execute(self, e):
        if e["op"] == "inc":
            self.n += 1
        elif e["op"] == "tag":
            self.tags.append(e["op"])
        elif e["op"] == "clear":
            self.ctx.clear_state()
        elif e["op"] == "zero":
            self.n = 0  # __init__'s value again


@pytest.mark.parametrize(
    ("batch", "kept"),
    [
        (["clear"], None),
        (["clear", "noop", "noop"], None),  # rows after the clear that set nothing: still gone
        (["clear", "zero"], None),  # back at __init__'s values: what a new key starts from
        (["clear", "inc"], {"n": 1, "tags": []}),
        (["clear", "tag", "noop"], {"n": 0, "tags": ["tag"]}),
        (["noop"], {"n": 2, "tags": []}),  # not cleared: kept as it is
    ],
)
def test_clear_state_then_later_rows(batch, kept):
    t = KeyedTester(Ops)
    t.run([{"op": "inc"}, {"op": "inc"}], key="k")
    t.run([{"op": op} for op in batch], key="k")
    assert t.keys() == ([] if kept is None else ["k"])
    assert t.state("k") == (kept or {})


class Typed(KeyedProcessor):
    total = ValueState("double", default=0.0, ttl="10 minutes")
    items = ListState("bigint")
    tags = MapState("string", "bigint", ttl="1 minute")
    returns = "total double"

    def process(self, key, rows):
        self.total.update(self.total.get() + float(rows["v"].sum()))
        self.items.extend(int(v) for v in rows["v"])
        for t in rows["tag"]:
            self.tags.put(t, (self.tags.get(t) or 0) + 1)
        return {"total": self.total.get()}


def test_ttl_with_controlled_clock():
    t = KeyedTester(Typed)
    t0 = dt.datetime(2026, 1, 1)
    t.advance_processing_time(t0)
    assert t.run([{"v": 2, "tag": "a"}], key="k") == [{"total": 2.0}]
    t.advance_processing_time(t0 + dt.timedelta(minutes=5))
    assert t.state("k") == {"total": 2.0, "items": [2]}  # tags expired after 1 minute
    assert t.run([{"v": 1, "tag": "b"}], key="k") == [{"total": 3.0}]  # update resets the clock
    t.advance_processing_time(t0 + dt.timedelta(minutes=14))
    assert t.state("k")["total"] == 3.0
    t.advance_processing_time(t0 + dt.timedelta(minutes=16))
    assert "total" not in t.state("k")


def test_ttl_counts_from_the_epoch_until_the_clock_is_moved():
    """State written before any advance_processing_time was written at the epoch (the tester's
    clock starts there), so moving the clock past its TTL expires it."""
    t = KeyedTester(Typed)
    t.run([{"v": 2, "tag": "a"}], key="k")
    t.advance_processing_time(dt.timedelta(minutes=9) // dt.timedelta(milliseconds=1))
    assert t.state("k") == {"total": 2.0, "items": [2]}  # the tag expired (1 minute), the total not yet
    t.advance_processing_time(dt.datetime(2026, 1, 1))
    assert t.state("k") == {"items": [2]}  # the list has no TTL
    s = KeyedTester(Recorder, ttl="1 hour")  # attribute state: the function's TTL
    s.run([{"x": 1}], key="a")
    s.advance_processing_time(dt.datetime(2026, 1, 1))
    assert s.state("a") == {} and s.keys() == []


def test_function_ttl_is_the_default_ttl_of_typed_state():
    """The function's TTL (SQL's ``TTL <interval>``, ``state_ttl``, the tester's ``ttl=``) is the
    default TTL of its state: typed variables without one of their own expire after it, one
    with its own keeps it."""
    t = KeyedTester(Typed, ttl="3 minutes")
    t0 = dt.datetime(2026, 1, 1)
    t.advance_processing_time(t0)
    t.run([{"v": 2, "tag": "a"}], key="k")
    t.advance_processing_time(t0 + dt.timedelta(minutes=2))
    assert t.state("k") == {"total": 2.0, "items": [2]}  # tags: their own 1 minute
    t.advance_processing_time(t0 + dt.timedelta(minutes=4))
    assert t.state("k") == {"total": 2.0}  # items: the function's 3 minutes; total: its own 10

    class Declared(Typed):
        state_ttl = "3 minutes"

    t = KeyedTester(Declared)
    t.advance_processing_time(t0)
    t.run([{"v": 2, "tag": "a"}], key="k")
    t.advance_processing_time(t0 + dt.timedelta(minutes=4))
    assert t.state("k") == {"total": 2.0}


def test_map_state_scans():
    class M(KeyedProcessor):
        m = MapState("bigint", "string")

        def process(self, key, rows):
            for v in rows["v"]:
                self.m.put(int(v), f"v{v}")
            return [{"k": k, "v": v} for k, v in self.m.range(2, 5)] + [{"k": -1, "v": ",".join(self.m.values())}]

    out = KeyedTester(M, returns="k bigint, v string").run([{"v": x} for x in (5, 1, 3, 2, 4)], key="a")
    assert out == [{"k": 2, "v": "v2"}, {"k": 3, "v": "v3"}, {"k": 4, "v": "v4"}, {"k": -1, "v": "v1,v2,v3,v4,v5"}]


def test_map_state_range_with_an_open_bound():
    """``range(None, hi)`` / ``range(lo, None)``: every key before / from a bound (a TypeError
    comparing None before)."""

    class M(KeyedProcessor):
        m = MapState("bigint", "string")

        def process(self, key, rows):
            for v in rows["v"]:
                self.m.put(int(v), f"v{v}")
            below, above = [k for k, _ in self.m.range(None, 3)], [k for k, _ in self.m.range(3, None)]
            return [{"below": ",".join(map(str, below)), "above": ",".join(map(str, above))}]

    out = KeyedTester(M, returns="below string, above string").run([{"v": x} for x in (5, 1, 3, 2, 4)], key="a")
    assert out == [{"below": "1,2", "above": "3,4,5"}]


def test_timers_fire_and_emit():
    class Sessions(StatefulFunction):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.count = 0
            self.deadline = None

        def execute(self, e):
            self.count += 1
            if self.deadline is not None:
                self.ctx.delete_timer(self.deadline)
            self.deadline = e["ts"] + dt.timedelta(minutes=30)
            self.ctx.register_timer(self.deadline)

        def on_timer(self, key, timestamp):
            out = {"user": key, "events": self.count, "closed_at": timestamp}
            self.ctx.clear_state()
            return out

    t = KeyedTester(Sessions, returns="user string, events bigint, closed_at timestamp")
    t0 = dt.datetime(2026, 1, 1)
    t.run([{"ts": t0}, {"ts": t0 + dt.timedelta(minutes=10)}], key="a")
    t.run([{"ts": t0 + dt.timedelta(minutes=5)}], key="b")
    assert t.set_watermark(t0 + dt.timedelta(minutes=36)) == [
        {"user": "b", "events": 1, "closed_at": dt.datetime(2026, 1, 1, 0, 35, tzinfo=dt.timezone.utc)}
    ]
    assert [o["user"] for o in t.set_watermark(t0 + dt.timedelta(hours=2))] == ["a"]
    assert t.keys() == []


class Gap(StatefulFunction):
    """A timer 30 minutes after each row's ts (a session gap)."""

    def execute(self, e):
        self.ctx.register_timer(e["ts"] + dt.timedelta(minutes=30))

    def on_timer(self, key, timestamp):
        return {"user": key, "at": timestamp.replace(tzinfo=None)}


def test_timers_fire_on_their_own_clock_only():
    """Under Spark a query's timers are in one time mode; so are the tester's: in event time
    (from the first set_watermark on, or time_mode="event") the processing clock moves TTL and
    fires nothing; with time_mode="processing" the watermark fires nothing."""
    t0 = dt.datetime(2026, 1, 1)
    t = KeyedTester(Gap, returns="user string, at timestamp")
    t.set_watermark(t0)
    t.run([{"ts": t0}], key="a")
    assert t.advance_processing_time(t0 + dt.timedelta(hours=5)) == []  # a wall clock: not the timer's
    assert t.timers("a") == [int((t0 + dt.timedelta(minutes=30)).replace(tzinfo=dt.timezone.utc).timestamp() * 1000)]
    assert t.set_watermark(t0 + dt.timedelta(minutes=31)) == [{"user": "a", "at": t0 + dt.timedelta(minutes=30)}]

    t = KeyedTester(Gap, returns="user string, at timestamp", time_mode="processing")
    t.run([{"ts": t0}], key="a")
    assert t.set_watermark(t0 + dt.timedelta(hours=5)) == []
    assert t.advance_processing_time(t0 + dt.timedelta(minutes=31)) == [
        {"user": "a", "at": t0 + dt.timedelta(minutes=30)}
    ]

    t = KeyedTester(Gap, returns="user string, at timestamp", time_mode="event")
    t.run([{"ts": t0}], key="a")
    assert t.advance_processing_time(t0 + dt.timedelta(hours=5)) == []
    assert len(t.set_watermark(t0 + dt.timedelta(hours=1))) == 1

    t = KeyedTester(Gap, returns="user string, at timestamp")  # no clock named: processing time fires
    t.run([{"ts": t0}], key="a")
    assert len(t.advance_processing_time(t0 + dt.timedelta(hours=1))) == 1

    with pytest.raises(KeyedSQLError, match=r"time_mode='wall'; use one of 'event', 'processing'"):
        KeyedTester(Gap, returns="user string, at timestamp", time_mode="wall")


def test_typed_state_outside_processing_is_refused():
    with pytest.raises(StateAccessError, match="only available inside process"):
        Typed().total.get()


# ---------------------------------------------------------------- outputs are values (issue 17)
def test_live_state_returned_is_fixed_when_emitted():
    from sage_patterns import FeatureComputer, UserSessionFunction

    values = [1.0, 4.0, 2.5]
    t = KeyedTester(UserSessionFunction)  # no returns: the rows come back as the function gave them
    got = t.run([{"value": v} for v in values], key="a")
    expected, count, total = [], 0, 0
    for v in values:
        count, total = count + 1, total + v
        expected.append({"session_count": count, "total_value": total})
    assert got == expected

    t = KeyedTester(FeatureComputer)
    got = t.run([{"value": v} for v in values], key="e")
    seen = []
    for i, row in enumerate(got):
        seen.append(values[i])
        f = row["e"]
        assert (f["count"], f["min"], f["max"]) == (len(seen), min(seen), max(seen))
        assert f["mean"] == pytest.approx(sum(seen) / len(seen))


class LiveProcessor(KeyedProcessor):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.scratch = {"items": [], "tags": set()}

    def process(self, key, rows):
        for x in rows["x"]:
            self.scratch["items"].append(int(x))
            self.scratch["tags"].add(int(x) % 2)
            yield (key, self.scratch)  # a tuple holding a live, later-mutated dict
        self.ctx.register_timer(1000)

    def on_timer(self, key, timestamp):
        yield {"timer": self.scratch}
        self.scratch["items"].clear()


def test_yielded_tuples_and_timer_outputs_are_fixed():
    t = KeyedTester(LiveProcessor)
    out = t.run([{"x": 1}, {"x": 2}, {"x": 3}], key="k")
    assert [(k, s["items"], s["tags"]) for k, s in out] == [
        ("k", [1], {1}),
        ("k", [1, 2], {0, 1}),
        ("k", [1, 2, 3], {0, 1}),
    ]
    fired = t.advance_processing_time(1000)
    assert fired == [{"timer": {"items": [1, 2, 3], "tags": {0, 1}}}]


# ---------------------------------------------------------------- initial state (issue 17)
class Tally(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.by_merchant = {}

    def execute(self, e):
        self.count += 1
        self.by_merchant[e["m"]] = self.by_merchant.get(e["m"], 0) + 1
        return {"count": self.count, "m_count": self.by_merchant[e["m"]]}


def test_initial_state_seeds_attributes():
    seed = {
        "a": {"count": 5, "by_merchant": {"x": 2}},
        ("b", 1): {"count": 1, "by_merchant": '{"y": 7}'},
        None: {"count": 9},
    }
    t = KeyedTester(Tally, initial_state=seed)
    batch = {"a": ["x", "y", "x"], ("b", 1): ["y"], None: ["z"], "fresh": ["x"]}
    # oracle: plain Python from the seed (the JSON text is the same dict read_state would show)
    start = {"a": (5, {"x": 2}), ("b", 1): (1, {"y": 7}), None: (9, {})}
    for key, ms in batch.items():
        count, per = start.get(key, (0, {}))
        per = dict(per)
        expected = []
        for m in ms:
            count += 1
            per[m] = per.get(m, 0) + 1
            expected.append({"count": count, "m_count": per[m]})
        assert t.run([{"m": m} for m in ms], key=key) == expected
        assert t.state(key) == {"count": count, "by_merchant": per}
    assert t.state() == {}  # unkeyed use is not seeded by keyed rows


def test_initial_state_pairs_and_processor_on_initial_state():
    class Seeded(KeyedProcessor):
        total = ValueState("double", default=0.0)
        recent = ListState("bigint")
        tags = MapState("string", "bigint")

        def process(self, key, rows):
            for x in rows["x"]:
                self.total.update(self.total.get() + float(x))
                self.recent.append(int(x))
            yield {"total": self.total.get(), "recent": list(self.recent.get()), "tags": dict(self.tags.items())}

    class Custom(Seeded):
        def on_initial_state(self, key, row):
            self.total.update(row["start"] * 2)

    t = KeyedTester(
        Seeded, initial_state=[("k", {"total": 1.5, "recent": [7], "tags": {"t": 1}}), ("j", {"recent": [1, 2]})]
    )
    assert t.run([{"x": 2}], key="k") == [{"total": 3.5, "recent": [7, 2], "tags": {"t": 1}}]
    assert t.run([{"x": 3}], key="j") == [{"total": 3.0, "recent": [1, 2, 3], "tags": {}}]
    t = KeyedTester(Custom, initial_state={"k": {"start": 4.0}})
    assert t.state("k") == {"total": 8.0}
    assert t.run([{"x": 1}], key="k") == [{"total": 9.0, "recent": [1], "tags": {}}]


def test_initial_state_errors_are_named():
    from spark_keyed_sql.api.errors import KeyedSQLError

    with pytest.raises(KeyedSQLError, match=r"initial_state: expected a \(key, row\) pair, got 'a'"):
        KeyedTester(Tally, initial_state=["a"])
    with pytest.raises(KeyedSQLError, match="the row for key 'a' must be a dict of state columns, got int"):
        KeyedTester(Tally, initial_state={"a": 3})
    with pytest.raises(KeyedSQLError, match=r"column\(s\) \['colour'\] that are not state attributes of Tally"):
        KeyedTester(Tally, initial_state={"a": {"colour": 1}})


class FailsOn(StatefulFunction):
    """Counts rows, registers a timer per row, and raises on a row whose v is 'boom' (or in
    on_timer at t=13)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        self.ctx.register_timer(10 + self.n)
        if e["v"] == "boom":
            raise ValueError("boom")

    def on_timer(self, key, timestamp):
        self.n += 100
        if timestamp == dt.datetime.fromtimestamp(0.013, dt.timezone.utc):
            raise ValueError("timer boom")


class CountsTyped(KeyedProcessor):
    total = ValueState("bigint")

    def process(self, key, rows):
        self.total.update((self.total.get() or 0) + len(rows))
        if "boom" in list(rows["v"]):
            raise ValueError("boom")
        return []


def test_a_failed_batch_commits_nothing():
    """As in the engines (no state of a failed batch is committed): the key's state and timers
    are what they were before the failing run; a key the failed run created is not there."""
    t = KeyedTester(FailsOn)
    t.run([{"v": "a"}], key="u")
    with pytest.raises(KeyedSQLError, match="boom"):
        t.run([{"v": "b"}, {"v": "boom"}], key="u")
    assert t.state("u") == {"n": 1} and t.timers("u") == [11]
    with pytest.raises(KeyedSQLError, match="boom"):
        t.run([{"v": "boom"}], key="new")
    assert t.keys() == ["u"] and t.state("new") == {}
    t.run([{"v": "c"}], key="u")  # goes on from the state before the failure
    assert t.state("u") == {"n": 2} and t.timers("u") == [11, 12]

    p = KeyedTester(CountsTyped)
    p.run([{"v": "a"}, {"v": "b"}], key="k")
    with pytest.raises(KeyedSQLError, match="boom"):
        p.run([{"v": "boom"}], key="k")
    assert p.state("k") == {"total": 2}


def test_a_failed_timer_commits_nothing_and_stays_due():
    t = KeyedTester(FailsOn)
    t.run([{"v": "a"}, {"v": "b"}, {"v": "c"}], key="u")  # timers at 11, 12, 13
    with pytest.raises(KeyedSQLError, match="timer boom"):
        t.advance_processing_time(20)
    # 11 and 12 fired and committed; 13's own changes are gone and it is still registered
    assert t.state("u") == {"n": 203} and t.timers("u") == [13]


class Instants(KeyedProcessor):
    at = MapState("timestamp", "bigint")
    last = ValueState("timestamp")

    def process(self, key, rows):
        for when, n in zip(rows["when"], rows["n"]):
            self.at.put(when, n)
            self.last.update(when)
        return []


def test_aware_and_naive_instants_are_one_map_key():
    """A `timestamp` map key is an instant: an aware one is kept as naive UTC (what Spark hands
    back), so the same instant given both ways is one key, and keys stay comparable."""
    plus_one = dt.timezone(dt.timedelta(hours=1))
    t = KeyedTester(Instants)
    t.run(
        [
            {"when": dt.datetime(2024, 1, 1, 12), "n": 1},
            {"when": dt.datetime(2024, 1, 1, 13, tzinfo=plus_one), "n": 2},  # 12:00 UTC again
            {"when": dt.datetime(2024, 1, 1, 9, tzinfo=dt.timezone.utc), "n": 3},
        ],
        key="k",
    )
    assert t.state("k") == {
        "at": {dt.datetime(2024, 1, 1, 9): 3, dt.datetime(2024, 1, 1, 12): 2},
        # the rows frame holds timestamps as Spark hands them (datetime64[ns], naive UTC)
        "last": dt.datetime(2024, 1, 1, 9),
    }


class GapNoKey(Gap):
    def on_timer(self, key, timestamp):  # a row that does not say its key (in SQL the key columns do)
        return {"at": timestamp.replace(tzinfo=None)}


def test_fired_rows_say_which_key_each_came_from():
    t0 = dt.datetime(2026, 1, 1)
    t = KeyedTester(GapNoKey, returns="at timestamp", time_mode="event")
    arrivals = {"b": [0, 50], "a": [10], ("c", 1): [5], None: [20]}  # minutes after t0, per key
    for key, minutes in arrivals.items():
        t.run([{"ts": t0 + dt.timedelta(minutes=m)} for m in minutes], key=key)
    wm = t0 + dt.timedelta(minutes=60)
    # the oracle: every timer at or before the watermark, in time order, with its key
    due = sorted(
        (t0 + dt.timedelta(minutes=m + 30), key) for key, minutes in arrivals.items() for m in minutes if m + 30 <= 60
    )
    fired = t.set_watermark(wm)
    assert fired == [{"at": at} for at, _ in due]  # still the list of output dicts run() returns
    assert fired.row_keys == [key for _, key in due]
    assert fired.by_key() == {key: [{"at": at} for at, k in due if k == key] for _, key in due}
    assert t.advance_processing_time(wm).row_keys == []  # nothing fires on the other clock


class PortedFromSage(StatefulFunction):
    """A class as SAGE's framework writes them: it keeps the runtime context handed to __init__."""

    def __init__(self, runtime_context=None, **kw):
        super().__init__(**kw)
        self.runtime_context = runtime_context
        self.n = 0

    def execute(self, e):
        self.n += 1
        return {"n": self.n, "key": self.runtime_context.get_key()}


def test_a_class_may_set_its_runtime_context_which_is_not_state():
    """Set to None (SAGE's default when the framework hands none) it stays the key's context."""
    t = KeyedTester(PortedFromSage, returns="n bigint, key string")
    assert t.run([{"v": 1}, {"v": 2}], key="a") == [{"n": 1, "key": "a"}, {"n": 2, "key": "a"}]
    assert t.state("a") == {"n": 2}
    marker = object()
    assert PortedFromSage(runtime_context=marker).runtime_context is marker  # one of its own: kept


def test_an_unset_value_state_gives_its_default_as_a_stored_value_would_be():
    """The default is handed over in the state type's form, as a stored value is: a struct as a
    dict of every field (given as a tuple or a partial dict), an int default of a double as a
    float, and a fresh container each time (changing one does not change the default)."""

    class Defaults(KeyedProcessor):
        pair = ValueState("a int, b string", default=(0, ""))
        part = ValueState("a int, b string", default={"a": 1})
        total = ValueState("double", default=0)
        seen = ValueState("array<int>", default=[1])

        def process(self, key, rows):
            self.seen.get().append(99)  # a copy: the next get() is the default again
            yield {
                "pair": repr(self.pair.get()),
                "part": repr(self.part.get()),
                "total": repr(self.total.get()),
                "seen": repr(self.seen.get()),
            }

    out = KeyedTester(Defaults, returns="pair string, part string, total string, seen string").run([{"v": 1}], key="k")
    assert out == [
        {"pair": repr({"a": 0, "b": ""}), "part": repr({"a": 1, "b": None}), "total": repr(0.0), "seen": repr([1])}
    ]


def test_numpy_and_pandas_times_are_timestamps_and_nat_is_null():
    """A ``rows_format = "numpy"`` column's element (numpy.datetime64) is a timestamp value (it was
    refused); NaT, numpy's or pandas', is NULL (pandas' NaT was kept as NaT)."""
    import pandas as pd

    class Last(KeyedProcessor):
        rows_format = "numpy"
        last = ValueState("timestamp")
        missing = ValueState("timestamp")

        def process(self, key, rows):
            self.last.update(rows["ts"][-1])
            self.missing.update(pd.NaT)
            yield {"last": self.last.get(), "missing_set": self.missing.exists()}

    t = KeyedTester(Last, returns="last timestamp, missing_set boolean", schema="ts timestamp")
    out = t.run([{"ts": dt.datetime(2024, 1, 1)}, {"ts": dt.datetime(2024, 1, 2, 3, 4, 5)}], key="k")
    assert out == [{"last": dt.datetime(2024, 1, 2, 3, 4, 5), "missing_set": False}]
    assert t.state("k") == {"last": dt.datetime(2024, 1, 2, 3, 4, 5)}

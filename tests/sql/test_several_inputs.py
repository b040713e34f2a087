"""Several named inputs into one keyed function (Samza's three joins), against plain-Python
oracles over random interleavings of both inputs (hypothesis): a one-shot batch through
ks.sql, two incremental ks.run over Parquet directories (the second with new files in one input
only: just those are processed), and a stream (ks.start) restarted from its checkpoint; on
every engine. And the errors of the form."""

import datetime as dt
import json
import os

import pytest
from data import clock_moved
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from spark_keyed_sql import (
    KeyedProcessor,
    KeyedSQL,
    KeyedSQLError,
    KeyedTester,
    MigrationError,
    StatefulFunction,
    ValueState,
)

EXAMPLES = int(os.environ.get("KS_SEVERAL_EXAMPLES", "3"))
LEFT = "member_id string, ts bigint, region string"
RIGHT = "member_id string, ts bigint, page string"


class ProfileSettings(StatefulFunction):
    """Table-table: the latest of both sides, emitted on every change once both are known."""

    returns = "ts bigint, region string, page string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.region = None
        self.page = None

    def execute(self, e):
        if self.ctx.input == "profiles":
            self.region = e["region"]
        else:
            self.page = e["page"]
        if self.region is not None and self.page is not None:
            return {"ts": e["ts"], "region": self.region, "page": self.page}
        return None


class EnrichViews(StatefulFunction):
    """Table-stream: each view with the region as of the view (None before any profile)."""

    returns = "ts bigint, region string, page string"
    region: str  # typed: read_state shows it as a string column

    def __init__(self, **kw):
        super().__init__(**kw)
        self.region = None

    def execute(self, e):
        if self.ctx.input == "profiles":
            self.region = e["region"]
            return None
        return {"ts": e["ts"], "region": self.region, "page": e["page"]}


class MatchViews(StatefulFunction):
    """Stream-stream: a view waits for the member's first profile; then both are emitted."""

    returns = "ts bigint, region string, page string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.region = None
        self.waiting = []

    def execute(self, e):
        if self.ctx.input == "profiles":
            if self.region is None:
                self.region = e["region"]
                out, self.waiting = [(t, self.region, p) for t, p in self.waiting], []
                return out or None
            return None
        if self.region is None:
            self.waiting.append((e["ts"], e["page"]))
            return None
        return [(e["ts"], self.region, e["page"])]


class CountBoth(KeyedProcessor):
    """One frame per input by name: rows of each input seen for the key so far."""

    returns = "profiles bigint, views bigint"
    seen = ValueState("profiles bigint, views bigint")

    def process(self, key, profiles, views):
        before = self.seen.get() or {"profiles": 0, "views": 0}
        now = {"profiles": before["profiles"] + len(profiles), "views": before["views"] + len(views)}
        self.seen.update(now)
        yield (now["profiles"], now["views"])


# ------------------------------------------------------------------ oracles
def _events(profiles, views):
    """Both inputs in processing order: by time, profiles before views at one time."""
    return sorted([(r[1], 0, r) for r in profiles] + [(r[1], 1, r) for r in views], key=lambda x: (x[0], x[1]))


def oracle(name, batches, state=None):
    """Output rows over ``batches`` [(profiles, views), ...] processed in turn (arrival order
    across batches), and the final state per key."""
    state = {} if state is None else state
    out = []
    for profiles, views in batches:
        per_key = {}
        for ts, side, r in _events(profiles, views):
            per_key.setdefault(r[0], []).append((ts, side, r))
        for key, evs in per_key.items():
            st_ = state.setdefault(key, {"region": None, "page": None, "waiting": [], "counts": [0, 0]})
            if name == "count_both":
                st_["counts"][0] += sum(1 for _, s, _ in evs if s == 0)
                st_["counts"][1] += sum(1 for _, s, _ in evs if s == 1)
                out.append((key, *st_["counts"]))
                continue
            for ts, side, r in evs:
                if name == "profile_settings":
                    if side == 0:
                        st_["region"] = r[2]
                    else:
                        st_["page"] = r[2]
                    if st_["region"] is not None and st_["page"] is not None:
                        out.append((key, ts, st_["region"], st_["page"]))
                elif name == "enrich_views":
                    if side == 0:
                        st_["region"] = r[2]
                    else:
                        out.append((key, ts, st_["region"], r[2]))
                else:  # match_views
                    if side == 0:
                        if st_["region"] is None:
                            st_["region"] = r[2]
                            out += [(key, t, st_["region"], p) for t, p in st_["waiting"]]
                            st_["waiting"] = []
                    elif st_["region"] is None:
                        st_["waiting"].append((ts, r[2]))
                    else:
                        out.append((key, ts, st_["region"], r[2]))
    return sorted(out, key=repr), state


CLASSES = {
    "profile_settings": ProfileSettings,
    "enrich_views": EnrichViews,
    "match_views": MatchViews,
    "count_both": CountBoth,
}


@st.composite
def inputs(draw):
    """Random rows of both inputs over a few keys, times that may tie within and across inputs."""
    keys = draw(st.lists(st.sampled_from(["m1", "m2", "m3"]), min_size=1, max_size=3, unique=True))
    row = st.tuples(st.sampled_from(keys), st.integers(0, 12), st.sampled_from(["north", "south", "east"]))
    profiles = draw(st.lists(row, max_size=8))
    views = [(k, t, f"p{t}") for k, t, _ in draw(st.lists(row, min_size=1, max_size=10))]
    return profiles, views


def _register(ks, name):
    fn = f"si_{name}"
    ks.register(fn, CLASSES[name])
    return fn


def _call(fn, profiles, views):
    return (
        f"SELECT * FROM {fn}(profiles => TABLE({profiles}), views => TABLE({views}), "
        "key => 'member_id', order_by => 'ts')"
    )


@pytest.mark.parametrize("name", list(CLASSES))
def test_one_shot_batch_matches_the_oracle(spark, ks, name):
    fn = _register(ks, name)

    @seed(20261125)
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=inputs())
    def check(data):
        profiles, views = data
        spark.createDataFrame(profiles, LEFT).createOrReplaceTempView("si_profiles")
        spark.createDataFrame(views, RIGHT).createOrReplaceTempView("si_views")
        got = sorted((tuple(r) for r in ks.sql(_call(fn, "si_profiles", "si_views")).collect()), key=repr)
        assert got == oracle(name, [(profiles, views)])[0]

    check()


def _write(spark, rows, schema, path):
    if rows:
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").parquet(path)


# CI runs each function once (tws: enrich_views; bulk: match_views, count_both); the rest in the slow tier
@pytest.mark.slow_on("bulk-enrich_views", "tws-match_views", "tws-count_both")
@pytest.mark.parametrize("name", ["enrich_views", "match_views", "count_both"])
def test_incremental_runs_each_input_tracked_on_its_own(spark, ks, tmp_path, name):
    """ks.run twice over two Parquet directories; the second run has new files in one input
    only, and processes just those (state carried from the first)."""
    fn = _register(ks, name)
    p_dir, v_dir, cp, out = (str(tmp_path / d) for d in ("profiles", "views", "cp", "out"))
    first = ([("m1", 1, "north"), ("m2", 2, "south")], [("m1", 2, "p2"), ("m3", 1, "p1"), ("m2", 1, "p1")])
    second = ([], [("m1", 5, "p5"), ("m2", 6, "p6"), ("m3", 7, "p7")])
    _write(spark, first[0], LEFT, p_dir)
    _write(spark, first[1], RIGHT, v_dir)
    sql = _call(fn, f"parquet.`{p_dir}`", f"parquet.`{v_dir}`")
    s1 = ks.run(sql, checkpoint=cp, output=out)
    _write(spark, second[1], RIGHT, v_dir)
    s2 = ks.run(sql, checkpoint=cp, output=out)
    assert (s1["input_rows"], s2["input_rows"]) == (5, 3)  # the second run read the new view file only
    expected, state = oracle(name, [first, second])
    got = sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr)
    assert got == expected
    if name == "enrich_views":  # state as a table: one row per key, shared by both inputs
        assert {r["member_id"]: r["region"] for r in ks.read_state(cp).collect()} == {
            k: v["region"] for k, v in state.items()
        }


@pytest.mark.parametrize("name", ["match_views"])
def test_stream_of_both_inputs_restarted(spark, ks, tmp_path, name):
    fn = _register(ks, name)
    p_dir, v_dir, cp, out = (str(tmp_path / d) for d in ("profiles", "views", "cp", "out"))
    batches = [
        ([("m1", 3, "north")], [("m1", 1, "p1"), ("m2", 2, "p2")]),
        ([("m2", 5, "south")], [("m1", 6, "p6")]),
    ]
    for profiles, views in batches:
        _write(spark, profiles, LEFT, p_dir)
        _write(spark, views, RIGHT, v_dir)
        q = ks.start(_call(fn, f"parquet.`{p_dir}`", f"parquet.`{v_dir}`"), checkpoint=cp, sink=out)
        q.processAllAvailable()
        q.stop()
    got = sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr)
    assert got == oracle(name, batches)[0]


# ------------------------------------------------------------------ errors
@pytest.fixture
def two_views(spark):
    spark.createDataFrame([("m1", 1, "north")], LEFT).createOrReplaceTempView("si_p")
    spark.createDataFrame([("m1", 2, "p2")], RIGHT).createOrReplaceTempView("si_v")
    spark.createDataFrame([("m1", "x", "p")], "member_id string, ts string, page string").createOrReplaceTempView(
        "si_bad"
    )


def test_a_key_missing_from_one_input_names_it_and_its_columns(ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    with pytest.raises(
        KeyedSQLError,
        match=r"^line 2, column 50: si_enrich_views: input 'views' has no column\(s\) 'user_id' \(its columns: "
        r"member_id, ts, page\)",
    ):
        ks_auto.sql(
            f"SELECT * FROM {fn}(profiles => TABLE(SELECT member_id AS user_id, ts, region FROM si_p),\n"
            "                                        views => TABLE(si_v), key => 'user_id')"
        )


def test_incompatible_order_types_across_inputs_are_refused(ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    with pytest.raises(KeyedSQLError, match=r"column 'ts' is bigint in input 'profiles' and string in input 'views'"):
        ks_auto.sql(_call(fn, "si_p", "si_bad"))


def test_a_processor_whose_parameters_are_not_the_inputs_is_refused(ks_auto, two_views):
    fn = _register(ks_auto, "count_both")
    with pytest.raises(
        KeyedSQLError,
        match=r"process\(self, key, profiles, views\) does not take the inputs "
        r"profiles, clicks",
    ):
        ks_auto.sql(f"SELECT * FROM {fn}(profiles => TABLE(si_p), clicks => TABLE(si_v), key => 'member_id')")


def test_a_processor_of_several_inputs_called_with_one_is_refused_when_planned(ks_auto, two_views):
    """(it failed each key's first call with Python's missing-argument TypeError)"""
    fn = _register(ks_auto, "count_both")
    for sql in (
        f"SELECT * FROM si_p GROUP BY KEY member_id WITH STATE {fn}(ts)",
        f"SELECT * FROM {fn}(TABLE(si_p), key => 'member_id')",
    ):
        with pytest.raises(KeyedSQLError, match=r"process\(self, key, profiles, views\) takes the rows of 2 inputs"):
            ks_auto.sql(sql)


@pytest.mark.spark_feature("UDTF_ANALYZE")
def test_several_inputs_in_plain_spark_sql_name_ks_sql(spark, ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    with pytest.raises(Exception, match=r"named inputs \(profiles, views\) are run by ks\.sql"):
        spark.sql(_call(fn, "si_p", "si_v")).collect()


def test_explain_keyed_shows_each_input(ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    plan = ks_auto.explain(_call(fn, "si_p", "si_v"))
    assert "inputs:    profiles: member_id, ts, region; views: member_id, ts, page" in plan


# ------------------------------------------------- stream-stream join with expiry (timers)
EXPIRY = dt.timedelta(minutes=10)
T0 = dt.datetime(2026, 3, 1, 8, 0)
IMPRESSIONS = "impression_id string, ts timestamp, ad string"
CLICKS = "impression_id string, ts timestamp, pos bigint"


class AdClicks(StatefulFunction):
    """Samza's stream-stream join: a click within 10 minutes of its impression joins it; an
    impression not clicked in time expires by an event-time timer and is reported unmatched."""

    returns = "ad string, outcome string, delay_seconds bigint"
    ad: str
    shown: dt.datetime

    def __init__(self, **kw):
        super().__init__(**kw)
        self.ad = None
        self.shown = None

    def execute(self, e):
        if self.ctx.input == "impressions":
            self.ad, self.shown = e["ad"], e["ts"]
            self.ctx.register_timer(self.shown + EXPIRY)
            return None
        if self.shown is not None and e["ts"] - self.shown <= EXPIRY:
            out = {"ad": self.ad, "outcome": "clicked", "delay_seconds": int((e["ts"] - self.shown).total_seconds())}
            self.ctx.clear_state()
            return out
        return None

    def on_timer(self, key, timestamp):
        out = {"ad": self.ad, "outcome": "expired", "delay_seconds": None}
        self.ctx.clear_state()
        return out


def ad_oracle(impressions, clicks, open_after=None):
    """Output of the join over both inputs: per impression id in time order (an impression
    before a click at one time); an impression neither clicked in time nor later than
    ``open_after`` (still waiting at the final watermark) expires."""
    events = sorted([(r[1], 0, r) for r in impressions] + [(r[1], 1, r) for r in clicks], key=lambda x: x[:2])
    state, out = {}, []
    for ts, side, r in events:
        s = state.get(r[0])
        if side == 0:
            state[r[0]] = (r[2], ts)
        elif s is not None and ts - s[1] <= EXPIRY:
            out.append((r[0], s[0], "clicked", int((ts - s[1]).total_seconds())))
            del state[r[0]]
    for key, (ad, shown) in state.items():
        if open_after is None or shown + EXPIRY <= open_after:
            out.append((key, ad, "expired", None))
    left = {k: v for k, v in state.items() if open_after is not None and v[1] + EXPIRY > open_after}
    return sorted(out, key=repr), left


@st.composite
def ad_inputs(draw):
    """One impression per id (some ids only clicked), clicks at random minutes around it."""
    ids = draw(st.lists(st.sampled_from(["i1", "i2", "i3", "i4"]), min_size=1, max_size=4, unique=True))
    minute = st.integers(0, 30).map(lambda m: T0 + dt.timedelta(minutes=m))
    impressions = [(i, draw(minute), f"ad-{i}") for i in ids if draw(st.booleans()) or i == ids[0]]
    clicks = [(draw(st.sampled_from(ids)), draw(minute), n) for n in range(draw(st.integers(0, 6)))]
    return impressions, clicks


def _ad_call(impressions, clicks, extra=""):
    return (
        f"SELECT * FROM si_ad_clicks(impressions => TABLE({impressions}), clicks => TABLE({clicks}), "
        f"key => 'impression_id', order_by => 'ts', event_time => 'ts', watermark => '0 seconds'{extra})"
    )


def test_ad_click_join_in_a_batch_fires_expiry_at_end_of_input(spark, ks):
    ks.register("si_ad_clicks", AdClicks)

    @seed(20261126)
    @settings(max_examples=EXAMPLES + 2, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=ad_inputs())
    def check(data):
        impressions, clicks = data
        spark.createDataFrame(impressions, IMPRESSIONS).createOrReplaceTempView("si_impressions")
        spark.createDataFrame(clicks, CLICKS).createOrReplaceTempView("si_clicks")
        got = sorted((tuple(r) for r in ks.sql(_ad_call("si_impressions", "si_clicks")).collect()), key=repr)
        assert got == ad_oracle(impressions, clicks)[0]

    check()


def _m(minutes):
    return T0 + dt.timedelta(minutes=minutes)


def min_rule_watermark(runs, start=None):
    """Spark's rule for several watermarked inputs, written out (no delay): an input's watermark
    is the newest event time it has brought; the query's is the minimum over the inputs that
    have brought rows, and never moves back."""
    per, wm = {}, start
    for run in runs:
        for side, rows in enumerate(run):
            if rows:
                per[side] = max([per.get(side, rows[0][1]), *(r[1] for r in rows)])
        if per:
            wm = min(per.values()) if wm is None else max(wm, min(per.values()))
    return wm


# three incremental runs: the watermark (the slower input's newest event time, no delay) fires
# the expiry timers of keys that get no new rows; the third run has new impressions only, so the
# clicks (at 20 minutes) hold the watermark back
AD_RUNS = [
    ([("i1", _m(0), "a1"), ("i2", _m(1), "a2"), ("i3", _m(2), "a3")], [("i1", _m(4), 1)]),
    ([("i4", _m(21), "a4")], [("i2", _m(9), 2), ("i3", _m(20), 3)]),
    ([("zz", _m(120), "az")], []),
]


def test_ad_click_join_incremental_state_changes_and_migration(spark, ks, tmp_path):
    """ks.run three times (timers fired by the watermark between runs), the state read back and
    its change feed, then the checkpoint migrated and continued on the bulk engine."""
    ks.register("si_ad_clicks", AdClicks)
    i_dir, c_dir, cp, out = (str(tmp_path / d) for d in ("impressions", "clicks", "cp", "out"))
    sql = _ad_call(f"parquet.`{i_dir}`", f"parquet.`{c_dir}`")
    summaries = []
    for impressions, clicks in AD_RUNS:
        _write(spark, impressions, IMPRESSIONS, i_dir)
        _write(spark, clicks, CLICKS, c_dir)
        summaries.append(ks.run(sql, checkpoint=cp, output=out))
    assert [s["input_rows"] for s in summaries] == [4, 3, 1]
    assert sum(s["late_rows"] for s in summaries) == 0
    impressions = [r for run in AD_RUNS for r in run[0]]
    clicks = [r for run in AD_RUNS for r in run[1]]
    watermark = min_rule_watermark(AD_RUNS)
    assert watermark == _m(20)  # held back by the clicks: the newest event time of any input is 120
    expected, left = ad_oracle(impressions, clicks, open_after=watermark)
    assert sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr) == expected
    assert {r[2] for r in expected} == {"clicked", "expired"}  # the data exercises both outcomes
    assert "i4" in left  # due at 31 minutes: still waiting for the slower input

    # the state as a table: only the impression still waiting, one row for both inputs
    state = [(r["impression_id"], r["ad"], r["shown"]) for r in ks.read_state(cp).collect()]
    assert state == [(k, ad, shown) for k, (ad, shown) in left.items()]
    # the change feed: each key's last change is its final state (deleted once matched/expired);
    # i1, shown and clicked within the first run, never had state at a batch's end
    last = {}
    for r in sorted(ks.read_state_changes(cp).collect(), key=lambda r: r["batch_id"]):
        if r["variable"] == "ad":
            last[r["impression_id"]] = (r["change"], None if r["new_value"] is None else json.loads(r["new_value"]))
    assert last == {
        **{k: ("delete", None) for k in ("i2", "i3", "i4")},
        **{k: ("upsert", {"ad": ad}) for k, (ad, _) in left.items()},
    }

    dst, out2 = str(tmp_path / "cp2"), str(tmp_path / "out2")
    if ks.default_engine == "tws":  # Spark's state reader cannot read tws timers
        with pytest.raises(MigrationError, match=r"timers registered in this checkpoint \(engine 'tws'\) are not"):
            ks.migrate_state(cp, dst)
        return
    # migrated, then continued on the bulk engine: both inputs resume where they were
    bulk = KeyedSQL(spark, engine="bulk")
    bulk.register("si_ad_clicks", AdClicks)
    info = ks.migrate_state(cp, dst)
    assert info["keys"] == len(left)
    more = ([("i5", _m(125), "a5")], [("zz", _m(123), 4), ("i5", _m(200), 5)])
    _write(spark, more[0], IMPRESSIONS, i_dir)
    _write(spark, more[1], CLICKS, c_dir)
    assert bulk.run(sql, checkpoint=dst, output=out2)["input_rows"] == 3  # only the new files
    after = sorted((tuple(r) for r in spark.read.parquet(out2).collect()), key=repr)
    # the migrated checkpoint keeps the query's watermark (each input's starts anew): now the
    # impressions (125 minutes) are the slower input. zz clicked 3 minutes after its impression,
    # i4 expires, i5's click comes too late and its expiry (135 minutes) is not due yet
    watermark2 = min_rule_watermark([more], start=watermark)
    assert watermark2 == _m(125)
    final, _ = ad_oracle(impressions + more[0], clicks + more[1], open_after=watermark2)
    assert after == sorted(set(final) - set(expected), key=repr)
    assert after == sorted([("zz", "az", "clicked", 180), ("i4", "a4", "expired", None)], key=repr)


class Seen(StatefulFunction):
    """Every row that reaches the function, with the input it came from."""

    returns = "side string, at timestamp"

    def execute(self, e):
        return {"side": self.ctx.input, "at": e["ts"]}


def _late_oracle(runs, delay, policy):
    """Rows the function sees over incremental runs, by Spark's rule written out: a row at or
    before the query's watermark of the run before is late; after a run each input's watermark
    is its newest event time less the delay, and the query's is the ``policy`` (min / max) of
    theirs, never moving back."""
    per, wm, seen = {}, None, []
    for run in runs:
        for side, rows in run.items():
            seen += [(k, side, ts) for k, ts in rows if wm is None or ts > wm]
        for side, rows in run.items():
            if rows:
                per[side] = max([per.get(side, rows[0][1] - delay), *(ts - delay for _, ts in rows)])
        chosen = (min if policy == "min" else max)(per.values())
        wm = chosen if wm is None else max(wm, chosen)
    return sorted(seen)


# the clicks lag the impressions by an hour; the second run's clicks are behind the impressions'
# watermark but not the clicks' own
LAGGING = [
    {"impressions": [("a", _m(60)), ("b", _m(61))], "clicks": [("a", _m(0)), ("b", _m(1))]},
    {"impressions": [("a", _m(62))], "clicks": [("a", _m(20)), ("b", _m(30))]},
    {"impressions": [], "clicks": [("b", _m(55))]},
]


# after LAGGING: the impressions run ahead again; a click 20 minutes behind them is late by max
# (the impressions' watermark) and not by min (the clicks' own, 50 minutes)
LATER = [
    {"impressions": [("c", _m(90))], "clicks": []},
    {"impressions": [], "clicks": [("c", _m(70))]},
]


# (max, every run) and (min, every run): in the slow tier, CI's time budget (min's policy: test_watermarks,
# and test_ad_click_join_incremental_state_changes_and_migration holds tws's min watermark)
@pytest.mark.parametrize(
    "policy, every_run",
    [
        pytest.param("min", True, marks=pytest.mark.slow),
        pytest.param("max", True, marks=pytest.mark.slow),
        ("max", False),
    ],
)
def test_one_watermark_over_inputs_by_sparks_rule(spark, ks, tmp_path, policy, every_run):
    """A lagging input's rows are late only by the watermark Spark's rule chooses over the
    inputs' own (spark.sql.streaming.multipleWatermarkPolicy: min by default, or max). A
    checkpoint keeps the policy of its first run, as Spark's offset log does (``every_run``
    False: the later runs' session has the default, min)."""
    ks.register("si_seen", Seen)
    i_dir, c_dir, cp, out = (str(tmp_path / d) for d in ("impressions", "clicks", "cp", "out"))
    sql = (
        f"SELECT * FROM si_seen(impressions => TABLE(parquet.`{i_dir}`), clicks => TABLE(parquet.`{c_dir}`), "
        "key => 'impression_id', order_by => 'ts', event_time => 'ts', watermark => '5 minutes')"
    )
    schema = "impression_id string, ts timestamp"
    before = spark.conf.get("spark.sql.streaming.multipleWatermarkPolicy", None)
    spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", policy)
    try:
        late = 0
        runs = LAGGING if every_run else LAGGING + LATER
        for i, run in enumerate(runs):
            if i == 1 and not every_run:
                spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
            _write(spark, run["impressions"], schema, i_dir)
            _write(spark, run["clicks"], schema, c_dir)
            late += ks.run(sql, checkpoint=cp, output=out)["late_rows"]
    finally:
        if before is None:
            spark.conf.unset("spark.sql.streaming.multipleWatermarkPolicy")
        else:
            spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", before)
    got = sorted((r["impression_id"], r["side"], r["at"]) for r in spark.read.parquet(out).collect())
    expected = _late_oracle(runs, dt.timedelta(minutes=5), policy)
    assert got == expected
    total = sum(len(rows) for run in runs for rows in run.values())
    assert late == total - len(expected)
    # the data tells the rules apart (max drops lagging clicks, min keeps them), the later runs too
    assert expected != _late_oracle(runs, dt.timedelta(minutes=5), "min" if policy == "max" else "max")
    if every_run:
        assert late == (0 if policy == "min" else 3)


# ------------------------------------------------------ initial_state and ttl as arguments
def test_initial_state_argument_seeds_the_shared_state(spark, ks):
    fn = _register(ks, "enrich_views")
    spark.createDataFrame([("m1", "west"), ("m2", "east")], "member_id string, region string").createOrReplaceTempView(
        "si_seed"
    )
    spark.createDataFrame([("m2", 1, "north")], LEFT).createOrReplaceTempView("si_p1")
    spark.createDataFrame([("m1", 1, "p1"), ("m2", 2, "p2"), ("m3", 2, "p3")], RIGHT).createOrReplaceTempView("si_v1")
    got = ks.sql(
        f"SELECT * FROM {fn}(profiles => TABLE(si_p1), views => TABLE(si_v1), key => 'member_id', order_by => 'ts',\n"
        "                    initial_state => TABLE(SELECT * FROM si_seed))"
    ).collect()
    # m1 keeps its seeded region, m2's profile replaces the seed before its view, m3 has none
    assert sorted(map(tuple, got), key=repr) == sorted(
        [("m1", 1, "west", "p1"), ("m2", 2, "north", "p2"), ("m3", 2, None, "p3")], key=repr
    )


def test_ttl_argument_expires_the_shared_state_between_runs(spark, ks, tmp_path):
    fn = _register(ks, "enrich_views")
    p_dir, v_dir, cp, out = (str(tmp_path / d) for d in ("profiles", "views", "cp", "out"))
    sql = _call(fn, f"parquet.`{p_dir}`", f"parquet.`{v_dir}`").replace(
        "order_by => 'ts'", "order_by => 'ts', ttl => '1 hour'"
    )
    _write(spark, [("m1", 1, "north")], LEFT, p_dir)
    _write(spark, [("m2", 1, "p1")], RIGHT, v_dir)
    ks.run(sql, checkpoint=cp, output=out)
    _write(spark, [("m1", 2, "p2")], RIGHT, v_dir)  # soon after: the profile's region is alive
    ks.run(sql, checkpoint=cp, output=out)
    _write(spark, [("m1", 3, "p3")], RIGHT, v_dir)  # two hours later (processing time): expired
    with clock_moved(spark, hours=2):
        ks.run(sql, checkpoint=cp, output=out)
    got = sorted((tuple(r) for r in spark.read.parquet(out).collect()), key=repr)
    assert got == sorted([("m2", 1, None, "p1"), ("m1", 2, "north", "p2"), ("m1", 3, None, "p3")], key=repr)


def test_initial_state_argument_must_be_a_table(ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    with pytest.raises(KeyedSQLError, match=r"^line 1, column \d+: si_enrich_views: initial_state takes TABLE\("):
        ks_auto.sql(_call(fn, "si_p", "si_v").replace("order_by => 'ts'", "order_by => 'ts', initial_state => 'si_p'"))


def test_table_arguments_may_name_the_statements_ctes(ks_auto, two_views):
    """``TABLE(recent)`` where ``recent`` is a CTE of the statement (one input or several, the call
    at top level or inside a CTE of its own): the inputs' columns are looked up with those CTEs."""
    fn = _register(ks_auto, "enrich_views")
    got = ks_auto.sql(f"WITH v AS (SELECT * FROM si_v) SELECT * FROM {fn}(TABLE(v), key => 'member_id')").collect()
    assert [tuple(r) for r in got] == [("m1", 2, None, "p2")]  # one input: ctx.input is None
    got = ks_auto.sql(
        "WITH p AS (SELECT member_id, ts, upper(region) AS region FROM si_p), v AS (SELECT * FROM si_v)\n"
        f"SELECT * FROM {fn}(profiles => TABLE(p), views => TABLE(v), key => 'member_id', order_by => 'ts')"
    ).collect()
    assert [tuple(r) for r in got] == [("m1", 2, "NORTH", "p2")]
    got = ks_auto.sql(
        "WITH v AS (SELECT * FROM si_v WHERE ts > 0),\n"
        f"     joined AS (SELECT * FROM {fn}(profiles => TABLE(si_p), views => TABLE(v), key => 'member_id'))\n"
        "SELECT member_id, page FROM joined"
    ).collect()
    assert [tuple(r) for r in got] == [("m1", "p2")]
    # a CTE over a keyed call beside the one an argument names: only what the input reads is
    # looked up (Spark was shown the other's expanded GROUP BY KEY: a parse error at 'STATE')
    got = ks_auto.sql(
        f"WITH j AS (SELECT * FROM {fn}(TABLE(si_v), key => 'member_id')), v AS (SELECT * FROM si_v)\n"
        f"SELECT member_id, page FROM {fn}(TABLE(v), key => 'member_id') UNION ALL SELECT member_id, page FROM j"
    ).collect()
    assert sorted(tuple(r) for r in got) == [("m1", "p2")] * 2
    # an argument reading another call's output: said at its line:column, with what to write instead
    with pytest.raises(
        KeyedSQLError, match=r"^line 2, column 45: a table argument .* reads another keyed call's output"
    ):
        ks_auto.sql(
            f"WITH j AS (SELECT * FROM {fn}(TABLE(si_v), key => 'member_id'))\n"
            f"SELECT member_id FROM {fn}(TABLE(j), key => 'member_id')"
        )


class InputInTimer(StatefulFunction):
    """What ``self.ctx.input`` says in ``execute`` and in ``on_timer``."""

    returns = "at string, input string"

    def execute(self, e):
        self.ctx.register_timer(e["ts"] * 1000 + 60_000)
        return {"at": "row", "input": self.ctx.input}

    def on_timer(self, key, timestamp):
        return {"at": "timer", "input": self.ctx.input}


def test_ctx_input_is_none_in_on_timer(ks_auto, two_views):
    """(a key held live from its last row kept that row's input name in on_timer: 'views')"""
    ks_auto.register("si_input_in_timer", InputInTimer)
    got = ks_auto.sql(
        "SELECT at, input FROM si_input_in_timer(profiles => TABLE(si_p), views => TABLE(si_v), "
        "key => 'member_id', order_by => 'ts', event_time => 'ts_time', watermark => '0 seconds')".replace(
            "TABLE(si_p)", "TABLE(SELECT *, timestamp_seconds(ts) AS ts_time FROM si_p)"
        ).replace("TABLE(si_v)", "TABLE(SELECT *, timestamp_seconds(ts) AS ts_time FROM si_v)")
    ).collect()
    # two timers (one per row, a second apart), both fired at the end of input
    assert sorted((tuple(r) for r in got), key=repr) == [("row", "profiles"), ("row", "views")] + [("timer", None)] * 2
    t = KeyedTester(InputInTimer, inputs=["profiles", "views"])
    t.run([{"ts": 1}], key="m1", input="views")
    assert t.set_watermark(10**7) == [{"at": "timer", "input": None}]


def test_a_timestamp_and_a_timestamp_ntz_order_column_go_together_an_interval_and_an_int_do_not(
    ks_auto, spark, two_views
):
    """(timestamp against timestamp_ntz was refused as incompatible; an interval passed for a
    number, its type name starting with 'int')"""
    fn = _register(ks_auto, "count_both")
    spark.sql(
        "SELECT 'm1' AS member_id, TIMESTAMP '2024-01-01 00:00:01' AS ts, 'north' AS region"
    ).createOrReplaceTempView("si_p_ts")
    spark.sql(
        "SELECT 'm1' AS member_id, TIMESTAMP_NTZ '2024-01-01 00:00:02' AS ts, 'p2' AS page"
    ).createOrReplaceTempView("si_v_ntz")
    got = ks_auto.sql(
        f"SELECT * FROM {fn}(profiles => TABLE(si_p_ts), views => TABLE(si_v_ntz), "
        "key => 'member_id', order_by => 'ts')"
    ).collect()
    assert [tuple(r) for r in got] == [("m1", 1, 1)]
    spark.sql("SELECT 'm1' AS member_id, INTERVAL '2' SECOND AS ts, 'p2' AS page").createOrReplaceTempView("si_v_iv")
    with pytest.raises(KeyedSQLError, match=r"column 'ts' is bigint in input 'profiles' and interval"):
        ks_auto.sql(_call(fn, "si_p", "si_v_iv"))


class LatestRegion(KeyedProcessor):
    """Reads a column of the profiles frame whether or not this batch has profile rows."""

    returns = "regions string, pages bigint"

    def process(self, key, profiles, views):
        yield (",".join(profiles["region"].astype(str)), len(views["page"]))


def test_an_input_without_rows_yet_gets_its_columns_in_the_tester(ks_auto, two_views):
    """KeyedTester(inputs={name: columns}) and ks.tester(query) give an input that has had no
    rows an empty frame with its columns, as the engines do (it had none: KeyError 'region')."""
    t = KeyedTester(
        LatestRegion,
        inputs={"profiles": "member_id string, ts bigint, region string", "views": ["member_id", "ts", "page"]},
    )
    assert t.run([{"member_id": "m1", "ts": 2, "page": "p2"}], key="m1", input="views") == [{"regions": "", "pages": 1}]
    ks_auto.register("si_latest_region", LatestRegion)
    t = ks_auto.tester(
        "SELECT * FROM si_latest_region(profiles => TABLE(si_p), views => TABLE(si_v), key => 'member_id')"
    )
    assert t.run([{"member_id": "m1", "ts": 2, "page": "p2"}], key="m1", input="views") == [{"regions": "", "pages": 1}]
    got = ks_auto.sql(
        "SELECT * FROM si_latest_region(profiles => TABLE(si_p), views => TABLE(si_v), key => 'member_id')"
    ).collect()
    assert [tuple(r) for r in got] == [("m1", "north", 1)]

"""Several named inputs into one keyed function (Samza's three joins), against plain-Python
oracles over random interleavings of both inputs (hypothesis): a one-shot batch through
ks.sql, two incremental ks.run over Parquet directories (the second with new files in one input
only: just those are processed), and a stream (ks.start) restarted from its checkpoint; on
every engine. And the errors of the form."""

import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from spark_keyed_sql import KeyedProcessor, KeyedSQLError, StatefulFunction, ValueState

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


@pytest.mark.spark_feature("UDTF_ANALYZE")
def test_several_inputs_in_plain_spark_sql_name_ks_sql(spark, ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    with pytest.raises(Exception, match=r"named inputs \(profiles, views\) are run by ks\.sql"):
        spark.sql(_call(fn, "si_p", "si_v")).collect()


def test_explain_keyed_shows_each_input(ks_auto, two_views):
    fn = _register(ks_auto, "enrich_views")
    plan = ks_auto.explain(_call(fn, "si_p", "si_v"))
    assert "inputs:    profiles: member_id, ts, region; views: member_id, ts, page" in plan

"""Native plans on streams (#47): ``ks.run`` increments run natively on engine bulk, each key
starting from its stored state, and leave the state the Python path leaves, in the same
checkpoint format: increments alternate native / Python / native on one checkpoint and the
output and state equal a plain-Python oracle (the class itself, one instance per key kept
across increments, each increment's rows in order — no code of this project)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import itertools
import json
import math
import os
import random
import shutil
import sys

import pytest

from spark_keyed_sql import StatefulFunction, StateTypeError, UserFunctionError
from spark_keyed_sql.sql.errors import KeyedQueryError
from tests.native import classes as C
from tests.native.test_native import Oracle, canon

_names = itertools.count()
T0 = dt.datetime(2026, 3, 1, 9, 0)
GAP = dt.timedelta(minutes=30)  # (not tests.native.classes': Python workers cannot import its seed module)


class Spends(StatefulFunction):  # ints and a flag kept as JSON (no annotations), a running max
    def __init__(self, **kw):
        super().__init__(**kw)
        self.big = 0
        self.big_total = 0
        self.was_big = False
        self.best = None
        self.best_n = 0

    def execute(self, row):
        amount = row["amount"]
        twice = self.was_big and amount > 100
        if amount > 100:
            self.big += 1
            self.big_total += amount
        self.was_big = amount > 100
        if self.best is None or amount > self.best:
            self.best = amount
            self.best_n = self.big
        return {"big": self.big, "big_total": self.big_total, "twice": twice, "best": self.best, "at": self.best_n}


class GapSessions(StatefulFunction):  # a new session after a 30-minute gap: a typed timestamp kept
    last_ts: dt.datetime

    def __init__(self, **kw):
        super().__init__(**kw)
        self.session = 0
        self.events = 0
        self.last_ts = None

    def execute(self, row):
        ts = row["ts"]
        if self.last_ts is None or ts - self.last_ts > GAP:
            self.session += 1
            self.events = 0
        self.events += 1
        self.last_ts = ts
        return {"session": self.session, "events": self.events, "last_ts": self.last_ts}


class Sessions(StatefulFunction):  # a session count with resets, typed
    session: int
    events: int
    spent: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.session = 0
        self.events = 0
        self.spent = 0.0

    def execute(self, row):
        if row["amount"] > 150:  # a big spend starts a new session
            self.session += 1
            self.events = 0
            self.spent = 0.0
        self.events += 1
        self.spent += row["value"]
        return {"session": self.session, "events": self.events, "spent": self.spent}


class LastSeen(StatefulFunction):  # a float, a string and a time kept as JSON (no annotations)
    def __init__(self, **kw):
        super().__init__(**kw)
        self.gaps = 0
        self.spent = 0.0
        self.note = None
        self.last_ts = None
        self.scaled = 0.0
        self.odd = 0.0

    def execute(self, row):
        if self.last_ts is not None and row["ts"] - self.last_ts > GAP:
            self.gaps += 1
        self.last_ts = row["ts"]
        self.spent += row["value"]
        if row["amount"] > 100:
            self.note = row["note"]
        self.scaled = row["value"] * 1e300  # inf past 1.8e8, -0.0 from -0.0
        self.odd = self.scaled - self.scaled  # NaN from inf
        return {
            "gaps": self.gaps,
            "spent": self.spent,
            "note": self.note,
            "last_ts": self.last_ts,
            "scaled": self.scaled,
            "odd": self.odd,
        }


CASES = [
    (C.Counter, "n bigint, total double", ["value"], ["n", "total"], ["n", "total"]),
    (
        Spends,
        "big bigint, big_total bigint, twice boolean, best bigint, at bigint",
        ["amount"],
        ["big", "big_total", "twice", "best", "at"],
        ["big", "big_total", "was_big", "best", "best_n"],
    ),
    (
        GapSessions,
        "session bigint, events bigint, last_ts timestamp",
        ["ts"],
        ["session", "events", "last_ts"],
        ["session", "events", "last_ts"],
    ),
    (
        Sessions,
        "session bigint, events bigint, spent double",
        ["amount", "value"],
        ["session", "events", "spent"],
        ["session", "events", "spent"],
    ),
    (  # the SAGE seed's per-key dict (NULL key: Python's {"$dict": [[null, ...]]})
        C.UserSessionFunction,
        "session_count bigint, total_value double",
        ["value"],
        ["session_count", "total_value"],
        ["user_sessions"],
    ),
    (
        LastSeen,
        "gaps bigint, spent double, note string, last_ts timestamp, scaled double, odd double",
        ["ts", "value", "amount", "note"],
        ["gaps", "spent", "note", "last_ts", "scaled", "odd"],
        ["gaps", "spent", "note", "last_ts", "scaled", "odd"],
    ),
]
# strings JSON escapes or Spark writes differently from Python (non-ASCII, quotes, controls)
NOTES = ["plain", "é ü", 'quo"te', "back\\slash", "tab\tnew\nline", "\U0001f600", "", None]


def increment(seed, n=60):
    r = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            {
                "user_id": r.choice(["u1", "u2", "u3", "u4", "$u5", None]),  # ($: a JSON dict key Python tags)
                "ts": T0 + dt.timedelta(hours=seed, minutes=i, seconds=r.randrange(50)),
                "value": r.choice([r.uniform(-1, 1), 0.1, 0.2, 0.3, -0.0, r.uniform(0, 1e9), 3e-7, 2.5e16]),
                "amount": r.randrange(-50, 200),
                "note": r.choice(NOTES),
            }
        )
    return out


SCHEMA = "user_id string, ts timestamp, value double, amount bigint, note string"
COLUMNS = ("user_id", "ts", "value", "amount", "note")


SESSION_COLUMNS = ["session", "events", "spent"]


def append_rows(spark, rows, src, files=None):
    """``rows`` appended to the Parquet directory ``src`` (in ``files`` files, if given)."""
    df = spark.createDataFrame([tuple(r.get(c) for c in COLUMNS) for r in rows], SCHEMA)
    (df.coalesce(files) if files else df).write.mode("append").parquet(src)


def assert_sessions_state(ks, cp, oracle):
    """The checkpoint's state of Sessions equals each key's instance in plain Python."""
    state = {r["user_id"]: tuple(r[c] for c in SESSION_COLUMNS) for r in ks.read_state(cp).collect()}
    assert canon([(k, *v) for k, v in state.items()]) == canon(
        [(k, *v) for k, v in oracle.state(SESSION_COLUMNS).items()]
    )


# CI runs four of the six classes: Counter's typed numbers are what Sessions' are (and the
# generated classes below cover them), Sessions runs on streams in the catch-up and ks.start
# tests below; both alternate in the slow tier (CI's time budget)
@pytest.mark.slow_on("Counter", "Sessions")
@pytest.mark.parametrize("case", CASES, ids=[c[0].__name__ for c in CASES])
def test_increments_alternate_native_and_python_on_one_checkpoint(ks_auto, spark, tmp_path, case):
    cls, returns, args, outs, attrs = case
    name = f"nstream_{cls.__name__.lower()}_{next(_names)}"
    ks_auto.register(name, cls, returns=returns)
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, {', '.join(outs)} FROM parquet.`{src}` GROUP BY KEY user_id "
        f"WITH STATE {name}({', '.join(args)}) ORDER BY ts OPTIONS (engine = 'bulk', native = {{native}})"
    )
    oracle = Oracle(cls, args)
    expected = []
    for i, native in enumerate(["true", "false", "true"]):
        rows = increment(i)
        append_rows(spark, rows, src)
        expected += oracle.increment(rows)
        summary = ks_auto.run(q.format(native=native), checkpoint=cp, output=out)
        assert summary["input_rows"] == len(rows)
        assert [m["native"] for m in summary["metrics"]] == [native == "true"]  # the path asked for ran
        got = spark.read.parquet(out).select("user_id", "ts", *outs).collect()
        assert canon(got) == canon(expected), f"after increment {i} ({'native' if native == 'true' else 'Python'})"
        # read_state shows an unannotated attribute as its JSON text
        stored = ks_auto.read_state(cp).collect()
        state = {r["user_id"]: tuple(from_json(r[a]) if isinstance(r[a], str) else r[a] for a in attrs) for r in stored}
        assert canon([(k, *v) for k, v in state.items()]) == canon([(k, *v) for k, v in oracle.state(attrs).items()])
        if cls is LastSeen:  # a datetime as JSON: Python's text, byte for byte, whichever path wrote it
            times = {r["user_id"]: r["last_ts"] for r in stored}
            assert times == {k: f'{{"$datetime":"{i.last_ts.isoformat()}"}}' for k, i in oracle.keys.items()}


def test_a_float_running_max_from_none_across_increments_keeps_what_python_keeps(ks_auto, spark, tmp_path):
    """RunningMaxOfFloats (``if self.max_v is None or v > self.max_v``) on increments that store
    each start a plan must read: None (no number yet), a NaN taken first (it stays), a number
    (a NaN after it is never taken); native, native, then Python on one checkpoint."""
    name = f"nstream_fmax_{next(_names)}"
    outs = ["max_v", "max_at", "seen"]
    ks_auto.register(name, C.RunningMaxOfFloats, returns="max_v double, max_at timestamp, seen bigint")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, {', '.join(outs)} FROM parquet.`{src}` GROUP BY KEY user_id "
        f"WITH STATE {name}(value, ts) ORDER BY ts OPTIONS (engine = 'bulk', native = {{native}})"
    )
    nan = math.nan
    values = [  # per increment, per key: the values in time order
        {"a": [None, nan, 1.0], "b": [None], "c": [2.0, nan], None: [-1.0]},
        {"a": [5.0], "b": [None, nan, 3.0], "c": [nan, 1.0, 4.0], "d": [None]},
        {"a": [None, 9.0], "b": [8.0], "c": [3.0, nan], "d": [-0.0, nan], None: [nan, -2.0]},
    ]
    oracle, expected, n = Oracle(C.RunningMaxOfFloats, ["value", "ts"]), [], 0
    for i, (increment_values, native) in enumerate(zip(values, ["true", "true", "false"])):
        rows = []
        for k, vs in increment_values.items():
            for v in vs:
                rows.append({"user_id": k, "ts": T0 + dt.timedelta(minutes=n), "value": v, "amount": 0, "note": "x"})
                n += 1
        append_rows(spark, rows, src)
        expected += oracle.increment(rows)
        summary = ks_auto.run(q.format(native=native), checkpoint=cp, output=out)
        assert [m["native"] for m in summary["metrics"]] == [native == "true"]
        got = spark.read.parquet(out).select("user_id", "ts", *outs).collect()
        assert canon(got) == canon(expected), f"after increment {i}"
        stored = ks_auto.read_state(cp).collect()
        state = {r["user_id"]: tuple(from_json(r[a]) for a in outs) for r in stored}
        assert canon([(k, *v) for k, v in state.items()]) == canon([(k, *v) for k, v in oracle.state(outs).items()])


def from_json(text):
    """A stored JSON value as Python holds it: tagged datetimes, non-finite floats and dicts with
    keys other than strings (``{"$datetime": iso}``, ``{"$float": "nan"}``, ``{"$dict": [[k,
    v]]}``) decoded here, in the test."""

    def decode(v):
        if isinstance(v, dict) and list(v) == ["$datetime"]:
            return dt.datetime.fromisoformat(v["$datetime"])
        if isinstance(v, dict) and list(v) == ["$float"]:
            return float(v["$float"])
        if isinstance(v, dict) and list(v) == ["$dict"]:
            return {decode(k): decode(x) for k, x in v["$dict"]}
        if isinstance(v, dict):
            return {k: decode(x) for k, x in v.items()}
        return v

    return decode(json.loads(text))


def test_explain_says_a_stream_step_runs_natively_or_why_not(ks_auto, spark, tmp_path):
    src = str(tmp_path / "in")
    spark.createDataFrame([("u1", T0, 1.0, 5, "n")], SCHEMA).write.parquet(src)
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("nstream_src")
    ks_auto.register("nstream_counter_x", C.Counter, returns="n bigint, total double")
    ks_auto.register("nstream_sessionizer_x", C.Sessionizer, returns="session bigint, events bigint")
    base = "SELECT user_id, {o} FROM nstream_src GROUP BY KEY user_id WITH STATE {f} ORDER BY ts OPTIONS (engine = {e})"
    text = ks_auto.explain(base.format(o="n, total", f="nstream_counter_x(value)", e="'bulk'"))
    assert "native:    yes" in text and "when: a micro-batch of at least half the stored state's bytes" in text, text
    text = ks_auto.explain(base.format(o="n, total", f="nstream_counter_x(value)", e="'bulk', native = true"))
    assert "native:    yes" in text and "when: every micro-batch (native = true)" in text, text
    with pytest.raises(KeyedQueryError, match=r"option native of .*nstream_counter_x.* is 'maybe'; use true, false"):
        ks_auto.explain(base.format(o="n, total", f="nstream_counter_x(value)", e="'bulk', native = 'maybe'"))
    # its last_ts unannotated: a datetime kept as JSON, planned
    text = ks_auto.explain(base.format(o="session, events", f="nstream_sessionizer_x(ts)", e="'bulk'"))
    assert "native:    yes" in text, text
    ks_auto.register("nstream_sage_x", C.UserSessionFunction, returns="session_count bigint, total_value double")
    text = ks_auto.explain(base.format(o="session_count", f="nstream_sage_x(value)", e="'bulk'"))
    assert "native:    yes" in text, text  # the SAGE seed's per-key dict
    text = ks_auto.explain(base.format(o="n, total", f="nstream_counter_x(value)", e="'tws'"))
    assert "native:    no, the Python path: a stream on this engine" in text, text
    # engine auto: the engine ks.start / ks.run would take (bulk), not the one ks.sql's streaming
    # DataFrame needs
    text = ks_auto.explain(base.format(o="n, total", f="nstream_counter_x(value)", e="'auto'"))
    assert "on engine 'bulk'" in text and "native:    yes" in text, text


@pytest.mark.parametrize("key_type", ["bigint", "boolean"])
def test_a_per_key_dict_keyed_by_a_number_or_a_flag_alternates_native_and_python(ks_auto, spark, tmp_path, key_type):
    """The SAGE class keyed by a column Python's JSON keeps in ``{"$dict": [[k, ...]]}``."""
    name = f"nstream_sage_{key_type}"
    ks_auto.register(name, C.UserSessionFunction, returns="session_count bigint, total_value double")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT k, ts, session_count, total_value FROM parquet.`{src}` GROUP BY KEY k "
        f"WITH STATE {name}(value) ORDER BY ts OPTIONS (engine = 'bulk', native = {{native}})"
    )
    oracle, expected = Oracle(C.UserSessionFunction, ["value"], key="k"), []
    keys = [7, -2, 10**15, None] if key_type == "bigint" else [True, False, None]
    for i, native in enumerate(["true", "false", "true"]):
        r = random.Random(i)
        rows = [
            {"k": r.choice(keys), "ts": T0 + dt.timedelta(hours=i, minutes=j), "value": r.uniform(-5, 5)}
            for j in range(30)
        ]
        schema = f"k {key_type}, ts timestamp, value double"
        spark.createDataFrame([(x["k"], x["ts"], x["value"]) for x in rows], schema).write.mode("append").parquet(src)
        expected += oracle.increment(rows)
        summary = ks_auto.run(q.format(native=native), checkpoint=cp, output=out)
        assert [m["native"] for m in summary["metrics"]] == [native == "true"]
        got = spark.read.parquet(out).select("k", "ts", "session_count", "total_value").collect()
        assert canon(got) == canon(expected), f"after increment {i}"
        state = {r["k"]: from_json(r["user_sessions"]) for r in ks_auto.read_state(cp).collect()}
        assert canon(state.items()) == canon((k, i.user_sessions) for k, i in oracle.keys.items())


def test_a_started_stream_runs_natively_then_on_python_from_the_same_checkpoint(ks_auto, spark, tmp_path):
    ks_auto.register("nstream_started", Sessions, returns="session bigint, events bigint, spent double")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, session, events, spent FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE nstream_started(amount, value) ORDER BY ts OPTIONS (native = {native})"
    )
    oracle, expected = Oracle(Sessions, ["amount", "value"]), []
    for native, seeds in (("true", (10, 11)), ("false", (12,))):
        query = None
        for seed in seeds:
            rows = increment(seed, 40)
            # one file: the query runs while it is written, and an increment's two files can land
            # in two batches, its later rows first (the oracle takes an increment as one batch)
            append_rows(spark, rows, src, files=1)
            expected += oracle.increment(rows)
            if query is None:
                query = ks_auto.start(q.format(native=native), checkpoint=cp, sink=out)
            query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        got = spark.read.parquet(out).select("user_id", "ts", "session", "events", "spent").collect()
        assert canon(got) == canon(expected), f"after the {'native' if native == 'true' else 'Python'} run"
    assert_sessions_state(ks_auto, cp, oracle)


# ---------------------------------------------------------------- generated classes, on streams
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.native.test_native import GEN_RETURNS, programs  # noqa: E402


def _for_streams(source: str, annotate: bool) -> str:
    """A generated class with its float and its remembered time annotated (typed state columns),
    or not (kept as JSON)."""
    if not annotate:
        return source
    return source.replace(
        "from spark_keyed_sql import StatefulFunction\n",
        "import datetime\n\nfrom spark_keyed_sql import StatefulFunction\n",
    ).replace(
        "class Gen(StatefulFunction):\n", "class Gen(StatefulFunction):\n    c: float\n    at: datetime.datetime\n\n"
    )


# make fuzz: the examples in shards, one per pytest-xdist worker (each shard draws its own)
_SHARDS = max(1, int(os.environ.get("KS_NATIVE_STREAM_SHARDS", "1")))


@pytest.mark.parametrize("shard", range(_SHARDS))
@settings(
    max_examples=-(-int(os.environ.get("KS_NATIVE_STREAM_EXAMPLES", "100")) // _SHARDS),  # (hypothesis' default)
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    source=programs(),
    data=st.lists(
        st.tuples(
            st.sampled_from(["p", "q", None]),
            st.integers(-100, 100),
            st.one_of(st.floats(-1e6, 1e6), st.sampled_from([-0.0, 0.0, math.nan])),
            st.integers(-120, 120),
        ),
        min_size=3,
        max_size=24,
    ),
    annotate=st.booleans(),
    native_first=st.booleans(),
)
def test_generated_classes_on_streams_agree_with_plain_python(
    ks_auto, spark, tmp_path_factory, shard, source, data, annotate, native_first
):
    """Two ks.run increments on one checkpoint, one native and one on the Python path, in the
    order drawn (native state read by Python, or Python's by the plan), against the class run
    in plain Python with its instances kept across increments: outputs, state, and what Python
    raises. (Three increments, native / Python / native, run on the suite's own classes above:
    the generated examples take two, a third less time each, for CI's budget.)"""
    from spark_keyed_sql.engines.native import NativePlan
    from spark_keyed_sql.sql import statement

    source = _for_streams(source, annotate)
    work = tmp_path_factory.mktemp("gen_stream")
    path = work / f"nstream_gen_{next(_names)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    name = "nstream_gen"  # one name, replaced by each example (test_native.py says why)
    ks_auto.register(name, module.Gen, returns=GEN_RETURNS)
    src, cp, out = (str(work / d) for d in ("in", "cp", "out"))
    rows = [
        {"user_id": k, "x": x, "y": y, "z": z, "ts": T0 + dt.timedelta(seconds=i)}
        for i, (k, x, y, z) in enumerate(data)
    ]
    schema = "user_id string, x bigint, y double, z int, ts timestamp"
    cols = ("user_id", "x", "y", "z", "ts")
    halves = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    spark.createDataFrame([tuple(r[c] for c in cols) for r in halves[0]], schema).write.parquet(src)
    q = (
        "SELECT user_id, ts, a, b, c, m, f, at, o FROM parquet.`{src}` GROUP BY KEY user_id "
        f"WITH STATE {name}(x, y, z, ts) ORDER BY ts OPTIONS (engine = 'bulk', native = {{native}})"
    )
    made = ks_auto._plan(q.format(src=src, native="true"), statement.RunMode.STREAM, cp + "_probe")[0]
    statement.release_views(spark, made)  # (a plan made here leaves its views to the caller)
    planned = made.steps[0].native
    hypothesis.note(source)
    hypothesis.event("native" if isinstance(planned, NativePlan) else f"declined: {str(planned).split(': ')[-1]}")
    if not isinstance(planned, NativePlan):
        _log_example("declined")
        return
    oracle, expected, raised = Oracle(module.Gen, ["x", "y", "z", "ts"]), [], False
    for i, (part, native) in enumerate(zip(halves, ["true", "false"] if native_first else ["false", "true"])):
        if i:
            spark.createDataFrame([tuple(r[c] for c in cols) for r in part], schema).write.mode("append").parquet(src)
        try:
            expected += oracle.increment(part)
        except Exception as exc:  # noqa: BLE001 - what Python raises, the run raises
            with pytest.raises(UserFunctionError) as failed:
                ks_auto.run(q.format(src=src, native=native), checkpoint=cp, output=out)
            assert f"{type(exc).__name__}: {exc}" in str(failed.value)
            raised = True
            break
        ks_auto.run(q.format(src=src, native=native), checkpoint=cp, output=out)
    # each run appends its batch's rows to the output (a failed one none): all of them, once
    got = (
        spark.read.parquet(out).select("user_id", "ts", "a", "b", "c", "m", "f", "at", "o").collect()
        if os.path.isdir(out) and any(f.endswith(".parquet") for f in os.listdir(out))
        else []
    )
    assert canon(got) == canon(expected)
    if raised:
        _log_example("agreed: both raised")
        return
    attrs = ["a", "b", "c", "m", "f", "at"]
    state = {
        r["user_id"]: tuple(from_json(r[a]) if isinstance(r[a], str) else r[a] for a in attrs)
        for r in ks_auto.read_state(cp).collect()
    }
    assert canon([(k, *v) for k, v in state.items()]) == canon([(k, *v) for k, v in oracle.state(attrs).items()])
    _log_example("agreed: output and state")


def _log_example(outcome: str) -> None:
    """make fuzz (KS_FUZZ_LOG): a line per example that ended, so a long run stopped before its
    end still says how many examples passed every check (hypothesis reports only at the end)."""
    path = os.environ.get("KS_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{outcome}\n")


class Sum64(StatefulFunction):  # a typed BIGINT attribute given a sum past 64 bits
    total: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0

    def execute(self, row):
        self.total += row["amount"]
        return {"total": self.total}


def test_a_sum_past_64_bits_into_a_typed_attribute_fails_as_storing_it_does_in_python(ks_auto, spark, tmp_path):
    ks_auto.register("nstream_sum64", Sum64, returns="total double")
    src = str(tmp_path / "in")
    big = 2**62 + 7
    spark.createDataFrame([("k", T0 + dt.timedelta(seconds=i), 0.0, big, "n") for i in range(3)], SCHEMA).write.parquet(
        src
    )
    q = (
        f"SELECT user_id, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE nstream_sum64(amount) "
        "ORDER BY ts OPTIONS (engine = 'bulk', native = {native})"
    )
    spark.readStream.schema(SCHEMA).parquet(src).createOrReplaceTempView("nstream_sum64_src")
    text = ks_auto.explain(q.format(native="true").replace(f"parquet.`{src}`", "nstream_sum64_src"))
    assert "native:    yes" in text, text
    for native in ("true", "false"):
        with pytest.raises(StateTypeError) as raised:
            ks_auto.run(q.format(native=native), checkpoint=str(tmp_path / f"cp-{native}"), output=str(tmp_path / "o"))
        assert f"attribute Sum64.total: {3 * big} does not fit BIGINT" in str(raised.value), (native, raised.value)


def test_a_row_python_refuses_fails_ks_run_with_the_python_paths_error_and_the_users_frame(ks_auto, spark, tmp_path):
    """A NULL added to a float in a native ``ks.run`` step: UserFunctionError (not Spark's
    exception) naming function, key and row, ending with the user's own frame, as the Python
    path's; nothing committed, so the same run on the Python path meets the same row."""
    ks_auto.register("nstream_null_counter", C.Counter, returns="n bigint, total double")
    src = str(tmp_path / "in")
    rows = [("a", T0, 1.0, 1, "x"), ("b", T0, 2.0, 1, "x"), ("b", T0 + dt.timedelta(1), None, 1, "x")]
    spark.createDataFrame(rows, SCHEMA).write.parquet(src)
    q = (
        f"SELECT user_id, n, total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE "
        "nstream_null_counter(value) ORDER BY ts OPTIONS (engine = 'bulk', native = {native})"
    )
    with pytest.raises(TypeError) as py:  # the oracle: the class itself on key b's rows
        Oracle(C.Counter, ["value"]).increment([dict(zip(("user_id", "ts", "value"), r)) for r in rows])
    lines, start = inspect.getsourcelines(C.Counter)
    line = start + next(i for i, text in enumerate(lines) if 'self.total += row["value"]' in text)
    frame = f'{inspect.getsourcefile(C.Counter)}", line {line}, in execute\n    self.total += row["value"]'
    cp = str(tmp_path / "cp")
    for native, marker in (("true", " (native plan)"), ("false", "")):
        with pytest.raises(UserFunctionError) as raised:
            ks_auto.run(q.format(native=native), checkpoint=cp, output=str(tmp_path / "out"))
        err = raised.value
        first = str(err).splitlines()[0]
        assert (
            first
            == f"function 'nstream_null_counter' failed for key 'b' on row { ({'value': None})!r}{marker}: "
            + (f"TypeError: {py.value}")
        ), first
        assert err.key == "b" and frame in err.frames and "SQLSTATE" not in str(err), str(err)


class Area(StatefulFunction):  # a JSON int of 19 digits the plan holds in BIGINT (31 + 31 bits)
    def __init__(self, **kw):
        super().__init__(**kw)
        self.last = 0
        self.best = None
        self.n = 0

    def execute(self, row):
        self.n += 1
        self.last = row["w"] * row["h"]
        if self.best is None or self.last > self.best:
            self.best = self.last
        return {"last": self.last, "best": self.best, "n": self.n}


def test_stored_values_a_plan_must_read_back(ks_auto, spark, tmp_path):
    """19-digit JSON ints; a stored None where the class allows one (left by UPDATE keyed_state)
    read as None, as Python does; where the plan assumes none, a clear refusal naming key and
    attribute (Python raises a TypeError there)."""
    ks_auto.register("nstream_area", Area, returns="last bigint, best bigint, n bigint")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, last, best, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE nstream_area(w, h) "
        "ORDER BY ts OPTIONS (engine = 'bulk', native = true)"
    )
    schema = "user_id string, ts timestamp, w int, h int"
    big = 1_500_000_000
    day = dt.timedelta(1)
    batches = [[("k", T0, big, big), ("j", T0, 3, 4)], [("k", T0 + day, big, big - 1), ("j", T0 + day, 1, 1)]]
    oracle = Oracle(Area, ["w", "h"])
    for rows in batches:
        spark.createDataFrame(rows, schema).write.mode("append").parquet(src)
        expected = oracle.increment([dict(zip(("user_id", "ts", "w", "h"), r)) for r in rows])
        ks_auto.run(q, checkpoint=cp, output=out)
    got = spark.read.parquet(out).where(f"ts > '{T0}'").select("user_id", "ts", "last", "best", "n").collect()
    assert canon(got) == canon(expected)  # the second batch read k's 19-digit value back
    # best may be None (Area starts it so): a stored None continues as in Python
    ks_auto.update_state(cp, set={"best": "'null'"}, where="user_id = 'j'")
    oracle.keys["j"].best = None
    rows = [("j", T0 + dt.timedelta(2), 2, 2)]
    spark.createDataFrame(rows, schema).write.mode("append").parquet(src)
    expected = oracle.increment([dict(zip(("user_id", "ts", "w", "h"), r)) for r in rows])
    ks_auto.run(q, checkpoint=cp, output=out)
    got = spark.read.parquet(out).where(f"ts = '{T0 + dt.timedelta(2)}'").select("user_id", "ts", "last", "best", "n")
    assert canon(got.collect()) == canon(expected)
    # a float where the plan reads an int: native = true refuses it (nothing committed), and
    # native = 'auto' runs that batch on the Python path, which compares 4 > 2.5 as Python does
    ks_auto.update_state(cp, set={"best": "'2.5'"}, where="user_id = 'j'")
    oracle.keys["j"].best = 2.5
    at = T0 + dt.timedelta(hours=60)
    rows = [("j", at, 2, 2)]
    spark.createDataFrame(rows, schema).write.mode("append").parquet(src)
    with pytest.raises(StateTypeError, match=r"the stored state of key 'j' holds 2.5 in attribute 'best'"):
        ks_auto.run(q, checkpoint=cp, output=out)
    expected = oracle.increment([dict(zip(("user_id", "ts", "w", "h"), r)) for r in rows])
    # (a copy: a checkpoint this application has not run, whose first small batch tries native)
    shutil.copytree(cp, cp + "-copy")
    shutil.copytree(out, out + "-copy")
    cp, out = cp + "-copy", out + "-copy"
    why: list = []
    summary = ks_auto.run(
        q.replace("native = true", "native = 'auto'"), checkpoint=cp, output=out, progress=lambda d: why.append(d)
    )
    assert [m["native"] for m in summary["metrics"]] == [False]
    assert "the native plan refused a stored value" in why[-1]["native_choice"], why
    got = spark.read.parquet(out).where(f"ts = '{at}'").select("user_id", "ts", "last", "best", "n")
    assert canon(got.collect()) == canon(expected)
    assert {r["user_id"]: json.loads(r["best"]) for r in ks_auto.read_state(cp).collect()} == {
        k: i.best for k, i in oracle.keys.items()
    }
    # n is never None in the class: a stored None is refused, not computed with (Python raises
    # a TypeError adding 1 to it; with native = 'auto' the Python path raises it)
    ks_auto.update_state(cp, set={"n": "'null'"}, where="user_id = 'k'")
    rows = [("k", T0 + dt.timedelta(3), 1, 1)]
    spark.createDataFrame(rows, schema).write.mode("append").parquet(src)
    with pytest.raises(StateTypeError) as raised:
        ks_auto.run(q, checkpoint=cp, output=out)
    text = str(raised.value)
    assert "the stored state of key 'k' holds null in attribute 'n'" in text, text
    assert "OPTIONS (native = false)" in text
    oracle.keys["k"].n = None
    with pytest.raises(TypeError) as py:
        oracle.increment([dict(zip(("user_id", "ts", "w", "h"), r)) for r in rows])
    with pytest.raises(UserFunctionError) as raised:
        ks_auto.run(q.replace("native = true", "native = 'auto'"), checkpoint=cp, output=out)
    assert f"TypeError: {py.value}" in str(raised.value) and "(native plan)" not in str(raised.value)


def test_native_auto_chooses_per_batch_and_every_path_leaves_the_same_state(ks_auto, spark, tmp_path):
    """``native = 'auto'``: a first batch of many keys runs natively; tiny batches over that state
    run natively while this application's local stores are cold, then on the Python path (its
    stores loaded once, then warm); a batch large beside the state runs natively again. Output
    and state after each ``ks.run`` equal the class run in plain Python."""
    from spark_keyed_sql.engines.bulk.native_choice import SMALL_IN_A_ROW

    ks_auto.register("nstream_auto", Sessions, returns="session bigint, events bigint, spent double")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, session, events, spent FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE nstream_auto(amount, value) ORDER BY ts OPTIONS (native = 'auto')"
    )
    r = random.Random(7)

    def batch(i: int, keys: int) -> list[dict]:
        users = [f"user-{k:05d}" for k in r.sample(range(3_000), keys)]
        return [
            {
                "user_id": u,
                "ts": T0 + dt.timedelta(hours=i, seconds=j),
                "value": r.uniform(-5, 5),
                "amount": r.randrange(0, 200),
            }
            for j, u in enumerate(users)
        ]

    oracle, expected, paths = Oracle(Sessions, ["amount", "value"]), [], []
    sizes = [3_000] + [3] * (SMALL_IN_A_ROW + 2) + [3_000, 3]
    for i, keys in enumerate(sizes):
        rows = batch(i, keys)
        append_rows(spark, rows, src, files=1)
        expected += oracle.increment(rows)
        summary = ks_auto.run(q, checkpoint=cp, output=out)
        assert summary["input_rows"] == keys
        paths += [m["native"] for m in summary["metrics"]]
        got = spark.read.parquet(out).select("user_id", "ts", "session", "events", "spent").collect()
        assert canon(got) == canon(expected), f"after batch {i} (native: {paths})"
    assert_sessions_state(ks_auto, cp, oracle)
    # the first batch, SMALL_IN_A_ROW cold small ones, then the Python step; the large one native
    assert paths[: SMALL_IN_A_ROW + 4] == [True] * (SMALL_IN_A_ROW + 1) + [False, False, True], paths


@pytest.mark.parametrize(
    "paths, caught_up",
    [
        # the stores hold an older version after two native steps: the deltas after it are read
        (["false", "false", "true", "true", "false", "false"], 4),
        # the first batch wrote its empty stores directly: after a native one they hold nothing
        # committed and catch up from every delta (no base yet), not fed in full
        (["false", "true", "false"], 2),
    ],
    ids=["after-two-native", "direct-store"],
)
def test_python_steps_after_native_ones_catch_up_from_the_deltas_their_stores_lack(
    ks_auto, spark, tmp_path, paths, caught_up
):
    """Python steps after native ones on one checkpoint: their stores catch up from the deltas
    after the version they hold; output and state equal the class run in plain Python."""
    from spark_keyed_sql.state.snapshots import SnapshotStore

    name = f"nstream_catch_{next(_names)}"
    ks_auto.register(name, Sessions, returns="session bigint, events bigint, spent double")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    q = (
        f"SELECT user_id, ts, session, events, spent FROM parquet.`{src}` GROUP BY KEY user_id "
        f"WITH STATE {name}(amount, value) ORDER BY ts OPTIONS (native = {{native}})"
    )
    oracle, expected = Oracle(Sessions, ["amount", "value"]), []
    for i, native in enumerate(paths):
        rows = increment(20 + i, 50)
        # a key of its own in each batch before the catch-up (its state only in that batch's
        # delta), all of them again from the catch-up on: a delta it missed would show
        for k in range(caught_up) if i >= caught_up else [i]:
            rows += [dict(rows[j], user_id=f"n{k}", ts=rows[j]["ts"] + dt.timedelta(seconds=1)) for j in range(3)]
        append_rows(spark, rows, src)
        expected += oracle.increment(rows)
        ks_auto.run(q.format(native=native), checkpoint=cp, output=out)
        got = spark.read.parquet(out).select("user_id", "ts", *SESSION_COLUMNS).collect()
        assert canon(got) == canon(expected), f"after increment {i} (native = {native})"
    fed = [c.metrics.fed_partitions for c in SnapshotStore(cp).commits()]
    assert fed[caught_up].get("catch-up") and not fed[caught_up].get("full"), fed
    assert all(f == {} for f in fed[caught_up + 1 :]), fed  # and then held the state
    assert_sessions_state(ks_auto, cp, oracle)

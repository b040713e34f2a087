"""Differential test: generated input (several keys including NULL, several batches, duplicate
timestamps, late rows) through a zoo of classes on every path — KeyedTester, a one-shot ks.sql
on each engine, the table function, ks.run increments and ks.start micro-batches on each engine.
Every path must give the same rows per batch and the same final state; the simple classes are
also checked against a plain-Python oracle written here. A class with two named inputs
(``two_sides``) goes through the table-function form on the engines, KeyedTester fed each run of
one input's rows with ``input=``.

CI (make test) runs one fixed seed over a small selection of (class, path) pairs; `make fuzz`
sets KS_DIFF_EXAMPLES for more seeds and KS_DIFF_ALL=1 for every pair. Pairs a path cannot run
are marked with the reason (Ibis-style, as the `notyet` marker of the engine suite).
"""

import datetime as dt
import itertools
import os
import random
import time
from dataclasses import dataclass, field

import pytest
from sage_patterns import CounterFunction, FeatureComputer, FlexibleFunction, UserSessionFunction, WindowAggregator
from zoo import EventSessions, Ticker, TtlTyped, TwoSides, Typed, Whole

from spark_keyed_sql import KeyedTester
from spark_keyed_sql.engines import ENGINES
from spark_keyed_sql.state.encoding import loads

EXAMPLES = int(os.environ.get("KS_DIFF_EXAMPLES", "1"))
ALL = os.environ.get("KS_DIFF_ALL") == "1"
SEEDS = [20261117 + i for i in range(EXAMPLES)]
T0 = dt.datetime(2026, 3, 1, 8, 0)
KEYS = ["a", "b", "c", None]
WATERMARK = dt.timedelta(minutes=5)
SCHEMA = "k string, n bigint, value double, ts timestamp"


# ---------------------------------------------------------------- the zoo: name -> how to run it
@dataclass
class Case:
    cls: type
    returns: str
    args: str  # the WITH STATE call's arguments
    kwargs: dict = field(default_factory=dict)
    event_time: bool = False
    processing_timers: bool = False
    keyed: bool = True
    oracle: object = None  # rows of one key in order -> expected output tuples (plain Python)
    # returns a map keyed by the key: Spark maps have no NULL keys, so the NULL key's rows get
    # key 'd' here and test_null_map_key_fails_alike checks the NULL key's error on every path
    map_by_key: bool = False
    # named inputs (the table-function form): a row goes to evens or odds by its n
    inputs: tuple[str, ...] = ()


def oracle_sessions(rows):
    out, count, total = [], 0, 0
    for r in rows:
        count, total = count + 1, total + r["value"]
        out.append((count, total))
    return out


def oracle_counter(rows, key):
    return [({key: i},) for i in range(1, len(rows) + 1)]


def oracle_whole(rows):
    out, events, seen = [], [], {}
    for r in rows:
        events = ([*events, r["n"]])[-3:]
        seen.setdefault(r["n"] % 2, set()).add(r["n"] % 5)
        out.append((events, sorted(seen.get(1, set()))))
    return out


CASES = {
    "sage_sessions": Case(
        UserSessionFunction,
        "session_count bigint, total_value double",
        "value",
        oracle=lambda rows, k: oracle_sessions(rows),
    ),
    # a map's key cannot be NULL in Spark: the NULL-key group returns {None: n}
    "sage_counter": Case(
        CounterFunction, "counts map<string, bigint>", "value", oracle=oracle_counter, map_by_key=True
    ),
    "sage_window": Case(
        WindowAggregator, "key string, window bigint, count bigint", "n, value", kwargs={"window_size": 10**12}
    ),
    "sage_features": Case(
        FeatureComputer,
        "features map<string, struct<mean double, count bigint, min double, max double>>",
        "value",
        map_by_key=True,
    ),
    "sage_flexible": Case(FlexibleFunction, "key string, key_count bigint, global_count bigint", "value"),
    "sage_flexible_unkeyed": Case(
        FlexibleFunction, "key string, key_count bigint, global_count bigint", "value", keyed=False
    ),
    "whole": Case(
        Whole, "last_ns array<bigint>, odd array<bigint>", "n, value", oracle=lambda rows, k: oracle_whole(rows)
    ),
    "typed": Case(Typed, "total double, recent_n array<bigint>, buckets map<bigint, bigint>", "n, value"),
    "ttl_typed": Case(TtlTyped, "total double, recent_n array<bigint>, buckets map<bigint, bigint>", "n, value"),
    "event_sessions": Case(
        EventSessions, "who string, kind string, start timestamp, count bigint", "ts", event_time=True
    ),
    "ticker": Case(Ticker, "who string, kind string, seen bigint", "n", processing_timers=True),
    "two_sides": Case(
        TwoSides,
        "who string, side string, evens bigint, odds bigint, total double",
        "k, n, value, ts",
        event_time=True,
        inputs=("evens", "odds"),
    ),
}
# what CI runs (make fuzz: KS_DIFF_ALL=1 runs every case on every path)
CI_CASES = {"sage_sessions", "typed", "event_sessions", "whole"}
# the engine x path matrix, fed from the engine registry: KeyedTester and the table function
# once, a one-shot ks.sql (sql_<engine>), ks.run increments (run_<engine>) and ks.start
# micro-batches (start_<engine>) on every engine
ENGINE_PATHS = ("sql", "run", "start")
PATHS = ["tester", "table_function"] + [f"{kind}_{e}" for kind in ENGINE_PATHS for e in sorted(ENGINES)]


def split_path(path: str) -> tuple[str, str | None]:
    """'run_bulk' -> ('run', 'bulk'); 'tester' -> ('tester', None)."""
    kind, _, engine = path.partition("_")
    return (kind, engine) if kind in ENGINE_PATHS else (path, None)


def unsupported(path: str) -> str | None:
    """Why an engine cannot run a path at all (from its declared capabilities)."""
    kind, engine = split_path(path)
    if engine is None:
        return None
    caps = ENGINES[engine].capabilities
    if kind in ("run", "start") and not (caps.streams_as_dataframe or caps.streams_per_batch):
        return f"engine '{engine}' runs no streams"
    return None


def not_applicable(name: str, path: str) -> str | None:
    case = CASES[name]
    if path == "table_function" and not case.keyed:
        return "the table function is keyed (key => ...); unkeyed use is WITH STATE without GROUP BY KEY"
    if path == "table_function" and case.inputs:
        return "plain spark.sql's UDTFs take one table (tests/sql/test_several_inputs.py checks its refusal)"
    if path == "table_function" and case.event_time:
        return "the table function has no EVENT TIME clause (its timers follow the end-of-input rule only)"
    return None


# ---------------------------------------------------------------- generated input
def generate(seed: int, batches: int = 3, per_batch: int = 10) -> list[list[dict]]:
    """Rows per batch: keys incl. NULL, duplicate timestamps (minute grid), rows older than the
    previous batch's watermark (late), a unique ``n`` that breaks ties of ``ts``."""
    rng = random.Random(seed)
    out, n = [], 0
    for b in range(batches):
        rows = []
        for _ in range(per_batch):
            minute = b * 45 + rng.choice([0, 0, 10, 20, 20, 40]) - (60 if rng.random() < 0.15 else 0)
            rows.append(
                {
                    "k": rng.choice(KEYS),
                    "n": n,
                    "value": rng.choice([0.5, 1.25, -2.0, 3.0, 1e300, 7.75]),
                    "ts": T0 + dt.timedelta(minutes=max(minute, 0)),
                }
            )
            n += 1
        out.append(rows)
    return out


def input_of(row: dict) -> str:
    """The named input a row of a several-input case comes from."""
    return "evens" if row["n"] % 2 == 0 else "odds"


def ordered(rows):
    return sorted(rows, key=lambda r: (r["ts"], r["n"]))


def by_key(rows):
    groups = {}
    for r in ordered(rows):
        groups.setdefault(r["k"], []).append(r)
    return groups


# ---------------------------------------------------------------- canonical forms
def canon(v):
    if isinstance(v, dict):
        return ("d", sorted(((canon(k), canon(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (list, tuple)):
        return ("l", [canon(x) for x in v])
    if isinstance(v, set):
        return ("s", sorted((canon(x) for x in v), key=repr))
    if hasattr(v, "asDict"):
        return canon(v.asDict(recursive=True))
    if isinstance(v, dt.datetime):
        return ("t", v.replace(tzinfo=None) if v.tzinfo is None else v.astimezone(dt.timezone.utc).replace(tzinfo=None))
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v


def bag(rows):
    return sorted(repr(canon(r)) for r in rows)


def same_batches(got: list[list], expected: list[list], what: str) -> None:
    """Batch by batch, saying which rows are missing and which are extra."""
    assert len(got) == len(expected), f"{what}: {len(got)} batches, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        g, e = bag(g), bag(e)
        missing = [r for r in e if r not in g]
        extra = [r for r in g if r not in e]
        assert g == e, f"{what}, batch {i}: missing {missing[:5]}, extra {extra[:5]} ({len(g)} rows, expected {len(e)})"


# ---------------------------------------------------------------- the paths
def drive_tester(name: str, batches: list[list[dict]], one_shot: bool, flush: bool = True):
    """KeyedTester driven the way Spark drives a micro-batch: every key's on-time rows, then
    timers due by the previous batch's watermark / the batch's processing time; with ``flush``
    also the timers due by the batch's new watermark (Spark's no-data batch, which ks.run runs
    at the end of every run). A row is late when its time is at or before the watermark the
    previous batch evicted by (Spark's rule since 3.4: eventTimeWatermarkForLateEvents); with
    ``flush`` that batch is the no-data batch, which evicted by the newest watermark."""
    case = CASES[name]
    # rows go in already in (ts, n) order; the events hold the call's arguments only, as in SQL
    t = KeyedTester(case.cls, case.returns, **case.kwargs, **({"inputs": case.inputs} if case.inputs else {}))
    args = [a.strip() for a in case.args.split(",")]
    outs, wm, late_wm, per = [], None, None, {}
    for rows in [sum(batches, [])] if one_shot else batches:
        out = []
        now = dt.datetime.now(dt.timezone.utc)
        t._processing_ms = int(now.timestamp() * 1000)  # the batch's processing time, no timer fired yet
        t._watermark_ms = None if wm is None else int(wm.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        groups = by_key(rows) if case.keyed else {"": ordered(rows)}
        for k, krows in groups.items():
            kept = [
                r
                for r in krows
                if not (case.event_time and late_wm is not None and not one_shot and r["ts"] <= late_wm)
            ]
            if not kept:
                continue
            if case.inputs:  # each run of consecutive rows of one input, in the key's order
                got = []
                for name, part in itertools.groupby(kept, key=input_of):
                    got += t.run([{a: r[a] for a in args} for r in part], key=k, input=name)
                out += [(k, *o.values()) for o in got]
                continue
            events = [{a: r[a] for a in args} for r in kept]
            got = t.run(events, key=k) if case.keyed else t.run(events)
            out += [(k, *o.values()) if case.keyed else tuple(o.values()) for o in got]
        if case.processing_timers:
            out += [(o["who"], *o.values()) for o in t.advance_processing_time(now)]
        if case.event_time:
            if one_shot:
                out += [(o["who"], *o.values()) for o in t.set_watermark(dt.datetime(9999, 1, 1))]
            elif wm is not None:
                out += [(o["who"], *o.values()) for o in t.set_watermark(wm)]
            used = wm  # what this batch evicted by
            # each input's watermark (one input: its newest row's time less the delay); the
            # query's is the minimum over the inputs that have had rows (Spark's rule), never back
            for r in rows:
                side = input_of(r) if case.inputs else ""
                per[side] = max(per.get(side, r["ts"] - WATERMARK), r["ts"] - WATERMARK)
            if per:
                cand = min(per.values())
                wm = cand if wm is None else max(wm, cand)
            if flush and not one_shot:
                out += [(o["who"], *o.values()) for o in t.set_watermark(wm)]
            late_wm = wm if flush else used
        outs.append(out)
    return t, outs


def sql_text(name: str, source, engine: str | None) -> str:
    """The case's query over ``source`` (for a several-input case: one source per input, the
    table-function form)."""
    case = CASES[name]
    if case.inputs:
        tables = ", ".join(f"{i} => TABLE({src})" for i, src in zip(case.inputs, source))
        et = ", event_time => 'ts', watermark => '5 minutes'" if case.event_time else ""
        opts = f", engine => '{engine}'" if engine else ""
        return f"SELECT * FROM {name}({tables}, key => 'k', order_by => 'ts, n'{et}{opts})"
    key = "GROUP BY KEY k " if case.keyed else ""
    cols = "k, s.*" if case.keyed else "s.*"
    et = "EVENT TIME ts WATERMARK '5 minutes' " if case.event_time else ""
    opts = f"OPTIONS (engine = '{engine}')" if engine else ""
    return f"SELECT {cols} FROM {source} {key}WITH STATE {name}({case.args}) AS s ORDER BY ts, n {et}{opts}"


def row_tuples(df) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


def bag_diff(now: list, before: list) -> list:
    left = list(now)
    for r in before:
        left.remove(r)
    return left


def register(ks, name: str) -> None:
    case = CASES[name]
    ks.register(name, case.cls, returns=case.returns, **case.kwargs)


def write_batch(spark, rows: list[dict], path: str, inputs: tuple[str, ...] = ()) -> None:
    """``rows`` appended to ``path`` as one file (with ``inputs``: one file per input, in
    ``path/<input>``, empty or not, so a micro-batch of one file per input is one batch)."""
    if inputs:
        for name in inputs:
            write_batch(spark, [r for r in rows if input_of(r) == name], f"{path}/{name}")
        return
    spark.createDataFrame([(r["k"], r["n"], r["value"], r["ts"]) for r in rows], SCHEMA).coalesce(1).write.mode(
        "append"
    ).parquet(path)


def spark_one_shot(spark, ks, name: str, path: str, rows: list[dict]) -> list[tuple]:
    view = f"diff_all_{name}"
    spark.createDataFrame([(r["k"], r["n"], r["value"], r["ts"]) for r in rows], SCHEMA).createOrReplaceTempView(view)
    if CASES[name].inputs:
        views = [f"{view}_{i}" for i in CASES[name].inputs]
        for i, v in zip(CASES[name].inputs, views):
            mine = [(r["k"], r["n"], r["value"], r["ts"]) for r in rows if input_of(r) == i]
            spark.createDataFrame(mine, SCHEMA).createOrReplaceTempView(v)
        return row_tuples(ks.sql(sql_text(name, views, split_path(path)[1])))
    if path == "table_function":
        return row_tuples(spark.sql(f"SELECT * FROM {name}(TABLE({view}), key => 'k', order_by => 'ts, n')"))
    return row_tuples(ks.sql(sql_text(name, view, split_path(path)[1])))


def spark_run(spark, ks, name: str, engine: str, batches: list[list[dict]], tmp) -> tuple[list[list], list, object]:
    """ks.run once per batch (and once more without input, which fires timers due by the last
    watermark): output rows per run, and the final state."""
    src, cp, out = str(tmp / "in"), str(tmp / "cp"), str(tmp / "out")
    inputs = CASES[name].inputs
    sql = sql_text(name, [f"parquet.`{src}/{i}`" for i in inputs] if inputs else f"parquet.`{src}`", engine)
    per_batch, before = [], []
    for rows in [*batches, None]:
        if rows is not None:
            write_batch(spark, rows, src, inputs)
        ks.run(sql, checkpoint=cp, output=out)
        now = row_tuples(spark.read.parquet(out))
        per_batch.append(bag_diff(now, before))
        before = now
    return per_batch, ks.read_state(cp).collect()


def spark_start(spark, ks, name: str, engine: str, batches: list[list[dict]], tmp, settle) -> list[list]:
    """ks.start over a file stream, one file per micro-batch: output rows after each batch."""
    src, cp = str(tmp / "in"), str(tmp / "cp")
    inputs = CASES[name].inputs
    write_batch(spark, batches[0], src, inputs)
    view = f"diff_stream_{name}_{engine}"
    views = [f"{view}_{i}" for i in inputs] or [view]
    for v, path in zip(views, [f"{src}/{i}" for i in inputs] or [src]):
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(path).createOrReplaceTempView(v)
    sink = f"diff_sink_{name}_{engine}"
    sql = sql_text(name, views if inputs else view, engine)
    q = ks.start(sql, checkpoint=cp, sink=f"memory:{sink}", trigger="1 second")
    per_batch, before = [], []
    try:
        for i, rows in enumerate(batches):
            if i:
                write_batch(spark, rows, src, inputs)
            q.processAllAvailable()
            now = settle(lambda: row_tuples(spark.table(sink)))
            per_batch.append(bag_diff(now, before))
            before = now
    finally:
        q.stop()
    return per_batch


def state_of_tester(t: KeyedTester, keyed: bool) -> dict:
    keys = t.keys() if keyed else [None]
    return {k: clean(t.state(k) if keyed else t.state()) for k in keys}


def clean(state: dict) -> dict:
    return {n: v for n, v in state.items() if v is not None and v != [] and v != {}}


def state_of_spark(rows, keyed: bool, like: dict) -> dict:
    """read_state rows -> {key: {column: value}}; encoded attribute columns (JSON text) are
    decoded where the tester holds a non-string value."""
    out = {}
    for r in rows:
        d = r.asDict(recursive=True)
        d.pop("batch_id", None)
        k = d.pop("k", None) if keyed else None
        want = like.get(k, {})
        out[k] = clean({n: decode(v) if not isinstance(want.get(n), str) else v for n, v in d.items()})
    return out


def decode(v):
    """An encoded attribute column's JSON text -> its value (other values as they are)."""
    if not isinstance(v, str):
        return v
    try:
        return loads(v)
    except ValueError:
        return v


# ---------------------------------------------------------------- the tests
def pairs():
    for name in CASES:
        for path in PATHS:
            marks = []
            reason = not_applicable(name, path)
            missing = unsupported(path)
            if reason:
                marks.append(pytest.mark.skip(reason=f"path does not apply: {reason}"))
            elif missing:
                marks.append(pytest.mark.skip(reason=f"not supported: {missing}"))
            elif not ALL and (name, path) not in CI_PAIRS:
                marks.append(pytest.mark.skip(reason="not in CI's selection; make fuzz (KS_DIFF_ALL=1) runs it"))
            yield pytest.param(name, path, marks=marks, id=f"{name}-{path}")


CI_PAIRS = {
    *((name, "tester") for name in CASES),
    ("sage_sessions", "sql_tws"),
    ("typed", "sql_tws"),
    ("sage_features", "sql_tws"),
    ("whole", "sql_bulk"),
    ("event_sessions", "sql_bulk"),
    ("sage_flexible_unkeyed", "sql_bulk"),
    ("ticker", "sql_bulk"),
    ("sage_sessions", "table_function"),
    ("whole", "table_function"),
    ("sage_counter", "table_function"),
    ("event_sessions", "run_bulk"),
    ("two_sides", "sql_tws"),
    ("two_sides", "run_bulk"),
}


def settle_for(expected_bag):
    """Wait (briefly) until a stream's sink shows what the other paths give: a micro-batch's
    timers may land in the next, no-data batch, which processAllAvailable does not wait for."""

    def settle(read):
        deadline = time.time() + 15
        got = read()
        while bag(got) != expected_bag and time.time() < deadline:
            time.sleep(0.5)
            got = read()
        return got

    return settle


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name, path", list(pairs()))
def test_paths_agree(request, name, path, seed, tmp_path):
    case = CASES[name]
    batches = generate(seed)
    if case.map_by_key:
        batches = [[r | {"k": "d"} if r["k"] is None else r for r in b] for b in batches]
    everything = sum(batches, [])
    one_tester, (one_shot,) = drive_tester(name, batches, one_shot=True)
    inc_tester, per_batch = drive_tester(name, batches, one_shot=False)
    final_state = state_of_tester(inc_tester, case.keyed)

    if path == "tester":
        if case.oracle is None:
            pytest.skip("no plain-Python oracle for this class: its Spark paths are compared with KeyedTester")
        # the oracle: plain Python per key, over all rows in (ts, n) order for one batch, and in
        # arrival order across batches ((ts, n) order within each) for the increments
        expected = [(k, *o) for k, rows in by_key(everything).items() for o in case.oracle(rows, k)]
        assert bag(one_shot) == bag(expected)
        arrival = {}
        for b in batches:
            for k, rows in by_key(b).items():
                arrival.setdefault(k, []).extend(rows)
        expected = [(k, *o) for k, rows in arrival.items() for o in case.oracle(rows, k)]
        assert bag(sum(per_batch, [])) == bag(expected)
        return

    spark = request.getfixturevalue("spark")
    ks = request.getfixturevalue("ks_auto")
    register(ks, name)
    kind, engine = split_path(path)
    if kind in ("sql", "table_function"):
        same_batches([spark_one_shot(spark, ks, name, path, everything)], [one_shot], path)
        return
    if kind == "run":
        got, state_rows = spark_run(spark, ks, name, engine, batches, tmp_path)
        same_batches(got, [*per_batch, []], path)  # the last run, without input, has nothing left to do
        assert state_of_spark(state_rows, case.keyed, final_state) == state_of_tester(inc_tester, case.keyed)
        return
    got = spark_start(spark, ks, name, engine, batches, tmp_path, settle_for(bag(sum(per_batch, []))))
    if case.event_time:
        same_batches([sum(got, [])], [sum(per_batch, [])], path)  # timers may fire in a no-data batch between
    else:
        same_batches(got, per_batch, path)


@pytest.mark.parametrize("path", ["tester", "sql_bulk", "table_function"])
def test_null_map_key_fails_alike(request, path):
    """The SAGE counter returns {key: n}; for the NULL key that is a map with a NULL key, which
    Spark cannot hold: every path refuses it with the same message, naming the column."""
    rows = [{"k": None, "n": 0, "value": 1.0, "ts": T0}]
    message = r"column 'counts': a map key cannot be None \(Spark maps have no NULL keys\)"
    if path == "tester":
        from spark_keyed_sql import OutputSchemaError

        with pytest.raises(OutputSchemaError, match=message):
            KeyedTester(CounterFunction, CASES["sage_counter"].returns).run(rows, key=None)
        return
    spark, ks = request.getfixturevalue("spark"), request.getfixturevalue("ks_auto")
    register(ks, "sage_counter")
    with pytest.raises(Exception, match=message):
        spark_one_shot(spark, ks, "sage_counter", path, rows)

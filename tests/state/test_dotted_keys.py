"""A key named with a dot (``GROUP BY KEY `u.id` ``) through every path that names the key
column, on both engines: Spark's ``F.col("u.id")`` / ``select("u.id")`` read the dot as a
struct field, so each path must name the column quoted. ks.run and read_state worked; DELETE,
UPDATE, migrate_state (and its dry run), ks.apply, a dotted output or broadcast column failed
with UNRESOLVED_COLUMN `u`.`id`. The oracles (counts, totals, rates as of a time) are computed
here in Python."""

from __future__ import annotations

import datetime as dt

import pytest
from keyed_functions import RunningTotalNative

from spark_keyed_sql import SchemaError, StatefulFunction

KEY = "u.id"

SQL = (
    "SELECT `u.id`, s.n, s.total FROM parquet.`{src}` GROUP BY KEY `u.id` WITH STATE dot_tally(value) AS s ORDER BY seq"
)


def _rows(batch: int) -> list[tuple]:
    return [
        (k, float(batch * 10 + i + j), batch * 100 + 10 * i + j)
        for i, k in enumerate(["k1", "k2", "k3"])
        for j in range(2)
    ]


def _oracle(batches, start=None, erased_after=None, erased=()):
    """({key: (n, total)} after the batches, [(key, n, total)] output rows); ``start``: the
    state before the first; ``erased`` keys dropped after batch index ``erased_after``."""
    state = dict(start or {})
    out = []
    for b, rows in enumerate(batches):
        for k, v, _ in sorted(rows, key=lambda r: r[2]):
            n, total = state.get(k, (0, 0.0))
            state[k] = (n + 1, total + v)
            out.append((k, *state[k]))
        if b == erased_after:
            for k in erased:
                state.pop(k, None)
    return state, out


def _history(spark, ks, d):
    """Two ks.run batches into a checkpoint keyed by `u.id`."""
    ks.register("dot_tally", RunningTotalNative, returns="n bigint, total double")
    src, cp, out = str(d / "in"), str(d / "cp"), str(d / "out")
    batches = [_rows(0), _rows(1)]
    for rows in batches:
        _write(spark, src, rows)
        ks.run(SQL.format(src=src), checkpoint=cp, output=out)
    return src, cp, out, batches


@pytest.fixture
def history(spark, ks, tmp_path):
    """A history of the test's own, which it may change (DELETE, UPDATE, more runs)."""
    return _history(spark, ks, tmp_path)


@pytest.fixture(scope="module")
def read_only_history(spark, ks, tmp_path_factory):
    """One history per engine for the tests that only read its checkpoint (CI's time budget)."""
    return _history(spark, ks, tmp_path_factory.mktemp(f"dotted-{ks.default_engine}"))


def _write(spark, src, rows):
    spark.createDataFrame(rows, "`u.id` string, value double, seq bigint").coalesce(1).write.mode("append").parquet(src)


def _state(ks, cp):
    return {r[KEY]: (r["n"], r["total"]) for r in ks.read_state(cp).collect()}


def _needs_edits(spark, ks):
    if ks.default_engine == "tws":
        from spark_keyed_sql.engines.tws.erase import has_state_rewriter

        if not has_state_rewriter(spark):
            pytest.skip("DELETE / UPDATE on engine 'tws' needs Spark 4.2+ (its state rewriter)")


def test_run_read_state_and_the_change_feed(spark, ks, read_only_history):
    src, cp, out, batches = read_only_history
    state, rows = _oracle(batches)
    assert _state(ks, cp) == state
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == sorted(rows)
    feed = {(r[KEY], r["variable"]) for r in ks.read_state_changes(cp, from_batch=0).collect()}
    assert feed == {(k, v) for k in state for v in ("n", "total")}


def test_delete_erases_the_key_and_the_query_continues(spark, ks, history):
    _needs_edits(spark, ks)
    src, cp, out, batches = history
    audit = ks.delete_state(cp, where="`u.id` = 'k1'")
    assert audit["keys_matched"] == 1
    assert _state(ks, cp) == {k: v for k, v in _oracle(batches)[0].items() if k != "k1"}
    third = _rows(2)
    _write(spark, src, third)
    ks.run(SQL.format(src=src), checkpoint=cp, output=out)
    state, rows = _oracle([*batches, third], erased_after=1, erased=["k1"])
    assert _state(ks, cp) == state and state["k1"][0] == 2  # k1 afresh: its third batch's two rows
    assert sorted(tuple(r) for r in spark.read.parquet(out).collect()) == sorted(rows)


def test_update_sets_the_matched_keys(spark, ks, history):
    _needs_edits(spark, ks)
    src, cp, out, batches = history
    audit = ks.update_state(cp, set={"total": "total * 2"}, where="`u.id` IN ('k2', 'k3')")
    assert audit["keys_matched"] == 2
    state = _oracle(batches)[0]
    assert _state(ks, cp) == {k: (n, t * 2 if k != "k1" else t) for k, (n, t) in state.items()}


def test_migrate_and_its_dry_run(spark, ks, read_only_history, tmp_path):
    src, cp, out, batches = read_only_history
    state = _oracle(batches)[0]
    sample = ks.migrate_state(cp, str(tmp_path / "dry"), dry_run=True)
    assert sorted(r[KEY] for r in sample.collect()) == sorted(state)
    ks.migrate_state(cp, str(tmp_path / "cp2"))
    assert _state(ks, str(tmp_path / "cp2")) == state


def test_initial_state_from_a_read_state_table(spark, ks, read_only_history, tmp_path):
    src, cp, out, batches = read_only_history
    saved = _oracle(batches)[0]
    ks.read_state(cp).createOrReplaceTempView("dot_saved")
    more = _rows(2)
    fresh = str(tmp_path / "more")
    _write(spark, fresh, more)
    got = ks.sql(SQL.format(src=fresh) + " INITIAL STATE FROM dot_saved").collect()
    assert sorted(tuple(r) for r in got) == sorted(_oracle([more], start=saved)[1])


class EventNames(StatefulFunction):
    """A running count and total, and the names the event dict holds."""

    n: int
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["value"]
        return {"n": self.n, "total": self.total, "names": ",".join(sorted(e))}


def test_apply_keyed_by_a_dotted_column(spark, ks):
    """The DataFrame API with the key and the ORDER BY column named with a dot, the latter in
    another case (SQL names): the rows arrive shuffled and run in `e.seq` order, the event
    dict holds every column under its own name, and the output's key column keeps its name."""
    import random

    ks.register("dot_names", EventNames, returns="n bigint, total double, names string")
    rows = _rows(0) + _rows(1)
    shuffled = random.Random(7).sample(rows, len(rows))
    df = spark.createDataFrame(shuffled, "`u.id` string, value double, `e.seq` bigint").repartition(3)
    got = ks.apply(df, "dot_names", key="`u.id`", order_by="`E.SEQ`")
    assert got.columns == [KEY, "n", "total", "names"]
    expected = sorted((k, n, t, "e.seq,u.id,value") for k, n, t in _oracle([rows])[1])
    assert sorted(tuple(r) for r in got.collect()) == expected


@pytest.mark.spark_feature("UDTF_ANALYZE")  # (the plain spark.sql form)
def test_the_table_function_form_keyed_by_a_dotted_column(spark, ks):
    """``key => '`u.id`'`` in the table-function form, through ks.sql (the engines) and plain
    spark.sql (a batch query's own state)."""
    ks.register("dot_tally", RunningTotalNative, returns="n bigint, total double")
    rows = _rows(0) + _rows(1)
    spark.createDataFrame(rows, "`u.id` string, value double, seq bigint").createOrReplaceTempView("dot_events")
    call = "SELECT * FROM dot_tally(TABLE(dot_events), key => '`u.id`', order_by => 'seq')"
    expected = sorted(_oracle([rows])[1])
    for run in (ks.sql, spark.sql):
        got = run(call)
        assert got.columns == [KEY, "n", "total"], run
        assert sorted(tuple(r) for r in got.collect()) == expected, run


class DotSpend(StatefulFunction):
    """Each payment converted at the rate as of its time; output under a dotted name too."""

    returns = "ts timestamp, `eur.amount` double"

    def execute(self, e):
        rate = self.ctx.broadcast("rates").get(e["cur"])
        return None if rate is None else {"ts": e["ts"], "eur.amount": e["amount"] * rate}


T0 = dt.datetime(2024, 3, 1)
PAY = "`u.id` string, ts timestamp, cur string, amount double"
RATES = "`fx.cur` string, ts timestamp, `fx.rate` double"
BC_SQL = (
    "SELECT * FROM dot_spend(payments => TABLE({pay}), rates => TABLE({rates}), key => '`u.id`', order_by => 'ts', "
    "event_time => 'ts', watermark => '1 day', broadcast => 'rates', broadcast_key => '`fx.cur`')"
)


def _payments(first_minute: int) -> list[tuple]:
    return [
        (u, T0 + dt.timedelta(minutes=first_minute + m), cur, float(m + 1))
        for m, (u, cur) in enumerate([("k1", "USD"), ("k2", "GBP"), ("k1", "GBP"), ("k3", "USD"), ("k2", "USD")])
    ]


def _spend_oracle(payments, rates):
    """(key, ts, eur) of each payment with a rate as of its time (the last rate row at or before it)."""
    out = []
    for u, ts, cur, amount in payments:
        rate = None
        for c, t, r in sorted(rates, key=lambda r: r[1]):
            if c == cur and t <= ts:
                rate = r
        if rate is not None:
            out.append((u, ts, amount * rate))
    return sorted(out)


def test_broadcast_input_with_dotted_key_and_value_names(spark, ks):
    """``broadcast_key => '`fx.cur`'`` with a dotted value column, versioned by event time (its
    rows go through the timestamp conversion that named every column unquoted)."""
    ks.register("dot_spend", DotSpend)
    pay = _payments(0)
    rates = [("USD", T0, 2.0), ("GBP", T0 + dt.timedelta(minutes=1), 0.5), ("USD", T0 + dt.timedelta(minutes=3), 4.0)]
    spark.createDataFrame(pay, PAY).createOrReplaceTempView("dot_pay")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("dot_rates")
    got = ks.sql(BC_SQL.format(pay="dot_pay", rates="dot_rates"))
    assert got.columns == [KEY, "ts", "eur.amount"]
    assert sorted(tuple(r) for r in got.collect()) == _spend_oracle(pay, rates)


def test_ks_run_with_a_dotted_broadcast_and_output_name_and_its_broadcast_state(spark, tmp_path):
    """Two ks.run batches (bulk: broadcast inputs on streams are bulk's), the output written
    under its dotted column name, and read_state(broadcast=) naming the dotted columns."""
    from spark_keyed_sql import KeyedSQL

    kb = KeyedSQL(spark, engine="bulk")
    kb.register("dot_spend", DotSpend)
    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("pay", "rates", "cp", "out"))
    batches = [
        (_payments(0), [("USD", T0, 2.0), ("GBP", T0, 0.5)]),
        (_payments(10), [("GBP", T0 + dt.timedelta(minutes=12), 3.0)]),
    ]
    sql = BC_SQL.format(pay=f"parquet.`{p_dir}`", rates=f"parquet.`{r_dir}`")
    for pay, rates in batches:
        spark.createDataFrame(pay, PAY).coalesce(1).write.mode("append").parquet(p_dir)
        spark.createDataFrame(rates, RATES).coalesce(1).write.mode("append").parquet(r_dir)
        kb.run(sql, checkpoint=cp, output=out)
    written = spark.read.parquet(out)
    assert written.columns == [KEY, "ts", "eur.amount"]
    all_pay = [p for b in batches for p in b[0]]
    all_rates = [r for b in batches for r in b[1]]
    assert sorted(tuple(r) for r in written.collect()) == _spend_oracle(all_pay, all_rates)
    kept = kb.read_state(cp, broadcast="rates")
    assert kept.columns[:2] == ["fx.cur", "fx.rate"]
    assert sorted((r["fx.cur"], r["fx.rate"]) for r in kept.collect()) == sorted((c, r) for c, _, r in all_rates)


def test_apply_order_by_in_another_case_orders_the_rows(spark, ks):
    """``order_by="SEQ"`` on a column ``seq``: SQL names are case-insensitive, and the rows run
    in its order (tws found the column in its rows by the given spelling and left them as they
    came)."""
    import random

    ks.register("dot_names", EventNames, returns="n bigint, total double, names string")
    rows = _rows(0) + _rows(1)
    shuffled = random.Random(11).sample(rows, len(rows))
    df = spark.createDataFrame(shuffled, "user_id string, value double, seq bigint").repartition(3)
    got = ks.apply(df, "dot_names", key="user_id", order_by="SEQ", args=["value"])
    expected = sorted((k, n, t, "value") for k, n, t in _oracle([rows])[1])
    assert sorted(tuple(r) for r in got.collect()) == expected


def test_apply_refuses_a_returns_column_named_as_its_dotted_key(spark, ks):
    """A ``returns`` column spelled as the dotted key (``U.ID`` beside key ``u.id``) is refused
    naming both, before any job (the key runs under an internal name, which once hid the clash
    until the output was built)."""
    ks.register("dot_clash", RunningTotalNative, returns="`U.ID` string, n bigint, total double")
    df = spark.createDataFrame(_rows(0), "`u.id` string, value double, `e.seq` bigint")
    with pytest.raises(SchemaError, match=r"returns column 'U\.ID' has the same name as key column"):
        ks.apply(df, "dot_clash", key="`u.id`", order_by="`e.seq`")


def test_apply_takes_dotted_names_in_lists(spark, ks):
    """``key=["u.id"]`` and ``order_by=["e.seq"]``: a list's items are column names as written
    (a string is SQL, where the dot needs backticks); the rows arrive shuffled and run in
    ``e.seq`` order."""
    import random

    ks.register("dot_names", EventNames, returns="n bigint, total double, names string")
    rows = _rows(0) + _rows(1)
    shuffled = random.Random(5).sample(rows, len(rows))
    df = spark.createDataFrame(shuffled, "`u.id` string, value double, `e.seq` bigint").repartition(3)
    got = ks.apply(df, "dot_names", key=["u.id"], order_by=["e.seq"])
    expected = sorted((k, n, t, "e.seq,u.id,value") for k, n, t in _oracle([rows])[1])
    assert sorted(tuple(r) for r in got.collect()) == expected

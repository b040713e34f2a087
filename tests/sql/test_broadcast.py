"""Broadcast inputs (``broadcast => 'rates'``): one non-keyed table every key reads, against
plain-Python oracles written here: the rates as of a batch (every broadcast row before the
batch's keyed rows, a NULL value removing its key), versioned by event time (a keyed row sees
the rates as of its own time), rules added and removed at run time through ``on_broadcast``;
one-shot batches on every engine and at several partition counts, incremental ``ks.run`` with a
restart between a broadcast update and the rows it affects, a SIGKILL mid-run, read_state of the
broadcast state, KeyedTester, EXPLAIN KEYED and the errors."""

import datetime as dt
import os
import random

import pytest

from spark_keyed_sql import KeyedProcessor, KeyedSQL, KeyedSQLError, KeyedTester, StatefulFunction

PAYMENTS = "user_id string, ts timestamp, currency string, amount double"
RATES = "currency string, ts timestamp, rate double"
T0 = dt.datetime(2024, 3, 1)


def _t(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


class Spend(StatefulFunction):
    """The contract's example: each payment converted at the rate the broadcast table holds."""

    returns = "ts timestamp, eur double, total_eur double"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total_eur = 0.0

    def execute(self, event):
        rate = self.ctx.broadcast("rates").get(event["currency"])
        if rate is None:  # a currency without a rate (never given, or removed)
            return None
        eur = round(event["amount"] * rate, 6)
        self.total_eur = round(self.total_eur + eur, 6)
        return {"ts": event["ts"], "eur": eur, "total_eur": self.total_eur}


class Alerts(StatefulFunction):
    """Flink's broadcast-state pattern: rules added and removed at run time (``on_broadcast``
    keeps them), matched against each key's running total."""

    returns = "ts timestamp, rule string"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def on_broadcast(self, name, row):
        rules = self.ctx.broadcast(name)
        if row["op"] == "add":
            rules[row["rule_id"]] = row["threshold"]
        elif row["rule_id"] in rules:
            del rules[row["rule_id"]]

    def execute(self, event):
        self.total += event["amount"]
        rules = self.ctx.broadcast("rules")
        return [(event["ts"], r) for r in sorted(rules) if self.total > rules[r]]


# ------------------------------------------------------------------ oracles (plain Python)
def _rates_after(rates):
    """Every rate row applied in time order (ties: by value); a NULL rate removes its currency."""
    m = {}
    for cur, _ts, rate in sorted(rates, key=lambda r: (r[1], repr(r[2]))):
        if rate is None:
            m.pop(cur, None)
        else:
            m[cur] = rate
    return m


def _rate_as_of(rates, cur, t):
    """The rate of ``cur`` as of time ``t``: the last row of it at or before ``t``."""
    found = None
    for c, ts, rate in sorted(rates, key=lambda r: (r[1], repr(r[2]))):
        if c == cur and ts <= t:
            found = rate
    return found


def _spend_oracle(batches, versioned):
    """``batches``: [(payments, rates)] in run order. Returns the output rows (user, ts, eur, total)."""
    seen_rates, totals, out = [], {}, []
    for payments, rates in batches:
        seen_rates = seen_rates + rates
        now = _rates_after(seen_rates)
        for user, ts, cur, amount in sorted(payments, key=lambda p: (p[0], p[1])):
            rate = _rate_as_of(seen_rates, cur, ts) if versioned else now.get(cur)
            if rate is None:
                continue
            eur = round(amount * rate, 6)
            totals[user] = round(totals.get(user, 0.0) + eur, 6)
            out.append((user, ts, eur, totals[user]))
    return sorted(out)


def _random_batch(rng, n_users, minutes, first_minute=0):
    payments = []
    for u in range(n_users):
        ts = rng.sample(range(first_minute, first_minute + minutes), rng.randint(1, 5))
        for m in ts:
            payments.append((f"u{u}", _t(m), rng.choice(["USD", "GBP", "JPY", "CHF"]), float(rng.randint(1, 50))))
    rates = []
    for m in rng.sample(range(first_minute, first_minute + minutes), 6):
        cur = rng.choice(["USD", "GBP", "JPY"])
        rates.append((cur, _t(m), None if rng.random() < 0.2 else round(rng.uniform(0.5, 1.5), 3)))
    return payments, rates


def _rows(df):
    return sorted((r["user_id"], r["ts"], r["eur"], r["total_eur"]) for r in df.collect())


def _query(payments, rates, *, versioned=False, extra=""):
    times = ", event_time => 'ts', watermark => '1 day'" if versioned else ""
    return (
        f"SELECT * FROM bc_spend(payments => TABLE({payments}), rates => TABLE({rates}), key => 'user_id', "
        f"order_by => 'ts'{times}, broadcast => 'rates', broadcast_key => 'currency'{extra})"
    )


@pytest.fixture(scope="module")
def kb(spark):
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("bc_spend", Spend)
    ks.register("bc_alerts", Alerts)
    return ks


# ------------------------------------------------------------------ one-shot batches
@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_one_shot_matches_the_oracle_on_every_engine(spark, ks, versioned, seed):
    """Rates changing within the batch: without event time every rate row applies before the
    keyed rows (the newest rate of each currency, a NULL removing it); with it each payment
    converts at the rate as of its own time."""
    ks.register("bc_spend", Spend)
    payments, rates = _random_batch(random.Random(seed), 6, 60)
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("bc_rates")
    got = _rows(ks.sql(_query("bc_payments", "bc_rates", versioned=versioned)))
    expected = _spend_oracle([(payments, rates)], versioned)
    assert got == expected
    # the data tells versioned and latest apart
    assert expected != _spend_oracle([(payments, rates)], not versioned)


@pytest.mark.parametrize("order", ["ts DESC", "ts NULLS LAST"])
def test_order_by_direction_and_nulls_order_the_broadcast_rows_too(spark, ks, order):
    """``order_by => 'ts DESC'`` applies a currency's rate rows newest first (so its oldest rate
    is the one left) and, as Spark orders DESC, a rate row without a time last; ``NULLS LAST``
    on ASC puts it last as well. Payments run in the same order."""
    ks.register("bc_spend", Spend)
    rates = [("USD", _t(1), 0.5), ("USD", _t(3), 0.75), ("USD", None, 2.0), ("GBP", _t(2), 1.25), ("GBP", _t(4), None)]
    payments = [("a", _t(5), "USD", 10.0), ("a", _t(6), "USD", 4.0), ("b", _t(7), "GBP", 8.0), ("b", _t(8), "USD", 1.0)]
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments_d")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("bc_rates_d")
    sql = (
        "SELECT * FROM bc_spend(payments => TABLE(bc_payments_d), rates => TABLE(bc_rates_d), key => 'user_id', "
        f"order_by => '{order}', broadcast => 'rates', broadcast_key => 'currency')"
    )
    desc = order.endswith("DESC")

    def ordered(rows, at):  # the order_by by hand: NULL times last in both orders
        timed = sorted((r for r in rows if r[at] is not None), key=lambda r: r[at], reverse=desc)
        return timed + [r for r in rows if r[at] is None]

    now = {}
    for cur, _ts, rate in ordered(rates, 1):
        if rate is None:
            now.pop(cur, None)
        else:
            now[cur] = rate
    expected, totals = [], {}
    for user in sorted({p[0] for p in payments}):
        for _, ts, cur, amount in ordered([p for p in payments if p[0] == user], 1):
            if cur in now:
                eur = round(amount * now[cur], 6)
                totals[user] = round(totals.get(user, 0.0) + eur, 6)
                expected.append((user, ts, eur, totals[user]))
    # the data tells the orders apart: the NULL-time row last either way; GBP's last row sets it
    # (DESC) or removes it (ASC)
    assert now == ({"USD": 2.0, "GBP": 1.25} if desc else {"USD": 2.0})
    assert _rows(ks.sql(sql)) == sorted(expected)


@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_another_partition_count_gives_the_same_answer(spark, kb, partitions):
    payments, rates = _random_batch(random.Random(5), 12, 90)
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments_p")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("bc_rates_p")
    sql = _query("bc_payments_p", "bc_rates_p", versioned=True, extra=f", state_partitions => {partitions}")
    assert _rows(kb.sql(sql)) == _spend_oracle([(payments, rates)], True)


def test_explain_keyed_shows_the_broadcast_input(spark, kb):
    spark.createDataFrame([], PAYMENTS).createOrReplaceTempView("bc_payments_e")
    spark.createDataFrame([], RATES).createOrReplaceTempView("bc_rates_e")
    text = kb.explain(_query("bc_payments_e", "bc_rates_e", versioned=True))
    assert "rates (broadcast by currency, versioned by ts): ts, currency, rate" in text
    assert "payments: user_id, ts, currency, amount" in text


# ------------------------------------------------------------------ ks.run: incremental, restarts
def _append(spark, rows, schema, path):
    if rows:
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").parquet(path)


def test_ks_run_reads_broadcast_files_incrementally_and_keeps_the_state_across_restarts(spark, kb, tmp_path):
    """Three runs over Parquet directories (each run a restart): a rates-only run between the
    rates' update and the payments it affects; rates changing within and between runs. The
    output and the broadcast state the checkpoint keeps match the versioned oracle."""
    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("payments", "rates", "cp", "out"))
    rng = random.Random(11)
    first = _random_batch(rng, 5, 30)
    rates_only = ([], [("USD", _t(31), 2.0), ("GBP", _t(31), None), ("CHF", _t(32), 1.1)])
    after = (_random_batch(rng, 5, 30, first_minute=33)[0], [("USD", _t(45), 3.0)])
    batches = [first, rates_only, after]
    # the data exercises what the runs are for: a removal and a rate that only a later run gives
    assert any(r[2] is None for r in first[1] + rates_only[1])
    assert any(p[2] == "CHF" for p in after[0])
    sql = _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`", versioned=True)
    applied = []
    for payments, rates in batches:
        _append(spark, payments, PAYMENTS, p_dir)
        _append(spark, rates, RATES, r_dir)
        applied.append(kb.run(sql, checkpoint=cp, output=out)["input_rows"])
    assert applied == [len(b[0]) for b in batches]  # only new payment files each run
    assert _rows(spark.read.parquet(out)) == _spend_oracle(batches, True)
    # the broadcast state kept once in the checkpoint: every version of each currency (a
    # removal as NULL), the last row of a currency at one time being its version then
    kept = sorted(
        (
            (r["currency"], r["valid_from"].replace(tzinfo=None), r["rate"])
            for r in kb.read_state(cp, broadcast="rates").collect()
        ),
        key=repr,
    )
    all_rates = [r for b in batches for r in b[1]]
    expected = sorted({(c, ts, _rate_as_of(all_rates, c, ts)) for c, ts, _ in all_rates}, key=repr)
    assert [(c, r) for c, _, r in kept] == [(c, r) for c, _, r in expected]
    assert any(r is None for _, _, r in kept)


def test_ks_run_unversioned_rates_apply_before_the_batchs_rows(spark, kb, tmp_path):
    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("payments", "rates", "cp", "out"))
    batches = [
        ([("a", _t(1), "USD", 10.0)], [("USD", _t(5), 0.5), ("USD", _t(2), 0.9)]),  # the later row (by ts) wins
        ([("a", _t(2), "USD", 10.0), ("b", _t(3), "GBP", 1.0)], [("GBP", _t(6), 1.2), ("USD", _t(7), None)]),
        ([("b", _t(4), "GBP", 2.0)], []),
    ]
    sql = _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`")
    for payments, rates in batches:
        _append(spark, payments, PAYMENTS, p_dir)
        _append(spark, rates, RATES, r_dir)
        kb.run(sql, checkpoint=cp, output=out)
    got = _rows(spark.read.parquet(out))
    assert got == _spend_oracle(batches, False)
    assert [r[0] for r in got] == ["a", "b", "b"]  # a's second payment: USD was removed before it
    state = {r["currency"]: r["rate"] for r in kb.read_state(cp, broadcast="rates").collect()}
    assert state == {"GBP": 1.2}


def test_rules_added_and_removed_at_run_time(spark, kb, tmp_path):
    """on_broadcast keeps the rules (a removal by an 'op' column); each payment is matched
    against the rules in force; the checkpoint keeps them for the next run."""
    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("payments", "rules", "cp", "out"))
    rules_schema = "rule_id string, op string, threshold double, ts timestamp"
    runs = [
        ([("a", _t(1), "EUR", 30.0), ("b", _t(1), "EUR", 5.0)], [("big", "add", 20.0, _t(0))]),
        ([("a", _t(2), "EUR", 1.0), ("b", _t(2), "EUR", 30.0)], [("small", "add", 4.0, _t(1))]),
        ([("a", _t(3), "EUR", 1.0), ("b", _t(3), "EUR", 1.0)], [("big", "remove", None, _t(2))]),
    ]
    sql = (
        f"SELECT * FROM bc_alerts(payments => TABLE(parquet.`{p_dir}`), rules => TABLE(parquet.`{r_dir}`), "
        "key => 'user_id', order_by => 'ts', broadcast => 'rules', broadcast_key => 'rule_id')"
    )
    for payments, rules in runs:
        _append(spark, payments, PAYMENTS, p_dir)
        _append(spark, rules, rules_schema, r_dir)
        kb.run(sql, checkpoint=cp, output=out)
    got = sorted((r["user_id"], r["ts"], r["rule"]) for r in spark.read.parquet(out).collect())
    # the oracle
    rules, totals, expected = {}, {}, []
    for payments, new_rules in runs:
        for rid, op, th, _ in sorted(new_rules, key=lambda r: r[3]):
            if op == "add":
                rules[rid] = th
            else:
                rules.pop(rid, None)
        for user, ts, _, amount in payments:
            totals[user] = totals.get(user, 0.0) + amount
            expected += [(user, ts, r) for r in sorted(rules) if totals[user] > rules[r]]
    assert got == sorted(expected)
    assert ("a", _t(3), "big") not in got and ("a", _t(2), "big") in got  # removed at run time
    kept = [(r["rule_id"], r["value"]) for r in kb.read_state(cp, broadcast="rules").collect()]
    assert kept == [("small", "4.0")]


@pytest.mark.parametrize("point", ["state_written", pytest.param("after_sink", marks=pytest.mark.slow)])
def test_a_sigkill_mid_run_loses_nothing_and_applies_nothing_twice(spark, kb, tmp_path, point):
    """A run SIGKILLed after its state (and broadcast state) was written, before or after the
    sink, before the commit; then run again: the output holds each payment once, converted by
    the rates of its batch, and the broadcast state is the oracle's."""
    from state.test_erase import killed_at

    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("payments", "rates", "cp", "out"))
    first = ([("a", _t(1), "USD", 10.0)], [("USD", _t(0), 0.5)])
    second = ([("a", _t(5), "USD", 10.0), ("b", _t(6), "USD", 4.0)], [("USD", _t(4), 0.25)])
    sql = _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`", versioned=True)
    _append(spark, first[0], PAYMENTS, p_dir)
    _append(spark, first[1], RATES, r_dir)
    kb.run(sql, checkpoint=cp, output=out)
    _append(spark, second[0], PAYMENTS, p_dir)
    _append(spark, second[1], RATES, r_dir)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"""
import os, sys
os.environ["SPARK_KEYED_SQL_CRASH_PID"] = str(os.getpid())
sys.path[:0] = [{tests!r}, {os.path.join(tests, "sql")!r}]
from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.local import local_session
from jvm_options import TEST_JAVA_OPTIONS
from test_broadcast import Spend
ks = KeyedSQL(local_session("killed", java_options=TEST_JAVA_OPTIONS), engine="bulk")
ks.register("bc_spend", Spend)
ks.run({sql!r}, checkpoint={cp!r}, output={out!r})
"""
    killed_at(point, code, tmp_path)
    kb.run(sql, checkpoint=cp, output=out)
    assert _rows(spark.read.parquet(out)) == _spend_oracle([first, second], True)
    kept = sorted((r["currency"], r["rate"]) for r in kb.read_state(cp, broadcast="rates").collect())
    assert kept == [("USD", 0.25), ("USD", 0.5)]


def test_ks_start_applies_each_micro_batchs_rates_before_its_payments(spark, kb, tmp_path):
    """A running stream: a rates file, then payments, then a rate change and more payments,
    each waited for; the output is the oracle's for those batches."""
    p_dir, r_dir = str(tmp_path / "p"), str(tmp_path / "r")
    batches = [
        ([("a", _t(1), "USD", 10.0), ("b", _t(2), "GBP", 1.0)], [("USD", _t(0), 0.5), ("GBP", _t(0), 2.0)]),
        ([("a", _t(3), "USD", 10.0)], [("USD", _t(2), 0.25)]),
    ]
    _append(spark, batches[0][1], RATES, r_dir)
    _append(spark, batches[0][0], PAYMENTS, p_dir)
    q = kb.start(
        _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`"), checkpoint=str(tmp_path / "cp"), sink="memory:bc_fx"
    )
    try:
        q.processAllAvailable()
        _append(spark, batches[1][1], RATES, r_dir)  # the rate first: its batch, or the payments', has it
        _append(spark, batches[1][0], PAYMENTS, p_dir)
        q.processAllAvailable()
    finally:
        q.stop()
    assert _rows(spark.table("bc_fx")) == _spend_oracle(batches, False)


# ------------------------------------------------------------------ KeyedTester
def test_keyed_tester_takes_broadcast_rows():
    t = KeyedTester(Spend, broadcast={"rates": [{"currency": "USD", "rate": 0.5}, {"currency": "GBP", "rate": 2.0}]})
    assert [r["total_eur"] for r in t.run([{"ts": _t(1), "currency": "USD", "amount": 4.0}], key="a")] == [2.0]
    t.broadcast("rates", [{"currency": "USD", "rate": None}, {"currency": "CHF", "rate": 3.0}])
    rows = [{"ts": _t(2), "currency": c, "amount": 1.0} for c in ("USD", "GBP", "CHF")]
    assert [r["total_eur"] for r in t.run(rows, key="a")] == [4.0, 7.0]  # USD removed: no row


def test_keyed_tester_run_takes_the_batchs_broadcast_rows_applied_before_its_own():
    t = KeyedTester(Spend)
    payment = {"ts": _t(1), "currency": "USD", "amount": 4.0}
    assert t.run([payment], key="a", broadcast={"rates": [{"currency": "USD", "rate": 0.5}]}) == [
        {"ts": _t(1), "eur": 2.0, "total_eur": 2.0}
    ]
    # the next batch's rate applies to that batch's payment (4.0 * 0.25), the state carries on
    out = t.run([payment | {"ts": _t(2)}], key="a", broadcast={"rates": [{"currency": "USD", "rate": 0.25}]})
    assert [(r["eur"], r["total_eur"]) for r in out] == [(1.0, 3.0)]
    with pytest.raises(KeyedSQLError, match=r"run: broadcast= takes"):
        t.run([payment], key="a", broadcast=[{"currency": "USD", "rate": 1.0}])


def test_keyed_tester_versioned_by_event_time_and_on_broadcast():
    t = KeyedTester(
        Spend,
        broadcast={
            "rates": [{"currency": "USD", "ts": _t(0), "rate": 1.0}, {"currency": "USD", "ts": _t(5), "rate": 2.0}]
        },
        event_time="ts",
    )
    out = t.run([{"ts": _t(m), "currency": "USD", "amount": 1.0} for m in (1, 5, 9)], key="a")
    assert [r["eur"] for r in out] == [1.0, 2.0, 2.0]
    a = KeyedTester(Alerts, broadcast={"rules": [{"rule_id": "r1", "op": "add", "threshold": 1.0}]})
    assert a.run([{"ts": _t(1), "amount": 2.0}], key="x") == [{"ts": _t(1), "rule": "r1"}]


_ORDERED_RATES = [
    ("USD", _t(1), 0.5),
    ("USD", _t(3), 0.75),
    ("USD", None, 2.0),
    ("GBP", _t(2), 1.25),
    ("GBP", _t(4), None),
]


def _rates_in_order(order: str) -> dict:
    """The rates table once every row applied in ``order`` (by hand: ASC puts a NULL time first,
    DESC and NULLS LAST last; a NULL rate removes its currency)."""
    desc, nulls_last = order.endswith("DESC"), order != "ts"
    timed = sorted((r for r in _ORDERED_RATES if r[1] is not None), key=lambda r: r[1], reverse=desc)
    untimed = [r for r in _ORDERED_RATES if r[1] is None]
    now: dict = {}
    for cur, _ts, rate in timed + untimed if nulls_last else untimed + timed:
        if rate is None:
            now.pop(cur, None)
        else:
            now[cur] = rate
    return now


@pytest.mark.parametrize("order", ["ts DESC", "ts NULLS LAST", "ts"])
def test_keyed_tester_orders_broadcast_rows_by_order_by_too(order):
    """KeyedTester applies a batch's broadcast rows as a query does: by the ``order_by`` columns
    they have, in their directions."""
    now = _rates_in_order(order)
    others = [_rates_in_order(o) for o in ("ts DESC", "ts NULLS LAST", "ts") if o != order]
    assert all(now != o for o in others)  # the data tells the three orders apart
    t = KeyedTester(
        Spend,
        broadcast={"rates": [{"currency": c, "ts": ts, "rate": r} for c, ts, r in _ORDERED_RATES]},
        order_by=order,
    )
    rows = [{"ts": _t(9), "currency": c, "amount": 1.0} for c in ("USD", "GBP")]
    assert [r["eur"] for r in t.run(rows, key="a")] == [now[c] for c in ("USD", "GBP") if c in now]


class RateAsOf(StatefulFunction):
    returns = "rate double"

    def execute(self, e):
        return {"rate": self.ctx.broadcast("rates", as_of=e["at"]).get("USD")}


def test_as_of_of_a_wrong_type_or_on_an_unversioned_input_says_so():
    latest = KeyedTester(RateAsOf, broadcast={"rates": [{"currency": "USD", "rate": 0.5}]})
    with pytest.raises(KeyedSQLError, match=r"'rates' is not versioned \(it has no event_time column\)"):
        latest.run([{"at": _t(1)}], key="a")
    versioned = KeyedTester(
        RateAsOf, broadcast={"rates": [{"currency": "USD", "ts": _t(0), "rate": 0.5}]}, event_time="ts"
    )
    with pytest.raises(KeyedSQLError, match=r"as_of='soon'\): as_of is a datetime or epoch milliseconds"):
        versioned.run([{"ts": _t(1), "at": "soon"}], key="a")
    assert versioned.run([{"ts": _t(2), "at": _t(1)}], key="a") == [{"rate": 0.5}]


# ------------------------------------------------------------------ errors
class _Bad(StatefulFunction):
    returns = "n int"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def on_broadcast(self, name, row):
        self.n += 1  # per-key state: refused

    def execute(self, event):
        return None


class _Writes(StatefulFunction):
    returns = "n int"

    def execute(self, event):
        self.ctx.broadcast("rates")["USD"] = 1.0


@pytest.mark.parametrize(
    "sql, cls, message",
    [
        ("rates => TABLE(bc_rates_x), broadcast => 'fx'", Spend, "broadcast => 'fx' names 'fx'"),
        (
            "rates => TABLE(bc_rates_x), broadcast => 'rates', broadcast_key => 'code'",
            Spend,
            "none of the broadcast_key",
        ),
        ("broadcast => 'payments'", Spend, "every input is a broadcast input"),
        ("rates => TABLE(bc_rates_x), broadcast => 'rates'", _Bad, "must not touch per-key state"),
        ("rates => TABLE(bc_rates_x), broadcast => 'rates'", _Writes, "is read-only here"),
        ("rates => TABLE(bc_rates_x), broadcast_key => 'currency'", Spend, "goes with broadcast =>"),
    ],
)
def test_errors_name_what_is_wrong(spark, kb, sql, cls, message):
    kb.register("bc_err", cls)
    spark.createDataFrame([("a", _t(1), "USD", 1.0)], PAYMENTS).createOrReplaceTempView("bc_payments_x")
    spark.createDataFrame([("USD", _t(0), 1.0)], RATES).createOrReplaceTempView("bc_rates_x")
    with pytest.raises(KeyedSQLError, match=message):
        kb.sql(
            f"SELECT * FROM bc_err(payments => TABLE(bc_payments_x), {sql}, key => 'user_id', order_by => 'ts')"
        ).collect()


def test_a_broadcast_input_above_the_limit_is_refused_naming_size_and_limit(spark, kb):
    spark.createDataFrame([("a", _t(1), "USD", 1.0)], PAYMENTS).createOrReplaceTempView("bc_payments_l")
    spark.createDataFrame([(f"C{i}", _t(0), 1.0) for i in range(5)], RATES).createOrReplaceTempView("bc_rates_l")
    spark.conf.set("spark.keyedsql.broadcastMaxRows", "3")
    try:
        with pytest.raises(
            KeyedSQLError, match=r"broadcast input 'rates' of bc_spend has more than 3 rows.*limit of 3"
        ):
            kb.sql(_query("bc_payments_l", "bc_rates_l")).collect()
    finally:
        spark.conf.unset("spark.keyedsql.broadcastMaxRows")


def test_a_function_reading_a_broadcast_it_was_not_given(spark, kb):
    kb.register("bc_alone", Spend)
    spark.createDataFrame([("a", _t(1), "USD", 1.0)], PAYMENTS).createOrReplaceTempView("bc_payments_n")
    with pytest.raises(KeyedSQLError, match="this query has no broadcast input"):
        kb.sql("SELECT * FROM bc_alone(TABLE(bc_payments_n), key => 'user_id')").collect()


def test_a_stream_on_tws_with_a_broadcast_input_is_refused(spark, tmp_path):
    from conftest import spark_lacks

    if spark_lacks("tws"):
        pytest.skip(spark_lacks("tws"))
    ks = KeyedSQL(spark, engine="tws")
    ks.register("bc_spend", Spend)
    p_dir, r_dir = str(tmp_path / "p"), str(tmp_path / "r")
    _append(spark, [("a", _t(1), "USD", 1.0)], PAYMENTS, p_dir)
    _append(spark, [("USD", _t(0), 1.0)], RATES, r_dir)
    with pytest.raises(KeyedSQLError, match="broadcast inputs on a stream run on engine 'bulk'"):
        ks.run(_query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`"), checkpoint=str(tmp_path / "cp"), output="memory:x")


# ------------------------------------------------------------------ seeding and migration
def test_initial_broadcast_seeds_the_state_and_migrate_state_carries_it(spark, kb, tmp_path):
    """A saved read_state(..., broadcast=) table seeds a new query's broadcast state
    (``initial_broadcast => TABLE(...)``, before its first batch); migrate_state carries the
    broadcast state into the new checkpoint, whose next run converts by it."""
    p_dir, r_dir, p2_dir, r2_dir = (str(tmp_path / d) for d in ("p", "r", "p2", "r2"))
    cp, cp_seeded, cp_migrated = (str(tmp_path / d) for d in ("cp", "cp_seeded", "cp_migrated"))
    rates = [("USD", _t(0), 0.5), ("GBP", _t(0), 2.0), ("USD", _t(10), 0.25)]
    _append(spark, [("a", _t(1), "USD", 4.0)], PAYMENTS, p_dir)
    _append(spark, rates, RATES, r_dir)
    sql = _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`", versioned=True)
    kb.run(sql, checkpoint=cp, output=str(tmp_path / "out"))
    kb.read_state(cp, broadcast="rates").createOrReplaceTempView("bc_saved_rates")
    # a new query: its rates directory has no row yet, the saved state seeds it
    later = [("b", _t(5), "USD", 4.0), ("b", _t(11), "USD", 4.0), ("c", _t(12), "GBP", 1.0)]
    _append(spark, later, PAYMENTS, p2_dir)
    spark.createDataFrame([], RATES).write.parquet(r2_dir)
    seeded = _query(
        f"parquet.`{p2_dir}`",
        f"parquet.`{r2_dir}`",
        versioned=True,
        extra=", initial_broadcast => TABLE(bc_saved_rates)",
    )
    kb.run(seeded, checkpoint=cp_seeded, output=str(tmp_path / "out_seeded"))
    expected = _spend_oracle([(later, rates)], True)
    assert _rows(spark.read.parquet(str(tmp_path / "out_seeded"))) == expected
    # the same saved state given as initial_state (DESIGN: broadcast state is "seedable with
    # INITIAL STATE"): its columns are the broadcast input's key, not the call's: it seeds that input
    as_initial_state = _query(
        f"parquet.`{p2_dir}`", f"parquet.`{r2_dir}`", versioned=True, extra=", initial_state => TABLE(bc_saved_rates)"
    )
    kb.run(as_initial_state, checkpoint=str(tmp_path / "cp_seeded2"), output=str(tmp_path / "out_seeded2"))
    assert _rows(spark.read.parquet(str(tmp_path / "out_seeded2"))) == expected
    # migrate: the broadcast state goes with the keyed state
    kb.migrate_state(cp, cp_migrated)

    def kept(c):
        return sorted((r["currency"], r["rate"]) for r in kb.read_state(c, broadcast="rates").collect())

    assert kept(cp_migrated) == kept(cp) == sorted((c, r) for c, _, r in rates)
    _append(spark, [("a", _t(20), "GBP", 1.0)], PAYMENTS, p_dir)
    kb.run(sql, checkpoint=cp_migrated, output=str(tmp_path / "out_migrated"))
    got = _rows(spark.read.parquet(str(tmp_path / "out_migrated")))
    assert got == [("a", _t(20), 2.0, 4.0)]  # a's total carried (4.0 * 0.5), GBP's rate carried (2.0)


# ------------------------------------------------------------------ processors, timers, several inputs
class SpendFrames(KeyedProcessor):
    """A KeyedProcessor: the key's rows as one frame, each converted at the newest rate, and the
    rate as of the first row's time beside it (``as_of``)."""

    returns = "eur double, first_rate double"

    def process(self, key, rows):
        rates = self.ctx.broadcast("rates")
        first = self.ctx.broadcast("rates", as_of=rows["ts"].min())
        return [
            (round(r.amount * rates[r.currency], 6), first.get(r.currency))
            for r in rows.sort_values("ts").itertuples()
            if r.currency in rates
        ]


def test_a_keyed_processor_reads_the_newest_state_or_as_of_a_time(spark, ks):
    ks.register("bc_frames", SpendFrames)
    payments, rates = _random_batch(random.Random(3), 5, 60)
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments_f")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("bc_rates_f")
    got = sorted(
        (r["user_id"], r["eur"], r["first_rate"])
        for r in ks.sql(
            _query("bc_payments_f", "bc_rates_f", versioned=True).replace("bc_spend", "bc_frames")
        ).collect()
    )
    newest = _rates_after(rates)
    expected = []
    for user in sorted({p[0] for p in payments}):
        mine = sorted((p for p in payments if p[0] == user), key=lambda p: p[1])
        first_ts = mine[0][1]
        for _, _, cur, amount in mine:
            if cur in newest:
                expected.append((user, round(amount * newest[cur], 6), _rate_as_of(rates, cur, first_ts)))
    assert got == sorted(expected)


class RateAtTimer(StatefulFunction):
    """A timer 10 minutes after a key's first payment reads the USD rate as of the timer."""

    returns = "what string, rate double"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.armed = False

    def execute(self, event):
        if not self.armed:
            self.armed = True
            self.ctx.register_timer(event["ts"] + dt.timedelta(minutes=10))
        return ("row", self.ctx.broadcast("rates").get("USD"))

    def on_timer(self, key, timestamp):
        return ("timer", self.ctx.broadcast("rates").get("USD"))


def test_on_timer_reads_the_state_as_of_the_timers_time(spark, kb):
    kb.register("bc_timer", RateAtTimer)
    payments = [("a", _t(1), "USD", 1.0), ("b", _t(7), "USD", 1.0)]
    rates = [("USD", _t(0), 1.0), ("USD", _t(5), 2.0), ("USD", _t(15), 3.0), ("USD", _t(30), 4.0)]
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments_t")
    spark.createDataFrame(rates, RATES).createOrReplaceTempView("bc_rates_t")
    sql = _query("bc_payments_t", "bc_rates_t", versioned=True).replace("bc_spend", "bc_timer")
    got = sorted((r["user_id"], r["what"], r["rate"]) for r in kb.sql(sql).collect())
    # rows as of their own time; timers (at 0:11 and 0:17, fired at end of input) as of theirs
    expected = [("a", "row", 1.0), ("a", "timer", _rate_as_of(rates, "USD", _t(11)))]
    expected += [("b", "row", 2.0), ("b", "timer", _rate_as_of(rates, "USD", _t(17)))]
    assert got == sorted(expected)
    assert expected[1][2] == 2.0 and expected[3][2] == 3.0


class Flagged(StatefulFunction):
    """Two broadcast inputs: a rate per currency and a flag per user."""

    returns = "eur double, flagged boolean"

    def execute(self, event):
        rate = self.ctx.broadcast("rates").get(event["currency"])
        return (None if rate is None else event["amount"] * rate, event["user_id"] in self.ctx.broadcast("flags"))


def test_several_broadcast_inputs_each_by_its_own_key(spark, ks):
    ks.register("bc_flagged", Flagged)
    spark.createDataFrame(
        [("a", _t(1), "USD", 2.0), ("b", _t(2), "GBP", 3.0), ("c", _t(3), "CHF", 1.0)], PAYMENTS
    ).createOrReplaceTempView("bc_payments_s")
    spark.createDataFrame([("USD", _t(0), 0.5), ("GBP", _t(0), 2.0)], RATES).createOrReplaceTempView("bc_rates_s")
    spark.createDataFrame([("b", "chargeback")], "user_id string, reason string").createOrReplaceTempView("bc_flags")
    sql = (
        "SELECT * FROM bc_flagged(payments => TABLE(bc_payments_s), rates => TABLE(bc_rates_s), "
        "flags => TABLE(bc_flags), key => 'user_id', order_by => 'ts', broadcast => 'rates, flags', "
        "broadcast_key => 'currency, user_id')"
    )
    got = sorted((r["user_id"], r["eur"], r["flagged"]) for r in ks.sql(sql).collect())
    assert got == [("a", 1.0, False), ("b", 6.0, True), ("c", None, False)]


class SameInstant(StatefulFunction):
    """Whether a broadcast row's timestamp and the event's are the same value (a user comparing them)."""

    returns = "same boolean"

    def execute(self, event):
        return (self.ctx.broadcast("starts")[event["user_id"]] == event["ts"],)


def test_broadcast_timestamps_are_what_user_code_gets_for_events_whatever_the_drivers_time_zone(spark, kb):
    """Rows are collected by the driver, events read by the workers: both naive UTC, also when
    the driver process runs in another time zone (PySpark's collect gives local time)."""
    import time

    kb.register("bc_same", SameInstant)
    spark.createDataFrame([("a", _t(1), "USD", 1.0)], PAYMENTS).createOrReplaceTempView("bc_payments_tz")
    spark.createDataFrame([("a", _t(1))], "user_id string, at timestamp").createOrReplaceTempView("bc_starts")
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        got = kb.sql(
            "SELECT * FROM bc_same(payments => TABLE(bc_payments_tz), starts => TABLE(bc_starts), "
            "key => 'user_id', broadcast => 'starts')"
        ).collect()
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()
    assert [r["same"] for r in got] == [True]


def test_an_erase_keeps_the_broadcast_state_and_leaves_no_history_behind(spark, kb, tmp_path):
    """DELETE of a key on a checkpoint whose broadcast state was written before the erase (and
    carried since): the keyed history goes, the broadcast state stays readable and in use, and
    the checkpoint does not look half-erased to the next edit."""
    from spark_keyed_sql.state.snapshots import SnapshotStore

    p_dir, r_dir, cp, out = (str(tmp_path / d) for d in ("p", "r", "cp", "out"))
    sql = _query(f"parquet.`{p_dir}`", f"parquet.`{r_dir}`")
    _append(spark, [("USD", _t(0), 0.5)], RATES, r_dir)
    _append(spark, [("a", _t(1), "USD", 2.0), ("b", _t(1), "USD", 4.0)], PAYMENTS, p_dir)
    kb.run(sql, checkpoint=cp, output=out)
    _append(spark, [("a", _t(2), "USD", 2.0)], PAYMENTS, p_dir)  # no new rates: the state is carried
    kb.run(sql, checkpoint=cp, output=out)
    audit = kb.delete_state(cp, where="user_id = 'a'")
    assert audit["keys_matched"] == 1
    assert not SnapshotStore(cp, spark).erased_history_left()
    assert [(r["currency"], r["rate"]) for r in kb.read_state(cp, broadcast="rates").collect()] == [("USD", 0.5)]
    _append(spark, [("a", _t(3), "USD", 2.0), ("b", _t(3), "USD", 2.0)], PAYMENTS, p_dir)
    kb.run(sql, checkpoint=cp, output=out)
    totals = {(r["user_id"], r["ts"]): r["total_eur"] for r in spark.read.parquet(out).collect()}
    assert totals[("a", _t(3))] == 1.0 and totals[("b", _t(3))] == 3.0  # a starts afresh, b goes on


class Blocked(StatefulFunction):
    """A blocklist: a broadcast input of its key column alone, read with ``in``."""

    returns = "ts timestamp, blocked boolean, blocked_so_far int"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.blocked_so_far = 0

    def execute(self, event):
        blocked = event["currency"] in self.ctx.broadcast("blocked")
        self.blocked_so_far += blocked
        return {"ts": event["ts"], "blocked": blocked, "blocked_so_far": self.blocked_so_far}


def test_a_blocklist_of_key_columns_alone_and_a_default_key_past_the_time_column(spark, ks):
    """(a broadcast input of its key column alone was refused: 'it needs a value column'; a
    rates table whose first column is its event time was keyed by the time)"""
    ks.register("bc_blocked", Blocked)
    payments = [("a", _t(1), "USD", 1.0), ("a", _t(2), "RUB", 2.0), ("b", _t(3), "RUB", 3.0), ("b", _t(4), "GBP", 1.0)]
    spark.createDataFrame(payments, PAYMENTS).createOrReplaceTempView("bc_payments_b")
    spark.createDataFrame([("RUB",), ("KPW",)], "currency string").createOrReplaceTempView("bc_blocklist")
    got = ks.sql(
        "SELECT user_id, ts, blocked, blocked_so_far FROM bc_blocked(payments => TABLE(bc_payments_b), "
        "blocked => TABLE(bc_blocklist), key => 'user_id', order_by => 'ts', broadcast => 'blocked')"
    ).collect()
    listed = {"RUB", "KPW"}
    expected, so_far = [], {}
    for user, ts, cur, _ in sorted(payments, key=lambda p: (p[0], p[1])):
        so_far[user] = so_far.get(user, 0) + (cur in listed)
        expected.append((user, ts, cur in listed, so_far[user]))
    assert sorted(tuple(r) for r in got) == expected

    ks.register("bc_spend", Spend)
    spark.createDataFrame(
        [(_t(0), "USD", 0.5), (_t(0), "RUB", 0.01)], "ts timestamp, currency string, rate double"
    ).createOrReplaceTempView("bc_rates_t")
    got = ks.sql(
        "SELECT user_id, eur FROM bc_spend(payments => TABLE(bc_payments_b), rates => TABLE(bc_rates_t), "
        "key => 'user_id', order_by => 'ts', event_time => 'ts', watermark => '1 minute', broadcast => 'rates')"
    ).collect()
    rates = {"USD": 0.5, "RUB": 0.01}
    assert sorted(tuple(r) for r in got) == sorted((u, round(a * rates[c], 6)) for u, _, c, a in payments if c in rates)

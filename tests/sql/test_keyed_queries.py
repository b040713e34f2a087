"""ks.sql semantics against plain-Python oracles: keys, arguments, placement, outer clauses."""

import re

import pytest
from data import SCHEMA, by_key_in_ts_order, make_events
from processors import Spend

from spark_keyed_sql import KeyedSQLError, StatefulFunction


class Running(StatefulFunction):
    """Running count and sum of the event's numeric argument(s), per key."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, event):
        self.n += 1
        self.total += sum(v for k, v in event.items() if isinstance(v, float))
        return {
            "n": self.n,
            "total": round(self.total, 6),
            "key_repr": repr(self.ctx.get_key()),
            "arg_names": ",".join(sorted(event)),
        }


@pytest.fixture(scope="module")
def data(spark, ks):
    rows = make_events(400, per_key=4, seed=21)
    for i, r in enumerate(rows):
        r["region"] = ["north", "south"][i % 2]
        r["user_mixed"] = r["user_id"].upper() if i % 3 == 0 else r["user_id"]
    spark.createDataFrame(
        [tuple(r[c] for c in ("user_id", "value", "amount", "merchant", "ts", "region", "user_mixed")) for r in rows],
        SCHEMA + ", region string, user_mixed string",
    ).createOrReplaceTempView("q_events")
    users = [(f"u{k:06d}", ["gold", "silver"][k % 2]) for k in range(400)]
    spark.createDataFrame(users, "id string, tier string").createOrReplaceTempView("q_users")
    ks.register("running", Running, returns="n bigint, total double, key_repr string, arg_names string")
    ks.register("q_spend", Spend)
    return rows, dict(users)


def oracle(rows, keyf, argf, order=lambda r: r["ts"]):
    out = []
    groups = {}
    for r in sorted(rows, key=order):
        groups.setdefault(keyf(r), []).append(r)
    for k, evs in groups.items():
        n, total = 0, 0.0
        for e in evs:
            n += 1
            total += argf(e)
            out.append((k, n, round(total, 6)))
    return sorted(out, key=repr)


def test_single_key(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT user_id, s.n, s.total FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s ORDER BY ts"
    )
    assert sorted(map(tuple, got.collect()), key=repr) == oracle(rows, lambda r: r["user_id"], lambda r: r["value"])


def _step_views(spark):
    return sorted(t.name for t in spark.catalog.listTables() if t.name.startswith("__ks_"))


def test_a_keyed_statement_leaves_no_view_behind_and_its_frame_still_reads(spark, ks, data):
    """The steps' temp views go once ks.sql's DataFrame (or ks.explain's text) is made: a view
    left behind kept its plan, local data included, for the session's lifetime (thousands of
    statements ran the driver's heap out). The frames read afterwards, twice, as before."""
    rows, _ = data
    before = _step_views(spark)
    expected = oracle(rows, lambda r: r["user_id"], lambda r: r["value"])
    frames = [
        ks.sql(
            "WITH k AS (SELECT user_id, s.n, s.total FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s "
            f"ORDER BY ts) SELECT * FROM k WHERE n >= {i}"
        )
        for i in (1, 3)
    ]
    ks.explain("SELECT user_id, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s ORDER BY ts")
    assert _step_views(spark) == before
    for frame, least in zip(frames, (1, 3)):
        for _ in range(2):
            assert sorted(map(tuple, frame.collect()), key=repr) == [t for t in expected if t[1] >= least]
    # a view made from a keyed select is kept by Spark as SQL text naming the step views: they stay
    ks.sql(
        "CREATE OR REPLACE TEMP VIEW q_kept AS SELECT user_id, s.n, s.total FROM q_events "
        "GROUP BY KEY user_id WITH STATE running(value) AS s ORDER BY ts"
    )
    for _ in range(2):
        assert sorted(map(tuple, spark.sql("SELECT * FROM q_kept").collect()), key=repr) == expected


def test_a_statement_that_fails_to_plan_leaves_no_view_behind(spark, ks, data, tmp_path):
    """Its first keyed select planned (and bound as a view), the second failing; ks.run failing
    after planning (no output given) with a stream view made: none of their views stays."""
    before = _step_views(spark)
    with pytest.raises(KeyedSQLError, match="no_such_function"):
        ks.sql(
            "WITH k AS (SELECT user_id, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s "
            "ORDER BY ts) SELECT user_id, t.* FROM k GROUP BY KEY user_id WITH STATE no_such_function(n) AS t"
        )
    assert _step_views(spark) == before
    spark.range(3).selectExpr("'u' AS user_id", "id AS value", "id AS ts").write.parquet(str(tmp_path / "in"))
    with pytest.raises(KeyedSQLError, match="output="):
        ks.run(
            f"SELECT user_id, s.n FROM parquet.`{tmp_path / 'in'}` GROUP BY KEY user_id WITH STATE running(value) AS s",
            checkpoint=str(tmp_path / "cp"),
        )
    assert _step_views(spark) == before


def test_multi_column_key_gives_tuple(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT user_id, region, s.n, s.total, s.key_repr FROM q_events "
        "GROUP BY KEY user_id, region WITH STATE running(value) AS s ORDER BY ts"
    ).collect()
    exp = oracle(rows, lambda r: (r["user_id"], r["region"]), lambda r: r["value"])
    assert sorted((((r[0], r[1]), r[2], r[3]) for r in got), key=repr) == exp
    assert all(r.key_repr == repr((r.user_id, r.region)) for r in got)


def test_expression_key_unaliased_is_key0(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT key0, n, total FROM q_events GROUP BY KEY lower(user_mixed) WITH STATE running(value) ORDER BY ts"
    )
    assert sorted(map(tuple, got.collect()), key=repr) == oracle(
        rows, lambda r: r["user_mixed"].lower(), lambda r: r["value"]
    )


def test_expression_arguments_and_names(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT user_id, s.n, s.total, s.arg_names FROM q_events "
        "GROUP BY KEY user_id WITH STATE running(value * 2 AS doubled, amount + 1, merchant) AS s ORDER BY ts"
    ).collect()
    exp = oracle(rows, lambda r: r["user_id"], lambda r: r["value"] * 2 + r["amount"] + 1)
    assert sorted(((r[0], r[1], pytest.approx(r[2])) for r in got), key=lambda t: (t[0], t[1])) == sorted(
        exp, key=lambda t: (t[0], t[1])
    )
    assert {r.arg_names for r in got} == {"arg1,doubled,merchant"}


def test_star_passes_every_source_column(ks, data):
    got = ks.sql("SELECT DISTINCT s.arg_names FROM q_events GROUP BY KEY user_id WITH STATE running(*) AS s").collect()
    assert [r[0] for r in got] == ["amount,merchant,region,ts,user_id,user_mixed,value"]


def test_join_in_from_and_passthrough(ks, data):
    rows, tiers = data
    got = ks.sql(
        "SELECT e.user_id, u.tier, s.n, merchant FROM q_events e JOIN q_users u ON e.user_id = u.id "
        "WHERE u.tier = 'gold' GROUP BY KEY e.user_id WITH STATE running(e.value) AS s ORDER BY e.ts"
    ).collect()
    gold = [r for r in rows if tiers[r["user_id"]] == "gold"]
    exp = []
    for u, evs in by_key_in_ts_order(gold).items():
        exp += [(u, "gold", i, e["merchant"]) for i, e in enumerate(evs, 1)]
    assert sorted(map(tuple, got)) == sorted(exp)


def test_cte_and_subquery_placement(ks, data):
    rows, _ = data
    exp = [t for t in oracle(rows, lambda r: r["user_id"], lambda r: r["value"]) if t[1] == 4]
    cte = ks.sql(
        "WITH src AS (SELECT * FROM q_events WHERE value IS NOT NULL), "
        "k AS (SELECT user_id, s.n, s.total FROM src GROUP BY KEY user_id WITH STATE running(value) AS s ORDER BY ts) "
        "SELECT * FROM k WHERE n = 4"
    )
    sub = ks.sql(
        "SELECT * FROM (SELECT user_id, s.n, s.total FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s "
        "ORDER BY ts) t WHERE t.n = 4"
    )
    assert sorted(map(tuple, cte.collect()), key=repr) == exp
    assert sorted(map(tuple, sub.collect()), key=repr) == exp


def test_having_order_limit(ks, data):
    rows, _ = data
    full = oracle(rows, lambda r: r["user_id"], lambda r: r["value"])
    exp = sorted([t for t in full if t[2] > 150], key=lambda t: (-t[2], t[0]))[:7]
    got = ks.sql(
        "SELECT user_id, s.total AS t, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s "
        "ORDER BY ts HAVING t > 150 ORDER BY t DESC, user_id LIMIT 7"
    ).collect()
    assert [(r[0], r[2], r[1]) for r in got] == exp


def test_within_key_order_desc(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT user_id, n, total FROM q_events GROUP BY KEY user_id WITH STATE running(value) ORDER BY ts DESC"
    )
    exp = oracle(rows, lambda r: r["user_id"], lambda r: r["value"], order=lambda r: -r["ts"].timestamp())
    assert sorted(map(tuple, got.collect()), key=repr) == exp


def test_unkeyed_form(ks, data):
    rows, _ = data
    got = ks.sql(
        "SELECT n, key_repr FROM q_events WHERE region = 'north' WITH STATE running(value) ORDER BY ts"
    ).collect()
    north = [r for r in rows if r["region"] == "north"]
    assert sorted(r.n for r in got) == list(range(1, len(north) + 1))
    assert {r.key_repr for r in got} == {"None"}


def test_unkeyed_form_without_order(ks, data):
    """No GROUP BY KEY and no ORDER BY: one global state over the rows in arrival order."""
    rows, _ = data
    got = ks.sql("SELECT s.n, s.total FROM q_events WITH STATE running(value) AS s").collect()
    assert sorted(r.n for r in got) == list(range(1, len(rows) + 1))
    assert max(got, key=lambda r: r.n).total == pytest.approx(sum(r["value"] for r in rows))


def test_keyed_processor_alias_star(ks, data):
    rows, _ = data
    got = {
        r[0]: r
        for r in ks.sql(
            "SELECT user_id, s.* FROM q_events GROUP BY KEY user_id WITH STATE q_spend(amount, merchant, ts) AS s"
        ).collect()
    }
    for u, evs in by_key_in_ts_order(rows).items():
        assert got[u][1] == pytest.approx(sum(e["amount"] for e in evs))
        assert got[u][2] == min(3, len(evs))


def test_explain_keyed(ks, data):
    engine = ks.default_engine
    text = ks.explain(
        "SELECT user_id, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s ORDER BY ts "
        f"OPTIONS (engine = '{engine}')"
    )
    for part in (
        f"WITH STATE running (Running) on engine '{engine}'",
        "keys:      user_id AS user_id",
        "arguments: value AS value",
        "source SQL: SELECT user_id AS `__ks_k0`",
        "outer SQL:",
        f"options:   {{'engine': '{engine}'}}",
    ):
        assert part in text
    df = ks.sql("EXPLAIN KEYED SELECT user_id, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s")
    assert df.columns == ["plan"] and "WITH STATE running" in df.collect()[0][0]


class Labelled(StatefulFunction):
    """A class whose __init__ takes keywords named like register's own parameters."""

    def __init__(self, name, cls="x", **kw):
        super().__init__(**kw)
        self._label = f"{name}/{cls}"
        self.n = 0

    def execute(self, event):
        self.n += 1
        return {"label": self._label, "n": self.n}


def test_register_passes_every_keyword_but_returns_to_init(ks, data):
    """DESIGN: extra kwargs go to the class's __init__, those named name= and cls= included."""
    rows, _ = data
    ks.register("labelled", Labelled, returns="label string, n bigint", name="fraud", cls="v2")
    got = ks.sql("SELECT user_id, label, n FROM q_events GROUP BY KEY user_id WITH STATE labelled(value) ORDER BY ts")
    per_key = {}
    for r in rows:
        per_key[r["user_id"]] = per_key.get(r["user_id"], 0) + 1
    expected = sorted((u, "fraud/v2", i) for u, c in per_key.items() for i in range(1, c + 1))
    assert sorted(map(tuple, got.collect())) == expected


@pytest.mark.parametrize("written", ["ts", "`ts`", "q_events.ts"])
def test_an_order_by_column_also_selected_is_shipped_once(ks, data, written):
    """ORDER BY ts with ts passed through: the column travels through the shuffle once (however it
    is written), and every row still carries its own ts."""
    rows, _ = data
    q = (
        f"SELECT user_id, {written} AS t, s.n FROM q_events GROUP BY KEY user_id WITH STATE running(value) AS s "
        "ORDER BY ts"
    )
    source = [line for line in ks.explain(q).splitlines() if "__ks_k0" in line][0]
    assert len(re.findall(r"\bts\b", source)) == 1, source
    exp = []
    for u, evs in by_key_in_ts_order(rows).items():
        exp += [(u, e["ts"], i) for i, e in enumerate(evs, 1)]
    assert sorted(map(tuple, ks.sql(q).collect())) == sorted(exp)


@pytest.mark.parametrize("written", ["user_id", "`user_id`"])
def test_a_key_under_another_name_with_its_column_passed_through(ks, data, written):
    """GROUP BY KEY user_id AS uid, and user_id selected too: both columns, the same values."""
    rows, _ = data
    got = ks.sql(
        f"SELECT uid, {written}, s.n FROM q_events GROUP BY KEY user_id AS uid WITH STATE running(value) AS s "
        "ORDER BY ts"
    ).collect()
    exp = []
    for u, evs in by_key_in_ts_order(rows).items():
        exp += [(u, u, i) for i in range(1, len(evs) + 1)]
    assert sorted(map(tuple, got)) == sorted(exp)

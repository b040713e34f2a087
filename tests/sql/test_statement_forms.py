"""Statement forms around a keyed select, each against a plain-Python oracle: struct fields as
keys, arguments, within-key order and pass-through (nested JSON rows); CTEs an INSERT, a CREATE
TABLE ... AS or a subquery defines; a join hint kept on the source; and the clauses that would
apply to the keyed result (QUALIFY, WINDOW, DISTRIBUTE / SORT / CLUSTER BY) refused with their
position rather than dropped."""

from __future__ import annotations

import pytest

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.sql.errors import KeyedQueryError


class RunningSum(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, e):
        self.n += 1
        self.total += e["amount"]
        return {"n": self.n, "total": self.total}


ROWS = [  # (user, amount, seq, country)
    ("u1", 5.0, 3, "DE"),
    ("u2", 1.5, 1, "FR"),
    ("u1", 2.0, 1, "DE"),
    ("u2", 4.0, 2, "FR"),
    ("u1", 1.0, 2, "NL"),
    ("u3", 7.5, 9, "IT"),
]


def _oracle(rows):
    """(user, seq, n, total) per row: each user's rows in seq order, counted and summed."""
    out, state = [], {}
    for user, amount, seq, _ in sorted(rows, key=lambda r: (r[0], r[2])):
        n, total = state.get(user, (0, 0.0))
        state[user] = (n + 1, total + amount)
        out.append((user, seq, n + 1, total + amount))
    return sorted(out)


@pytest.fixture(scope="module")
def forms(spark, ks_auto):
    ks_auto.register("sf_sum", RunningSum, returns="n bigint, total double")
    spark.createDataFrame(
        [((u, s, c), a) for u, a, s, c in ROWS],
        "payload struct<user_id: string, seq: int, country: string>, amount double",
    ).createOrReplaceTempView("sf_nested")
    spark.createDataFrame(ROWS, "user_id string, amount double, seq int, country string").createOrReplaceTempView(
        "sf_flat"
    )
    return ks_auto


def test_struct_fields_as_key_order_and_pass_through(spark, forms):
    got = forms.sql(
        "SELECT uid, payload.seq AS seq, payload.country AS country, s.n, s.total FROM sf_nested e "
        "GROUP BY KEY e.payload.user_id AS uid WITH STATE sf_sum(amount) AS s ORDER BY payload.seq"
    ).collect()
    assert sorted((r.uid, r.seq, r.n, r.total) for r in got) == _oracle(ROWS)
    country = {(u, s): c for u, _, s, c in ROWS}
    assert all(r.country == country[(r.uid, r.seq)] for r in got)


def test_nested_struct_fields_through_a_from_alias(spark, forms):
    spark.createDataFrame(
        [((u, (c, s)), a) for u, a, s, c in ROWS],
        "payload struct<user_id: string, geo: struct<country: string, seq: int>>, amount double",
    ).createOrReplaceTempView("sf_nested_deep")
    got = forms.sql(
        "SELECT uid, e.payload.geo.seq, e.payload.geo.country, s.n, s.total FROM sf_nested_deep e "
        "GROUP BY KEY e.payload.user_id AS uid WITH STATE sf_sum(amount) AS s ORDER BY e.payload.geo.seq"
    ).collect()
    assert sorted((r.uid, r.seq, r.n, r.total) for r in got) == _oracle(ROWS)
    country = {(u, s): c for u, _, s, c in ROWS}
    assert all(r.country == country[(r.uid, r.seq)] for r in got)


def test_a_struct_field_as_an_argument_and_an_unaliased_key(spark, forms):
    spark.createDataFrame(
        [((u, a), s) for u, a, s, _ in ROWS], "payload struct<user_id: string, amount: double>, seq int"
    ).createOrReplaceTempView("sf_nested_amount")
    got = forms.sql(
        "SELECT user_id, seq, s.n, s.total FROM sf_nested_amount GROUP BY KEY payload.user_id "
        "WITH STATE sf_sum(payload.amount AS amount) AS s ORDER BY seq"
    ).collect()
    assert sorted((r.user_id, r.seq, r.n, r.total) for r in got) == _oracle(ROWS)


KEYED = "SELECT user_id, seq, s.n, s.total FROM c GROUP BY KEY user_id WITH STATE sf_sum(amount) AS s ORDER BY seq"


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO {t} WITH c AS (SELECT * FROM sf_flat WHERE amount < 7) " + KEYED,
        "WITH c AS (SELECT * FROM sf_flat WHERE amount < 7) INSERT INTO {t} " + KEYED,
        "CREATE TABLE {t} USING parquet AS WITH c AS (SELECT * FROM sf_flat WHERE amount < 7) " + KEYED,
        "INSERT INTO {t} SELECT * FROM (WITH c AS (SELECT * FROM sf_flat WHERE amount < 7) " + KEYED + ") r",
        # an inner WITH naming c again is the c the keyed select reads
        "WITH c AS (SELECT * FROM sf_flat) INSERT INTO {t} SELECT * FROM "
        "(WITH c AS (SELECT * FROM sf_flat WHERE amount < 7) " + KEYED + ") r",
    ],
    ids=["insert-with", "with-insert", "ctas-with", "subquery-with", "shadowed"],
)
def test_ctes_an_insert_a_create_or_a_subquery_defines(spark, forms, statement):
    table = f"sf_out_{abs(hash(statement)) % 10**8}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    if not statement.startswith("CREATE"):
        spark.sql(f"CREATE TABLE {table} (user_id string, seq int, n bigint, total double) USING parquet")
    try:
        forms.sql(statement.format(t=table))
        got = sorted(tuple(r) for r in spark.table(table).collect())
        assert got == _oracle([r for r in ROWS if r[1] < 7])
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_join_hint_goes_to_the_source_an_output_hint_to_the_result(spark, forms):
    spark.createDataFrame([("u1", "gold"), ("u2", "red")], "user_id string, tier string").createOrReplaceTempView(
        "sf_tiers"
    )
    sql = (
        "SELECT /*+ BROADCAST(t), COALESCE(1) */ user_id, seq, s.n, s.total FROM sf_flat f JOIN sf_tiers t "
        "USING (user_id) "
        "GROUP BY KEY user_id WITH STATE sf_sum(amount) AS s ORDER BY seq"
    )
    df = forms.sql(sql)
    assert sorted(tuple(r) for r in df.collect()) == _oracle([r for r in ROWS if r[0] in ("u1", "u2")])
    plan = forms.explain(sql).splitlines()
    source = next(line for line in plan if line.strip().startswith("source SQL:"))
    outer = next(line for line in plan if line.strip().startswith("outer SQL:"))
    assert "/*+ BROADCAST(t) */" in source and "COALESCE" not in source  # a join hint: the source's
    assert "/*+ COALESCE(1) */" in outer and "BROADCAST" not in outer  # the output's partitions: the result's
    assert df.rdd.getNumPartitions() == 1


@pytest.mark.parametrize(
    "clause, tail",
    [
        ("QUALIFY", "QUALIFY row_number() OVER (PARTITION BY user_id ORDER BY seq DESC) = 1"),
        ("WINDOW", "WINDOW w AS (PARTITION BY user_id)"),
        ("DISTRIBUTE BY", "DISTRIBUTE BY user_id"),
        ("SORT BY", "SORT BY seq"),
        ("CLUSTER BY", "CLUSTER BY user_id"),
    ],
)
def test_clauses_over_the_keyed_result_are_refused_not_dropped(forms, clause, tail):
    head = "SELECT user_id, seq, s.n FROM sf_flat GROUP BY KEY user_id WITH STATE sf_sum(amount) AS s ORDER BY seq\n"
    with pytest.raises(KeyedQueryError, match=rf"^line 2, column \d+: {clause} on the select of GROUP BY KEY") as e:
        forms.sql(head + tail)
    assert "SELECT * FROM (<the keyed select>) r" in str(e.value)


def _per_key(rows, key=lambda r: r[0]):
    """(key..., n, total) per row, each key's rows in seq order: the table-function form's rows."""
    out, state = [], {}
    for r in sorted(rows, key=lambda r: (key(r), r[2])):
        n, total = state.get(key(r), (0, 0.0))
        state[key(r)] = (n + 1, total + r[1])
        k = key(r) if isinstance(key(r), tuple) else (key(r),)
        out.append((*k, n + 1, total + r[1]))
    return sorted(out)


@pytest.mark.parametrize(
    "call",
    [
        "sf_sum(TABLE(sf_flat) PARTITION BY user_id ORDER BY seq)",
        "sf_sum(TABLE sf_flat PARTITION BY user_id ORDER BY (seq ASC))",
        "sf_sum(TABLE sf_flat, key => 'user_id', order_by => 'seq')",
        "sf_sum(rows => TABLE(SELECT * FROM sf_flat) PARTITION BY user_id ORDER BY seq)",
        "sf_sum(TABLE(sf_flat), key => 'user_id', order_by => 'sf_flat.seq')",
    ],
)
def test_sparks_table_argument_spellings_give_key_and_order(forms, call):
    got = forms.sql(f"SELECT * FROM {call}").collect()
    assert sorted((r.user_id, r.n, r.total) for r in got) == _per_key(ROWS)


def test_partition_by_several_columns_and_interval_arguments(spark, forms):
    got = forms.sql("SELECT * FROM sf_sum(TABLE(sf_flat) PARTITION BY (user_id, country) ORDER BY seq)").collect()
    assert sorted((r.user_id, r.country, r.n, r.total) for r in got) == _per_key(ROWS, key=lambda r: (r[0], r[3]))
    spark.sql("SELECT *, timestamp_seconds(seq * 60) AS ts FROM sf_flat").createOrReplaceTempView("sf_timed")
    got = forms.sql(  # (a one-shot batch: the watermark and the TTL change nothing here, but are taken)
        "SELECT * FROM sf_sum(TABLE(sf_timed) PARTITION BY user_id ORDER BY seq, event_time => 'ts', "
        "watermark => INTERVAL 1 HOUR 30 MINUTES, ttl => INTERVAL 7 DAYS)"
    ).collect()
    assert sorted((r.user_id, r.n, r.total) for r in got) == _per_key(ROWS)


@pytest.mark.parametrize(
    "call, message",
    [
        ("sf_sum(TABLE(sf_flat) PARTITION BY user_id, key => 'user_id')", r"'key' given twice; PARTITION BY"),
        ("sf_sum(key => 'user_id', rows => TABLE(sf_flat) PARTITION BY user_id)", r"key given twice: key => '...' and"),
        (
            "sf_sum(TABLE(sf_flat) PARTITION BY user_id, initial_state => TABLE(sf_flat) PARTITION BY user_id)",
            r"initial_state is read whole",
        ),
        ("sf_sum(TABLE(sf_flat) PARTITION BY user_id, state_partitions => -1)", r"state_partitions .* got -1"),
        ("sf_sum(TABLE(sf_flat) PARTITION BY upper(user_id))", r"PARTITION BY on TABLE\(...\) takes columns"),
        ("sf_sum(TABLE(sf_flat), key => 'user_id', order_by => 'abs(seq)')", r"ABS\(seq\) is not a column of"),
        ("sf_sum(TABLE(sf_flat), key => 'user_id', watermark => 10)", r"such as '10 minutes' or INTERVAL"),
    ],
)
def test_table_argument_mistakes_are_named(forms, call, message):
    with pytest.raises(KeyedQueryError, match=message):
        forms.sql(f"SELECT * FROM {call}")


def test_with_single_partition_is_one_state_for_every_row(forms):
    got = forms.sql("SELECT * FROM sf_sum(TABLE(sf_flat) WITH SINGLE PARTITION ORDER BY (seq, user_id))").collect()
    assert [c for c in got[0].asDict()] == ["n", "total"]  # no key columns: unkeyed
    rows = sorted(ROWS, key=lambda r: (r[2], r[0]))
    assert sorted((r.n, r.total) for r in got) == [(i + 1, sum(r[1] for r in rows[: i + 1])) for i in range(len(rows))]

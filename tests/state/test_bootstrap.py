"""Read a checkpoint's state, bootstrap a new query from it, continue: equals an uninterrupted
run. Bootstrapping onto a checkpoint with state is refused. TTL through SQL expires state."""

import re

import pytest
from data import by_key_in_ts_order, clock_moved, make_events, write_parquet
from processors import Spend

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.sql.errors import KeyedQueryError
from spark_keyed_sql.state.checkpoint import CheckpointError


class History(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.seen = {}  # {merchant: [values]}

    def execute(self, e):
        self.count += 1
        self.seen.setdefault(e["merchant"], []).append(e["value"])
        return {"count": self.count, "distinct": len(self.seen), "last_total": round(sum(self.seen[e["merchant"]]), 6)}


def test_read_bootstrap_continue_equals_uninterrupted(spark, ks, tmp_path):
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    ks.register("spend_boot2", Spend)
    a, b = make_events(60, 2, seed=41), make_events(60, 2, seed=42, start_second=90_000)
    write_parquet(spark, a, str(tmp_path / "a"))
    write_parquet(spark, b, str(tmp_path / "b"))
    q = "SELECT user_id, s.* FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {fn} AS s ORDER BY ts {extra}"
    for fn in ("history(value, merchant)", "spend_boot2(amount, merchant, ts)"):
        name = fn.split("(")[0]
        ks.run(
            q.format(src=tmp_path / "a", fn=fn, extra=""),
            checkpoint=str(tmp_path / f"cp1_{name}"),
            output=str(tmp_path / f"o1_{name}"),
        )
        ks.read_state(str(tmp_path / f"cp1_{name}")).createOrReplaceTempView(f"saved_{name}")
        ks.run(
            q.format(src=tmp_path / "b", fn=fn, extra=f"INITIAL STATE FROM saved_{name}"),
            checkpoint=str(tmp_path / f"cp2_{name}"),
            output=str(tmp_path / f"o2_{name}"),
        )
        continued = sorted(map(tuple, spark.read.parquet(str(tmp_path / f"o2_{name}")).collect()), key=repr)
        # the oracle: plain Python over a then b, keeping only the rows b produced
        expected = []
        for u, evs in by_key_in_ts_order(a + b).items():
            if name == "history":
                count, seen = 0, {}
                for e in evs:
                    count += 1
                    seen.setdefault(e["merchant"], []).append(e["value"])
                    if e in b:
                        expected.append((u, count, len(seen), round(sum(seen[e["merchant"]]), 6)))
            else:
                b_rows = [e for e in evs if e in b]
                if b_rows:
                    per = {}
                    for e in evs:
                        per[e["merchant"]] = per.get(e["merchant"], 0.0) + e["amount"]
                    top = max(per.items(), key=lambda kv: (kv[1], kv[0]))
                    expected.append((u, sum(e["amount"] for e in evs), min(3, len(evs)), top[0], top[1]))
        assert len(continued) == len(expected)
        if name == "history":
            assert continued == sorted(expected, key=repr)
        else:
            got = {r[0]: r for r in continued}
            for e in expected:
                g = got[e[0]]
                assert g[1] == pytest.approx(e[1]) and g[2:4] == e[2:4] and g[4] == pytest.approx(e[4])


def test_bootstrap_onto_existing_state_is_refused(spark, ks, tmp_path):
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    write_parquet(spark, make_events(10, 1, seed=43), str(tmp_path / "a"))
    sql = (
        f"SELECT user_id, s.count FROM parquet.`{tmp_path}/a` GROUP BY KEY user_id "
        "WITH STATE history(value, merchant) AS s"
    )
    ks.run(sql, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "o"))
    ks.read_state(str(tmp_path / "cp")).createOrReplaceTempView("saved_refuse")
    with pytest.raises(
        CheckpointError, match="already holds state of history that INITIAL STATE FROM saved_refuse did not seed"
    ):
        ks.run(sql + " INITIAL STATE FROM saved_refuse", checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "o"))


def seeded_counts(seed: dict, batches: list) -> list:
    """The oracle of a seeded count: each key's count starts at its seed (or 0) and counts every
    row once, batch after batch; one (key, count) per row."""
    expected, counts = [], dict(seed)
    for rows in batches:
        for u, evs in by_key_in_ts_order(rows).items():
            for _ in evs:
                counts[u] = counts.get(u, 0) + 1
                expected.append((u, counts[u]))
    return expected


def test_seeded_query_run_again_continues(spark, ks, tmp_path):
    """The same query with the same INITIAL STATE FROM, run incrementally: the seed applies once
    (at the checkpoint's first batch), later runs continue; another seed source is refused."""
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    seed = {"u000001": 10, "u000003": 5}  # count only; seen starts empty
    spark.createDataFrame(list(seed.items()), "user_id string, count bigint").createOrReplaceTempView("seed_rerun")
    spark.createDataFrame([("u000001", 99)], "user_id string, count bigint").createOrReplaceTempView("seed_other")
    src, cp, out = tmp_path / "in", str(tmp_path / "cp"), str(tmp_path / "o")
    sql = (
        f"SELECT user_id, s.count FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE history(value, merchant) AS s ORDER BY ts INITIAL STATE FROM seed_rerun"
    )
    batches = [make_events(4, 1, seed=45), make_events(4, 2, seed=46, start_second=90_000)]
    for rows in batches:
        write_parquet(spark, rows, str(src))
        ks.run(sql, checkpoint=cp, output=out)
    expected = seeded_counts(seed, batches)
    assert sorted(map(tuple, spark.read.parquet(out).collect())) == sorted(expected)
    with pytest.raises(
        CheckpointError, match="was seeded from INITIAL STATE FROM seed_rerun; this query seeds history from seed_other"
    ):
        ks.run(sql.replace("seed_rerun", "seed_other"), checkpoint=cp, output=out)


def test_seeded_from_keyed_state_run_again_continues(spark, ks, tmp_path):
    """DESIGN: "the same query with the same INITIAL STATE FROM run again on the checkpoint it
    seeded simply continues", the seed read from another checkpoint's keyed_state(...) too (its
    view's name once came from a counter, so a second run looked like another seed)."""
    from keyed_functions import Count

    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    ks.register("old_count", Count, returns="n bigint")
    old_src, old_cp = tmp_path / "old_in", str(tmp_path / "old_cp")
    old_rows = make_events(3, 2, seed=47)
    write_parquet(spark, old_rows, str(old_src))
    ks.run(
        f"SELECT user_id, n FROM parquet.`{old_src}` GROUP BY KEY user_id WITH STATE old_count(value) ORDER BY ts",
        checkpoint=old_cp,
        output=str(tmp_path / "old_out"),
    )
    ks.sql("SELECT 1")  # (another statement between the runs, as in any session)
    src, cp, out = tmp_path / "in", str(tmp_path / "cp"), str(tmp_path / "o")
    sql = (
        f"SELECT user_id, s.count FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE history(value, merchant) AS s ORDER BY ts "
        f"INITIAL STATE FROM (SELECT user_id, n AS count FROM keyed_state('{old_cp}'))"
    )
    batches = [make_events(4, 1, seed=48), make_events(4, 2, seed=49, start_second=90_000)]
    for rows in batches:
        write_parquet(spark, rows, str(src))
        ks.run(sql, checkpoint=cp, output=out)
    old_counts = {u: len(evs) for u, evs in by_key_in_ts_order(old_rows).items()}  # the seed
    expected = seeded_counts(old_counts, batches)
    assert sorted(map(tuple, spark.read.parquet(out).collect())) == sorted(expected)


def test_initial_state_from_a_cte(spark, ks, tmp_path):
    """INITIAL STATE FROM <a CTE of the statement>: read as a batch, under ks.sql and ks.run."""
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    seed = {"u000001": 10, "u000002": 5}
    spark.createDataFrame(list(seed.items()), "user_id string, count bigint").createOrReplaceTempView("seed_base")
    src = tmp_path / "in"
    rows = make_events(4, 2, seed=50)
    write_parquet(spark, rows, str(src))
    sql = (
        "WITH seed AS (SELECT user_id, count * 2 AS count FROM seed_base) "
        f"SELECT user_id, s.count FROM parquet.`{src}` GROUP BY KEY user_id "
        "WITH STATE history(value, merchant) AS s ORDER BY ts INITIAL STATE FROM seed"
    )
    expected = seeded_counts({u: 2 * c for u, c in seed.items()}, [rows])
    assert sorted(map(tuple, ks.sql(sql).collect())) == sorted(expected)
    out = str(tmp_path / "o")
    ks.run(sql, checkpoint=str(tmp_path / "cp"), output=out)
    assert sorted(map(tuple, spark.read.parquet(out).collect())) == sorted(expected)


def test_bootstrap_column_mismatch_is_named(spark, ks, tmp_path):
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    spark.createDataFrame([("u000001", 3, 1)], "user_id string, count bigint, colour bigint").createOrReplaceTempView(
        "bad_boot"
    )
    spark.createDataFrame(
        [("u000001", 1.0, "m", 1)], "user_id string, value double, merchant string, ts bigint"
    ).createOrReplaceTempView("boot_src")
    sql = "SELECT * FROM boot_src GROUP BY KEY user_id WITH STATE history(value, merchant)\nINITIAL STATE FROM bad_boot"
    # said when the statement is planned (ks.sql, before any job), naming where the seed is
    with pytest.raises(KeyedQueryError) as info:
        ks.sql(sql)
    assert re.search(r"column\(s\) \['colour'\] are not state attributes of History \(count, seen\)", str(info.value))
    assert (info.value.line, info.value.col) == (2, sql.splitlines()[1].index("bad_boot") + 1), str(info.value)


def test_ttl_clause_expires_state_between_runs(spark, ks, tmp_path):
    ks.register("history", History, returns="count bigint, distinct bigint, last_total double")
    rows = make_events(5, 1, seed=44)
    write_parquet(spark, rows, str(tmp_path / "in"))
    sql = (
        f"SELECT user_id, s.count FROM parquet.`{tmp_path}/in` GROUP BY KEY user_id "
        "WITH STATE history(value, merchant) AS s ORDER BY ts TTL '1 hour'"
    )
    cp, out = str(tmp_path / "cp"), str(tmp_path / "out")
    ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, rows, str(tmp_path / "in"))  # same keys again, soon after: state still alive
    ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, rows, str(tmp_path / "in"))  # two hours later (processing time): every key starts over
    with clock_moved(spark, hours=2):
        ks.run(sql, checkpoint=cp, output=out)
    counts = sorted(r["count"] for r in spark.read.parquet(out).collect())
    assert counts == sorted([1] * 5 + [2] * 5 + [1] * 5)  # run 2 continues, run 3 starts over


class Labelled(StatefulFunction):
    """The contract's UserSessionFunction with a text attribute beside the numbers (none annotated)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.session_count = 0
        self.total_value = 0.0
        self.label = ""

    def execute(self, e):
        self.session_count += 1
        self.total_value += e["value"]
        self.label += "x"
        return {"session_count": self.session_count, "total_value": self.total_value, "label": self.label}


def test_an_ordinary_table_seeds_unannotated_attributes_text_included(spark, ks):
    """INITIAL STATE FROM a table of plain values: numbers for the numbers, plain text for a str
    attribute ('ab', 'two words'), read_state's JSON text too ('"cd"'). Plain text was refused:
    'must hold the attribute's JSON encoding'."""
    ks.register("labelled", Labelled, returns="session_count bigint, total_value double, label string")
    spark.createDataFrame(
        [("a", 1.5, 1), ("b", 2.0, 2), ("c", 1.0, 3), ("d", 4.0, 4)], "user_id string, value double, ts bigint"
    ).createOrReplaceTempView("lab_src")
    seeds = {"a": (5, 10.0, "ab"), "b": (1, 0.5, "two words"), "c": (2, 1.0, '"cd"')}
    spark.createDataFrame(
        [(u, *s) for u, s in seeds.items()], "user_id string, session_count bigint, total_value double, label string"
    ).createOrReplaceTempView("lab_seed")
    got = ks.sql(
        "SELECT user_id, s.* FROM lab_src GROUP BY KEY user_id WITH STATE labelled(value) AS s ORDER BY ts "
        "INITIAL STATE FROM lab_seed"
    ).collect()
    start = {"a": (5, 10.0, "ab"), "b": (1, 0.5, "two words"), "c": (2, 1.0, "cd")}
    expected = []
    for user, value in [("a", 1.5), ("b", 2.0), ("c", 1.0), ("d", 4.0)]:
        n, total, label = start.get(user, (0, 0.0, ""))
        expected.append((user, n + 1, total + value, label + "x"))
    assert sorted(tuple(r) for r in got) == expected

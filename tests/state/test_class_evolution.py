"""A class changed between runs of one checkpoint: stored state reaches the attribute / state
variable of the same name (DESIGN.md, "Evolving a class on restart"), on every engine, through
``ks.run`` twice, ``ks.start`` restarted and ``INITIAL STATE FROM``. Each expected output is an
oracle in plain Python: the old class's state carried by hand, name by name."""

import json

import pytest
from pyspark.sql import types as T

from spark_keyed_sql import KeyedProcessor, ListState, MapState, StatefulFunction, ValueState
from spark_keyed_sql.state.evolution import StateEvolutionError, StoredField, compare, widens

# ---------------------------------------------------------------- the rule (no Spark)


def test_widening_follows_sparks_safe_up_casts():
    for old, new in [
        (T.IntegerType(), T.LongType()),
        (T.FloatType(), T.DoubleType()),
        (T.IntegerType(), T.DoubleType()),
        (T.ByteType(), T.ShortType()),
        (T.IntegerType(), T.DecimalType(12, 2)),
        (T.DecimalType(5, 2), T.DecimalType(8, 3)),
        (T.DateType(), T.TimestampType()),
        (T.ArrayType(T.IntegerType()), T.ArrayType(T.LongType())),
        (T.MapType(T.StringType(), T.IntegerType()), T.MapType(T.StringType(), T.DoubleType())),
        (
            T.StructType([T.StructField("a", T.IntegerType())]),
            T.StructType([T.StructField("a", T.LongType())]),
        ),
    ]:
        assert widens(old, new), (old, new)
    for old, new in [
        (T.LongType(), T.IntegerType()),
        (T.DoubleType(), T.FloatType()),
        (T.IntegerType(), T.StringType()),  # Spark's up-cast, but another Python value
        (T.LongType(), T.TimestampType()),
        (T.TimestampType(), T.TimestampNTZType()),
        (T.DoubleType(), T.DecimalType(38, 10)),
        (T.LongType(), T.DecimalType(10, 0)),
        (T.StringType(), T.IntegerType()),
        (
            T.StructType([T.StructField("a", T.IntegerType())]),
            T.StructType([T.StructField("b", T.IntegerType())]),
        ),
    ]:
        assert not widens(old, new), (old, new)


def test_the_error_is_importable_from_the_package():
    import spark_keyed_sql

    assert spark_keyed_sql.StateEvolutionError is StateEvolutionError
    assert issubclass(StateEvolutionError, spark_keyed_sql.KeyedSQLError)


def test_compare_maps_by_name_and_refuses_a_narrowing():
    stored = [StoredField("a", T.IntegerType()), StoredField("b", T.StringType(), encoded=True)]
    current = [
        StoredField("n", T.LongType()),
        StoredField("b", T.StringType(), encoded=True),
        StoredField("a", T.LongType()),
    ]
    change = compare("fn", stored, current, "state attribute")
    assert change.added == ["n"] and change.removed == [] and change.reordered
    assert change.widened == {"a": (T.IntegerType(), T.LongType())}
    with pytest.raises(StateEvolutionError, match=r"fn: state attribute 'a' is stored as bigint .* declares int.*"):
        compare("fn", current, stored, "state attribute")
    # an un-annotated attribute (its JSON) that gains an annotation is another kind of column
    with pytest.raises(StateEvolutionError, match=r"'b' is stored as un-annotated .* declares string"):
        compare("fn", stored, [StoredField("b", T.StringType())], "state attribute")
    # a ValueState that became a ListState
    with pytest.raises(StateEvolutionError, match=r"ValueState<int> and the class now declares ListState<int>"):
        compare(
            "fn",
            [StoredField("v", T.IntegerType(), kind="value")],
            [StoredField("v", T.IntegerType(), kind="list")],
            "state variable",
        )


# ---------------------------------------------------------------- attribute state


class ShopV1(StatefulFunction):
    visits: "integer"  # noqa: F821 - a DDL type: int (Python's int is bigint)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.email = ""
        self.spent = 0.0
        self.visits = 0
        self.tags = []

    def execute(self, e):
        self.email = f"{self.ctx.get_key()}@example.com"
        self.spent += e["amount"]
        self.visits += 1
        self.tags.append(e["tag"])
        return {"out": f"{self.visits}|{self.spent}|{','.join(self.tags)}"}


class ShopV2(StatefulFunction):
    """ShopV1 with ``refunds`` added first, ``note`` in the middle, ``last`` last, ``email``
    removed, the rest reordered and ``visits`` widened from int to bigint."""

    refunds: float
    visits: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.refunds = 0.5
        self.visits = 0
        self.note = "new"
        self.tags = []
        self.spent = 0.0
        self.last = [7]

    def execute(self, e):
        self.visits += 1
        self.spent += e["amount"]
        self.tags.append(e["tag"])
        out = f"{self.refunds}|{self.visits}|{self.note}|{self.spent}|{','.join(self.tags)}|{self.last}"
        self.refunds += 1.0
        self.note += "!"
        self.last.append(len(self.tags))
        return {"out": out}


class ShopBad(ShopV1):
    visits: str  # int -> string: not a widening

    def __init__(self, **kw):
        super().__init__(**kw)
        self.visits = ""


def shop_oracle(first, second):
    """Plain Python: V1 over ``first``, then each key's V1 attributes carried to V2 by name."""
    v1, out1 = {}, []
    for k, _, amount, tag in first:
        s = v1.setdefault(k, {"email": "", "spent": 0.0, "visits": 0, "tags": []})
        s["email"], s["spent"], s["visits"] = f"{k}@example.com", s["spent"] + amount, s["visits"] + 1
        s["tags"].append(tag)
        out1.append((k, f"{s['visits']}|{s['spent']}|{','.join(s['tags'])}"))
    v2, out2 = {}, []
    for k, _, amount, tag in second:
        if k not in v2:
            old = v1.get(k, {"spent": 0.0, "visits": 0, "tags": []})
            v2[k] = {"refunds": 0.5, "note": "new", "last": [7], **{n: old[n] for n in ("spent", "visits", "tags")}}
        s = v2[k]
        s["visits"] += 1
        s["spent"] += amount
        s["tags"].append(tag)
        out2.append((k, f"{s['refunds']}|{s['visits']}|{s['note']}|{s['spent']}|{','.join(s['tags'])}|{s['last']}"))
        s["refunds"] += 1.0
        s["note"] += "!"
        s["last"].append(len(s["tags"]))
    return out1, out2, v2


FIRST = [("a", 0, 1.25, "x"), ("a", 1, 2.0, "y"), ("b", 2, 4.0, "z")]
SECOND = [("a", 3, 8.0, "w"), ("c", 4, 0.5, "v"), ("b", 5, 1.0, "u"), ("a", 6, 2.0, "t")]
SHOP_SCHEMA = "k string, seq int, amount double, tag string"


def _shop_sql(src):
    return f"SELECT k, out FROM parquet.`{src}` GROUP BY KEY k WITH STATE shop_evolved(amount, tag) ORDER BY seq"


def _rows(spark, path):
    return sorted((r.k, r.out) for r in spark.read.parquet(path).collect())


def test_attributes_by_name_across_ks_run(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    out1, out2, state = shop_oracle(FIRST, SECOND)
    spark.createDataFrame(FIRST, SHOP_SCHEMA).write.parquet(src)
    ks.register("shop_evolved", ShopV1, returns="out string")
    ks.run(_shop_sql(src), checkpoint=cp, output=out)
    assert _rows(spark, out) == sorted(out1)
    spark.createDataFrame(SECOND, SHOP_SCHEMA).write.mode("append").parquet(src)
    ks.register("shop_evolved", ShopV2, returns="out string")
    ks.run(_shop_sql(src), checkpoint=cp, output=out)
    assert _rows(spark, out) == sorted(out1 + out2)
    stored = ks.read_state(cp)
    assert "email" not in stored.columns  # removed: dropped
    got = {r.k: r for r in stored.collect()}
    for k, s in state.items():  # the keys run by V2: what they hold now
        assert got[k].visits == s["visits"] and got[k].refunds == s["refunds"]


def test_an_incompatible_type_change_is_refused_at_start_and_the_checkpoint_kept(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    spark.createDataFrame(FIRST, SHOP_SCHEMA).write.parquet(src)
    ks.register("shop_evolved", ShopV1, returns="out string")
    ks.run(_shop_sql(src), checkpoint=cp, output=out)
    spark.createDataFrame(SECOND, SHOP_SCHEMA).write.mode("append").parquet(src)
    ks.register("shop_evolved", ShopBad, returns="out string")
    with pytest.raises(
        StateEvolutionError,
        match=r"shop_evolved: state attribute 'visits' is stored as int and the class now declares string.*"
        r"ks\.migrate_state",
    ):
        ks.run(_shop_sql(src), checkpoint=cp, output=out)
    # the old class goes on from the same state
    ks.register("shop_evolved", ShopV1, returns="out string")
    ks.run(_shop_sql(src), checkpoint=cp, output=out)
    expected, _, _ = shop_oracle(FIRST + SECOND, [])
    assert _rows(spark, out) == sorted(expected)


# (slow tier, CI's budget: the ks.run test of the same state carries it, the layout check is
# the same for ks.start; restarts of each engine: test_streaming_sql, test_viewfs)
@pytest.mark.slow
def test_attributes_by_name_across_ks_start_restarted(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    out1, out2, _ = shop_oracle(FIRST, SECOND)
    spark.createDataFrame(FIRST, SHOP_SCHEMA).write.parquet(src)
    spark.readStream.schema(SHOP_SCHEMA).parquet(src).createOrReplaceTempView("shop_live")
    sql = "SELECT k, out FROM shop_live GROUP BY KEY k WITH STATE shop_evolved(amount, tag) ORDER BY seq"
    ks.register("shop_evolved", ShopV1, returns="out string")
    q = ks.start(sql, checkpoint=cp, sink=out)
    q.processAllAvailable()
    q.stop()
    spark.createDataFrame(SECOND, SHOP_SCHEMA).write.mode("append").parquet(src)
    ks.register("shop_evolved", ShopV2, returns="out string")
    q = ks.start(sql, checkpoint=cp, sink=out)
    q.processAllAvailable()
    q.stop()
    assert _rows(spark, out) == sorted(out1 + out2)


def test_initial_state_reaches_attributes_by_name(spark, ks, tmp_path):
    """Bootstrapping V2 from V1's state (read_state, columns reordered, the removed one left
    out): the attributes the table lacks start from their __init__ values."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    out1, out2, _ = shop_oracle(FIRST, SECOND)
    spark.createDataFrame(FIRST, SHOP_SCHEMA).write.parquet(src)
    ks.register("shop_evolved", ShopV1, returns="out string")
    ks.run(_shop_sql(src), checkpoint=str(tmp_path / "cp1"), output=str(tmp_path / "o1"))
    ks.read_state(str(tmp_path / "cp1")).createOrReplaceTempView("shop_saved")
    src2 = str(tmp_path / "in2")
    spark.createDataFrame(SECOND, SHOP_SCHEMA).write.parquet(src2)
    ks.register("shop_evolved", ShopV2, returns="out string")
    ks.run(
        _shop_sql(src2) + " INITIAL STATE FROM (SELECT tags, k, visits, spent FROM shop_saved)",
        checkpoint=str(tmp_path / "cp2"),
        output=out,
    )
    assert _rows(spark, out) == sorted(out2)


class LevelV1(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, e):
        self.count += 1
        return {"out": f"{self.count}"}


class LevelV2(LevelV1):
    """LevelV1 with ``level`` (annotated, __init__ 1.5) and ``note`` added: a row event
    ``clear`` sets ``level`` to None, which must stay None, not become 1.5 again."""

    level: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.level = 1.5
        self.note = "hi"

    def execute(self, e):
        self.count += 1
        out = f"{self.count}|{self.level}|{self.note}"
        if e["tag"] == "clear":
            self.level = None
        elif self.level is not None:
            self.level += 1.0
        return {"out": out}


def level_oracle(runs):
    """Plain Python: V1 over runs[0], V2 over the rest, attributes carried by name."""
    state, outs = {}, []
    for i, run in enumerate(runs):
        for k, _, _, tag in run:
            s = state.setdefault(k, {"count": 0})
            if i == 0:
                s["count"] += 1
                outs.append((k, f"{s['count']}"))
                continue
            s.setdefault("level", 1.5)
            s.setdefault("note", "hi")
            s["count"] += 1
            outs.append((k, f"{s['count']}|{s['level']}|{s['note']}"))
            s["level"] = None if tag == "clear" else (None if s["level"] is None else s["level"] + 1.0)
    return outs, state


def test_an_added_attribute_set_to_none_stays_none_and_untouched_keys_read_their_init_value(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    runs = [
        [("a", 0, 1.0, "x"), ("b", 1, 1.0, "x")],
        [("a", 2, 1.0, "clear")],  # b untouched since the attributes were added
        [("a", 3, 1.0, "peek"), ("a", 4, 1.0, "peek")],
    ]
    sql = f"SELECT k, out FROM parquet.`{src}` GROUP BY KEY k WITH STATE level_evolved(amount, tag) ORDER BY seq"
    for i, run in enumerate(runs):
        spark.createDataFrame(run, SHOP_SCHEMA).write.mode("append").parquet(src)
        ks.register("level_evolved", LevelV1 if i == 0 else LevelV2, returns="out string")
        ks.run(sql, checkpoint=cp, output=out)
        if i == 1:
            b = {r.k: r for r in ks.read_state(cp).collect()}["b"]
            # (count, note: un-annotated, shown as their JSON)
            assert (b["count"], b.level, b.note) == (json.dumps(1), 1.5, json.dumps("hi"))
    outs, state = level_oracle(runs)
    assert _rows(spark, out) == sorted(outs)
    got = {r.k: r for r in ks.read_state(cp).collect()}
    expected = {k: (json.dumps(s["count"]), s.get("level", 1.5)) for k, s in state.items()}
    assert {k: (got[k]["count"], got[k].level) for k in got} == expected


# ---------------------------------------------------------------- typed state


class TallyV1(KeyedProcessor):
    old = ValueState("string")
    count = ValueState("int", default=0)
    amounts = ListState("int")
    by_tag = MapState("string", "int")
    returns = "out string"

    def process(self, key, rows):
        for r in rows.sort_values("seq").itertuples():
            self.count.update(self.count.get() + 1)
            self.amounts.append(int(r.amount))
            self.by_tag.put(r.tag, (self.by_tag.get(r.tag) or 0) + int(r.amount))
            self.old.update(f"old-{r.tag}")
        yield {"out": f"{self.count.get()}|{list(self.amounts.get())}|{sorted(self.by_tag.items())}"}


class TallyV2(KeyedProcessor):
    """TallyV1 with ``aardvark`` added (first by name), ``zebra`` added last, ``old`` removed,
    ``count`` int -> bigint, ``amounts`` int -> bigint, ``by_tag`` values int -> double."""

    zebra = ValueState("string", default="z0")
    by_tag = MapState("string", "double")
    count = ValueState("bigint", default=0)
    aardvark = ValueState("int", default=5)
    amounts = ListState("bigint")
    returns = "out string"

    def process(self, key, rows):
        for r in rows.sort_values("seq").itertuples():
            self.count.update(self.count.get() + 1)
            self.amounts.append(int(r.amount))
            self.by_tag.put(r.tag, (self.by_tag.get(r.tag) or 0.0) + float(r.amount))
        out = (
            f"{self.aardvark.get()}|{self.count.get()}|{list(self.amounts.get())}|{sorted(self.by_tag.items())}|"
            f"{self.zebra.get()}"
        )
        self.aardvark.update(self.aardvark.get() + 1)
        self.zebra.update(self.zebra.get() + "!")
        yield {"out": out}


class TallyBad(TallyV1):
    count = ValueState("string", default="")


TYPED_SCHEMA = "k string, seq int, amount int, tag string"
T_FIRST = [("a", 0, 3, "x"), ("a", 1, 4, "y"), ("b", 2, 5, "x")]
T_SECOND = [("a", 3, 6, "x"), ("c", 4, 7, "y"), ("b", 5, 1, "z")]


def tally_oracle(first, second, seeded=True):
    """Plain Python: V1 per batch (one process call per key), then V2 from V1's variables by name."""
    v1 = {}
    out1 = []
    for k in sorted({r[0] for r in first}):
        s = v1.setdefault(k, {"count": 0, "amounts": [], "by_tag": {}})
        for _, _, amount, tag in sorted((r for r in first if r[0] == k), key=lambda r: r[1]):
            s["count"] += 1
            s["amounts"].append(amount)
            s["by_tag"][tag] = s["by_tag"].get(tag, 0) + amount
        out1.append((k, f"{s['count']}|{s['amounts']}|{sorted(s['by_tag'].items())}"))
    out2 = []
    for k in sorted({r[0] for r in second}):
        old = (
            v1.get(k, {"count": 0, "amounts": [], "by_tag": {}})
            if seeded
            else {"count": 0, "amounts": [], "by_tag": {}}
        )
        s = {
            "count": old["count"],
            "amounts": list(old["amounts"]),
            "by_tag": {t: float(v) for t, v in old["by_tag"].items()},
        }
        for _, _, amount, tag in sorted((r for r in second if r[0] == k), key=lambda r: r[1]):
            s["count"] += 1
            s["amounts"].append(amount)
            s["by_tag"][tag] = s["by_tag"].get(tag, 0.0) + float(amount)
        out2.append((k, f"5|{s['count']}|{s['amounts']}|{sorted(s['by_tag'].items())}|z0"))
    return out1, out2


def _tally_sql(src):
    return f"SELECT k, out FROM parquet.`{src}` GROUP BY KEY k WITH STATE tally_evolved(seq, amount, tag)"


def test_typed_state_by_name_across_ks_run(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    out1, out2 = tally_oracle(T_FIRST, T_SECOND)
    spark.createDataFrame(T_FIRST, TYPED_SCHEMA).write.parquet(src)
    ks.register("tally_evolved", TallyV1)
    ks.run(_tally_sql(src), checkpoint=cp, output=out)
    assert _rows(spark, out) == sorted(out1)
    spark.createDataFrame(T_SECOND, TYPED_SCHEMA).write.mode("append").parquet(src)
    ks.register("tally_evolved", TallyV2)
    ks.run(_tally_sql(src), checkpoint=cp, output=out)
    assert _rows(spark, out) == sorted(out1 + out2)


def test_typed_state_incompatible_change_is_refused_at_start(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    spark.createDataFrame(T_FIRST, TYPED_SCHEMA).write.parquet(src)
    ks.register("tally_evolved", TallyV1)
    ks.run(_tally_sql(src), checkpoint=cp, output=out)
    spark.createDataFrame(T_SECOND, TYPED_SCHEMA).write.mode("append").parquet(src)
    ks.register("tally_evolved", TallyBad)
    with pytest.raises(
        StateEvolutionError,
        match=r"tally_evolved: state variable 'count' is stored as ValueState<int> and the class now declares "
        r"ValueState<string>",
    ):
        ks.run(_tally_sql(src), checkpoint=cp, output=out)
    ks.register("tally_evolved", TallyV1)
    ks.run(_tally_sql(src), checkpoint=cp, output=out)
    first, _ = tally_oracle(T_FIRST, [])
    again, _ = tally_oracle(T_FIRST + T_SECOND, [])
    assert _rows(spark, out) == sorted(first + [r for r in again if r[0] in {x[0] for x in T_SECOND}])


# (slow tier, CI's budget: the ks.run test of the same state carries it, the layout check is
# the same for ks.start; restarts of each engine: test_streaming_sql, test_viewfs)
@pytest.mark.slow
def test_typed_state_by_name_across_ks_start_restarted(spark, ks, tmp_path):
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    out1, out2 = tally_oracle(T_FIRST, T_SECOND)
    spark.createDataFrame(T_FIRST, TYPED_SCHEMA).write.parquet(src)
    spark.readStream.schema(TYPED_SCHEMA).parquet(src).createOrReplaceTempView("tally_live")
    sql = "SELECT k, out FROM tally_live GROUP BY KEY k WITH STATE tally_evolved(seq, amount, tag)"
    ks.register("tally_evolved", TallyV1)
    q = ks.start(sql, checkpoint=cp, sink=out)
    q.processAllAvailable()
    q.stop()
    spark.createDataFrame(T_SECOND, TYPED_SCHEMA).write.mode("append").parquet(src)
    ks.register("tally_evolved", TallyV2)
    q = ks.start(sql, checkpoint=cp, sink=out)
    q.processAllAvailable()
    q.stop()
    assert _rows(spark, out) == sorted(out1 + out2)


def test_initial_state_reaches_state_variables_by_name(spark, ks, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _, out2 = tally_oracle(T_FIRST, T_SECOND)
    spark.createDataFrame(T_FIRST, TYPED_SCHEMA).write.parquet(src)
    ks.register("tally_evolved", TallyV1)
    ks.run(_tally_sql(src), checkpoint=str(tmp_path / "cp1"), output=str(tmp_path / "o1"))
    ks.read_state(str(tmp_path / "cp1")).createOrReplaceTempView("tally_saved")
    src2 = str(tmp_path / "in2")
    spark.createDataFrame(T_SECOND, TYPED_SCHEMA).write.parquet(src2)
    ks.register("tally_evolved", TallyV2)
    ks.run(
        _tally_sql(src2) + " INITIAL STATE FROM (SELECT by_tag, amounts, k, old, count FROM tally_saved)",
        checkpoint=str(tmp_path / "cp2"),
        output=out,
    )
    assert _rows(spark, out) == sorted(out2)


def test_start_check_logs_a_removed_attribute_and_refuses_before_anything(caplog):
    from spark_keyed_sql.state.evolution import check_layouts
    from spark_keyed_sql.state.operator_record import OperatorRecord

    def record(*attributes):
        return OperatorRecord(function="fn", class_name="m.Fn", kind="function", keys=("k",), attributes=attributes)

    was = record({"name": "email", "type": "string", "encoded": True}, {"name": "n", "type": "int"})
    now = record({"name": "n", "type": "bigint"}, {"name": "m", "type": "double"})
    with caplog.at_level("INFO", logger="spark_keyed_sql.state.evolution"):
        check_layouts("/ck", [was], [now])
    removed = [r for r in caplog.records if "no longer has" in r.getMessage()]
    assert len(removed) == 1 and "email" in removed[0].getMessage()
    assert any("n widened from int to bigint" in r.getMessage() for r in caplog.records)
    with pytest.raises(StateEvolutionError, match=r"fn: state attribute 'n' is stored as bigint .* declares int"):
        check_layouts("/ck", [now], [was])

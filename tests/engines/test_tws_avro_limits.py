"""What Spark's Avro state encoding cannot keep, said as this project's errors on engine tws
(engines/tws/avro_limits.py), while engine bulk keeps it: a None inside a list attribute, and
a smallint attribute."""

import pytest

from spark_keyed_sql import KeyedProcessor, KeyedSQL, ListState, StatefulFunction
from spark_keyed_sql.api.errors import KeyedSQLError


class Tags(StatefulFunction):
    tags: list[str]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.tags = []

    def execute(self, e):
        self.tags.append(None if e["user_id"] == "holey" else e["user_id"])
        return {"n": len(self.tags)}


class Small(StatefulFunction):
    small: "smallint"  # noqa: F821 - a DDL type

    def __init__(self, **kw):
        super().__init__(**kw)
        self.small = 0

    def execute(self, e):
        self.small += 1
        return {"n": self.small}


class Baskets(KeyedProcessor):
    """A list variable whose entries hold an array: a None in it on key 'holey'."""

    baskets = ListState("items array<string>")
    returns = "n bigint"

    def process(self, key, rows):
        for u in rows["user_id"]:
            self.baskets.append({"items": [u, None] if u == "holey" else [u]})
        return [{"n": len(list(self.baskets.get()))}]


def _run(spark, tmp_path, engine, cls, name):
    src = str(tmp_path / f"in_{engine}_{name}")
    spark.createDataFrame([("a", 1), ("holey", 2), ("a", 3)], "user_id string, seq bigint").write.parquet(src)
    ks = KeyedSQL(spark, engine=engine)
    ks.register(name, cls, returns="n bigint")
    cp = str(tmp_path / f"cp_{engine}_{name}")
    ks.run(
        f"SELECT user_id, s.n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE {name}(user_id) AS s ORDER BY seq",
        checkpoint=cp,
        output=str(tmp_path / f"out_{engine}_{name}"),
    )
    return {r.user_id: r for r in ks.read_state(cp).collect()}


@pytest.fixture
def tws(spark):
    from spark_keyed_sql.compat import Feature, features

    if not features(spark).has(Feature.TRANSFORM_WITH_STATE):
        pytest.skip("transformWithState needs Spark 4.0+")


def test_a_none_inside_a_list_is_refused_on_tws_naming_attribute_and_key_and_kept_on_bulk(spark, tws, tmp_path):
    state = _run(spark, tmp_path, "bulk", Tags, "avro_tags")
    assert list(state["holey"].tags) == [None] and list(state["a"].tags) == ["a", "a"]
    with pytest.raises(KeyedSQLError, match=r"key \('holey',\)|key 'holey'") as err:
        _run(spark, tmp_path, "tws", Tags, "avro_tags")
    assert "'tags' holds a None inside a list or map, which engine 'tws' cannot store" in str(err.value)


def test_a_smallint_attribute_is_refused_on_tws_naming_it_and_kept_on_bulk(spark, tws, tmp_path):
    state = _run(spark, tmp_path, "bulk", Small, "avro_small")
    assert state["a"].small == 2 and state["holey"].small == 1
    with pytest.raises(KeyedSQLError, match=r"'small' \(smallint\) holds one; annotate it 'int'"):
        _run(spark, tmp_path, "tws", Small, "avro_small")


def test_a_none_inside_a_list_variables_entry_is_refused_on_tws_naming_variable_and_key(spark, tws, tmp_path):
    src = str(tmp_path / "in_baskets")
    spark.createDataFrame([("a", 1), ("holey", 2), ("a", 3)], "user_id string, seq bigint").write.parquet(src)
    query = f"SELECT user_id, s.n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE baskets(user_id) AS s"
    out = {}
    for engine in ("bulk", "tws"):
        ks = KeyedSQL(spark, engine=engine)
        ks.register("baskets", Baskets)
        try:
            ks.run(query, checkpoint=str(tmp_path / f"cp_{engine}"), output=str(tmp_path / f"out_{engine}"))
            out[engine] = {r.user_id: r.n for r in spark.read.parquet(str(tmp_path / f"out_{engine}")).collect()}
        except KeyedSQLError as exc:
            out[engine] = exc
    assert out["bulk"] == {"a": 2, "holey": 1}
    assert isinstance(out["tws"], KeyedSQLError), out["tws"]
    assert "state variable 'baskets'" in str(out["tws"]) and "'holey'" in str(out["tws"])
    assert "None inside a list or map" in str(out["tws"])

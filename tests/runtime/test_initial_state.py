"""Seeding per-key state from a DataFrame (transformWithState's initial state)."""

from processors import Spend

from spark_keyed_sql import StatefulFunction


class Running(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.seen = set()

    def execute(self, event):
        self.count += 1
        self.seen.add(event["tag"])
        return {"count": self.count, "tags": len(self.seen)}


def test_attribute_state_bootstrap(spark, ks):
    ks.register("running", Running, returns="count bigint, tags bigint")
    events = spark.createDataFrame([("a", "x"), ("a", "y"), ("b", "x"), ("c", "z")], "k string, tag string")
    # encoded attributes are seeded from the JSON form read_state shows; typed ones from values
    init_df = spark.createDataFrame(
        [("a", 10, '{"$set": ["x"]}'), ("b", 5, '{"$set": []}')], "k string, count bigint, seen string"
    )
    got = sorted(
        tuple(r) for r in ks.apply(events, "running", key="k", order_by="tag", initial_state=init_df).collect()
    )
    # oracle: a starts at count 10 with {"x"}, b at 5 with {}, c fresh
    assert got == [("a", 11, 1), ("a", 12, 2), ("b", 6, 1), ("c", 1, 1)]


def test_keyed_processor_on_initial_state(spark, ks):
    import datetime as dt

    ks.register("spend_boot", Spend)
    rows = [("a", 1.0, 2.0, "m1", dt.datetime(2026, 1, 1)), ("b", 1.0, 3.0, "m2", dt.datetime(2026, 1, 1))]
    events = spark.createDataFrame(rows, "user_id string, value double, amount double, merchant string, ts timestamp")
    init = spark.createDataFrame(
        [("a", 100.0, {"m9": 50.0})], "user_id string, total double, by_merchant map<string, double>"
    )
    got = {r.user_id: tuple(r)[1:] for r in ks.apply(events, "spend_boot", key="user_id", initial_state=init).collect()}
    assert got == {"a": (102.0, 1, "m9", 50.0), "b": (3.0, 1, "m2", 3.0)}

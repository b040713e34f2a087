"""The UnsafeRow bytes an UPDATE of a tws checkpoint hands Spark's state rewriter
(engines/tws/unsafe_row.py), against Spark's own: a tws checkpoint whose attributes cover every
kind of field (fixed-size, variable-size, wide decimals, arrays, maps, a struct, NULLs), read
back by Spark's statestore reader both as decoded values and as the raw bytes it stores them
from; encoding the decoded values must give Spark's bytes exactly."""

import datetime as dt
from decimal import Decimal

import pytest

from spark_keyed_sql import KeyedSQL, StatefulFunction
from spark_keyed_sql.engines.tws.unsafe_row import encoded


class Rich(StatefulFunction):
    n: int
    small: "int"
    ratio: float
    single: "float"
    flag: bool
    name: str
    blob: bytes
    when: dt.datetime
    day: dt.date
    price: "decimal(10,2)"  # noqa: F821 - a DDL type
    wide: Decimal
    ints: list[int]
    names: list[str]
    scores: dict[str, float]
    pair: "struct<a: int, b: string>"  # noqa: F722 - a DDL type
    maybe: str

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n, self.small, self.ratio, self.single, self.flag = 0, 0, 0.0, 0.0, False
        self.name, self.blob, self.when, self.day = "", b"", dt.datetime(2020, 1, 1), dt.date(2020, 1, 1)
        self.price, self.wide, self.ints, self.names, self.scores = Decimal("0.00"), Decimal(0), [], [], {}
        self.pair, self.maybe = {"a": 0, "b": ""}, None

    def execute(self, e):
        v = int(e["v"])
        self.n += v
        self.small = -v * 1000
        self.ratio, self.single, self.flag = v / 3, v / 8, v % 2 == 1
        self.name = "é" * (v % 5) + f"user-{e['user_id']}"
        self.blob = bytes(range(v % 11))
        self.when = dt.datetime(2021, 3, 4, 5, 6, 7, v)
        self.day = dt.date(1969, 12, 31) + dt.timedelta(days=v)
        self.price = Decimal(v) / 4 - 3
        wide = Decimal(f"{v}2345678901234567890.123456789012345678"[-39:])  # 38 digits: past Decimal's 28
        self.wide = wide.copy_negate() if v % 2 else wide if v % 3 else Decimal(v)
        self.ints = list(range(v % 4))
        self.names = [self.name, "", "z"][: v % 4]
        self.scores = {f"s{i}": i / 2 for i in range(v % 3)}
        self.pair = {"a": v, "b": None if v % 2 else "b" * v}
        self.maybe = None if v % 2 else "x"
        return {"n": self.n}


@pytest.fixture(scope="module")
def checkpoint(spark, tmp_path_factory):
    from spark_keyed_sql.compat import Feature, features
    from spark_keyed_sql.engines.tws.erase import has_state_rewriter

    if not features(spark).has(Feature.TRANSFORM_WITH_STATE):
        pytest.skip("transformWithState needs Spark 4.0+")
    if not has_state_rewriter(spark):
        pytest.skip("the raw state reader the rewriter uses needs Spark 4.2+")
    d = tmp_path_factory.mktemp("unsafe_row")
    ks = KeyedSQL(spark, engine="tws")
    ks.register("rich_state", Rich, returns="n bigint")
    rows = [(f"k{k}", float(k * 3 + j), k * 10 + j) for k in range(12) for j in range(2)]
    spark.createDataFrame(rows, "user_id string, v double, seq bigint").write.parquet(str(d / "in"))
    cp = str(d / "cp")
    ks.run(
        f"SELECT user_id, s.n FROM parquet.`{d}/in` GROUP BY KEY user_id WITH STATE rich_state(user_id, v) AS s "
        "ORDER BY seq",
        checkpoint=cp,
        output=str(d / "out"),
    )
    return cp


def test_encoding_a_stored_value_gives_sparks_bytes(spark, checkpoint):
    from pyspark.sql import functions as F

    decoded = (
        spark.read.format("statestore")
        .option("operatorId", 0)
        .option("stateVarName", "attributes")
        .option("batchId", 0)
        .load(checkpoint)
    )
    vtype = decoded.schema["value"].dataType
    assert len(vtype.fields) == 16
    mine = encoded(
        decoded.select(F.col("key")["__ks_k0"].alias("k"), "value"), "value", vtype, "fam", "attributes", "b"
    )
    raw = (
        spark.read.format("statestore")
        .option("path", checkpoint)
        .option("batchId", 0)
        .option("operatorId", 0)
        .option("storeName", "default")
        .option("_readAllColumnFamilies", "true")
        .load()
        .where("column_family_name = 'attributes'")
    )
    theirs = {r.partition_key[0]: bytes(r.value_bytes) for r in raw.collect()}
    ours = {r.k: bytes(r.b) for r in mine.collect()}
    assert len(theirs) == 12 and set(ours) == set(theirs)
    differing = [k for k in theirs if ours[k] != theirs[k]]
    assert differing == [], (
        differing[:1],
        ours[differing[0]] if differing else None,
        theirs.get(differing[0]) if differing else None,
    )

import datetime as dt

import pytest

from spark_keyed_sql.api.annotations import python_type_to_sql
from spark_keyed_sql.api.errors import SchemaError, StateTypeError
from spark_keyed_sql.api.intervals import parse_interval_ms
from spark_keyed_sql.api.types import ArrayType, AtomicType, MapType, StructType, parse_schema, parse_type
from spark_keyed_sql.api.values import coerce


@pytest.mark.parametrize(
    "ddl, rendered",
    [
        ("double", "DOUBLE"),
        ("BIGINT", "BIGINT"),
        ("array<string>", "ARRAY<STRING>"),
        ("map<string, double>", "MAP<STRING, DOUBLE>"),
        ("struct<a: int, b: string>", "STRUCT<`a`: INT, `b`: STRING>"),
        ("decimal(10, 2)", "DECIMAL(10,2)"),
        ("map<string, struct<mean double, count bigint>>", "MAP<STRING, STRUCT<`mean`: DOUBLE, `count`: BIGINT>>"),
    ],
)
def test_parse_type(ddl, rendered):
    assert parse_type(ddl).ddl() == rendered


def test_parse_schema_field_list():
    s = parse_schema("amount double, ts timestamp, `odd name` string")
    assert s.names == ["amount", "ts", "odd name"]
    assert s.fields[1].type == AtomicType("timestamp")
    assert isinstance(parse_type("amount double, ts timestamp"), StructType)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("doubel", "unknown type 'doubel'"),
        ("a long, a double", "duplicate column"),
        ("a", "has no type"),
        ("map<string>", "expected ','"),
        ("", "non-empty"),
    ],
)
def test_parse_errors(bad, message):
    with pytest.raises(SchemaError, match=message):
        parse_schema(bad) if "," in bad or bad in ("a", "") else parse_type(bad)


def test_python_annotations():
    assert python_type_to_sql(int) == AtomicType("long")
    assert python_type_to_sql(dict[str, float]) == MapType(AtomicType("string"), AtomicType("double"))
    assert python_type_to_sql(list[dt.datetime]) == ArrayType(AtomicType("timestamp"))
    assert python_type_to_sql("float") == AtomicType("double")
    assert python_type_to_sql("array<int>") == ArrayType(AtomicType("int"))
    with pytest.raises(SchemaError, match="has no Spark SQL type"):
        python_type_to_sql(object, "C.x")


def test_coerce():
    assert coerce(3, parse_type("double"), "x") == 3.0
    assert coerce({"a": 1}, parse_type("struct<a: bigint, b: string>"), "x") == (1, None)
    with pytest.raises(StateTypeError, match="x: expected BIGINT, got bool True"):
        coerce(True, parse_type("bigint"), "x")
    with pytest.raises(StateTypeError, match="does not fit INT"):
        coerce(2**40, parse_type("int"), "x")
    with pytest.raises(StateTypeError, match=r"unknown field\(s\) \['c'\]"):
        coerce({"c": 1}, parse_type("struct<a: bigint>"), "x")


@pytest.mark.parametrize(
    "text, ms",
    [
        ("30 minutes", 1_800_000),
        ("7 days", 604_800_000),
        ("INTERVAL 10 MINUTES", 600_000),
        ("1 hour 30 minutes", 5_400_000),
        ("INTERVAL '10' MINUTES", 10 * 60_000),  # Spark's own spelling (its dialect renders this)
        ("INTERVAL '2' HOURS '30' MINUTES", (2 * 60 + 30) * 60_000),
        ("3 hrs", 3 * 3_600_000),
        (250, 250),
    ],
)
def test_intervals(text, ms):
    assert parse_interval_ms(text) == ms


def test_interval_errors():
    with pytest.raises(SchemaError, match="unknown interval unit 'fortnights'"):
        parse_interval_ms("2 fortnights")
    with pytest.raises(SchemaError, match="a month has no fixed length; give it in days or weeks"):
        parse_interval_ms("1 month")

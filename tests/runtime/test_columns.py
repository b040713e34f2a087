"""Column and ORDER BY lists as ks.apply takes them (``key=``, ``order_by=``): a string is SQL, a
list's items are names (an ORDER BY item may add its direction)."""

import pytest

from spark_keyed_sql import SchemaError
from spark_keyed_sql.runtime.columns import parse_column_list, parse_order_list
from spark_keyed_sql.runtime.keys import OrderSpec


@pytest.mark.parametrize(
    "given, names",
    [
        ("a, `u.id`", ["a", "u.id"]),
        (["a", "u.id", "with space"], ["a", "u.id", "with space"]),
        (None, []),
    ],
)
def test_column_lists(given, names):
    assert parse_column_list(given) == names


@pytest.mark.parametrize(
    "given, specs",
    [
        ("ts DESC, seq", [OrderSpec("ts", False, None), OrderSpec("seq", True, None)]),
        ("`u.ts` NULLS LAST", [OrderSpec("u.ts", True, False)]),
        # a list: each item an ORDER BY item, or else a column name as written
        (["ts DESC", "seq"], [OrderSpec("ts", False, None), OrderSpec("seq", True, None)]),
        (["u.ts", "o'clock"], [OrderSpec("u.ts", True, None), OrderSpec("o'clock", True, None)]),
        (["`u.ts` DESC NULLS FIRST"], [OrderSpec("u.ts", False, True)]),
        ([], []),
    ],
)
def test_order_lists(given, specs):
    def spark_order(o):  # (None: Spark's default, NULLS FIRST ascending, NULLS LAST descending)
        return o.column, o.ascending, o.ascending if o.nulls_first is None else o.nulls_first

    assert [spark_order(o) for o in parse_order_list(given)] == [spark_order(o) for o in specs]


@pytest.mark.parametrize("item", ["ts DESCC", "ts DESC NULLS FRIST", "e seq"])
def test_a_list_item_with_a_space_is_sql_and_a_misspelt_one_is_refused(item):
    """Not taken for a column named as written (KeyedTester would sort by a column no row has:
    arrival order, silently)."""
    with pytest.raises(SchemaError):
        parse_order_list([item])


def test_an_order_string_is_sql():
    """A string is SQL text: a dotted name needs its backticks (``u.ts`` would be column ts of
    a table u)."""
    with pytest.raises(SchemaError, match="is not a plain column name"):
        parse_order_list("u.ts")

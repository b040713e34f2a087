"""A UserFunctionError that comes back through Spark's text (a Python worker's traceback, or a
Spark Connect client's exception) carries its key and cause as values again: the message is
built from ``repr(key)`` and ``Name: message`` (api/errors.py), and these read them back. The
expected values are written here, not taken from the code under test."""

import datetime
from decimal import Decimal

import pytest

from spark_keyed_sql import UserFunctionError
from spark_keyed_sql.streaming.failures import cause_of, from_spark_failure, key_value


@pytest.mark.parametrize(
    "key",
    [
        "u3",
        "it's",
        7,
        -1.5,
        None,
        True,
        (1, "a"),
        ("x", None),
        datetime.datetime(2026, 1, 2, 3, 4, 5, 600),
        datetime.date(2026, 1, 2),
        Decimal("1.50"),
        ("u1", datetime.date(2026, 11, 29)),
    ],
)
def test_a_key_reads_back_from_its_repr(key):
    assert key_value(repr(key)) == key and type(key_value(repr(key))) is type(key)


def test_text_that_is_no_keys_repr_stays_text():
    for text in ('__import__("os").system("true")', "nan", "<object at 0x1>", "open('x')"):
        assert key_value(text) == text


def test_the_cause_is_an_exception_of_its_type_or_its_name():
    c = cause_of("ValueError: negative value")
    assert type(c) is ValueError and str(c) == "negative value"
    c = cause_of("ZeroDivisionError: division by zero")
    assert isinstance(c, ArithmeticError)
    c = cause_of("ParseFailure: bad row: 3")
    assert type(c).__name__ == "ParseFailure" and isinstance(c, Exception) and str(c) == "bad row: 3"


def test_a_failure_text_becomes_the_error_with_values():
    class SparkSide(Exception):
        pass

    text = (
        "pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker.\n"
        "spark_keyed_sql.api.errors.UserFunctionError: function 'f' failed for key (3, 'b') on row "
        "{'v': 1}: KeyError: 'v2'\n"
        '  File "/home/u/job.py", line 12, in execute\n'
    )
    err = from_spark_failure(SparkSide(text))
    assert isinstance(err, UserFunctionError)
    assert err.function == "f" and err.key == (3, "b") and err.where == "row {'v': 1}"
    assert isinstance(err.cause, KeyError)
    assert 'File "/home/u/job.py", line 12' in err.frames


def test_a_key_holding_on_and_a_row_holding_colons_are_read_apart():
    from spark_keyed_sql.api.errors import UserFunctionError as Made

    made = Made("f", ("a on b", 2), "row {'note': 'x on y: z'}", ValueError("bad: worse"))
    err = from_spark_failure(Exception(f"spark_keyed_sql.api.errors.UserFunctionError: {made}"))
    assert err.key == ("a on b", 2) and err.where == "row {'note': 'x on y: z'}"
    assert type(err.cause) is ValueError and str(err.cause) == "bad: worse"

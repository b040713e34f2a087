"""Bad input gets a clear error naming what was wrong and where."""
import os
import shutil
import subprocess
import sys

import pytest

from spark_keyed_sql import KeyedSQLError, KeyedTester, StatefulFunction
from spark_keyed_sql.api.errors import (
    JavaMissingError,
    OutputSchemaError,
    RegistrationError,
    SchemaError,
    StateEncodingError,
    StateTypeError,
    UnknownFunctionError,
    UserFunctionError,
)


class Boom(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, event):
        self.n += 1
        if event["value"] < 0:
            raise ValueError("negative value")
        return {"n": self.n}


class WrongKeys(StatefulFunction):
    def execute(self, event):
        return {"n": 1, "zzz": 2}


class WrongType(StatefulFunction):
    def execute(self, event):
        return {"n": "not a number"}


class HoldsFile(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.handle = open(os.devnull)  # noqa: SIM115

    def execute(self, event):
        return {"n": 1}


class LateFile(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.thing = None

    def execute(self, event):
        self.thing = open(os.devnull)  # noqa: SIM115
        return {"n": 1}


class Annotated(StatefulFunction):
    count: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0

    def execute(self, event):
        self.count = "many" if event["value"] > 50 else self.count + 1
        return {"n": 1}


@pytest.fixture(scope="module")
def bad_df(spark):
    df = spark.createDataFrame([("u1", 1.0), ("u7", -3.5), ("u2", 60.0)], "user_id string, value double")
    df.createOrReplaceTempView("bad_events")
    return df


def test_unknown_function(ks, bad_df):
    with pytest.raises(UnknownFunctionError, match="unknown function 'nope'"):
        ks.apply(bad_df, "nope", key="user_id")


def test_key_not_in_source(ks, bad_df):
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(SchemaError, match=r"key column\(s\) \['userid'\] not in the source"):
        ks.apply(bad_df, "boom", key="userid")


def test_table_function_key_not_in_table(spark, ks, bad_df):
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(Exception, match=r"key column\(s\) \['nokey'\] not in the input table"):
        spark.sql("SELECT * FROM boom(TABLE(bad_events), key => 'nokey')").collect()


@pytest.mark.parametrize("path", ["tws", "table_function"])
def test_user_exception_names_function_key_and_row(spark, ks, bad_df, path):
    ks.register("boom", Boom, returns="n bigint")
    with pytest.raises(Exception) as info:
        if path == "tws":
            ks.apply(bad_df, "boom", key="user_id").collect()
        else:
            spark.sql("SELECT * FROM boom(TABLE(bad_events), key => 'user_id')").collect()
    msg = str(info.value)
    assert "function 'boom' failed for key 'u7'" in msg
    assert "'value': -3.5" in msg and "ValueError: negative value" in msg


def test_user_exception_in_tester_is_typed():
    t = KeyedTester(Boom, returns="n bigint")
    with pytest.raises(UserFunctionError) as info:
        t.run([{"value": -1.0}], key="k9")
    assert info.value.function == "Boom" and info.value.key == "k9"
    assert isinstance(info.value.cause, ValueError)


@pytest.mark.parametrize("path", ["tws", "table_function"])
def test_output_not_matching_returns(spark, ks, bad_df, path):
    ks.register("wrong_keys", WrongKeys, returns="n bigint, m bigint")
    ks.register("wrong_type", WrongType, returns="n bigint")
    for name, pattern in (("wrong_keys", r"key\(s\) \['zzz'\] that are not columns"), ("wrong_type", r"column 'n': expected BIGINT, got str")):
        with pytest.raises(Exception) as info:
            if path == "tws":
                ks.apply(bad_df, name, key="user_id").collect()
            else:
                spark.sql(f"SELECT * FROM {name}(TABLE(bad_events), key => 'user_id')").collect()
        assert f"function '{name}'" in str(info.value)
        import re

        assert re.search(pattern, str(info.value)), str(info.value)[:2000]


def test_tuple_of_wrong_length():
    class T2(StatefulFunction):
        def execute(self, e):
            return (1, 2, 3)

    with pytest.raises(OutputSchemaError, match=r"returned 3 value\(s\) .* but returns has 2 column\(s\)"):
        KeyedTester(T2, returns="a bigint, b bigint").run([{}], key=1)


def test_file_handle_attribute_refused_at_register(ks):
    with pytest.raises(RegistrationError) as info:
        ks.register("holds_file", HoldsFile, returns="n bigint")
    msg = str(info.value)
    assert "HoldsFile.handle" in msg and "TextIOWrapper" in msg


def test_file_handle_assigned_in_execute(spark, ks, bad_df):
    with pytest.raises(StateEncodingError, match=r"LateFile\.thing holds a _io\.TextIOWrapper"):
        KeyedTester(LateFile, returns="n bigint").run([{"value": 1.0}], key="a")
    ks.register("late_file", LateFile, returns="n bigint")
    with pytest.raises(Exception, match=r"LateFile\.thing holds a _io\.TextIOWrapper"):
        ks.apply(bad_df, "late_file", key="user_id").collect()


def test_annotated_attribute_wrong_type(spark, ks, bad_df):
    with pytest.raises(StateTypeError, match=r"attribute Annotated\.count: expected BIGINT, got str 'many'"):
        KeyedTester(Annotated, returns="n bigint").run([{"value": 60.0}], key="a")
    ks.register("annotated", Annotated, returns="n bigint")
    with pytest.raises(Exception, match=r"attribute Annotated\.count: expected BIGINT, got str 'many'"):
        ks.apply(bad_df, "annotated", key="user_id").collect()


def test_annotated_attribute_wrong_type_in_init():
    class BadInit(StatefulFunction):
        total: float

        def __init__(self, **kw):
            super().__init__(**kw)
            self.total = "zero"

        def execute(self, e):
            return None

    with pytest.raises(RegistrationError, match=r"BadInit\.total: expected DOUBLE, got str 'zero'"):
        KeyedTester(BadInit)


def test_register_errors(ks):
    with pytest.raises(RegistrationError, match="no output schema"):
        ks.register("no_returns", Boom)
    with pytest.raises(RegistrationError, match="not a valid SQL identifier"):
        ks.register("bad name", Boom, returns="n bigint")
    with pytest.raises(RegistrationError, match="unknown type 'bigintt'"):
        ks.register("bad_type", Boom, returns="n bigintt")
    with pytest.raises(RegistrationError, match="not a subclass of StatefulFunction or KeyedProcessor"):
        ks.register("not_a_class", dict, returns="n bigint")
    class Strict(StatefulFunction):
        def __init__(self, threshold):
            super().__init__()
            self.threshold = threshold

        def execute(self, e):
            return None

    with pytest.raises(RegistrationError, match=r"Strict\(\*\*\{'nope': 1\}\) failed .* unexpected keyword argument 'nope'"):
        ks.register("bad_kwargs", Strict, returns="n bigint", nope=1)
    assert issubclass(RegistrationError, KeyedSQLError)


def test_java_missing_is_a_sentence(monkeypatch, tmp_path):
    from spark_keyed_sql.java import require_java

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaMissingError, match="Java was not found: Spark needs Java 17"):
        require_java()


def test_make_says_java_missing(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("make", "sh", "bash"):
        p = shutil.which(tool)
        if p:
            (bindir / tool).symlink_to(p)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {"PATH": str(bindir), "HOME": os.environ.get("HOME", "/tmp")}
    res = subprocess.run(["make", "-s", "-C", root, "check-java"], env=env, capture_output=True, text=True)
    assert res.returncode != 0
    assert "Java was not found: Spark needs Java 17" in res.stderr
    assert "Exception" not in res.stderr and sys.executable  # a sentence, not a stack trace


class NeedsAmount(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, event):
        self.total += event["amount"]
        return (self.total,)


def test_missing_argument_and_wrong_argument_type_name_function_key_row(spark, ks, bad_df):
    """Arguments become the event dict: there is no fixed arity, so a missing argument or one
    of the wrong type surfaces where the class uses it, named with function, key and row."""
    ks.register("needs_amount", NeedsAmount, returns="total double")
    with pytest.raises(Exception) as missing:
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE needs_amount(value)").collect()
    assert "function 'needs_amount' failed for key" in str(missing.value) and "KeyError: 'amount'" in str(missing.value)
    with pytest.raises(Exception) as wrong:
        ks.sql("SELECT * FROM bad_events GROUP BY KEY user_id WITH STATE needs_amount(user_id AS amount)").collect()
    assert "function 'needs_amount' failed for key" in str(wrong.value) and "TypeError" in str(wrong.value)

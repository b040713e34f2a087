"""The planner without Spark: what it declines (and the line and construct it names), and the
shape of what it accepts. Rows and values are tested against Python in test_native.py."""

from __future__ import annotations

import textwrap

import pytest

from spark_keyed_sql.api.types import parse_schema
from spark_keyed_sql.engines.native import Declined, NativePlan, plan_native
from spark_keyed_sql.runtime.keys import OrderSpec
from spark_keyed_sql.runtime.plan import KeyedPlan
from spark_keyed_sql.runtime.spec import FunctionSpec


def _plan(
    tmp_path, body: str, returns: str, fields: dict[str, str], key_type: str = "string", streaming=False, engine=True
):
    src = "from spark_keyed_sql import StatefulFunction\n\n\n" + textwrap.dedent(body)
    path = tmp_path / f"native_analyze_{abs(hash(body))}.py"
    path.write_text(src)
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    fs = FunctionSpec("f", module.C, parse_schema(returns))
    plan = KeyedPlan(fs, ["k"], list(fields), [OrderSpec("ts")])
    plan.arg_types = {"k": key_type, "ts": "timestamp", **fields}
    return plan_native(plan, streaming=streaming, native_streams=engine)


COUNTER = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def execute(self, row):
        self.n += 1
        self.total += row["v"]
        return {"n": self.n, "total": self.total}
"""


def test_w1_is_two_running_aggregates_and_a_null_check(tmp_path):
    p = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"})
    assert isinstance(p, NativePlan)
    sql = p.sql()
    assert "count(1) OVER" in sql and "sum(`v`) OVER" in sql
    assert "lag(" not in sql  # the outputs read the new values' columns, not a recomputation
    assert "TypeError: unsupported operand type(s) for +=: \\'float\\' and \\'NoneType\\'" in sql


@pytest.mark.parametrize(
    "body, expected",
    [
        ("for x in range(3):\n            self.n += x", "line 16: `for x in range(3):"),
        ("self.items = self.items + [1]", "line 16: `self.items = self.items + [1]`: container state"),
        ("if row['v'] > 1:\n            return {'n': 1}", "a return before the end of execute"),
        ("print(row)", "line 16: `print(row)`"),
        ("self.n = self.n * 2", "its new value depends on its previous one in a way not planned"),
        ("self.n = self.m + 1\n        self.m = self.n_old + 1", "self.n_old is neither state nor a constant"),
    ],
)
def test_a_declined_class_says_the_line_and_construct(tmp_path, body, expected):
    src = f"""
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.m = 0
        {{items}}

    def execute(self, row):
        x = 0
        y = 1
        z = 2
        {body}
        return {{"n": self.n}}
"""
    # (a container attribute keeps a class on Python wherever it is used: only where the case uses one)
    src = src.replace("{items}", "self.items = []" if "items" in body else "pass")
    d = _plan(tmp_path, src, "n bigint", {"v": "double"})
    assert isinstance(d, Declined), d
    assert expected in str(d), str(d)


def test_attributes_reading_each_others_previous_values_are_declined(tmp_path):
    src = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.a = 0
        self.b = 0

    def execute(self, row):
        a, b = self.a, self.b
        self.a = b + row["v"]
        self.b = a + 1
        return {"a": self.a}
"""
    d = _plan(tmp_path, src, "a bigint", {"v": "bigint"})
    assert isinstance(d, Declined)


def test_a_float_sum_from_another_start_and_a_float_key_are_declined(tmp_path):
    src = COUNTER.replace("self.total = 0.0", "self.total = 1.5")
    d = _plan(tmp_path, src, "n bigint, total double", {"v": "double"})
    assert "a float sum starting from 1.5" in str(d)
    d = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"}, key_type="double")
    assert "a key of type double" in str(d)


def test_a_stream_plans_with_stored_state_or_says_which_attribute_keeps_it_on_python(tmp_path):
    d = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"}, streaming=True, engine=False)
    assert "a stream on this engine (native stream steps run on engine 'bulk')" in str(d)
    # unannotated: n and total are stored as JSON (an int, a float: planned)
    plan = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"}, streaming=True)
    assert isinstance(plan, NativePlan) and plan.stream is not None
    # a timedelta kept as JSON is not (Spark SQL has no writer of Python's JSON of one)
    gaps = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.last = None
        self.gap = None

    def execute(self, row):
        if self.last is not None:
            self.gap = row["ts"] - self.last
        self.last = row["ts"]
        return {"n": 1}
"""
    assert isinstance(_plan(tmp_path, gaps, "n bigint", {"ts": "timestamp"}), NativePlan)
    d = _plan(tmp_path, gaps, "n bigint", {"ts": "timestamp"}, streaming=True)
    assert "attribute 'gap' holds a timedelta stored as JSON (native stream steps plan ints" in str(d), d
    typed = COUNTER.replace("class C(StatefulFunction):", "class C(StatefulFunction):\n    total: float")
    plan = _plan(tmp_path, typed, "n bigint, total double", {"v": "double"}, streaming=True)
    assert isinstance(plan, NativePlan) and plan.stream is not None
    # the key's stored row starts the recurrences; the new state is the key's last row's
    assert plan.stream.stored == ["__ks_s__has_attrs", "__ks_s_n", "__ks_s_total"]
    sql = plan.sql()
    assert "CASE WHEN `__ks_s__has_attrs` THEN" in sql and "lead(`__ksn_seq`)" in sql
    assert [c for c, _ in plan.stream.columns] == ["__ks_s_n", "__ks_s_total"]
    # JSON ints are read back strictly (a stored text that is not one raises)
    assert "RLIKE '^-?[0-9]{1,19}$'" in sql
    per_key = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.d = {}

    def execute(self, row):
        k = self.ctx.get_key()
        if k not in self.d:
            self.d[k] = {"n": 0}
        self.d[k]["n"] += 1
        return {"n": self.d[k]["n"]}
"""
    assert isinstance(_plan(tmp_path, per_key, "n bigint", {"v": "double"}), NativePlan)
    assert isinstance(_plan(tmp_path, per_key, "n bigint", {"v": "double"}, streaming=True), NativePlan)
    # a string field of the entry reads back without its quotes: kept on Python on a stream
    named = per_key.replace('{"n": 0}', '{"n": 0, "s": "x"}')
    assert isinstance(_plan(tmp_path, named, "n bigint", {"v": "double"}), NativePlan)
    d = _plan(tmp_path, named, "n bigint", {"v": "double"}, streaming=True)
    assert "attribute 'd': field 's' of the per-key dict holds a str" in str(d), d


def test_a_stream_plans_a_typed_timestamp_attribute_set_or_left_none(tmp_path):
    kept = """
import datetime


class C(StatefulFunction):
    last: datetime.datetime
    never: datetime.datetime

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.last = None
        self.never = None

    def execute(self, row):
        self.n += 1
        if row["v"] > 0:
            self.last = row["ts"]
        return {"n": self.n}
"""
    plan = _plan(tmp_path, kept, "n bigint", {"v": "double", "ts": "timestamp"}, streaming=True)
    assert isinstance(plan, NativePlan) and plan.stream is not None, plan
    assert [c for c, _ in plan.stream.columns] == ["__ks_s_n", "__ks_s_last", "__ks_s_never"]
    # left None in a map column: declined (Spark compares no maps), the rest as it was
    mapped = kept.replace("    never: datetime.datetime", "    never: dict[str, int]")
    d = _plan(tmp_path, mapped, "n bigint", {"v": "double", "ts": "timestamp"}, streaming=True)
    assert "attribute 'never' is stored as MAP" in str(d), d
    # an annotated str attribute holding a datetime is declined, naming it
    wrong = kept.replace("last: datetime.datetime", "last: str")
    d = _plan(tmp_path, wrong, "n bigint", {"v": "double", "ts": "timestamp"}, streaming=True)
    assert "attribute 'last' is stored as STRING and the plan holds a datetime" in str(d), d


RESET = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, row):
        if row["v"] > 10:
            self.n = 0
        else:
            self.n += 1
        return {"n": self.n}
"""


def test_rows_that_tie_get_the_arrival_order_only_where_a_window_sorts_again(tmp_path):
    """W1's counter: every window over the key's one sort, no arrival-order column (one sort
    key and one shuffled column less); a sum reset by a condition groups the key's rows again
    (a second sort: ties ordered by arrival in every window); a stream step finds the key's last
    row by arrival."""
    counter = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"})
    assert isinstance(counter, NativePlan) and "__ksn_seq" not in counter.sql(), counter.sql()
    reset = _plan(tmp_path, RESET, "n bigint", {"v": "double"})
    assert isinstance(reset, NativePlan)
    sql = reset.sql()
    assert "monotonically_increasing_id() AS `__ksn_seq`" in sql
    windows = sql.split(" OVER ")[1:]
    assert windows and all("`__ksn_seq`" in w.split(")")[0] for w in windows), sql
    stream = _plan(tmp_path, COUNTER, "n bigint, total double", {"v": "double"}, streaming=True)
    assert isinstance(stream, NativePlan) and "lead(`__ksn_seq`)" in stream.sql()


@pytest.mark.parametrize(
    "lines, expected",
    [
        # Python: UnboundLocalError on every row (STEP is a local of execute: it is assigned there)
        ("STEP += row['v']\n        self.n = self.n + STEP", "local 'STEP' may be unset here"),
        # Python: TypeError, 'int' object is not callable (abs is a local once assigned)
        ("abs = 3\n        self.n = self.n + abs(row['v'])", "abs(row['v'])"),
    ],
)
def test_a_name_execute_binds_is_its_local_not_the_modules_or_a_builtin(tmp_path, lines, expected):
    """(the planner read ``STEP`` as the module's constant and ``abs`` as the builtin: the native
    plan returned rows where Python fails each one)"""
    src = f"""
STEP = 5


class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, row):
        {lines}
        return {{"n": self.n}}
"""
    d = _plan(tmp_path, src, "n double", {"v": "bigint"})
    assert isinstance(d, Declined), d
    assert expected in str(d), str(d)


def test_a_floor_division_past_32_digits_is_declined(tmp_path):
    """Spark types the DECIMAL(38,0) quotient DECIMAL(38,6): past 32 digits it overflows (an error
    under ANSI, NULL otherwise), so the planner declines such a // rather than give either."""
    src = """
class C(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, row):
        self.n += 1
        return {"q": (row["v"] * 1152921504606846976) // 3}
"""
    d = _plan(tmp_path, src, "q double", {"v": "bigint"})
    assert isinstance(d, Declined) and "a floor division of an integer that may pass 32 digits" in str(d), d
    ok = _plan(tmp_path, src.replace("1152921504606846976", "1073741824"), "q double", {"v": "bigint"})
    assert isinstance(ok, NativePlan), ok

"""The generated per-row loop of a StatefulFunction (``runtime/row_loop``): every result shape
gives the rows the output rules say, each with the position of the row that produced it; the
rows that are not one tuple of exact types take the general path and are named when wrong."""

import datetime as dt

import numpy as np
import pytest

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.api.errors import OutputSchemaError, UserFunctionError
from spark_keyed_sql.runtime import FunctionSpec, KeyedRunner
from spark_keyed_sql.state.memory import MemoryKeyState, memory_binding

RETURNS = "n bigint, total double, name string, at timestamp"
T = dt.datetime(2026, 1, 2, 3, 4, 5)


class Echo(StatefulFunction):
    """Returns what the row says to return; counts its rows in state."""

    seen: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = 0

    def execute(self, row):
        self.seen += 1
        if row.get("clear"):
            self.ctx.clear_state()
        if row.get("boom"):
            raise ValueError("boom on purpose")
        return row["ret"]


def run(events, key="k1", src0=0, ks=None):
    runner = KeyedRunner(FunctionSpec.build("echo", Echo, RETURNS, {}))
    ks = ks if ks is not None else MemoryKeyState()
    out, src = [], []
    runner.run_function(key, events, memory_binding(ks, lambda: None), None, None, out, src, src0)
    return out, src, ks


# (what execute returns, the rows it stands for) - written out by hand from docs/concepts.md
CASES = [
    ([(1, 1.5, "a", T)], [(1, 1.5, "a", T)]),  # the common shape: one tuple of exact types
    (None, []),
    ([], []),
    ([(2, 3, "b", None)], [(2, 3.0, "b", None)]),  # an int where a double goes: widened
    ([(np.int64(3), np.float64(0.5), "c", T)], [(3, 0.5, "c", T)]),  # numpy values
    ((4, 4.5, "d", T), [(4, 4.5, "d", T)]),  # a bare tuple
    ({"n": 5}, [(5, None, None, None)]),
    ([(6, 6.0, "e", T), {"name": "f"}], [(6, 6.0, "e", T), (None, None, "f", None)]),
    ((r for r in [(7, 7.0, "g", T), (8, 8.0, "h", T)]), [(7, 7.0, "g", T), (8, 8.0, "h", T)]),
    ([(True, 1.0, "i", T)], "expected bigint, got bool"),
    ([(1, 1.0, "j")], "returned 3 value(s)"),
    ([(2**63, 1.0, "k", T)], "does not fit bigint"),
    ([(1, 1.0, 9, T)], "expected string, got int"),
]


def test_each_result_shape_gives_its_rows_and_their_positions():
    good = [(ret, rows) for ret, rows in CASES if isinstance(rows, list)]
    events = [{"ret": ret} for ret, _ in good]
    out, src, _ = run(events, src0=100)
    assert out == [row for _, rows in good for row in rows]
    assert src == [100 + i for i, (_, rows) in enumerate(good) for _ in rows]


@pytest.mark.parametrize("ret, message", [c for c in CASES if isinstance(c[1], str)])
def test_a_wrong_result_is_named_with_its_key_and_row(ret, message):
    events = [{"ret": [(1, 1.0, "ok", T)]}, {"ret": ret, "at_row": 2}]
    with pytest.raises(OutputSchemaError) as info:
        run(events, key="u7")
    text = str(info.value)
    assert message.lower() in text.lower() and "'u7'" in text and "'at_row': 2" in text


def test_user_code_that_raises_is_named_with_its_key_and_row():
    with pytest.raises(UserFunctionError) as info:
        run([{"ret": None}, {"ret": None, "boom": True, "row_id": 42}], key="u9")
    assert "'u9'" in str(info.value) and "'row_id': 42" in str(info.value) and "boom on purpose" in str(info.value)
    assert info.value.key == "u9"


@pytest.mark.parametrize(
    "clears, saved",
    [
        ([True, False, False], 2),  # cleared at the first row, two rows counted after it
        ([False, False, True], None),  # cleared by the last row: the key's state is gone
        ([False, True, False], 1),
        ([False, False, False], 3),
    ],
)
def test_clear_state_is_followed_by_the_later_rows_updates(clears, saved):
    _, _, ks = run([{"ret": None, "clear": c} for c in clears])
    # oracle: the count of rows after the last clear (the clearing row's own += ran before it)
    assert (ks.attributes[0] if ks.attributes is not None else None) == saved

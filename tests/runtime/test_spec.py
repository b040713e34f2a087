"""The instance a runtime runs: what the class's __init__ made, self.ctx attached, and the
plain __dict__ the runtime gives it (for CPython's fast attribute path) set without going
through the class's own __setattr__."""

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.api.context import KeyContext
from spark_keyed_sql.runtime import FunctionSpec


class Watched(StatefulFunction):
    def __init__(self, start=0, **kw):
        object.__setattr__(self, "_seen", [])
        super().__init__(**kw)
        self.n = start
        self.tags = {"a": [1]}

    def __setattr__(self, name, value):
        self._seen.append(name)
        object.__setattr__(self, name, value)

    def execute(self, row):
        self.n += 1
        return [(self.n,)]


def test_instantiate_keeps_init_attributes_and_ctx_and_bypasses_user_setattr():
    inst = FunctionSpec.build("watched", Watched, "n bigint", {"start": 5}).instantiate()
    assert inst._seen == ["n", "tags"]  # no '__dict__' assignment shown to the class
    assert (inst.n, inst.tags) == (5, {"a": [1]})
    assert isinstance(inst.ctx, KeyContext) and inst.ctx is inst.__dict__["_ctx"]
    assert type(inst.__dict__) is dict
    assert [inst.execute({}) for _ in range(2)] == [[(6,)], [(7,)]]

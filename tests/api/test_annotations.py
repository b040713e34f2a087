"""String annotations (``from __future__ import annotations``) of typed state, resolved where a
class arrives without its module: a class shipped by value to a Python worker, whose
``sys.modules`` has no notebook's or script's module to evaluate ``dt.datetime`` in."""

import importlib.util
import sys
import textwrap

from pyspark import cloudpickle

from spark_keyed_sql.api.function import typed_attributes
from spark_keyed_sql.api.types import ArrayType, AtomicType

SOURCE = textwrap.dedent(
    """\
    from __future__ import annotations

    import datetime as dt

    from spark_keyed_sql import StatefulFunction


    class Visits(StatefulFunction):
        last_seen: dt.datetime
        pages: list[str]

        def __init__(self, **kw):
            super().__init__(**kw)
            self.last_seen = None
            self.pages = []

        def execute(self, row):
            self.last_seen = row["ts"]
            self.pages.append(row["page"])
            return {"n": len(self.pages)}
    """
)


def test_a_class_shipped_by_value_keeps_its_string_annotations_types(tmp_path):
    name = "ks_annotations_gone"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    expected = {"last_seen": AtomicType("timestamp"), "pages": ArrayType(AtomicType("string"))}
    try:
        assert typed_attributes(module.Visits) == expected  # the driver: its module at hand
        cloudpickle.register_pickle_by_value(module)
        payload = cloudpickle.dumps(module.Visits)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[name]
    shipped = cloudpickle.loads(payload)  # a worker: no such module
    assert shipped.__module__ == name and name not in sys.modules
    assert typed_attributes(shipped) == expected

"""Annotated attributes as a module with ``from __future__ import annotations`` writes them (every
annotation a string), and containers an array column stores: a ``set[...]``, ``frozenset[...]`` or
``tuple[..., ...]`` attribute is that container again in the next batch, at any depth."""

from __future__ import annotations

import datetime as dt
import importlib.util
import subprocess
import sys
import textwrap
from typing import Optional

import pytest

from spark_keyed_sql import KeyedTester, StatefulFunction
from spark_keyed_sql.api.errors import RegistrationError
from spark_keyed_sql.api.function import typed_attributes
from spark_keyed_sql.api.types import ArrayType, AtomicType, MapType, parse_type


class Containers(StatefulFunction):
    tags: set[str]
    seen: tuple[int, ...]
    by_tag: dict[str, frozenset[int]]
    names: list[str]
    last: Optional[dt.datetime]  # noqa: UP045 - the spelling older code has
    pair: "a bigint, b string"  # noqa: F722 - a DDL string stays a DDL string

    def __init__(self, **kw):
        super().__init__(**kw)
        self.tags, self.seen, self.by_tag, self.names, self.last, self.pair = set(), (), {}, [], None, None

    def execute(self, e):
        self.tags.add(e["tag"])  # a set's own methods, in every batch
        self.seen += (e["n"],)
        self.by_tag[e["tag"]] = self.by_tag.get(e["tag"], frozenset()) | {e["n"]}
        self.names.append(e["tag"])
        self.last = dt.datetime(2024, 1, 1) + dt.timedelta(days=e["n"])
        self.pair = {"a": e["n"], "b": e["tag"]}


def test_string_annotations_are_typed_state():
    types = typed_attributes(Containers)
    assert types["tags"] == ArrayType(parse_type("string")) and types["names"] == ArrayType(parse_type("string"))
    assert types["by_tag"] == MapType(parse_type("string"), ArrayType(parse_type("bigint")))
    assert types["last"] == parse_type("timestamp") and types["pair"] == parse_type("a bigint, b string")


def test_containers_come_back_as_annotated():
    t = KeyedTester(Containers)
    batches = [[("x", 1)], [("y", 2), ("x", 3)], [("y", 4)]]
    tags, seen, by_tag, names = set(), (), {}, []
    for batch in batches:
        t.run([{"tag": tag, "n": n} for tag, n in batch], key="k")
        for tag, n in batch:  # the oracle: the same updates on plain Python values
            tags.add(tag)
            seen += (n,)
            by_tag[tag] = by_tag.get(tag, frozenset()) | {n}
            names.append(tag)
        state = t.state("k")
        assert state["tags"] == tags and type(state["tags"]) is set
        assert state["seen"] == seen and type(state["seen"]) is tuple
        assert state["by_tag"] == by_tag and all(type(v) is frozenset for v in state["by_tag"].values())
        assert state["names"] == names and type(state["names"]) is list
    assert state["last"] == dt.datetime(2024, 1, 5) and state["pair"] == {"a": 4, "b": "y"}


class Unknown(StatefulFunction):
    n: NoSuchType  # noqa: F821 - neither Python nor DDL

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        return None


def test_an_annotation_that_is_neither_python_nor_ddl_is_named():
    with pytest.raises(RegistrationError, match=r"Unknown\.n: annotation 'NoSuchType'"):
        KeyedTester(Unknown)


class TagSet(StatefulFunction):
    tags: set[str]

    def __init__(self, **kw):
        super().__init__(**kw)
        self.tags = set()

    def execute(self, e):
        self.tags.add(e["tag"])  # fails on a list: the state came back as what the annotation says
        return {"n_tags": len(self.tags)}


def test_a_set_attribute_across_runs_of_a_checkpoint(spark, ks, tmp_path):
    ks.register("tag_set", TagSet, returns="n_tags bigint")
    src, cp = str(tmp_path / "in"), str(tmp_path / "cp")
    sql = f"SELECT k, n_tags FROM parquet.`{src}` GROUP BY KEY k WITH STATE tag_set(tag) ORDER BY seq"
    batches = [[("a", 0, "x"), ("a", 1, "y")], [("a", 2, "x"), ("b", 3, "z")], [("a", 4, "w")]]
    seen: dict[str, set[str]] = {}
    expected = []
    for rows in batches:
        spark.createDataFrame(rows, "k string, seq int, tag string").write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=str(tmp_path / "out"))
        for k, _, tag in rows:
            seen.setdefault(k, set()).add(tag)
            expected.append((k, len(seen[k])))
        got = [(r.k, r.n_tags) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
        assert sorted(got) == sorted(expected)
    state = {r.k: sorted(r.tags) for r in ks.read_state(cp).collect()}
    assert state == {k: sorted(v) for k, v in seen.items()}


# a class shipped by value to a Python worker (a notebook's, a script's) arrives where sys.modules
# has no module to evaluate `dt.datetime` in: what the driver evaluated travels with the class
SHIPPED_SOURCE = textwrap.dedent(
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
    """The class pickled by value on the 'driver', unpickled in another process (a worker) that
    has no such module; there its typed attributes are the same."""
    from pyspark import cloudpickle

    name = "ks_annotations_gone"
    path = tmp_path / "driver" / f"{name}.py"
    path.parent.mkdir()
    path.write_text(SHIPPED_SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    expected = {"last_seen": AtomicType("timestamp"), "pages": ArrayType(AtomicType("string"))}
    try:
        assert typed_attributes(module.Visits) == expected  # the driver: its module at hand
        cloudpickle.register_pickle_by_value(module)
        (tmp_path / "class.pkl").write_bytes(cloudpickle.dumps(module.Visits))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[name]
    worker = textwrap.dedent(
        f"""\
        import pickle, sys
        cls = pickle.loads(open({str(tmp_path / "class.pkl")!r}, "rb").read())
        assert {name!r} not in sys.modules or sys.modules[{name!r}] is None
        from spark_keyed_sql.api.function import typed_attributes
        print(sorted((k, v.ddl()) for k, v in typed_attributes(cls).items()))
        """
    )
    done = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(sorted((k, v.ddl()) for k, v in expected.items()))


class Optionals(StatefulFunction):
    last: dt.datetime | None
    count: int | None
    tags: list[str] | None

    def __init__(self, **kw):
        super().__init__(**kw)
        self.last, self.count, self.tags = None, None, None

    def execute(self, e):
        self.count = (self.count or 0) + 1
        self.last = dt.datetime(2024, 1, 1) + dt.timedelta(days=e["n"])
        self.tags = (self.tags or []) + [e["tag"]]
        return {"count": self.count}


def test_x_or_none_annotations_are_typed_state_as_optional_is():
    """``X | None`` (PEP 604) is ``Optional[X]``: the column of X, NULL allowed."""
    types = typed_attributes(Optionals)
    assert types == {
        "last": parse_type("timestamp"),
        "count": parse_type("bigint"),
        "tags": ArrayType(parse_type("string")),
    }
    t = KeyedTester(Optionals)
    t.run([{"n": 1, "tag": "a"}, {"n": 3, "tag": "b"}], key="k")
    assert t.state("k") == {"last": dt.datetime(2024, 1, 4), "count": 2, "tags": ["a", "b"]}


class ClassDefaults(StatefulFunction):
    """Annotated attributes given their first values in the class body, no __init__."""

    count: int = 0
    tags: list[str] = []

    def execute(self, e):
        self.count += 1
        self.tags.append(e["tag"])
        return {"count": self.count, "n_tags": len(self.tags)}


def test_annotated_class_attributes_with_values_are_state_from_those_values(spark, ks):
    """(``count: int = 0`` in the class body failed on the first row: 'first assigned outside
    __init__'); each key starts from the class's value, a list included (a copy per key)."""
    rows = [("a", 0, "x"), ("b", 1, "y"), ("a", 2, "z")]
    expected, per_key = [], {}
    for k, _, tag in rows:
        per_key.setdefault(k, []).append(tag)
        expected.append((k, len(per_key[k]), len(per_key[k])))
    t = KeyedTester(ClassDefaults, returns="count bigint, n_tags bigint")
    got = [(k, r["count"], r["n_tags"]) for k, _, tag in rows for r in t.run([{"tag": tag}], key=k)]
    assert got == expected and ClassDefaults.tags == [] and t.state("a") == {"count": 2, "tags": ["x", "z"]}
    ks.register("class_defaults", ClassDefaults, returns="count bigint, n_tags bigint")
    spark.createDataFrame(rows, "k string, seq int, tag string").createOrReplaceTempView("class_defaults_src")
    got = ks.sql(
        "SELECT k, s.count, s.n_tags FROM class_defaults_src GROUP BY KEY k WITH STATE class_defaults(tag) AS s "
        "ORDER BY seq"
    ).collect()
    assert sorted(tuple(r) for r in got) == sorted(expected)


class StrictDefaults(ClassDefaults):
    count: int = 5  # a subclass's value is the one its keys start from


class WithInit(StatefulFunction):
    """An __init__ of its own: what it sets is the state; a class-body value stays a constant."""

    threshold: float = 10.0

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        self.n += 1
        return {"over": self.n > self.threshold}


def test_class_body_values_resolve_as_the_class_does_and_stay_constants_beside_an_init():
    t = KeyedTester(StrictDefaults, returns="count bigint, n_tags bigint")
    assert t.run([{"tag": "x"}], key="a") == [{"count": 6, "n_tags": 1}]
    t = KeyedTester(WithInit, returns="over boolean")
    t.run([{}], key="a")
    assert t.state("a") == {"n": 1}

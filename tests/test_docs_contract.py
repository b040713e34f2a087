"""The reference pages name what the code accepts, no more and no less: docs/sql.md's OPTIONS
table against the options the rewriter accepts and the engines it can choose, docs/api.md's
typed-state table against the accessor methods. No Spark needed."""

import inspect
import re
from pathlib import Path

from spark_keyed_sql import KeyedSQL
from spark_keyed_sql.api.state import ListAccessor, MapAccessor, ValueAccessor
from spark_keyed_sql.engines import ENGINES
from spark_keyed_sql.sql.rewriter import KNOWN_OPTIONS, STREAMING_ONLY_OPTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first markdown table in ``text``, as lists of cell texts."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(lines) >= 3 and set(lines[1].replace("|", "").split()) <= {"---"}, lines[:2]
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[2:]]


def documented_options() -> dict[str, str]:
    out = {}
    for first, meaning in table_rows(section("sql.md", "OPTIONS")):
        names = re.findall(r"`([a-z_]+)`", first)
        assert names, f"OPTIONS row without an option name: {first!r}"
        for n in names:
            assert n not in out, f"option {n} documented twice"
            out[n] = meaning
    return out


def test_options_table_lists_exactly_the_accepted_options():
    documented = set(documented_options())
    assert documented - KNOWN_OPTIONS == set(), "documented in docs/sql.md but refused by the rewriter"
    assert KNOWN_OPTIONS - documented == set(), "accepted by the rewriter but missing from docs/sql.md's OPTIONS table"


def test_streaming_only_options_are_said_to_be_streaming_only():
    for name, meaning in documented_options().items():
        assert ("streaming sources only" in meaning) == (name in STREAMING_ONLY_OPTIONS), name


def test_engine_row_names_every_engine_and_the_real_default():
    meaning = documented_options()["engine"]
    named = set(re.findall(r"`'([a-z]+)'`", meaning))
    assert named == set(ENGINES) | {"auto"}
    default = inspect.signature(KeyedSQL).parameters["engine"].default
    assert re.search(rf"`'{default}'` \(the default", meaning), (default, meaning)


def public_methods(cls: type) -> set[str]:
    return {n for n, v in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


def test_api_page_lists_every_typed_state_accessor():
    rows = {
        re.match(r"`(\w+)\(", decl).group(1): cell
        for decl, cell in table_rows(section("api.md", "Typed state: `ValueState`, `ListState`, `MapState`"))
    }
    for name, accessor in (("ValueState", ValueAccessor), ("ListState", ListAccessor), ("MapState", MapAccessor)):
        documented = set(re.findall(r"`(\w+)\(", rows[name]))
        assert documented == public_methods(accessor), name


def test_api_page_shows_the_descriptors_real_signatures():
    from spark_keyed_sql import ListState, MapState, ValueState

    declared = [row[0] for row in table_rows(section("api.md", "Typed state: `ValueState`, `ListState`, `MapState`"))]
    for cls in (ValueState, ListState, MapState):
        params = []
        for p in inspect.signature(cls).parameters.values():
            if p.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in params:
                params.append("*")  # keyword-only from here, as Python writes it
            params.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}")
        assert f"`{cls.__name__}({', '.join(params)})`" in declared, declared

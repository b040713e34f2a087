"""Every code block of the docs runs: docs/sql.md's Python setup, then each SQL example;
docs/state.md's blocks on top of that setup; the CLI synopsis against the parser."""

import ast
import re
import shutil
from pathlib import Path

import pytest
from conftest import spark_lacks

from spark_keyed_sql import SparkVersionError
from spark_keyed_sql.cli import build_parser, split_statements

DOC = Path(__file__).resolve().parents[1] / "docs" / "sql.md"


@pytest.fixture(scope="module", autouse=True)
def _remove_docs_dir():
    """The docs name /tmp/spark-keyed-sql-docs in their examples; nothing is left there after."""
    yield
    shutil.rmtree("/tmp/spark-keyed-sql-docs", ignore_errors=True)


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_sql_reference_examples_run(spark, ks_auto):
    shutil.rmtree("/tmp/spark-keyed-sql-docs", ignore_errors=True)
    setup, *more = blocks("python")  # the setup, then the classes of later sections
    scope = {"__name__": "docs_sql"}
    for code in (setup, *more):
        exec(compile(code, "docs/sql.md", "exec"), scope)
    docs_ks = scope["ks"]
    sqls = blocks("sql")
    assert len(sqls) >= 12
    results = {}
    for sql in sqls:
        if "checkpoint =" in sql:
            summary = docs_ks.run(sql, output="/tmp/spark-keyed-sql-docs/out")
            assert summary["output_rows"] == 4
            continue
        lacking = next((spark_lacks(e) for e in re.findall(r"engine = '(\w+)'", sql) if spark_lacks(e)), None)
        if lacking:  # an engine this Spark does not have: one error naming the version it needs
            with pytest.raises(SparkVersionError, match=r"needs Spark \d\.\d or newer; this session runs Spark"):
                docs_ks.sql(sql)
            continue
        results[sql.split("\n")[0] + sql.split("\n")[-2]] = rows = [tuple(r) for r in docs_ks.sql(sql).collect()]
        assert rows, sql
    by_first = {k: v for k, v in results.items()}
    keyed = next(v for k, v in by_first.items() if k.startswith("SELECT user_id, s.session_count, s.total_value"))
    assert sorted(keyed) == [("U2", 1, 5.0), ("u1", 1, 1.0), ("u1", 2, 3.0), ("u2", 1, 4.0)]
    lowered = next(v for k, v in by_first.items() if k.startswith("SELECT key0"))
    assert sorted(lowered) == [("u1", 1), ("u1", 2), ("u2", 1), ("u2", 2)]
    unkeyed = next(v for k, v in by_first.items() if k.startswith("SELECT session_count, total_value"))
    assert sorted(unkeyed) == [(1, 1.0), (2, 6.0), (3, 8.0), (4, 12.0)]
    boot = next(v for k, v in by_first.items() if "saved_state" in k)
    assert sorted(boot) == [("U2", 1, 5.0), ("u1", 11, 101.0), ("u1", 12, 103.0), ("u2", 1, 4.0)]
    top = next(v for k, v in by_first.items() if k.startswith("SELECT user_id, s.total_value AS total"))
    assert top == [("U2", 5.0), ("u2", 4.0)]
    # several inputs, by hand: i1 clicked at 2 after its impression at 1; i2's click at 3 came
    # before its impression (no campaign yet), the one at 5 after it
    joined = next(v for k, v in by_first.items() if "ad_join(" in k)
    assert sorted(joined, key=repr) == sorted([("i1", "spring", 3), ("i2", None, 1), ("i2", "summer", 2)], key=repr)
    # a broadcast input, by hand: u1 pays 10 USD at 0.5 then 5 GBP at 2.0; u2 4 USD at 0.5
    converted = next(v for k, v in by_first.items() if "spend(" in k)
    assert sorted(converted) == [("u1", 5.0), ("u1", 15.0), ("u2", 2.0)]


def run_python_block(code: str, scope: dict, where: str) -> list:
    """Run a doc's Python block the way a reader pastes it; the values of its top-level
    expression statements (DataFrames collected) come back, in order."""
    values = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), where, "eval"), scope)
            values.append([tuple(r) for r in value.collect()] if hasattr(value, "collect") else value)
        else:
            exec(compile(ast.Module([node], []), where, "exec"), scope)
    return values


def run_page(page: str, scope: dict) -> list[tuple[str, list]]:
    """Every python and sql block of a docs page in order (sql through the page's ``ks``);
    per block, its language and the results of its statements."""
    out = []
    for lang, code in re.findall(r"```(python|sql)\n(.*?)```", (DOC.parent / page).read_text(), re.S):
        if lang == "python":
            out.append((lang, run_python_block(code, scope, f"docs/{page}")))
        else:
            out.append((lang, [[tuple(r) for r in scope["ks"].sql(s).collect()] for s in split_statements(code)]))
    return out


def test_state_page_examples_run(spark, ks_auto):
    """docs/state.md, on top of docs/sql.md's setup, checked against the events counted by hand:
    u1 1.0, 2.0 then 3.0 in the second run; U2 5.0; u2 4.0."""
    shutil.rmtree("/tmp/spark-keyed-sql-docs", ignore_errors=True)
    scope = {"__name__": "docs_state"}
    setup = blocks("python")[0]
    exec(compile(setup, "docs/sql.md", "exec"), scope)
    results = run_page("state.md", scope)
    assert [lang for lang, _ in results] == ["python", "python", "sql", "python", "sql", "sql", "python"]
    (_, made), (_, reads), (_, read_sql), (_, changes), (_, changes_sql), (_, boot), (_, migrated) = results
    assert [r["output_rows"] for r in made if isinstance(r, dict)] == [4, 1]

    latest = {("u1", 3, 6.0), ("U2", 1, 5.0), ("u2", 1, 4.0)}
    first = {("u1", 2, 3.0), ("U2", 1, 5.0), ("u2", 1, 4.0)}
    assert {r[:3] for r in reads[0]} == latest and {r[3] for r in reads[0]} == {1}
    assert {r[:3] for r in reads[1]} == first and {r[3] for r in reads[1]} == {0}
    assert {r[:3] for r in reads[2]} == latest
    assert [r[:3] for r in read_sql[0]] == [("u1", 3, 6.0)]
    assert {r[:3] for r in read_sql[1]} == first

    all_changes, batch1 = changes
    assert {(r[0], r[1], r[2], r[-1]) for r in batch1} == {
        ("u1", "session_count", "upsert", 1),
        ("u1", "total_value", "upsert", 1),
    }
    assert {(r[0], r[1], r[-1]) for r in all_changes} >= {
        (u, v, 0) for u in ("u1", "U2", "u2") for v in ("session_count", "total_value")
    }
    assert [tuple(r) for r in changes_sql[0]] == [tuple(r) for r in batch1]

    # INITIAL STATE: u1 starts from saved_state's (10, 100.0), the others from nothing
    assert sorted(boot[0]) == sorted(
        [("u1", 11, 101.0), ("u1", 12, 103.0), ("u1", 13, 106.0), ("U2", 1, 5.0), ("u2", 1, 4.0)]
    )

    ks = scope["ks"]
    assert {r[:3] for r in ks.read_state("/tmp/spark-keyed-sql-docs/chk/sessions-8").collect()} == latest
    v2 = {r.user_id: r.n for r in ks.read_state("/tmp/spark-keyed-sql-docs/chk/sessions-v2").collect()}
    assert v2 == {"u1": 3.0, "U2": 1.0, "u2": 1.0}


def _subparser(parser, *names):
    for name in names:
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = action.choices[name]
    return parser


def test_cli_synopsis_matches_the_parser():
    """Every command and flag docs/cli.md's synopsis shows exists in that command's parser, and
    every flag the parser has is shown."""
    text = (DOC.parent / "cli.md").read_text()
    synopsis = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    commands: dict[tuple, set] = {}
    current = None
    for line in synopsis.splitlines():
        m = re.match(r"spark-keyed-sql \[--master URL\] \[--debug\] (state \w+|\w+)", line)
        if m:
            current = tuple(m.group(1).split())
        commands.setdefault(current, set()).update(re.findall(r"--[a-z-]+", line))
    assert set(commands) == {
        ("run",),
        ("explain",),
        ("state", "show"),
        ("state", "migrate"),
        ("state", "delete"),
        ("state", "update"),
        ("state", "unlock"),
    }
    parser = build_parser()
    for cmd, flags in commands.items():
        sub = _subparser(parser, *cmd)
        real = {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        anywhere = {"--master", "--debug"}  # (before or after the command)
        assert flags - anywhere == real - anywhere and anywhere <= real, (cmd, flags, real)


def test_api_rows_format_example_matches_a_plain_python_sum(spark, ks):
    """docs/api.md's `rows_format = "numpy"` example, run as written on every engine: the count
    of each key's rows and the sum of its amounts with NULL and NaN skipped."""
    import math

    text = (DOC.parent / "api.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if 'rows_format = "numpy"' in c]
    scope: dict = {}
    exec(compile(code, "docs/api.md", "exec"), scope)
    rows = [("a", 1.5), ("a", None), ("b", float("nan")), ("a", 2.0), ("c", None), ("b", 4.0)]
    spark.createDataFrame(rows, "user_id string, amount double").createOrReplaceTempView("api_np_events")
    ks.register("api_np_totals", scope["SpendTotals"])
    got = {
        r.user_id: (r.n, r.total)
        for r in ks.sql(
            "SELECT user_id, n, total FROM api_np_events GROUP BY KEY user_id WITH STATE api_np_totals(amount)"
        ).collect()
    }
    want: dict = {}
    for k, v in rows:
        n, t = want.get(k, (0, 0.0))
        want[k] = (n + 1, t + (v if v is not None and not math.isnan(v) else 0.0))
    assert got == want

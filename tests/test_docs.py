"""Every code block of docs/sql.md runs: the Python setup, then each SQL example."""
import re
import shutil
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "sql.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_sql_reference_examples_run(spark, ks_auto):
    shutil.rmtree("/tmp/spark-keyed-sql-docs", ignore_errors=True)
    (setup,) = blocks("python")
    scope = {"__name__": "docs_sql"}
    exec(compile(setup, "docs/sql.md", "exec"), scope)
    docs_ks = scope["ks"]
    sqls = blocks("sql")
    assert len(sqls) >= 12
    results = {}
    for sql in sqls:
        if "checkpoint =" in sql:
            summary = docs_ks.run(sql, output="/tmp/spark-keyed-sql-docs/out")
            assert summary["output_rows"] == 4
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

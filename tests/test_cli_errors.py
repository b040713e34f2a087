"""The CLI answers every failure with one ``error:`` line (our errors add the user's frames
below it), naming lines of the SQL file; ``--debug`` gives the full trace."""

import textwrap

import pytest

from spark_keyed_sql import cli


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _position(text: str, needle: str, nth: int = 1) -> tuple[int, int]:
    """1-based (line, column) of the nth ``needle`` in ``text``: the oracle for file positions."""
    at = -1
    for _ in range(nth):
        at = text.index(needle, at + 1)
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def test_statement_spans_give_file_lines():
    text = "-- header\nCREATE VIEW v AS SELECT 1;\n\n  -- the query\n  SELECT *\n  FROM v; SELECT 2"
    spans = cli.statement_spans(text)
    assert [s for s, _, _ in spans] == cli.split_statements(text)
    for stmt, line, col in spans:
        first = next(line for line in stmt.splitlines() if not line.strip().startswith("--")).strip()
        assert (line, col) == _position(text, first), stmt


def test_a_syntax_error_below_comment_lines_names_the_files_line(spark, tmp_path, capsys):
    """The statement's own leading comments (a ``-- udf:`` line, a header) are not counted twice:
    the error named the line below the right one for each comment line above the statement."""
    sql = tmp_path / "q.sql"
    text = textwrap.dedent(
        """\
        -- the sessions query
        -- (a header of two lines)
        SELECT user_id, c.n
        FROM VALUES ('u1', 1.0D) AS ev(user_id, value)
        GROUP BY KEY user_id
        WITH STATE counter(value AS c ORDER BY value
        """
    )
    sql.write_text(text)
    rc, _, err = _run(capsys, "explain", str(sql))
    line, _ = _position(text, "WITH STATE counter")
    assert rc == 2
    assert err.startswith(f"error: {sql}, line {line}, column "), err


def test_missing_csv_is_one_line_naming_the_path(spark, tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    sql = tmp_path / "q.sql"
    sql.write_text(
        "-- a view over a file that is not there\n"
        f"CREATE OR REPLACE TEMP VIEW ev AS SELECT * FROM csv.`{missing}`;\n"
        "SELECT * FROM ev\n"
    )
    rc, out, err = _run(capsys, "run", str(sql))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and str(missing) in err and "line 2" in err and "Traceback" not in err
    with pytest.raises(Exception, match="PATH_NOT_FOUND"):
        cli.main(["--debug", "run", str(sql)])
    capsys.readouterr()


def test_syntax_error_names_the_files_line(spark, tmp_path, capsys):
    sql = tmp_path / "q.sql"
    text = textwrap.dedent(
        """\
        -- views first
        CREATE OR REPLACE TEMP VIEW ev AS
          SELECT 'u1' AS user_id, 1.0D AS value;

        SELECT user_id, c.n
        FROM ev
        GROUP BY KEY user_id
        WITH STATE counter(value AS c ORDER BY value
        """
    )
    sql.write_text(text)
    rc, _, err = _run(capsys, "explain", str(sql))
    line, _ = _position(text, "WITH STATE counter")
    assert rc == 2 and len(err.strip().splitlines()) <= 3, err  # the line, and Spark-style pointer if any
    assert err.startswith(f"error: {sql}, line {line}, column "), err


def test_user_function_error_is_one_error_line_with_the_users_frame(spark, tmp_path, capsys, monkeypatch):
    mod = tmp_path / "cli_err_functions.py"
    mod.write_text(
        "from spark_keyed_sql import StatefulFunction\n\n\n"
        "class Buggy(StatefulFunction):\n"
        "    def execute(self, event):\n"
        "        return {'n': 1 // int(event['value'] + 3.5)}\n"
    )
    sql = tmp_path / "q.sql"
    sql.write_text(
        "-- udf: buggy = cli_err_functions:Buggy returns n bigint\n"
        "CREATE OR REPLACE TEMP VIEW cli_err_ev AS\n"
        "  SELECT * FROM VALUES ('u1', 1.0D), ('u7', -3.5D) AS t(user_id, value);\n"
        "SELECT * FROM cli_err_ev GROUP BY KEY user_id WITH STATE buggy(value)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, _, err = _run(capsys, "run", str(sql))
    lines = err.strip().splitlines()
    assert rc == 2 and [line for line in lines if line.startswith("error:")] == lines[:1], err
    assert "function 'buggy' failed for key 'u7' on row {'value': -3.5}: ZeroDivisionError" in lines[0]
    assert any(f'{mod}", line 6, in execute' in line for line in lines[1:]), err
    assert all(line.startswith("  ") for line in lines[1:]) and len(lines) <= 8, err


def test_unreadable_file_is_one_line(capsys, tmp_path):
    rc, _, err = _run(capsys, "run", str(tmp_path / "missing.sql"))
    assert rc == 2 and err.strip() == f"error: cannot read {tmp_path / 'missing.sql'}: No such file or directory"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "{empty}"], "holds no SQL statement"),
        (["run", "{query}", "--checkpoint", "/tmp/cp"], "--checkpoint needs --output"),
        (["run", "{query}", "--udf", "nonsense"], "--udf / '-- udf:' expects NAME=module:Class"),
        (
            ["run", "{query}", "--udf", "f=no_such_module_xyz:Cls"],
            "cannot load no_such_module_xyz:Cls for function 'f'",
        ),
    ],
)
def test_usage_errors_exit_2_with_one_line(spark, tmp_path, capsys, argv, message):
    """docs/cli.md: every failure is one `error:` line and exit status 2 (usage errors too)."""
    (tmp_path / "empty.sql").write_text("-- nothing here\n")
    (tmp_path / "q.sql").write_text("SELECT 1 AS one\n")
    argv = [a.format(empty=tmp_path / "empty.sql", query=tmp_path / "q.sql") for a in argv]
    rc, out, err = _run(capsys, *argv)
    assert rc == cli.EXIT_ERROR == 2, (rc, err)
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


def test_a_state_predicate_naming_no_column_is_one_line(spark, ks, tmp_path, capfd):
    """PySpark logs an AnalysisException's query context as a JSON ERROR line before raising it;
    the CLI says the error once (captured at the file descriptors: the log handler writes to
    the process's stderr)."""
    from keyed_functions import Count

    ks.register("cli_where_count", Count, returns="n bigint")
    src, cp, out = (str(tmp_path / d) for d in ("in", "cp", "out"))
    spark.createDataFrame([("a",), ("b",)], "user_id string").write.parquet(src)
    ks.run(f"SELECT user_id, n FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE cli_where_count()", cp, out)
    capfd.readouterr()
    rc = cli.main(["state", "delete", cp, "--where", "no_such_col = 1"])
    err = capfd.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("WARNING: Using incubator")]
    assert rc == cli.EXIT_ERROR and lines and lines[0].startswith("error: ") and "no_such_col" in lines[0], err
    assert not any('"level": "ERROR"' in line for line in lines), err


def test_an_unregistered_function_says_how_the_cli_registers_it(spark, tmp_path, capsys):
    """The CLI user has no ks.register: the error names the file's `-- udf:` line and --udf."""
    sql = tmp_path / "q.sql"
    sql.write_text(
        "CREATE OR REPLACE TEMP VIEW ev AS SELECT 'u1' AS user_id, 1.0D AS value;\n"
        "SELECT user_id, c.n FROM ev GROUP BY KEY user_id WITH STATE nosuchfn(value) AS c\n"
    )
    rc, out, err = _run(capsys, "run", str(sql))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "unknown function 'nosuchfn'" in err and "-- udf: name = module:Class" in err and "--udf" in err, err
    assert "ks.register" not in err


@pytest.mark.parametrize(
    "argv, debug, master",
    [
        (["run", "q.sql", "--debug"], True, None),
        (["--debug", "run", "q.sql"], True, None),
        (["run", "q.sql"], False, None),
        (["--master", "local[1]", "state", "show", "/ck"], False, "local[1]"),
        (["state", "delete", "/ck", "--where", "true", "--master", "sc://h:15002", "--debug"], True, "sc://h:15002"),
    ],
)
def test_master_and_debug_go_before_or_after_the_command(argv, debug, master):
    args = cli.build_parser().parse_args(argv)
    assert (args.debug, args.master) == (debug, master)


def test_messages_of_the_python_api_name_the_clis_flags():
    """The engines' messages name ks.run's keyword arguments; the CLI prints its own flags."""
    said = {
        "ks.run needs checkpoint=... (or OPTIONS (checkpoint = '...'))": "run needs --checkpoint DIR (or OPTIONS",
        "checkpoint given twice: in ks.run(checkpoint=...) and in OPTIONS; give it once": "in --checkpoint and in",
        "checkpoint '/ck' holds several functions ['a', 'b']; pass function=...": "pass --function NAME",
        "the change feed starts after batch 4 (from_batch=4)": "(--from-batch 4)",
    }
    for python, cli_words in said.items():
        assert cli_words in cli.in_cli_words(python), python

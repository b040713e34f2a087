"""DELETE / UPDATE of keyed_state(...) as the dialect reads them (no Spark): what to edit, and
the refusals of every other form."""

import pytest

from spark_keyed_sql.sql.edits import StateEdit, explain_edit, state_edit
from spark_keyed_sql.sql.errors import KeyedQueryError
from spark_keyed_sql.sql.parse import read_statement


def edit_of(sql):
    return state_edit(read_statement(sql, lambda name: False))


def test_delete_and_update_read_as_edits():
    assert edit_of("DELETE FROM keyed_state('/ck') WHERE user_id IN ('u17', 'u99')") == StateEdit(
        "delete", "/ck", None, "user_id IN ('u17', 'u99')"
    )
    assert edit_of(
        "UPDATE keyed_state('/ck', 'session_counter') SET total_value = 0, n = n + 1 WHERE user_id = 'u3'"
    ) == StateEdit("update", "/ck", "session_counter", "user_id = 'u3'", (("total_value", "0"), ("n", "n + 1")))
    # a string holding SQL words is a value, not syntax
    assert edit_of("DELETE FROM keyed_state('/ck') WHERE note = 'x; DROP TABLE t'").where == "note = 'x; DROP TABLE t'"


def test_the_edited_tables_alias_qualifies_its_columns():
    """``s.user_id`` with ``s`` the alias is the column ``user_id``; a subquery's own columns keep
    their qualifiers."""
    assert edit_of("DELETE FROM keyed_state('/ck') s WHERE s.user_id = 'u17' AND n > 1") == StateEdit(
        "delete", "/ck", None, "user_id = 'u17' AND n > 1"
    )
    assert edit_of("UPDATE keyed_state('/ck', 'f') AS s SET s.total = s.total + 1 WHERE s.user_id = 'u3'") == StateEdit(
        "update", "/ck", "f", "user_id = 'u3'", (("total", "total + 1"),)
    )
    sub = "DELETE FROM keyed_state('/ck') WHERE user_id IN (SELECT b.u FROM blocked b)"
    assert edit_of(sub).where == "user_id IN (SELECT b.u FROM blocked AS b)"
    # any other qualifier is a struct field of a state column, with or without the alias before it
    assert edit_of("DELETE FROM keyed_state('/ck') WHERE profile.country = 'US'").where == "profile.country = 'US'"
    assert edit_of("DELETE FROM keyed_state('/ck') s WHERE s.profile.geo.country = 'US'").where == (
        "profile.geo.country = 'US'"
    )


def test_other_statements_are_not_edits():
    assert read_statement("DELETE FROM t WHERE a = 1", lambda name: False) is None
    assert edit_of("SELECT * FROM keyed_state('/ck')") is None


@pytest.mark.parametrize(
    "sql, message",
    [
        ("DELETE FROM keyed_state('/ck')", "needs a WHERE"),
        ("DELETE FROM keyed_state('/ck', 'f', 3) WHERE true", "no batch id"),
        ("DELETE FROM keyed_state() WHERE true", r"keyed_state takes 1 to 2 arguments"),
        ("UPDATE keyed_state('/ck') SET a = 1, A = 2 WHERE true", "twice"),
        ("UPDATE keyed_state('/ck') SET s.a = 1 WHERE true", r"^line 1, column \d+: .*SET takes <column> = <expr>"),
        ("DELETE FROM keyed_state('/ck', 3) WHERE true", r"argument 2 \(the function name\) must be a string"),
        ("DELETE FROM keyed_state(path => '/ck') WHERE true", r"argument 1 \(the checkpoint path\) must be a str"),
        ("DELETE FROM keyed_state(concat('/c', 'k')) WHERE true", r"argument 1 .* got CONCAT\('/c', 'k'\)"),
        ("DELETE FROM keyed_state_changes('/ck') WHERE true", "DELETE of keyed state is written"),
    ],
)
def test_other_forms_are_refused_saying_the_form(sql, message):
    with pytest.raises(KeyedQueryError, match=message):
        edit_of(sql)


def test_explain_says_when_this_session_cannot_run_the_edit():
    edit = StateEdit("delete", "/ck", None, "true")
    assert "runs:      by the query holding the checkpoint" in explain_edit(edit, "bulk")
    text = explain_edit(edit, "tws", "not built through Spark Connect (...)")
    assert "runs:      NOT from this session: not built through Spark Connect (...)" in text


def test_explain_names_checkpoint_function_predicate_and_engine():
    text = explain_edit(StateEdit("update", "/ck", "f", "n > 2", (("total", "0"),)), "bulk")
    assert text.splitlines()[:2] == [
        "== Keyed state edit ==",
        "UPDATE the keyed state of checkpoint '/ck', function 'f'",
    ]
    assert "engine:    'bulk'" in text and "where:     n > 2" in text and "set:       total = 0" in text


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT * FROM keyed_state('/ck', 'f', 2.7)", r"argument 3 \(the batch id\) must be a whole number"),
        ("SELECT * FROM keyed_state('/ck', 'f', 'x')", r"argument 3 \(the batch id\) must be a whole number"),
        ("SELECT * FROM keyed_state('/ck', 'f', 1, 2)", r"^line 1, column 42: keyed_state takes 1 to 3 arguments"),
        ("SELECT * FROM keyed_state_changes('/ck', NULL, 1, true)", r"argument 4 \(the to batch\) must be a whole"),
        ("SELECT * FROM keyed_state('')", r"argument 1 \(the checkpoint path\) must be a string literal"),
    ],
)
def test_a_state_table_read_with_arguments_it_cannot_take_is_refused_before_reading(sql, message):
    from spark_keyed_sql.sql.sources import Sources

    with pytest.raises(KeyedQueryError, match=message):
        Sources(None).replace_keyed_state(read_statement(sql, lambda name: False))  # (no session: nothing read)


def test_batch_ids_may_be_written_as_a_string_or_a_long():
    from sqlglot import exp

    from spark_keyed_sql.sql.sources import state_table_args

    for text in ("'3'", "3L", "3"):
        tree = read_statement(f"SELECT * FROM keyed_state('/ck', 'f', {text})", lambda name: False)
        fn = next(t.this for t in tree.find_all(exp.Table) if isinstance(t.this, exp.Anonymous))
        assert state_table_args(fn, "keyed_state") == ["/ck", "f", 3], text


def test_explain_of_an_edit_naming_no_function_of_a_checkpoint_with_several_says_to_name_one():
    text = explain_edit(StateEdit("delete", "/ck", None, "true"), "bulk", several=True)
    assert text.splitlines()[1] == (
        "DELETE the keyed state of checkpoint '/ck', function (none named, and the checkpoint holds several: name one)"
    )

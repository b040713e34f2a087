"""The checkpoint's own record (spark_keyed_sql.json) as a type: it round-trips, keeps the
file's keys, and a file of another format or a damaged one is refused naming the file."""

import json

import pytest

from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.operator_record import METADATA_FORMAT, CheckpointMeta, OperatorRecord

RECORD = {
    "function": "sessions",
    "class": "app.Sessions",
    "kind": "function",
    "keys": ["user_id"],
    "returns": "n bigint",
    "attributes": [{"name": "n", "type": "bigint", "encoded": False, "initial": 0}],
    "variables": [],
    "ttl_ms": None,
    "engine": "bulk",
    "initial_state": None,
    "absent_attributes": ["n"],
    "partitions": 8,
}


def test_a_record_round_trips_with_the_files_keys():
    text = json.dumps({"version": METADATA_FORMAT, "operators": [RECORD]})
    meta = CheckpointMeta.from_text(text, "cp/spark_keyed_sql.json")
    (op,) = meta.operators
    assert (op.function, op.class_name, op.keys, op.partitions, op.absent_attributes) == (
        "sessions",
        "app.Sessions",
        ("user_id",),
        8,
        ("n",),
    )
    assert meta.operator("SESSIONS") is op and meta.operator("other") is None
    assert json.loads(meta.to_text()) == {"version": METADATA_FORMAT, "operators": [RECORD]}


def test_an_older_record_without_the_later_fields_reads():
    old = {k: v for k, v in RECORD.items() if k not in ("engine", "absent_attributes", "partitions")}
    op = OperatorRecord.from_json(old)
    assert op.engine is None and op.engine_or("bulk") == "bulk" and op.partitions is None


@pytest.mark.parametrize(
    "text, message",
    [
        (json.dumps({"version": 99, "operators": []}), r"has format 99; this spark-keyed-sql reads format 1"),
        ("{not json", r"is unreadable"),
        ("[]", r"is not a JSON object"),
        (json.dumps({"version": METADATA_FORMAT, "operators": [{"function": "f"}]}), r"is damaged"),
    ],
)
def test_another_format_or_a_damaged_file_is_refused_naming_it(text, message):
    with pytest.raises(CheckpointError, match=r"cp/spark_keyed_sql\.json " + message):
        CheckpointMeta.from_text(text, "cp/spark_keyed_sql.json")


def test_a_new_layout_holds_only_once_a_batch_commits_after_it():
    from spark_keyed_sql.state.operator_record import OperatorRecord

    was = OperatorRecord("f", "m.C", "function", ("k",), attributes=({"name": "a", "type": "int"},))
    new = OperatorRecord(
        "f", "m.C2", "function", ("k",), attributes=({"name": "b", "type": "int"},), absent_attributes=("b",)
    )
    pending = new.pending_since(was, 4)
    assert pending.committed_layout == was.layout and pending.since_batch == 4
    again = OperatorRecord.from_json(pending.to_json())
    assert again == pending
    # nothing committed since it was written: the committed state's layout
    assert again.as_of(4).attributes == was.attributes and again.as_of(4).absent_attributes == ()
    # a batch committed in the new layout: the new one, and the pending part dropped
    assert again.as_of(5).attributes == new.attributes and again.as_of(5).committed_layout is None
    # the same layout again keeps nothing pending
    assert new.pending_since(new, 4).committed_layout is None

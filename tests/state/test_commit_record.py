"""The bulk commit record: written and read back whole; a damaged or foreign file is a clear
CheckpointError naming the file, never a guess. No Spark needed."""

import json

import pytest

from spark_keyed_sql.state.checkpoint import CheckpointError
from spark_keyed_sql.state.commit_record import COMMIT_FORMAT, BaseMarker, BatchMetrics, CommitRecord, DeltaEntry


def record(**changes):
    base = dict(
        version=7,
        attempt="abc123",
        partitions=4,
        function="f",
        schema={"type": "struct", "fields": []},
        base="bases/5-x",
        base_version=5,
        base_rows=100,
        base_bytes=1000,
        deltas=(
            DeltaEntry(6, ("steps/6-a/main/__ks_kind=1",), 3, 30),
            DeltaEntry(7, ("steps/7-b/main/__ks_kind=1", "steps/7-b/fed1/__ks_kind=1"), 5, 50),
        ),
        stores={"12": (0, 1), "13": (2, 3)},
        spark_batch=9,
        watermark_ms=1_000,
        evict_watermark_ms=900,
        next_timer_ms=1_500,
        next_expiry_ms=None,
        metrics=BatchMetrics(
            input_rows=11,
            events=10,
            late_rows=1,
            keys_touched=4,
            timers_fired=2,
            output_rows=None,
            state_rows=104,
            processing_ms=123,
            seconds=0.5,
            fed_partitions={"full": (2,)},
        ),
        input_watermarks_ms={"clicks": 900, "impressions": 1_000},
        watermark_policy="max",
    )
    return CommitRecord(**(base | changes))


def test_round_trip_keeps_every_field():
    r = record()
    assert CommitRecord.from_json(r.to_json(), 7, "commits/7.json") == r


def test_derived_figures_and_the_flat_file_users_read():
    r = record()
    d = json.loads(r.to_json())
    assert d["format"] == COMMIT_FORMAT
    assert d["delta_rows"] == 3 + 5 == r.delta_rows
    assert d["state_bytes"] == 1000 + 30 + 50 == r.state_bytes
    assert d["input_rows"] == 11 and d["state_rows"] == 104 and d["fed_partitions"] == {"full": [2]}
    assert d["deltas"][1] == {
        "version": 7,
        "dirs": ["steps/7-b/main/__ks_kind=1", "steps/7-b/fed1/__ks_kind=1"],
        "changed": 5,
        "bytes": 50,
    }
    assert r.delta_dirs == [
        (6, "steps/6-a/main/__ks_kind=1"),
        (7, "steps/7-b/main/__ks_kind=1"),
        (7, "steps/7-b/fed1/__ks_kind=1"),
    ]
    assert r.files == {
        "bases/5-x",
        "steps/6-a/main/__ks_kind=1",
        "steps/7-b/main/__ks_kind=1",
        "steps/7-b/fed1/__ks_kind=1",
    }
    assert r.progress()["batch_id"] == 7


def test_token_names_the_store_holding_a_partition():
    r = record()
    assert r.token(1) == "7-abc123-12" and r.token(3) == "7-abc123-13"
    assert r.token(9) == "7-abc123-none"  # no store holds it (a migrated commit names none)


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda t: t[: len(t) // 2], "not JSON"),
        (lambda t: "[]", "not a JSON object"),
        (lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "stores"}), "KeyError: 'stores'"),
        (lambda t: json.dumps(json.loads(t) | {"partitions": "four"}), "ValueError"),
    ],
)
def test_a_damaged_file_is_named_with_what_to_do(damage, why):
    with pytest.raises(
        CheckpointError, match=rf"commit file /cp/bulk/commits/7\.json is damaged \({why}.*Restore the checkpoint"
    ):
        CommitRecord.from_json(damage(record().to_json()), 7, "/cp/bulk/commits/7.json")


def test_a_file_of_another_format_is_refused_naming_both():
    text = json.dumps(json.loads(record().to_json()) | {"format": 1})
    with pytest.raises(CheckpointError, match=rf"has format 1; this spark-keyed-sql reads format {COMMIT_FORMAT}"):
        CommitRecord.from_json(text, 7, "commits/7.json")


def test_base_marker_round_trip_and_a_partial_one_is_none():
    m = BaseMarker(5, "bases/5-x", 100, 1000)
    assert BaseMarker.from_json(m.to_json()) == m
    assert BaseMarker.from_json(m.to_json()[:10]) is None
    assert BaseMarker.from_json(json.dumps({"version": 5})) is None

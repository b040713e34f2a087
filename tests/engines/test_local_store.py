"""The bulk engine's executor-local store: row encoding, and the token protocol that decides
whether a store holds the committed state a batch starts from. No Spark needed."""

import datetime as dt
import decimal

import pytest

from spark_keyed_sql.engines.bulk.local_store import Change, LocalStore, decode, encode
from spark_keyed_sql.state.commit_record import StoreToken, store_token

ROWS = [
    (1, 2.5, "a", None, True),
    ((1, "x"), [1, 2, 3], {"a": 1, "b": [dt.datetime(2026, 1, 2, 3, 4, 5, 678901)]}),
    (dt.date(2026, 3, 1), decimal.Decimal("12.3400"), b"\x00\xff", [("k", (1.0, None))]),
    (dt.datetime(1969, 12, 31, 23, 59, 59, 999999), -0.0, float("inf"), 2**70),
    ((), [], {}),
]


@pytest.mark.parametrize("row", ROWS)
def test_rows_round_trip_exactly(row):
    back = decode(encode(row))
    assert back == row
    assert [type(v) for v in back] == [type(v) for v in row]  # tuples stay tuples, bools stay bools


def test_equal_keys_encode_to_equal_bytes():
    a = ("user", dt.datetime(2026, 1, 1), 7)
    b = (str("us" + "er"), dt.datetime(2026, 1, 1, 0, 0), 7)
    assert encode(a) == encode(b)
    assert encode(("u1",)) != encode(("u2",))


def test_unsupported_value_is_refused_by_name():
    with pytest.raises(TypeError, match="cannot store a object"):
        encode((object(),))


@pytest.fixture
def store(tmp_path):
    s = LocalStore(str(tmp_path), "file:/cp", 0)
    yield s
    s.close()


def k(name):
    return encode((name,))


def test_a_new_store_holds_no_state(store):
    assert store.applied() == ""
    assert store.ensure("")  # the state before the first batch: nothing
    assert not store.ensure("0-a-1")  # anything committed: a miss


def test_a_committed_change_set_is_applied_by_the_next_batch(store):
    store.ensure("")
    store.stage("0-a-1", "", [Change(k("u1"), encode((1,)), None, None), Change(k("u2"), encode((2,)), 100, None)])
    assert store.ensure("0-a-1")  # the next batch names it as committed
    assert store.applied() == "0-a-1"
    assert store.get([k("u1"), k("u2"), k("u3")]) == {k("u1"): encode((1,)), k("u2"): encode((2,))}
    assert store.due(100, None) == [(k("u2"), encode((2,)))]
    assert store.due(99, None) == []
    store.stage("1-b-7", "0-a-1", [Change(k("u1"), None, None, None)])  # u1's state is gone
    assert store.get([k("u1")]) == {k("u1"): encode((1,))}  # pending: not state until its batch is committed
    assert store.applied() == "0-a-1"
    assert store.ensure("1-b-7")
    assert store.get([k("u1"), k("u2")]) == {k("u2"): encode((2,))}


def test_an_uncommitted_attempt_is_discarded(store):
    store.ensure("")
    store.stage("0-a-1", "", [Change(k("u1"), encode((1,)), None, None)])  # attempt a died before its commit
    store.stage("0-b-2", "", [Change(k("u1"), encode((5,)), None, None)])  # attempt b committed
    assert store.ensure("0-b-2")
    assert store.get([k("u1")]) == {k("u1"): encode((5,))}
    assert not store.ensure("0-a-1")  # never taken for the other attempt's state


def test_an_empty_stores_first_change_set_is_written_in_place_and_undone_unless_committed(store):
    """A first batch (or a backfill) on an empty store writes its rows straight into the state,
    marked as the task's: the next batch finds them applied if it names that task, and empty
    (then the committed attempt's pending set, or a miss) otherwise."""
    first = [
        Change(k("u1"), encode((1,)), 10, None),
        Change(k("u2"), encode((2,)), None, None),
        Change(k("u3"), None, None, None),
    ]
    assert store.ensure("")
    store.stage("0-a-1", "", first)
    assert store.applied() not in ("", "0-a-1")  # not committed state yet: never reported as held
    assert StoreToken.version_of(store.applied()) == -1
    assert store.ensure("0-a-1")
    assert store.applied() == "0-a-1"
    assert store.get([k("u1"), k("u2"), k("u3")]) == {k("u1"): encode((1,)), k("u2"): encode((2,))}
    assert store.next_due() == (10, None)

    store.load_begin(clear=True)  # start again from nothing
    store.load_end("")
    store.stage("0-a-1", "", first)  # attempt a died before its commit; the batch runs again
    assert store.ensure("")  # the retry starts from the empty state again
    assert store.count() == 0 and store.applied() == ""
    store.stage("0-b-2", "", [Change(k("u1"), encode((5,)), None, None)])
    store.stage("0-c-3", "", [Change(k("u9"), encode((9,)), None, None)])  # a speculative twin, not committed
    assert store.ensure("0-b-2")
    assert store.get([k("u1"), k("u9")]) == {k("u1"): encode((5,))}
    assert not store.ensure("0-c-3")

    store.load_begin(clear=True)
    store.load_end("")
    store.stage("0-d-4", "", first)
    assert not store.ensure("0-e-5")  # another host's attempt was committed: a miss, and empty
    assert store.count() == 0


def test_a_change_set_on_another_base_is_a_miss(store):
    store.ensure("")
    store.stage("0-a-1", "", [Change(k("u1"), encode((1,)), None, None)])
    assert store.ensure("0-a-1")
    # batch 1 ran on another host (its change set is not here); batch 2 expects batch 1's state
    store.stage("2-c-3", "1-b-9", [Change(k("u1"), encode((3,)), None, None)])
    assert not store.ensure("1-b-9")
    assert not store.ensure("2-c-3")
    assert store.applied() == "0-a-1"  # unchanged: the driver feeds the missing changes


def test_full_rebuild_and_catch_up(store):
    store.load_begin(clear=True)
    store.load(k("u1"), encode((1,)), None, None)
    store.load(k("u2"), encode((2,)), None, 50)
    store.load_end("4-a-1")
    assert store.applied() == "4-a-1" and StoreToken.version_of(store.applied()) == 4
    assert store.due(None, 50) == [(k("u2"), encode((2,)))]
    store.load_begin(clear=False)  # catch-up: the changes since version 4
    store.load(k("u1"), None, None, None)
    store.load(k("u3"), encode((3,)), None, None)
    store.load_end("6-b-2")
    assert store.get([k("u1"), k("u2"), k("u3")]) == {k("u2"): encode((2,)), k("u3"): encode((3,))}
    assert store.next_due() == (None, 50)
    assert StoreToken.version_of("") == -1


def test_a_store_from_another_python_or_boot_starts_empty(tmp_path, monkeypatch):
    s = LocalStore(str(tmp_path), "file:/cp", 3)
    s.load_begin(clear=True)
    s.load(k("u1"), encode((1,)), None, None)
    s.load_end("0-a-1")
    s.close()
    from spark_keyed_sql.engines.bulk import local_store

    monkeypatch.setattr(local_store, "_FORMAT", local_store._FORMAT + " other")
    s = LocalStore(str(tmp_path), "file:/cp", 3)
    assert s.applied() == "" and s.count() == 0
    s.close()


def test_a_store_token_is_built_and_read_in_one_place():
    text = store_token(12, "ab-cd", "731")  # an attempt may hold a dash
    assert text == "12-ab-cd-731"
    assert StoreToken.parse(text) == StoreToken(12, "ab-cd", "731")
    for other in ("", "direct:12-a-1", "x-1-2", "12"):
        assert StoreToken.parse(other) is None and StoreToken.version_of(other) == -1, other

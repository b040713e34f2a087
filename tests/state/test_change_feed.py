"""The state's change feed between batches (Samza's changelog role) against an oracle that
diffs per-key state computed in plain Python."""

import json

import pytest
from data import by_key_in_ts_order, make_events, write_parquet

from spark_keyed_sql import StatefulFunction


class Resettable(StatefulFunction):
    total: float

    def __init__(self, **kw):
        super().__init__(**kw)
        self.total = 0.0

    def execute(self, e):
        self.total = round(self.total + e["value"], 6)
        if e["merchant"] == "eats":
            self.ctx.clear_state()
        return {"total": self.total}


def states_after(rows):
    state = {}
    for u, evs in by_key_in_ts_order(rows).items():
        total, alive = 0.0, False
        for e in evs:
            total = round(total + e["value"], 6)
            alive = True
            if e["merchant"] == "eats":
                total, alive = 0.0, False
        if alive:
            state[u] = total
    return state


def test_change_feed(spark, ks, tmp_path):
    ks.register("resettable", Resettable, returns="total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    a, b = make_events(40, 2, seed=61), make_events(40, 2, seed=62, start_second=70_000)
    sql = (
        f"SELECT user_id, s.total FROM parquet.`{src}` GROUP BY KEY user_id WITH STATE resettable(value, merchant) "
        "AS s ORDER BY ts"
    )
    write_parquet(spark, a, src)
    ks.run(sql, checkpoint=cp, output=out)
    write_parquet(spark, b, src)
    ks.run(sql, checkpoint=cp, output=out)

    s0, s1 = states_after(a), states_after(a + b)
    expected = [(u, "total", "upsert", v, 0) for u, v in s0.items()]
    for u in set(s0) | set(s1):
        if u in s1 and s0.get(u) != s1[u]:
            expected.append((u, "total", "upsert", s1[u], 1))
        elif u not in s1 and u in s0:
            expected.append((u, "total", "delete", None, 1))
    got = [
        (r.user_id, r.variable, r.change, None if r.new_value is None else json.loads(r.new_value)["total"], r.batch_id)
        for r in ks.read_state_changes(cp).collect()
    ]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert any(c[2] == "delete" for c in expected)  # the data exercises deletes
    only_1 = ks.sql(f"SELECT count(*) FROM keyed_state_changes('{cp}', '', 0, 1)").collect()[0][0]
    assert only_1 == sum(1 for e in expected if e[4] == 1)


class Ops(StatefulFunction):
    n: int

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, e):
        if e["op"] == "inc":
            self.n += 1
        elif e["op"] == "clear":
            self.ctx.clear_state()
        return {"n": self.n}


def test_cleared_key_without_later_state_is_deleted(spark, ks, tmp_path):
    """clear_state() drops the key's state: rows after it in the batch that set nothing leave it
    dropped (read_state has no row, the change feed a delete); a row that sets state keeps it."""
    ks.register("ops_counter", Ops, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT k, n FROM parquet.`{src}` GROUP BY KEY k WITH STATE ops_counter(op) ORDER BY seq"

    def batch(rows):
        spark.createDataFrame(rows, "k string, seq int, op string").write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=out)

    batch([(k, i, "inc") for k in "abc" for i in range(2)])
    batch([("a", 10, "clear"), ("a", 11, "noop"), ("b", 10, "clear"), ("b", 11, "inc"), ("c", 10, "noop")])
    assert {r.k: r.n for r in ks.read_state(cp).collect()} == {"b": 1, "c": 2}
    changes = {(r.k, r.change) for r in ks.read_state_changes(cp, from_batch=0).collect()}
    assert changes == {("a", "delete"), ("b", "upsert")}


def test_keys_named_like_the_feeds_own_columns(spark, ks, tmp_path):
    """A key of two columns named ``__c`` and ``__bn`` (names the feed once used inside its join:
    an ambiguous reference then): three batches of increments and clears, the feed against
    per-batch states diffed in plain Python."""
    ks.register("ops_counter", Ops, returns="n bigint")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = (
        f"SELECT `__c`, `__bn`, n FROM parquet.`{src}` GROUP BY KEY `__c`, `__bn` "
        "WITH STATE ops_counter(op) ORDER BY seq"
    )
    batches = [
        [("a", 1, 0, "inc"), ("a", 2, 1, "inc"), ("b", 1, 2, "inc")],
        [("a", 1, 10, "clear"), ("b", 1, 11, "inc"), ("c", 1, 12, "inc")],
        [("a", 1, 20, "inc"), ("c", 1, 21, "clear"), ("a", 2, 22, "noop")],
    ]
    states, state = [], {}
    for rows in batches:
        for c, bn, _, op in rows:  # (each key's rows are in seq order here)
            if op == "inc":
                state[(c, bn)] = state.get((c, bn), 0) + 1
            elif op == "clear":
                state.pop((c, bn), None)
        states.append(dict(state))
        spark.createDataFrame(rows, "`__c` string, `__bn` int, seq int, op string").write.mode("append").parquet(src)
        ks.run(sql, checkpoint=cp, output=out)
    expected = set()
    for b, now in enumerate(states):
        before = states[b - 1] if b else {}
        for k in set(now) | set(before):
            if k in now and before.get(k) != now[k]:
                expected.add((*k, "upsert", now[k], b))
            elif k not in now:
                expected.add((*k, "delete", None, b))
    got = {
        (r["__c"], r["__bn"], r.change, None if r.new_value is None else json.loads(r.new_value)["n"], r.batch_id)
        for r in ks.read_state_changes(cp).collect()
    }
    assert got == expected
    assert {e[2] for e in expected} == {"upsert", "delete"}


def test_an_unkeyed_feed_says_delete_when_cleared_and_upsert_when_set_again(spark, ks, tmp_path):
    """One group (WITH STATE without GROUP BY KEY): batch 0 sets the total, batch 1 ends in a
    clear (a delete), batch 2 sets it again (an upsert), batch 3 leaves it as it is (no row);
    the feed has no key columns."""
    import datetime as dt

    ks.register("resettable_unkeyed", Resettable, returns="total double")
    src, cp, out = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    sql = f"SELECT s.total FROM parquet.`{src}` WITH STATE resettable_unkeyed(value, merchant) AS s ORDER BY ts"
    t0 = dt.datetime(2026, 1, 1)
    merchants = [["acme", "cafe"], ["books", "eats"], ["dine", "acme", "cafe"], []]
    batches, i = [], 0
    for names in merchants:
        rows = []
        for m in names:
            rows.append(
                {"user_id": "u", "value": 1.5 + i, "amount": 1.0, "merchant": m, "ts": t0 + dt.timedelta(seconds=i)}
            )
            i += 1
        batches.append(rows)
    # the oracle: the one group's total after each batch (None: cleared)
    totals, total, alive = [], 0.0, False
    for rows in batches:
        for e in rows:
            total, alive = round(total + e["value"], 6), True
            if e["merchant"] == "eats":
                total, alive = 0.0, False
        totals.append(total if alive else None)
    for rows in batches:
        if rows:
            write_parquet(spark, rows, src)
        ks.run(sql, checkpoint=cp, output=out)
    expected, before = [], None
    for b, now in enumerate(totals):
        if now is not None and now != before:
            expected.append(("total", "upsert", now, b))
        elif now is None and before is not None:
            expected.append(("total", "delete", None, b))
        before = now
    feed = ks.read_state_changes(cp)
    assert feed.columns == ["variable", "change", "new_value", "batch_id"]
    got = [
        (r.variable, r.change, None if r.new_value is None else json.loads(r.new_value)["total"], r.batch_id)
        for r in feed.collect()
    ]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert [c for _, c, _, _ in sorted(expected, key=lambda x: x[3])] == ["upsert", "delete", "upsert"]


def test_a_feed_from_before_the_oldest_batch_kept_is_refused_not_answered_as_all_upserts():
    """Batches 5..9 kept: from_batch=4 would compare batch 5 against no state at all (every key
    an upsert); it is refused, and from_batch=5 (the oldest kept) reads on."""
    from spark_keyed_sql.state.checkpoint import CheckpointError
    from spark_keyed_sql.state.reader import state_changes

    class Read(Exception):
        pass

    def read(batch):
        raise Read(batch)

    with pytest.raises(CheckpointError, match=r"cannot read changes for batches \(4, 9\]; it keeps 5\.\.9"):
        state_changes(read, (5, 9), 1, "/ck", from_batch=4)
    with pytest.raises(Read):  # (past the checks: the newest version is read first)
        state_changes(read, (5, 9), 1, "/ck", from_batch=5)
    with pytest.raises(Read):  # a checkpoint keeping batch 0: -1 is "from empty state"
        state_changes(read, (0, 3), 1, "/ck", from_batch=-1)


def test_a_feed_up_to_a_batch_before_the_oldest_kept_is_refused():
    from spark_keyed_sql.state.checkpoint import CheckpointError
    from spark_keyed_sql.state.reader import state_changes

    def read(batch):
        raise AssertionError(f"read({batch}): the range should have been refused first")

    with pytest.raises(CheckpointError, match=r"cannot read changes for batches \(-1, -1\]; it keeps 0\.\.7"):
        state_changes(read, (0, 7), 1, "/ck", from_batch=-1, to_batch=-1)

"""The tws engine's chunked transport (engines/tws/chunks.py): a key's rows travel through
transformWithState as one pickled chunk each way. Values must arrive as every engine hands them
to user code (naive UTC timestamps, dates, NULLs), whatever the number of chunks per key."""

import datetime as dt
import random

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from spark_keyed_sql import StatefulFunction
from spark_keyed_sql.engines.tws.chunks import (
    CHUNK_COLUMN,
    ROWS_COLUMN,
    ChunkPacker,
    ChunkUnpacker,
    chunk_schema,
    column_kinds,
    encode_columns,
    pack,
    row_reader,
)

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 2, 27, 23, 59, 58, 123456)


def _input_batch():
    keys = ["a", "a", "a", "b", "c", "c"]
    ts = [T0, None, T0 + dt.timedelta(days=400), T0 - dt.timedelta(days=20000), T0, T0 + dt.timedelta(microseconds=1)]
    days = [dt.date(2024, 2, 29), dt.date(1900, 1, 1), None, dt.date(2026, 1, 1), None, dt.date(1970, 1, 1)]
    vals = [1, None, -(2**62), 0, 7, 8]
    text = ["x", None, "ü", "", "y", "z"]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys),
            pa.array([t and t.replace(tzinfo=UTC) for t in ts], pa.timestamp("us", tz="UTC")),
            pa.array(days, pa.date32()),
            pa.array(vals, pa.int64()),
            pa.array(text),
        ],
        names=["k", "ts", "day", "v", "s"],
    )
    return batch, list(zip(keys, ts, days, vals, text))


def test_packed_rows_come_back_as_python_values_per_key():
    batch, rows = _input_batch()
    schema = chunk_schema([T.StructField("k", T.StringType())], CHUNK_COLUMN)
    names = ["ts", "day", "v", "s"]
    # the packer sees the rows split over two Arrow batches: key 'a' continues across them
    out = list(ChunkPacker(["k"], names, schema)(iter([batch.slice(0, 2), batch.slice(2)])))
    got = {}
    read = row_reader(names, column_kinds([T.TimestampType(), T.DateType(), T.LongType(), T.StringType()]), ["k"])
    for rb in out:
        for key, blob in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist()):
            got.setdefault(key, []).extend(read((key,), [blob]))
    expected = {}
    for k, t, d, v, s in rows:
        expected.setdefault(k, []).append({"ts": t, "day": d, "v": v, "s": s, "k": k})
    assert got == expected
    assert sum(rb.num_rows for rb in out) == 3  # one chunk per key


def test_a_key_with_several_chunks_and_no_value_columns():
    read = row_reader([], [], ["k"])
    assert read(("a",), [pack(2, []), pack(1, [])]) == [{"k": "a"}] * 3
    read = row_reader(["x"], [None], [])
    assert read((), [pack(2, [[1, 2]]), pack(1, [[3]])]) == [{"x": 1}, {"x": 2}, {"x": 3}]


def test_unpacked_output_rows_match_what_the_processor_returned():
    schema = T.StructType(
        [
            T.StructField("k", T.LongType()),
            T.StructField("t", T.TimestampType()),
            T.StructField("d", T.DateType()),
            T.StructField("x", T.DoubleType()),
            T.StructField("ntz", T.TimestampNTZType()),
        ]
    )
    berlin = dt.timezone(dt.timedelta(hours=1))
    calls = {
        10: [(T0, dt.date(2000, 1, 1), 1.5, T0), (None, None, None, None)],
        11: [],
        12: [
            (dt.datetime(2026, 1, 1, 12, tzinfo=berlin), dt.date(1969, 12, 31), float("inf"), dt.datetime(1950, 5, 5))
        ],
    }
    kinds = column_kinds([f.dataType for f in schema.fields[1:]])
    blobs = [pack(len(r), encode_columns(kinds, list(zip(*r)) if r else [[]] * 4)) for r in calls.values()]
    packed = pa.RecordBatch.from_arrays(
        [pa.array(list(calls), pa.int64()), pa.array(blobs, pa.binary())], names=["k", ROWS_COLUMN]
    )
    got = [tuple(r.values()) for rb in ChunkUnpacker(1, schema)(iter([packed])) for r in rb.to_pylist()]

    def utc(t):  # what Arrow hands back for a UTC timestamp column: an aware datetime
        if t is None:
            return None
        return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)

    expected = [(k, utc(t), d, x, n) for k, rows in calls.items() for t, d, x, n in rows]
    assert got == expected


class Trail(StatefulFunction):
    """Per row: how many rows the key has seen, the row's timestamp an hour on, its date, and
    the number of NULLs seen so far (state that depends on every value arriving intact)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.nulls = 0

    def execute(self, row):
        self.n += 1
        self.nulls += sum(v is None for v in row.values())
        later = None if row["ts"] is None else row["ts"] + dt.timedelta(hours=1)
        return [(self.n, later, row["day"], self.nulls)]


@pytest.fixture(scope="module")
def spread_events(spark):
    rng = random.Random(7)
    rows = []
    for i in range(600):
        ts = None if i % 17 == 0 else T0 + dt.timedelta(minutes=i, microseconds=rng.randrange(10**6))
        day = None if i % 13 == 0 else dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(3000))
        amount = None if i % 11 == 0 else rng.randrange(-1000, 1000)
        rows.append((f"k{rng.randrange(25)}", i, ts, day, amount))
    schema = "key string, seq bigint, ts timestamp, day date, amount bigint"
    # several input partitions: a key's rows reach the operator in several chunks
    spark.createDataFrame(rows, schema).repartition(5).createOrReplaceTempView("chunk_events")
    return rows


def test_values_survive_the_trip_to_the_key_and_back(ks, spread_events):
    ks.register("trail", Trail, returns="n bigint, later timestamp, day date, nulls bigint")
    got = ks.sql(
        "SELECT key, seq, t.* FROM chunk_events GROUP BY KEY key WITH STATE trail(ts, day, amount) AS t ORDER BY seq"
    ).collect()
    expected, state = [], {}
    for key, seq, ts, day, amount in sorted(spread_events, key=lambda r: r[1]):
        n, nulls = state.get(key, (0, 0))
        n, nulls = n + 1, nulls + (ts is None) + (day is None) + (amount is None)
        state[key] = (n, nulls)
        expected.append((key, seq, n, None if ts is None else ts + dt.timedelta(hours=1), day, nulls))
    assert sorted(tuple(r) for r in got) == sorted(expected)


class Count(StatefulFunction):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0

    def execute(self, row):
        self.n += 1
        return [(self.n, row["amount"])]


def test_order_and_pass_through_columns_that_user_code_never_sees(ks, spread_events):
    """ts orders the rows (DESC: NULLs last) and, with day, passes through: on tws both travel
    as integers and are never turned back into datetimes; they must still sort and come out
    as they went in."""
    ks.register("count_amount", Count, returns="n bigint, amount bigint")
    got = ks.sql(
        "SELECT key, ts, day, c.* FROM chunk_events GROUP BY KEY key WITH STATE count_amount(amount) AS c "
        "ORDER BY ts DESC"
    ).collect()
    by_key = {}
    for key, _seq, ts, day, amount in spread_events:
        by_key.setdefault(key, []).append((ts, day, amount))
    timed, untimed = [], []
    for key, evs in by_key.items():
        dated = sorted((e for e in evs if e[0] is not None), key=lambda e: e[0], reverse=True)
        nulls = [e for e in evs if e[0] is None]
        timed += [(key, ts, day, i + 1, amount) for i, (ts, day, amount) in enumerate(dated)]
        # rows with a NULL ts come last, in no defined order among themselves
        untimed += [(key, len(dated) + j + 1) for j in range(len(nulls))]
        untimed_days = sorted(((key, day, amount) for _, day, amount in nulls), key=repr)
        got_days = sorted(((r.key, r.day, r.amount) for r in got if r.key == key and r.ts is None), key=repr)
        assert got_days == untimed_days
    assert sorted((tuple(r) for r in got if r.ts is not None), key=repr) == sorted(timed, key=repr)
    assert sorted(((r.key, r.n) for r in got if r.ts is None), key=repr) == sorted(untimed, key=repr)

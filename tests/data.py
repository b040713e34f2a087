"""Deterministic generated inputs for the tests."""

import datetime as dt
import random
from contextlib import contextmanager

BASE = dt.datetime(2026, 1, 1)
MERCHANTS = ["acme", "books", "cafe", "dine", "eats"]


def make_events(n_keys: int, per_key: int = 3, seed: int = 1, start_second: int = 0, key_prefix: str = "u"):
    """One row per (key, i), unique increasing timestamps in shuffled order."""
    rng = random.Random(seed)
    rows = []
    order = list(range(n_keys * per_key))
    rng.shuffle(order)
    for i, slot in enumerate(order):
        k = slot % n_keys
        rows.append(
            {
                "user_id": f"{key_prefix}{k:06d}",
                "value": round(rng.uniform(-5, 100), 2),
                "amount": round(rng.uniform(1, 50), 2),
                "merchant": rng.choice(MERCHANTS),
                "ts": BASE + dt.timedelta(seconds=start_second + i),
            }
        )
    return rows


SCHEMA = "user_id string, value double, amount double, merchant string, ts timestamp"


def by_key_in_ts_order(rows, key="user_id"):
    out = {}
    for r in sorted(rows, key=lambda r: r["ts"]):
        out.setdefault(r[key], []).append(r)
    return out


def write_parquet(spark, rows, path):
    """Append ``rows`` (make_events dicts) to a Parquet directory as one file."""
    cols = ("user_id", "value", "amount", "merchant", "ts")
    spark.createDataFrame([tuple(r[c] for c in cols) for r in rows], SCHEMA).coalesce(1).write.mode("append").parquet(
        path
    )


@contextmanager
def clock_moved(spark, hours: float = 0, seconds: float = 0):
    """Processing time moved forward (runtime/clock.py) for the queries planned inside: a TTL or
    a processing-time timer passes without sleeping."""
    from spark_keyed_sql.runtime.clock import CLOCK_OFFSET_CONF

    spark.conf.set(CLOCK_OFFSET_CONF, str(int((hours * 3600 + seconds) * 1000)))
    try:
        yield
    finally:
        spark.conf.unset(CLOCK_OFFSET_CONF)

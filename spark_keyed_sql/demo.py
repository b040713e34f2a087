"""`make demo`: a keyed-state job on the sample events shipped in sql_examples/data."""

from __future__ import annotations

import sys
from pathlib import Path

from .api.errors import JavaMissingError
from .api.function import StatefulFunction

DATA = Path(__file__).resolve().parents[1] / "sql_examples" / "data" / "events.csv"


class UserSessionFunction(StatefulFunction):
    """The SAGE seed's session counter: per-user count and total, persisted per key."""

    __state_exclude__ = ["temp_cache"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.session_count = 0
        self.total_value = 0.0
        self.temp_cache = {}

    def execute(self, event):
        self.session_count += 1
        self.total_value += event["value"]
        return {"session_count": self.session_count, "total_value": round(self.total_value, 2)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else DATA
    from . import KeyedSQL
    from .local import local_session

    try:
        spark = local_session("spark-keyed-sql demo")
    except JavaMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    events = spark.read.csv(str(path), header=True, schema="user_id string, value double, ts timestamp, category string")
    events.createOrReplaceTempView("events")
    ks = KeyedSQL(spark)
    ks.register("session_counter", UserSessionFunction, returns="session_count long, total_value double")
    print(f"Input: {events.count()} events from {path}")
    print("\nTable-function form, last row per user:")
    spark.sql(
        """
        SELECT user_id, max(session_count) AS events, max(total_value) AS total_value
        FROM session_counter(TABLE(events), key => 'user_id', order_by => 'ts')
        GROUP BY user_id ORDER BY user_id
        """
    ).show(50, truncate=False)
    query = """
        SELECT user_id, s.session_count, s.total_value, category
        FROM events
        GROUP BY KEY user_id
        WITH STATE session_counter(value, ts) AS s ORDER BY ts
        HAVING user_id = 'user_01'
        ORDER BY session_count
    """
    print("GROUP BY KEY ... WITH STATE for user_01 (transformWithState engine, RocksDB state store):")
    ks.sql(query).show(50, truncate=False)
    print(ks.explain(query))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

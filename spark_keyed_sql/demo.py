"""`make demo` / `python -m spark_keyed_sql.demo`: a keyed-state job on the sample events
packaged with the library (spark_keyed_sql/data/events.csv, the same file as
sql_examples/data/events.csv), so an installed wheel runs it too."""

from __future__ import annotations

import re
import sys
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path

from .api.errors import JavaMissingError
from .api.function import StatefulFunction

__all__ = ["UserSessionFunction", "main", "ENGINE_TEXT"]

ENGINE_TEXT = {
    "bulk": "bulk engine: many keys per Python call, state as Parquet snapshots",
    "tws": "transformWithState engine, RocksDB state store",
}


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
    with ExitStack() as stack:
        path = Path(argv[0]) if argv else stack.enter_context(as_file(files("spark_keyed_sql") / "data" / "events.csv"))
        return _demo(path)


def _demo(path: Path) -> int:
    from . import KeyedSQL
    from .local import local_session

    try:
        spark = local_session("spark-keyed-sql demo")
    except JavaMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    events = spark.read.csv(
        str(path), header=True, schema="user_id string, value double, ts timestamp, category string"
    )
    events.createOrReplaceTempView("events")
    ks = KeyedSQL(spark)
    ks.register("session_counter", UserSessionFunction, returns="session_count long, total_value double")
    print(f"Input: {events.count()} events from {path}")
    print("\nTable-function form, last row per user:")
    ks.sql(
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
    plan = ks.explain(query)
    engine = re.search(r"on engine '(\w+)'", plan).group(1)  # the engine 'auto' chose
    print(f"GROUP BY KEY ... WITH STATE for user_01 ({ENGINE_TEXT.get(engine, f'engine {engine!r}')}):")
    ks.sql(query).show(50, truncate=False)
    print(plan)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

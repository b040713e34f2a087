"""``make bench-broadcast``: what a broadcast input adds to W1 (the per-key counter, bulk), side
by side in one session on the same data, each path's whole output to Spark's ``noop`` sink,
alternating rounds (each ratio from each path's best time):

- ``w1``: W1 through the table-function form, no broadcast input;
- ``w1 + broadcast``: the same function with a ``--table``-row broadcast input attached (rows
  collected by the driver, applied, shipped to every task with the program), not read;
- ``w1 + lookup``: a counter that also looks its key up in that table on every row (a blocklist:
  the reads a user's function does, reported apart as the user's own work);
- ``w1 + join``: what a user writes without broadcast inputs: the table joined to every row
  (a broadcast hash join) before the keyed step, the looked-up column passed as an argument.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_keyed_sql import StatefulFunction  # noqa: E402


class Blocked(StatefulFunction):
    """W1, counting only events of keys not on the broadcast blocklist (read on every row)."""

    returns = "n bigint, total double"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.n = 0
        self.total = 0.0

    def blocked(self, row):
        return self.ctx.get_key() in self.ctx.broadcast("blocklist")

    def execute(self, row):
        if self.blocked(row):
            return [(self.n, self.total)]
        self.n += 1
        self.total += row["value"]
        return [(self.n, self.total)]


class JoinedBlocked(Blocked):
    """The same with the blocklist joined to each row beforehand (``reason`` not NULL)."""

    def blocked(self, row):
        return row["reason"] is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--table", type=int, default=10_000, help="broadcast rows")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    from bench.run import alternate, make_events
    from bench.workloads import Counter
    from spark_keyed_sql import KeyedSQL
    from spark_keyed_sql.local import local_session

    # both W1 paths on the Python path (a broadcast input keeps a class there; W1 alone would plan natively)
    spark = local_session(
        "spark-keyed-sql bench broadcast", shuffle_partitions=8, conf={"spark.keyedsql.native": "false"}
    )
    ks = KeyedSQL(spark, engine="bulk")
    ks.register("bench_counter", Counter, returns="n bigint, total double")
    ks.register("bench_blocked", Blocked)
    ks.register("bench_joined", JoinedBlocked)
    make_events(spark, a.keys, a.rows)
    # every 10th key is blocked, up to --table rows (a user_id and a reason)
    spark.range(a.table).selectExpr(
        "concat('u', CAST(id * 10 AS STRING)) AS user_id", "concat('reason ', CAST(id % 7 AS STRING)) AS reason"
    ).cache().createOrReplaceTempView("bench_blocklist")
    spark.table("bench_blocklist").count()
    w1 = "TABLE(bench_events), key => 'user_id', order_by => 'ts'"
    bc = "blocklist => TABLE(bench_blocklist), broadcast => 'blocklist', broadcast_key => 'user_id'"
    paths = {
        "w1": lambda: ks.sql(f"SELECT * FROM bench_counter({w1})"),
        "w1 + broadcast": lambda: ks.sql(f"SELECT * FROM bench_counter(events => {w1}, {bc})"),
        "w1 + lookup": lambda: ks.sql(f"SELECT * FROM bench_blocked(events => {w1}, {bc})"),
        "w1 + join": lambda: ks.sql(
            "SELECT * FROM bench_joined(TABLE(SELECT /*+ BROADCAST(b) */ e.*, b.reason FROM bench_events e "
            "LEFT JOIN bench_blocklist b ON e.user_id = b.user_id), key => 'user_id', order_by => 'ts')"
        ),
    }
    times, runs = alternate(paths, a.rounds)
    best = {p: min(t) for p, t in times.items()}
    print(
        f"W1 {a.keys:,} keys, {a.rows:,} rows, broadcast table {a.table:,} rows: {runs} | best "
        f"w1+broadcast / w1 {best['w1 + broadcast'] / best['w1']:.3f}x, "
        f"w1+lookup / w1 {best['w1 + lookup'] / best['w1']:.3f}x, "
        f"w1+join / w1 {best['w1 + join'] / best['w1']:.3f}x",
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()

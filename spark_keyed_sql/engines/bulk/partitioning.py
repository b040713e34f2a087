"""How the bulk engine spreads keys: a key's *state partition* is fixed for a checkpoint
(``pmod(hash(key columns), P)``, Spark's own hash), and each micro-batch spreads the state
partitions evenly over however many tasks it runs. A task may serve many state partitions; a
state partition is served by one task per batch.

Spark's ``repartition(n, col)`` sends a row to ``pmod(murmur3(col), n)``, which spreads a few
small integers unevenly. So the column a batch repartitions by is, for state partition ``p``,
an integer chosen to hash to task ``p % n`` (``task_keys``)."""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import Column
from pyspark.sql import functions as F

from ...runtime.columns import quote

__all__ = ["PART", "TASK", "part_column", "spark_hash_int", "task_column", "task_keys"]

PART = "__ks_part"  # state partition of a row
TASK = "__ks_task"  # what a batch repartitions by (hashes to the task serving the partition)
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one INT value: Murmur3_x86_32.hashInt with Spark's seed 42."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = _rotl((seed & _M32) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


@lru_cache(maxsize=64)
def task_keys(n: int) -> tuple[int, ...]:
    """For each task ``t`` of ``n``, the smallest non-negative int Spark sends to task ``t``."""
    found: dict[int, int] = {}
    x = 0
    while len(found) < n:
        found.setdefault(spark_hash_int(x) % n, x)  # Python's % is pmod for a positive n
        x += 1
    return tuple(found[t] for t in range(n))


def part_column(key_columns: list[str], partitions: int) -> Column:
    """A row's state partition, from its key columns (0 for an unkeyed query): one SQL
    expression, not a Spark call per key column."""
    if not key_columns:
        return F.lit(0)
    return F.expr(f"CAST(pmod(hash({', '.join(quote(k) for k in key_columns)}), {int(partitions)}) AS INT)")


def task_column(part: str, tasks: int) -> Column:
    """What to repartition by so that state partition ``p`` (column ``part``) lands on task
    ``p % tasks``: one SQL expression over the task keys, not a Spark call per task."""
    keys = ", ".join(str(k) for k in task_keys(tasks))
    return F.expr(f"element_at(array({keys}), CAST({quote(part)} % {int(tasks)} + 1 AS INT))")

"""spark-keyed-sql: per-key stateful Python functions, called from Spark SQL."""

from .api import (
    KeyedProcessor,
    KeyedSQLError,
    ListState,
    MapState,
    StatefulFunction,
    ValueState,
)
from .runtime.tester import KeyedTester
from .session import KeyedSQL

__all__ = [
    "KeyedProcessor",
    "KeyedSQL",
    "KeyedSQLError",
    "KeyedTester",
    "ListState",
    "MapState",
    "StatefulFunction",
    "ValueState",
]
__version__ = "0.1.0"

"""spark-keyed-sql: per-key stateful Python functions, called from Spark SQL.

The classes users write and test (``StatefulFunction``, ``KeyedProcessor``, the state
descriptors, ``KeyedTester``) import with no PySpark installed. The names that run on Spark
(``KeyedSQL`` and the errors of its SQL and checkpoints) load on first use, after checking
that the installed PySpark is one this package supports (docs/compatibility.md)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

# quiet unless the application configures logging ("spark_keyed_sql" and its per-module
# loggers; the CLI's --debug shows them): docs/troubleshooting.md
logging.getLogger(__name__).addHandler(logging.NullHandler())

from .compat.interpreter import default_worker_python  # noqa: E402
from .compat.lazy import lazy_names  # noqa: E402
from .compat.versions import check_python, require_pyspark  # noqa: E402

check_python()
default_worker_python()

from .api import (  # noqa: E402
    ColumnRows,
    KeyedProcessor,
    KeyedSQLError,
    ListState,
    MapState,
    StatefulFunction,
    ValueState,
)
from .api.errors import (  # noqa: E402
    JavaMissingError,
    OutputSchemaError,
    RegistrationError,
    SchemaError,
    SparkVersionError,
    StateAccessError,
    StateEncodingError,
    StateTypeError,
    TimerLoopError,
    UnknownFunctionError,
    UserFunctionError,
    WorkerPythonError,
)
from .testing import KeyedTester  # noqa: E402

if TYPE_CHECKING:
    from .session import KeyedSQL
    from .sql.errors import KeyedQueryError, KeyedSQLSyntaxError
    from .state.checkpoint import CheckpointError, MigrationError
    from .state.evolution import StateEvolutionError

# the names that need Spark: module that defines each
_ON_SPARK = {
    "KeyedSQL": ".session",
    "KeyedQueryError": ".sql.errors",
    "KeyedSQLSyntaxError": ".sql.errors",
    "CheckpointError": ".state.checkpoint",
    "MigrationError": ".state.checkpoint",
    "StateEvolutionError": ".state.evolution",
}

__getattr__ = lazy_names(__name__, _ON_SPARK, before=require_pyspark)


__all__ = [
    "CheckpointError",
    "ColumnRows",
    "JavaMissingError",
    "KeyedProcessor",
    "KeyedQueryError",
    "KeyedSQL",
    "KeyedSQLError",
    "KeyedSQLSyntaxError",
    "KeyedTester",
    "ListState",
    "MapState",
    "MigrationError",
    "OutputSchemaError",
    "RegistrationError",
    "SchemaError",
    "SparkVersionError",
    "StateAccessError",
    "StateEncodingError",
    "StateEvolutionError",
    "StateTypeError",
    "StatefulFunction",
    "TimerLoopError",
    "UnknownFunctionError",
    "UserFunctionError",
    "ValueState",
    "WorkerPythonError",
]
__version__ = "0.1.0"

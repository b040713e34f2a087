"""spark-keyed-sql: per-key stateful Python functions, called from Spark SQL."""

from .api import (
    ColumnRows,
    KeyedProcessor,
    KeyedSQLError,
    ListState,
    MapState,
    StatefulFunction,
    ValueState,
)
from .api.errors import (
    JavaMissingError,
    OutputSchemaError,
    RegistrationError,
    SchemaError,
    StateAccessError,
    StateEncodingError,
    StateTypeError,
    UnknownFunctionError,
    UserFunctionError,
)
from .session import KeyedSQL
from .sql.errors import KeyedQueryError, KeyedSQLSyntaxError
from .state.checkpoint import CheckpointError, MigrationError
from .testing import KeyedTester

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
    "StateAccessError",
    "StateEncodingError",
    "StateTypeError",
    "StatefulFunction",
    "UnknownFunctionError",
    "UserFunctionError",
    "ValueState",
]
__version__ = "0.1.0"

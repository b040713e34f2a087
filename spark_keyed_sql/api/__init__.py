"""User-facing building blocks. Imports nothing from Spark."""

from .context import KeyContext
from .errors import (
    KeyedSQLError,
    OutputSchemaError,
    RegistrationError,
    SchemaError,
    StateAccessError,
    StateEncodingError,
    StateTypeError,
    TimerLoopError,
    UnknownFunctionError,
    UserFunctionError,
)
from .function import KeyedProcessor, StatefulFunction
from .rows import ColumnRows
from .state import ListState, MapState, ValueState

__all__ = [
    "ColumnRows",
    "KeyContext",
    "KeyedProcessor",
    "KeyedSQLError",
    "ListState",
    "MapState",
    "OutputSchemaError",
    "RegistrationError",
    "SchemaError",
    "StateAccessError",
    "StateEncodingError",
    "StateTypeError",
    "StatefulFunction",
    "TimerLoopError",
    "UnknownFunctionError",
    "UserFunctionError",
    "ValueState",
]

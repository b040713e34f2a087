"""The project's own error types: every failure a user can cause is one of these."""

from __future__ import annotations

__all__ = [
    "KeyedSQLError",
    "RegistrationError",
    "UnknownFunctionError",
    "SchemaError",
    "OutputSchemaError",
    "StateEncodingError",
    "StateTypeError",
    "UserFunctionError",
    "StateAccessError",
    "JavaMissingError",
]


class KeyedSQLError(Exception):
    """Base class of every error raised by spark-keyed-sql."""


class RegistrationError(KeyedSQLError):
    """A class could not be registered (bad name, bad `returns`, failing `__init__`)."""


class UnknownFunctionError(KeyedSQLError):
    """A query names a function that was never registered."""


class SchemaError(KeyedSQLError):
    """A DDL type string or a column reference is not valid."""


class OutputSchemaError(KeyedSQLError):
    """A function returned a value that does not fit its declared `returns` schema."""


class StateEncodingError(KeyedSQLError):
    """An attribute holds a value the safe state encoding refuses."""


class StateTypeError(KeyedSQLError):
    """A typed state value (annotated attribute or state variable) has the wrong type."""


class StateAccessError(KeyedSQLError):
    """Typed state was used outside `process` / `on_timer` / `on_initial_state`."""


class UserFunctionError(KeyedSQLError):
    """User code raised; the message names the function, the key and the input."""

    def __init__(self, function: str, key: object, where: str, cause: BaseException):
        self.function = function
        self.key = key
        self.where = where
        self.cause = cause
        super().__init__(
            f"function '{function}' failed for key {key!r} on {where}: "
            f"{type(cause).__name__}: {cause}"
        )


class JavaMissingError(KeyedSQLError):
    """No usable Java runtime: Spark cannot start."""

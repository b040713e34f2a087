"""The project's own error types: every failure a user can cause is one of these."""

from __future__ import annotations

import os
import traceback

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
    "TimerLoopError",
    "JavaMissingError",
    "SparkVersionError",
    "WorkerPythonError",
    "user_frames",
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


class TimerLoopError(KeyedSQLError):
    """`on_timer` keeps registering timers that are due at once: firing them would never end."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MAX_FRAMES = 6


def user_frames(exc: BaseException) -> str:
    """The frames of ``exc``'s traceback that are the user's own code (not this package's, not
    PySpark's), as ``traceback`` prints them: what the user needs to find their bug, carried in
    the error's message because Spark passes a worker's failure on as text."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if not os.path.abspath(f.filename).startswith(_PACKAGE)
        and f"{os.sep}pyspark{os.sep}" not in f.filename
        and not f.filename.startswith("<spark_keyed_sql ")  # the package's generated loops (compat/codegen.py)
    ]
    return "".join(traceback.format_list(frames[-_MAX_FRAMES:])).rstrip("\n")


class UserFunctionError(KeyedSQLError):
    """User code raised; the message names the function, the key and the input, followed by the
    user's own frames of the traceback (file, line, code)."""

    def __init__(self, function: str, key: object, where: str, cause: BaseException):
        self.function = function
        self.key = key
        self.where = where
        self.cause = cause
        self.frames = user_frames(cause)
        text = "\n    ".join(str(cause).splitlines())  # continuation lines indented: one block of text
        super().__init__(
            f"function '{function}' failed for key {key!r} on {where}: {type(cause).__name__}: {text}"
            + (f"\n{self.frames}" if self.frames else "")
        )


class JavaMissingError(KeyedSQLError):
    """No usable Java runtime: Spark cannot start."""


class SparkVersionError(KeyedSQLError, ImportError):
    """The installed PySpark (or the Spark a session runs) is outside the supported range, or
    lacks a feature that was asked for; the message names the feature, the version it needs and
    the version found."""


class WorkerPythonError(KeyedSQLError):
    """Spark's Python workers run another Python than the driver (PySpark needs the same minor
    version on both, and the workers need this package)."""

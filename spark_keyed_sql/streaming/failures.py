"""A failed Spark job or streaming query, turned back into this project's own error.

Spark hands the driver a ``PythonException`` (a DataFrame action) or a
``StreamingQueryException`` (``ks.run``, a query of ``ks.start``) whose text holds a Python
traceback from an executor (or from the foreachBatch callback) and Java frames. What the user
needs is in there — our error with its function, key, row and the user's own frames, or the
state store's load failure — so it is found and raised as our error type, with Spark's
exception kept as its ``spark_error`` attribute (not chained, so the user sees one clear
message rather than pages of frames).

``translating(obj)`` gives the DataFrames (and their writers, grouped data and streaming
queries) that the project returns this translation: it switches the object to a subclass of
its own class whose public methods turn such a failure into our error, and whose results of
those kinds translate too, so ``ks.sql(...).filter(...).collect()`` raises
``UserFunctionError``. The object stays an instance of its pyspark class."""

from __future__ import annotations

import ast
import builtins
import datetime
import decimal
import functools
import inspect
import re
import threading
import warnings
from typing import Any, TypeVar

from ..api import errors as api_errors
from ..api.errors import KeyedSQLError, UserFunctionError, WorkerPythonError
from ..compat.exceptions import exception_texts
from ..engines.background import failure_of
from ..state.checkpoint import CheckpointError, MigrationError
from ..state.evolution import StateEvolutionError

__all__ = ["cause_of", "from_spark_failure", "from_stream_failure", "key_value", "translating"]

_OURS = {
    name: cls
    for name, cls in vars(api_errors).items()
    if isinstance(cls, type) and issubclass(cls, KeyedSQLError) and cls is not KeyedSQLError
}
_OURS["CheckpointError"] = CheckpointError
_OURS["MigrationError"] = MigrationError
_OURS["StateEvolutionError"] = StateEvolutionError  # (a class's converter that raised, in a Spark job)
# our error's class name, then its message: a first line and the lines indented below it (the
# user's frames, continuation lines of the cause's message)
_LINE = re.compile(r"(?:spark_keyed_sql\.[\w.]+\.)?\b(" + "|".join(sorted(_OURS)) + r"): (.+(?:\n  .*)*)")
_USER = re.compile(
    r"function '(?P<function>[^']*)' failed for key (?P<key>.+?) on (?P<where>.+?): (?P<cause>\w+: .*)$", re.M
)
# a native plan's row that Python would refuse (engines/native/plan.py): Spark's raise_error with
# the Python path's message, the user's frame below it (Spark 3.5's raise_error throws a plain
# java.lang.RuntimeException with the message)
_RAISED = re.compile(
    r"(?:\[USER_RAISED_EXCEPTION\] |java\.lang\.RuntimeException: )(function '[^']*' failed for key .+(?:\n  .*)*)"
)
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?\s*$")


def from_spark_failure(exc: BaseException, checkpoint: str | None = None) -> BaseException:
    """Our error carried in ``exc``'s text (``exc`` itself when there is none)."""
    cur: BaseException | None = exc
    for _ in range(10):  # raised in this process (e.g. a driver-side step): ours as it is
        if isinstance(cur, KeyedSQLError):
            return cur
        cur = None if cur is None else (cur.__cause__ or cur.__context__)
    texts = exception_texts(exc)
    joined = "\n".join(texts)
    mismatch = _MISMATCH.search(joined)
    if mismatch:
        return _worker_python(exc, mismatch["worker"], mismatch["driver"])
    where = f"checkpoint '{checkpoint}'" if checkpoint else "the checkpoint"
    if "CANNOT_LOAD_STATE_STORE" in joined:
        detail = next((t for t in reversed(texts) if "Exception" in t and "CANNOT_LOAD_STATE_STORE" not in t), "")
        err: BaseException = CheckpointError(
            f"{where}: Spark could not load the keyed state (state files damaged or missing"
            + (f": {detail.strip().splitlines()[0]}" if detail else "")
            + "). Nothing was committed and the checkpoint was not changed. Restore it from a copy, or rebuild "
            "the state on a new checkpoint (INITIAL STATE FROM a saved read_state table)"
        )
        err.spark_error = exc  # type: ignore[attr-defined]
        return err
    found = [(m.group(1), m.group(2)) for t in texts for m in _LINE.finditer(t)]
    if not found:
        found = [("UserFunctionError", m.group(1)) for t in texts for m in _RAISED.finditer(t)]
    if not found:
        return exc
    name, message = found[-1][0], _SQLSTATE.sub("", found[-1][1].rstrip())
    cls = _OURS[name]
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if cls is UserFunctionError:
        m = _USER.match(message)
        err.function, err.key, err.where, err.cause = (
            (m["function"], *_key_and_where(message.splitlines()[0], m), cause_of(m["cause"]))
            if m
            else (None, None, None, None)
        )
        err.frames = "\n".join(line for line in message.splitlines()[1:] if line.startswith("  "))
    err.spark_error = exc  # type: ignore[attr-defined]
    return err


from_stream_failure = from_spark_failure

# the calls a key's repr may hold beside literals (a timestamp, a date or a decimal key)
_KEY_CALLS = {
    "datetime.datetime": datetime.datetime,
    "datetime.date": datetime.date,
    "datetime.timedelta": datetime.timedelta,
    "Decimal": decimal.Decimal,
}
_NOT_A_KEY = (SyntaxError, ValueError, TypeError, decimal.InvalidOperation, RecursionError)


def _parsed(text: str) -> Any:
    """A key's repr read back as its value; ``ValueError`` (or ``SyntaxError``, ...) when the
    text is no repr of a key's kind of value."""
    return _value(ast.parse(text.strip(), mode="eval").body)


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Call) and not node.keywords:
        name = ast.unparse(node.func)
        if name in _KEY_CALLS:
            return _KEY_CALLS[name](*[_value(a) for a in node.args])
        raise ValueError(name)
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    return ast.literal_eval(node)


def key_value(text: str) -> Any:
    """The key as the message printed it (its repr), as a value again: the message is all a
    failure in Spark's Python worker (or behind Spark Connect) brings back. The text itself
    when it is not a repr of a key's kind of value."""
    try:
        return _parsed(text)
    except _NOT_A_KEY:
        return text


def _key_and_where(first: str, m: re.Match) -> tuple[Any, str]:
    """The key and what it failed on, from the message's first line: the key's repr ends at the
    first " on " before which the text parses as a key (a string key may hold " on ")."""
    rest = first[first.index(" failed for key ") + len(" failed for key ") :]
    at = rest.find(" on ")
    while at >= 0:
        try:
            key = _parsed(rest[:at])
        except _NOT_A_KEY:
            at = rest.find(" on ", at + 1)
            continue
        where = rest[at + len(" on ") :]
        cause = f": {m['cause']}"
        return key, where[: -len(cause)] if where.endswith(cause) else m["where"]
    return key_value(m["key"]), m["where"]


def cause_of(text: str) -> BaseException:
    """The user code's exception, rebuilt from its ``Name: message`` line: of the builtin type
    of that name (``isinstance(err.cause, ValueError)`` holds), else of a class of that name
    (the user's own class is not importable here); its traceback is the error's ``frames``."""
    name, _, message = text.partition(": ")
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        try:
            return builtin(message)
        except Exception:  # noqa: BLE001 - a builtin that takes other arguments (e.g. UnicodeDecodeError)
            pass
    return type(name, (Exception,), {"__module__": "spark_keyed_sql.remote"})(message)


_MISMATCH = re.compile(
    r"PYTHON_VERSION_MISMATCH\].*?worker has different version:? (?P<worker>[\d.]+) than that in driver:? "
    r"(?P<driver>[\d.]+)"
)


def _worker_python(exc: BaseException, worker: str, driver: str) -> BaseException:
    """PYTHON_VERSION_MISMATCH, as one sentence saying what to set."""
    import sys

    err = WorkerPythonError(
        f"Spark's Python workers run Python {worker} and this driver runs Python {driver} ({sys.executable}); PySpark "
        f"needs the same minor version on both. Set PYSPARK_PYTHON={sys.executable} before the SparkSession starts (or "
        "import spark_keyed_sql before creating it, which does so when PYSPARK_PYTHON is unset); on a cluster, point "
        f"PYSPARK_PYTHON or spark.pyspark.python at the executors' Python {driver}. DataFrames made before the change "
        "keep the old interpreter: make them again"
    )
    err.spark_error = exc  # type: ignore[attr-defined]
    return err


# pyspark classes whose objects the translation follows (classic and Spark Connect alike)
_KINDS = {
    "DataFrame",
    "GroupedData",
    "DataFrameWriter",
    "DataFrameWriterV2",
    "DataStreamWriter",
    "StreamingQuery",
    "DataFrameNaFunctions",
    "DataFrameStatFunctions",
    "PandasCogroupedOps",
}
_CLASSES: dict[type, type] = {}
_CLASSES_LOCK = threading.Lock()
T = TypeVar("T")


def _wrap(fn: Any, name: str, query: bool) -> Any:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        held: list = []
        try:
            if name == "toPandas":
                # toPandas warns with the whole worker traceback before it raises: held back,
                # and shown unless the failure turns out to be ours
                with warnings.catch_warnings(record=True) as held:
                    warnings.simplefilter("always")
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
        except KeyedSQLError:
            raise
        except Exception as exc:
            failed = failure_of(args[0]) if query else None
            if failed is not None:  # stopped by work beside it (the lease, a timer pump): Spark's error is the
                raise from_spark_failure(failed) from None  # stop's own (an interrupted listing), not the cause
            ours = from_spark_failure(exc)
            if ours is exc:
                _reissue(held)
                raise
            raise ours from None
        _reissue(held)
        if query and name == "exception":
            failed = failure_of(args[0])  # stopped by a failure of work beside it: that failure
            if failed is not None:
                return from_spark_failure(failed)
            return None if out is None else from_spark_failure(out)  # ours when it is ours
        if query and name in ("awaitTermination", "processAllAvailable"):
            failed = failure_of(args[0])
            if failed is not None:
                raise from_spark_failure(failed) from None
        return translating(out)

    return call


def _reissue(held: list | None) -> None:
    for w in held or []:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _active_across_restarts(getter: Any) -> Any:
    """``isActive`` of a query being restarted around a queued edit (streaming/edit_restarts.py):
    True while the handle's JVM query is stopped and its next one starts (the user's query goes on)."""

    @functools.wraps(getter)
    def is_active(self: Any) -> Any:
        restarting = getattr(self, "_ks_restarting", None)
        if restarting is not None and restarting():
            return True
        return getter(self)

    return is_active


def _translating_class(base: type) -> type:
    with _CLASSES_LOCK:
        return _CLASSES.get(base) or _CLASSES.setdefault(base, _make_translating_class(base))


def _make_translating_class(base: type) -> type:
    ns: dict[str, Any] = {"__slots__": () if "__slots__" in vars(base) else None, "_ks_translating": True}
    if ns["__slots__"] is None:
        del ns["__slots__"]
    query = base.__name__ == "StreamingQuery"
    for attr in dir(base):
        if attr.startswith("_"):
            continue
        try:
            raw = inspect.getattr_static(base, attr)
        except AttributeError:
            continue
        if isinstance(raw, property) and raw.fget is not None:
            getter = _wrap(raw.fget, attr, query)
            ns[attr] = property(_active_across_restarts(getter) if query and attr == "isActive" else getter)
        elif inspect.isfunction(raw):
            ns[attr] = _wrap(raw, attr, query)
    cls = type(base.__name__, (base,), ns)
    cls.__module__ = base.__module__
    cls.__qualname__ = base.__qualname__
    return cls


def translating(obj: T) -> T:
    """``obj`` (a pyspark DataFrame, writer, grouped data or streaming query; anything else is
    returned as it is) with failures that carry our error raised as our error."""
    base = type(obj)
    if (
        getattr(base, "_ks_translating", False)
        or base.__name__ not in _KINDS
        or not base.__module__.startswith("pyspark.")
    ):
        return obj
    try:
        obj.__class__ = _translating_class(base)
    except TypeError:  # a layout Python cannot switch: untranslated, still correct
        return obj
    return obj

"""A failed streaming query, turned back into this project's own error.

Spark hands ``ks.run`` a ``StreamingQueryException`` whose text holds a Python traceback from
an executor (or from the foreachBatch callback) and Java frames. What the user needs is in
there — our error with its function, key and row, or the state store's load failure — so it is
found and raised as our error type, with Spark's exception kept as its ``spark_error``
attribute (not chained, so the user sees one clear message rather than pages of frames)."""

from __future__ import annotations

import re

from ..api import errors as api_errors
from ..api.errors import KeyedSQLError, UserFunctionError
from ..state.checkpoint import CheckpointError

__all__ = ["from_stream_failure"]

_OURS = {
    name: cls
    for name, cls in vars(api_errors).items()
    if isinstance(cls, type) and issubclass(cls, KeyedSQLError) and cls is not KeyedSQLError
}
_OURS["CheckpointError"] = CheckpointError
_LINE = re.compile(r"(?:spark_keyed_sql\.[\w.]+\.)?\b(" + "|".join(sorted(_OURS)) + r"): (.+)")
_USER = re.compile(r"function '(?P<function>[^']*)' failed for key (?P<key>.+?) on (?P<where>.+?): (?P<cause>\w+: .*)$")


def _texts(exc: BaseException) -> list[str]:
    """The exception's message, its Python causes, and (classic Spark) its Java cause chain."""
    out, seen = [], 0
    cur: BaseException | None = exc
    while cur is not None and seen < 20:
        out.append(str(cur))
        seen += 1
        cur = getattr(cur, "_cause", None) or cur.__cause__
    try:
        t = getattr(exc, "_origin", None)
        while t is not None and seen < 40:
            out.append(str(t.toString()))
            seen += 1
            t = t.getCause()
    except Exception:  # noqa: BLE001 - no JVM to ask (Spark Connect): the text above is what there is
        pass
    return out


def from_stream_failure(exc: BaseException, checkpoint: str | None = None) -> BaseException:
    cur: BaseException | None = exc
    for _ in range(10):  # raised in this process (e.g. a driver-side step): ours as it is
        if isinstance(cur, KeyedSQLError):
            return cur
        cur = None if cur is None else (cur.__cause__ or cur.__context__)
    texts = _texts(exc)
    joined = "\n".join(texts)
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
    found = [m for t in texts for m in _LINE.finditer(t)]
    if not found:
        return exc
    name, message = found[-1].group(1), found[-1].group(2).strip()
    cls = _OURS[name]
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    if cls is UserFunctionError:
        m = _USER.match(message)
        err.function, err.key, err.where, err.cause = (m["function"], m["key"], m["where"], m["cause"]) if m else (None, None, None, None)
    err.spark_error = exc  # type: ignore[attr-defined]
    return err

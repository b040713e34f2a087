"""Spark's exceptions as text. A classic session raises Python wrappers of Java exceptions
(``AnalysisException`` with a Java cause chain, ``Py4JJavaError`` whose own message is only
"An error occurred while calling o123.load"); a Spark Connect session raises the server's
message alone. What the user needs is the first meaningful line, and sometimes a cause deeper
in the chain (Spark 3.5 reports an unreadable Parquet file as "unsupported data source", with
the reason two causes down)."""

from __future__ import annotations

import re

__all__ = ["exception_texts", "first_line"]

_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?")


def exception_texts(exc: BaseException, limit: int = 40) -> list[str]:
    """``exc``'s message, its Python causes, and (classic Spark) its Java cause chain."""
    out: list[str] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < limit // 2:
        out.append(str(cur))
        cur = getattr(cur, "_cause", None) or cur.__cause__
    try:
        t = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
        while t is not None and len(out) < limit:
            out.append(str(t.toString()))
            t = t.getCause()
    except Exception:  # noqa: BLE001 - no JVM to ask (Spark Connect): the text above is what there is
        pass
    return out


def first_line(exc: BaseException) -> str:
    """The first line that says something: not py4j's "An error occurred while calling ...",
    not a stack frame, without Spark's SQLSTATE suffix."""
    java = getattr(exc, "java_exception", None)
    texts = [str(java.toString())] if java is not None else []
    texts.append(str(exc))
    for text in texts:
        for line in text.strip().splitlines():
            line = line.strip()
            if not line or line.startswith(("at ", "An error occurred while calling")) or "Traceback" in line:
                continue
            return _SQLSTATE.sub("", line).rstrip()[:500]
    return type(exc).__name__

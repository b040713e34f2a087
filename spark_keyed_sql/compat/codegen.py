"""Functions generated from source text (the row loop per ``returns`` schema, event makers):
their source is kept in ``linecache`` under a name of its own, so a traceback through one shows
its lines like any other code's."""

from __future__ import annotations

import hashlib
import linecache
from typing import Any

__all__ = ["generated_function"]


def generated_function(source: str, name: str, env: dict[str, Any], what: str) -> Any:
    """``name`` defined by ``source`` (executed in ``env``); tracebacks show the source."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:10]
    filename = f"<spark_keyed_sql {what} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), env)  # noqa: S102 - built by this package from names and types only
    return env[name]

"""Names a package loads on first use (PEP 562): a Python worker that imports one module of a
package on the way to its task function does not pay for the rest of it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, where: Mapping[str, str], before: Callable[[str], object] | None = None
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` loading each name of ``where`` (name -> the
    relative module holding it) on first use and keeping it in the package's namespace.
    ``before(name)`` runs first (e.g. a check that raises a clear error instead)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before(name)
        value = getattr(import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__

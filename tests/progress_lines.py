"""Progress lines on the terminal during `make test` (pytest -q shows only dots, and the
cluster / Spark Connect modules run for minutes): a line when each test module starts, with
the time since the session began, and lines from slow fixtures (cluster, Connect server)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

__all__ = ["count_modules", "install", "module_times", "note", "test_ran", "test_starts"]

_config = None
_t0 = time.monotonic()
_sizes: Counter[str] = Counter()
_started: set[str] = set()
_seconds: Counter[str] = Counter()  # each module's tests' time (setup, call, teardown), any worker


def install(config) -> None:
    global _config, _t0
    _config = config
    _t0 = time.monotonic()


def note(message: str) -> None:
    """Write ``[ mm:ss] message`` on its own line, past pytest's output capture."""
    # looked up here: at pytest_configure time the terminal reporter may not be registered yet
    reporter = _config.pluginmanager.get_plugin("terminalreporter") if _config is not None else None
    if reporter is None:
        return
    elapsed = int(time.monotonic() - _t0)
    if reporter._tw.width_of_current_line:  # after -q's dots: start a new line
        reporter._tw.line()
    reporter.write_line(f"[{elapsed // 60:3d}:{elapsed % 60:02d}] {message}")


def count_modules(nodeids: Iterable[str]) -> None:
    """The tests per module (after -k / -m deselection): pytest's own collection, or under
    pytest-xdist a worker's (each worker collects them all)."""
    _sizes.clear()
    _sizes.update(n.split("::")[0] for n in nodeids)


def test_starts(nodeid: str, per_test: bool) -> None:
    """Under -q (make test), a line per module; without -v, a line per test of the long modules
    (pytest itself names modules without -q, and tests with -v)."""
    verbose = _config.option.verbose if _config is not None else 0
    module = nodeid.split("::")[0]
    # a line the first time: under pytest-xdist two workers' tests interleave here (a module on
    # one worker), and a session-scoped parametrized fixture can bring a module back later
    if module not in _started:
        _started.add(module)
        n = _sizes[module]
        if verbose < 0:
            note(f"{module} ({n} test{'s' if n != 1 else ''})")
    if per_test and verbose <= 0:
        note(f"  {nodeid.split('::', 1)[-1]} ...")


def test_ran(nodeid: str, seconds: float) -> None:
    """One phase (setup / call / teardown) of a test took ``seconds`` (the controller sees every
    worker's reports)."""
    _seconds[nodeid.split("::")[0]] += seconds


def module_times(top: int = 30) -> list[str]:
    """The ``top`` modules by their tests' time, longest first, and what they are of the whole:
    where CI's time goes (CONTRIBUTING.md's time budget)."""
    total = sum(_seconds.values()) or 1.0
    return [f"{s:7.1f} s {100 * s / total:5.1f}%  {m}" for m, s in _seconds.most_common(top)]

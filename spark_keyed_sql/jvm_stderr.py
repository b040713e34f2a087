"""A quiet local session's console (``local_session``, the CLI) without PySpark's
transformWithState driver-worker lines.

A query on engine ``tws`` starts pyspark's driver-side transformWithState worker once per query
run, and that worker ``print``s five lines (and a blank line after each) that the JVM copies to
its standard error, past log4j, so no log level hides them. A quiet ``local_session`` (the CLI's
too) starts its JVM with a pipe as that standard error and passes everything through but those
lines and the JVM's own notice of the incubator module Spark 4 loads ("WARNING: Using incubator
modules: jdk.incubator.vector", printed before anything else, so a failure's one ``error:`` line
was not the first line); what the JVM writes once the process has exited, while it shuts down,
is not shown.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CHATTER", "drain", "filtered_jvm_stderr", "is_chatter"]

CHATTER = "Streaming TransformWithStateInPandas Python worker"
_JVM_NOTICE = b"WARNING: Using incubator modules:"

_pumps: list[threading.Thread] = []


def is_chatter(line: bytes) -> bool:
    return CHATTER.encode() in line


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _pump(read_fd: int, write_fd: int) -> None:
    """Copy lines from ``read_fd`` to ``write_fd`` until the JVM closes its end, leaving out the
    worker's lines and the blank line its ``print("...\\n")`` adds after each. A console that
    cannot be written any more is read on and discarded (the JVM never blocks on a full pipe)."""
    skip_blank = False
    console_ok = True
    try:
        with os.fdopen(read_fd, "rb", buffering=0) as src:
            pending = b""
            while True:
                chunk = src.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                out = []
                for line in lines:
                    if line.startswith(_JVM_NOTICE):
                        continue
                    if is_chatter(line):
                        skip_blank = True
                        continue
                    if skip_blank and not line.strip():
                        skip_blank = False
                        continue
                    skip_blank = False
                    out.append(line + b"\n")
                if out and console_ok:
                    try:
                        _write_all(write_fd, b"".join(out))
                    except OSError:
                        console_ok = False
            if pending and console_ok:
                _write_all(write_fd, pending)
    except OSError:
        pass
    finally:
        os.close(write_fd)


@contextmanager
def filtered_jvm_stderr(enabled: bool = True) -> Iterator[None]:
    """Inside it, a JVM started (SparkSession's gateway) inherits a filtered standard error;
    this process's own standard error is restored on leaving it."""
    if not enabled or not hasattr(os, "dup2") or sys.stderr is None:
        yield
        return
    sys.stderr.flush()
    try:
        restore = os.dup(2)
    except OSError:  # no standard error (closed): nothing to filter
        yield
        return
    to_console = os.dup(2)  # the pump's copy of the real standard error
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    pump = threading.Thread(target=_pump, args=(read_fd, to_console), name="jvm-stderr", daemon=True)
    pump.start()
    _pumps.append(pump)
    try:
        yield
    finally:
        if sys.stderr is not None:
            sys.stderr.flush()
        os.dup2(restore, 2)  # (the JVM keeps the pipe: the pump runs as long as it does)
        os.close(restore)


def drain(timeout: float = 5.0) -> bool:
    """Wait up to ``timeout`` seconds for the pumps whose writers have all closed the pipe (the
    JVM exited) to pass on their last bytes; True when every pump has finished. The pump is a
    daemon thread, so without this a process that exits right after its JVM can lose the JVM's
    last output, e.g. a final line without a newline."""
    for pump in list(_pumps):
        pump.join(timeout)
        if not pump.is_alive():
            _pumps.remove(pump)
    return not _pumps

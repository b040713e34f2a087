"""A clear sentence instead of a Java stack trace when Spark cannot find Java."""

from __future__ import annotations

import os
import shutil
import subprocess

from .api.errors import JavaMissingError

__all__ = ["require_java"]


def require_java() -> str:
    """Return the ``java`` executable Spark will use, or raise JavaMissingError."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaMissingError(
            "Java was not found: Spark needs Java 17 or 21. Install it (e.g. `apt-get install "
            "openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise JavaMissingError(f"Java at {java} cannot run ({exc}); Spark needs Java 17 or 21.") from None
    if out.returncode != 0:
        raise JavaMissingError(f"Java at {java} failed to start: {out.stderr.strip()[:200]}")
    return java

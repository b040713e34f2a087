"""The README's quick start runs as pasted: a new Python process with a clean environment (no
PYSPARK_PYTHON, the venv not activated, only the venv's interpreter named), as a new user runs it."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs_in_a_clean_environment(tmp_path):
    text = README.read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(block.splitlines()) <= 25
    script = tmp_path / "quick_start.py"
    script.write_text(block)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in res.stdout.splitlines() if line.startswith("|") and "user_id" not in line]
    got = [(r[0].strip(), int(r[1]), float(r[2])) for r in rows]
    assert got == [("u1", 1, 1.0), ("u1", 2, 3.0), ("u2", 1, 5.0)]
    assert "ModuleNotFoundError" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-3000:]
    # PySpark 4.2+ with pandas 3 warns on every Python function it makes; none of ours shows it
    assert "does not yet fully support pandas" not in res.stderr, res.stderr[-3000:]

"""The README's quick start runs as pasted."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs(spark, capsys):
    text = README.read_text()
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(block.splitlines()) <= 25
    exec(compile(block, "README-quick-start", "exec"), {"__name__": "readme_quick_start"})
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("|") and "user_id" not in line]
    got = [(r[0].strip(), int(r[1]), float(r[2])) for r in rows]
    assert got == [("u1", 1, 1.0), ("u1", 2, 3.0), ("u2", 1, 5.0)]

"""The notebooks run top to bottom (nbclient), so they cannot rot; none is committed with
outputs (or errors) saved in it."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_three_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["01_quick_start", "02_streaming_walkthrough", "03_state_as_tables"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_has_no_saved_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    book = nbformat.read(str(path), as_version=4)
    NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors

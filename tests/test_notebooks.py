"""The notebooks are committed with their outputs, and those outputs are what the code makes
today: each notebook runs top to bottom (nbclient) and its outputs are compared with the
committed ones, cell by cell.

What is compared: stdout text and the ``text/plain`` form of results and displays, after
normalising what legitimately changes between runs (the notebook's temp directory); for a
plot, that a PNG is there (pixels differ across matplotlib versions and fonts). Spark's stderr
(warnings, progress bars) is neither committed nor compared.

After an intended change, refresh the committed outputs with ``make notebooks-refresh``
(``KS_NOTEBOOKS_REFRESH=1`` for this test file) and review the diff."""

import os
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
REFRESH = os.environ.get("KS_NOTEBOOKS_REFRESH") == "1"
_WORK = re.compile(r"(?:file:)?/[^\s'\"]*?ks-notebook-[A-Za-z0-9_]+")


def test_there_are_three_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["01_quick_start", "02_streaming_walkthrough", "03_state_as_tables"]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def comparable(cell) -> list[tuple[str, str]]:
    """A code cell's outputs as (kind, normalised text)."""
    out = []
    for o in cell.get("outputs", []):
        kind = o["output_type"]
        if kind == "stream":
            if o["name"] == "stdout":
                out.append(("stdout", _text(o["text"])))
        elif kind in ("execute_result", "display_data"):
            data = o["data"]
            out.append((kind, _text(data.get("text/plain", ""))))
            if "image/png" in data:
                out.append(("image", "image/png"))
        elif kind == "error":
            out.append(("error", f"{o['ename']}: {o['evalue']}"))
    merged: list[tuple[str, str]] = []
    for kind, text in out:  # stdout may arrive in several chunks
        if merged and kind == "stdout" and merged[-1][0] == "stdout":
            merged[-1] = ("stdout", merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return [(kind, _WORK.sub("<work>", text).rstrip()) for kind, text in merged]


def _execute(path: Path):
    nbformat = pytest.importorskip("nbformat")
    from jvm_options import TEST_JAVA_OPTIONS
    from nbclient import NotebookClient

    book = nbformat.read(str(path), as_version=4)
    # the kernel's JVMs (Spark's launcher and driver) with the tests' options; the java
    # launcher's note that it picked them up goes to stderr, which is not compared
    env = {**os.environ, "JDK_JAVA_OPTIONS": TEST_JAVA_OPTIONS}
    NotebookClient(
        book,
        timeout=600,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute(env=env)
    return nbformat, book


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_clean_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    book = nbformat.read(str(path), as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), "committed without outputs: run make notebooks-refresh"
    for c in code:
        assert all(o["output_type"] != "error" for o in c.outputs), c.source
        assert all(not (o["output_type"] == "stream" and o["name"] == "stderr") for o in c.outputs), c.source


def test_plots_are_inline():
    """The walkthrough shows its plots in the notebook (no file saved somewhere)."""
    nbformat = pytest.importorskip("nbformat")
    book = nbformat.read(str(NOTEBOOKS[1]), as_version=4)
    images = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2
    assert not any("savefig" in c.source for c in book.cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_reproduces_its_outputs(path):
    committed = [
        comparable(c)
        for c in pytest.importorskip("nbformat").read(str(path), as_version=4).cells
        if c.cell_type == "code"
    ]
    nbformat, book = _execute(path)
    fresh = [comparable(c) for c in book.cells if c.cell_type == "code"]
    errors = [text for cell in fresh for kind, text in cell if kind == "error"]
    assert not errors
    if REFRESH:
        for c in book.cells:
            if c.cell_type == "code":
                c.outputs = [o for o in c.outputs if not (o["output_type"] == "stream" and o["name"] == "stderr")]
        nbformat.write(book, str(path))
        return
    for i, (want, got) in enumerate(zip(committed, fresh, strict=True)):
        assert got == want, (
            f"{path.name}, code cell {i}: outputs differ from the committed ones (make notebooks-refresh if intended)"
        )

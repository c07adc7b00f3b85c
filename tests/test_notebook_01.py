"""notebooks/01_budget_the_traffic.ipynb: committed with its outputs, and still runs.

The kernel is `python3`; jupyter_client starts it with this interpreter (the
venv's), so the notebook sees the same `codesign` as the tests.
"""

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_budget_the_traffic.ipynb"
TIMEOUT_S = 150  # per cell (nbclient's timeout); the whole notebook runs in ~1 min on 2 cores


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _errors(nb):
    return [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" for o in c.get("outputs", ()) if o.output_type == "error"]


def test_committed_notebook_has_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = _code_cells(nb)
    assert cells, "the notebook has no code cells"
    unrun = [i for i, c in enumerate(cells) if c.execution_count is None]
    assert not unrun, f"code cells {unrun} were committed without being executed"
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), \
        "cells were executed out of order: rerun the notebook top to bottom"
    assert not _errors(nb), f"the committed notebook holds errors: {_errors(nb)}"
    images = sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)
    assert images >= 4, f"expected the notebook's figures in its outputs, found {images}"


def test_notebook_executes_without_error():
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    assert not _errors(nb)

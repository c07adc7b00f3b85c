"""notebooks/03_codesign.ipynb: committed with its outputs, and it still runs
top to bottom in under two minutes, with the gradient method matching the grid
on problem (a) and the grid's checkpoint intervals matching Daly's on (d)."""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_codesign.ipynb"
FIGURES = 5  # (a) best per (domain, tp), Pareto, (b), (c), (d)


def _text(nb) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", ()) if o.output_type == "stream")


def _check(nb) -> None:
    cells = [c for c in nb.cells if c.cell_type == "code"]
    errors = [(o.get("ename"), o.get("evalue")) for c in cells for o in c.outputs
              if o.output_type == "error"]
    assert not errors, errors
    images = sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)
    assert images >= FIGURES
    text = _text(nb)
    # (a): the gradient method reaches the grid's optimum (within 1%)
    days = {m.group(1): float(m.group(2))
            for m in re.finditer(r"^\s*(gradient|grid):\s+([\d.]+) days", text, re.M)}
    assert days["gradient"] <= days["grid"] * 1.01, days
    # (a): the best design per (domain, tp) exists for every tp shown
    rows = re.findall(r"^domain +(\d+): (.*)$", text, re.M)
    assert [int(d) for d, _ in rows] == [8, 64] and all("inf" not in r for _, r in rows)
    # the Pareto front: more money, less time
    front = [(float(c), float(d)) for c, d in
             re.findall(r"^\$([\d.]+)M -> +([\d.]+) days", text, re.M)]
    assert len(front) >= 3
    assert all(b[1] < a[1] for a, b in zip(front, front[1:], strict=False))
    # (b): at 10 GB/s a node limit of 4 beats a plain all-to-all; more bandwidth
    # affords more routing freedom
    slow = re.search(r"^\s*10\.0 GB/s: .*unlimited \+([\d.]+)%", text, re.M)
    assert slow and float(slow.group(1)) > 10
    free = [float(m) for m in re.findall(r"GB/s: M up to (\d+) within 1%", text)]
    assert len(free) == 6 and free == sorted(free) and free[-1] > free[0]
    # (d): the grid's best checkpoint interval is Daly's, for every cluster size
    rows = re.findall(r"best interval on the grid\s+(\d+) s, Daly\s+(\d+) s", text)
    assert len(rows) == 6
    for grid, daly in rows:
        assert float(grid) == pytest.approx(float(daly), rel=0.05)


def test_committed_notebook_has_current_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    _check(nb)


def test_notebook_executes_top_to_bottom(run_notebook):
    _check(run_notebook(nbformat.read(NOTEBOOK, as_version=4)))


DOCS = NOTEBOOK.parents[1] / "docs" / "codesign.md"
# a number and, where one follows, its unit ("d" is the notebook's "days")
_QUANTITY = re.compile(r"(\d+(?:[.,]\d+)*(?:e[+-]\d+)?)"
                       r"(?:\s?(days|d|GPUs|evaluations|GB/s|s|h|%|M)(?![\w/]))?")


def _quantities(text: str) -> set[tuple[str, str]]:
    """(number, unit) of every number in `text` ("" without a unit); an
    e-notation number also in units of 1e9 B/s."""
    found = set()
    for number, unit in _QUANTITY.findall(text):
        found.add((number, "days" if unit == "d" else unit))
        if "e" in number:
            found.add((f"{float(number) / 1e9:.4g}", "GB/s"))
    return found


def test_docs_quote_the_committed_outputs():
    """docs/codesign.md's four problems (its bullets) quote only numbers the
    committed notebook prints or sets, with the same unit where the page gives
    one: a rerun that moves them fails here until the page follows."""
    page = DOCS.read_text()
    section = page.split("## Four problems from the literature", 1)[1].split("\n## ", 1)[0]
    bullets = section[section.index("- **(a)"):]
    nb = nbformat.read(NOTEBOOK, as_version=4)
    printed = _quantities(_text(nb) + "\n".join(c.source for c in nb.cells))
    printed |= {(n, "") for n, _ in printed}  # a bare number matches any unit
    quoted = _quantities(bullets)
    assert sum(1 for _, u in quoted if u) > 30, sorted(quoted)
    missing = sorted(quoted - printed)
    assert not missing, f"docs/codesign.md quotes what the notebook does not print: {missing}"

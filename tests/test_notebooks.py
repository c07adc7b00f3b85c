"""The executed notebooks: committed with current outputs, and they still run, in
order, without error, printing the articles' numbers (how long they take is
`benchmarks/notebooks.py`'s business: a busy machine must not fail a test).

They run in one kernel per test worker (`run_notebook` in conftest.py, its
namespace reset before each), with this interpreter (the venv's), so the
notebooks see the same `codesign` as the tests.
"""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# notebook -> (figures it must show, lines it must print)
EXPECTED = {
    "01_budget_the_traffic.ipynb": (4, ()),
    "02_stragglers_and_failures.ipynb": (3, (
        "q = 1%, p =    100: P(step delayed) = 0.63397",
        "q = 1%, p =  1,000: P(step delayed) = 0.99996",
        "job MTBF            3.09 h",
        "effective training time 92.6%",
        "2 TB/s: delta =   2.8 s",
    )),
    "04_measure_and_calibrate.ipynb": (2, (
        "scale_out      28      3.409     43.05",
        "Megatron pattern: yes",
        "gradient bytes within 5% of the table once explained: yes",
        "# Out of bounds values : 0 OK",
    )),
    "06_your_own_program.ipynb": (1, (
        "over tp: 8 collectives, 64.00 MiB",
        "dgx-h100: step 4.266 ms = compute 3.218 ms + exposed communication 1.049 ms",
        "d log(step) / d log(scale-out bandwidth) = -0.131",
    )),
    "07_next_chip.ipynb": (1, (
        "10,800 designs; B200's design: 2.25 PFLOP/s, 8 stacks, $25,889, 1,125 W at full load",
    )),
    "05_robust_codesign.ipynb": (1, (
        "nominal:                                      best dp 1024 (131,072 GPUs)",
        "0.9-quantile:                                 best dp 512 (65,536 GPUs)",
        "regret of the nominal design at the 0.9-quantile: +18.0%",
    )),
}


def _text(nb) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", ()) if o.output_type == "stream")


def _errors(nb):
    return [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" for o in c.get("outputs", ()) if o.output_type == "error"]


def _check(nb, name, committed: bool):
    figures, lines = EXPECTED[name]
    cells = [c for c in nb.cells if c.cell_type == "code"]
    if committed:
        assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), \
            "cells were committed unexecuted or out of order: rerun top to bottom"
    assert not _errors(nb), _errors(nb)
    images = sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)
    assert images >= figures, f"expected {figures} figures, found {images}"
    text = _text(nb)
    for line in lines:
        assert line in text, f"{name} does not print {line!r}"
    return text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_committed_notebook_has_current_outputs(name):
    _check(nbformat.read(NOTEBOOKS / name, as_version=4), name, committed=True)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_executes_top_to_bottom(name, run_notebook):
    nb = run_notebook(nbformat.read(NOTEBOOKS / name, as_version=4))
    text = _check(nb, name, committed=False)
    if name.startswith("02"):  # placement: dp across the 1:7 pods is 7x slower than inside
        inside = next(ln for ln in text.splitlines() if ln.startswith("tp,dp,pp"))
        across = next(ln for ln in text.splitlines() if ln.startswith("tp,pp,dp"))
        ratio = float(across.split()[5].rstrip("s")) / float(inside.split()[5].rstrip("s"))
        assert ratio == pytest.approx(7.0, rel=0.05)

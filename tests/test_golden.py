"""The golden table: every built-in scenario's outputs and traffic rows, exact and
relaxed, and variants through the other strategy branches, as recorded by
`tests/fixtures/record_golden.py`: a restructuring of the model changes no
number beyond 1e-12 relative (re-record only when the model is meant to change)."""

import importlib.util
import json
import math
from pathlib import Path

import jax
import pytest

from codesign.cli import executable_store
from codesign.cli.estimate import estimate_program
from codesign.compiling import compiled
from codesign.model import relax, step

_FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("record_golden", _FIXTURES / "record_golden.py")
record_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record_golden)
GOLDEN = json.loads((_FIXTURES / "golden.json").read_text())
RTOL = 1e-12


@jax.jit
def _relaxed(scn):
    """The relaxed cases' program (every one at RELAXED_T), one per scenario structure."""
    est = step.estimate(scn, relax.Relaxed(record_golden.RELAXED_T), check=False)
    return est, step.outputs(est)


def _evaluate(scn, t):
    """(estimate, outputs) through the programs the rest of the suite compiles
    too: the exact model through `codesign estimate`'s own (`estimate_program`, its
    executable kept in the run's store for every worker, and its outputs are
    what `--json` prints), the relaxed one through one jit for every case."""
    if t == relax.EXACT:
        return compiled(estimate_program, scn, store=executable_store())[0](scn)
    assert t == relax.Relaxed(record_golden.RELAXED_T), t
    return _relaxed(scn)


def _close(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and abs(a - b) <= RTOL * max(abs(a), abs(b)))


@pytest.mark.parametrize("case", record_golden.cases(), ids=lambda c: c[0])
def test_outputs_and_rows_as_recorded(case):
    key, *args = case
    now, then = record_golden.record(key, *args, evaluate=_evaluate), GOLDEN[key]
    assert sorted(now["outputs"]) == sorted(then["outputs"])
    moved = {k: (then["outputs"][k], v) for k, v in now["outputs"].items()
             if not _close(v, then["outputs"][k])}
    assert not moved, moved
    assert [r["label"] for r in now["traffic"]] == [r["label"] for r in then["traffic"]]
    for row, old in zip(now["traffic"], then["traffic"], strict=True):
        moved = {f: (old[f], row[f]) for f in record_golden.ROW_FIELDS
                 if not _close(row[f], old[f])}
        assert not moved, (row["label"], moved)

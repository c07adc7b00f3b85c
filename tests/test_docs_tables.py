"""The tables of model figures quoted in docs/ are recomputed here, so a model
change that moves them fails until the page is updated (command blocks are
checked by tests/test_docs.py)."""

import re
from pathlib import Path

import pytest

from codesign import scenario as sc
from codesign.model import step

DOCS = Path(__file__).resolve().parents[1] / "docs"
GIB = 2**30


def _rows(page: str, first_cell: str) -> list[list[str]]:
    """Markdown table rows of `page` whose first cell starts with `first_cell`."""
    out = []
    for line in (DOCS / page).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(first_cell):
            out.append(cells)
    return out


def _num(cell: str) -> float:
    return float(re.match(r"[-+0-9.,]+", cell.replace(",", "")).group(0))


def _outputs(source, overrides, system=None):
    return step.outputs(step.estimate(sc.load(source, overrides, system=system)))


def test_llama3_405b_memory_and_mfu_table():
    rows = {r[0]: r for r in _rows("step-model.md", "seq ")}
    base = ["training.recompute='none'"]
    plans = {"seq 8,192, cp 1": base,
             "seq 131,072, cp 16": base + ["parallel.cp=16", "model.seq_len=131072",
                                           "training.global_batch=128"]}
    assert set(plans) <= set(rows)
    for label, overrides in plans.items():
        out, r = _outputs("llama3-405b", overrides), rows[label]
        mfu, causal = re.match(r"([0-9.]+)% \(([0-9.]+)%\)", r[1]).groups()
        assert float(out["mfu"]) * 100 == pytest.approx(float(mfu), abs=0.051), label
        assert float(out["mfu_causal"]) * 100 == pytest.approx(float(causal), abs=0.051), label
        assert float(out["step_time_s"]) == pytest.approx(_num(r[2]), abs=0.0051), label
        for col, key in zip(r[3:8], ("weights", "gradients", "optimizer", "activations",
                                     "reserve"), strict=True):
            assert float(out[f"memory_{key}_bytes"]) / GIB == pytest.approx(
                _num(col), abs=0.051), (label, key)
        assert float(out["memory_bytes_per_gpu"]) / GIB == pytest.approx(_num(r[8]), abs=0.051)


def test_zero3_throughput_table():
    rows = _rows("communication.md", "")
    rows = [r for r in rows if len(r) == 7 and r[0].isdigit()]
    assert len(rows) >= 5
    for r in rows:
        dp = int(r[0])
        overrides = ["parallel.tp=1", "parallel.pp=1", f"parallel.dp={dp}",
                     f"system.gpus={dp}", "parallel.zero=3",
                     f"training.micro_batch={1536 // dp}", "parallel.schedule='1f1b'",
                     "parallel.interleave=1"]
        for system, tok_col, mfu_col in (("dgx-h100", 2, 3), ("dgx-a100", 4, 5)):
            out = _outputs(None, overrides, system)
            per_gpu = float(out["tokens_per_s"]) / dp
            assert per_gpu == pytest.approx(_num(r[tok_col]), abs=0.51), (dp, system)
            assert float(out["mfu"]) * 100 == pytest.approx(_num(r[mfu_col]), abs=0.051)
        assert float(out["memory_bytes_per_gpu"]) / 1e9 == pytest.approx(_num(r[6]), abs=0.51)

"""The HLO audit of a sharded training step against the traffic table."""

import json

import pytest

from codesign import scenario as sc
from codesign.cli import main
from codesign.execute import audit


def test_dp2_tp4_step_shows_megatron_pattern_and_gradient_bytes(capsys):
    assert main(["audit", "megatron-8.3b", "--mesh", "dp=2,tp=4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scenario"] == "megatron-8.3b" and report["plan"]["tp"] > 0
    assert report["system"]["chip_spec"]["peak_flops_per_s"] > 0
    shape, comparison = report["shape"], report["comparison"]
    layers = shape["layers"]
    assert (shape["dp"], shape["tp"], layers) == (2, 4, 2)
    # forward: 2 tensor-parallel all-reduces per layer (+1 for the vocab-parallel embedding)
    assert comparison["forward"]["tp_all_reduces_per_layer"] == 2
    assert comparison["forward"]["embedding_collectives"] == 1
    assert report["megatron_pattern"] is True
    tp = comparison["tp"]
    assert tp["predicted_count"] == 4 * layers  # 2 forward + 2 backward per layer
    assert tp["hlo_count"] == 4 * layers + 2  # + embedding lookup and logits' input grad
    assert tp["predicted_bytes"] == 4 * layers * 2 * 32 * shape["hidden"] * 2
    assert abs(tp["unexplained_difference"]) < 1e-9
    dp = comparison["dp"]
    assert report["gradient_bytes_match"] is True
    assert abs(dp["unexplained_difference"]) < 0.05
    roles = {e["role"] for e in dp["explained"]}
    assert {"layer-norm scales", "loss mean"} <= roles
    assert dp["hlo_dtypes"] and all(o["axis"] in ("tp", "dp") for o in report["hlo"])


def test_scaled_shape_keeps_the_ratios_and_mesh_errors():
    scn = sc.load("llama3-405b")
    shape = audit.scaled_shape(scn.model, scn.plan, {"dp": 2, "tp": 4})
    assert shape.heads % 4 == 0 and shape.kv_heads % 4 == 0 and shape.heads % shape.kv_heads == 0
    assert shape.gated and shape.sequence_parallel and shape.ffn_hidden % 4 == 0
    ratio = float(scn.model.ffn_hidden) / float(scn.model.hidden)
    assert shape.ffn_hidden / shape.hidden == pytest.approx(ratio, rel=0.05)
    assert any("ZeRO-1" in n for n in shape.notes)
    assert audit.parse_mesh("tp=4,dp=2") == {"dp": 2, "tp": 4}
    with pytest.raises(ValueError, match="axis 'pp' is not one the audit builds"):
        audit.parse_mesh("dp=2,pp=4")
    with pytest.raises(ValueError, match="tp='x' must be a positive integer"):
        audit.parse_mesh("tp=x")
    with pytest.raises(ValueError, match="needs 16 devices; JAX sees 8"):
        audit.compile_hlo(audit.scaled_shape(scn.model, scn.plan, {"dp": 4, "tp": 4}))

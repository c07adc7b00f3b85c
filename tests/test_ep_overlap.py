"""Megatron-Core's combined 1F1B (`parallel.ep_overlap`) as what runs beside what,
layer by layer, with the weight gradients delayed or not (`training.delay_wgrad`):
`overlap.Paired` against hand-computed two-stream timelines."""

import re
from types import SimpleNamespace

import pytest

from codesign.model import overlap, strategies, workload
from codesign.model import plan as plan_lib
from codesign.model.relax import EXACT, Relaxed

# per MoE layer: the MoE block's forward M = 1, the rest of the layer's forward
# P_f = 1 and backward P_b = 2; 2 layers (both MoE), 4 micro-batches (3 paired)
TIMING = SimpleNamespace(moe_forward_s=2.0, forward_s=4.0, backward_s=8.0, layers=2.0)


def _paired(delay: bool, schedule=strategies.OneFOneB(), combined=True):
    return overlap.Paired(3.0, 0.5, combined, schedule, 2.0, 4.0, delay)


@pytest.mark.parametrize(("one_s", "delay", "layer"), [
    # each exchange D: the combine under P_f: max(1, D) - 1; the dispatches under the
    # MLP: max(max(2, D) + 1, max(D, w) + D) - 3 with w = 2 (w = 1 delayed); the
    # forward's combine under P_b: max(D, 2) - 2
    (0.5, False, 0.0), (0.5, True, 0.0),
    (1.5, False, 0.5 + 0.5), (1.5, True, 0.5 + 0.0),  # D between M and 2M: delay hides D_b
    (3.0, False, 2.0 + 3.0 + 1.0), (3.0, True, 2.0 + 3.0 + 1.0),  # D past 2M: 2D - 3M either way
])
def test_the_layered_overlap_is_a_two_stream_timeline(one_s, delay, layer):
    per_layer = 4 * one_s  # dispatch and combine, forward and backward
    time_s = 4 * 2 * per_layer
    rule = _paired(delay)
    got = float(rule.exposed_s(time_s, rule.hiding_s(TIMING, EXACT), EXACT))
    # the unpaired micro-batch's exchanges whole, the 3 paired ones' excess per layer
    assert got == pytest.approx(2 * per_layer + 3 * 2 * layer, rel=1e-12)


def test_dualpipe_and_no_overlap_keep_their_formulas():
    time_s = 48.0
    dual = _paired(False, strategies.DualPipe(), combined=False)
    hide = dual.hiding_s(TIMING, EXACT)
    # the forward's half under 3 x the backward (8), the backward's under 3 x 4
    assert float(dual.exposed_s(time_s, hide, EXACT)) == max(24 - 24, 0) + max(24 - 12, 0)
    off = _paired(False, combined=False)
    assert float(off.exposed_s(time_s, off.hiding_s(TIMING, EXACT), EXACT)) == time_s


def test_relaxed_exposure_is_finite_and_near_the_exact():
    rule = _paired(True)
    exact = float(rule.exposed_s(48.0, rule.hiding_s(TIMING, EXACT), EXACT))
    relaxed = float(rule.exposed_s(48.0, rule.hiding_s(TIMING, Relaxed(0.05)), Relaxed(0.05)))
    assert relaxed == pytest.approx(exact, rel=0.2)


def test_delay_wgrad_without_the_overlap_is_refused_in_one_line():
    model = workload.Transformer(4, 256, 8, 512, 1000, moe_layers=4, experts=8, top_k=2,
                                 expert_ffn_hidden=128)
    p = plan_lib.Plan(dp=8.0, ep=8.0, delay_wgrad=True)
    with pytest.raises(ValueError, match="^" + re.escape(
            "training.delay_wgrad=true needs parallel.ep_overlap=true (Megatron-Core delays "
            "the weight gradients for its combined 1F1B only)") + "$"):
        plan_lib.validate(p, model, 8.0)
    plan_lib.validate(plan_lib.Plan(dp=8.0, ep=8.0, delay_wgrad=True, ep_overlap=True),
                      model, 8.0)


def test_megatron_reads_delay_wgrad_with_the_overlap_only():
    from codesign.importers import megatron

    args = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8",
            "--seq-length", "512", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--num-experts", "8", "--moe-router-topk", "2", "--expert-model-parallel-size", "8",
            "--moe-ffn-hidden-size", "128", "--ffn-hidden-size", "512", "--bf16",
            "--delay-wgrad-compute"]
    on = megatron([*args, "--overlap-moe-expert-parallel-comm"], "flags")
    assert on.tables["training"]["delay_wgrad"] is True
    off = megatron(args, "flags")
    assert "delay_wgrad" not in off.tables["training"]
    assert any(i.startswith("--delay-wgrad-compute") and "(" in i for i in off.ignored)


def test_the_layered_rule_has_finite_gradients_and_jit_equals_eager():
    import jax

    def exposed(one_s, t):
        rule = _paired(True)
        return rule.exposed_s(32.0 * one_s, rule.hiding_s(TIMING, t), t)

    for t in (EXACT, Relaxed(0.05)):
        grad = float(jax.grad(exposed)(1.5, t))
        assert grad == grad and abs(grad) < 1e3
        assert float(jax.jit(exposed)(1.5, t)) == pytest.approx(float(exposed(1.5, t)),
                                                                rel=1e-12)

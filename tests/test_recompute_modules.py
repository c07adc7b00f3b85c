"""Recomputation by module, as Megatron-Core names it (`training.recompute_modules`):
each module's bytes and FLOPs against closed forms, its refusals, its importers."""

import pytest

from codesign.importers import megatron_bridge_words
from codesign.model import plan as plan_lib
from codesign.model import strategies, workload
from codesign.model.strategies import SelectiveRecompute

# a gated MoE model with dense layers and a shared expert (MHA), and DeepSeek-V3 (MLA)
H, FFN, F_E, TOP_K, SHARED, S, B, TP = 1024, 4096, 512, 4, 1, 2048, 2, 2
MOE = workload.Transformer(8, H, 16, S, 32000, ffn_hidden=FFN, gated=True, moe_layers=6,
                           experts=16, top_k=TOP_K, expert_ffn_hidden=F_E,
                           shared_experts=SHARED)
MLA = workload.model("deepseek-v3")


def _bytes(model, recompute, moe, tp=TP, sp=False, precision=None):
    """One layer's stored bytes per GPU (bf16 unless `precision`)."""
    return float(model.activation_bytes_per_layer(B, tp, sp, recompute, moe, 1.0, precision))


def _saved(model, names, moe, **kw):
    return _bytes(model, "none", moe, **kw) - _bytes(model, SelectiveRecompute(names), moe, **kw)


@pytest.mark.parametrize(("names", "moe", "saved"), [
    # the attention core: a fused kernel keeps 4 bytes of softmax statistics a head
    ("core_attn", False, 4.0 * 16 * S * B / TP),
    ("core_attn", True, 4.0 * 16 * S * B / TP),
    # the norms' outputs, 2 x 2 bytes x h a token, replicated without sequence parallelism
    ("layernorm", False, 4.0 * H * S * B),
    # the experts' activation output, 2 bytes x top_k f_e a token, split by tp
    ("moe_act", True, 2.0 * TOP_K * F_E * S * B / TP),
    ("moe_act", False, 0.0),
    # a dense layer's MLP: the gated first GEMM's output (2 f) and the second's input (f)
    ("mlp", False, 2.0 * 3 * FFN * S * B / TP),
    ("mlp", True, 0.0),
    ("shared_experts", True, 2.0 * 3 * SHARED * F_E * S * B / TP),
    ("moe", True, 2.0 * 3 * (TOP_K + SHARED) * F_E * S * B / TP),
    # moe holds moe_act and shared_experts: they add nothing beside it
    ("moe,moe_act,shared_experts", True, 2.0 * 3 * (TOP_K + SHARED) * F_E * S * B / TP),
    ("moe_act,shared_experts", True,
     2.0 * (TOP_K + 3 * SHARED) * F_E * S * B / TP),
])
def test_each_module_owns_the_bytes_it_does_not_keep(names, moe, saved):
    assert _saved(MOE, names, moe) == pytest.approx(saved, rel=1e-12)


def test_mla_up_projection_drops_the_per_head_q_k_v_and_fp8_halves_the_gemm_inputs():
    m = MLA
    q, v = m.qk_head_dim + m.qk_rope_head_dim, m.v_head_dim
    s = m.seq_len
    assert _saved(m, "mla_up_proj", True) == pytest.approx(
        float(2.0 * m.heads * (2 * q + v) * s * B / TP), rel=1e-12)
    fp8 = plan_lib.recipe("fp8")  # the linear layers' inputs kept in 8 bits
    assert _saved(MOE, "moe_act", True, precision=fp8) == pytest.approx(
        TOP_K * F_E * S * B / TP, rel=1e-12)
    # sequence parallelism splits the norms' outputs too
    assert _saved(MOE, "layernorm", False, sp=True) == pytest.approx(4.0 * H * S * B / TP)


def test_default_selective_is_the_attention_core_and_on_mla_deepseeks_projections():
    """No module named: the attention core's bytes (and on MLA the up-projected
    Q, K, V and the norms' outputs, DeepSeek-V3 section 3.2.3), its time and
    FLOPs the attention core's, as before the modules."""
    for moe in (False, True):
        assert _bytes(MOE, "selective", moe) == _bytes(MOE, SelectiveRecompute("core_attn"), moe)
        assert _bytes(MLA, "selective", moe) == pytest.approx(_bytes(
            MLA, SelectiveRecompute("core_attn,mla_up_proj,layernorm"), moe), rel=1e-12)
    default, core = SelectiveRecompute(), SelectiveRecompute("core_attn")
    assert (default.attention_forwards, core.attention_forwards) == (2.0, 2.0)
    assert SelectiveRecompute("mlp").attention_forwards == 1.0
    assert float(default.extra_flops_per_token(MOE)) == float(core.extra_flops_per_token(MOE))
    assert default.extra_forward_s(10.0, 2.0) == 2.0
    assert core.extra_forward_s(10.0, 2.0, {"attention_core": 2.0}) == 2.0


@pytest.mark.parametrize(("names", "flops"), [
    ("mlp", 2 * 2.0 * 3 * H * FFN),  # 2 dense layers, a gated MLP's 3 h f weights
    ("shared_experts", 6 * 2.0 * SHARED * 3 * H * F_E),
    ("moe", 6 * 2.0 * (TOP_K + SHARED) * 3 * H * F_E),
    ("moe_act", 0.0), ("layernorm", 0.0),  # memory-bound: no FLOPs in the model's count
    ("core_attn", 8 * 2.0 * S * H * 2),  # Q K^T and A V over the whole s x s matrix
])
def test_each_module_owns_the_flops_backward_adds(names, flops):
    extra = float(MOE.hardware_flops_per_token(SelectiveRecompute(names))
                  - MOE.model_flops_per_token())
    assert extra == pytest.approx(flops, rel=1e-9)


def test_mla_up_projection_flops_are_the_two_up_projections():
    m = MLA
    q, v = m.qk_head_dim + m.qk_rope_head_dim, m.v_head_dim
    up = 2.0 * (m.q_lora_rank * m.heads * q + m.kv_lora_rank * m.heads * (m.qk_head_dim + v))
    extra = m.hardware_flops_per_token(SelectiveRecompute("mla_up_proj")) \
        - m.model_flops_per_token()
    assert float(extra) == pytest.approx(float(m.blocks * up), rel=1e-9)


def test_the_moe_module_runs_the_exchanges_again():
    assert SelectiveRecompute("moe").moe_forwards == 2.0
    assert SelectiveRecompute("moe_act,shared_experts").moe_forwards == 1.0
    assert strategies.recompute("full").moe_forwards == 2.0
    assert SelectiveRecompute("moe,moe_act").reruns() == (
        "router", "permute", "routed_experts", "expert_activation", "shared_experts")


def test_module_classes_are_final_and_named_as_megatron_names_them():
    assert strategies.RECOMPUTE_MODULES == ("core_attn", "mla_up_proj", "layernorm", "moe_act",
                                            "mlp", "shared_experts", "moe")
    for cls in strategies.RECOMPUTE_MODULE_CLASSES:
        assert not cls.__subclasses__()
        assert cls.layers in strategies.LAYER_KINDS
        assert set(cls.reruns) <= set(strategies.RERUN_PARTS)


def test_an_unknown_module_is_one_line_naming_the_key_and_value():
    with pytest.raises(ValueError) as e:
        plan_lib.Plan(recompute="selective", recompute_modules="mla_up_proj,up_proj")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("training.recompute_modules='mla_up_proj,up_proj': "
                                   "'up_proj' is not one of core_attn,")
    # one spelling a set, in Megatron-Core's order, from a list too
    p = plan_lib.Plan(recompute="selective", recompute_modules=["mlp", "moe_act"])
    assert (p.recompute_modules, p.recompute) == ("moe_act,mlp", SelectiveRecompute("moe_act,mlp"))


@pytest.mark.parametrize(("model", "recompute", "names", "message"), [
    (MOE, "none", "mlp", "training.recompute_modules='mlp' needs training.recompute="
     "'selective' (got 'none')"),
    (MOE, "full", "mlp", "training.recompute_modules='mlp' needs training.recompute="
     "'selective' (got 'full')"),
    (MOE, "selective", "mla_up_proj", "training.recompute_modules='mla_up_proj': mla_up_proj "
     "needs model.attention='mla' (got 'mha')"),
])
def test_modules_outside_selective_or_mla_are_refused(model, recompute, names, message):
    p = plan_lib.Plan(recompute=recompute, recompute_modules=names, dp=8.0, ep=8.0)
    with pytest.raises(ValueError, match="^" + __import__("re").escape(message) + "$"):
        plan_lib.validate(p, model, 8.0)


def _megatron(*extra):
    from codesign.importers import megatron

    args = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8",
            "--seq-length", "512", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--num-experts", "8", "--moe-router-topk", "2", "--expert-model-parallel-size", "8",
            "--moe-ffn-hidden-size", "128", "--ffn-hidden-size", "512", "--bf16", *extra]
    return megatron(args, "flags")


def test_megatron_flags_map_to_the_key_under_selective_only():
    got = _megatron("--recompute-granularity", "selective", "--recompute-modules", "moe_act",
                    "layernorm", "gdn_norm_out")
    assert got.tables["training"]["recompute_modules"] == "layernorm,moe_act"
    assert any(i.startswith("--recompute-modules=") and "gdn_norm_out" in i
               for i in got.ignored)
    full = _megatron("--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1", "--recompute-modules", "mlp")
    assert "recompute_modules" not in full.tables["training"]
    assert any(i.startswith("--recompute-modules=mlp (") for i in full.ignored)
    with pytest.raises(ValueError) as e:
        _megatron("--recompute-granularity", "selective", "--recompute-modules", "attn")
    assert "--recompute-modules" in str(e.value) and "attn" in str(e.value)
    assert "\n" not in str(e.value)


def test_bridge_recipe_modules_are_read():
    g = megatron_bridge_words(["perf_recipes.gpt_oss_120b_pretrain_64gpu_h100_bf16_config"])
    assert (g.tables["training"]["recompute"], g.tables["training"]["recompute_modules"]) == \
        ("selective", "layernorm,moe_act")
    assert not any(i.startswith("model.recompute_modules") for i in g.ignored)

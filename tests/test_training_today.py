"""Compute and memory as large models are trained today: fused attention, MLA,
precision recipes, overheads, and the honesty table (`codesign validate`)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import output_checks, presets, validate
from codesign import scenario as sc
from codesign.cli import main
from codesign.model import compute, hardware, memory, params, plan, stacks, stage, step, workload


def _out(scn):
    return step.outputs(step.estimate(scn))


def test_flash_attention_memory_has_no_s_squared_term():
    m = workload.model("llama3-405b")
    long = workload.Transformer(126, 16384, 128, 16 * 8192, 128256, kv_heads=8,
                                ffn_hidden=53248, gated=True)
    for recompute in ("none", "selective"):
        short_b = m.activation_bytes_per_layer(1.0, 8.0, True, recompute, False, 1.0)
        long_b = long.activation_bytes_per_layer(1.0, 8.0, True, recompute, False, 16.0)
        # same tokens per GPU (8192): identical bytes, whatever the sequence
        assert float(long_b) == pytest.approx(float(short_b), rel=1e-12)
    naive = workload.Transformer(126, 16384, 128, 8192, 128256, kv_heads=8, ffn_hidden=53248,
                                 gated=True, attention_kernel="naive")
    n1 = float(naive.activation_bytes_per_layer(1.0, 8.0, True, "none", False))
    f1 = float(m.activation_bytes_per_layer(1.0, 8.0, True, "none", False))
    # the naive kernel stores the softmax output: 2 a s^2 b / tp bytes more
    assert n1 - f1 == pytest.approx(2 * 128 * 8192**2 / 8 - 4 * 128 * 8192 / 8, rel=1e-12)


def test_long_context_plans_are_costed_without_s_squared():
    base = sc.load("llama3-405b", ["training.recompute='none'"])
    longctx = sc.load("llama3-405b", ["training.recompute='none'", "parallel.cp=16",
                                      "model.seq_len=131072", "training.global_batch=128"])
    a, b = _out(base), _out(longctx)
    gib = 2**30
    # 8,192 tokens per GPU in both: activations equal, tens of GiB, not TiB
    assert float(b["memory_activations_bytes"]) == pytest.approx(
        float(a["memory_activations_bytes"]), rel=0.01)
    assert float(b["memory_bytes_per_gpu"]) < 200 * gib
    assert 0.3 < float(b["mfu"]) < 1.0 and 0.3 < float(a["mfu"]) < 1.0


def test_causal_kernel_executes_half_the_scores():
    m = workload.model("llama3-8b")
    pl = plan.Plan(dp=1, micro_batch=1, global_batch=1)
    h100 = presets.system("dgx-h100")
    fwd, bwd = compute.attention_time_s(m, pl, h100)
    flops = 8192 * float(m.attention_score_flops_per_token()) * 0.5
    expected = flops / (989e12 * hardware.HOPPER_ATTENTION_EFFICIENCY)
    overhead = float(h100.chip.kernel_overhead_s)
    assert float(fwd) == pytest.approx(expected + overhead, rel=1e-9)
    assert float(bwd) == pytest.approx(2.5 * expected + overhead, rel=1e-9)


def test_mla_shapes_of_deepseek_v3():
    m = workload.model("deepseek-v3")
    assert float(m.params()) == pytest.approx(671e9, rel=0.01)  # report: 671B
    assert float(m.active_params_per_token()) == pytest.approx(37e9, rel=0.02)  # 37B active
    # per-head Q.K over 128 + 64 and A.V over 128, against MHA's 4 s h
    ratio = float(m.attention_score_flops_per_token()) / (4 * 4096 * 7168)
    assert ratio == pytest.approx(128 * (192 + 128) / (2 * 7168), rel=1e-12)
    assert 2.5 < ratio < 3.0  # "attention FLOPs about 3x low" under the MHA approximation
    # q down 7168x1536, q up 1536x(128x192), kv down 7168x576, kv up 512x(128x256), out
    per_layer = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert float(m.attention_params()) == per_layer


def test_fp8_quantisation_is_transformer_engines_inventory(monkeypatch):
    """An fp8 dense layer (MHA, GeLU, tp 2) quantises as Transformer Engine does,
    by hand: forward, a 4 B cast-transpose of the output projection's input and
    a 2 B transpose of the three inputs a norm or the activation writes in fp8
    (QKV, FC1, FC2); backward, a 4 B cast-transpose of the output gradients of
    QKV, the output projection and FC2 (FC1's is the activation's backward's).
    One kernel per cast; nothing in bf16."""
    scn = sc.load("default", ["training.dtype='fp8'", "parallel.tp=2", "model.gated=false",
                              "system.preset='dgx-h100'"])
    m, p, s = scn.model, scn.plan, scn.system
    sh = stage.shape(m, p)
    fwd, bwd = (float(x) for x in compute._layers_s(m, p, s, sh))
    monkeypatch.setattr(plan.Precision, "quantisation",
                        lambda self, recipe, producer=False: (0.0, 0.0))
    fwd0, bwd0 = (float(x) for x in compute._layers_s(m, p, s, sh))
    tokens, h, f, tp = 2048.0, float(m.hidden), float(m.ffn_hidden), 2.0
    layers = float(sh.layers_on_stage)
    bandwidth = float(s.chip.hbm_Bps * s.chip.hbm_efficiency)
    overhead = float(s.chip.kernel_overhead_s)
    forward_bytes = tokens * (4.0 * h / tp + 2.0 * (h + h + f / tp))
    backward_bytes = tokens * 4.0 * (3.0 * h / tp + h + h)
    assert fwd - fwd0 == pytest.approx(layers * (forward_bytes / bandwidth + 4 * overhead),
                                       rel=1e-5)
    assert bwd - bwd0 == pytest.approx(layers * (backward_bytes / bandwidth + 3 * overhead),
                                       rel=1e-5)
    bf16 = sc.load("default", ["parallel.tp=2", "model.gated=false"])
    assert bf16.plan.precision.gemm_cast_bytes == bf16.plan.precision.gemm_transpose_bytes == 0


def test_fp8_recipe_keeps_attention_and_logits_in_bf16():
    bf16 = _out(sc.load("llama3-405b"))
    fp8 = _out(sc.load("llama3-405b", ["training.dtype='fp8'"]))
    speedup = float(bf16["step_time_s"]) / float(fp8["step_time_s"])
    assert 1.2 <= speedup <= 1.45  # issue 22's bound; not the 1.65x of everything at the fp8 peak
    # MFU stays against the 16-bit peak; against the GEMMs' (fp8) peak it is half of it
    # on H100, and a bf16 recipe's GEMM peak is the 16-bit one
    assert float(fp8["mfu_gemm_peak"]) == pytest.approx(float(fp8["mfu"]) * 989 / 1979)
    assert float(fp8["hfu_gemm_peak"]) == pytest.approx(float(fp8["hfu"]) * 989 / 1979)
    assert float(bf16["mfu_gemm_peak"]) == pytest.approx(float(bf16["mfu"]))


NEMO_LLAMA3_8B_FP8 = """
[model]
preset = "llama3-8b"
[training]
dtype = "fp8"
global_batch = 128
micro_batch = 1
[parallel]
cp = 2
zero = 1
[system]
preset = "dgx-h100"
gpus = 8
# above the GEMM burst ceiling (0.859) and at FlashAttention-3's forward: a
# faster stack than any measured, whose 16-bit HFU passes 1
matmul_efficiency = 0.95
attention_efficiency = 0.75
"""


def test_an_fp8_estimate_above_the_16_bit_peak_is_an_answer(capsys, tmp_path):
    """NeMo 24.07's Llama 3 8B FP8 plan on 8 H100s (cp 2) at GEMM and attention
    efficiencies above the measured ones: its 16-bit HFU exceeds 1, which an fp8
    recipe may; against the fp8 peak it is below 1: exit 0."""
    path = tmp_path / "nemo-llama3-8b.toml"
    path.write_text(NEMO_LLAMA3_8B_FP8)
    assert main(["estimate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hfu"] > 1.0 > out["hfu_gemm_peak"]
    assert out["hfu_gemm_peak"] == pytest.approx(out["hfu"] * 989 / 1979)


def test_utilisation_above_the_precisions_own_peak_is_the_models_fault(capsys, monkeypatch):
    """An HFU above 1 against the GEMMs' own peak is impossible output: exit 1
    with one line that says so (not exit 2, which blames the input)."""
    est = _out(sc.load("llama3-405b"))
    output_checks.check_outputs({**est, "hfu": jnp.asarray(1.3)})  # 16-bit HFU: not checked
    with pytest.raises(output_checks.OutputOutOfRange, match="hfu_gemm_peak=1.2 exceeds 1"):
        output_checks.check_outputs({**est, "hfu_gemm_peak": jnp.asarray(1.2)})
    with pytest.raises(output_checks.OutputOutOfRange, match="goodput=1.01 exceeds 1"):
        output_checks.check_outputs({**est, "goodput": jnp.asarray(1.01)})
    real = step.outputs
    monkeypatch.setattr(step, "outputs", lambda e: {**real(e), "mfu_gemm_peak": 1.5 + 0 * real(
        e)["mfu"]})
    from codesign.cli import estimate as cli_estimate
    monkeypatch.setattr(cli_estimate, "estimate_program", jax.jit(lambda scn: (
        step.estimate(scn), step.outputs(step.estimate(scn)))))
    assert main(["estimate"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "mfu_gemm_peak=1.5 exceeds 1" in err and "bug" in err


def test_recipe_widths_reach_the_wire_and_memory():
    fp16 = sc.load(None)  # Megatron 2021: fp16 gradients
    bf16 = sc.load(None, ["training.dtype='bf16'"])  # fp32 reduction
    dp = {name: [r for r in step.estimate(s).step.traffic if r.dimension == "dp"][0]
          for name, s in (("fp16", fp16), ("bf16", bf16))}
    moved = {k: float(r.message_bytes * r.count_per_step) for k, r in dp.items()}
    assert moved["bf16"] == pytest.approx(2 * moved["fp16"], rel=1e-3)  # fixed-size buckets
    m16, m32 = memory.memory(fp16.model, fp16.plan, fp16.system), memory.memory(
        bf16.model, bf16.plan, bf16.system)
    assert float(m32.gradients_bytes) == pytest.approx(2 * float(m16.gradients_bytes))
    with pytest.raises(ValueError, match="training.ep_dispatch_dtype='fp4'"):
        plan.recipe("fp8", ep_dispatch="fp4")


def test_fp8_dispatches_forward_and_backward_both_combines_bf16():
    """DeepSeek-V3's recipe: the dispatch in FP8 both ways (forward activations,
    backward the gradient before the down-projections), the combines in BF16:
    the all-to-all moves 1.5 B per element on average, 2 B in bf16."""
    def ep_bytes(scn):
        r = next(r for r in step.estimate(scn).step.traffic if r.dimension == "ep")
        return float(r.message_bytes)

    fp8, bf16 = sc.load("deepseek-v3"), sc.load("deepseek-v3", ["training.dtype='bf16'"])
    m, p = fp8.model, fp8.plan
    elements = float(p.micro_batch * m.seq_len / p.cp / p.tp * m.top_k * m.hidden)
    assert ep_bytes(fp8) == pytest.approx(1.5 * elements, rel=1e-12)
    assert ep_bytes(bf16) == pytest.approx(2.0 * elements, rel=1e-12)


def test_optimizer_step_streams_the_local_shard():
    scn = sc.load("llama3-405b")
    dense, routed = params.local_params(scn.model, scn.plan, sharded=True)  # ZeRO-1
    chip = scn.system.chip
    expected = float(dense + routed) * 30.0 / float(chip.hbm_Bps * chip.hbm_efficiency)
    got = float(compute.optimizer_time_s(scn.model, scn.plan, scn.system))
    assert got == pytest.approx(expected + float(chip.kernel_overhead_s), rel=1e-9)


def test_memory_breakdown_sums_to_the_total():
    for name in sc.BUILTIN:
        out = _out(sc.load(name))
        parts = sum(float(out[f"memory_{k}_bytes"]) for k in
                    ("weights", "gradients", "optimizer", "activations", "reserve"))
        assert parts == pytest.approx(float(out["memory_bytes_per_gpu"]), rel=1e-12)


def test_small_models_pay_fixed_overheads():
    tables = {"model": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 1024,
                        "vocab": 32000},
              "training": {"global_batch": 8, "micro_batch": 8},
              "system": {"preset": "dgx-h100", "gpus": 1}}
    with_overhead = _out(sc.from_tables(tables))
    without = _out(sc.from_tables(tables, ["system.kernel_overhead_s=0"]))
    assert float(with_overhead["mfu"]) < float(without["mfu"]) < 0.2


def test_overlapped_communication_costs_compute():
    scn = sc.load(None)
    hidden = sum(float(r.time_s - r.exposed_s) for r in step.estimate(scn).step.traffic)
    assert hidden > 0
    none = step.estimate(sc.load(None, ["parallel.comm_sm_fraction=0"])).step
    some = step.estimate(scn).step
    assert float(some.compute_s - none.compute_s) == pytest.approx(
        stacks.NCCL_SM_FRACTION * hidden, rel=1e-6)


def test_the_stack_sets_its_knobs_and_owns_its_mechanisms():
    """`training.stack`: its defaults of the launch, SM and grouped-GEMM knobs (a
    scenario's own value wins); PyTorch's async TP on copy engines costs no SMs
    where Megatron-Core's userbuffers overlap costs its hidden seconds x the SM
    fraction; torchao's fp8 inputs cast from the wide tensors cost more HBM
    passes than Transformer Engine's fused producers; XLA launches nothing."""
    for s in stacks.STACK_CLASSES:
        p = sc.load(None, [f"training.stack={s.name}"]).plan
        assert (float(p.host_launch_s), float(p.comm_sm_fraction),
                float(p.grouped_gemm_streams)) == pytest.approx(
            (s.host_launch_s, s.comm_sm_fraction, s.grouped_gemm_streams))
    own = sc.load(None, ["training.stack=xla", "parallel.comm_sm_fraction=0.3"]).plan
    assert float(own.comm_sm_fraction) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="training.stack='jax' is not one of megatron"):
        sc.load(None, ["training.stack=jax"])

    tp = ["parallel.tp=8", "parallel.tp_overlap=1", "parallel.sequence_parallel=true",
          "training.dtype=fp8"]
    te = step.estimate(sc.load(None, [*tp, "training.stack=megatron"])).step
    torch = step.estimate(sc.load(None, [*tp, "training.stack=pytorch"])).step
    hidden_tp = sum(float(r.time_s - r.exposed_s) for r in te.traffic if r.dimension == "tp")
    assert hidden_tp > 0
    # compute = the micro-batches' + the SM fraction x the hidden seconds on SMs
    for st, free in ((te, ()), (torch, ("tp",))):
        hidden = sum(float(r.time_s - r.exposed_s) for r in st.traffic if r.dimension not in free)
        m = float(st.timing.overlap_s / st.timing.micro_batch_s)  # micro-batches a step
        assert float(st.compute_s) == pytest.approx(
            m * float(st.timing.micro_batch_s) + stacks.NCCL_SM_FRACTION * hidden, rel=1e-6)
    # torchao casts each fp8 input from the wide tensor: more HBM passes
    assert float(torch.timing.forward_s) > float(te.timing.forward_s)


def test_moe_imbalance_slows_the_experts():
    fast = _out(sc.load("deepseek-v3", ["training.moe_imbalance=1"]))
    slow = _out(sc.load("deepseek-v3", ["training.moe_imbalance=1.5"]))
    assert float(slow["step_time_s"]) > float(fast["step_time_s"])


def test_new_knobs_have_finite_gradients_and_vmap_without_recompiling():
    scn = sc.load("deepseek-v3", ["parallel.schedule='1f1b'"])
    knobs = ("system.attention_efficiency", "system.hbm_efficiency", "system.kernel_overhead_s",
             "training.moe_imbalance", "parallel.comm_sm_fraction", "system.matmul_efficiency")
    x0 = jnp.array([float(sc.get_knob(scn, k)) for k in knobs])
    traces = []

    def f(x):
        traces.append(1)
        return step.estimate(sc.set_knobs(scn, dict(zip(knobs, x, strict=True)))).step.step_time_s

    g = jax.jit(jax.vmap(jax.grad(f)))
    grads = np.asarray(g(jnp.stack([x0, x0 * 1.05])))
    grads2 = np.asarray(g(jnp.stack([x0 * 1.02, x0 * 1.03])))
    assert len(traces) == 1
    assert np.all(np.isfinite(grads)) and np.all(np.isfinite(grads2))
    signs = dict(zip(knobs, grads[0], strict=True))
    assert signs["system.matmul_efficiency"] < 0 and signs["system.attention_efficiency"] < 0
    assert signs["system.kernel_overhead_s"] > 0 and signs["training.moe_imbalance"] > 0


def test_validate_lists_published_figures(validate_rows):
    rows = validate_rows
    predictions = [r for r in rows if not r["calibration"]]
    assert len(predictions) >= 15
    assert all(r["source"] and r["measure"] in validate.MEASURES for r in rows)
    for r in rows:  # calibration rows reproduce their figure by construction (the NUMA
        # factor's two rows their ratio: tests/test_validate_moe_software.py)
        if r["calibration"] and r["name"] not in validate.NUMA_FIT_ROWS:
            # the four fitted jointly, each within the fit's spread
            bound = 0.05 if r["name"] in validate.H100_GEMM_ROWS else 0.02
            assert abs(r["error"]) < bound, r["name"]
    assert all(np.isfinite(r["predicted"]) for r in rows)
    # the seeds' calibration points still hold
    by_name = {r["name"]: r for r in rows}
    assert by_name["Megatron-LM 8.3B on 512 V100 (tp 8, dp 64)"]["predicted"] == pytest.approx(
        15.1, rel=0.05)


def test_validate_holds_every_public_run_with_its_source_and_assumptions(validate_rows):
    """The 27 runs of the 2023-2025 stacks: 10 NeMo 24.07 FP8 rows, 6 NeMo
    long-sequence rows, 10 llm-foundry MPT rows and the Megatron-Core Mixtral
    row, each naming its repository and the commit it was read at, with its
    assumptions in the note; the summary counts them per chip family and measure."""
    rows = validate_rows
    assert len(rows) >= 50
    sets = {"NeMo 24.07 ": 10, "NeMo Llama 2 7B FP8 seq ": 6, "llm-foundry MPT-": 10,
            "Megatron-Core 0.8 Mixtral": 1}
    for prefix, n in sets.items():
        mine = [r for r in rows if r["name"].startswith(prefix)]
        assert len(mine) == n, prefix
        assert all(" at " in r["source"] and r["note"] for r in mine), prefix
        assert [r["name"] for r in mine if r["calibration"]] == [
            n for n in validate.H100_GEMM_ROWS if n.startswith(prefix)], prefix
    by_name = {r["name"]: r for r in rows}
    assert by_name["NeMo 24.07 LLAMA3-8B FP8 on 8 H100 (tp 1, pp 1, cp 2, vp 1)"][
        "published"] == 12273
    assert by_name["llm-foundry MPT-70b seq 2048 on 64 a100_80gb (FULL_SHARD, AC True)"][
        "family"] == "A100"
    s = validate.summary(rows)
    assert s["refused"] == sum(bool(r["refused"]) for r in rows) == 0  # no row refused
    assert sum(v["predictions"] for v in s["by_family"].values()) == s["predictions"]
    collectives = sum(v["predictions"] for k, v in s["by_measure"].items()
                      if k in validate.COLLECTIVE_MEASURES)
    assert sum(v["predictions"] for v in s["by_measure"].values()) == \
        s["predictions"] + collectives
    assert s["by_family"]["H100"]["predictions"] + len(validate.H100_GEMM_ROWS) >= 28
    h100 = sorted(abs(r["error"]) for r in rows
                  if r["family"] == "H100" and not r["calibration"])
    assert s["by_family"]["H100"]["max_abs_error"] == pytest.approx(h100[-1])


def test_h100_sustained_gemm_efficiency_is_the_fit_on_a_third_of_its_rows_at_most(
        validate_rows):
    """`H100_MATMUL_EFFICIENCY` is `validate.fit_matmul_efficiency` on
    `H100_GEMM_ROWS` (mean log error 0 there, changing sign either side of the
    stored 4 digits), fitted on at most a third of the H100 rows, and below the
    8192^3 microbenchmark's burst ceiling."""
    h100 = [r for r in validate_rows if r["family"] == "H100"]
    h100 = [r for r in h100 if r["measure"] != "busbw_GBps"]  # end-to-end runs only
    fitted = [r for r in h100 if r["calibration"]]
    assert [r["name"] for r in fitted] == list(validate.H100_GEMM_ROWS)
    assert 3 * len(fitted) <= len(h100)
    logs = [np.log(1.0 + r["error"]) for r in fitted]
    assert abs(np.mean(logs)) < 5e-4
    checks = [c for c in validate.CHECKS if c.name in validate.H100_GEMM_ROWS]
    e = hardware.H100_MATMUL_EFFICIENCY
    assert validate.mean_log_error(checks, e - 0.002) < 0 < validate.mean_log_error(
        checks, e + 0.002)
    assert e < hardware.H100_GEMM_MICROBENCHMARK_EFFICIENCY


def _before_2025(rows):
    """The rows of the sets issue 22 bounded: all but Megatron-Bridge 25.11's,
    torchtitan's and MaxText's (added by issues 44 and 45) and the 2026 MoE
    software's (`validate.SETS`, issue 54)."""
    later = (validate.TORCHTITAN_SOURCE, validate.MAXTEXT_SOURCE, *validate.SETS.values())
    return [r for r in rows if r["source"] not in later]


def test_h100_predictions_within_the_issue_bounds(validate_rows):
    """On H100 predictions of the sets before 2025: median |error| <= 7%, max
    <= 20%; the MPT-70B FSDP H100/A100 throughput ratio near the published 2.5x
    (not the 3.15x of the datasheets)."""
    s = validate.summary(_before_2025(validate_rows))
    assert s["by_family"]["H100"]["median_abs_error"] <= 0.07
    assert s["by_family"]["H100"]["max_abs_error"] <= 0.20
    by_name = {r["name"]: r for r in validate_rows}
    h100 = by_name["llm-foundry MPT-70b seq 2048 on 128 h100_80gb (FULL_SHARD, AC True)"]
    a100 = by_name["llm-foundry MPT-70b seq 2048 on 64 a100_80gb (FULL_SHARD, AC True)"]
    published = h100["published"] / a100["published"]
    assert h100["predicted"] / a100["predicted"] == pytest.approx(published, rel=0.10)


def test_overall_median_within_the_issue_bound(validate_rows):
    """On all predictions of the sets before 2025: median |error| <= 7%."""
    assert validate.summary(_before_2025(validate_rows))["median_abs_error"] <= 0.07


@pytest.mark.xfail(strict=True, reason=(
    "the issue's bound, unmet: MT-NLG 530B on 3,360 A100s is 21.8% pessimistic "
    "(Megatron-DeepSpeed ran the shape Megatron-LM ran 20% faster; no mechanism found)"))
def test_overall_max_within_the_issue_bound(validate_rows):
    """On all predictions of the sets before 2025: max |error| <= 20%."""
    assert validate.summary(_before_2025(validate_rows))["max_abs_error"] <= 0.20


def test_megatron_bridge_rows_hold_the_2025_models_as_they_ran(validate_rows):
    """Megatron-Bridge 25.11's 14 rows (8 GB200, 6 H100), none refused, each
    with its source and the set's assumptions; the head widths and windows as
    released (Qwen3's 128-wide heads, GPT-OSS's 64-wide heads and its 128-token
    window on every other layer)."""
    rows = [r for r in validate_rows if r["source"] == validate.BRIDGE_SOURCE]
    assert len(rows) == 14
    assert sorted({r["family"] for r in rows}) == ["GB200", "H100"]
    assert all(not r["refused"] and np.isfinite(r["predicted"]) for r in rows)
    tables = {c.name: c.tables for c in validate.CHECKS if c.source == validate.BRIDGE_SOURCE}
    qwen = sc.from_tables(next(t for n, t in tables.items() if "Qwen3-30B" in n)).model
    assert float(qwen.head_width) == 128.0 and float(qwen.params()) == pytest.approx(30.5e9,
                                                                                      rel=0.01)
    oss = sc.from_tables(next(t for n, t in tables.items() if "GPT-OSS" in n)).model
    assert (float(oss.head_width), float(oss.window_layers), float(oss.window)) == (64, 18, 128)


def test_torchtitan_rows_are_predictions_of_a_stack_nobody_fitted(validate_rows):
    """torchtitan's 9 H100 rows (FSDP2, async TP, PP, CP; BF16 and Float8) are
    predictions: none calibrates, none is refused, each says the set's
    assumptions (the 500 W, 96 GB part as the 80 GB preset with 96 GB)."""
    rows = [r for r in validate_rows if r["source"] == validate.TORCHTITAN_SOURCE]
    assert len(rows) == 9 and {r["family"] for r in rows} == {"H100"}
    assert not any(r["calibration"] or r["refused"] for r in rows)
    assert all("500 W" in r["note"] and np.isfinite(r["predicted"]) for r in rows)
    float8 = {r["name"]: r for r in rows if "Float8 seq 8192 on 8 H100" in r["name"]
              or "BF16 seq 8192 on 8 H100" in r["name"]}
    bf16, fp8 = (next(r for n, r in float8.items() if k in n) for k in ("BF16", "Float8"))
    assert fp8["predicted"] > bf16["predicted"] and fp8["published"] > bf16["published"]


def test_maxtext_rows_put_tpus_in_the_table(validate_rows):
    """MaxText's 5 rows on TPU v5p slices and the v5e pod are predictions of the
    TPU family (none refused), their shapes with 256-wide heads; the v5e and v6e
    presets carry Google's chip and ICI figures, each pod a 16 x 16 2D torus."""
    rows = [r for r in validate_rows if r["source"] == validate.MAXTEXT_SOURCE]
    assert len(rows) == 5 and {r["family"] for r in rows} == {"tpu"}
    assert not any(r["calibration"] or r["refused"] for r in rows)
    assert all(r["measure"] == "mfu_causal" and 0 < r["predicted"] < 1 for r in rows)
    tables = next(c.tables for c in validate.CHECKS if c.name.startswith("MaxText 32B"))
    model = sc.from_tables(tables).model
    assert float(model.head_width) == 256.0
    assert float(model.params()) == pytest.approx(32.55e9, rel=0.01)  # the source's count
    for name, bf16, hbm_Bps, link_Bps in (("tpu-v5e", 197e12, 819e9, 50e9),
                                          ("tpu-v6e", 918e12, 1638e9, 100e9)):
        preset = presets.preset(name)
        assert float(preset.system.chip.peak_flops_per_s) == bf16
        assert float(preset.system.chip.hbm_Bps) == hbm_Bps
        assert float(preset.system.scale_up.bandwidth_Bps) == 6 * link_Bps
        assert preset.system.topology.shape == (16, 16, 1)
        assert float(preset.system.gpus_per_node) == 8.0


def test_nemo_counts_model_flops_over_the_whole_attention_matrix():
    """NeMo 24.07's Llama 2 7B row (780 model TFLOP/s at 16,934 tokens/s per GPU)
    counts 46.1 GFLOP per token: the model's whole-matrix convention, not the
    causal half, which is what the long-sequence rows' TFLOPS are read as."""
    tables = next(c.tables for c in validate.CHECKS if c.name.startswith("NeMo 24.07 LLAMA2-7B"))
    model = sc.from_tables(tables).model
    per_token = 780e12 / 16934
    assert float(model.model_flops_per_token()) == pytest.approx(per_token, rel=0.002)
    assert float(model.model_flops_per_token(causal=True)) < 0.95 * per_token


def test_validate_cli_json_and_text(capsys, monkeypatch, validate_rows):
    monkeypatch.setattr(validate, "run", lambda: validate_rows)  # evaluated once, above
    assert main(["validate", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert set(rows[0]) >= {"name", "source", "measure", "family", "published", "predicted",
                            "error", "calibration", "fits_memory", "refused", "note"}
    s = validate.summary(rows)
    assert 0 <= s["median_abs_error"] <= s["max_abs_error"]
    assert main(["validate"]) == 0
    text = capsys.readouterr().out.splitlines()
    i = text.index("by chip family:")
    families = text[i + 1:text.index("by measure:")]
    assert [line.split()[0] for line in families] == sorted(s["by_family"])
    h100 = s["by_family"]["H100"]
    assert any(line.split()[:2] == ["H100", str(h100["predictions"])]
               and f"{h100['median_abs_error']:.1%}" in line for line in families)
    assert any("calibration" in line for line in text[1:7])  # the calibration rows say so


def test_cross_validation_refits_each_sets_constants_without_it(validate_rows):
    """`validate.cross_validate` on the A100 and V100 rows: Narayanan et al.'s
    table sets A100's matmul efficiency (its 1T row); without that set the
    efficiency is refitted on the other sets' A100 rows, where the model is
    then right on average, and the table's rows (the 1T row included) are
    predictions at it. Shoeybi et al.'s V100 rows are the only ones that fit
    V100's: they get no cross-validated value. Rows of sets that fit nothing
    keep their error."""
    checks = [c for c in validate.CHECKS if c.tables is not None
              and validate.family(c) in ("A100", "V100")]
    names = {c.name for c in checks}
    rows, notes = validate.cross_validate(checks, [r for r in validate_rows if r["name"] in names])
    narayanan = "Narayanan et al. 2021, Table 1"
    assert any(n.startswith("A100 matmul_efficiency: 0.796 -> ") and narayanan in n
               for n in notes)
    assert "V100 matmul_efficiency: only Shoeybi et al. 2019 fits it" in notes
    others = [c for c in checks if validate.family(c) == "A100" and c.source != narayanan]
    refit = validate.fit_matmul_efficiency(others, start=hardware.A100_MATMUL_EFFICIENCY)
    assert abs(validate.mean_log_error(others, refit)) < 1e-4
    for c, r in zip(checks, rows, strict=True):
        if c.source == narayanan:
            assert math.isfinite(r["cross_error"]) and r["cross_error"] != r["error"]
            assert f"{refit:.4g}" in r["cross_note"]
        elif c.source == "Shoeybi et al. 2019":
            assert math.isnan(r["cross_error"]) and "only its own set" in r["cross_note"]
        else:
            assert r["cross_error"] == r["error"] and r["cross_note"] == ""
    s = validate.cross_summary(rows)
    assert s["by_set"][narayanan]["cross_validated"]["predictions"] == 10  # the 1T row too
    assert s["by_set"][narayanan]["in_sample"]["predictions"] == 9


def test_public_multi_node_all_reduces_are_rows_of_their_own(validate_rows):
    """18 all-reduce times from public nccl-tests logs of 2-8 nodes (H100, and
    A100 on OCI) are predictions by measure, outside the training runs' overall
    and per-family statistics and the step-time intervals; the model is faster
    than or as fast as every log below 64 MiB (NCCL's multi-node latency is not
    all modelled)."""
    rows = [r for r in validate_rows if r["measure"] == "all_reduce_s"]
    assert len(rows) == 18 and not any(r["calibration"] or r["refused"] for r in rows)
    assert {r["family"] for r in rows} == {"H100", "A100"}
    assert all("issue 309" in r["source"] or "oci-hpc-oke" in r["source"] for r in rows)
    small = [r for r in rows if "KiB" in r["name"] or " 1 MiB" in r["name"]]
    # NCCL's tree at 8 KiB on 2 nodes as measured; 1 MiB still fast (its latency
    # across nodes not all modelled); everything below 64 MiB within 2x, but one
    # noisy 1 MiB point (gj-aion's 4 nodes, slower than its own 8 nodes)
    assert small and all(r["error"] < 0.01 for r in small)
    assert min(abs(r["error"]) for r in small) < 0.01
    assert sum(r["error"] > -0.5 for r in small) == len(small) - 1
    s = validate.summary(validate_rows)
    assert s["by_measure"]["all_reduce_s"]["predictions"] == 18
    runs = [r for r in validate_rows if r["measure"] not in validate.COLLECTIVE_MEASURES
            and not r["calibration"]]
    assert s["predictions"] == len(runs)
    table = validate.uncertainty(validate_rows)  # the DeepSeek-V3 log's plan once
    steps = validate.set_rows(validate_rows, "mcore_dsv3_gb200_steps")
    predicted_steps = [r for r in steps if not r["calibration"]]
    assert table["all"]["rows"] == len(runs) - len(predicted_steps) and len(steps) == 12

"""The fp8 recipes (`training.fp8_recipe`): per-tensor scaling (the default,
as fp8 was priced before), MXFP8 and NVFP4, each with its GEMM input bytes,
its peak and its quantisation passes (`plan.Fp8Recipe`)."""

import jax
import numpy as np
import pytest

from codesign import presets
from codesign import scenario as sc
from codesign.cli import main
from codesign.model import compute, plan, stage, step
from codesign.model.hardware import FP8_RELATIVE_EFFICIENCY


def test_bytes_per_element_are_the_formats_closed_forms():
    """Values plus their share of a block scale: MXFP8 E4M3 + one E8M0 per 32,
    NVFP4 E2M1 + one E4M3 per 16 (the per-tensor FP32 scale is negligible);
    quantising a bf16 input writes both usages (rowwise and columnwise)."""
    tw, mx, nv = plan.Tensorwise(), plan.MXFP8(), plan.NVFP4()
    assert tw.element_bytes == 1.0
    assert mx.element_bytes == 1.0 + 1.0 / 32.0
    assert nv.element_bytes == 0.5 + 1.0 / 16.0
    # cast-transpose: read bf16, write the copy and its transpose (today's 4 B)
    assert tw.cast_bytes(2.0) == 2.0 + 2.0 * 1.0 and tw.producer_bytes(2.0) == 2.0 * 1.0
    # MXFP8: both copies quantised from bf16; with a fused producer the columnwise
    # copy is quantised again from the bf16 tensor
    assert mx.cast_bytes(2.0) == 2.0 + 2.0 * (1.0 + 1.0 / 32.0)
    assert mx.producer_bytes(2.0) == 2.0 + 1.0 + 1.0 / 32.0
    # NVFP4: an amax read per copy (the columnwise one after the Hadamard transform)
    assert nv.cast_bytes(2.0) == 3.0 * 2.0 + 2.0 * (0.5 + 1.0 / 16.0)
    assert nv.producer_bytes(2.0) == 2.0 * 2.0 + 0.5 + 1.0 / 16.0
    assert (tw.kernels(), mx.kernels(), nv.kernels(), nv.kernels(producer=True)) == \
        (1.0, 1.0, 3.0, 2.0)


def test_the_default_is_todays_fp8():
    """The default recipe is per-tensor scaling and prices quantisation as
    `Precision.gemm_cast_bytes` / `gemm_transpose_bytes` (4 and 2 B on bf16
    activations); the built-in fp8 scenario's step is the same named or not."""
    base = sc.load("deepseek-v3")
    assert base.plan.precision.gemm == "fp8" and isinstance(base.plan.fp8_recipe, plan.Tensorwise)
    pr = base.plan.precision
    assert pr.quantisation(plan.Tensorwise()) == (pr.gemm_cast_bytes, 1.0) == (4.0, 1.0)
    assert pr.quantisation(plan.Tensorwise(), producer=True) == \
        (pr.gemm_transpose_bytes, 1.0) == (2.0, 1.0)
    named = sc.load("deepseek-v3", ["training.fp8_recipe='tensorwise'"])
    assert float(step.step(named.model, named.plan, named.system).step_time_s) == \
        float(step.step(base.model, base.plan, base.system).step_time_s)


def test_a_16_bit_run_ignores_the_recipe():
    """The recipe is read only where the GEMMs run in fp8: NVFP4 named on a bf16
    run on an H100 is neither refused nor priced."""
    scn = sc.load("default", ["training.fp8_recipe='nvfp4'", "parallel.tp=2"])
    assert scn.plan.precision.quantisation(scn.plan.fp8_recipe) == (0.0, 0.0)


def test_nvfp4_is_refused_without_an_fp4_peak(capsys):
    with pytest.raises(ValueError, match=r"^training\.fp8_recipe='nvfp4' needs a chip with an "
                                         r"FP4 peak"):
        sc.load("deepseek-v3", ["training.fp8_recipe='nvfp4'"])  # dgx-h100
    assert main(["estimate", "deepseek-v3", "--set", "training.fp8_recipe=nvfp4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.fp8_recipe" in err[0]


def test_the_fp4_peaks_are_the_presets_vendor_figures():
    """Blackwell (Ultra) carries its preset's FP4 figure; other chips none."""
    for name in ("dgx-b200", "gb200-nvl72", "dgx-b300", "gb300-nvl72"):
        p = presets.preset(name)
        assert float(p.system.chip.peak_fp4_flops_per_s) == \
            pytest.approx(p.other_peaks_flops_per_s["fp4"], rel=1e-7)
    assert float(presets.system("gb300-nvl72").chip.peak_fp4_flops_per_s) == \
        pytest.approx(15e15, rel=1e-7)
    for name in ("dgx-h100", "mi355x-platform"):
        assert float(presets.system(name).chip.peak_fp4_flops_per_s) == 0.0


def test_nvfp4_on_gb300_outruns_mxfp8_on_a_large_gemm():
    """An 8192^3 GEMM on GB300: the roofline of `compute.gemm_time_s` by hand,
    FP4's 15 PF against FP8's 5 PF and each recipe's input bytes."""
    system = presets.system("gb300-nvl72")
    chip = system.chip
    n = 8192.0
    bw = float(chip.hbm_Bps * chip.hbm_efficiency)
    eff = float(chip.matmul_efficiency) * FP8_RELATIVE_EFFICIENCY
    times = {}
    for recipe, peak in ((plan.MXFP8(), chip.peak_fp8_flops_per_s),
                         (plan.NVFP4(), chip.peak_fp4_flops_per_s)):
        got = float(compute.gemm_time_s(system, n, n, n, "fp8", 1.0, recipe))
        moved = recipe.element_bytes * 2 * n * n + 1.0 * n * n
        want = (2 * n ** 3 / float(peak * chip.clock_fraction) + moved / bw) / eff \
            + float(chip.kernel_overhead_s)
        assert got == pytest.approx(want, rel=1e-6)
        times[recipe.name] = got
    assert times["mxfp8"] / times["nvfp4"] > 2.5  # 3x the peak, less the fixed terms


def test_mxfp8_quantisation_of_a_dense_layer_by_hand():
    """MXFP8 against per-tensor fp8 on one dense layer (MHA, GeLU, tp 2, GB200):
    forward, the output projection's input cast both ways (+2/32 B) and QKV,
    FC1 and FC2's columnwise copies from bf16 (3 + 1/32 B against 2 B); backward,
    the output gradients of QKV, the output projection and FC2 (+2/32 B each);
    the GEMMs' inputs 1/32 B heavier. Kernel counts equal."""
    over = ["training.dtype='fp8'", "parallel.tp=2", "model.gated=false",
            "system.preset='gb200-nvl72'"]
    tw = sc.load("default", over)
    mx = sc.load("default", [*over, "training.fp8_recipe='mxfp8'"])
    m, s = tw.model, tw.system
    sh = stage.shape(m, tw.plan)
    f0, b0 = (float(x) for x in compute._layers_s(m, tw.plan, s, sh))
    f1, b1 = (float(x) for x in compute._layers_s(m, mx.plan, s, sh))
    tokens, h, f, tp = 2048.0, float(m.hidden), float(m.ffn_hidden), 2.0
    layers = float(sh.layers_on_stage)
    bw = float(s.chip.hbm_Bps * s.chip.hbm_efficiency)
    eff = float(s.chip.matmul_efficiency) * FP8_RELATIVE_EFFICIENCY
    extra_cast = tokens * (2.0 / 32.0 * h / tp + (1.0 + 1.0 / 32.0) * (h + h + f / tp))
    # the GEMMs' inputs (m x k and k x n), forward: QKV, out, FC1, FC2
    shapes = [(h, 3 * h / tp), (h / tp, h), (h, f / tp), (f / tp, h)]
    extra_gemm = sum(tokens * k + k * n for k, n in shapes) / 32.0 / bw / eff
    assert f1 - f0 == pytest.approx(layers * (extra_cast / bw + extra_gemm), rel=1e-5)
    extra_dy = tokens * 2.0 / 32.0 * (3.0 * h / tp + h + h)
    assert b1 - b0 == pytest.approx(layers * (extra_dy / bw + 2.0 * extra_gemm), rel=1e-5)


def test_recipes_are_final_types_of_an_abstract_base():
    for cls in plan.FP8_RECIPES:
        assert plan.fp8_recipe(cls.name) == cls()
    with pytest.raises(TypeError):
        plan.Fp8Recipe()
    with pytest.raises(ValueError, match=r"^training\.fp8_recipe='mx' is not one of "):
        plan.fp8_recipe("mx")


def test_nvfp4_gradients_are_finite_and_eager_equals_jit(step_time_value_and_grad):
    scn = sc.load("default", ["training.dtype='fp8'", "training.fp8_recipe='nvfp4'",
                              "system.preset='gb300-nvl72'"])
    knobs = {k: sc.get_knob(scn, k) for k in ("system.hbm_Bps", "training.micro_batch")}
    value, grads = step_time_value_and_grad(scn, knobs)
    eager = step.estimate(scn, check=False).step.step_time_s
    assert float(value) == pytest.approx(float(eager), rel=1e-12)
    assert all(np.isfinite(float(g)) for g in grads.values())
    key = "system.hbm_Bps"
    h = 1e-4 * float(knobs[key])
    at = [float(step.estimate(sc.set_knobs(scn, {key: knobs[key] + d}), check=False)
                .step.step_time_s) for d in (h, -h)]
    assert float(grads[key]) == pytest.approx((at[0] - at[1]) / (2 * h), rel=1e-4)
    assert float(grads[key]) < 0.0  # faster HBM, faster quantisation
    # the quantisation alone, jitted against eager
    system = scn.system
    args = (4096.0, 8192.0, 8192.0)
    jitted = jax.jit(lambda sy: compute.gemm_time_s(sy, *args, "fp8", 1.0, plan.NVFP4()))
    assert float(jitted(system)) == pytest.approx(
        float(compute.gemm_time_s(system, *args, "fp8", 1.0, plan.NVFP4())), rel=1e-12)


def test_the_fp4_peak_follows_a_16_bit_peak_given_alone():
    """As the 8- and 32-bit peaks do: in the preset's ratio (GB300: 6x)."""
    scn = sc.load("default", ["system.preset='gb300-nvl72'", "system.peak_flops_per_s=2e15"])
    assert float(scn.system.chip.peak_fp4_flops_per_s) == pytest.approx(6 * 2e15, rel=1e-6)

"""The AMD Instinct presets (MI300X, MI325X, MI355X platforms) against AMD's
published figures, and Blackwell Ultra (GB300) against Blackwell (GB200)
where the parts differ."""

import json
import math

import equinox as eqx
import jax
import pytest

from codesign import _amd_presets as amd
from codesign import presets, validate
from codesign import scenario as sc
from codesign.cli import main
from codesign.measured import H100_MATMUL_EFFICIENCY, HOPPER_ATTENTION_EFFICIENCY
from codesign.model import hardware as hw
from codesign.model import step, workload
from codesign.model.attention import FLASH_BACKWARD_OVER_FORWARD, FlashAttention

GB = 1e9
AMD = ("mi300x-platform", "mi325x-platform", "mi355x-platform")


def test_cdna_peaks_are_units_times_clock_times_rate_and_match_amds_datasheets():
    """AMD's dense peaks (TFLOP/s): MI300X / MI325X 1,307.4 BF16, 2,614.9 FP8,
    653.7 TF32 (304 CUs at 2.1 GHz); MI355X 2,516.6 BF16, 5,033.2 FP8, 10,066.3
    MXFP6 and MXFP4, 157.3 FP32 matrix (256 CUs at 2.4 GHz)."""
    for name in ("mi300x-platform", "mi325x-platform"):
        c = presets.system(name).chip
        assert float(c.peak_flops_per_s) == pytest.approx(304 * 2.1e9 * 2048) == \
            pytest.approx(1307.4e12, rel=1e-4)
        assert float(c.peak_fp8_flops_per_s) == pytest.approx(2614.9e12, rel=1e-4)
        assert float(c.peak_fp32_flops_per_s) == pytest.approx(653.7e12, rel=1e-4)
        assert float(c.compute_units) == 304
    p = presets.preset("mi355x-platform")
    c = p.system.chip
    assert float(c.peak_flops_per_s) == pytest.approx(256 * 2.4e9 * 4096) == \
        pytest.approx(2516.6e12, rel=1e-4)
    assert float(c.peak_fp8_flops_per_s) == pytest.approx(5033.2e12, rel=1e-4)
    assert float(c.peak_fp32_flops_per_s) == pytest.approx(157.3e12, rel=1e-3)
    assert float(c.compute_units) == 256
    assert p.other_peaks_flops_per_s == pytest.approx(
        {"mxfp6": 10066.3e12, "mxfp4": 10066.3e12}, rel=1e-4)
    assert presets.preset("mi300x-platform").other_peaks_flops_per_s == {}


@pytest.mark.parametrize("name, hbm_bytes, hbm_Bps, tdp_w, link_bidir_Bps", [
    ("mi300x-platform", 192e9, 5.3e12, 750.0, 128e9),
    ("mi325x-platform", 256e9, 6.0e12, 1000.0, 128e9),
    ("mi355x-platform", 288e9, 8.0e12, 1400.0, 153.6e9),
])
def test_amd_memory_power_and_the_infinity_fabric_mesh(name, hbm_bytes, hbm_Bps, tdp_w,
                                                       link_bidir_Bps):
    """HBM, board power, 8 GPUs a node each joined to the other 7 by one link
    (per GPU per direction: 7 x half the bidirectional link), AMD's ~48 of 64
    GB/s usable per link, one 400 Gb/s NIC per GPU, PCIe Gen5 x16 to the host."""
    p = presets.preset(name)
    s, c = p.system, p.system.chip
    assert (float(c.hbm_bytes), float(c.hbm_Bps), float(c.tdp_w)) == pytest.approx(
        (hbm_bytes, hbm_Bps, tdp_w), rel=1e-7)
    assert float(s.scale_up_domain) == float(s.gpus_per_node) == 8
    assert float(s.scale_up.bandwidth_Bps) == pytest.approx(7 * link_bidir_Bps / 2, rel=1e-9)
    assert float(s.scale_up.efficiency) == pytest.approx(48 / 64)
    assert float(s.scale_up.in_network_efficiency) == 0  # no switch: nothing reduces in it
    assert float(s.scale_out.bandwidth_Bps) == pytest.approx(400e9 / 8)
    assert float(s.scale_out.efficiency) == hw.NIC_EFFICIENCY
    assert float(c.host_Bps) == 64e9
    assert float(c.attention_efficiency) == pytest.approx(HOPPER_ATTENTION_EFFICIENCY)
    assert hw.chip_family(p.chip) == name.split("-")[0].upper()
    assert p.collective_library["protocols"] == ("LL", "Simple")  # RCCL's tuning model 5
    assert "assumption" in p.sources["matmul_efficiency"] + p.sources["attention_efficiency"]


def test_amd_matmul_efficiency_is_h100s_scaled_by_the_mamf_microbenchmark():
    """Stas Bekman's MAMF table (BF16): H100 SXM 794.5 of 989, MI300X 668.4 and
    MI325X 784.9 of 1,307.4 TFLOP/s. Sustained = H100's fitted 0.6492 x (MAMF
    share / H100's); MI355X borrows MI325X's. Below H100's, MI325X above MI300X."""
    h100_share, cdna3_peak = 794.5 / 989, 304 * 2.1e9 * 2048
    mi300x, mi325x, mi355x = (float(presets.system(n).chip.matmul_efficiency) for n in AMD)
    assert mi300x == pytest.approx(H100_MATMUL_EFFICIENCY * (668.4e12 / cdna3_peak) / h100_share,
                                   rel=1e-6)
    assert mi325x == pytest.approx(H100_MATMUL_EFFICIENCY * (784.9e12 / cdna3_peak) / h100_share,
                                   rel=1e-6)
    assert mi355x == mi325x
    assert mi300x < mi325x < H100_MATMUL_EFFICIENCY
    assert amd.XGMI_EFFICIENCY == 0.75


def test_device_kinds_name_the_amd_presets():
    from codesign.chip_specs import preset_for_device

    assert preset_for_device("AMD Instinct MI300X") == "mi300x-platform"
    assert preset_for_device("AMD Instinct MI325X") == "mi325x-platform"
    assert preset_for_device("AMD Instinct MI355X") == "mi355x-platform"


def test_estimate_on_each_amd_preset_is_finite_and_orders_the_parts(step_time_value_and_grad):
    """The default scenario (GPT-3 175B, tp 8, pp 8 on 1,024 GPUs) on each AMD
    preset, with the suite's shared compiled step: finite step time and
    gradients; MI325X (same peaks, more of them sustained, faster HBM) is
    faster than MI300X, MI355X (twice the peaks) faster than both."""
    times = []
    for name in AMD:
        scn = sc.load("default", [f"system.preset={name}"])
        knobs = {k: sc.get_knob(scn, k) for k in sc.knobs(scn) if k not in sc.RELATIONAL}
        value, grad = step_time_value_and_grad(scn, knobs)
        assert math.isfinite(float(value)) and float(value) > 0
        assert all(math.isfinite(float(g)) for g in grad.values())
        times.append(float(value))
    assert times[0] > times[1] > times[2]


def test_estimate_cli_runs_on_an_amd_preset(capsys):
    assert main(["estimate", "--set", "system.preset=mi355x-platform", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    text = json.dumps(out)
    assert "mi355x-platform" in text and "MI355X" in text
    assert math.isfinite(out["step_time_s"]) and out["step_time_s"] > 0


def test_blackwell_ultra_differs_from_blackwell_where_the_parts_do():
    """NVIDIA's figures: dense FP4 15 PFLOP/s per GB300 against GB200's 10
    (1,080 PF dense against 1,440 sparse per rack), 13.5 per B300 against
    B200's 9; dense BF16 and FP8 unchanged; 288 GB against 186; 1400 W against
    1200 W. The step model reads the HBM: the default scenario (GPT-3 175B, tp
    8, pp 8 on 1,024 GPUs) at micro-batch 2 without recompute needs ~220 GB a
    GPU: it fits GB300, not GB200."""
    gb300, gb200 = presets.preset("gb300-nvl72"), presets.preset("gb200-nvl72")
    assert gb300.other_peaks_flops_per_s["fp4"] == 1080e15 / 72 == 15e15
    assert gb200.other_peaks_flops_per_s["fp4"] == 1440e15 / 72 / 2 == 10e15
    assert presets.preset("dgx-b300").other_peaks_flops_per_s["fp4"] == 13.5e15
    assert presets.preset("dgx-b200").other_peaks_flops_per_s["fp4"] == 9e15
    for peak in ("peak_flops_per_s", "peak_fp8_flops_per_s"):
        assert float(getattr(gb300.system.chip, peak)) == float(getattr(gb200.system.chip, peak))
    assert (float(gb300.system.chip.tdp_w), float(gb200.system.chip.tdp_w)) == (1400, 1200)
    assert "10.7" in gb300.sources["exp_per_s"] and "5 Tera" in gb200.sources["exp_per_s"]

    def out(preset):
        return step.outputs(step.estimate(sc.load("default", [
            f"system.preset={preset}", "training.micro_batch=2", "training.recompute=none"])))

    new, old = out("gb300-nvl72"), out("gb200-nvl72")
    assert 186e9 < float(old["memory_bytes_per_gpu"]) and not bool(old["fits_memory"])
    assert float(new["memory_bytes_per_gpu"]) < 288e9 and bool(new["fits_memory"])
    assert float(new["step_time_s"]) < float(old["step_time_s"])  # twice the NIC


def test_optimize_chooses_among_presets_as_a_categorical_knob(capsys):
    """`system.preset` is a categorical knob: each preset's system evaluated
    (the scenario's own keys on top), the fastest kept, its name in the design
    and the output; `--bounds` on it, or an unknown preset, is one line, exit 2."""
    from codesign import optimize

    chosen = ("dgx-h100", "mi300x-platform", "mi355x-platform")
    r = optimize.categorical_search(lambda extra: sc.load("default", extra), ["system.preset"],
                                    choices={"system.preset": list(chosen)}, method="grid")
    explicit = {p: float(step.estimate(sc.load("default", [f"system.preset={p}"]))
                         .step.step_time_s) for p in chosen}
    best = min(explicit, key=explicit.get)
    assert r.feasible and r.best == {"system.preset": best} == {"system.preset":
                                                                 "mi355x-platform"}
    assert r.value == pytest.approx(explicit[best], rel=1e-6)
    assert [row["choices"]["system.preset"] for row in r.combinations] == list(chosen)

    assert main(["optimize", "--vary", "system.preset=dgx-h100|mi355x-platform", "--method",
                 "grid", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "system.preset" in out and "mi355x-platform   (scenario: dgx-a100)" in out
    for argv, message in (
            (["--vary", "system.preset=dgx-h100|mi999"], "system.preset='mi999' is not one "
             "of dgx-v100, dgx-a100"),
            (["--vary", "system.preset", "--bounds", "system.preset=a:b"],
             "--bounds for system.preset, a choice, not a number: restrict its choices with "
             "--vary 'system.preset=A|B'")):
        assert main(["optimize", *argv, "--method", "grid", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


# ------------------------------------------------ Blackwell Ultra's exponentials

def _core(chip, model, peak, micro_batch=1.0, tp=1.0):
    """(forward, backward) of one layer's FlashAttention core, less its kernel
    overhead, and its executed FLOPs and exponentials (one per executed score)."""
    fwd, bwd = FlashAttention().time_s(model, micro_batch, model.seq_len, tp, chip, peak, None)
    flops = float(micro_batch * model.seq_len * model.attention_score_flops_per_token() / tp / 2)
    exps = flops / (2 * float(model.qk_width + model.v_width))
    k = float(chip.kernel_overhead_s)
    return float(fwd) - k, float(bwd) - k, flops, exps


def test_exponential_rates_are_nvidias_and_only_blackwell_parts_state_one():
    """NVIDIA's SFU EX2 figures (the Blackwell Ultra blog's table): 10.7
    TeraExponentials/s on B300 and GB300, 5 on B200 and GB200, every one's
    attention efficiency read at Blackwell's 5; every other preset states none
    (0: no exponential term)."""
    rates = {n: (float(presets.system(n).chip.exp_per_s),
                 float(presets.system(n).chip.attention_exp_per_s)) for n in presets.PRESET_NAMES}
    assert rates.pop("gb300-nvl72") == rates.pop("dgx-b300") == (10.7e12, 5e12)
    assert rates.pop("gb200-nvl72") == rates.pop("dgx-b200") == (5e12, 5e12)
    assert set(rates.values()) == {(0.0, 0.0)}, rates


def test_blackwell_ultra_attention_saves_half_of_blackwells_exponential_time():
    """GPT-3 175B's attention core (128-wide heads, 2 x 256 FLOPs a score) on
    GB300 is GB200's less one exponential per executed score at 1/5e12 -
    1/10.7e12 s, in forward and again in backward (P recomputed); GB200's is
    flops / (peak x efficiency) as before the term, and so is every chip's
    without a stated rate."""
    model = sc.load("default").model
    gb300, gb200 = presets.system("gb300-nvl72").chip, presets.system("gb200-nvl72").chip
    peak = float(gb200.peak_flops_per_s)
    assert float(gb300.peak_flops_per_s) == peak
    f3, b3, flops, exps = _core(gb300, model, peak)
    f2, b2, _, _ = _core(gb200, model, peak)
    assert exps == pytest.approx(flops / 512, rel=1e-12)
    plain = flops / (peak * float(gb200.attention_efficiency))
    assert f2 == pytest.approx(plain, rel=1e-12)
    assert b2 == pytest.approx(FLASH_BACKWARD_OVER_FORWARD * plain, rel=1e-12)
    saved = exps * (1 / 5e12 - 1 / 10.7e12)
    assert f2 - f3 == pytest.approx(saved, rel=1e-9) and b2 - b3 == pytest.approx(saved, rel=1e-9)
    # 18.2% off: the exponentials are 0.35 x 2.5e15 / (512 x 5e12) of GB200's core
    assert f3 / f2 == pytest.approx(1 - 0.35 * 2.5e15 / (512 * 5e12) * (1 - 5 / 10.7), rel=1e-9)
    h100 = presets.system("dgx-h100").chip
    f, b, flops, _ = _core(h100, model, float(h100.peak_flops_per_s))
    assert f == pytest.approx(flops / (float(h100.peak_flops_per_s) * 0.35), rel=1e-12)


def test_deepseek_v3_fp8_attention_forward_near_nvidias_gb300_gain():
    """NVIDIA ("Making Softmax More Efficient with NVIDIA Blackwell Ultra"):
    ~35% more FP8 forward throughput on DeepSeek-V3's attention on GB300 than
    on GB200. The model: MLA's 192 + 128 widths (640 FLOPs a score) at the FP8
    peak and the borrowed efficiency, less the exponentials' saving: 41%."""
    model = workload.model("deepseek-v3")
    gb300, gb200 = presets.system("gb300-nvl72").chip, presets.system("gb200-nvl72").chip
    peak = float(gb200.peak_fp8_flops_per_s)
    f3, _, flops, exps = _core(gb300, model, peak)
    f2, _, _, _ = _core(gb200, model, peak)
    assert exps == pytest.approx(flops / 640, rel=1e-12)
    assert f2 / f3 == pytest.approx(1.35, rel=0.05)


def test_the_kernel_is_bounded_by_both_units():
    """A chip whose efficiency holds at a much slower exponential rate than its
    own cannot run faster than its tensor cores at peak; one with a slow
    exponential unit not faster than the unit: max(flops / peak,
    exponentials / exp_per_s)."""
    model = sc.load("default").model
    base = presets.system("gb300-nvl72").chip
    peak = float(base.peak_flops_per_s)

    def chip(eff, rate, lent):
        return eqx.tree_at(lambda c: (c.attention_efficiency, c.exp_per_s, c.attention_exp_per_s),
                           base, (jax.numpy.asarray(eff), jax.numpy.asarray(rate),
                                  jax.numpy.asarray(lent)))

    f, b, flops, exps = _core(chip(1.0, 1e15, 1e12), model, peak)
    assert (f, b) == pytest.approx((flops / peak, FLASH_BACKWARD_OVER_FORWARD * flops / peak),
                                   rel=1e-12)
    f, b, flops, exps = _core(chip(1.0, 1e11, 1e11), model, peak)
    assert exps / 1e11 > FLASH_BACKWARD_OVER_FORWARD * flops / peak
    assert (f, b) == pytest.approx((exps / 1e11, exps / 1e11), rel=1e-12)


def test_exponential_rate_gradient_is_the_closed_form():
    """d(forward) / d(exp_per_s) = -exponentials / exp_per_s^2 (GB300),
    finite, and equal to a central difference."""
    model = sc.load("default").model
    c = presets.system("gb300-nvl72").chip
    peak = float(c.peak_flops_per_s)

    def fwd(rate):
        return FlashAttention().time_s(model, 1.0, model.seq_len, 1.0,
                                       eqx.tree_at(lambda x: x.exp_per_s, c, rate), peak, None)[0]

    g = float(jax.grad(fwd)(jax.numpy.asarray(10.7e12)))
    _, _, _, exps = _core(c, model, peak)
    assert math.isfinite(g) and g == pytest.approx(-exps / 10.7e12 ** 2, rel=1e-6)
    h = 1e9
    fd = (float(fwd(jax.numpy.asarray(10.7e12 + h))) - float(fwd(jax.numpy.asarray(10.7e12 - h))))
    assert g == pytest.approx(fd / (2 * h), rel=1e-3)

    def both(chip):  # forward + backward, as jit and eager see it
        return sum(FlashAttention().time_s(model, 1.0, model.seq_len, 1.0, chip, peak, None))

    for name in ("gb300-nvl72", "gb200-nvl72", "dgx-h100"):
        chip = presets.system(name).chip
        assert float(jax.jit(both)(chip)) == pytest.approx(float(both(chip)), rel=1e-12)
        grads = jax.grad(both)(chip)
        for f in ("exp_per_s", "attention_exp_per_s", "attention_efficiency"):
            assert math.isfinite(float(getattr(grads, f))), (name, f)
    # GB200's efficiency holds at its own rate: a faster unit would help it, the
    # rate the efficiency holds at the other way; a chip with no rate ignores both
    g200 = jax.grad(both)(presets.system("gb200-nvl72").chip)
    assert float(g200.exp_per_s) < 0 < float(g200.attention_exp_per_s)
    gh = jax.grad(both)(presets.system("dgx-h100").chip)
    assert float(gh.exp_per_s) == 0 == float(gh.attention_exp_per_s)


def test_gb300_rows_are_the_tables_own_and_predicted_faster_than_gb200s(validate_rows):
    """Megatron-Bridge 25.11's DGX-GB300 section: 8 rows, none refused or
    fitted; on the three plans GB200 ran too (Llama 3 8B and 70B, Qwen3-30B-A3B)
    GB300 is predicted faster, by less than published (19%, 5%, 22%: the
    clocks a 1,400 W part sustains are not modelled)."""
    rows = validate.set_rows(validate_rows, "bridge_2511_gb300")
    assert len(rows) == 8 and {r["family"] for r in rows} == {"GB300"}
    assert not any(r["refused"] or r["calibration"] for r in rows)
    gb200 = {r["name"].replace("GB200", "GB300"): r for r in validate_rows
             if r["source"] == validate.BRIDGE_SOURCE and "GB200" in r["name"]}
    same = [(r, gb200[r["name"]]) for r in rows if r["name"] in gb200]
    assert len(same) == 3
    for new, old in same:
        assert 1 < new["predicted"] / old["predicted"] < new["published"] / old["published"]


def test_an_attention_efficiency_given_holds_at_the_chips_own_rate():
    """`system.attention_efficiency` set on GB300 (a measurement of this chip,
    `codesign calibrate compute`'s) holds at GB300's own 10.7e12: no saving
    is added to it; the preset's borrowed one holds at Blackwell's 5e12."""
    given = sc.load("default", ["system.preset=gb300-nvl72", "system.attention_efficiency=0.5"])
    preset = sc.load("default", ["system.preset=gb300-nvl72"])
    assert float(given.system.chip.attention_exp_per_s) == 10.7e12
    assert float(preset.system.chip.attention_exp_per_s) == 5e12
    model, chip = given.model, given.system.chip
    f, _, flops, _ = _core(chip, model, float(chip.peak_flops_per_s))
    assert f == pytest.approx(flops / (float(chip.peak_flops_per_s) * 0.5), rel=1e-12)

"""The honesty table: the model beside every published end-to-end figure we know.

Each `Check` is one published number (a throughput, an iteration time, an MFU,
GPU-hours, a collective's bus bandwidth) with its source, the scenario that
reproduces the published configuration (and the assumptions where the
publication is silent), and whether the figure *calibrates* a model constant
(then the row reproduces it by construction) or is a prediction. A row that is
off stays in, with the reason where we know it.

Rows are evaluated eagerly (no jit): each has its own static structure, and an
eager estimate costs ~0.1 s once JAX's primitives are warm, against seconds
to compile one.
"""

from __future__ import annotations

import dataclasses

from . import collectives, hardware
from . import scenario as scenario_lib
from . import step as step_lib

MEASURES = {
    "hardware_tflops_per_gpu": "TFLOP/s per GPU, hardware FLOPs (recomputation included)",
    "model_tflops_per_gpu": "TFLOP/s per GPU, model FLOPs",
    "aggregate_hardware_pflops": "PFLOP/s over all GPUs, hardware FLOPs",
    "mfu": "model FLOPs utilisation against the 16-bit peak (full s x s attention)",
    "mfu_causal": "MFU counting only the causal half of the attention scores",
    "step_time_s": "seconds per iteration",
    "gpu_hours": "GPU-hours to train on the scenario's tokens (failures included)",
    "busbw_GBps": "nccl-tests bus bandwidth, GB/s",
}


@dataclasses.dataclass(frozen=True)
class Check:
    """One published figure and how to reproduce it."""

    name: str
    source: str
    measure: str  # a key of MEASURES
    published: float
    tables: dict | None = None  # scenario tables (scenario.from_tables)
    collective: tuple | None = None  # (system preset, op, algorithm, tier, ranks, bytes)
    calibration: bool = False  # the figure sets a model constant
    note: str = ""


def _narayanan(params_b, heads, hidden, layers, tp, pp, gpus, batch, tflops, calibration=False):
    """A row of Narayanan et al. 2021, Table 1 (seq 2048, vocab 51,200, A100s,
    full recomputation, fp16); micro-batch 1 and the 1F1B schedule are ours."""
    return Check(
        f"Megatron {params_b}B on {gpus} A100 (tp {tp}, pp {pp})",
        "Narayanan et al. 2021, Table 1", "hardware_tflops_per_gpu", tflops,
        {"model": {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": 2048,
                   "vocab": 51200, "attention_kernel": "naive", "dropout": True},
         "training": {"global_batch": batch, "micro_batch": 1, "recompute": "full",
                      "dtype": "fp16"},
         "parallel": {"tp": tp, "pp": pp},
         "system": {"preset": "dgx-a100", "gpus": gpus}},
        calibration=calibration,
        note="sets the A100 matmul_efficiency" if calibration
        else "micro-batch 1 and 1F1B assumed (not in the table)")


def _mt_nlg(nodes, seconds):
    return Check(
        f"MT-NLG 530B on {nodes * 8} A100 (tp 8, pp 35)", "Smith et al. 2022, Table 2",
        "step_time_s", seconds,
        {"model": {"preset": "megatron-530b"},
         "training": {"global_batch": 1920, "micro_batch": 1, "recompute": "full",
                      "dtype": "bf16"},
         "parallel": {"tp": 8, "pp": 35},
         "system": {"preset": "dgx-a100", "gpus": nodes * 8}},
        note="micro-batch 1, 1F1B and bf16 assumed; the same model at the same tp and pp "
             "reaches 163 TFLOP/s in Narayanan et al. 2021: MT-NLG's software stack "
             "(Megatron-DeepSpeed) ran slower than the model's Megatron-LM reading")


def _llama3(gpus, cp, dp_batch, seq, mfu):
    dp = gpus // (8 * 16 * cp)
    return Check(
        f"Llama 3 405B on {gpus} H100 (tp 8, cp {cp}, pp 16, seq {seq})",
        "Dubey et al. 2024, Table 4", "mfu_causal", mfu,
        {"model": {"preset": "llama3-405b", "seq_len": seq},
         "training": {"global_batch": dp_batch * dp, "micro_batch": 1, "recompute": "none"},
         "parallel": {"tp": 8, "pp": 16, "cp": cp, "schedule": "interleaved",
                      "interleave": 4, "zero": 1, "sequence_parallel": True},
         "system": {"preset": "dgx-h100", "gpus": gpus, "topology": "clos",
                    "pod_size": 3072, "oversubscription": 7}},
        note="MFU convention not stated (causal attention assumed); no recomputation, "
             "interleaving 4 assumed; the model's memory says this plan does not fit "
             "80 GB without recomputation")


def _nccl(name, preset, algorithm, tier, ranks, busbw_GBps, note):
    """A published nccl-tests bus bandwidth of an 8 GiB all-reduce (a calibration row)."""
    return Check(name, "nccl-tests (vendor figures)", "busbw_GBps", busbw_GBps,
                 collective=(preset, "all_reduce", algorithm, tier, ranks, 8 * 2**30),
                 calibration=True, note=note)


CHECKS: tuple[Check, ...] = (
    # ------------------------------------------------------------ calibration
    _narayanan(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, calibration=True),
    Check("Megatron-LM 1.2B on one V100", "Shoeybi et al. 2019", "hardware_tflops_per_gpu",
          39.0, {"model": {"preset": "megatron-1.2b"},
                 "training": {"global_batch": 8, "micro_batch": 8, "recompute": "full",
                              "dtype": "fp16"},
                 "system": {"preset": "dgx-v100", "gpus": 1}},
          calibration=True, note="sets the V100 matmul_efficiency (batch 8 assumed)"),
    _nccl("nccl-tests all-reduce, 8x H100 NVLink, ring", "dgx-h100", "ring", "scale_up", 8,
          370.0, "sets the NVLink4 efficiency"),
    _nccl("nccl-tests all-reduce, 8x H100 NVLink SHARP", "dgx-h100", "in_network", "scale_up",
          8, 480.0, "sets the NVLS efficiency"),
    _nccl("nccl-tests all-reduce, 8x A100 NVLink", "dgx-a100", "ring", "scale_up", 8, 230.0,
          "sets the NVLink3 efficiency"),
    _nccl("nccl-tests, one 400 Gb/s NDR NIC per GPU", "dgx-h100", "ring", "scale_out", 16,
          47.0, "sets the NIC efficiency (46-48 GB/s)"),
    # ------------------------------------------------------------ predictions
    Check("Megatron-LM 8.3B on 512 V100 (tp 8, dp 64)", "Shoeybi et al. 2019",
          "aggregate_hardware_pflops", 15.1, scenario_lib.read("megatron-8.3b"),
          note="micro-batch 8 and full recomputation assumed"),
    _narayanan(1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    _narayanan(3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    _narayanan(7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    _narayanan(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    _narayanan(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    _narayanan(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    _narayanan(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    _narayanan(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    _narayanan(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    Check("GPT-3 175B on 1024 A100 (tp 8, pp 8)",
          "Narayanan et al. 2021, GPT-3 training-time estimate",
          "hardware_tflops_per_gpu", 140.0, scenario_lib.read("default"),
          note="interleaved schedule (2 chunks) assumed"),
    _mt_nlg(280, 60.1),
    _mt_nlg(350, 50.2),
    _mt_nlg(420, 44.4),
    _llama3(8192, 1, 32, 8192, 0.43),
    _llama3(16384, 1, 16, 8192, 0.41),
    _llama3(16384, 16, 16, 131072, 0.38),
    Check("DeepSeek-V3 pre-training, 14.8T tokens on 2048 H800",
          "DeepSeek-V3 technical report, Table 1", "gpu_hours", 2.664e6,
          scenario_lib.read("deepseek-v3"),
          note="final global batch 15,360 for the whole run (the batch-size ramp and "
               "the FP8 GEMMs' fine-grained scaling are not modelled)"),
)


def _collective(spec) -> float:
    preset, op, algorithm, tier_name, ranks, n_bytes = spec
    tier = getattr(hardware.system(preset), tier_name)
    c = collectives.cost(op, algorithm, n_bytes, ranks, tier)
    return float(collectives.busbw_Bps(op, n_bytes, c.time_s, ranks)) / 1e9


def predict(check: Check) -> tuple[float, bool]:
    """(the model's value of `check.measure`, whether the plan fits in memory)."""
    if check.collective is not None:
        return _collective(check.collective), True
    scn = scenario_lib.from_tables(check.tables)
    out = step_lib.outputs(step_lib.estimate(scn))
    fits = bool(out["fits_memory"])
    if check.measure == "aggregate_hardware_pflops":
        return float(out["hardware_tflops_per_gpu"]) * float(scn.system.gpus) / 1e3, fits
    return float(out[check.measure]), fits


def run(checks=CHECKS) -> list[dict]:
    """Every check as a row: name, source, measure, published, predicted, error
    (predicted / published - 1), calibration, fits_memory, note."""
    rows = []
    for c in checks:
        predicted, fits = predict(c)
        rows.append({"name": c.name, "source": c.source, "measure": c.measure,
                     "published": c.published, "predicted": predicted,
                     "error": predicted / c.published - 1.0, "calibration": c.calibration,
                     "fits_memory": fits, "note": c.note})
    return rows


def summary(rows) -> dict:
    """Median and maximum |error| over the prediction rows (calibration rows apart)."""
    errors = sorted(abs(r["error"]) for r in rows if not r["calibration"])
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 if n else float("nan")
    return {"predictions": n, "median_abs_error": median,
            "max_abs_error": errors[-1] if n else float("nan")}

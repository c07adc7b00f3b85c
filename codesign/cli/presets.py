"""`codesign presets`: the hardware (and, where defined, model) presets with numbers and sources.

Bandwidths are per GPU and per direction (vendors quote NVLink both ways
added); `efficiency` is the achievable fraction for ring-like algorithms and
`in_network_efficiency` that of NVLS/SHARP (0: none).
"""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np

from .. import presets
from ..model import hardware as hw
from ..model.strategies import Strategy
from ..units import GB, TB, us


def add_arguments(parser, name) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def to_json(obj):
    """Modules and dataclasses as nested dicts (a strategy by its name); scalar
    arrays as floats."""
    if isinstance(obj, Strategy):
        return obj.name
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, (jax.Array, np.ndarray, np.generic)):
        value = np.asarray(obj)
        return value.item() if value.size == 1 else value.tolist()
    return obj


def _model_presets() -> dict:
    try:
        from ..model import workload
    except ImportError:
        return {}
    names = getattr(workload, "PRESET_NAMES", ())
    return {name: workload.preset(name) for name in names}


def _numbers(fields) -> str:
    """`key value` for the numeric and boolean fields of a serialised model."""
    if not isinstance(fields, dict):
        return str(fields)
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in fields.items()
                     if isinstance(v, bool) or (isinstance(v, (int, float)) and v != 0))


def _tier_lines(label: str, tier: hw.Tier) -> list[str]:
    nvls = float(tier.in_network_efficiency)
    return [
        f"  {label:<10} {float(tier.bandwidth_Bps) / GB:8.4g} GB/s per direction x efficiency "
        f"{float(tier.efficiency):.3f} = {float(tier.effective_Bps) / GB:.4g} GB/s; "
        f"latency {float(tier.latency_s) / us:g} us; reduction "
        f"{float(tier.reduction_Bps) / TB:.4g} TB/s"
        + (f"; in-network reduction x {nvls:.3f}" if nvls > 0 else ""),
    ]


def _describe(name: str, preset: hw.Preset) -> str:
    s, chip = preset.system, preset.system.chip
    pods = s.topology  # a topology without pods reads as one pod at 1:1
    unit = "GPU" if s.topology.switched_scale_up else "chip"  # a torus's TPUs are not GPUs
    lines = [
        f"{name}: {preset.description}",
        f"  chip       {preset.chip}: {float(chip.peak_flops_per_s) / 1e12:g} TFLOP/s 16-bit, "
        f"{float(chip.peak_fp8_flops_per_s) / 1e12:g} TFLOP/s 8-bit (dense peaks), "
        f"HBM {float(chip.hbm_bytes) / GB:.4g} GB at {float(chip.hbm_Bps) / TB:g} TB/s, "
        f"matmul efficiency {float(chip.matmul_efficiency):g}"
        + (f", softmax exponentials {float(chip.exp_per_s):g}/s (attention efficiency "
           f"held at {float(chip.attention_exp_per_s):g}/s)" if float(chip.exp_per_s) > 0
           else ""),
        f"  system     {float(s.gpus):g} {unit}s, scale-up domain {float(s.scale_up_domain):g}, "
        f"{float(s.gpus_per_node):g} {unit}s per node, topology {s.topology.name}, "
        + (f"pods of {float(pods.pod_size):g} {unit}s, oversubscription "
           f"{float(pods.oversubscription):g}:1 above" if float(pods.pod_size) < float(s.gpus)
           else "no oversubscription"),
        f"  protocols  {s.protocols.name}: " + (
            f"{' / '.join(s.protocols.protocol_names)}, each with its base and per-step "
            "latency (the tiers' latencies below: Simple's, per step)"
            if len(s.protocols.protocol_names) > 1 else "latency and bandwidth alone"),
        *_tier_lines("scale-up", s.scale_up),
        *_tier_lines("scale-out", s.scale_out),
        *(["  other      dense peaks the step model does not read: " + ", ".join(
            f"{k} {v / 1e12:g} TFLOP/s" for k, v in preset.other_peaks_flops_per_s.items())]
          if preset.other_peaks_flops_per_s else []),
        *([f"  library    {lib['library']}: algorithms {', '.join(lib['algorithms'])}; "
           f"protocols {', '.join(lib['protocols'])}; costed as {lib['costed_as']} "
           f"({lib['source']})"] if (lib := preset.collective_library) else []),
        "  sources    " + "; ".join(f"{k}: {v}" for k, v in preset.sources.items()),
    ]
    return "\n".join(lines)


def run(args, name) -> int:
    hardware = {n: presets.preset(n) for n in presets.PRESET_NAMES}
    models = _model_presets()
    if args.json:
        print(json.dumps({
            "hardware": {n: {"description": p.description, "sources": p.sources,
                             "chip": p.chip, "system": to_json(p.system),
                             "other_peaks_flops_per_s": p.other_peaks_flops_per_s,
                             "collective_library": p.collective_library}
                         for n, p in hardware.items()},
            "models": {n: {"description": m.description, "sources": to_json(m.sources),
                           "model": to_json(m.model)} for n, m in models.items()},
        }, indent=1))
        return 0
    print("# hardware presets (bandwidths per GPU, per direction; GB = 1e9)")
    print("\n\n".join(_describe(n, p) for n, p in hardware.items()))
    if models:
        print("\n# model presets")
        for n, m in models.items():
            sources = to_json(m.sources)
            cited = "; ".join(f"{k}: {v}" for k, v in sources.items()) \
                if isinstance(sources, dict) else str(sources)
            print(f"{n}: {m.description}\n  model      {_numbers(to_json(m.model))}"
                  f"\n  sources    {cited}")
    return 0

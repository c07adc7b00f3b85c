"""What a key's name means for people: its words, without the unit (which
`units.unit_of` gives). Figure labels (`plots`, `sweep`), the commands'
sentences (`cli/_text.py`) and tables share this one vocabulary."""

from __future__ import annotations

import re

# key -> its meaning in words (the unit is `units.unit_of`'s)
WORDS = {
    "time_s": "time", "step_time_s": "step time", "latency_s": "latency term",
    "bandwidth_s": "bandwidth term", "reduction_s": "reduction term",
    "breakdown_tp_s": "exposed TP time per step",
    "breakdown_ep_s": "exposed expert-parallel all-to-all time per step",
    "breakdown_dp_s": "exposed DP time per step",
    "breakdown_cp_s": "exposed CP time per step",
    "breakdown_pp_p2p_s": "exposed PP send/receive time per step",
    "time_to_train_s": "time to train", "mtbf_s": "job MTBF",
    "checkpoint_interval_s": "checkpoint interval", "young_interval_s": "Young interval",
    "expected_step_time_s": "expected step time", "restart_s": "restart time",
    "gpu_hours": "GPU-hours", "goodput": "goodput",
    "mfu": "MFU (model FLOP/s over peak)", "tokens_per_s": "throughput (tokens/s)",
    "bubble_fraction": "pipeline bubble / (compute + bubble)",
    "exposed_comm_fraction": "exposed communication / step time",
    "micro_batches": "micro-batches per step m",
    "memory_bytes_per_gpu": "memory per accelerator",
    "busbw_Bps": "bus bandwidth", "algbw_Bps": "algorithm bandwidth",
    "scale_up_group_Bps": "bandwidth per chip the group sees",
    "n_bytes": "message size", "ranks": "ranks p", "local_ranks": "ranks per scale-up domain",
    "gpus": "accelerators", "participants": "participants p",
    "k_flows": "elephant flows k", "m_links": "links m",
    "slowdown": "collective time / sprayed time", "bandwidth_fraction": "fraction of line rate",
    "p_step_delayed": "P(step delayed)",
    "straggler_slowdown_factor": "expected step time / healthy step time",
    "straggler_q": "P(a participant is slow) q",
    "effective_training_time_fraction": "effective training time (useful / wall)",
    "network_cost_usd": "total network cost", "cost_per_gpu_usd": "cost per accelerator",
    "network_power_w": "network power", "power_per_gpu_w": "power per accelerator",
    "group_size": "group size (consecutive ranks)",
    "placement": "placement (innermost first)", "node_limit": "node-limited routing",
    "parallel.tp": "TP width", "parallel.pp": "pipeline stages pp",
    "parallel.schedule": "pipeline schedule",
    "system.scale_up_domain": "scale-up domain (accelerators)",
    "system.scale_out_bandwidth_Bps": "scale-out bandwidth per accelerator",
    "system.scale_out_efficiency": "scale-out achieved fraction of line rate",
    "system.scale_out_latency_s": "scale-out latency per message",
    "system.oversubscription": "oversubscription above the pods (x:1)",
    "system.gpus": "accelerators", "model.top_k": "experts per token (top-k)",
    "reliability.straggler_q": "P(a participant is slow) q",
    "reliability.gpu_mtbf_s": "MTBF per accelerator",
    "reliability.restart_s": "restart time",
}


ELASTICITY = re.compile(r"dlog\((.+)\)/dlog\((.+)\)")  # dlog(output)/dlog(knob)


def words(name: str) -> str:
    """A column's meaning without its unit: `breakdown_tp_s` -> "exposed TP time per step"."""
    found = ELASTICITY.fullmatch(name)
    if found:
        return f"d log({words(found.group(1))}) / d log({words(found.group(2))})"
    if name.startswith("scale:"):
        return f"{words(name[6:])} (x its preset value)"
    if name in WORDS:
        return WORDS[name]
    short = name.split(".")[-1]
    for suffix in ("_Bps", "_bytes", "_usd", "_w", "_s"):
        if short.endswith(suffix) and not short.endswith("_per_s"):
            short = short[: -len(suffix)]
            break
    return short.replace("scale_up", "scale-up").replace("scale_out", "scale-out") \
        .replace("_", " ")

"""English for the commands: knob and output names in words, elasticities as sentences."""

from __future__ import annotations

# output -> its name in words
OUTPUT_WORDS = {"step_time_s": "step time", "tokens_per_s": "tokens/s",
                "time_to_train_s": "time to train", "gpu_hours": "GPU-hours",
                "expected_step_time_s": "expected step time",
                "memory_bytes_per_gpu": "memory per GPU", "mfu": "MFU", "goodput": "goodput"}


def knob_label(name: str) -> str:
    """'system.scale_out_bandwidth_Bps' -> 'scale-out bandwidth'."""
    base = name.split(".", 1)[1]
    for suffix in ("_Bps", "_s", "_bytes", "_w"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.replace("scale_up", "scale-up").replace("scale_out", "scale-out") \
        .replace("_", " ")


def describe_elasticity(knob: str, e: float, output: str = "step time", pct: float = 10.0,
                        value: float | None = None) -> str:
    """'+10% scale-out bandwidth gives -1.9% step time' (constant-elasticity: (1+p)^e - 1)."""
    if value == 0:
        return f"{knob_label(knob)} is 0 (unset): no local effect"
    change = ((1 + pct / 100) ** e - 1) * 100
    return f"+{pct:g}% {knob_label(knob)} gives {change:+.2f}% {output}"

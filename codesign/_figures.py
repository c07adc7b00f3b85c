"""What a published figure is: its measure (`MEASURES`, which are times, which
are a collective's) and a `Check`, one number with its source and how to
reproduce it. `_published_runs` and `_published_collectives` hold the rows."""

from __future__ import annotations

import dataclasses

MEASURES = {
    "hardware_tflops_per_gpu": "TFLOP/s per GPU, hardware FLOPs (recomputation included)",
    "model_tflops_per_gpu": "TFLOP/s per GPU, model FLOPs",
    "aggregate_hardware_pflops": "PFLOP/s over all GPUs, hardware FLOPs",
    "mfu": "model FLOPs utilisation against the 16-bit peak (full s x s attention)",
    "mfu_causal": "MFU counting only the causal half of the attention scores",
    "tokens_per_s_per_gpu": "tokens per second per GPU (no FLOP convention)",
    "step_time_s": "seconds per iteration",
    "gpu_hours": "GPU-hours to train on the scenario's tokens (failures included)",
    "busbw_GBps": "nccl-tests bus bandwidth, GB/s",
    "all_reduce_s": "nccl-tests all-reduce time (out-of-place), seconds",
}
# the measures that are a time (the others are rates: a positive error is optimistic)
TIME_MEASURES = frozenset({"step_time_s", "gpu_hours", "all_reduce_s"})
# the measures of one collective, not of a training step: summarised by measure
# only, and outside the step-time intervals (`validate.uncertainty`)
COLLECTIVE_MEASURES = frozenset({"busbw_GBps", "all_reduce_s"})


@dataclasses.dataclass(frozen=True)
class Check:
    """One published figure and how to reproduce it."""

    name: str
    source: str
    measure: str  # a key of MEASURES
    published: float
    tables: dict | None = None  # scenario tables (scenario.from_tables)
    # (system preset, op, algorithm, tier or None for over nodes, ranks, bytes)
    collective: tuple | None = None
    calibration: bool = False  # the figure sets a model constant
    note: str = ""

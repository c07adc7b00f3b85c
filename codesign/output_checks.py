"""The check of an estimate's outputs (`check_outputs`): a non-finite or negative
number, or one above its physical bound, is a one-line error naming the output
and the inputs it follows from."""

from __future__ import annotations

import numpy as np

from . import checks
from .model import reliability

# output -> the inputs it follows from most directly (named when it is not finite)
_LIKELY_INPUTS = {
    "time_to_train_s": "training.tokens, reliability.gpu_mtbf_s, reliability.restart_s, "
                       "system.gpus",
    "gpu_hours": "training.tokens, reliability.gpu_mtbf_s, system.gpus",
    "goodput": "reliability.gpu_mtbf_s, reliability.restart_s, reliability.straggler_*, "
               "system.gpus",
    "effective_training_time_fraction": "reliability.gpu_mtbf_s, reliability.restart_s, "
                                        "reliability.checkpoint_write_s, system.gpus",
    "mtbf_s": "reliability.gpu_mtbf_s, system.gpus",
    "fabric_cost_usd": "system.gpus, system.pod_size, system.oversubscription, "
                       "system.scale_out_bandwidth_Bps, system.scale_up_bandwidth_Bps, "
                       "system.scale_up_domain",
    "fabric_power_w": "system.gpus, system.pod_size, system.oversubscription, "
                      "system.scale_out_bandwidth_Bps",
}
STEP_INPUTS = ("model sizes, training.global_batch, training.micro_batch, parallel.*, "
                "system bandwidths, latencies and efficiencies")


# outputs that are at most 1 whatever the input -> what more than 1 would mean
_AT_MOST_ONE = {
    "mfu_gemm_peak": "more FLOP/s than the peak of the precision the GEMMs run in",
    "hfu_gemm_peak": "more FLOP/s than the peak of the precision the GEMMs run in",
    "p_step_delayed": "a probability", "goodput": "a fraction of the wall time",
    "effective_training_time_fraction": "a fraction of the wall time",
}


class OutputOutOfRange(ArithmeticError):
    """An output outside its physical range (utilisation above 1 against the
    peak of the precision the step computes in): the model's fault, not the
    input's; the command line exits 1 with this one line."""


def check_outputs(out: dict, overrides=()) -> None:
    """Check an estimate's outputs ({key: scalar}, as `step.outputs`): a
    non-finite or negative number is a one-line `ValueError` naming the output,
    the inputs it follows from, and the `--set` overrides given; an output
    above its physical bound of 1 (MFU or HFU against the peak of the GEMMs'
    precision, `mfu_gemm_peak` and `hfu_gemm_peak`; a probability; goodput) is
    an `OutputOutOfRange`. The 16-bit `mfu` and `hfu` may exceed 1 for an fp8
    recipe: legitimate, not checked. An effective training time below the
    failure model's floor is first a `reliability.NoProgress` (no feasible answer)."""
    given = [o if isinstance(o, str) else f"{o[0]}.{o[1]}={o[2]!r}" for o in overrides]
    hint = f" (overrides: {', '.join(given)})" if given else ""
    if "effective_training_time_fraction" in out:  # first: it explains an infinite time
        reliability.check_progress(out["effective_training_time_fraction"], out.get("mtbf_s"),
                                   hint)
    for key, value in out.items():
        v = checks.concrete(value)
        if v is None:
            continue
        negative = bool(np.any(v <= 0)) if key == "step_time_s" else bool(np.any(v < 0))
        if negative and bool(np.all(np.isfinite(v))):
            raise ValueError(f"the estimate's {key}={checks.fmt(v)} is impossible (a negative "
                             f"or zero quantity); check {_LIKELY_INPUTS.get(key, STEP_INPUTS)}"
                             f"{hint}")
        if not bool(np.all(np.isfinite(v))):
            inputs = _LIKELY_INPUTS.get(key, STEP_INPUTS)
            raise ValueError(f"the estimate's {key}={checks.fmt(v)} is not finite: an input is "
                             f"beyond what the model can represent; check {inputs}{hint}")
        if key in _AT_MOST_ONE and bool(np.any(v > 1.0 + 1e-9)):
            raise OutputOutOfRange(f"the estimate's {key}={checks.fmt(v)} exceeds 1 "
                                   f"({_AT_MOST_ONE[key]}): the model is wrong here{hint}")

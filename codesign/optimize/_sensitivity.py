"""Elasticities: d log(output) / d log(knob) of the exact model (t = 0) for every
hardware, plan and reliability knob, by `jax.jacrev`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import scenario as sc
from .. import step
from ..relax import safe_log
from ..scenario import Scenario

# Sensitivity: every hardware, plan and reliability knob (the workload and the
# token count are what is trained, not how), of these outputs (positive, so
# their logarithm has a derivative).
SENSITIVITY_KNOBS = tuple(k for k in sc.KNOBS
                          if not k.startswith("model.") and k != "training.tokens")
SENSITIVITY_OUTPUTS = ("step_time_s", "tokens_per_s", "time_to_train_s", "gpu_hours",
                       "expected_step_time_s", "memory_bytes_per_gpu", "mfu", "goodput")


@eqx.filter_jit
def _log_jacobian(scn: Scenario, values: dict, outputs: tuple[str, ...]):
    """d log(outputs) / d values at `scn` with the knobs `values` set (the
    scenario's own, checked when it was built: no traced check, so the
    persistent cache can store the program)."""
    def f(v):
        out = step.outputs(step.estimate(sc.set_knobs(scn, v), check=False))
        return jnp.stack([safe_log(out[o]) for o in outputs])

    return jax.jacrev(f)(values)


def elasticities(scn: Scenario, outputs=("step_time_s",), knobs=None) -> dict:
    """{output: {knob: d log(output) / d log(knob)}} at t = 0, by jax.jacrev.

    Each knob moves alone with the others held; with system.gpus fixed, dp
    follows tp, pp and cp (`scenario.set_knobs`). Raising parallel.dp raises
    system.gpus by the same factor with tp, pp, cp held, which is exactly what
    raising system.gpus does: the two share one elasticity. A knob at 0
    (unset, e.g. moe_node_limit on a dense model) has elasticity 0.
    """
    if knobs is None:  # those of the scenario (a Clos's pods only on a Clos)
        knobs = tuple(k for k in sc.knobs(scn) if k in SENSITIVITY_KNOBS)
    knobs = tuple(knobs)
    outputs = tuple(outputs)
    for k in knobs:
        sc.get_knob(scn, k)
    for o in outputs:
        if o not in SENSITIVITY_OUTPUTS:
            raise ValueError(f"output={o!r} is not one of {', '.join(SENSITIVITY_OUTPUTS)}")
    group = tuple(dict.fromkeys(
        "system.gpus" if k == "parallel.dp" else k for k in knobs))
    values = {k: sc.get_knob(scn, k) for k in group}
    jac = _log_jacobian(scn, values, outputs)
    return {o: {k: float(jac["system.gpus" if k == "parallel.dp" else k][i]
                         * values["system.gpus" if k == "parallel.dp" else k])
                for k in knobs} for i, o in enumerate(outputs)}

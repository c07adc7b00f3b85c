"""Elasticities: d log(output) / d log(knob) of the exact model (`relax.EXACT`) for every
hardware, plan and reliability knob, by `jax.jacrev`.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import output_checks
from .. import scenario as sc
from ..model import memory, reliability, step
from ..model.relax import safe_log
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
    """(d log(outputs) / d values, every output of the estimate) at `scn` with
    the knobs `values` set (the scenario's own, checked when it was built: no
    traced check, so the persistent cache can store the program; the outputs
    are checked concretely instead, `output_checks.check_outputs`)."""
    def f(v):
        out = step.outputs(step.estimate(sc.set_knobs(scn, v), check=False))
        return jnp.stack([safe_log(out[o]) for o in outputs]), out

    return jax.jacrev(f, has_aux=True)(values)


def _checked(scn: Scenario, out: dict, elasticity: dict) -> dict:
    """`elasticity` ({output: {knob: value}}), once the estimate at `scn`
    (`out`) passes `output_checks.check_outputs` (an effective training time below the
    failure model's floor is a `reliability.NoProgress`); an elasticity that is
    not finite at such a point is the model's fault (`output_checks.OutputOutOfRange`)."""
    asked = {k: v for k, v in out.items()
             if float(scn.tokens) > 0 or k not in step.TIME_TO_TRAIN_OUTPUTS}
    output_checks.check_outputs(asked)
    for o, by_knob in elasticity.items():
        for k, v in by_knob.items():
            if not math.isfinite(v):
                raise output_checks.OutputOutOfRange(
                    f"the elasticity of {o} to {k} is {v} at a point whose outputs are "
                    "finite: the model's derivative is wrong here")
    return elasticity


def elasticities(scn: Scenario, outputs=("step_time_s",), knobs=None) -> dict:
    """{output: {knob: d log(output) / d log(knob)}} of the exact model, by jax.jacrev.

    Each knob moves alone with the others held; with system.gpus fixed, dp
    follows tp, pp and cp (`scenario.set_knobs`). Raising parallel.dp raises
    system.gpus by the same factor with tp, pp, cp held, which is exactly what
    raising system.gpus does: the two share one elasticity. A knob at 0
    (unset, e.g. moe_node_limit on a dense model) has elasticity 0. The
    estimate at the point must pass `output_checks.check_outputs` (a job below the
    failure model's floor raises `reliability.NoProgress`), and every
    elasticity is finite (else `output_checks.OutputOutOfRange`).
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
    # the failure model's bound first: no compile for a job that makes no progress
    reliability.check_job(scn.system.gpus, memory.checkpoint_bytes_total(scn.model, scn.plan),
                          scn.reliability)
    jac, out = _log_jacobian(scn, values, outputs)
    return _checked(scn, out, {o: {k: float(jac["system.gpus" if k == "parallel.dp" else k][i]
                                            * values["system.gpus" if k == "parallel.dp" else k])
                                   for k in knobs} for i, o in enumerate(outputs)})


def integer_steps(scn: Scenario, output: str = "step_time_s", knobs=None, only=None) -> dict:
    """What an integer knob's elasticity (the relaxed model's) cannot say: the
    exact `output` at the knob's next admissible value down and up (`_problem.
    admissible_values`: the divisibility rules with the other knobs held, within
    `default_bounds`), the others held. {knob: {"value", "down", "up"}}, each end
    {"value", "output", "change" (output / the scenario's - 1), "fits_memory"},
    or {"none": why} where no admissible value lies that way. Integer knobs at 0
    (unset) are left out; `only` (default: every one of `knobs`) the knobs stepped.

    Each end is evaluated by the program `elasticities(scn, (output,), knobs)`
    compiled (the same `knobs` set, other values): no new compile, one
    evaluation per end."""
    from ._problem import INTEGER_KNOBS, NEIGHBOUR_SPAN, default_bounds, neighbours

    if knobs is None:
        knobs = tuple(k for k in sc.knobs(scn) if k in SENSITIVITY_KNOBS)
    integers = [k for k in (knobs if only is None else only)
                if k in INTEGER_KNOBS and float(sc.get_knob(scn, k)) > 0]
    if not integers:
        return {}
    group = tuple(dict.fromkeys(
        "system.gpus" if k == "parallel.dp" else k for k in knobs))
    values = {k: sc.get_knob(scn, k) for k in group}
    outputs = (output,)
    _, base = _log_jacobian(scn, values, outputs)
    here = float(base[output])
    steps = {}
    for k in integers:
        v = float(sc.get_knob(scn, k))
        lo, hi = default_bounds(scn, k)
        lo, hi = max(lo, v - NEIGHBOUR_SPAN), min(hi, v + NEIGHBOUR_SPAN)
        entry = {"value": v}
        for way, w in zip(("down", "up"), neighbours(scn, k), strict=True):
            if w is None:
                entry[way] = {"none": f"no admissible {k} {'below' if way == 'down' else 'above'}"
                                      f" {v:g} in [{lo:g}, {hi:g}] with the other knobs held"}
                continue
            if k == "parallel.dp":  # system.gpus follows dp (tp, pp, cp held)
                moved = {"system.gpus": values["system.gpus"] * (w / v)}
            else:
                moved = {k: w}
            at = {**values, **{n: jnp.asarray(x, dtype=jnp.asarray(values[n]).dtype)
                               for n, x in moved.items()}}
            _, out = _log_jacobian(scn, at, outputs)
            y = float(out[output])
            entry[way] = {"value": w, "output": y,
                          "change": y / here - 1.0 if here else math.nan,
                          "fits_memory": bool(out["fits_memory"])}
        steps[k] = entry
    return steps

"""The model the optimiser sees: the metrics of a scenario (objectives and the
quantities the limits bound, dollars and watts from `economics`), the smooth
constraints, the structural rules (`plan.RULES`), the relaxed loss the
gradient method descends, and exact evaluation (`relax.EXACT`, vmapped, in chunks).
On a robust problem (`_robust.robust`) every metric is a statistic over the
problem's samples of its uncertain constants (`problem_metrics`).
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import chip as chip_lib
from .. import scenario as sc
from ..compiling import compiled
from ..model import economics, plan, step
from ..model.economics import Assumptions
from ..model.relax import EXACT, Smoothing, safe_log
from ..scenario import Scenario
from ._problem import (
    LIMITED,
    LIMITS,
    METRIC_PARTS,
    OBJECTIVES,
    Core,
    Problem,
    apply,
    domain,
    parts_of,
    to_values,
)

MU_END = 1e4  # the penalty weight at the end of the descent, and the exact evaluation's
CHUNK = 1024  # points per vmapped exact evaluation (candidate sets pad to it)
CHUNK_EVALUATIONS = 1 << 10  # at most this many model evaluations per chunk (robust: S a point)
_LIMITED = LIMITED


def metrics(scn: Scenario, a: Assumptions, t=EXACT, ownership=None,
            parts: tuple = step.PARTS) -> dict:
    """The objectives and constraint quantities of one scenario (jnp scalars):
    those the estimate's `parts` give (`METRIC_PARTS`; every one by default),
    nothing else traced;
    the dollars and watts are `economics`' under the problem's assumptions `a`
    (the estimate is priced with them). On a scenario with a chip design
    (`Scenario.chip`, priced under `ownership`) a GPU-hour costs the design's
    (`chip.to_assumptions`: its price depreciated, its energy) and the power is
    the facility's: the design's board power at the step's hardware FLOP
    utilisation (HBM and links at full load: the step reports no utilisation
    of them, so an upper bound) x GPUs x PUE, plus the scale-out fabric's
    (`economics.fabric_power_w`). Without the traced domain check: the
    problem's bounds were checked against the domains when it was built
    (`problem`), and a program without its host callback is stored by the
    persistent compilation cache, so a second `codesign optimize` of the same
    problem skips compiling."""
    if scn.chip is not None and "fabric" in parts:
        a = chip_lib.to_assumptions(scn.chip, a, ownership)
    est = step.estimate(scn, t, a, check=False, parts=parts)
    st, s = est.step, scn.system
    m = {"step_time_s": st.step_time_s, "tokens_per_s": st.tokens_per_s,
         "bubble_s": st.bubble_s, "mfu": st.mfu,
         "memory_bytes_per_gpu": st.memory.total_bytes,
         "memory_capacity_bytes": st.memory.capacity_bytes, "gpus": s.gpus}
    if est.reliability is not None:
        m |= {"time_to_train_s": est.time_to_train_s, "goodput": est.reliability.goodput,
              "gpu_hours": est.time_to_train_s * st.gpus / 3600.0}
    if est.fabric is not None:
        if scn.chip is None:
            power = economics.power_w(s, est.fabric, a)
        else:
            board = chip_lib.board_power_w(scn.chip, jnp.clip(st.hfu_gemm_peak, 0.0, 1.0))
            power = (board * s.gpus * ownership.pue
                     + economics.fabric_power_w(s, est.fabric, a))
        m |= {"fabric_capex_usd": est.fabric_capex_usd, "power_w": power}
        if est.reliability is not None:
            m |= {"cost_to_train_usd": economics.cost_to_train_usd(
                      m["gpu_hours"], est.fabric_capex_usd, m["time_to_train_s"], a),
                  "tokens_per_joule": m["tokens_per_s"] * m["goodput"] / power}
    return {k: m[k] for k in METRIC_PARTS if k in m}


# metrics for which more is better: a pessimistic quantile of them is the low one
HIGHER_IS_BETTER = frozenset({key for key, goal in OBJECTIVES.values() if goal < 0}
                             | {"mfu", "goodput"})


def perturbed(scn: Scenario, uncertain: tuple, factors: jax.Array) -> Scenario:
    """`scn` with each uncertain constant (U names) times its factor (U,),
    clipped to the constant's domain (an efficiency stays in (0, 1])."""
    for i, name in enumerate(uncertain):
        d = domain(name)
        value = jnp.clip(sc.get_knob(scn, name) * factors[i], d.lo, d.hi)
        scn = eqx.tree_at(lambda s, n=name: sc.get_knob(s, n), scn, value)
    return scn


def statistic(values: jax.Array, weights: jax.Array, higher_is_better: bool) -> jax.Array:
    """The statistic of a metric's values over the samples (S,): the weighted
    sum of the sorted values (`weights`: 1 / S for the mean, the Q-quantile's
    otherwise; reversed for a metric where more is better, so that it is the
    value the design reaches with probability Q). Taken relative to the
    smallest value, so that S equal values give that value exactly (and
    relative to 0 where it is not finite: inf stays inf)."""
    values = jnp.sort(values)
    weights = weights[::-1] if higher_is_better else weights
    base = jnp.where(jnp.isfinite(values[0]), values[0], 0.0)
    return base + jnp.sum(weights * (values - base))


def problem_metrics(core: Core, scn: Scenario, t=EXACT, parts: tuple | None = None) -> dict:
    """`metrics` of `scn` under the problem: the nominal model's, or on a robust
    problem each metric's `statistic` over the samples of the uncertain
    constants (vmapped; what does not depend on them is computed once). Only
    the metrics of the estimate's `parts` (None: those the problem's objective
    and limits need, `Core.parts`)."""
    parts = core.parts if parts is None else parts
    if core.uncertain is None:
        return metrics(scn, core.assumptions, t, core.ownership, parts)
    per = jax.vmap(lambda f: metrics(perturbed(scn, core.uncertain, f), core.assumptions,
                                     t, core.ownership, parts))(core.factors)
    return {k: statistic(v, core.weights, k in HIGHER_IS_BETTER)
            for k, v in per.items()}


def _log_ratio(a, b):
    return safe_log(a) - safe_log(b)


def constraints(core: Core, scn: Scenario, m: dict) -> jax.Array:
    """Log-ratio constraints g <= 0, in the order of `CONSTRAINTS`: memory, the
    three limits (about -690 when unset: a limit's metric the problem does not
    compute is taken as 1), and the orderings dp >= 1,
    micro-batches >= 1, ep x etp <= tp x cp x dp, pp x interleave <= layers, domain <= GPUs."""
    return jnp.stack(_constraint_terms(core, scn, m, LIMITS))


def _constraint_terms(core: Core, scn: Scenario, m: dict, limits: tuple) -> list:
    """The constraints of `constraints`, with only the named `limits`."""
    p, model = scn.plan, scn.model
    return [
        _log_ratio(m["memory_bytes_per_gpu"], m["memory_capacity_bytes"]),
        *(_log_ratio(m.get(_LIMITED[n], 1.0), core.limits[i]) for i, n in enumerate(LIMITS)
          if n in limits),
        *_chip_terms(scn),
        _log_ratio(1.0, p.dp),
        _log_ratio(p.dp * p.micro_batch, p.global_batch),
        _log_ratio(p.ep * p.expert_tp, p.tp * p.cp * p.dp),
        _log_ratio(p.pp * p.interleave, model.layers),
        _log_ratio(scn.system.scale_up_domain, scn.system.gpus),
    ]


def _chip_terms(scn: Scenario) -> list:
    """The chip design's physical domain across fields (`chip.physical_limits`:
    pins, stacks on the edges, dies within the reticle, interposer, board
    power) as log-ratio constraints; none without a design."""
    if scn.chip is None:
        return []
    return [_log_ratio(v, bound) for v, bound in chip_lib.physical_limits(scn.chip)]


def _measured(scn: Scenario, limits: tuple) -> int:
    """How many of `_constraint_terms` are measured (memory, the limits, the
    chip's physical domain); the rest are exact integer rules."""
    return 1 + len(limits) + (0 if scn.chip is None else len(chip_lib.PHYSICAL_LIMITS))


def structurally_feasible(scn: Scenario) -> jax.Array:
    """True where the plan meets every structural rule of `plan.RULES`
    (vmappable): those `plan.validate` checks (tp | heads and kv_heads, cp |
    seq_len, ep x etp | tp x cp x dp, ep | experts or ep = 1 without experts, dp micro_batch |
    global_batch, pp interleave <= layers, ...) and the optimiser's own (an
    integral dp >= 1, whole scale-up domains of whole nodes, ...)."""
    m, p, s = scn.model, scn.plan, scn.system
    return jnp.all(jnp.stack([jnp.asarray(r.holds(m, p, s)) for r in plan.RULES]))


def _objective(core: Core, m: dict):
    """(value of the objective, signed log: lower is better); an objective whose
    metric `m` lacks (not of `Core.parts`: not this problem's) is NaN."""
    nan = jnp.full_like(m["step_time_s"], jnp.nan)
    values = jnp.stack([m.get(key, nan) for key, _ in OBJECTIVES.values()])
    goals = jnp.asarray([goal for _, goal in OBJECTIVES.values()])
    value = values[core.objective]
    return value, goals[core.objective] * safe_log(value)


def _penalty(g: jax.Array, mu) -> jax.Array:
    """mu sum max(g, 0)^2: zero on feasible points (an active constraint costs
    nothing), continuously differentiable across the boundary."""
    return mu * jnp.sum(jnp.maximum(g, 0.0) ** 2)


def relaxed_loss(z: jax.Array, core: Core, t: Smoothing, mu) -> jax.Array:
    """The gradient method's objective at unit-box point z (K,): signed log
    objective + penalty, on the model relaxed by `t` (`relax.Relaxed(temperature)`;
    `relax.EXACT`: the exact model's loss); only the
    metrics of `Core.parts` are traced (what the objective and the set limits need)."""
    scn = apply(core, to_values(core, z))
    m = problem_metrics(core, scn, t)
    return _objective(core, m)[1] + _penalty(constraints(core, scn, m), mu)


class Exact(NamedTuple):
    """Exact (`relax.EXACT`) evaluation of a batch of points."""

    objective: jax.Array  # (n,) the objective's value
    loss: jax.Array  # (n,) signed log objective (lower is better)
    penalised: jax.Array  # (n,) loss + penalty at MU_END
    feasible: jax.Array  # (n,) bool: structural rules and every constraint
    structural: jax.Array  # (n,) bool: structural rules and integral varied integers
    metrics: dict  # name -> (n,) every quantity of `metrics`


def structural_point(core: Core, scn: Scenario, values: tuple) -> jax.Array:
    """The structural rules and integral values of the varied integer knobs."""
    if not values:  # nothing varied (`_problem.build`): the scenario's own plan
        return structurally_feasible(scn)
    x = jnp.stack(jnp.broadcast_arrays(*values))
    integral = jnp.all(jnp.where(core.integer > 0, plan.integral(x), True))
    return structurally_feasible(scn) & integral


def _exact_point(core: Core, values: tuple) -> Exact:
    """Exact evaluation of one point given as K knob values (scalars)."""
    scn = sc.set_knobs(core.scenario, dict(zip(core.coords, values, strict=True)))
    m = problem_metrics(core, scn, parts=step.PARTS)  # every metric: the points reported
    g = constraints(core, scn, m)
    value, loss = _objective(core, m)
    structural = structural_point(core, scn, values)
    feasible = structural & jnp.all(g <= 1e-12)
    return Exact(value, loss, loss + _penalty(g, MU_END), feasible, structural, m)


def grid_point(core: Core, values: tuple, outputs: tuple, limits: tuple,
                near_tol: float = 0.0):
    """(the metrics named in `outputs`, feasible, near) of one point as
    `_exact_point` computes them, with the outputs and the set limits static,
    so that nothing else is computed (nor traced: the estimate's parts they
    need, `parts_of`). A value not batched under `vmap` (a knob
    held fixed across a block of the grid) keeps what is computed from it
    alone out of the batch. `near` is True where a measured constraint (memory,
    the limits set: the first 1 + len(limits) terms; the others are exact
    integer rules; with a chip design, its physical domain's terms follow the
    limits) is within `near_tol` of its bound (log ratio), so that a
    lower precision could have decided it either way."""
    scn = sc.set_knobs(core.scenario, dict(zip(core.coords, values, strict=True)))
    m = problem_metrics(core, scn, parts=parts_of([*outputs, *(_LIMITED[n] for n in limits)]))
    g = jnp.stack(_constraint_terms(core, scn, m, limits))
    structural = structural_point(core, scn, values)
    feasible = structural & jnp.all(g <= 1e-12)
    n = _measured(scn, limits)
    measured = g[:n]
    near = structural & jnp.all(g[n:] <= 1e-12) & jnp.any(
        jnp.abs(measured) <= near_tol)
    return tuple(m[k] for k in outputs), feasible, near


@jax.jit
def exact_batch(core: Core, x: jax.Array) -> Exact:
    return jax.vmap(lambda xi: _exact_point(core, tuple(xi[i] for i in range(x.shape[1]))))(x)


def evaluate(prob: Problem, x, chunk: int = CHUNK) -> Exact:
    """Exact evaluation of points x (n, varied knobs), in padded chunks of
    `chunk` points (one compilation per process, problem's knobs and chunk
    size, with `compiling.CPU_COMPILER_OPTIONS` on the CPU; what the varied
    knobs do not touch, e.g. the failure statistics of a fixed GPU count, is
    computed once per chunk)."""
    return chunked(lambda core, xs: compiled(exact_batch, core, xs)[0](core, xs), prob.core, x,
                   chunk)


def chunk_points(core: Core, chunk: int) -> int:
    """The points of one chunk of `chunked`: `chunk`, fewer where a point costs
    `core.samples` evaluations (`CHUNK_EVALUATIONS`)."""
    return max(1, min(chunk, CHUNK_EVALUATIONS // core.samples))


def chunked(batch, core: Core, x, chunk: int) -> Exact:
    """`batch` (`exact_batch`, or an executable compiled from it for `chunk`
    points) over points x (n, K) in padded chunks of `chunk` points (fewer on
    a robust problem of many samples: `CHUNK_EVALUATIONS`), as numpy."""
    chunk = chunk_points(core, chunk)
    full = np.atleast_2d(np.asarray(x, dtype=float))
    parts = []
    for i in range(0, len(full), chunk):
        block = full[i:i + chunk]
        pad = np.concatenate([block, np.repeat(block[-1:], chunk - len(block), 0)])
        out = batch(core, jax.device_put(pad))  # jnp.asarray would compile a conversion
        parts.append(jax.tree.map(lambda a, n=len(block): np.asarray(a)[:n], out))
    return jax.tree.map(lambda *a: np.concatenate(a), *parts)


def concat_exact(a: Exact, b: Exact) -> Exact:
    return jax.tree.map(lambda u, v: np.concatenate([u, v]), a, b)


def point_metrics(prob: Problem, x) -> dict:
    """Every metric of one point (varied knob values), as floats."""
    return {k: float(v[0]) for k, v in evaluate(prob, x).metrics.items()}



"""A co-design problem: the knobs varied, their bounds and admissible values, the
objective and the limits (`problem`, `Problem`, `Core`), and the map between a
point in the unit box, knob values and a scenario (`to_values`, `to_box`,
`apply`). Integer knobs take the values the structural rules of
`plan.RULES` admit given the knobs held fixed (`admissible_values`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import chip as chip_lib
from .. import domains
from .. import scenario as sc
from ..model import plan, step
from ..model.economics import Assumptions
from ..scenario import Scenario

# the knobs whose declared domain is integers (`scenario.DOMAINS`)
# the knobs whose declared domain is integers (`scenario.DOMAINS`), and the chip's
# counts (HBM stacks, logic dies: relaxed in the gradient method, integers on the grid)
INTEGER_KNOBS = frozenset(k for k, d in sc.DOMAINS.items() if d.integer) | {
    "chip.hbm_stacks", "chip.dies"}


def domain(name: str) -> domains.Domain:
    """The declared domain of a knob: a scenario key's, or a `chip.*` field's."""
    return sc.chip_domain(name) if name in sc.CHIP_KNOBS else sc.DOMAINS[name]
# name -> (metric, goal): goal +1 minimises, -1 maximises
OBJECTIVES = {
    "step_time": ("step_time_s", 1.0),
    "tokens_per_s": ("tokens_per_s", -1.0),
    "time_to_train": ("time_to_train_s", 1.0),
    "cost_to_train_usd": ("cost_to_train_usd", 1.0),
    "tokens_per_joule": ("tokens_per_joule", -1.0),
}
_NEEDS_TOKENS = ("time_to_train", "cost_to_train_usd", "tokens_per_joule")
LIMITS = ("budget_usd", "budget_w", "max_gpus")  # -> metric each one limits
CONSTRAINTS = ("memory", *LIMITS, "dp>=1", "micro_batches>=1", "ep<=dp",
               "pp*interleave<=layers", "scale_up_domain<=gpus")
_NO_LIMIT = 1e300  # an unset limit: its log-ratio constraint is about -690
LIMITED = {"budget_usd": "cost_to_train_usd", "budget_w": "power_w", "max_gpus": "gpus"}
# metric -> the parts of the estimate beyond its step that it needs (`step.PARTS`):
# what is traced for a problem is what its objective and set limits need (`Core.parts`)
METRIC_PARTS = {
    "step_time_s": (), "tokens_per_s": (), "bubble_s": (), "mfu": (),
    "time_to_train_s": ("reliability",), "goodput": ("reliability",),
    "gpu_hours": ("reliability",), "cost_to_train_usd": ("reliability", "fabric"),
    "fabric_capex_usd": ("fabric",), "power_w": ("fabric",),
    "tokens_per_joule": ("reliability", "fabric"),
    "memory_bytes_per_gpu": (), "memory_capacity_bytes": (), "gpus": (),
}


def parts_of(names) -> tuple:
    """The parts of `step.PARTS` the metrics `names` need, in that order."""
    need = {p for n in names for p in METRIC_PARTS[n]}
    return tuple(p for p in step.PARTS if p in need)


def needed_parts(objective: str, limits) -> tuple:
    """The parts an objective (a name of `OBJECTIVES`) and the set `limits`
    (names of `LIMITS`) need; memory and the step are always computed."""
    return parts_of([OBJECTIVES[objective][0], *(LIMITED[n] for n in limits)])


def _reliability(scn: Scenario):
    return step.estimate(scn, check=False, parts=("reliability",)).reliability


# knobs whose 0 is not a point on their scale but a branch of the model, which
# derives the value there: (what 0 means, the value the model uses at 0). A
# knob at 0 ranges around that value (`default_bounds`), and bounds may not
# reach 0: the relaxed model would jump between the two branches
DERIVED_AT_ZERO = {
    "parallel.zero_shard_size": ("shard over all of dp x cp",
                                 lambda scn: scn.plan.dp * scn.plan.cp),
    "reliability.checkpoint_write_s": ("checkpoint bytes / reliability.storage_Bps",
                                       lambda scn: _reliability(scn).checkpoint_write_s),
    "reliability.checkpoint_interval_s": ("Daly's optimal interval",
                                          lambda scn: _reliability(scn).checkpoint_interval_s),
}


class Knob(NamedTuple):
    """One varied knob: its scenario key, bounds, and how it is relaxed."""

    name: str
    lo: float
    hi: float
    integer: bool
    log: bool  # unit-box coordinate is log-spaced (lo > 0)


class Core(eqx.Module):
    """What the compiled functions see. The varied knobs (`coords`) are static;
    their bounds, the objective and the limits are array leaves, so a new
    range, budget or objective reuses the compilation."""

    scenario: Scenario
    assumptions: Assumptions
    lo: jax.Array  # (K,) lower bounds of the K varied knobs
    hi: jax.Array  # (K,)
    logged: jax.Array  # (K,) 1.0 where the unit box is log-spaced (lo > 0)
    integer: jax.Array  # (K,) 1.0 for integer knobs
    objective: jax.Array  # () index into OBJECTIVES
    limits: jax.Array  # (3,) budget_usd, budget_w, max_gpus (_NO_LIMIT: none)
    coords: tuple = eqx.field(static=True)  # the K varied knobs' names
    # a robust problem (`_robust.robust`): the U uncertain constants' names (None:
    # the nominal model), their factors per sample (S, U) and the statistic's
    # weights over the sorted samples (S,): the mean and every quantile share a compilation
    uncertain: tuple | None = eqx.field(static=True, default=None)
    factors: jax.Array | None = None
    weights: jax.Array | None = None
    # a scenario with a chip design (`scenario.Scenario.chip`): what turns its
    # price and power into a GPU-hour and facility watts (`chip.Ownership`); None without
    ownership: chip_lib.Ownership | None = None
    # the parts of the estimate the objective and the set limits need
    # (`needed_parts`): the relaxed descent and the grid trace only those, so a
    # problem compiles once per parts and knobs, not once per objective
    parts: tuple = eqx.field(static=True, default=step.PARTS)

    @property
    def samples(self) -> int:
        """Model evaluations per point: the samples of a robust problem, else 1."""
        return 1 if self.uncertain is None else int(self.factors.shape[0])


class Problem(NamedTuple):
    """What to vary, within which bounds, for which objective, under which limits."""

    core: Core  # what the compiled descent and exact evaluation see
    knobs: tuple  # of Knob, the varied ones
    admissible: tuple  # per knob: np.ndarray of admissible integers, None if continuous
    objective: str
    limits: dict  # name -> value of the limits set
    uncertainty: object = None  # a robust problem's `_robust.Uncertainty`, else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    @property
    def scenario(self) -> Scenario:
        return self.core.scenario

    @property
    def here(self) -> np.ndarray:
        """The scenario's own values of the varied knobs (K,)."""
        return np.asarray([_knob_value(self.scenario, n) for n in self.names])

    def with_limits(self, objective: str | None = None, **limits) -> Problem:
        """The same knobs with another objective and/or limits (None removes
        one); shares the compilations of this problem where the objective and
        limits need the same parts of the estimate (`needed_parts`)."""
        objective = self.objective if objective is None else objective
        _check_objective(self.scenario, objective)
        active = dict(self.limits)
        for name, value in limits.items():
            if name not in LIMITS:
                raise ValueError(f"{name}= is not a limit; limits are {', '.join(LIMITS)}")
            if value is None:
                active.pop(name, None)
            else:
                _check_limit(name, value)
                active[name] = float(value)
        core = eqx.tree_at(lambda c: (c.objective, c.limits), self.core,
                           (_objective_index(objective), _limit_array(active)))
        core = dataclasses.replace(core, parts=needed_parts(objective, active))
        return self._replace(core=core, objective=objective, limits=active)


def _check_limit(name, value):
    if not float(value) > 0:
        raise ValueError(f"{name}={value} must be positive")


def _check_objective(scn: Scenario, objective: str):
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} is not one of {', '.join(OBJECTIVES)}")
    if objective in _NEEDS_TOKENS and float(scn.tokens) <= 0:
        raise ValueError(f"objective={objective!r} needs training.tokens > 0; the scenario "
                         "sets none (give `training.tokens`)")


def _objective_index(objective: str) -> jax.Array:
    return jnp.asarray(tuple(OBJECTIVES).index(objective))


def _limit_array(limits: dict) -> jax.Array:
    return jnp.asarray([float(limits.get(n, _NO_LIMIT)) for n in LIMITS])


def _knob_value(scn: Scenario, name: str) -> float:
    return float(sc.get_knob(scn, name))


def _structural_cap(scn: Scenario, name: str) -> float:
    """The largest value a knob can take whatever the others are."""
    m, p = scn.model, scn.plan
    caps = {"parallel.tp": m.heads, "parallel.cp": m.seq_len, "parallel.pp": m.layers,
            "parallel.interleave": m.layers, "parallel.ep": jnp.maximum(m.experts, 1.0),
            "training.micro_batch": p.global_batch}
    return float(caps[name]) if name in caps else math.inf


def default_bounds(scn: Scenario, name: str) -> tuple[float, float]:
    """A factor of 8 either side of the scenario's value (4 for continuous knobs),
    clipped to [1, structural cap] for integer knobs; for a knob at 0 that means
    a derived value (`DERIVED_AT_ZERO`), of the value the model derives."""
    v = _knob_value(scn, name)
    if v <= 0 and name in DERIVED_AT_ZERO:
        v = float(DERIVED_AT_ZERO[name][1](scn))
    if v <= 0:
        raise ValueError(f"{name}={v:g} in the scenario: give `bounds` {name}=LO:HI "
                         "(no default range around 0)")
    if name in sc.CHIP_KNOBS and name in INTEGER_KNOBS:  # a count within its domain
        d = domain(name)
        return max(d.lo, math.floor(v / 8)), min(math.ceil(v * 8), d.hi)
    if name in INTEGER_KNOBS:
        return max(1.0, math.floor(v / 8)), min(math.ceil(v * 8), _structural_cap(scn, name))
    return domain(name).clip(v / 4, v * 4)


def _reads(rule: plan.Rule, varied: tuple[str, ...]) -> set:
    """The knobs a rule depends on when `varied` are: its keys, and where it
    reads the one of dp and system.gpus that follows the other
    (`scenario.set_knobs`), what that one follows from."""
    reads = set(rule.reads)
    derived, sources = (("system.gpus", ("parallel.dp", *plan.DP_FROM[1:]))
                        if "parallel.dp" in varied else ("parallel.dp", plan.DP_FROM))
    return reads | set(sources) if derived in reads else reads


# The most integers one knob's admissible values are sought among (8 MB of float64):
# bounds spanning more are refused, and `neighbours` looks within NEIGHBOUR_SPAN
MAX_INTEGER_VALUES = 1_000_000
NEIGHBOUR_SPAN = 1 << 16


def admissible_values(scn: Scenario, name: str, lo: float, hi: float,
                      varied: tuple[str, ...]) -> np.ndarray:
    """Integers in [lo, hi] that satisfy the knob's own rules given the knobs
    not varied (a projection of divisibility onto each knob): a value is
    admissible iff every rule of `plan.RULES` that reads the knob and no other
    varied knob holds. At most `MAX_INTEGER_VALUES` integers: wider bounds are a
    ValueError naming the knob."""
    first, last = math.ceil(lo - 1e-9), math.floor(hi + 1e-9)
    if last - first + 1 > MAX_INTEGER_VALUES:
        raise ValueError(f"bounds {name}={lo:g}:{hi:g} span {last - first + 1:,} integers; at "
                         f"most {MAX_INTEGER_VALUES:,} (narrow them)")
    v = np.arange(first, last + 1, dtype=float)
    if name in sc.CHIP_KNOBS:  # no structural rule reads the chip
        return v
    values = {name: v}
    if "parallel.dp" in varied and name != "parallel.dp":  # system.gpus follows dp
        values["parallel.dp"] = sc.get_knob(scn, "parallel.dp")
    s = sc.set_knobs(scn, values)
    # in NumPy (as `plan.validate` checks them): no dispatch of each rule's operations
    m, p, system = jax.tree.map(np.asarray, (s.model, s.plan, s.system))
    keep = np.ones(v.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for rule in plan.RULES:
            reads = _reads(rule, varied)
            if name in reads and not (reads - {name}) & set(varied):
                keep &= np.broadcast_to(np.asarray(rule.holds(m, p, system)), v.shape)
    out = v[keep]
    if out.size == 0:
        raise ValueError(f"{name} has no admissible integer in [{lo:g}, {hi:g}] "
                         "(divisibility with the knobs held fixed)")
    return out


def neighbours(scn: Scenario, name: str) -> tuple[float | None, float | None]:
    """The integer knob `name`'s nearest admissible values below and above its
    value in the scenario (the other knobs held; `admissible_values` within
    `default_bounds` and `NEIGHBOUR_SPAN` of the value), None where there is
    none."""
    v = float(sc.get_knob(scn, name))
    lo, hi = default_bounds(scn, name)
    lo, hi = max(lo, v - NEIGHBOUR_SPAN), min(hi, v + NEIGHBOUR_SPAN)
    try:
        adm = admissible_values(scn, name, lo, hi, (name,))
    except ValueError:  # no range around 0, or no admissible integer in it
        return None, None
    below, above = adm[adm < v], adm[adm > v]
    return (float(below[-1]) if len(below) else None, float(above[0]) if len(above) else None)


def _parse_bounds(bounds) -> dict:
    out = {}
    for name, pair in (bounds or {}).items():
        lo, hi = (float(x) for x in pair)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi <= lo:
            raise ValueError(f"bounds {name}={lo:g}:{hi:g} must satisfy 0 <= LO < HI")
        if name in sc.DOMAINS or name in sc.CHIP_KNOBS:
            domains.check_range(name, domain(name), lo, hi)
        out[name] = (lo, hi)
    return out


def problem(scn: Scenario, vary, bounds=None, objective: str = "step_time", *,
            budget_usd=None, budget_w=None, max_gpus=None,
            assumptions: Assumptions | None = None,
            ownership: chip_lib.Ownership | None = None) -> Problem:
    """A co-design problem on `scn`: vary the knobs `vary` (scenario keys) within
    `bounds` ({knob: (lo, hi)}, default `default_bounds`) to optimise `objective`
    under the limits given (None: no limit).

    On a scenario with a chip design (a [chip] table: `scenario.Scenario.chip`)
    the `chip.*` keys are knobs too (HBM stacks and dies counts), the
    GPU-hour is the design's (`chip.usd_per_gpu_hour` under `ownership`,
    default `chip.Ownership()`: its price depreciated plus its energy), the
    power `budget_w` limits is the facility's (board power at the step's
    hardware FLOP utilisation x GPUs x PUE, plus the fabric's) and the
    design's physical domain across fields (`chip.physical_limits`) is kept
    as constraints."""
    vary = tuple(dict.fromkeys(vary))
    if not vary:
        raise ValueError("vary=() names no knob; give at least one scenario key")
    return build(scn, vary, bounds, objective, budget_usd=budget_usd, budget_w=budget_w,
                 max_gpus=max_gpus, assumptions=assumptions, ownership=ownership)


def build(scn: Scenario, vary: tuple, bounds=None, objective: str = "step_time", *,
          budget_usd=None, budget_w=None, max_gpus=None,
          assumptions: Assumptions | None = None,
          ownership: chip_lib.Ownership | None = None) -> Problem:
    """`problem`, where `vary` may be empty: the scenario alone, evaluated as it
    is (what `_categorical` solves at a combination of choices when no number
    is varied)."""
    for name in vary:
        if name in sc.KEYS and sc.KEYS[name].declaration.kind is not float:
            raise ValueError(f"{name} is a choice, not a number: vary it with "
                             "optimize.categorical_search (codesign optimize --vary)")
        sc.get_knob(scn, name)
    _check_objective(scn, objective)
    if "parallel.dp" in vary and "system.gpus" in vary:
        raise ValueError("vary parallel.dp or system.gpus, not both (gpus = dp tp pp cp)")
    given = _parse_bounds(bounds)
    unknown = set(given) - set(vary)
    if unknown:
        raise ValueError(f"bounds for {', '.join(sorted(unknown))}, which is not varied "
                         "(add it to `vary`)")
    limits = {n: v for n, v in (("budget_usd", budget_usd), ("budget_w", budget_w),
                                ("max_gpus", max_gpus)) if v is not None}
    for name, value in limits.items():
        _check_limit(name, value)
    knobs, admissible = [], []
    for name in vary:
        lo, hi = given.get(name) or default_bounds(scn, name)
        if lo <= 0 and name in DERIVED_AT_ZERO:
            raise ValueError(f"bounds {name}={lo:g}:{hi:g} reach 0, which is no value of "
                             f"{name} but the model's own choice ({DERIVED_AT_ZERO[name][0]}):"
                             " give LO > 0")
        integer = name in INTEGER_KNOBS
        if integer and (lo != math.floor(lo) or hi != math.floor(hi)):
            raise ValueError(f"bounds {name}={lo:g}:{hi:g} must be integers ({name} is a count)")
        knobs.append(Knob(name, lo, hi, integer, lo > 0))
        admissible.append(admissible_values(scn, name, lo, hi, vary) if integer else None)
    a = assumptions or Assumptions()
    goal, limit = _objective_index(objective), _limit_array(limits)
    box = (jnp.asarray([getattr(k, n) for k in knobs], dtype=float)
           for n in ("lo", "hi", "log", "integer"))
    if scn.chip is not None:
        ownership = ownership or chip_lib.Ownership()
    elif ownership is not None:
        raise ValueError("ownership prices a chip design; the scenario has no [chip] table")
    core = Core(scn, a, *box, goal, limit, coords=vary, ownership=ownership,
                parts=needed_parts(objective, limits))
    return Problem(core, tuple(knobs), tuple(admissible), objective,
                   {n: float(v) for n, v in limits.items()})


def to_values(core: Core, z: jax.Array) -> jax.Array:
    """Unit-box coordinates (K,) -> knob values: log-spaced between the bounds
    where lo > 0, linear otherwise."""
    logged = core.logged > 0
    safe_lo = jnp.where(logged, core.lo, 1.0)
    safe_hi = jnp.where(logged, core.hi, 2.0)
    geometric = safe_lo * jnp.exp(z * jnp.log(safe_hi / safe_lo))
    return jnp.where(logged, geometric, core.lo + z * (core.hi - core.lo))


def to_box(prob: Problem, x: np.ndarray) -> np.ndarray:
    """Knob values (..., K) -> unit-box coordinates (inverse of `to_values`), clipped."""
    x = np.asarray(x, dtype=float)
    out = np.empty(x.shape)
    for i, k in enumerate(prob.knobs):
        if k.log:
            out[..., i] = np.log(np.maximum(x[..., i], k.lo) / k.lo) / np.log(k.hi / k.lo)
        else:
            out[..., i] = (x[..., i] - k.lo) / (k.hi - k.lo)
    return np.clip(out, 0.0, 1.0)


def apply(core: Core, x: jax.Array) -> Scenario:
    """The scenario with the varied knobs set to `x` (K,) (`scenario.set_knobs`:
    dp follows system.gpus, or system.gpus follows dp when dp is varied)."""
    return sc.set_knobs(core.scenario, {n: x[i] for i, n in enumerate(core.coords)})


"""Gradient co-design of hardware and plan knobs, checked against the exhaustive grid.

A `Problem` names the knobs to vary (scenario keys, `scenario.KNOBS`), their
bounds, an objective and the constraints. Two methods solve it:

- `optimize` (gradient). Every knob lives in a unit box z in [0, 1]: log-spaced
  between its bounds when the lower bound is positive (integer knobs become
  positive reals optimised in log space), linear otherwise. The relaxed model
  (`step.estimate(scn, t)`: smooth ceil/max/min with temperature t) is
  minimised by projected Adam (optax; projection = clip to the box) from many
  random starts in one vmapped, scanned run, while t anneals geometrically
  from `T_START` to `T_END` and the penalty weight mu grows from `MU_START` to
  `MU_END`. Smooth constraints (memory per GPU, budgets in dollars and watts,
  GPU count, dp >= 1, micro-batches >= 1, ep <= dp, pp x interleave <= layers,
  scale-up domain <= GPUs) are log-ratios g <= 0 with the penalty
  mu max(g, 0)^2. Divisibility is a projection: every integer knob
  has an admissible set (integers in its bounds that satisfy its own rules:
  tp | heads, cp | seq_len, ep | experts, micro_batch | global_batch, a
  divisor of a fixed GPU count, ...), and each start's continuous optimum is
  rounded to the admissible values that bracket it (the product over knobs).
  The candidates are evaluated exactly (t = 0, vmapped) against the exact
  structural rules (`structurally_feasible`: the rules of `plan.validate` plus
  whole scale-up domains of whole nodes), refined by a beam search on the
  lattice (one integer knob moved up to `SINGLE_STEPS` admissible values, or
  two moved one each), and the continuous knobs of the best few are polished
  by Adam on the exact model with the integers fixed. The best feasible point
  wins; `Result.path` records the way there.
- `grid_search` (the yardstick). The Cartesian product of every admissible
  value of every integer knob and `grid_points` values of every continuous knob
  (log-spaced when the lower bound is positive), evaluated exactly; returns the
  true optimum on the grid. Large grids stream: one compiled kernel enumerates
  points on the device from their index, evaluates fixed-size blocks (knobs
  the failure statistics depend on held fixed within a block) and keeps the
  best few of each block on the device, so host memory is flat in the grid
  size; a progress bar on stderr shows points per second. `grid_pareto`
  streams the grid's exact Pareto front in two metrics the same way.

Objectives (`OBJECTIVES`): step time, tokens per second, time to train (with
goodput), cost to train in dollars and tokens per joule; `Assumptions` holds
the prices and the amortisation they need (each labelled). `pareto_front`
traces time against cost. `elasticities` gives d log(output) / d log(knob) for
every hardware, plan and reliability knob by `jax.jacrev` at t = 0.

Evaluations are counted as model evaluations: one exact evaluation, or one
value-and-gradient of the relaxed model (which costs a few forward passes;
wall time is reported beside it).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import _domains
from . import scenario as sc
from . import step as S
from .relax import safe_log, smooth_ceil
from .scenario import Scenario
from .units import GB, day

# ------------------------------------------------------------------ knobs
INTEGER_KNOBS = frozenset({
    "parallel.tp", "parallel.pp", "parallel.dp", "parallel.cp", "parallel.ep",
    "parallel.interleave", "parallel.moe_node_limit", "training.micro_batch",
    "training.global_batch", "system.gpus", "system.scale_up_domain",
    "system.gpus_per_node", "system.pod_size",
    *(f"model.{k}" for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len",
                             "vocab", "moe_layers", "experts", "shared_experts", "top_k",
                             "expert_ffn_hidden")),
})
# Sensitivity: every hardware, plan and reliability knob (the workload and the
# token count are what is trained, not how), of these outputs (positive, so
# their logarithm has a derivative).
SENSITIVITY_KNOBS = tuple(k for k in sc.KNOBS
                          if not k.startswith("model.") and k != "training.tokens")
SENSITIVITY_OUTPUTS = ("step_time_s", "tokens_per_s", "time_to_train_s", "gpu_hours",
                       "expected_step_time_s", "memory_bytes_per_gpu", "mfu", "goodput")

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
_LIMITED = {"budget_usd": "cost_to_train_usd", "budget_w": "power_w", "max_gpus": "gpus"}
CONSTRAINTS = ("memory", *LIMITS, "dp>=1", "micro_batches>=1", "ep<=dp",
               "pp*interleave<=layers", "scale_up_domain<=gpus")
_NO_LIMIT = 1e300  # an unset limit: its log-ratio constraint is about -690


# Optimiser settings (numerical choices, not physics).
T_START, T_END = 0.3, 1e-3  # relaxation temperature, annealed geometrically
MU_START, MU_END = 10.0, 1e4  # penalty weight, grown geometrically
LEARNING_RATE = 0.05  # Adam step in unit-box coordinates, cosine-decayed to 5% of it
SINGLE_STEPS = 3  # lattice search: one knob moves up to this many admissible values
CHUNK = 1024  # points per vmapped exact evaluation (candidate sets pad to it)
# The streamed grid (`grid_search`): blocks of GRID_BLOCK points (vmapped),
# GRID_CALL_POINTS points per device call (a scan over blocks; one progress
# update), the GRID_TOP best kept. Knobs in GRID_HOISTED (those the failure and
# straggler statistics depend on: a quadrature per GPU count) are enumerated
# outermost and held fixed within a block, so what depends on them alone is
# computed once per block instead of once per point.
GRID_BLOCK = 4096
GRID_CALL_POINTS = 1 << 18
GRID_TOP = 16
GRID_HOISTED = ("system.gpus", "parallel.dp")
GRID_STREAM_MIN = 1 << 16  # smaller grids go through `evaluate` (no kernel to compile)


class Knob(NamedTuple):
    """One varied knob: its scenario key, bounds, and how it is relaxed."""

    name: str
    lo: float
    hi: float
    integer: bool
    log: bool  # unit-box coordinate is log-spaced (lo > 0)



class Assumptions(eqx.Module):
    """Prices and lifetimes the dollar and energy objectives need.

    Every number is an ASSUMPTION (order of magnitude, 2024) unless a source is
    given; override them (CLI: --usd-per-gpu-hour, --fabric-lifetime-years).
    - usd_per_gpu_hour = 2: the GPU and its server, hosted and powered (cloud
      reserved pricing for A100/H100-class GPUs is of this order).
    - fabric_lifetime_s = 4 years: straight-line amortisation of the fabric,
      a common server depreciation period; a run is charged
      fabric_capex x time_to_train / lifetime.
    - port_Bps = 400 Gb/s: the port generation `fabric.Prices` prices; a
      scale-out bandwidth B per GPU takes B / port_Bps such rails, so the
      scale-out inventory's cost and power scale by that factor (continuous:
      a relaxation of the rail count).
    - scale_up_link_Bps = 25 GB/s: one NVLink4 link per direction (vendor:
      900 GB/s bidirectional over 18 links); a GPU needs B_up / link of them.
    - scale_up_switch_radix = 64: NVLink4 ports on a third-generation NVSwitch
      chip (vendor datasheet). A domain of D GPUs is a non-blocking fat tree
      of such switches per link plane: L levels, 2L - 1 switch ports per link.
    - scale_up_usd_per_port = 150: ASSUMPTION, one NVSwitch port with its
      share of the switch, board and copper.
    """

    usd_per_gpu_hour: jax.Array
    fabric_lifetime_s: jax.Array
    port_Bps: jax.Array
    scale_up_link_Bps: jax.Array
    scale_up_switch_radix: jax.Array
    scale_up_usd_per_port: jax.Array

    def __init__(self, usd_per_gpu_hour=2.0, fabric_lifetime_s=4 * 365.25 * day,
                 port_Bps=400e9 / 8, scale_up_link_Bps=25 * GB, scale_up_switch_radix=64.0,
                 scale_up_usd_per_port=150.0):
        f = lambda v: jnp.asarray(v, dtype=float)  # noqa: E731
        self.usd_per_gpu_hour = f(usd_per_gpu_hour)
        self.fabric_lifetime_s = f(fabric_lifetime_s)
        self.port_Bps = f(port_Bps)
        self.scale_up_link_Bps = f(scale_up_link_Bps)
        self.scale_up_switch_radix = f(scale_up_switch_radix)
        self.scale_up_usd_per_port = f(scale_up_usd_per_port)

    def __repr__(self) -> str:
        """The prices and lifetimes with their units (concrete values; the
        field-by-field form when traced)."""
        v = {f: _concrete(getattr(self, f)) for f in (
            "usd_per_gpu_hour", "fabric_lifetime_s", "port_Bps", "scale_up_link_Bps",
            "scale_up_switch_radix", "scale_up_usd_per_port")}
        if any(x is None for x in v.values()):
            return eqx.tree_pformat(self)
        return (f"Assumptions(${v['usd_per_gpu_hour']:.4g} per GPU-hour, fabric lifetime "
                f"{v['fabric_lifetime_s'] / (365.25 * day):.4g} years, port "
                f"{v['port_Bps'] * 8 / 1e9:.4g} Gb/s, scale-up link "
                f"{v['scale_up_link_Bps'] / GB:.4g} GB/s, switch radix "
                f"{v['scale_up_switch_radix']:.4g}, ${v['scale_up_usd_per_port']:.4g} per "
                "scale-up port)")

    def __check_init__(self):
        for name in ("usd_per_gpu_hour", "fabric_lifetime_s", "port_Bps", "scale_up_link_Bps",
                     "scale_up_usd_per_port"):
            _check_positive(name, getattr(self, name))
        radix = _concrete(self.scale_up_switch_radix)
        if radix is not None and not radix >= 4:
            raise ValueError(f"scale_up_switch_radix={radix:g} must be at least 4")


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


class Problem(NamedTuple):
    """What to vary, within which bounds, for which objective, under which limits."""

    core: Core  # what the compiled descent and exact evaluation see
    knobs: tuple  # of Knob, the varied ones
    admissible: tuple  # per knob: np.ndarray of admissible integers, None if continuous
    objective: str
    limits: dict  # name -> value of the limits set

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    @property
    def scenario(self) -> Scenario:
        return self.core.scenario

    def with_limits(self, objective: str | None = None, **limits) -> Problem:
        """The same knobs with another objective and/or limits (None removes
        one); shares the compilations of this problem."""
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
        return self._replace(core=core, objective=objective, limits=active)


def _concrete(value) -> float | None:
    try:
        return float(np.asarray(value))
    except (TypeError, jax.errors.ConcretizationTypeError):
        return None


def _check_positive(name, value):
    v = _concrete(value)
    if v is not None and not v > 0:
        raise ValueError(f"{name}={v:g} must be positive")


def _check_limit(name, value):
    if not float(value) > 0:
        raise ValueError(f"{name}={value} must be positive")


def _check_objective(scn: Scenario, objective: str):
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} is not one of {', '.join(OBJECTIVES)}")
    if objective in _NEEDS_TOKENS and float(scn.tokens) <= 0:
        raise ValueError(f"objective={objective!r} needs training.tokens > 0; the scenario "
                         "sets none (add --set training.tokens=...)")


def _objective_index(objective: str) -> jax.Array:
    return jnp.asarray(tuple(OBJECTIVES).index(objective))


def _limit_array(limits: dict) -> jax.Array:
    return jnp.asarray([float(limits.get(n, _NO_LIMIT)) for n in LIMITS])


# --------------------------------------------------------------- problems
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
    clipped to [1, structural cap] for integer knobs."""
    v = _knob_value(scn, name)
    if v <= 0:
        raise ValueError(f"{name}={v:g} in the scenario: give --bounds {name}=LO:HI "
                         "(no default range around 0)")
    if name in INTEGER_KNOBS:
        return max(1.0, math.floor(v / 8)), min(math.ceil(v * 8), _structural_cap(scn, name))
    return _domains.DOMAINS[name].clip(v / 4, v * 4) if name in _domains.DOMAINS \
        else (v / 4, v * 4)


def _divisors_ok(values: np.ndarray, of: float) -> np.ndarray:
    return np.isclose(np.mod(of, values), 0.0) | np.isclose(np.mod(of, values), values)


def admissible_values(scn: Scenario, name: str, lo: float, hi: float,
                      varied: tuple[str, ...]) -> np.ndarray:
    """Integers in [lo, hi] that satisfy the knob's own rules given the knobs
    not varied (a projection of divisibility onto each knob)."""
    v = np.arange(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1, dtype=float)
    m, p, s = scn.model, scn.plan, scn.system
    gpus_fixed = "system.gpus" not in varied and "parallel.dp" not in varied
    fixed = lambda k: k not in varied  # noqa: E731
    keep = np.ones_like(v, dtype=bool)
    if name == "parallel.tp" and fixed("model.heads") and fixed("model.kv_heads"):
        keep &= _divisors_ok(v, float(m.heads)) & _divisors_ok(v, float(m.kv_heads))
    if name == "parallel.cp" and fixed("model.seq_len"):
        keep &= _divisors_ok(v, float(m.seq_len))
    if name in ("parallel.tp", "parallel.pp", "parallel.cp", "system.scale_up_domain") \
            and gpus_fixed:
        keep &= _divisors_ok(v, float(s.gpus))
    if name == "parallel.pp" and fixed("parallel.interleave") and fixed("model.layers"):
        keep &= v * float(p.interleave) <= float(m.layers)
    if name == "parallel.interleave":
        if p.schedule != "interleaved":
            keep &= v == 1
        elif fixed("parallel.pp") and fixed("model.layers"):
            keep &= v * float(p.pp) <= float(m.layers)
    if name == "parallel.ep":
        if float(m.moe_layers) > 0 and fixed("model.experts"):
            keep &= _divisors_ok(v, float(m.experts))
        elif float(m.moe_layers) == 0:
            keep &= v == 1
    if name == "training.micro_batch" and fixed("training.global_batch"):
        keep &= _divisors_ok(v, float(p.global_batch))
    if name == "system.gpus" and fixed("system.scale_up_domain"):
        keep &= np.isclose(np.mod(v, float(s.scale_up_domain)), 0.0)
    if name in ("system.gpus", "system.scale_up_domain") and fixed("system.gpus_per_node"):
        keep &= np.isclose(np.mod(v, float(s.gpus_per_node)), 0.0)  # whole nodes
    model_parallel = ("parallel.tp", "parallel.pp", "parallel.cp")
    if name == "system.gpus" and all(fixed(k) for k in model_parallel):
        width = float(p.tp * p.pp * p.cp)
        keep &= np.isclose(np.mod(v, width), 0.0)  # an integral dp
        if fixed("training.global_batch") and fixed("training.micro_batch"):
            keep &= _divisors_ok(v / width, float(p.global_batch / p.micro_batch))
    if name == "parallel.dp" and fixed("training.global_batch") and fixed("training.micro_batch"):
        keep &= _divisors_ok(v, float(p.global_batch / p.micro_batch))
    out = v[keep]
    if out.size == 0:
        raise ValueError(f"{name} has no admissible integer in [{lo:g}, {hi:g}] "
                         "(divisibility with the knobs held fixed)")
    return out


def _parse_bounds(bounds) -> dict:
    out = {}
    for name, pair in (bounds or {}).items():
        lo, hi = (float(x) for x in pair)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi <= lo:
            raise ValueError(f"bounds {name}={lo:g}:{hi:g} must satisfy 0 <= LO < HI")
        _domains.check_range(name, lo, hi)
        out[name] = (lo, hi)
    return out


def problem(scn: Scenario, vary, bounds=None, objective: str = "step_time", *,
            budget_usd=None, budget_w=None, max_gpus=None,
            assumptions: Assumptions | None = None) -> Problem:
    """A co-design problem on `scn`: vary the knobs `vary` (scenario keys) within
    `bounds` ({knob: (lo, hi)}, default `default_bounds`) to optimise `objective`
    under the limits given (None: no limit)."""
    vary = tuple(dict.fromkeys(vary))
    if not vary:
        raise ValueError("vary=() names no knob; give at least one scenario key")
    for name in vary:
        sc.get_knob(scn, name)
    _check_objective(scn, objective)
    if "parallel.dp" in vary and "system.gpus" in vary:
        raise ValueError("vary parallel.dp or system.gpus, not both (gpus = dp tp pp cp)")
    given = _parse_bounds(bounds)
    unknown = set(given) - set(vary)
    if unknown:
        raise ValueError(f"bounds for {', '.join(sorted(unknown))}, which is not varied "
                         "(add it to --vary)")
    limits = {n: v for n, v in (("budget_usd", budget_usd), ("budget_w", budget_w),
                                ("max_gpus", max_gpus)) if v is not None}
    for name, value in limits.items():
        _check_limit(name, value)
    knobs, admissible = [], []
    for name in vary:
        lo, hi = given.get(name) or default_bounds(scn, name)
        integer = name in INTEGER_KNOBS
        if integer and (lo != math.floor(lo) or hi != math.floor(hi)):
            raise ValueError(f"bounds {name}={lo:g}:{hi:g} must be integers ({name} is a count)")
        knobs.append(Knob(name, lo, hi, integer, lo > 0))
        admissible.append(admissible_values(scn, name, lo, hi, vary) if integer else None)
    f = lambda v: jnp.asarray(v, dtype=float)  # noqa: E731
    a = assumptions or Assumptions()
    goal, limit = _objective_index(objective), _limit_array(limits)
    box = (f([getattr(k, n) for k in knobs]) for n in ("lo", "hi", "log", "integer"))
    core = Core(scn, a, *box, goal, limit, coords=vary)
    return Problem(core, tuple(knobs), tuple(admissible), objective,
                   {n: float(v) for n, v in limits.items()})


# ------------------------------------------------------------- the model
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


def _fat_tree_levels(endpoints, radix, t=0.0) -> jax.Array:
    """Levels of a non-blocking fat tree of radix-R switches over E endpoints,
    max(1, ceil(log(E/2) / log(R/2))) as `fabric.fat_tree_levels`, with the
    ceil relaxed by temperature t (exact at t = 0)."""
    x = safe_log(endpoints / 2.0) / jnp.log(radix / 2.0)
    return jnp.maximum(smooth_ceil(x - 1e-9, t), 1.0)


def fabric_capex_usd(scn: Scenario, est: S.Estimate, a: Assumptions, t=0.0) -> jax.Array:
    """Scale-out inventory scaled to the bandwidth (rails of `port_Bps`), plus the
    scale-up switching: (2L - 1) ports per link, B_up / link links per GPU."""
    s = scn.system
    rails = s.scale_out.bandwidth_Bps / a.port_Bps
    levels = _fat_tree_levels(s.scale_up_domain, a.scale_up_switch_radix, t)
    links = s.scale_up.bandwidth_Bps / a.scale_up_link_Bps
    up = (s.scale_up_domain > 1) * (2.0 * levels - 1.0) * links * a.scale_up_usd_per_port
    return est.fabric.cost_usd * rails + up * s.gpus


def metrics(scn: Scenario, a: Assumptions, t=0.0) -> dict:
    """The objectives and constraint quantities of one scenario (jnp scalars)."""
    est = S.estimate(scn, t)
    out = S.outputs(est)
    s = scn.system
    rails = s.scale_out.bandwidth_Bps / a.port_Bps
    power = s.chip.tdp_w * s.gpus + est.fabric.power_w * rails
    capex = fabric_capex_usd(scn, est, a, t)
    ttt = out["time_to_train_s"]
    return {
        "step_time_s": out["step_time_s"], "tokens_per_s": out["tokens_per_s"],
        "bubble_s": out["breakdown_pp_bubble_s"], "mfu": out["mfu"],
        "time_to_train_s": ttt, "goodput": out["goodput"],
        "gpu_hours": out["gpu_hours"],
        "cost_to_train_usd": out["gpu_hours"] * a.usd_per_gpu_hour
        + capex * ttt / a.fabric_lifetime_s,
        "fabric_capex_usd": capex, "power_w": power,
        "tokens_per_joule": out["tokens_per_s"] * out["goodput"] / power,
        "memory_bytes_per_gpu": out["memory_bytes_per_gpu"],
        "memory_capacity_bytes": out["memory_capacity_bytes"], "gpus": s.gpus,
    }


def _log_ratio(a, b):
    return safe_log(a) - safe_log(b)


def constraints(core: Core, scn: Scenario, m: dict) -> jax.Array:
    """Log-ratio constraints g <= 0, in the order of `CONSTRAINTS`: memory, the
    three limits (about -690 when unset), and the orderings dp >= 1,
    micro-batches >= 1, ep <= dp, pp x interleave <= layers, domain <= GPUs."""
    return jnp.stack(_constraint_terms(core, scn, m, LIMITS))


def _constraint_terms(core: Core, scn: Scenario, m: dict, limits: tuple) -> list:
    """The constraints of `constraints`, with only the named `limits`."""
    p, model = scn.plan, scn.model
    return [
        _log_ratio(m["memory_bytes_per_gpu"], m["memory_capacity_bytes"]),
        *(_log_ratio(m[_LIMITED[n]], core.limits[i]) for i, n in enumerate(LIMITS)
          if n in limits),
        _log_ratio(1.0, p.dp),
        _log_ratio(p.dp * p.micro_batch, p.global_batch),
        _log_ratio(p.ep, p.dp),
        _log_ratio(p.pp * p.interleave, model.layers),
        _log_ratio(scn.system.scale_up_domain, scn.system.gpus),
    ]


def _is_int(x):
    return jnp.abs(x - jnp.round(x)) <= 1e-9 * jnp.maximum(1.0, jnp.abs(x))


def _divides(a, b):
    return _is_int(b / a)


def structurally_feasible(scn: Scenario) -> jax.Array:
    """True where the plan meets the exact structural rules (vmappable): the
    rules of `plan.validate` (tp | heads, tp | kv_heads, cp | seq_len, ep | dp,
    ep | experts or ep = 1 without experts, dp micro_batch | global_batch,
    pp interleave <= layers, interleave 1 unless interleaved), an integral
    dp >= 1, whole scale-up domains (domain | gpus) of whole nodes
    (gpus_per_node | domain)."""
    m, p, s = scn.model, scn.plan, scn.system
    moe = m.moe_layers > 0
    ok = [_divides(p.tp, m.heads), _divides(p.tp, m.kv_heads), _divides(p.cp, m.seq_len),
          _divides(p.ep, p.dp),
          jnp.where(moe, _divides(p.ep, jnp.maximum(m.experts, 1.0)), p.ep == 1.0),
          _divides(p.dp * p.micro_batch, p.global_batch),
          p.pp * p.interleave <= m.layers + 1e-9, _is_int(p.dp), p.dp >= 1.0 - 1e-9,
          _divides(s.scale_up_domain, s.gpus), _divides(s.gpus_per_node, s.scale_up_domain)]
    if p.schedule != "interleaved":
        ok.append(p.interleave == 1.0)
    return jnp.all(jnp.stack(ok))


def _objective(core: Core, m: dict):
    """(value of the objective, signed log: lower is better)."""
    values = jnp.stack([m[key] for key, _ in OBJECTIVES.values()])
    goals = jnp.asarray([goal for _, goal in OBJECTIVES.values()])
    value = values[core.objective]
    return value, goals[core.objective] * safe_log(value)


def _penalty(g: jax.Array, mu) -> jax.Array:
    """mu sum max(g, 0)^2: zero on feasible points (an active constraint costs
    nothing), continuously differentiable across the boundary."""
    return mu * jnp.sum(jnp.maximum(g, 0.0) ** 2)


def relaxed_loss(z: jax.Array, core: Core, t, mu) -> jax.Array:
    """The gradient method's objective at unit-box point z (K,): signed log
    objective + penalty, on the model relaxed at temperature t."""
    scn = apply(core, to_values(core, z))
    m = metrics(scn, core.assumptions, t)
    return _objective(core, m)[1] + _penalty(constraints(core, scn, m), mu)


class Exact(NamedTuple):
    """Exact (t = 0) evaluation of a batch of points."""

    objective: jax.Array  # (n,) the objective's value
    loss: jax.Array  # (n,) signed log objective (lower is better)
    penalised: jax.Array  # (n,) loss + penalty at MU_END
    feasible: jax.Array  # (n,) bool: structural rules and every constraint
    structural: jax.Array  # (n,) bool: structural rules and integral varied integers
    metrics: dict  # name -> (n,) every quantity of `metrics`


def _structural_point(core: Core, scn: Scenario, values: tuple) -> jax.Array:
    """The structural rules and integral values of the varied integer knobs."""
    x = jnp.stack(jnp.broadcast_arrays(*values))
    integral = jnp.all(jnp.where(core.integer > 0, _is_int(x), True))
    return structurally_feasible(scn) & integral


def _exact_point(core: Core, values: tuple) -> Exact:
    """Exact evaluation of one point given as K knob values (scalars)."""
    scn = sc.set_knobs(core.scenario, dict(zip(core.coords, values, strict=True)))
    m = metrics(scn, core.assumptions)
    g = constraints(core, scn, m)
    value, loss = _objective(core, m)
    structural = _structural_point(core, scn, values)
    feasible = structural & jnp.all(g <= 1e-12)
    return Exact(value, loss, loss + _penalty(g, MU_END), feasible, structural, m)


def _grid_point(core: Core, values: tuple, outputs: tuple, limits: tuple):
    """(the metrics named in `outputs`, feasible) of one point as `_exact_point`
    computes them, with the outputs and the set limits static, so that nothing
    else is computed. A value not batched under `vmap` (a knob held fixed
    across a block of the grid) keeps what is computed from it alone out of
    the batch."""
    scn = sc.set_knobs(core.scenario, dict(zip(core.coords, values, strict=True)))
    m = metrics(scn, core.assumptions)
    g = jnp.stack(_constraint_terms(core, scn, m, limits))
    feasible = _structural_point(core, scn, values) & jnp.all(g <= 1e-12)
    return tuple(m[k] for k in outputs), feasible


@jax.jit
def _exact_batch(core: Core, x: jax.Array) -> Exact:
    return jax.vmap(lambda xi: _exact_point(core, tuple(xi[i] for i in range(x.shape[1]))))(x)


def evaluate(prob: Problem, x, chunk: int = CHUNK) -> Exact:
    """Exact evaluation of points x (n, varied knobs), in padded chunks of
    `chunk` points (one compilation per problem's knobs and chunk size; what
    the varied knobs do not touch, e.g. the failure statistics of a fixed GPU
    count, is computed once per chunk)."""
    full = np.atleast_2d(np.asarray(x, dtype=float))
    parts = []
    for i in range(0, len(full), chunk):
        block = full[i:i + chunk]
        pad = np.concatenate([block, np.repeat(block[-1:], chunk - len(block), 0)])
        out = _exact_batch(prob.core, jnp.asarray(pad))
        parts.append(jax.tree.map(lambda a, n=len(block): np.asarray(a)[:n], out))
    return jax.tree.map(lambda *a: np.concatenate(a), *parts)


def _concat(a: Exact, b: Exact) -> Exact:
    return jax.tree.map(lambda u, v: np.concatenate([u, v]), a, b)


def point_metrics(prob: Problem, x) -> dict:
    """Every metric of one point (varied knob values), as floats."""
    return {k: float(v[0]) for k, v in evaluate(prob, x).metrics.items()}


# ------------------------------------------------------------- results
class Result(NamedTuple):
    method: str  # "gradient" or "grid"
    objective: str
    goal: str  # "min" or "max"
    value: float  # the objective at `best` (exact, t = 0)
    best: dict  # knob -> value
    feasible: bool
    evaluations: int
    wall_s: float
    metrics: dict  # every metric at `best`
    path: list  # gradient: the way there; grid: []
    grid_size: int | None = None
    feasible_points: int | None = None  # grid: how many points met every constraint
    top: list | None = None  # the best distinct feasible points [{knobs, objective, metrics}]
    profile: dict | None = None  # grid: `GridProfile` (seconds, points per second)

    def to_json(self, with_path: bool = True) -> dict:
        out = {"method": self.method, "best": self.best,
               "objective": {"name": self.objective, "goal": self.goal, "value": self.value},
               "feasible": self.feasible, "evaluations": self.evaluations,
               "wall_s": self.wall_s, "metrics": self.metrics}
        if self.grid_size is not None:
            out["grid_size"] = self.grid_size
            out["feasible_points"] = self.feasible_points
        if self.top is not None:
            out["top"] = self.top
        if self.profile is not None:
            out["profile"] = self.profile
        if with_path and self.path:
            out["path"] = self.path
        return out


def _result(prob, method, x, value, feasible, evaluations, start, path, **extra):
    goal = "min" if OBJECTIVES[prob.objective][1] > 0 else "max"
    return Result(method, prob.objective, goal, float(value), _knob_dict(prob, x),
                  bool(feasible), int(evaluations), time.perf_counter() - start,
                  point_metrics(prob, x), path, **extra)


def _top(prob: Problem, x: np.ndarray, ex: Exact, n: int) -> list:
    """The `n` best distinct feasible points of x (exactly evaluated as `ex`),
    best first, ties in the order of x: [{knobs, objective, metrics}]."""
    order = np.argsort(np.where(ex.feasible, ex.loss, np.inf), kind="stable")
    out, seen = [], set()
    for i in order:
        if len(out) >= n or not ex.feasible[i]:
            break
        if _key(x[i]) in seen:
            continue
        seen.add(_key(x[i]))
        out.append({"knobs": _knob_dict(prob, x[i]), "objective": float(ex.objective[i]),
                    "metrics": {k: float(v[i]) for k, v in ex.metrics.items()}})
    return out


def _knob_dict(prob: Problem, x) -> dict:
    return {n: float(v) for n, v in zip(prob.names, np.ravel(x), strict=True)}


def _here(prob: Problem) -> np.ndarray:
    return np.asarray([_knob_value(prob.scenario, n) for n in prob.names])


def _best_index(ex: Exact) -> int | None:
    if not np.any(ex.feasible):
        return None
    return int(np.argmin(np.where(ex.feasible, ex.loss, np.inf)))


# ----------------------------------------------------------- gradient
class _State(NamedTuple):
    z: jax.Array  # (K,) unit-box point
    opt: optax.OptState  # Adam's moments, (K,) each


def _schedule(steps: int):
    frac = jnp.arange(steps) / max(steps - 1, 1)
    return T_START * (T_END / T_START) ** frac, MU_START * (MU_END / MU_START) ** frac


def _descend(core: Core, z0: jax.Array, t: jax.Array, mu: jax.Array, mask: jax.Array):
    """Projected Adam from z0 over the schedule (t, mu); coordinates where
    `mask` is 0 stay put. Returns the final z and the (loss, z) history."""
    opt = optax.adam(optax.cosine_decay_schedule(LEARNING_RATE, t.shape[0], alpha=0.05))
    grad_fn = jax.value_and_grad(relaxed_loss)

    def step(state: _State, tm):
        loss, g = grad_fn(state.z, core, *tm)
        g = jnp.where(jnp.isfinite(g), g, 0.0) * mask
        updates, opt_state = opt.update(g, state.opt)
        z = jnp.clip(optax.apply_updates(state.z, updates), 0.0, 1.0)
        return _State(z, opt_state), (loss, state.z)

    final, (losses, zs) = jax.lax.scan(step, _State(z0, opt.init(z0)), (t, mu))
    return final.z, losses, zs


@jax.jit
def _multistart(core: Core, z0: jax.Array, t: jax.Array, mu: jax.Array, mask: jax.Array):
    """Every start (rows of z0) descends at once: (final values, losses, value history)."""
    zf, losses, zs = jax.vmap(lambda z: _descend(core, z, t, mu, mask))(z0)
    values = jax.vmap(lambda z: to_values(core, z))
    return values(zf), losses, jax.vmap(values)(zs)


def _bracket(values: np.ndarray, x: float, width: int) -> np.ndarray:
    """The `width` admissible values at or below x and the `width` above it."""
    i = int(np.searchsorted(values, x, side="right"))
    return values[max(0, i - width):i + width]


def _round(prob: Problem, x: np.ndarray, width: int = 1) -> np.ndarray:
    """Every combination of the admissible values bracketing each integer knob
    (continuous knobs keep their value)."""
    options = [_bracket(adm, xi, width) if k.integer else np.asarray([xi])
               for k, adm, xi in zip(prob.knobs, prob.admissible, x, strict=True)]
    return np.asarray(list(itertools.product(*options)), dtype=float)


def _lattice_moves(prob: Problem, x: np.ndarray) -> np.ndarray:
    """One integer knob moved up to `SINGLE_STEPS` admissible values either way,
    or two moved one admissible value each."""
    single, pairs = [], []
    for i, (k, adm) in enumerate(zip(prob.knobs, prob.admissible, strict=True)):
        if not k.integer:
            continue
        j = int(np.argmin(np.abs(adm - x[i])))
        near = [jj for jj in range(j - SINGLE_STEPS, j + SINGLE_STEPS + 1)
                if jj != j and 0 <= jj < len(adm)]
        single += [(i, adm[jj]) for jj in near]
        pairs.append([(i, adm[jj]) for jj in (j - 1, j + 1) if 0 <= jj < len(adm)])
    out = []
    for i, v in single:
        y = x.copy()
        y[i] = v
        out.append(y)
    for a in range(len(pairs)):
        for b in range(a + 1, len(pairs)):
            for (i, v), (i2, v2) in itertools.product(pairs[a], pairs[b]):
                y = x.copy()
                y[i], y[i2] = v, v2
                out.append(y)
    return np.asarray(out).reshape(-1, len(x))


class _Pool(NamedTuple):
    """Points evaluated exactly so far, with the start each descends from."""

    x: np.ndarray  # (n, d) varied knob values
    ex: Exact
    origin: np.ndarray  # (n,) index of the start


def _add(pool: _Pool | None, prob: Problem, x: np.ndarray, origin: np.ndarray) -> _Pool:
    ex = evaluate(prob, x)
    if pool is None:
        return _Pool(x, ex, origin)
    return _Pool(np.concatenate([pool.x, x]), _concat(pool.ex, ex),
                 np.concatenate([pool.origin, origin]))


def _ranked(pool: _Pool, k: int) -> np.ndarray:
    """Indices of the k best structurally valid points by the penalised exact loss."""
    score = np.where(pool.ex.structural, pool.ex.penalised, np.inf)
    order = np.argsort(score, kind="stable")[:k]
    return order[np.isfinite(score[order])]


def _key(x: np.ndarray) -> tuple:
    return tuple(np.round(x, 9))


def _rounded_candidates(prob: Problem, xf: np.ndarray, width: int):
    """Every start's bracketing admissible combinations, deduplicated, with origins."""
    cands = [_round(prob, x, width) for x in xf]
    origin = np.concatenate([np.full(len(c), i) for i, c in enumerate(cands)])
    _, idx = np.unique(np.round(np.concatenate(cands), 9), axis=0, return_index=True)
    return np.concatenate(cands)[idx], origin[idx]


def _refine(prob: Problem, pool: _Pool, beam: int, rounds: int):
    """Beam search on the lattice: each round expands (`_lattice_moves`) the
    `beam` best points not yet expanded; it stops when the `beam` best have all
    been expanded, or after `rounds`."""
    log, evaluations = [], 0
    seen = {_key(x) for x in pool.x}
    expanded: set = set()
    for r in range(rounds):
        todo = [i for i in _ranked(pool, beam) if _key(pool.x[i]) not in expanded]
        if not todo:
            break
        moves, origins = [], []
        for i in todo:
            expanded.add(_key(pool.x[i]))
            for m in _lattice_moves(prob, pool.x[i]):
                if _key(m) not in seen:
                    seen.add(_key(m))
                    moves.append(m)
                    origins.append(pool.origin[i])
        if moves:
            pool = _add(pool, prob, np.asarray(moves), np.asarray(origins))
            evaluations += len(moves)
        log.append({"phase": "refine", "round": r, "expanded": len(todo),
                    "evaluated": len(moves),
                    "best_penalised_loss": float(pool.ex.penalised[_ranked(pool, 1)][0])})
    return pool, evaluations, log


def _polish(prob: Problem, pool: _Pool, count: int, starts: int, steps: int):
    """Adam on the continuous knobs of the `count` best points, integers fixed,
    on the exact model (t = 0). Reuses the descent's compiled shapes: the seeds
    are padded to `starts` lanes by repetition (the repeats are not counted)."""
    continuous = np.asarray([not k.integer for k in prob.knobs])
    best = _ranked(pool, min(count, starts))
    if not continuous.any() or len(best) == 0:
        return pool, 0, []
    seeds = pool.x[best]
    lanes = np.concatenate([seeds, np.repeat(seeds[-1:], starts - len(seeds), 0)])
    xp, _, _ = _multistart(prob.core, jnp.asarray(to_box(prob, lanes)), jnp.zeros(steps),
                           jnp.full(steps, MU_END, dtype=float),
                           jnp.asarray(continuous, dtype=float))
    xp = np.array(xp)[: len(seeds)]
    xp[:, ~continuous] = seeds[:, ~continuous]  # keep the integers exact
    pool = _add(pool, prob, xp, pool.origin[best])
    new = pool.ex.loss[-len(xp):][pool.ex.feasible[-len(xp):]]
    log = [{"phase": "polish", "points": len(xp), "steps": steps,
            "best_loss": float(new.min(initial=np.inf))}]
    return pool, len(seeds) * steps + len(xp), log


def optimize(prob: Problem, *, starts: int = 16, steps: int = 150, seed: int = 0,
             width: int = 1, beam: int = 8, rounds: int = 8, polish: int = 8,
             top: int = 0) -> Result:
    """The gradient method (module docstring): relaxed multi-start descent,
    rounding to the admissible neighbourhood (`width` values either side),
    exact evaluation, lattice beam search (`beam` wide, at most `rounds`),
    continuous polish of the `polish` best. Start 0 is the scenario's own point.
    With `top` > 0, `Result.top` lists the `top` best distinct feasible points
    of every one evaluated exactly on the way."""
    if starts < 1 or steps < 2:
        raise ValueError(f"starts={starts} must be >= 1 and steps={steps} >= 2")
    if width < 1 or beam < 1:
        raise ValueError(f"width={width} and beam={beam} must be >= 1")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    x0 = np.stack([rng.uniform(k.lo, k.hi, starts) if not k.log
                   else np.exp(rng.uniform(np.log(k.lo), np.log(k.hi), starts))
                   for k in prob.knobs], axis=1)
    x0[0] = _here(prob)
    t, mu = _schedule(steps)
    xf, losses, xs = (np.asarray(a) for a in _multistart(
        prob.core, jnp.asarray(to_box(prob, x0)), t, mu, jnp.ones(len(prob.knobs))))
    evaluations = starts * steps

    cands, origin = _rounded_candidates(prob, xf, width)
    pool = _add(None, prob, cands, origin)
    evaluations += len(cands)
    log = [{"phase": "round", "candidates": int(len(cands)),
            "structural": int(np.sum(pool.ex.structural)),
            "feasible": int(np.sum(pool.ex.feasible))}]
    if any(k.integer for k in prob.knobs):
        pool, n, more = _refine(prob, pool, beam, rounds)
        evaluations, log = evaluations + n, log + more
    pool, n, more = _polish(prob, pool, polish, starts, steps)
    evaluations, log = evaluations + n, log + more

    b = _best_index(pool.ex)
    feasible = b is not None
    if b is None:  # nothing feasible: report the least-violating valid point
        ranked = _ranked(pool, 1)
        b = int(ranked[0]) if len(ranked) else 0
    win = int(pool.origin[b])
    every = max(1, steps // 10)
    path = [{"phase": "gradient", "start": win, "step": int(i), "t": float(t[i]),
             "mu": float(mu[i]), "relaxed_loss": float(losses[win, i]),
             "knobs": _knob_dict(prob, xs[win, i])}
            for i in [*range(0, steps, every), steps - 1]]
    path.append({"phase": "gradient_end", "start": win, "knobs": _knob_dict(prob, xf[win])})
    path += log
    path.append({"phase": "best", "knobs": _knob_dict(prob, pool.x[b]),
                 "objective": float(pool.ex.objective[b]), "feasible": feasible})
    return _result(prob, "gradient", pool.x[b], pool.ex.objective[b], feasible, evaluations,
                   start, path, top=_top(prob, pool.x, pool.ex, top) if top > 0 else None)


# ---------------------------------------------------------------- grid
def grid_axes(prob: Problem, grid_points: int = 16) -> list[np.ndarray]:
    """The values the grid takes per knob: every admissible integer, or
    `grid_points` values of a continuous knob (log-spaced when lo > 0)."""
    if grid_points < 2:
        raise ValueError(f"grid_points={grid_points} must be at least 2")
    axes = []
    for k, adm in zip(prob.knobs, prob.admissible, strict=True):
        if k.integer:
            axes.append(adm)
        elif k.log:
            axes.append(np.geomspace(k.lo, k.hi, grid_points))
        else:
            axes.append(np.linspace(k.lo, k.hi, grid_points))
    return axes


def grid_size(prob: Problem, grid_points: int = 16) -> int:
    return math.prod(len(a) for a in grid_axes(prob, grid_points))


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.total, self.label, self.enabled = total, label, enabled
        self.start = time.perf_counter()

    def update(self, done: int):
        if not self.enabled:
            return
        frac = done / max(self.total, 1)
        elapsed = time.perf_counter() - self.start
        rate = done / max(elapsed, 1e-9)
        sys.stderr.write(f"\r{self.label} [{'#' * int(30 * frac):<30}] {frac:6.1%} "
                         f"{done:,}/{self.total:,} points, {elapsed:.1f} s, {rate:,.0f} points/s")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class _Layout(NamedTuple):
    """How the streamed grid enumerates its points (static: one compilation per
    layout). Knob positions `outer` (held fixed within a block) and `inner`
    (vmapped), each enumerated in C order; `strides` are the strides of the
    grid's own C order (`np.ravel_multi_index`), which breaks ties."""

    outer: tuple  # knob positions enumerated outside the blocks
    inner: tuple  # knob positions vmapped within a block
    sizes: tuple  # axis length per knob position
    strides: tuple  # C-order stride per knob position (the grid's flat index)
    block: int  # points per block
    per_outer: int  # blocks per combination of the outer knobs
    blocks: int  # blocks in all
    scan: int  # blocks per device call
    top: int  # best points kept
    objective: str  # the objective's name
    limits: tuple  # the names of the limits set


def _c_strides(sizes) -> tuple:
    return tuple(int(math.prod(sizes[i + 1:])) for i in range(len(sizes)))


def _layout(prob: Problem, sizes: tuple, top: int) -> _Layout:
    outer = [i for i, n in enumerate(prob.names) if n in GRID_HOISTED]
    if len(outer) == len(sizes):  # keep one knob to vmap over
        outer = outer[:-1]
    inner = [i for i in range(len(sizes)) if i not in outer]
    n_inner = math.prod(sizes[i] for i in inner)
    block = min(GRID_BLOCK, 1 << max(n_inner - 1, 1).bit_length())
    per_outer = -(-n_inner // block)
    blocks = per_outer * math.prod(sizes[i] for i in outer)
    scan = max(1, min(GRID_CALL_POINTS // block, blocks))
    return _Layout(tuple(outer), tuple(inner), tuple(sizes), _c_strides(sizes), block,
                   per_outer, blocks, scan, top, prob.objective, tuple(sorted(prob.limits)))


def _digits(index, positions, sizes):
    """C-order digits of `index` over the axes at `positions`."""
    strides = _c_strides([sizes[i] for i in positions])
    return [(index // st) % sizes[i] for i, st in zip(positions, strides, strict=True)]


def _merge_top(score, index, top: int):
    """The `top` smallest scores, ties by the smaller grid index."""
    score, index = jax.lax.sort((score, index), num_keys=2)
    return score[:top], index[:top]


def _grid_block(core: Core, table: jax.Array, lay: _Layout, j, outputs: tuple):
    """Block j of the grid, evaluated exactly: (the `outputs` metrics (block,)
    each, valid and feasible (block,), grid index (block,))."""
    o, start = j // lay.per_outer, (j % lay.per_outer) * lay.block
    local = start + jnp.arange(lay.block)
    valid = (j < lay.blocks) & (local < math.prod(lay.sizes[i] for i in lay.inner))
    digits = dict(zip(lay.outer, _digits(o, lay.outer, lay.sizes), strict=True))
    digits |= dict(zip(lay.inner, _digits(local, lay.inner, lay.sizes), strict=True))
    fixed = {i: table[i, digits[i]] for i in lay.outer}  # scalars: not batched

    def one(inner_values):
        values = fixed | dict(zip(lay.inner, inner_values, strict=True))
        return _grid_point(core, tuple(values[i] for i in range(len(lay.sizes))), outputs,
                           lay.limits)

    out, feasible = jax.vmap(one)(tuple(table[i, digits[i]] for i in lay.inner))
    index = sum(digits[i] * lay.strides[i] for i in range(len(lay.sizes)))
    return out, valid & feasible, index


@eqx.filter_jit
def _grid_blocks(core: Core, table: jax.Array, carry, first, layout: _Layout):
    """Evaluate blocks first .. first + layout.scan - 1 of the grid exactly and
    fold them into carry = (scores (top,), grid indices (top,), feasible count):
    score = loss of a feasible point, inf otherwise."""
    lay = layout
    key, goal = OBJECTIVES[lay.objective]

    def body(c, j):
        best, where, count = c
        (value,), ok, index = _grid_block(core, table, lay, j, (key,))
        loss = goal * safe_log(value)
        ok = ok & jnp.isfinite(loss)
        score = jnp.where(ok, loss, jnp.inf)
        neg, k = jax.lax.top_k(-score, min(lay.top, lay.block))  # ties: lower index first
        best, where = _merge_top(jnp.concatenate([best, -neg]),
                                 jnp.concatenate([where, index[k]]), lay.top)
        return (best, where, count + jnp.sum(ok)), None

    out, _ = jax.lax.scan(body, carry, first + jnp.arange(lay.scan))
    return out


def _front(a, b, index, capacity: int):
    """The points not dominated in (a, b) (both minimised; non-finite points
    are not points), as `non_dominated` picks them (ties to the smaller
    index), sorted by a, compacted into the first `capacity` slots (inf after
    them); and how many there are."""
    a, b, index = jax.lax.sort((a, b, index), num_keys=3)
    seen = jnp.concatenate([jnp.full(1, jnp.inf, dtype=b.dtype), jax.lax.cummin(b)[:-1]])
    keep = (b < seen) & jnp.isfinite(a) & jnp.isfinite(b)
    _, a, b, index = jax.lax.sort((jnp.where(keep, 0, 1), a, b, index), num_keys=1,
                                  is_stable=True)
    drop = jnp.arange(a.shape[0]) >= jnp.sum(keep)
    a, b = jnp.where(drop, jnp.inf, a), jnp.where(drop, jnp.inf, b)
    return (a[:capacity], b[:capacity], index[:capacity]), jnp.sum(keep)


@eqx.filter_jit
def _pareto_blocks(core: Core, table: jax.Array, carry, first, layout: _Layout,
                   axes: tuple):
    """As `_grid_blocks`, folding each block into a running non-dominated set
    of the metrics `axes` (both minimised): carry = ((a, b, index) of the
    front so far (capacity,) each, feasible count, largest front seen)."""
    lay = layout

    def body(c, j):
        (fa, fb, fi), count, largest = c
        (a, b), ok, index = _grid_block(core, table, lay, j, axes)
        a, b = jnp.where(ok, a, jnp.inf), jnp.where(ok, b, jnp.inf)
        front, n = _front(jnp.concatenate([fa, a]), jnp.concatenate([fb, b]),
                          jnp.concatenate([fi, index]), fa.shape[0])
        return (front, count + jnp.sum(ok), jnp.maximum(largest, n)), None

    out, _ = jax.lax.scan(body, carry, first + jnp.arange(lay.scan))
    return out


class GridProfile(NamedTuple):
    """Where the streamed grid's time went (seconds)."""

    compile_s: float  # the first call's excess over a typical one (tracing, compiling)
    stream_s: float  # enumeration, evaluation and top-N reduction (the device, streamed)
    finish_s: float  # re-evaluating the kept best points and the winner's metrics
    calls: int  # device calls (one progress update each)
    points_per_s: float  # grid points per second of stream_s


def _grid_table(axes: list) -> jax.Array:
    """The grid's axes as one (knobs, longest axis) array (zero-padded)."""
    table = np.zeros((len(axes), max(len(a) for a in axes)))
    for i, a in enumerate(axes):
        table[i, :len(a)] = a
    return jnp.asarray(table)


def _stream(prob: Problem, lay: _Layout, table: jax.Array, kernel, carry, bar: _Progress):
    """Run a block kernel over the whole grid: (final carry as numpy arrays,
    seconds per device call)."""
    total = math.prod(lay.sizes)
    times = []
    for first in range(0, lay.blocks, lay.scan):
        t0 = time.perf_counter()
        carry = jax.block_until_ready(
            kernel(prob.core, table, carry, jnp.asarray(first, dtype=jnp.int64)))
        times.append(time.perf_counter() - t0)
        done = min(lay.blocks, first + lay.scan)
        bar.update(total if done == lay.blocks else min(total, done * lay.block))
    return jax.tree.map(np.asarray, carry), times


def _stream_grid(prob: Problem, axes: list, top: int, bar: _Progress):
    """The top-N kernel over the whole grid: (scores, grid indices of the `top`
    best, feasible count, seconds per device call)."""
    lay = _layout(prob, tuple(len(a) for a in axes), top)
    carry = (jnp.full(top, jnp.inf, dtype=float), jnp.zeros(top, dtype=jnp.int64),
             jnp.zeros((), dtype=jnp.int64))
    kernel = lambda core, table, c, first: _grid_blocks(core, table, c, first, lay)  # noqa: E731
    (score, index, count), times = _stream(prob, lay, _grid_table(axes), kernel, carry, bar)
    return score, index, int(count), times


def _profile(times: list, finish_s: float, total: int) -> GridProfile:
    """The first call compiles: its excess over a typical call counts as
    compilation (a grid done in one call counts whole as streaming)."""
    typical = float(np.median(times[1:])) if len(times) > 1 else times[0]
    compile_s = max(times[0] - typical, 0.0)
    stream_s = sum(times) - compile_s
    return GridProfile(compile_s, stream_s, finish_s, len(times), total / max(stream_s, 1e-12))


def _host_grid(prob: Problem, axes: list, top: int, keep: tuple, bar: _Progress):
    """The grid through `evaluate` in chunks of `CHUNK` (small grids share its
    compilation; `keep` needs every feasible point's metrics): as
    `_stream_grid`, plus the kept metrics."""
    shape = tuple(len(a) for a in axes)
    total = math.prod(shape)
    score, index, count = np.full(0, np.inf), np.zeros(0, dtype=np.int64), 0
    kept = {k: [] for k in (*keep, "knobs")} if keep else {}
    times = []
    for lo in range(0, total, CHUNK):
        t0 = time.perf_counter()
        idx = np.arange(lo, min(lo + CHUNK, total))
        x = np.stack([a[i] for a, i in zip(axes, np.unravel_index(idx, shape), strict=True)],
                     axis=1)
        ex = evaluate(prob, x, CHUNK)
        ok = ex.feasible & np.isfinite(ex.loss)
        count += int(np.sum(ok))
        score = np.concatenate([score, np.where(ok, ex.loss, np.inf)])
        index = np.concatenate([index, idx])
        order = np.lexsort((index, score))[:top]
        score, index = score[order], index[order]
        for k in keep:
            kept[k] += ex.metrics[k][ex.feasible].tolist()
        if keep:
            kept["knobs"] += x[ex.feasible].tolist()
        times.append(time.perf_counter() - t0)
        bar.update(int(idx[-1]) + 1)
    return score, index, count, times, kept


def grid_search(prob: Problem, grid_points: int = 16, *, progress: bool = True,
                keep: tuple[str, ...] = (), max_points: int = 1_000_000_000,
                top: int = GRID_TOP) -> Result:
    """Evaluate every grid point exactly (module docstring) and return the best.

    A grid of more than `GRID_STREAM_MIN` points streams: points are
    enumerated on the device from their index, evaluated in fixed-size blocks
    by one compiled kernel, and each block is reduced on the device to its
    `top` best feasible points; only those reach the host, so memory stays
    flat in the grid size. Smaller grids (or `keep`) go through `evaluate` in
    chunks. The `top` are evaluated again (`evaluate`) and the best wins, ties
    to the first in the grid's C order (knobs in the order given), as a plain
    loop over the grid would find. `Result.top` lists them (knobs and
    objective, best first) and `Result.profile` the timings (`GridProfile`).

    `keep` names metrics to return for every feasible point (small grids; not
    streamed), in `Result.metrics["grid"]` (lists), with the knob values under
    "knobs"."""
    start = time.perf_counter()
    axes = grid_axes(prob, grid_points)
    total = grid_size(prob, grid_points)
    if total > max_points:
        raise ValueError(f"the grid holds {total:,} points, more than max_points="
                         f"{max_points:,}; narrow --bounds or lower --grid-points")
    if top < 1:
        raise ValueError(f"top={top} must be at least 1")
    bar = _Progress(total, "grid", progress)
    kept = {}
    if keep or total <= GRID_STREAM_MIN:
        score, index, feasible_points, times, kept = _host_grid(prob, axes, top, keep, bar)
    else:
        score, index, feasible_points, times = _stream_grid(prob, axes, top, bar)
    finish = time.perf_counter()
    index = index[np.isfinite(score)]
    shape = tuple(len(a) for a in axes)
    xs = np.stack([a[i] for a, i in zip(axes, np.unravel_index(index, shape), strict=True)],
                  axis=1) if len(index) else np.zeros((0, len(axes)))
    feasible = len(index) > 0
    if feasible:
        ex = evaluate(prob, xs)
        order = np.lexsort((index, np.where(ex.feasible, ex.loss, np.inf)))
        xs, ex = xs[order], jax.tree.map(lambda a: np.asarray(a)[order], ex)
        best_x, best_value = xs[0], float(ex.objective[0])
    else:
        best_x, best_value = _here(prob), np.nan
    r = _result(prob, "grid", best_x, best_value, feasible, total, start, [], grid_size=total,
                feasible_points=feasible_points)
    profile = _profile(times, time.perf_counter() - finish, total)
    best = _top(prob, xs, ex, len(xs)) if feasible else []
    if keep:
        r.metrics["grid"] = kept
    return r._replace(top=best, profile=profile._asdict())


class GridFront(NamedTuple):
    """The exact Pareto front of a grid in two minimised metrics."""

    axes: tuple  # the two metrics' names (a, b)
    knobs: list  # [{knob: value}] of the front's points, by increasing a
    a: np.ndarray  # (n,) the first metric
    b: np.ndarray  # (n,) the second metric (decreasing)
    grid_size: int
    feasible_points: int
    profile: dict  # `GridProfile`


def grid_pareto(prob: Problem, grid_points: int = 16, a: str = "cost_to_train_usd",
                b: str = "time_to_train_s", *, progress: bool = True,
                capacity: int = 1024, max_points: int = 1_000_000_000) -> GridFront:
    """The feasible grid points not dominated in the metrics (a, b) (both
    minimised; names of `metrics`), streamed as `grid_search` streams: each
    block is folded on the device into a running non-dominated set of at most
    `capacity` points, so memory stays flat. Equal to `non_dominated` over
    every feasible point (ties to the first in the grid's C order)."""
    names = tuple(jax.eval_shape(lambda: metrics(prob.scenario, prob.core.assumptions)))
    for field, metric in (("a", a), ("b", b)):
        if metric not in names:
            raise ValueError(f"{field}={metric!r} is not a metric; metrics are "
                             f"{', '.join(names)}")
    if capacity < 1:
        raise ValueError(f"capacity={capacity} must be at least 1")
    axes = grid_axes(prob, grid_points)
    total = grid_size(prob, grid_points)
    if total > max_points:
        raise ValueError(f"the grid holds {total:,} points, more than max_points="
                         f"{max_points:,}; narrow the bounds or lower grid_points")
    lay = _layout(prob, tuple(len(x) for x in axes), 1)
    inf = jnp.full(capacity, jnp.inf, dtype=float)
    carry = ((inf, inf, jnp.zeros(capacity, dtype=jnp.int64)), jnp.zeros((), dtype=jnp.int64),
             jnp.zeros((), dtype=jnp.int64))
    kernel = lambda core, table, c, first: _pareto_blocks(  # noqa: E731
        core, table, c, first, lay, (a, b))
    bar = _Progress(total, "pareto", progress)
    ((fa, fb, fi), count, largest), times = _stream(prob, lay, _grid_table(axes), kernel,
                                                    carry, bar)
    if int(largest) > capacity:
        raise ValueError(f"the front of a block held {int(largest):,} points, more than "
                         f"capacity={capacity:,}: raise it")
    keep = np.isfinite(fa)
    shape = tuple(len(x) for x in axes)
    digits = np.unravel_index(fi[keep], shape)
    knobs = [_knob_dict(prob, [x[d[i]] for x, d in zip(axes, digits, strict=True)])
             for i in range(int(keep.sum()))]
    return GridFront((a, b), knobs, fa[keep], fb[keep], total, int(count),
                     _profile(times, 0.0, total)._asdict())


# ---------------------------------------------------------------- Pareto
def non_dominated(a, b) -> np.ndarray:
    """Indices of the points not dominated in (a, b), both minimised, sorted by a."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep, best_b = [], np.inf
    for i in np.lexsort((b, a)):
        if b[i] < best_b:
            keep.append(int(i))
            best_b = b[i]
    return np.asarray(keep, dtype=int)


def pareto_front(prob: Problem, budgets_usd, **optimize_kwargs) -> list[Result]:
    """Time to train against cost to train: minimise time under each dollar
    budget (the epsilon-constraint method, one gradient run per budget; the
    runs share one compilation) and keep the non-dominated feasible results,
    sorted by cost."""
    out = []
    for b in budgets_usd:
        r = optimize(prob.with_limits("time_to_train", budget_usd=float(b)), **optimize_kwargs)
        if r.feasible:
            out.append(r)
    if not out:
        return []
    cost = [r.metrics["cost_to_train_usd"] for r in out]
    ttt = [r.metrics["time_to_train_s"] for r in out]
    return [out[i] for i in non_dominated(cost, ttt)]


# ------------------------------------------------------------ sensitivity
@eqx.filter_jit
def _log_outputs_and_jacobian(scn: Scenario, values: dict, outputs: tuple[str, ...]):
    def f(v):
        out = S.outputs(S.estimate(sc.set_knobs(scn, v)))
        return jnp.stack([safe_log(out[o]) for o in outputs])

    return f(values), jax.jacrev(f)(values)


def elasticities(scn: Scenario, outputs=("step_time_s",), knobs=None) -> dict:
    """{output: {knob: d log(output) / d log(knob)}} at t = 0, by jax.jacrev.

    Each knob moves alone with the others held; with system.gpus fixed, dp
    follows tp, pp and cp (`scenario.set_knobs`). Raising parallel.dp raises
    system.gpus by the same factor with tp, pp, cp held, which is exactly what
    raising system.gpus does: the two share one elasticity. A knob at 0
    (unset, e.g. moe_node_limit on a dense model) has elasticity 0.
    """
    knobs = tuple(SENSITIVITY_KNOBS if knobs is None else knobs)
    outputs = tuple(outputs)
    for k in knobs:
        sc.get_knob(scn, k)
    for o in outputs:
        if o not in SENSITIVITY_OUTPUTS:
            raise ValueError(f"output={o!r} is not one of {', '.join(SENSITIVITY_OUTPUTS)}")
    group = tuple(dict.fromkeys(
        "system.gpus" if k == "parallel.dp" else k for k in knobs))
    values = {k: sc.get_knob(scn, k) for k in group}
    _, jac = _log_outputs_and_jacobian(scn, values, outputs)
    return {o: {k: float(jac["system.gpus" if k == "parallel.dp" else k][i]
                         * values["system.gpus" if k == "parallel.dp" else k])
                for k in knobs} for i, o in enumerate(outputs)}




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

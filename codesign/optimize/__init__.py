"""Gradient co-design of hardware and plan knobs, checked against the exhaustive grid.

A `Problem` names the knobs to vary (scenario keys, `scenario.KNOBS`), their
bounds, an objective and the constraints. Two methods solve it:

- `optimize` (gradient). Every knob lives in a unit box z in [0, 1]: log-spaced
  between its bounds when the lower bound is positive (integer knobs become
  positive reals optimised in log space), linear otherwise. The relaxed model
  (`step.estimate(scn, relax.Relaxed(t))`: smooth ceil/max/min with temperature t) is
  minimised by projected Adam (optax; projection = clip to the box) from many
  random starts in one vmapped, scanned run, while t anneals geometrically
  from `T_START` to `T_END` and the penalty weight mu grows from `MU_START` to
  `MU_END`. Smooth constraints (memory per GPU, budgets in dollars and watts,
  GPU count, dp >= 1, micro-batches >= 1, ep x etp <= tp x cp x dp, pp x interleave <= layers,
  scale-up domain <= GPUs) are log-ratios g <= 0 with the penalty
  mu max(g, 0)^2. Divisibility is a projection: every integer knob has an
  admissible set (integers in its bounds that satisfy the rules of
  `plan.RULES` that read it and no other varied knob: tp | heads, cp |
  seq_len, ep | experts, micro_batch | global_batch, a divisor of a fixed GPU
  count, ...), and each start's continuous optimum is rounded to the
  admissible values that bracket it (the product over knobs). The candidates
  are checked against the exact structural rules (`structurally_feasible`:
  every rule of `plan.RULES`, those `plan.validate` checks plus whole scale-up
  domains of whole nodes, ...); one that breaks a rule coupling several knobs
  (gpus = dp tp pp cp with dp micro_batch | global_batch, ...) is repaired by
  moving one integer knob to its nearest admissible value at which every rule
  holds. They are evaluated exactly (`relax.EXACT`, vmapped), refined by a beam search
  on the lattice (one integer knob moved up to `SINGLE_STEPS` admissible
  values, or two moved one each, repaired the same way), and the continuous
  knobs of the best few are polished by Adam on the exact model with the
  integers fixed. The best feasible point wins; `Result.path` records the way
  there. The descent (relaxed loss and gradient, every start and step in one
  scan), the exact evaluation and the rule check are compiled ahead of time
  once per problem's knobs (on the CPU with XLA options that compile fast:
  they run for about a second) and reused by every later call;
  `Result.profile["compile_s"]` says how much of the wall time was compiling.
- `grid_search` (the yardstick). The Cartesian product of every admissible
  value of every integer knob and `grid_points` values of every continuous knob
  (log-spaced when the lower bound is positive), evaluated exactly; returns the
  true optimum on the grid. Large grids stream: one compiled kernel enumerates
  points on the device from their index, evaluates fixed-size blocks (knobs
  the failure statistics depend on held fixed within a block) and keeps the
  best few of each block on the device, so host memory is flat in the grid
  size; asked (`progress=True`), a bar on stderr shows points per second. `grid_pareto`
  streams the grid's exact Pareto front in two metrics the same way.

Objectives (`OBJECTIVES`): step time, tokens per second, time to train (with
goodput), cost to train in dollars and tokens per joule; `economics` prices
them (`economics.Assumptions`, re-exported here: the prices and the
amortisation, each labelled). `pareto_front` traces time against cost.
`elasticities` gives d log(output) / d log(knob) for every hardware, plan and
reliability knob by `jax.jacrev` of the exact model; `slack`, for every collective of
the step, the bandwidth of its tiers at which it would become exposed (or
hidden), which an elasticity of 0 does not tell.

Robust co-design (`robust`, `robust_search`, `robust_compare`): the same
problem with every metric the mean (or a quantile) over S seeded samples of
the model's uncertain constants (efficiencies, latencies, straggler and
failure rates: log-normal factors, `DEFAULT_SIGMAS`, the matmul efficiency's
from `codesign validate`'s spread for the chip family), the same samples for
every design (common random numbers); both methods solve it, each point
costing S evaluations, and `robust_compare` reports the nominal optimum's
regret on the samples and the robust design's price under the nominal model.

Evaluations are counted as model evaluations: one exact evaluation, or one
value-and-gradient of the relaxed model (which costs a few forward passes;
wall time is reported beside it).

Categorical knobs (`categorical_search`): the scenario keys that are a choice
(`CATEGORICAL`: ZeRO stage, recompute, schedule, precision recipe, placement,
sequence parallelism, topology, ...). Each combination of choices is another
static structure (another compiled program), so their product is enumerated
outside, each combination loaded as `--set` would load it; the numeric knobs
are solved inside by either method as above, and the best over the
combinations wins. Refused combinations (a plan the loader refuses) are skipped.

Modules: `_problem` (knobs, bounds, admissible values, `Problem`), `_model`
(metrics, constraints, relaxed loss, exact evaluation), `make_result`,
`_gradient` (`optimize`), `_grid` (`grid_search`), `_method` (the two as
types, `Gradient` and `Grid` of `Method`, named by `search_method`: what the
categorical, robust and command-line searches call), `_pareto` and
`_sensitivity` (`elasticities`), `_slack` (`slack`), `_robust` (the
uncertainty model, `robust`, `robust_search`, `robust_compare`),
`_categorical` (`categorical_search`); the names
below are the public API (the relaxed loss, the unit box and the constraint
vector are internals of `_model` and `_problem`).
"""

import importlib

# Every public name loads its module on first use (`__getattr__`): `codesign.cli`'s
# `estimate` needs `neighbours`, not optax and the descent.
_NAMES = {  # public name -> (the module that defines it, its name there)
    "Assumptions": ("..model.economics", "Assumptions"),
    "CATEGORICAL": ("._categorical", "CATEGORICAL"),
    "NoValidChoice": ("._categorical", "NoValidChoice"),
    "categorical_search": ("._categorical", "categorical_search"),
    "categorical_choices": ("._categorical", "choices_of"),
    "design_scenario": ("._categorical", "design_scenario"),
    "parse_choice": ("._categorical", "parse_choice"),
    "scenario_choice": ("._categorical", "scenario_choice"),
    "optimize": ("._gradient", "optimize"),
    "GRID_TOP": ("._grid", "GRID_TOP"),
    "SCANS": ("._grid", "SCANS"),
    "Float32Scan": ("._grid", "Float32Scan"),
    "Float64Scan": ("._grid", "Float64Scan"),
    "Scan": ("._grid", "Scan"),
    "grid_axes": ("._grid", "grid_axes"),
    "grid_search": ("._grid", "grid_search"),
    "grid_size": ("._grid", "grid_size"),
    "METHODS": ("._method", "METHODS"),
    "Gradient": ("._method", "Gradient"),
    "Grid": ("._method", "Grid"),
    "Method": ("._method", "Method"),
    "search_method": ("._method", "search_method"),
    "Exact": ("._model", "Exact"),
    "evaluate": ("._model", "evaluate"),
    "point_metrics": ("._model", "point_metrics"),
    "structurally_feasible": ("._model", "structurally_feasible"),
    "GridFront": ("._pareto", "GridFront"),
    "grid_pareto": ("._pareto", "grid_pareto"),
    "non_dominated": ("._pareto", "non_dominated"),
    "pareto_front": ("._pareto", "pareto_front"),
    "DERIVED_AT_ZERO": ("._problem", "DERIVED_AT_ZERO"),
    "INTEGER_KNOBS": ("._problem", "INTEGER_KNOBS"),
    "OBJECTIVES": ("._problem", "OBJECTIVES"),
    "Problem": ("._problem", "Problem"),
    "default_bounds": ("._problem", "default_bounds"),
    "neighbours": ("._problem", "neighbours"),
    "problem": ("._problem", "problem"),
    "Result": ("._result", "Result"),
    "DEFAULT_SIGMAS": ("._robust", "DEFAULT_SIGMAS"),
    "MAX_ROBUST_SAMPLES": ("._robust", "MAX_SAMPLES"),
    "ROBUST_SAMPLES": ("._robust", "SAMPLES"),
    "Uncertainty": ("._robust", "Uncertainty"),
    "robust_compare": ("._robust", "compare"),
    "robust": ("._robust", "robust"),
    "robust_search": ("._robust", "search"),
    "uncertainty_sigmas": ("._robust", "sigmas"),
    "SENSITIVITY_KNOBS": ("._sensitivity", "SENSITIVITY_KNOBS"),
    "SENSITIVITY_OUTPUTS": ("._sensitivity", "SENSITIVITY_OUTPUTS"),
    "elasticities": ("._sensitivity", "elasticities"),
    "integer_steps": ("._sensitivity", "integer_steps"),
    "slack": ("._slack", "slack"),
}

__all__ = [
    "CATEGORICAL", "DEFAULT_SIGMAS", "DERIVED_AT_ZERO", "GRID_TOP", "INTEGER_KNOBS",
    "MAX_ROBUST_SAMPLES", "METHODS", "OBJECTIVES", "ROBUST_SAMPLES", "SCANS",
    "SENSITIVITY_KNOBS", "SENSITIVITY_OUTPUTS", "Assumptions", "Exact", "Float32Scan",
    "Float64Scan", "Gradient", "Grid", "GridFront", "Method", "NoValidChoice", "Problem",
    "Result", "Scan", "Uncertainty",
    "categorical_choices", "categorical_search", "default_bounds", "design_scenario",
    "elasticities", "evaluate", "grid_axes", "grid_pareto", "grid_search", "grid_size",
    "integer_steps",
    "neighbours", "non_dominated", "optimize", "pareto_front", "parse_choice", "point_metrics",
    "problem", "robust", "robust_compare", "robust_search", "scenario_choice", "search_method",
    "slack", "structurally_feasible", "uncertainty_sigmas",
]


def __getattr__(name: str):
    """A public name (`__all__`), imported from its module on first use and kept."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _NAMES[name]
    value = getattr(importlib.import_module(module, __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

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
(metrics, constraints, relaxed loss, exact evaluation), `_result`,
`_gradient` (`optimize`), `_grid` (`grid_search`), `_method` (the two as
types, `Gradient` and `Grid` of `Method`, named by `search_method`: what the
categorical, robust and command-line searches call), `_pareto` and
`_sensitivity` (`elasticities`), `_slack` (`slack`), `_robust` (the
uncertainty model, `robust`, `robust_search`, `robust_compare`),
`_categorical` (`categorical_search`); the names
below are the public API (the relaxed loss, the unit box and the constraint
vector are internals of `_model` and `_problem`).
"""

from ..model.economics import Assumptions as Assumptions
from ._categorical import CATEGORICAL as CATEGORICAL
from ._categorical import NoValidChoice as NoValidChoice
from ._categorical import categorical_search as categorical_search
from ._categorical import choices_of as categorical_choices
from ._categorical import design_scenario as design_scenario
from ._categorical import parse_choice as parse_choice
from ._categorical import scenario_choice as scenario_choice
from ._gradient import optimize as optimize
from ._grid import GRID_TOP as GRID_TOP
from ._grid import SCANS as SCANS
from ._grid import Float32Scan as Float32Scan
from ._grid import Float64Scan as Float64Scan
from ._grid import Scan as Scan
from ._grid import grid_axes as grid_axes
from ._grid import grid_search as grid_search
from ._grid import grid_size as grid_size
from ._method import METHODS as METHODS
from ._method import Gradient as Gradient
from ._method import Grid as Grid
from ._method import Method as Method
from ._method import search_method as search_method
from ._model import Exact as Exact
from ._model import evaluate as evaluate
from ._model import point_metrics as point_metrics
from ._model import structurally_feasible as structurally_feasible
from ._pareto import GridFront as GridFront
from ._pareto import grid_pareto as grid_pareto
from ._pareto import non_dominated as non_dominated
from ._pareto import pareto_front as pareto_front
from ._problem import DERIVED_AT_ZERO as DERIVED_AT_ZERO
from ._problem import INTEGER_KNOBS as INTEGER_KNOBS
from ._problem import OBJECTIVES as OBJECTIVES
from ._problem import Problem as Problem
from ._problem import default_bounds as default_bounds
from ._problem import neighbours as neighbours
from ._problem import problem as problem
from ._result import Result as Result
from ._robust import DEFAULT_SIGMAS as DEFAULT_SIGMAS
from ._robust import MAX_SAMPLES as MAX_ROBUST_SAMPLES
from ._robust import SAMPLES as ROBUST_SAMPLES
from ._robust import Uncertainty as Uncertainty
from ._robust import compare as robust_compare
from ._robust import robust as robust
from ._robust import search as robust_search
from ._robust import sigmas as uncertainty_sigmas
from ._sensitivity import SENSITIVITY_KNOBS as SENSITIVITY_KNOBS
from ._sensitivity import SENSITIVITY_OUTPUTS as SENSITIVITY_OUTPUTS
from ._sensitivity import elasticities as elasticities
from ._sensitivity import integer_steps as integer_steps
from ._slack import slack as slack

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

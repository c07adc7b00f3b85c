"""What a search returns: `Result` (the best point, its metrics, the path or the
grid's counts, the best few distinct feasible points) and the helpers that
build it from exactly evaluated points.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ._model import Exact, point_metrics
from ._problem import OBJECTIVES, Problem

# significant digits to which two designs of `Result.top` differ: those the
# command prints (`units.format_quantity`)
DESIGN_DIGITS = 4


class Result(NamedTuple):
    method: str  # "gradient" or "grid"
    objective: str
    goal: str  # "min" or "max"
    value: float  # the objective at `best` (the exact model)
    best: dict  # knob -> value (a float; a categorical knob's choice as `--set` takes it)
    feasible: bool
    evaluations: int
    wall_s: float
    metrics: dict  # every metric at `best`
    path: list  # gradient: the way there; grid: []
    grid_size: int | None = None
    feasible_points: int | None = None  # grid: how many points met every constraint
    top: list | None = None  # the best distinct feasible points [{knobs, objective, metrics}]
    profile: dict | None = None  # seconds: grid `GridProfile`, gradient its `compile_s` ...
    # categorical knobs (`categorical_search`): one row per combination of the
    # choices, {choices, solved, feasible, objective, refused}
    combinations: list | None = None

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
        if self.combinations is not None:
            out["combinations"] = self.combinations
        if with_path and self.path:
            out["path"] = self.path
        return out


def make_result(prob, method, x, value, feasible, evaluations, start, path, metrics=None,
            **extra):
    """The `Result` of a search that found x after `evaluations` points (each
    costs `Core.samples` model evaluations, which it counts); `metrics` (every
    metric at x, as floats) when the search evaluated them already, else
    `point_metrics`."""
    goal = "min" if OBJECTIVES[prob.objective][1] > 0 else "max"
    metrics = point_metrics(prob, x) if metrics is None else metrics
    return Result(method, prob.objective, goal, float(value), knob_dict(prob, x),
                  bool(feasible), int(evaluations) * prob.core.samples,
                  time.perf_counter() - start,
                  metrics, path, **extra)


def top_points(prob: Problem, x: np.ndarray, ex: Exact, n: int) -> list:
    """The `n` best distinct feasible designs of x (exactly evaluated as `ex`),
    best first, ties in the order of x: [{knobs, objective, metrics}]. Points
    equal to `DESIGN_DIGITS` significant digits (several polished starts
    converge to one continuous optimum, a few ulps apart) are one design: the
    best of them is kept."""
    order = np.argsort(np.where(ex.feasible, ex.loss, np.inf), kind="stable")
    out, seen = [], set()
    for i in order:
        if len(out) >= n or not ex.feasible[i]:
            break
        key = _design_key(x[i])
        if key in seen:
            continue
        seen.add(key)
        out.append({"knobs": knob_dict(prob, x[i]), "objective": float(ex.objective[i]),
                    "metrics": {k: float(v[i]) for k, v in ex.metrics.items()}})
    return out


def knob_dict(prob: Problem, x) -> dict:
    return {n: float(v) for n, v in zip(prob.names, np.ravel(x), strict=True)}


def point_key(x: np.ndarray) -> tuple:
    return tuple(np.round(x, 9))


def _design_key(x: np.ndarray) -> tuple:
    """A design's identity: its knobs to `DESIGN_DIGITS` significant digits."""
    return tuple(float(f"{v:.{DESIGN_DIGITS}g}") for v in np.ravel(x))

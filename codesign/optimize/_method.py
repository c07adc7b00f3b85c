"""The search methods as types: `Gradient` (the relaxed descent, `optimize`)
and `Grid` (the exhaustive grid, `grid_search`), each owning how it searches
one problem, a nominal and robust pair and a problem with no number varied,
which of its options a command line sets, and what of its designs it reports;
parsed once from their names (`search_method`: `--method gradient|grid`)."""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx

from ..model import strategies
from ._gradient import optimize
from ._grid import GRID_TOP, MAX_GRID_POINTS, grid_search
from ._problem import Problem
from ._result import Result


class Method(eqx.Module):
    """A way to search a `Problem`, known by its `name` (`--method NAME`)."""

    name: eqx.AbstractClassVar[str]
    top: eqx.AbstractClassVar[int]  # designs a categorical search keeps by default

    @abc.abstractmethod
    def search(self, prob: Problem, *, progress: bool = False, keep: tuple = (),
               max_points: int = MAX_GRID_POINTS, **options) -> Result:
        """The best design of `prob`, under the method's own `options`
        (`optimize`'s or `grid_search`'s); `progress`, `keep` and `max_points`
        are the grid's (its bar, the metrics it keeps of every point, its cap)."""

    @abc.abstractmethod
    def robust(self, prob: Problem, rob: Problem, *, progress: bool = False,
               **options) -> tuple[Result, Result]:
        """(the nominal optimum of `prob`, the robust optimum of `rob`)."""

    @abc.abstractmethod
    def grid_points(self, points: int) -> int:
        """How many of a grid's `points` the method evaluates (the cap counts them)."""

    @abc.abstractmethod
    def point_counts(self, feasible: bool) -> dict:
        """`Result`'s counts of a problem with no number varied, one point."""

    @abc.abstractmethod
    def options(self, *, grid_points: int, starts: int, steps: int, seed: int, top: int,
                least_top: int, store) -> dict:
        """Its options of a command line's (`store`: a function giving the
        executable store; `least_top`: the designs a drawn page needs)."""

    @abc.abstractmethod
    def reported_top(self, top_designs, top: int, drawn: bool):
        """The designs of `Result.top` a command reports (`top`: --top, 0: all)."""


class Gradient(Method):
    """The relaxed multi-start descent (`optimize`): it scans no grid."""

    name: ClassVar[str] = "gradient"
    top: ClassVar[int] = 0

    def search(self, prob: Problem, *, progress: bool = False, keep: tuple = (),
               max_points: int = MAX_GRID_POINTS, **options) -> Result:
        return optimize(prob, **options)

    def robust(self, prob: Problem, rob: Problem, *, progress: bool = False,
               **options) -> tuple[Result, Result]:
        # given the nominal optimum (`include`), the robust design's statistic
        # is never worse than the nominal design's on the same samples
        nominal = optimize(prob, **options)
        return nominal, optimize(rob, **options, include=[list(nominal.best.values())]
                                 if nominal.feasible else None)

    def grid_points(self, points: int) -> int:
        return 0

    def point_counts(self, feasible: bool) -> dict:
        return {}

    def options(self, *, grid_points: int, starts: int, steps: int, seed: int, top: int,
                least_top: int, store) -> dict:
        return {"starts": starts, "steps": steps, "seed": seed,
                "top": max(top, least_top) if least_top else top, "store": store()}

    def reported_top(self, top_designs, top: int, drawn: bool):
        if not drawn:
            return top_designs
        return (top_designs or [])[:top] if top else None


class Grid(Method):
    """The exhaustive grid (`grid_search`): it holds the nominal optimum."""

    name: ClassVar[str] = "grid"
    top: ClassVar[int] = GRID_TOP

    def search(self, prob: Problem, *, progress: bool = False, keep: tuple = (),
               max_points: int = MAX_GRID_POINTS, **options) -> Result:
        return grid_search(prob, progress=progress, keep=keep, max_points=max_points, **options)

    def robust(self, prob: Problem, rob: Problem, *, progress: bool = False,
               **options) -> tuple[Result, Result]:
        return (grid_search(prob, progress=progress, **options),
                grid_search(rob, progress=progress, **options))

    def grid_points(self, points: int) -> int:
        return points

    def point_counts(self, feasible: bool) -> dict:
        return {"grid_size": 1, "feasible_points": int(feasible)}

    def options(self, *, grid_points: int, starts: int, steps: int, seed: int, top: int,
                least_top: int, store) -> dict:
        return {"grid_points": grid_points, "top": max(top, GRID_TOP)}

    def reported_top(self, top_designs, top: int, drawn: bool):
        return top_designs[:top] if top else top_designs


METHOD_CLASSES = (Gradient, Grid)
METHODS = tuple(c.name for c in METHOD_CLASSES)


def search_method(value, key: str = "method") -> Method:
    """The method named `value` (or `value` itself if it is a `Method`); an
    unknown name is a one-line ValueError naming `key` and the choices."""
    return strategies.parse(key, value, Method, METHOD_CLASSES)

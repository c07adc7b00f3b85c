"""Fronts of time against cost: the grid's exact Pareto front in two metrics,
streamed as the grid streams (`grid_pareto`), the front traced by the gradient
method under a range of budgets (`pareto_front`), and `non_dominated`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..progress import Progress
from ._gradient import optimize
from ._grid import (
    GRID_BLOCK,
    GRID_CALL_POINTS,
    GridLayout,
    capped_axes,
    grid_block,
    grid_layout,
    grid_profile,
    grid_table,
    stream_grid,
)
from ._model import metrics
from ._problem import Core, Problem
from ._result import Result, knob_dict


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


def _pareto_blocks(core: Core, table: jax.Array, carry, first, layout: GridLayout,
                   axes: tuple):
    """As `_grid_blocks`, folding each block into a running non-dominated set
    of the metrics `axes` (both minimised): carry = ((a, b, index) of the
    front so far (capacity,) each, feasible count, largest front seen)."""
    lay = layout

    def body(c, j):
        (fa, fb, fi), count, largest = c
        (a, b), ok, index, _ = grid_block(core, table, lay, j, axes)
        a, b = jnp.where(ok, a, jnp.inf), jnp.where(ok, b, jnp.inf)
        front, n = _front(jnp.concatenate([fa, a]), jnp.concatenate([fb, b]),
                          jnp.concatenate([fi, index]), fa.shape[0])
        return (front, count + jnp.sum(ok), jnp.maximum(largest, n)), None

    out, _ = jax.lax.scan(body, carry, first + jnp.arange(lay.scan))
    return out


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
                b: str = "time_to_train_s", *, progress: bool = False,
                capacity: int = 1024, max_points: int = 1_000_000_000,
                block_points: int = GRID_BLOCK, call_points: int = GRID_CALL_POINTS) -> GridFront:
    """The feasible grid points not dominated in the metrics (a, b) (both
    minimised; names of `metrics`), streamed as `grid_search` streams (blocks
    of `block_points`, `call_points` per device call): each block is folded
    on the device into a running non-dominated set of at most `capacity`
    points, so memory stays flat. Equal to `non_dominated` over every feasible
    point (ties to the first in the grid's C order). `progress` draws a bar
    on stderr."""
    names = tuple(jax.eval_shape(lambda: metrics(prob.scenario, prob.core.assumptions,
                                                  ownership=prob.core.ownership)))
    for field, metric in (("a", a), ("b", b)):
        if metric not in names:
            raise ValueError(f"{field}={metric!r} is not a metric; metrics are "
                             f"{', '.join(names)}")
    if capacity < 1:
        raise ValueError(f"capacity={capacity} must be at least 1")
    axes, total = capped_axes(prob, grid_points, max_points, block_points, call_points)
    lay = grid_layout(prob, tuple(len(x) for x in axes), 1, block_points, call_points)
    inf = jnp.full(capacity, jnp.inf, dtype=float)
    carry = ((inf, inf, jnp.zeros(capacity, dtype=jnp.int64)), jnp.zeros((), dtype=jnp.int64),
             jnp.zeros((), dtype=jnp.int64))
    kernel = lambda core, table, c, first: _pareto_blocks(  # noqa: E731
        core, table, c, first, lay, (a, b))
    bar = Progress("pareto", 0, total, enabled=progress)
    # one device: the running fronts of several devices would need merging
    [((fa, fb, fi), count, largest)], times = stream_grid(prob, lay, grid_table(axes), kernel,
                                                      carry, bar, devices=jax.devices()[:1])
    bar.close()
    if int(largest) > capacity:
        raise ValueError(f"the front of a block held {int(largest):,} points, more than "
                         f"capacity={capacity:,}: raise it")
    keep = np.isfinite(fa)
    shape = tuple(len(x) for x in axes)
    digits = np.unravel_index(fi[keep], shape)
    knobs = [knob_dict(prob, [x[d[i]] for x, d in zip(axes, digits, strict=True)])
             for i in range(int(keep.sum()))]
    return GridFront((a, b), knobs, fa[keep], fb[keep], total, int(count),
                     grid_profile(times, 0.0, total)._asdict())


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



"""The exhaustive grid (`grid_search`), the yardstick of the gradient method:
every admissible value of every integer knob and `grid_points` values of each
continuous knob, evaluated exactly. Large grids stream: one compiled kernel
enumerates the points on the device from their index, evaluates fixed-size
blocks and keeps the best few, so host memory is flat in the grid size; the
block machinery (`GridLayout`, `grid_block`, `stream_grid`) also serves the grid's
Pareto front (`_pareto`). The streamed scan computes in float32 (`scan="float32"`,
about twice the points a second of float64 on a CPU) and keeps `GRID_RERANK`
candidates, which are evaluated again in float64 and ranked by that: the optimum
reported is the float64 grid's wherever it is among the float32 scan's best
`GRID_RERANK` (tests/test_optimize.py checks the two agree). The two precisions
are types, `Float32Scan` and `Float64Scan` of `Scan` (`scan_precision` parses
their names): each owns its inputs' width, its tolerance, how many candidates it
keeps and when it must be scanned again in float64.
"""


from __future__ import annotations

import abc
import contextlib
import math
import time
import warnings
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import options
from ..model import strategies
from ..model.relax import safe_log
from ..progress import Progress
from ._model import CHUNK, evaluate, grid_point
from ._problem import OBJECTIVES, Core, Problem
from ._result import Result, make_result, top_points

# The streamed grid: blocks of GRID_BLOCK points (vmapped), GRID_CALL_POINTS
# points per device call (a scan over blocks; one progress update), the
# GRID_TOP best kept (the defaults of `grid_search`'s `block_points`,
# `call_points` and `top`). Knobs in GRID_HOISTED (those the failure and straggler
# statistics depend on: a quadrature per GPU count) are enumerated outermost
# and held fixed within a block, so what depends on them alone is computed
# once per block instead of once per point.
GRID_BLOCK = 4096
GRID_CALL_POINTS = 1 << 18
GRID_TOP = 16
GRID_RERANK = 64  # candidates a float32 scan keeps for the float64 ranking
# How far a float32 scan's log objective or log constraint ratio may stray from
# float64's (assumption: a bound, not a measured maximum; the largest seen on
# benchmarks/search.py's problems is stated in docs/codesign.md). Where the kept
# candidates lie within it of one another (ties the cut may have split) or a point
# lies within it of a memory or limit bound (feasibility undecided in float32),
# the grid is scanned again in float64: the answer and the feasible count are then
# float64's, and `Result.profile["float64_rescan"]` says why.
FLOAT32_TOL = 1e-5
GRID_POINTS = 16  # values per continuous knob (`grid_search`'s default)
GRID_HOISTED = ("system.gpus", "parallel.dp")
GRID_STREAM_MIN = 1 << 16  # smaller grids go through `evaluate` (no kernel to compile)
# Load bounds, checked before any array is built: at most MAX_GRID_POINTS points in all
# (streamed, ~1e6 points/s: minutes to hours) and MAX_AXIS_POINTS values per
# continuous knob (the axes table holds 8 bytes per value and knob: 8 MB per knob).
MAX_GRID_POINTS = 1_000_000_000
MAX_AXIS_POINTS = 1_000_000


def _axis_sizes(prob: Problem, grid_points: int) -> list[int]:
    """The length of each knob's grid axis (`grid_axes`), without building them."""
    if grid_points < 2:
        raise ValueError(f"grid_points={grid_points} must be at least 2")
    return [len(adm) if k.integer else grid_points
            for k, adm in zip(prob.knobs, prob.admissible, strict=True)]


def grid_axes(prob: Problem, grid_points: int = GRID_POINTS) -> list[np.ndarray]:
    """The values the grid takes per knob: every admissible integer, or
    `grid_points` values of a continuous knob (log-spaced when lo > 0)."""
    _axis_sizes(prob, grid_points)
    axes = []
    for k, adm in zip(prob.knobs, prob.admissible, strict=True):
        if k.integer:
            axes.append(adm)
        elif k.log:
            axes.append(np.geomspace(k.lo, k.hi, grid_points))
        else:
            axes.append(np.linspace(k.lo, k.hi, grid_points))
    return axes


def grid_size(prob: Problem, grid_points: int = GRID_POINTS) -> int:
    """The number of grid points (`grid_axes`), counted without building them."""
    return math.prod(_axis_sizes(prob, grid_points))


def capped_axes(prob: Problem, grid_points: int, max_points: int, block_points: int,
                 call_points: int) -> tuple[list, int]:
    """The grid's axes and size; a ValueError, before any array is built, when it
    has more than `max_points` points, a continuous knob more than
    `MAX_AXIS_POINTS` values, or the streaming sizes are not positive."""
    for name, value in (("block_points", block_points), ("call_points", call_points)):
        if value < 1:
            raise ValueError(f"{name}={value} must be at least 1")
    sizes = _axis_sizes(prob, grid_points)
    total = math.prod(sizes)
    if total > max_points:
        raise ValueError(f"the grid has {total:,} points (grid_points={grid_points} over "
                         f"{len(sizes)} knobs), above the cap max_points={max_points:,}; "
                         "narrow `bounds` or lower `grid_points`")
    if grid_points > MAX_AXIS_POINTS and not all(k.integer for k in prob.knobs):
        raise ValueError(f"grid_points={grid_points:,} values per continuous knob is above "
                         f"the cap of {MAX_AXIS_POINTS:,} (8 bytes each per knob); lower "
                         "`grid_points`")
    return grid_axes(prob, grid_points), total


class GridLayout(NamedTuple):
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


def grid_layout(prob: Problem, sizes: tuple, top: int, block_points: int = GRID_BLOCK,
            call_points: int = GRID_CALL_POINTS) -> GridLayout:
    """The enumeration of a grid of axes `sizes`; `block_points` and
    `call_points` count model evaluations: a robust problem's point costs
    `Core.samples` (vmapped inside it), so its blocks hold that many times
    fewer points and the memory of a block stays what it is."""
    block_points = max(1, block_points // prob.core.samples)
    call_points = max(1, call_points // prob.core.samples)
    outer = [i for i, n in enumerate(prob.names) if n in GRID_HOISTED]
    if len(outer) == len(sizes):  # keep one knob to vmap over
        outer = outer[:-1]
    inner = [i for i in range(len(sizes)) if i not in outer]
    n_inner = math.prod(sizes[i] for i in inner)
    block = min(block_points, 1 << max(n_inner - 1, 1).bit_length())
    per_outer = -(-n_inner // block)
    blocks = per_outer * math.prod(sizes[i] for i in outer)
    scan = max(1, min(call_points // block, blocks))
    return GridLayout(tuple(outer), tuple(inner), tuple(sizes), _c_strides(sizes), block,
                   per_outer, blocks, scan, top, prob.objective, tuple(sorted(prob.limits)))


def _digits(index, positions, sizes):
    """C-order digits of `index` over the axes at `positions`."""
    strides = _c_strides([sizes[i] for i in positions])
    return [(index // st) % sizes[i] for i, st in zip(positions, strides, strict=True)]


def _merge_top(score, index, top: int):
    """The `top` smallest scores, ties by the smaller grid index."""
    score, index = jax.lax.sort((score, index), num_keys=2)
    return score[:top], index[:top]


def grid_block(core: Core, table: jax.Array, lay: GridLayout, j, outputs: tuple,
                near_tol: float = 0.0):
    """Block j of the grid, evaluated exactly: (the `outputs` metrics (block,)
    each, valid and feasible (block,), grid index (block,), valid and near a
    measured bound (block,): `grid_point`)."""
    o, start = j // lay.per_outer, (j % lay.per_outer) * lay.block
    local = start + jnp.arange(lay.block)
    valid = (j < lay.blocks) & (local < math.prod(lay.sizes[i] for i in lay.inner))
    digits = dict(zip(lay.outer, _digits(o, lay.outer, lay.sizes), strict=True))
    digits |= dict(zip(lay.inner, _digits(local, lay.inner, lay.sizes), strict=True))
    fixed = {i: table[i, digits[i]] for i in lay.outer}  # scalars: not batched

    def one(inner_values):
        values = fixed | dict(zip(lay.inner, inner_values, strict=True))
        return grid_point(core, tuple(values[i] for i in range(len(lay.sizes))), outputs,
                           lay.limits, near_tol)

    out, feasible, near = jax.vmap(one)(tuple(table[i, digits[i]] for i in lay.inner))
    index = sum(digits[i] * lay.strides[i] for i in range(len(lay.sizes)))
    return out, valid & feasible, index, valid & near


def _grid_blocks(core: Core, table: jax.Array, carry, first, layout: GridLayout,
                 near_tol: float = 0.0):
    """Evaluate blocks first .. first + layout.scan - 1 of the grid exactly and
    fold them into carry = (scores (top,), grid indices (top,), feasible count,
    count of points within `near_tol` of a measured bound): score = loss of a
    feasible point, inf otherwise."""
    lay = layout
    key, goal = OBJECTIVES[lay.objective]

    def body(c, j):
        best, where, count, nears = c
        (value,), ok, index, near = grid_block(core, table, lay, j, (key,), near_tol)
        loss = goal * safe_log(value)
        ok = ok & jnp.isfinite(loss)
        score = jnp.where(ok, loss, jnp.inf)
        neg, k = jax.lax.top_k(-score, min(lay.top, lay.block))  # ties: lower index first
        best, where = _merge_top(jnp.concatenate([best, -neg]),
                                 jnp.concatenate([where, index[k]]), lay.top)
        return (best, where, count + jnp.sum(ok), nears + jnp.sum(near)), None

    out, _ = jax.lax.scan(body, carry, first + jnp.arange(lay.scan))
    return out


class GridProfile(NamedTuple):
    """Where the streamed grid's time went (seconds)."""

    compile_s: float  # the first call's excess over a typical one (tracing, compiling)
    stream_s: float  # enumeration, evaluation and top-N reduction (the device, streamed)
    finish_s: float  # re-evaluating the kept best points and the winner's metrics
    calls: int  # device calls (one progress update each)
    points_per_s: float  # grid points per second of stream_s


def grid_table(axes: list) -> jax.Array:
    """The grid's axes as one (knobs, longest axis) array (zero-padded)."""
    table = np.zeros((len(axes), max(len(a) for a in axes)))
    for i, a in enumerate(axes):
        table[i, :len(a)] = a
    return jnp.asarray(table)


def _narrowed(a):
    """An array in 32 bits (floats clipped to float32's finite range: an unset
    limit, 1e300, stays a number), for a float32 scan."""
    a = np.asarray(a)
    if a.dtype == np.float64:
        big = float(np.finfo(np.float32).max)
        return np.clip(a, -big, big).astype(np.float32)
    return a.astype(np.int32) if a.dtype == np.int64 else a


class Scan(eqx.Module):
    """The precision of a streamed grid's scan (`grid_search`'s `scan`), known by its `name`."""

    name: eqx.AbstractClassVar[str]
    tolerance: eqx.AbstractClassVar[float]  # how near a bound or a tie is undecided
    index_dtype: eqx.AbstractClassVar[type]  # of the first block's index

    @abc.abstractmethod
    def narrowed(self, tree):
        """`tree`'s arrays in the scan's width."""

    @abc.abstractmethod
    def enter(self, scope: contextlib.ExitStack) -> None:
        """Enter, in `scope`, what the kernel is traced and run under."""

    @abc.abstractmethod
    def candidates(self, top: int) -> int:
        """How many of the best points the scan keeps for the float64 ranking."""

    @abc.abstractmethod
    def redo(self, near: int, score: np.ndarray, top: int) -> str:
        """Why the grid must be scanned again in float64 ("": it need not), given
        the points `near` a bound and the kept `score`s, best first."""


class Float32Scan(Scan):
    """Traced and run with JAX's 64-bit types off (`jax.enable_x64(False)`), its
    inputs narrowed (`_narrowed`); keeps `GRID_RERANK` candidates, at least
    `top`; scanned again in float64 where a point lies within `FLOAT32_TOL` of
    a memory or limit bound or the kept lie within it of the best."""

    name: ClassVar[str] = "float32"
    tolerance: ClassVar[float] = FLOAT32_TOL
    index_dtype: ClassVar[type] = np.int32

    def narrowed(self, tree):
        return jax.tree.map(_narrowed, tree)

    def enter(self, scope: contextlib.ExitStack) -> None:
        # the model's float64 requests are float32 here, as asked
        scope.enter_context(jax.enable_x64(False))
        scope.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", "Explicitly requested dtype", UserWarning)

    def candidates(self, top: int) -> int:
        return max(top, GRID_RERANK)

    def redo(self, near: int, score: np.ndarray, top: int) -> str:
        if near:
            return "a point within float32's tolerance of a memory or limit bound"
        if np.isfinite(score[-1]) and score[-1] - score[0] <= FLOAT32_TOL:
            return f"more than {top} points tie within float32's tolerance"
        return ""


class Float64Scan(Scan):
    """In the model's own float64: keeps `top`, decides every bound and tie."""

    name: ClassVar[str] = "float64"
    tolerance: ClassVar[float] = 0.0
    index_dtype: ClassVar[type] = np.int64

    def narrowed(self, tree):
        return tree

    def enter(self, scope: contextlib.ExitStack) -> None:
        pass

    def candidates(self, top: int) -> int:
        return top

    def redo(self, near: int, score: np.ndarray, top: int) -> str:
        return ""


SCAN_CLASSES = (Float32Scan, Float64Scan)
SCANS = tuple(c.name for c in SCAN_CLASSES)  # the streamed scan's precisions (`grid_search`)
FLOAT64 = Float64Scan()


def scan_precision(value, key: str = "scan") -> Scan:
    """The scan named `value` (or `value` itself if it is a `Scan`); an unknown
    name is a one-line ValueError naming `key` and the choices."""
    return strategies.parse(key, value, Scan, SCAN_CLASSES)


def stream_devices() -> list:
    """The devices a streamed grid splits its blocks over: every local accelerator;
    on the CPU one device (XLA:CPU already spreads one program's loops over the
    cores: 1.8x the points a second on 2 cores against one, measured here)."""
    devices = jax.local_devices()
    return devices if devices[0].platform != "cpu" else devices[:1]


def stream_grid(prob: Problem, lay: GridLayout, table: jax.Array, kernel, carry, bar: Progress,
            scan: Scan = FLOAT64, devices=None):
    """Run a block kernel, kernel(core, table, carry, first block), over the whole
    grid, compiled once (`compiling.options(batch=True)`): (each device's final
    carry as numpy arrays, seconds per round of device calls). The `devices`
    (default `stream_devices()`) take consecutive calls' worth of blocks in
    turn, each folding into a carry of its own, asynchronously, in the `scan`'s
    precision (`Float32Scan`: with 64-bit types off, its inputs narrowed)."""
    total = math.prod(lay.sizes)
    devices = stream_devices() if devices is None else list(devices)
    arrays, static = eqx.partition(prob.core, eqx.is_array)
    arrays, table, carry = scan.narrowed((arrays, table, carry))
    run = jax.jit(lambda arrays, *rest: kernel(eqx.combine(arrays, static), *rest),
                  compiler_options=options(batch=True))
    placed = [jax.device_put((arrays, table), d) for d in devices]
    carries = [jax.device_put(carry, d) for d in devices]
    times, step = [], lay.scan * len(devices)
    with contextlib.ExitStack() as scope:
        scan.enter(scope)
        for first in range(0, lay.blocks, step):
            t0 = time.perf_counter()
            for i, (a, tab) in enumerate(placed):
                if first + i * lay.scan < lay.blocks:  # dispatched, not waited for
                    carries[i] = run(a, tab, carries[i], np.asarray(
                        first + i * lay.scan, dtype=scan.index_dtype))
            jax.block_until_ready(carries)
            times.append(time.perf_counter() - t0)
            done = min(lay.blocks, first + step)
            bar.set(0, total if done == lay.blocks else min(total, done * lay.block))
    return [jax.tree.map(np.asarray, c) for c in carries], times


def _stream_grid(prob: Problem, axes: list, top: int, bar: Progress, block_points: int,
                 call_points: int, scan: Scan = FLOAT64, devices=None):
    """The top-N kernel over the whole grid: (scores, grid indices of the `top`
    best, feasible count, seconds per round of device calls, why the scan must
    be redone in float64 or ""); the devices' tops merged as the kernel merges
    blocks (ties to the smaller grid index). A float32 scan asks to be redone
    where its kept scores all lie within `FLOAT32_TOL` of the best (more ties
    than it kept) or a point lies within it of a measured bound."""
    lay = grid_layout(prob, tuple(len(a) for a in axes), top, block_points, call_points)
    near_tol = scan.tolerance
    carry = (np.full(top, np.inf), np.zeros(top, dtype=np.int64), np.zeros((), dtype=np.int64),
             np.zeros((), dtype=np.int64))
    kernel = lambda core, table, c, first: _grid_blocks(  # noqa: E731
        core, table, c, first, lay, near_tol)
    carries, times = stream_grid(prob, lay, grid_table(axes), kernel, carry, bar, scan, devices)
    score = np.concatenate([c[0] for c in carries]).astype(float)
    index = np.concatenate([c[1] for c in carries]).astype(np.int64)
    order = np.lexsort((index, score))[:top]
    score, index = score[order], index[order]
    redo = scan.redo(sum(int(c[3]) for c in carries), score, top)
    return score, index, sum(int(c[2]) for c in carries), times, redo


def grid_profile(times: list, finish_s: float, total: int) -> GridProfile:
    """The first call compiles: its excess over a typical call counts as
    compilation (a grid done in one call counts whole as streaming)."""
    typical = float(np.median(times[1:])) if len(times) > 1 else times[0]
    compile_s = max(times[0] - typical, 0.0)
    stream_s = sum(times) - compile_s
    return GridProfile(compile_s, stream_s, finish_s, len(times), total / max(stream_s, 1e-12))


def _host_grid(prob: Problem, axes: list, top: int, keep: tuple, bar: Progress):
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
        bar.set(0, int(idx[-1]) + 1)
    return score, index, count, times, kept


def grid_search(prob: Problem, grid_points: int = GRID_POINTS, *, progress: bool = False,
                keep: tuple[str, ...] = (), max_points: int = MAX_GRID_POINTS,
                top: int = GRID_TOP, stream: bool | None = None,
                block_points: int = GRID_BLOCK, call_points: int = GRID_CALL_POINTS,
                scan: Scan | str = "float32", devices=None) -> Result:
    """Evaluate every grid point exactly (module docstring) and return the best.

    A grid of more than `GRID_STREAM_MIN` model evaluations (points x
    `Core.samples`: a robust problem evaluates each point on every sample)
    streams (`stream`: True or False decides instead): points are enumerated
    on the device from their index, evaluated in blocks of `block_points`
    evaluations by one compiled kernel, `call_points` per device call (both
    `Core.samples` times fewer points on a robust problem, `grid_layout`), and
    each block is reduced on the device to its `top` best feasible points;
    only those reach the host, so memory stays flat in the grid size.
    Smaller grids (or `keep`) go through `evaluate` in chunks. `progress`
    draws a bar on stderr. The streamed scan computes in `scan` precision (a
    `Scan` or its name: "float32", `Float32Scan`, the default: `GRID_RERANK`
    candidates kept, at least `top`; "float64", `Float64Scan`: `top`). The
    kept are evaluated again in float64 (`evaluate`) and the best wins, ties
    to the first in the grid's C order (knobs in the order given), as a plain
    loop over the grid would find. The streamed
    blocks are split over `devices` (default `stream_devices()`: every local
    GPU or TPU; one CPU device, whose program already uses every core).
    `Result.top` lists them (knobs and objective, best first) and
    `Result.profile` the timings (`GridProfile`).

    `keep` names metrics to return for every feasible point (small grids; not
    streamed), in `Result.metrics["grid"]` (lists), with the knob values under
    "knobs"."""
    start = time.perf_counter()
    axes, total = capped_axes(prob, grid_points, max_points, block_points, call_points)
    if top < 1:
        raise ValueError(f"top={top} must be at least 1")
    scan = scan_precision(scan)
    if keep and stream:
        raise ValueError(f"keep={keep!r} needs every point's metrics: stream=True cannot")
    bar = Progress("grid", 0, total, enabled=progress)
    kept, redo = {}, ""
    if not (total * prob.core.samples > GRID_STREAM_MIN if stream is None else stream) or keep:
        score, index, feasible_points, times, kept = _host_grid(prob, axes, top, keep, bar)
    else:
        candidates = scan.candidates(top)
        score, index, feasible_points, times, redo = _stream_grid(
            prob, axes, candidates, bar, block_points, call_points, scan, devices)
        if redo:
            score, index, feasible_points, more, _ = _stream_grid(
                prob, axes, top, bar, block_points, call_points, FLOAT64, devices)
            times += more
    bar.close()
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
        best_x, best_value = prob.here, np.nan
    r = make_result(prob, "grid", best_x, best_value, feasible, total, start, [], grid_size=total,
                feasible_points=feasible_points)
    profile = grid_profile(times, time.perf_counter() - finish, total)._asdict()
    profile["float64_rescan"] = redo
    best = top_points(prob, xs, ex, min(top, len(xs))) if feasible else []
    if keep:
        r.metrics["grid"] = kept
    return r._replace(top=best, profile=profile)



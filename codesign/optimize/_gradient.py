
"""The gradient method (`optimize`): projected Adam on the relaxed model from
many random starts in one vmapped, scanned run (the temperature annealed, the
penalty grown), rounding to the admissible values that bracket each optimum,
exact evaluation, a beam search on the lattice of admissible values, and a
polish of the continuous knobs on the exact model.
"""

from __future__ import annotations

import itertools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import scenario as sc
from ..compiling import ahead as _ahead
from ..compiling import run as _compiled_run
from ..model.relax import Relaxed
from ._model import (
    MU_END,
    Exact,
    chunk_points,
    chunked,
    concat_exact,
    exact_batch,
    relaxed_loss,
    structural_point,
)
from ._problem import Core, Problem, to_box, to_values
from ._result import Result, knob_dict, make_result, point_key, top_points

# Optimiser settings (numerical choices, not physics).
T_START, T_END = 0.3, 1e-3  # relaxation temperature, annealed geometrically
MU_START = 10.0  # penalty weight, grown geometrically to MU_END
LEARNING_RATE = 0.05  # Adam step in unit-box coordinates, cosine-decayed to 5% of it
SINGLE_STEPS = 3  # lattice search: one knob moves up to this many admissible values
EXACT_CHUNK = 256  # points per exact evaluation of the method (candidate sets pad to it)
RULE_CHUNK = 1 << 14  # points per check of the structural rules alone
REPAIRS = 2  # a point that breaks a structural rule is replaced by its 2 nearest repairs
MAX_DESCENT_STEPS = 2_000_000  # starts x steps: the paths' memory (x knobs x 8 bytes)
class _Clock:
    """Where the method's wall time goes (seconds): compiling, descending, exact
    evaluation; the executables kept in `store` (a folder, or None) as well as
    in this process."""

    def __init__(self, store=None):
        self.s = {"compile_s": 0.0, "descent_s": 0.0, "exact_s": 0.0}
        self.store = store

    def ahead(self, prob: Problem, descent: tuple) -> None:
        """The method's three programs started at once (`compiling.ahead`): the
        descent on `descent` (its arguments), the rule check and the exact
        evaluation on chunks of zeros of the shapes they run on; each compiles
        (or is read back from the store) in a thread while the next is traced,
        and the first `run` of each waits for its own."""
        t0, knobs = time.perf_counter(), len(prob.knobs)
        started = [_ahead(_multistart, prob.core, *descent, store=self.store),
                   _ahead(_structural_batch, prob.core,
                          jax.device_put(np.zeros((RULE_CHUNK, knobs))), store=self.store),
                   _ahead(exact_batch, prob.core,
                          jax.device_put(np.zeros((chunk_points(prob.core, EXACT_CHUNK), knobs))),
                          store=self.store)]
        if any(started):  # tracing and lowering, here
            self.s["compile_s"] += time.perf_counter() - t0

    def run(self, jitted, phase: str, *args):
        """jitted(*args) through its cached executable, timed."""
        t0 = time.perf_counter()
        out, compile_s = _compiled_run(jitted, *args, store=self.store)
        self.s["compile_s"] += compile_s
        self.s[phase] += time.perf_counter() - t0 - compile_s
        return out


def _best_index(ex: Exact) -> int | None:
    if not np.any(ex.feasible):
        return None
    return int(np.argmin(np.where(ex.feasible, ex.loss, np.inf)))


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

    final, (losses, zs) = jax.lax.scan(step, _State(z0, opt.init(z0)), (Relaxed(t), mu))
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


@jax.jit
def _structural_batch(core: Core, x: jax.Array) -> jax.Array:
    """The structural rules (`structural_point`) at points x (n, K): (n,) bool."""
    def one(xi):
        values = tuple(xi[i] for i in range(x.shape[1]))
        return structural_point(core, sc.set_knobs(core.scenario, dict(zip(
            core.coords, values, strict=True))), values)
    return jax.vmap(one)(x)


def _structural(prob: Problem, clock: _Clock, x: np.ndarray) -> np.ndarray:
    out = np.empty(len(x), dtype=bool)
    for i in range(0, len(x), RULE_CHUNK):
        block = x[i:i + RULE_CHUNK]
        pad = np.concatenate([block, np.repeat(block[-1:], RULE_CHUNK - len(block), 0)])
        out[i:i + len(block)] = np.asarray(clock.run(_structural_batch, "exact_s", prob.core,
                                                     jax.device_put(pad)))[:len(block)]
    return out


def _repaired(prob: Problem, clock: _Clock, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points of x (n, K) that meet the structural rules, and for each that
    does not, its `REPAIRS` nearest repairs (in log distance): one integer knob
    moved to the nearest admissible value below or above at which every rule
    holds with the other knobs as they are (the rules couple knobs, e.g. gpus
    = dp tp pp cp with dp micro_batch | global_batch, which bracketing each
    knob alone rarely meets). Returns (points, index in x of each one's source)."""
    ok = _structural(prob, clock, x)
    bad = np.flatnonzero(~ok)
    keep, source = [x[ok]], [np.flatnonzero(ok)]
    if len(bad) == 0:
        return x[ok], source[0]
    fixes, dist = [], []
    for i, (k, adm) in enumerate(zip(prob.knobs, prob.admissible, strict=True)):
        if not k.integer or len(adm) < 2:
            continue
        trial = np.repeat(x[bad], len(adm), 0)
        trial[:, i] = np.tile(adm, len(bad))
        valid = _structural(prob, clock, trial).reshape(len(bad), len(adm))
        pos = np.searchsorted(adm, x[bad, i])  # admissible values below: adm[:pos]
        cols = np.arange(len(adm))
        below = np.where(valid & (cols < pos[:, None]), cols, -1).max(axis=1)
        above = np.where(valid & (cols >= pos[:, None]), cols, len(adm)).min(axis=1)
        for j in (below, above):
            found = (j >= 0) & (j < len(adm))
            y = x[bad].copy()
            y[found, i] = adm[j[found]]
            fixes.append(y)
            dist.append(np.where(found, np.abs(np.log(y[:, i] / np.maximum(x[bad, i], 1e-300))),
                                 np.inf))
    if fixes:
        fixes, dist = np.stack(fixes, axis=1), np.stack(dist, axis=1)  # (bad, options, K)
        order = np.argsort(dist, axis=1, kind="stable")[:, :REPAIRS]
        rows = np.arange(len(bad))[:, None]
        found = np.isfinite(dist[rows, order])
        keep.append(fixes[rows, order][found])
        source.append(np.broadcast_to(bad[:, None], order.shape)[found])
    return np.concatenate(keep), np.concatenate(source)


class _Pool(NamedTuple):
    """Points evaluated exactly so far, with the start each descends from."""

    x: np.ndarray  # (n, d) varied knob values
    ex: Exact
    origin: np.ndarray  # (n,) index of the start


def _exact(prob: Problem, clock: _Clock, x: np.ndarray) -> Exact:
    """Exact evaluation of points x (n, K): the vmapped `exact_batch` that
    `evaluate` and the grid use, compiled once for `EXACT_CHUNK` points."""
    return chunked(lambda core, xs: clock.run(exact_batch, "exact_s", core, xs), prob.core,
                   x, EXACT_CHUNK)


def _add(pool: _Pool | None, prob: Problem, clock: _Clock, x: np.ndarray,
         origin: np.ndarray) -> _Pool:
    ex = _exact(prob, clock, x)
    if pool is None:
        return _Pool(x, ex, origin)
    return _Pool(np.concatenate([pool.x, x]), concat_exact(pool.ex, ex),
                 np.concatenate([pool.origin, origin]))


def _ranked(pool: _Pool, k: int) -> np.ndarray:
    """Indices of the k best structurally valid points by the penalised exact loss."""
    score = np.where(pool.ex.structural, pool.ex.penalised, np.inf)
    order = np.argsort(score, kind="stable")[:k]
    return order[np.isfinite(score[order])]


def _rounded_candidates(prob: Problem, clock: _Clock, xf: np.ndarray, width: int):
    """Every start's bracketing admissible combinations, repaired (`_repaired`)
    and deduplicated, with origins."""
    cands = [_round(prob, x, width) for x in xf]
    origin = np.concatenate([np.full(len(c), i) for i, c in enumerate(cands)])
    cands, source = _repaired(prob, clock, np.concatenate(cands))
    _, idx = np.unique(np.round(cands, 9), axis=0, return_index=True)
    return cands[idx], origin[source[idx]]


def _refine(prob: Problem, clock: _Clock, pool: _Pool, beam: int, rounds: int):
    """Beam search on the lattice: each round expands (`_lattice_moves`) the
    `beam` best points not yet expanded; it stops when the `beam` best have all
    been expanded, or after `rounds`."""
    log, evaluations = [], 0
    seen = {point_key(x) for x in pool.x}
    expanded: set = set()
    for r in range(rounds):
        todo = [i for i in _ranked(pool, beam) if point_key(pool.x[i]) not in expanded]
        if not todo:
            break
        tried, sources = [], []
        for i in todo:
            expanded.add(point_key(pool.x[i]))
            m = _lattice_moves(prob, pool.x[i])
            tried.append(m)
            sources.append(np.full(len(m), pool.origin[i]))
        tried, at = _repaired(prob, clock, np.concatenate(tried))
        moves, origins = [], []
        for m, o in zip(tried, np.concatenate(sources)[at], strict=True):
            if point_key(m) not in seen:
                seen.add(point_key(m))
                moves.append(m)
                origins.append(o)
        if moves:
            pool = _add(pool, prob, clock, np.asarray(moves), np.asarray(origins))
            evaluations += len(moves)
        log.append({"phase": "refine", "round": r, "expanded": len(todo),
                    "evaluated": len(moves),
                    "best_penalised_loss": float(pool.ex.penalised[_ranked(pool, 1)][0])})
    return pool, evaluations, log


def _polish(prob: Problem, clock: _Clock, pool: _Pool, count: int, starts: int, steps: int):
    """Adam on the continuous knobs of the `count` best points, integers fixed,
    on the exact model (`relax.EXACT`). Runs the descent's executable: the seeds are
    padded to `starts` lanes by repetition (the repeats are not counted)."""
    continuous = np.asarray([not k.integer for k in prob.knobs])
    best = _ranked(pool, min(count, starts))
    if not continuous.any() or len(best) == 0:
        return pool, 0, []
    seeds = pool.x[best]
    lanes = np.concatenate([seeds, np.repeat(seeds[-1:], starts - len(seeds), 0)])
    xp, _, _ = clock.run(_multistart, "descent_s", prob.core,
                         jax.device_put(to_box(prob, lanes)), jax.device_put(np.zeros(steps)),
                         jax.device_put(np.full(steps, MU_END)),
                         jax.device_put(continuous.astype(float)))
    xp = np.array(xp)[: len(seeds)]
    xp[:, ~continuous] = seeds[:, ~continuous]  # keep the integers exact
    pool = _add(pool, prob, clock, xp, pool.origin[best])
    new = pool.ex.loss[-len(xp):][pool.ex.feasible[-len(xp):]]
    log = [{"phase": "polish", "points": len(xp), "steps": steps,
            "best_loss": float(new.min(initial=np.inf))}]
    return pool, len(seeds) * steps + len(xp), log


def optimize(prob: Problem, *, starts: int = 16, steps: int = 150, seed: int = 0,
             width: int = 1, beam: int = 8, rounds: int = 8, polish: int = 8,
             top: int = 0, include=None, store=None) -> Result:
    """The gradient method (module docstring): relaxed multi-start descent,
    rounding to the admissible neighbourhood (`width` values either side),
    exact evaluation, lattice beam search (`beam` wide, at most `rounds`),
    continuous polish of the `polish` best. Start 0 is the scenario's own point.
    With `top` > 0, `Result.top` lists the `top` best distinct feasible points
    of every one evaluated exactly on the way. Points `include` (n, K), if
    given, join the rounded candidates (evaluated, refined and polished as
    they are): a robust search given the nominal optimum ends no worse than
    it. Two executables per problem's knobs, `starts` and `steps` (the
    descent, the exact evaluation), compiled on first use and reused by every
    later call, and with `store` (a folder) kept there for a later process,
    keyed by the problem's structure (the varied knobs, the scenario's
    shape and `Core.parts`: bounds, objective and limits are arguments), so the same or an
    edited question neither traces nor compiles; `Result.profile` says where
    the wall time went (`compile_s`: tracing and compiling or reading back, 0
    when reused)."""
    if not (starts >= 1 and steps >= 2 and starts * steps <= MAX_DESCENT_STEPS):
        raise ValueError(f"starts={starts} must be >= 1 and steps={steps} >= 2, with "
                         f"starts x steps at most {MAX_DESCENT_STEPS:,} (the descent keeps "
                         "every start's path in memory)")
    if width < 1 or beam < 1:
        raise ValueError(f"width={width} and beam={beam} must be >= 1")
    start = time.perf_counter()
    clock = _Clock(store)
    rng = np.random.default_rng(seed)
    x0 = np.stack([rng.uniform(k.lo, k.hi, starts) if not k.log
                   else np.exp(rng.uniform(np.log(k.lo), np.log(k.hi), starts))
                   for k in prob.knobs], axis=1)
    x0[0] = prob.here
    t, mu = _schedule(steps)
    # arrays made in NumPy and put on the device (`jnp.asarray` compiles a conversion
    # for each shape)
    descent = (jax.device_put(to_box(prob, x0)), t, mu, jax.device_put(np.ones(len(prob.knobs))))
    clock.ahead(prob, descent)
    xf, losses, xs = (np.asarray(a) for a in clock.run(_multistart, "descent_s", prob.core,
                                                       *descent))
    evaluations = starts * steps

    cands, origin = _rounded_candidates(prob, clock, xf, width)
    if include is not None:  # origin -1: no start descended to them
        extra = np.atleast_2d(np.asarray(include, dtype=float))
        if extra.shape[1] != len(prob.knobs):
            raise ValueError(f"include has {extra.shape[1]} values a point; the problem "
                             f"varies {len(prob.knobs)} knobs")
        every_point = np.concatenate([cands, extra])
        _, at = np.unique(np.round(every_point, 9), axis=0, return_index=True)
        cands = every_point[at]
        origin = np.concatenate([origin, np.full(len(extra), -1)])[at]
    pool = _add(None, prob, clock, cands, origin)
    evaluations += len(cands)
    log = [{"phase": "round", "candidates": int(len(cands)),
            "structural": int(np.sum(pool.ex.structural)),
            "feasible": int(np.sum(pool.ex.feasible))}]
    if any(k.integer for k in prob.knobs):
        pool, n, more = _refine(prob, clock, pool, beam, rounds)
        evaluations, log = evaluations + n, log + more
    pool, n, more = _polish(prob, clock, pool, polish, starts, steps)
    evaluations, log = evaluations + n, log + more

    b = _best_index(pool.ex)
    feasible = b is not None
    if b is None:  # nothing feasible: report the least-violating valid point
        ranked = _ranked(pool, 1)
        b = int(ranked[0]) if len(ranked) else 0
    win = int(pool.origin[b])
    every = max(1, steps // 10)
    t, mu = np.asarray(t), np.asarray(mu)  # read on the host (not an indexing op each)
    path = [{"phase": "gradient", "start": win, "step": int(i), "t": float(t[i]),
             "mu": float(mu[i]), "relaxed_loss": float(losses[win, i]),
             "knobs": knob_dict(prob, xs[win, i])}
            for i in [*range(0, steps, every), steps - 1]] if win >= 0 else []
    path.append({"phase": "gradient_end", "start": win, "knobs": knob_dict(prob, xf[win])}
                if win >= 0 else {"phase": "included", "points": len(np.atleast_2d(include))})
    path += log
    path.append({"phase": "best", "knobs": knob_dict(prob, pool.x[b]),
                 "objective": float(pool.ex.objective[b]), "feasible": feasible})
    metrics = {k: float(v[b]) for k, v in pool.ex.metrics.items()}
    return make_result(prob, "gradient", pool.x[b], pool.ex.objective[b], feasible, evaluations,
                   start, path, metrics=metrics, profile=dict(clock.s),
                   top=top_points(prob, pool.x, pool.ex, top) if top > 0 else None)

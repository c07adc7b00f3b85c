"""Robust co-design: the design that is best over the model's uncertain
constants, not at their nominal values.

The uncertainty model (`sigmas`): each uncertain constant (a continuous
scenario key) is its scenario value times a log-normal factor of median 1,
exp(sigma z) with z a standard normal, clipped to the key's domain (an
efficiency stays in (0, 1]); the factors of different constants are
independent. `DEFAULT_SIGMAS` states each sigma and where it comes from: the
matmul efficiency's is the width of `codesign validate`'s 68% interval of
step-time ratios for the scenario's chip family (`uncertainty.ratio_interval`:
sigma = log(hi / lo) / 2), the others are read from the sources' ranges or
are labelled assumptions (docs/sources.md). A constant at 0 (the default
`reliability.straggler_q`) stays 0.

A robust problem (`robust`) draws S samples once (seeded; each constant's
draws from its own stream, so adding a constant leaves the others' as they
are) and evaluates every design on the same S samples (common random
numbers: two designs' statistics differ by the designs, not by the draws).
Every metric becomes a statistic over the samples (`_model.problem_metrics`):
the mean, or with `quantile` Q the Harrell-Davis estimate of the Q-quantile
(a weighted sum of the sorted samples, Beta(Q (S + 1), (1 - Q)(S + 1))
weights: smooth in the samples, so the gradient method descends the same
statistic the exact evaluation and the grid rank by). For a metric where more
is better (tokens per second, per joule) the quantile is the (1 - Q)-quantile:
the value the design reaches with probability Q. The limits bound the same
statistic (a budget in dollars: the mean or the Q-quantile cost). Both
methods solve a robust problem as they solve any other; each point costs S
model evaluations (`Result.evaluations` counts them).

`compare` evaluates the nominal optimum and the robust one on the same
samples and under the nominal model: the nominal design's regret (how much
worse its statistic is than the robust design's) and the robust design's
price under the nominal model.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betainc

from .. import scenario as sc
from .. import uncertainty
from ._method import Method, search_method
from ._model import evaluate
from ._problem import INTEGER_KNOBS, OBJECTIVES, Problem
from ._result import Result

SAMPLES = 64  # draws of the uncertain constants (the default of `robust`)
MAX_SAMPLES = 4096  # each point costs one model evaluation per sample
MAX_SIGMA = 3.0  # a factor of 20 at one sigma: beyond any constant's spread
MATMUL = "system.matmul_efficiency"
# the sigma of the log-normal factor of each uncertain constant, and its source;
# the matmul efficiency's (None here) is validate's spread for the chip family
DEFAULT_SIGMAS = {
    MATMUL: (None, "validate's 68% interval of step-time ratios for the chip family"),
    "system.attention_efficiency": (0.19, "FlashAttention-2 at 50-73% of peak on A100 "
                                          "(Dao 2023) read as a 68% interval"),
    "system.hbm_efficiency": (0.05, "ASSUMPTION: copies reach 85-95% of the HBM peak"),
    "system.scale_up_efficiency": (0.1, "ASSUMPTION: +-10% about the nccl-tests busbw"),
    "system.scale_out_efficiency": (0.1, "ASSUMPTION: +-10% about the nccl-tests busbw"),
    "system.scale_up_latency_s": (0.5, "ASSUMPTION: a factor 1.65 either side"),
    "system.scale_out_latency_s": (0.5, "ASSUMPTION: a factor 1.65 either side"),
    "reliability.straggler_q": (0.5, "ASSUMPTION: a factor 1.65 either side"),
    "reliability.straggler_sigma": (0.5, "ASSUMPTION: a factor 1.65 either side"),
    "reliability.gpu_mtbf_s": (0.5, "ASSUMPTION: a factor 1.65 either side of Llama 3's rate"),
}


class Uncertainty(NamedTuple):
    """What a robust problem draws: sigma per uncertain constant (and where it
    comes from), S samples from `seed`, and the statistic (`quantile` Q, or
    None: the mean)."""

    sigmas: dict  # scenario key -> sigma of the log of its factor
    sources: dict  # scenario key -> where its sigma comes from
    samples: int
    seed: int
    quantile: float | None

    def to_json(self) -> dict:
        return {"statistic": "mean" if self.quantile is None else "quantile",
                "quantile": self.quantile, "samples": self.samples, "seed": self.seed,
                "sigmas": dict(self.sigmas), "sources": dict(self.sources)}


def matmul_sigma(family: str) -> tuple[float, str]:
    """The matmul efficiency's sigma, half the log-width of validate's 68%
    interval of step-time ratios for chip `family` (every family's rows where
    it has too few; the whole spread of the step time put on the matmuls),
    and which rows it comes from."""
    r = uncertainty.ratio_interval(family)
    few = "no" if r.family_rows == 0 else f"only {r.family_rows}"
    rows = (f"validate's {r.rows} {family} rows" if r.rows_family != "all" else
            f"validate's {r.rows} rows of every family" if family == "all" else
            f"validate's {r.rows} rows of every family, {few} {family} "
            f"row{'' if r.family_rows == 1 else 's'}")
    return math.log(r.hi / r.lo) / 2, rows


def sigmas(scn: sc.Scenario, family: str = "all", given: dict | None = None) -> dict:
    """The uncertainty model of `scn`: {key: (sigma, source)} of
    `DEFAULT_SIGMAS` (the matmul efficiency's from chip `family`,
    `matmul_sigma`) and the sigmas `given` ({key: sigma}, source "given"; 0
    makes a constant certain: its factor is exactly 1), the keys `scn` has."""
    out = {k: matmul_sigma(family) if s is None else (s, source)
           for k, (s, source) in DEFAULT_SIGMAS.items()}
    have = sc.knobs(scn)
    for key, value in (given or {}).items():
        if key not in have or key in INTEGER_KNOBS:
            raise ValueError(f"`uncertainty` {key}: not a continuous key of this scenario "
                             "(such as system.matmul_efficiency)")
        value = float(value)
        if not (math.isfinite(value) and 0 <= value <= MAX_SIGMA):
            raise ValueError(f"`uncertainty` {key}={value:g} must be a sigma in "
                             f"[0, {MAX_SIGMA:g}]")
        out[key] = (value, "given")
    return {k: v for k, v in out.items() if k in have}


def factors(sig: dict, samples: int, seed: int) -> np.ndarray:
    """(samples, U) log-normal factors exp(sigma z), one column per constant of
    `sig` in its order; each constant's z from its own stream (seed, the CRC-32
    of its key): a constant's draws stay the same when keys are added."""
    cols = [np.exp(s * np.random.default_rng([seed, zlib.crc32(k.encode())])
                   .standard_normal(samples)) for k, s in sig.items()]
    return np.stack(cols, axis=1) if cols else np.ones((samples, 0))


def quantile_weights(samples: int, q: float) -> np.ndarray:
    """Harrell-Davis weights of the Q-quantile over `samples` sorted values:
    the Beta(q (S + 1), (1 - q)(S + 1)) mass of each ((i - 1) / S, i / S]."""
    a, b = q * (samples + 1), (1 - q) * (samples + 1)
    return np.diff(np.asarray(betainc(a, b, jnp.linspace(0.0, 1.0, samples + 1))))


def robust(prob: Problem, family: str = "all", given: dict | None = None, *,
           samples: int = SAMPLES, seed: int = 0, quantile: float | None = None) -> Problem:
    """The robust version of `prob`: the same knobs, bounds, objective and
    limits, every metric the mean (or `quantile` Q) over `samples` draws of the
    uncertain constants (`sigmas(prob.scenario, family, given)`). It shares no
    compilation with `prob` (the samples are vmapped inside each point)."""
    if not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples={samples} must be in [1, {MAX_SAMPLES}]")
    if quantile is not None and not 0 < quantile < 1:
        raise ValueError(f"quantile={quantile:g} must be in (0, 1)")
    model = sigmas(prob.scenario, family, given)
    sig = {k: s for k, (s, _) in model.items()}
    w = np.full(samples, 1.0 / samples) if quantile is None else quantile_weights(samples,
                                                                                 quantile)
    core = dataclasses.replace(prob.core, uncertain=tuple(sig),
                               factors=jnp.asarray(factors(sig, samples, seed)),
                               weights=jnp.asarray(w))
    u = Uncertainty(sig, {k: source for k, (_, source) in model.items()}, samples, seed,
                    quantile)
    return prob._replace(core=core, uncertainty=u)


def regret(goal: float, value: float, best: float) -> float:
    """How much worse `value` is than `best` as a fraction of `best` (goal +1:
    minimised, -1: maximised); >= 0 when `best` is the better."""
    return goal * (value - best) / abs(best)


def compare(prob: Problem, rob: Problem, nominal_x, robust_x) -> dict:
    """The nominal optimum `nominal_x` (of `prob`) and the robust one
    `robust_x` (of `rob`), each evaluated exactly under the nominal model and
    on `rob`'s samples: {design: {knobs, nominal, robust, feasible}} and the
    nominal design's `regret` on the samples (its statistic over the robust
    design's, `regret`), the robust design's `price` under the nominal model;
    None where a design breaks the problem's limits."""
    x = np.stack([np.asarray(nominal_x, dtype=float), np.asarray(robust_x, dtype=float)])
    at_nominal, on_samples = evaluate(prob, x), evaluate(rob, x)
    goal = OBJECTIVES[prob.objective][1]
    designs = {name: {"knobs": dict(zip(prob.names, map(float, x[i]), strict=True)),
                      "nominal": float(at_nominal.objective[i]),
                      "robust": float(on_samples.objective[i]),
                      "feasible": {"nominal": bool(at_nominal.feasible[i]),
                                   "robust": bool(on_samples.feasible[i])}}
               for i, name in enumerate(("nominal_design", "robust_design"))}
    ok = on_samples.feasible.all()
    return {**designs, "regret": regret(goal, *map(float, on_samples.objective)) if ok else None,
            "price": (regret(goal, *map(float, at_nominal.objective[::-1]))
                      if at_nominal.feasible.all() else None)}


def search(prob: Problem, rob: Problem, method: Method | str = "gradient",
           **options) -> tuple[Result, Result, dict]:
    """The nominal optimum of `prob` and the robust optimum of `rob` (`robust`
    of it) by one method (a `Method` or its name; `optimize`'s or
    `grid_search`'s `options` for both), and their `compare`. The grid holds
    the nominal optimum; the gradient method is given it (`include`), so the
    robust design's statistic is never worse than the nominal design's on the
    same samples: regret >= 0 (`Method.robust`)."""
    nominal, robust_r = search_method(method).robust(prob, rob, **options)
    return nominal, robust_r, compare(prob, rob, list(nominal.best.values()),
                                      list(robust_r.best.values()))

"""ECMP hash collisions: the expected maximum load of k flows hashed onto m
equal-cost links (balls into bins) and the slowdown it costs a collective;
`fabric` re-exports every name here, `strategies.Ecmp` applies it to flows."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import checks
from .relax import safe_log, where


def _max_load_exact(k: int, m: int) -> float:
    """E[max load] of k balls thrown uniformly into m bins, exactly (float64).

    P(max <= c) = P(Poisson(l)^m truncated at c sums to k) / P(Poisson(k) = k)
    with l = k/m (Poissonisation: m independent Poisson(l) bins conditioned on
    their sum k are the multinomial). The numerator is the coefficient of z^k in
    (sum_{i<=c} pois(i; l) z^i)^m, a probability, computed by repeated squaring
    with the polynomial truncated at degree k: no overflow. Then
    E[max] = sum_{c>=0} (1 - P(max <= c)), stopping once the term is below 1e-15.
    """
    if k == 0:
        return 0.0
    lam = k / m
    i = np.arange(k + 1)
    log_pmf = i * math.log(lam) - lam - np.array([math.lgamma(j + 1) for j in i])
    pmf = np.exp(log_pmf)
    log_pk = k * math.log(k) - k - math.lgamma(k + 1)  # log P(Poisson(k) = k)
    total = float(-(-k // m))  # P(max <= c) = 0 for c < ceil(k/m) (pigeonhole)
    for c in range(-(-k // m), k):
        base = np.where(i <= c, pmf, 0.0)
        result, power, e = np.zeros(k + 1), base, m
        result[0] = 1.0
        while e:
            if e & 1:
                result = np.convolve(result, power)[: k + 1]
            e >>= 1
            if e:
                power = np.convolve(power, power)[: k + 1]
        p_le = min(1.0, result[k] / math.exp(log_pk))
        term = 1.0 - p_le
        total += term
        if term < 1e-15:
            break
    return total


@functools.partial(jax.jit, static_argnums=2)
def _max_load_poisson(k, m, window=512) -> jax.Array:
    """E[max] of m independent Poisson(k/m) loads: a smooth approximation in float k, m.

    Sums P(max > c) = 1 - P(Poisson <= c)^m over a window of `window` values of
    c starting 10 standard deviations below the mean: the terms below it are 1
    (the Poisson mass below is < 1e-23, neglected), the CDF in the window is a
    cumulative sum of the pmf. Within 3% of the exact multinomial in the tests;
    valid for k/m up to ~600 (the window must cover +-10 standard deviations).
    """
    lam = k / jnp.maximum(m, 1.0)
    safe = jnp.maximum(lam, 1e-300)
    start = jax.lax.stop_gradient(jnp.maximum(jnp.floor(lam - 10.0 * jnp.sqrt(lam)) - 1.0, 0.0))
    c = start + jnp.arange(window, dtype=lam.dtype)
    pmf = jnp.exp(c * jnp.log(safe) - safe - jax.lax.lgamma(c + 1.0))
    cdf = jnp.minimum(jnp.cumsum(pmf), 1.0)
    term = -jnp.expm1(m * safe_log(cdf))
    return where(k > 0, start + jnp.sum(term), 0.0)


def _concrete_int(value):
    v = checks.concrete(value)
    if v is None or v.size != 1 or not float(v).is_integer():
        return None
    return int(v)


def ecmp_expected_max_load(k_flows, m_links, exact: bool = False) -> jax.Array:
    """Expected load (in flows) of the busiest of `m_links` links with `k_flows` hashed uniformly.

    The differentiable Poisson approximation (`_max_load_poisson`, within 3% of
    the exact value), the same number eagerly and under jit for any k, m;
    `exact=True`: the exact balls-into-bins expectation, for concrete integers
    k and m only (a check of the approximation, not what the model runs).
    """
    checks.non_negative("k_flows", k_flows)
    checks.at_least_one("m_links", m_links)
    k, m = _concrete_int(k_flows), _concrete_int(m_links)
    if exact:
        if k is None or m is None:
            raise ValueError(f"exact ECMP load needs concrete integer k_flows={k_flows} "
                             f"and m_links={m_links}")
        return jnp.asarray(_max_load_exact(k, m))
    return _max_load_poisson(checks.as_float(k_flows), checks.as_float(m_links))


def ecmp_slowdown(k_flows, m_links, exact: bool = False) -> jax.Array:
    """How much longer a collective waits for its slowest of `k_flows` ECMP-hashed flows.

    expected max load / max(k/m, 1): with perfect spreading the busiest link
    carries k/m flows, and a flow never runs faster than its own line rate, so
    with k < m the ideal is 1 flow per link.
    """
    k, m = checks.as_float(k_flows), checks.as_float(m_links)
    ideal = jnp.maximum(k / m, 1.0)
    # the busiest link carries at least one flow (k >= 1) and at least k / m: a
    # floor under the Poisson approximation, which falls below it for k << m
    floor = jnp.maximum(jnp.minimum(k, 1.0), k / m)
    return jnp.maximum(ecmp_expected_max_load(k_flows, m_links, exact), floor) / ideal


def ecmp_monte_carlo(key: jax.Array, k_flows: int, m_links: int, trials: int = 20_000):
    """(mean, standard error) of the max load over `trials` random hashings (jax.random)."""
    return _ecmp_monte_carlo(key, int(k_flows), int(m_links), int(trials))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _ecmp_monte_carlo(key, k_flows, m_links, trials):
    links = jax.random.randint(key, (trials, k_flows), 0, m_links)
    loads = jax.vmap(lambda a: jnp.bincount(a, length=m_links))(links)
    peak = jnp.max(loads, axis=1).astype(float)
    return jnp.mean(peak), jnp.std(peak) / jnp.sqrt(trials)

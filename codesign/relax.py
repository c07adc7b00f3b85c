"""Smooth surrogates for the non-smooth pieces of the cost models.

Each takes a temperature `t`; at t = 0 it is the exact function, so the relaxed
model equals the exact model at integer points as t anneals to zero. All are
NaN-free everywhere (double-`where` on every log and divide).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def where(condition, a, b) -> jax.Array:
    """`jnp.where(condition, a, b)` as one `lax.select` on operands broadcast to
    one shape and dtype (no nested jit in the trace)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in (condition, a, b)))
    dtype = jnp.result_type(a, b)
    a, b = (jnp.broadcast_to(jnp.asarray(x, dtype), shape) for x in (a, b))
    return jax.lax.select(jnp.broadcast_to(condition, shape), a, b)


def safe_log(x: jax.Array, tiny: float = 1e-300) -> jax.Array:
    """log(x) for x > 0; a finite value (and a zero gradient) elsewhere."""
    ok = x > tiny
    return where(ok, jnp.log(where(ok, x, 1.0)), math.log(tiny))


def safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
    """a / b with 0 where b == 0 (and no NaN in the gradient)."""
    ok = b != 0
    return where(ok, a / where(ok, b, 1.0), 0.0)


def log2_ranks(p: jax.Array) -> jax.Array:
    """log2 of a rank count, 0 at p <= 1 (exact for every p >= 1).

    The discrete algorithms take ceil(log2 p) rounds; we use log2 p, which is
    exact at powers of two and smooth in between (documented approximation).
    """
    return jnp.log(jnp.maximum(p, 1.0)) / math.log(2.0)  # (max: no log of p < 1)


def smooth_max(a: jax.Array, b: jax.Array, t: float | jax.Array = 0.0) -> jax.Array:
    """max(a, b) smoothed by softplus with width t (exact at t = 0)."""
    if isinstance(t, (int, float)) and t == 0:
        return jnp.maximum(a, b)
    t = jnp.maximum(t, 1e-12)
    return b + t * jax.nn.softplus((a - b) / t)


def smooth_min(a: jax.Array, b: jax.Array, t: float | jax.Array = 0.0) -> jax.Array:
    if isinstance(t, (int, float)) and t == 0:
        return jnp.minimum(a, b)  # = -max(-a, -b), one equation
    return -smooth_max(-a, -b, t)


def smooth_clip(x: jax.Array, lo, hi, t: float | jax.Array = 0.0) -> jax.Array:
    return smooth_min(smooth_max(x, lo, t), hi, t)


def smooth_ceil(x: jax.Array, t: float | jax.Array = 0.0) -> jax.Array:
    """ceil(x), relaxed: x + (1 - frac) (1 - exp(-frac / t)), frac = x - floor(x).

    Exact at integer x for every t; the identity as t -> inf and ceil(x) as
    t -> 0, continuous in x for every t (the optimiser anneals t downwards).
    At t = 0 the value is ceil(x) and the derivative is that of the envelope
    x (straight-through), so an elasticity at t = 0 sees that more stages hold
    fewer layers rather than the staircase's zero slope.
    """
    if isinstance(t, (int, float)) and t == 0:
        return jnp.ceil(x) + (x - jax.lax.stop_gradient(x))
    frac = x - jax.lax.stop_gradient(jnp.floor(x))
    return x + (1.0 - frac) * (1.0 - jnp.exp(-frac / jnp.maximum(t, 1e-6)))


def soft_min(values: jax.Array, t: float | jax.Array, axis: int = 0):
    """(soft minimum, weights) of positive `values` along `axis`, in log space:
    (sum_i v_i^(-1/t))^(-t) and w_i = softmax(-log v_i / t).

    The weights give a ratio of e between two candidates whose values differ by
    a factor exp(t); as t -> 0 they are the one-hot argmin and the soft minimum
    the minimum (t is floored at 1e-6).
    """
    t = jnp.maximum(t, 1e-6)
    z = -safe_log(values) / t
    return jnp.exp(-t * jax.nn.logsumexp(z, axis=axis)), jax.nn.softmax(z, axis=axis)

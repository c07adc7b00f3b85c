"""Smooth surrogates for the non-smooth pieces of the cost models.

Each takes a temperature `t`; at t = 0 it is the exact function, so the relaxed
model equals the exact model at integer points as t anneals to zero. The
temperature is dimensionless: a softplus width is t times the magnitude of
what is compared (seconds, bytes and counts alike), and the relaxations of a
count (`smooth_ceil`, `lattice_cubic`, `lattice_linear_tree`, `beyond_one`)
are exact at integers for every t. `benchmarks/relaxation.py` audits them
against the exact model (docs/codesign.md). All are NaN-free everywhere
(double-`where` on every log and divide).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


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


def smooth_max(a: jax.Array, b: jax.Array, t: float | jax.Array = 0.0,
               scale=None) -> jax.Array:
    """max(a, b) smoothed by softplus with width t x `scale` (exact at t = 0).

    The temperature is relative: the width is t times the operands' magnitude
    (`scale`, by default (|a| + |b|) / 2), so one t smooths seconds, bytes and
    counts alike (at a = b the value is a (1 + t ln 2)). With operands of one
    sign it is monotone in each. Where an operand is a difference (max(x - y,
    0): what of x a hiding y leaves exposed) give the scale of what is
    compared, (x + y) / 2: the default would see only |x - y| and not smooth.
    """
    if isinstance(t, (int, float)) and t == 0:
        return jnp.maximum(a, b)
    w = t * (0.5 * (jnp.abs(a) + jnp.abs(b)) if scale is None else scale)
    ok = w > 1e-150  # else the max: both operands 0, or below any width (w^-2 finite)
    w = where(ok, w, 1.0)
    return where(ok, b + w * jax.nn.softplus((a - b) / w), jnp.maximum(a, b))


def smooth_min(a: jax.Array, b: jax.Array, t: float | jax.Array = 0.0,
               scale=None) -> jax.Array:
    if isinstance(t, (int, float)) and t == 0:
        return jnp.minimum(a, b)  # = -max(-a, -b), one equation
    return -smooth_max(-a, -b, t, scale)


def smooth_clip(x: jax.Array, lo, hi, t: float | jax.Array = 0.0, scale=None) -> jax.Array:
    """clip(x, lo, hi) (lo <= hi) smoothed as `smooth_min(smooth_max(x, lo), hi)`,
    kept inside [lo, hi] (the smooth form dips below lo where hi is near it:
    a group of one rank would hold fewer than one)."""
    if isinstance(t, (int, float)) and t == 0:
        return smooth_min(smooth_max(x, lo), hi)
    return jnp.clip(smooth_min(smooth_max(x, lo, t, scale), hi, t, scale), lo, hi)


def beyond_one(count: jax.Array, t: float | jax.Array = 0.0) -> jax.Array:
    """Whether a count of ranks or stages exceeds one (a collective or a send
    that exists only then): `count > 1` at t = 0; at t > 0 the ramp clip(count
    - 1, 0, 1), exact at integer counts (0 at one, 1 from two), so that the
    relaxed model does not jump just above a count of one."""
    if isinstance(t, (int, float)) and t == 0:
        return count > 1.0
    return jnp.clip(count - 1.0, 0.0, 1.0)


def smooth_ceil(x: jax.Array, t: float | jax.Array = 0.0) -> jax.Array:
    """ceil(x), relaxed: x + (1 - frac) (1 - exp(-(frac / t)^2)), frac = x - floor(x).

    Exact at integer x for every t; ceil(x) as t -> 0, continuous and
    non-decreasing in x for every t (the optimiser anneals t downwards). The
    step from n to n + 1 rises over frac ~ t above each integer n, leaving it
    with zero slope: at an integer the derivative is the envelope's, 1 (an
    exponential rise, 1 - exp(-frac / t), gave 1 + 1/t there, a hundredfold
    pull at t = 0.01 towards the next integer wherever x = L / stages is one).
    At t = 0 the value is ceil(x) and the derivative is that of the envelope
    x (straight-through), so an elasticity at t = 0 sees that more stages hold
    fewer layers rather than the staircase's zero slope.
    """
    if isinstance(t, (int, float)) and t == 0:
        return jnp.ceil(x) + (x - jax.lax.stop_gradient(x))
    frac = x - jax.lax.stop_gradient(jnp.floor(x))
    rise = frac / jnp.maximum(t, 1e-6)
    return x + (1.0 - frac) * (1.0 - jnp.exp(-rise * rise))


def lattice_cubic(f, counts: tuple, t: float | jax.Array = 0.0) -> jax.Array:
    """f(*counts) of counts >= 1 that are integers in the exact model, relaxed
    between integers: at t > 0 the tensor product, one count after the other,
    of monotone cubics (Fritsch-Butland) through f at the integers around
    each count (4 per count: f is evaluated at 4^len(counts) points, one `jax.vmap`
    of f).

    Exact at integer counts for every t; between two integers of one count
    (the others integral) it stays within the two values and is monotone, its
    slope at an integer the harmonic mean of the neighbouring steps (0 beside
    a flat step or at a local extremum). What it approximates is f on the
    integer lattice, not f's formula between integers: `shape`'s layers per
    stage, v ceil(L / (p v)), relaxed in L / (p v) (`smooth_ceil`), is flat
    between two stage counts while the ratio stays inside one integer and
    drops where it crosses one, and the bubble growing beside it then made
    the step time rise and fall between two stage counts. (`shape` relaxes
    the stage's padding over an even split so, not the layer count: the
    micro-batches grow with pp beside it, and a monotone cubic of the count
    between 96 and 48 put their product 12% above both ends.) At t = 0
    (given as 0) it is f(*counts).
    """
    if isinstance(t, (int, float)) and t == 0:
        return f(*counts)
    d = len(counts)
    k = [jax.lax.stop_gradient(jnp.floor(jnp.maximum(x, 1.0))) for x in counts]
    offsets = np.array(np.meshgrid(*[[-1.0, 0.0, 1.0, 2.0]] * d, indexing="ij")).reshape(d, -1).T
    # the 4^d lattice points as one vmap of f (the trace holds f once)
    values = jax.vmap(lambda o: f(*(jnp.maximum(kj + o[j], 1.0) for j, kj in enumerate(k))))(
        jnp.asarray(offsets))
    values = values.reshape((4,) * d + values.shape[1:])
    for j in reversed(range(d)):  # the last count first, as f's innermost argument
        values = _monotone_cubic([values[(slice(None),) * j + (i,)] for i in range(4)],
                                 k[j], counts[j] - k[j])
    return values


def _monotone_cubic(c: list, k, w):
    """The Fritsch-Butland cubic through c[0..3] (the values at counts k - 1 ..
    k + 2, the first clamped to 1) at k + w, 0 <= w < 1 (`lattice_cubic`)."""
    step = [c[i + 1] - c[i] for i in range(3)]
    step[0] = where(k > 1, step[0], step[1])  # one-sided at a count of 1

    def slope(a, b):  # harmonic mean of two steps of one sign, else 0
        same = a * b > 0
        return where(same, 2.0 * a * b / where(same, a + b, 1.0), 0.0)

    m0, m1 = slope(step[0], step[1]), slope(step[1], step[2])
    w2, w3 = w * w, w * w * w
    return ((2 * w3 - 3 * w2 + 1) * c[1] + (w3 - 2 * w2 + w) * m0
            + (3 * w2 - 2 * w3) * c[2] + (w3 - w2) * m1)


def lattice_linear_tree(f, counts: tuple, t: float | jax.Array = 0.0, lowest: float = 1.0):
    """f(*counts) of counts >= `lowest` that are integers in the exact model, relaxed
    between integers as the multilinear interpolation of f at the corners of
    the unit cell around the counts, for an `f` whose value is a pytree of
    float arrays: its 2^len(counts) evaluations one `jax.vmap` of f (the trace
    holds f once), every leaf relaxed alike. Exact at integer counts for
    every t, monotone between two integers of one count (the others
    integral), its slope there the step to the next integer (at an integer,
    the step above it). At t = 0 (given as 0) it is f(*counts)."""
    if isinstance(t, (int, float)) and t == 0:
        return f(*counts)
    x = jnp.stack([jnp.maximum(c, lowest) for c in counts])
    k = jax.lax.stop_gradient(jnp.floor(x))
    w = x - k
    corners = np.array(np.meshgrid(*[[0.0, 1.0]] * len(counts), indexing="ij")).reshape(
        len(counts), -1).T  # (2^d, d)
    values = jax.vmap(lambda c: f(*(k + c)))(jnp.asarray(corners))
    weight = jnp.prod(jnp.where(corners == 1.0, w, 1.0 - w), axis=1)  # (2^d,)
    return jax.tree.map(lambda v: jnp.tensordot(weight, v, axes=1), values)


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

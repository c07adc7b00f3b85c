"""Fabric geometry the topologies read: pod crossings, fat-tree levels and
ports, torus shapes and the dimensions a group spans (pure functions of
counts; `strategies` owns the topologies that use them)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .. import checks
from .relax import EXACT, exceeds, safe_log, smooth_ceil, smooth_min, where

# ------------------------------------------------------------------- placement


def crosses_pod(span, pod_size, t=EXACT) -> jax.Array:
    """1 when a group spanning `span` GPUs leaves its pod, else 0.

    An exact step; relaxed, the logistic sigmoid(log(span / pod) / T) (`relax.exceeds`),
    smooth in span and pod size (1/2 at span = pod).
    """
    span, pod_size = checks.as_float(span), checks.as_float(pod_size)
    return exceeds(span, pod_size, t)


def crossing_fraction(span, across, block, exchange: bool = False, t=EXACT) -> jax.Array:
    """Share of a group's slow-tier flows that leave a block of `block` GPUs
    (a pod, a leaf switch) when the group spans `span` GPU indices with
    `across` members on the slow tier (one per scale-up domain it touches).

    A ring (or tree) ordered block by block leaves each block once: blocks /
    across of its hops cross, at most all. An exchange (all-to-all) sends to
    every member: 1 - block / span of its bytes leave. 0 when the group fits.
    """
    span, block = checks.as_float(span), checks.as_float(block)
    blocks = jnp.maximum(span / block, 1.0)
    inside = crosses_pod(span, block, t)
    if exchange:
        return inside * (1.0 - 1.0 / blocks)
    return inside * jnp.minimum(blocks / jnp.maximum(checks.as_float(across), 1.0), 1.0)


# ------------------------------------------------------------------- fat trees


def fat_tree_levels(endpoints, radix, t=EXACT) -> jax.Array:
    """Levels of a non-blocking folded Clos (fat tree) of radix-R switches for E endpoints.

    L levels hold up to 2 (R/2)^L endpoints (one switch holds R): L = max(1,
    ceil(log(E/2) / log(R/2))), the ceil relaxed by `t`
    (`relax.smooth_ceil`: exact in the exact model, with the envelope's slope).
    """
    e, r = checks.as_float(endpoints), checks.as_float(radix)
    x = safe_log(e / 2.0) / jnp.log(r / 2.0)
    return jnp.maximum(smooth_ceil(x - 1e-9, t), 1.0)


def fat_tree_ports(endpoints, radix):
    """(leaf ports, ports of the levels above the leaf) of a fat tree over `endpoints`.

    Every level below the top has E ports down and E up; the top has E down.
    The level count is a staircase (no slope) for the counts.
    """
    levels = jax.lax.stop_gradient(fat_tree_levels(endpoints, radix))
    leaf = where(levels > 1, 2.0, 1.0) * endpoints
    upper = where(levels > 1, 2.0 * levels - 3.0, 0.0) * endpoints
    return leaf, upper, levels


# ------------------------------------------------------------------- torus

TORUS_DIMS = 3  # the presets' scale_up.bandwidth_Bps is 2 links x 3 dimensions
# TPU v4 (Jouppi et al. 2023): the faces of each 4x4x4 cube (96 of its 384 link
# ends) go optical through the OCSes: 1.5 optical link ends per chip.
TORUS_OPTICAL_ENDS_PER_CHIP = 96 / 64


def torus_shape(chips: int) -> tuple[int, int, int]:
    """The most cube-like (x <= y <= z, x y z = chips) shape: smallest z, then largest x.

    Reproduces both TPU presets: 4096 -> (16, 16, 16), 8960 -> (16, 20, 28). A
    prime count gives (1, 1, chips): a ring.
    """
    n = int(round(float(chips)))
    if n < 1 or abs(n - float(chips)) > 1e-9:
        raise ValueError(f"torus chips={chips} must be a positive integer")
    best = (1, 1, n)
    for x in range(1, round(n ** (1 / 3)) + 2):
        if n % x:
            continue
        for y in range(x, math.isqrt(n // x) + 1):
            if (n // x) % y:
                continue
            z = n // x // y
            if z >= y and (z, -x) < (best[2], -best[0]):
                best = (x, y, z)
    return best


def torus_dims_spanned(group_size, stride, shape, t=EXACT) -> jax.Array:
    """How many torus dimensions a group of `group_size` ranks `stride` apart spans.

    Along dimension d (size n_d, c_d ranks per step along it) the group's
    coordinates step by lo = clip(stride / c_d, 1, n_d) up to
    hi = clip(stride x group_size / c_d, 1, n_d); it spans d when hi / lo >= 2.
    Each dimension counts min(log2(hi / lo), 1) (`relax.smooth_min` by `t`):
    exact 0 or 1 at aligned integer layouts, continuous in between.
    """
    g, s = checks.as_float(group_size), checks.as_float(stride)
    total, c = 0.0, 1.0
    for n in shape:
        lo = jnp.minimum(jnp.maximum(s / c, 1.0), n)
        hi = jnp.minimum(jnp.maximum(s * g / c, 1.0), n)
        extent = hi / lo
        total = total + smooth_min(safe_log(extent) / jnp.log(2.0), 1.0, t)
        c *= n
    return total

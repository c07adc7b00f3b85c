"""Exact and relaxed as types (`codesign.relax`): each owns its formulas, the
exact model holds no temperature, and a bare number is refused, not read."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import scenario as sc
from codesign.model import collectives as co
from codesign.model import relax, step

SCN = sc.load("default")


def test_exact_has_no_leaves_and_relaxed_its_temperature():
    assert jax.tree.leaves(relax.EXACT) == []
    assert jax.tree.leaves(relax.Relaxed(0.3)) == [0.3]
    assert relax.Exact() == relax.EXACT and hash(relax.Exact()) == hash(relax.EXACT)
    # a schedule of temperatures scans as one Relaxed per step
    ts = jax.lax.scan(lambda c, s: (c, s.temperature * 2.0), 0.0,
                      relax.Relaxed(jnp.asarray([0.1, 0.2])))[1]
    np.testing.assert_allclose(np.asarray(ts), [0.2, 0.4])


@pytest.mark.parametrize("bad", [0.0, 0.3, 0, None, "exact"])
def test_a_bare_value_is_refused_naming_the_argument(bad):
    with pytest.raises(TypeError, match=r"^t=.* is not a relax.Smoothing"):
        relax.smooth_max(1.0, 2.0, bad)
    with pytest.raises(TypeError, match=r"^t="):
        step.estimate(SCN, bad)  # refused before anything is traced
    with pytest.raises(TypeError, match=r"^t="):  # even where t would not be read
        co.cost("all_reduce", "ring", 1e6, 8.0, SCN.system.scale_up, t=bad)


@pytest.mark.parametrize("bad", [0.0, -0.1, math.inf, math.nan])
def test_a_relaxed_temperature_is_positive_and_finite(bad):
    with pytest.raises(ValueError, match=r"Relaxed\(temperature="):
        relax.Relaxed(bad)
    with pytest.raises(TypeError, match=r"Relaxed\(temperature="):
        relax.Relaxed(True)


def test_the_exact_formulas():
    a, b = jnp.asarray([1.0, 3.0]), jnp.asarray([2.0, 2.0])
    e = relax.EXACT
    np.testing.assert_array_equal(relax.smooth_max(a, b, e), [2.0, 3.0])
    np.testing.assert_array_equal(relax.smooth_min(a, b, e), [1.0, 2.0])
    np.testing.assert_array_equal(relax.smooth_clip(jnp.asarray([0.0, 5.0]), 1.0, 4.0, e),
                                  [1.0, 4.0])
    np.testing.assert_array_equal(relax.beyond_one(jnp.asarray([1.0, 1.5]), e), [False, True])
    assert float(relax.smooth_ceil(2.2, e)) == 3.0
    assert float(jax.grad(relax.smooth_ceil)(2.2, e)) == 1.0  # the envelope's slope
    np.testing.assert_array_equal(relax.exceeds(jnp.asarray([1.0, 3.0]), 2.0, e), [0.0, 1.0])
    times = jnp.asarray([[3.0, 1.0], [2.0, 1.0]])  # two candidates, two cases; a tie in the second
    picked, w = relax.pick(times, times, e)
    np.testing.assert_array_equal(picked, [2.0, 1.0])
    np.testing.assert_array_equal(w, [[0.0, 1.0], [1.0, 0.0]])  # ties to the first
    np.testing.assert_array_equal(relax.minimum(times, e), [2.0, 1.0])
    assert relax.exact_or_relaxed(lambda: "exact", lambda: "relaxed", e) == "exact"
    assert relax.lattice_linear_tree(lambda x: x * x, (jnp.asarray(2.5),), e) == 6.25


def test_the_relaxed_formulas():
    T = 0.3
    r = relax.Relaxed(T)
    assert float(relax.smooth_max(2.0, 2.0, r)) == pytest.approx(2.0 * (1 + T * math.log(2)))
    assert float(relax.smooth_min(2.0, 2.0, r)) == pytest.approx(2.0 * (1 - T * math.log(2)))
    assert float(relax.beyond_one(1.25, r)) == 0.25
    frac = 0.2
    assert float(relax.smooth_ceil(2.0 + frac, r)) == pytest.approx(
        2.0 + frac + (1 - frac) * (1 - math.exp(-(frac / T) ** 2)))
    assert float(relax.smooth_ceil(3.0, r)) == 3.0  # exact at integers
    assert float(relax.exceeds(2.0, 2.0, r)) == 0.5
    assert float(relax.exceeds(2.0 * math.exp(T), 2.0, r)) == pytest.approx(1 / (1 + math.exp(-1)))
    times = jnp.asarray([[1.0], [2.0]])
    soft = (1.0 + 2.0 ** (-1 / T)) ** -T
    assert float(relax.minimum(times, r)[0]) == pytest.approx(soft, rel=1e-12)
    picked, w = relax.pick(times, times, r)
    assert float(picked[0]) == pytest.approx(soft, rel=1e-12)
    assert float(w[0, 0] / w[1, 0]) == pytest.approx(2.0 ** (1 / T))
    assert relax.exact_or_relaxed(lambda: "exact", lambda: "relaxed", r) == "relaxed"
    # the multilinear interpolation between the integers around the count
    assert float(relax.lattice_linear_tree(lambda x: x * x, (jnp.asarray(2.5),), r)) == 6.5

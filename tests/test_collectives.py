"""The collective cost table against closed forms written out independently here.

The closed forms follow the alpha-beta-gamma table of docs/collectives.md (and,
for the pairs it does not list, the table in codesign/model/collectives.py's
docstring), for p >= 2 where
the constants 1 and 2 need no smoothing.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from codesign import presets
from codesign.model import collectives as co
from codesign.model import hardware as hw
from codesign.model import relax, traffic
from codesign.model.protocols import AlphaBeta, Nccl
from codesign.units import GiB, MiB

TIER = hw.Tier(100e9, 1.7e-6, efficiency=0.9, reduction_Bps=800e9, in_network_efficiency=0.7)
NCCL = Nccl()
OUTER = hw.Tier(25e9, 5e-6, efficiency=0.8, reduction_Bps=600e9)
H100 = presets.system("dgx-h100")


def _lg(p):
    return math.log2(p)


def _f(p):
    return (p - 1) / p


# (op, algorithm) -> p -> (L, W, C): time = L alpha + W n beta + C n gamma
CLOSED = {
    ("all_reduce", "ring"): lambda p: (2 * (p - 1), 2 * _f(p), _f(p)),
    ("all_reduce", "recursive_doubling"): lambda p: (_lg(p), _lg(p), _lg(p)),
    ("all_reduce", "halving_doubling"): lambda p: (2 * _lg(p), 2 * _f(p), _f(p)),
    ("all_reduce", "tree"): lambda p: (2 * _lg(p), 2, 1),
    ("all_reduce", "in_network"): lambda p: (2, 1, 0),
    ("reduce_scatter", "ring"): lambda p: (p - 1, _f(p), _f(p)),
    ("reduce_scatter", "direct"): lambda p: (p - 1, _f(p), _f(p)),
    ("reduce_scatter", "recursive_doubling"): lambda p: (_lg(p), _f(p), _f(p)),
    ("all_gather", "ring"): lambda p: (p - 1, _f(p), 0),
    ("all_gather", "direct"): lambda p: (p - 1, _f(p), 0),
    ("all_gather", "recursive_doubling"): lambda p: (_lg(p), _f(p), 0),
    ("all_to_all", "direct"): lambda p: (p - 1, _f(p), 0),
    ("all_to_all", "recursive_doubling"): lambda p: (_lg(p), _lg(p) / 2, 0),
    ("broadcast", "ring"): lambda p: (p - 1, 1, 0),
    ("broadcast", "tree"): lambda p: (_lg(p), 1, 0),
    ("broadcast", "recursive_doubling"): lambda p: (_lg(p), _lg(p), 0),
    ("broadcast", "halving_doubling"): lambda p: (_lg(p) + p - 1, 2 * _f(p), 0),
    ("broadcast", "in_network"): lambda p: (1, 1, 0),
    ("reduce", "ring"): lambda p: (p - 1, 1, 1),
    ("reduce", "tree"): lambda p: (_lg(p), 1, 1),
    ("reduce", "recursive_doubling"): lambda p: (_lg(p), _lg(p), _lg(p)),
    ("reduce", "halving_doubling"): lambda p: (_lg(p) + p - 1, 2 * _f(p), _f(p)),
    ("reduce", "in_network"): lambda p: (1, 1, 0),
    ("send_recv", "direct"): lambda p: (1, 1, 0),
}
PAIRS = [(op, a) for op in co.OPS for a in co.algorithms(op)]
HIER_OPS = [op for op in co.OPS if "hierarchical" in co.algorithms(op, hierarchical=True)]


TRACES = []  # one entry per trace of _choose


@functools.partial(jax.jit, static_argnames=("op",))
def _choose(op, n, p, tier, outer=None, local_ranks=None, t=co.AUTO):
    """`auto`'s time and weights, compiled once per op and tier structure."""
    TRACES.append(op)  # runs only while tracing
    c, w, _ = co.choose(op, n, p, tier, outer=outer, local_ranks=local_ranks,
                        t=t)
    return c.time_s, w


def _closed_terms(op, algorithm, n, p, tier=TIER):
    L, W, Cr = CLOSED[op, algorithm](p)
    bw = tier.bandwidth_Bps * (tier.in_network_efficiency if algorithm == "in_network"
                               else tier.efficiency)
    return L * float(tier.latency_s), W * n / float(bw), Cr * n / float(tier.reduction_Bps)


def _terms(c):
    return float(c.latency_s), float(c.bandwidth_s), float(c.reduction_s)


def test_closed_forms_cover_every_pair():
    assert set(CLOSED) == set(PAIRS)


@pytest.mark.parametrize("op, algorithm", PAIRS)
def test_pair_matches_closed_form(op, algorithm):
    for p in (2, 8, 24, 1000):
        for n in (8.0, 1 * MiB, 8 * GiB):
            got = _terms(co.cost(op, algorithm, n, p, TIER))
            want = _closed_terms(op, algorithm, n, p)
            assert got == pytest.approx(want, rel=1e-12, abs=0), (p, n)


@pytest.mark.parametrize("op, algorithm", PAIRS)
def test_one_rank_costs_nothing(op, algorithm):
    assert float(co.cost(op, algorithm, 8 * GiB, 1, TIER).time_s) == 0.0


def _hier_closed(op, n, p, g, inner=TIER, outer=OUTER):
    """Hierarchical over G = g ranks per domain and N = p / g domains (ring pieces)."""
    N = p / g
    ai, ao = float(inner.latency_s), float(outer.latency_s)
    bi, bo = 1 / float(inner.effective_Bps), 1 / float(outer.effective_Bps)
    ci, cout = 1 / float(inner.reduction_Bps), 1 / float(outer.reduction_Bps)
    if op == "all_reduce":
        return (2 * (g - 1) * ai + 2 * (N - 1) * ao,
                2 * _f(g) * n * bi + 2 * _f(N) * n / g * bo,
                _f(g) * n * ci + _f(N) * n / g * cout)
    if op == "reduce_scatter":
        return ((g - 1) * ai + (N - 1) * ao, _f(g) * n * bi + _f(N) * n / g * bo,
                _f(g) * n * ci + _f(N) * n / g * cout)
    if op == "all_gather":
        return (g - 1) * ai + (N - 1) * ao, _f(g) * n * bi + _f(N) * n / g * bo, 0.0
    if op == "all_to_all":
        return (g - 1) * ai + (N - 1) * ao, _f(g) * n * bi + _f(N) * n * bo, 0.0
    red = (n * ci + n * cout) if op == "reduce" else 0.0
    return _lg(g) * ai + _lg(N) * ao, n * bi + n * bo, red


@pytest.mark.parametrize("op", HIER_OPS)
def test_hierarchical_matches_closed_form(op):
    for p, g in ((64, 8), (512, 8), (144, 72)):
        for n in (8.0, 8 * GiB):
            c = co.cost(op, "hierarchical", n, p, TIER, outer=OUTER, local_ranks=g)
            assert _terms(c) == pytest.approx(_hier_closed(op, n, p, g), rel=1e-12, abs=0)


def test_hierarchical_inside_one_domain_is_the_inner_ring():
    n = 1 * GiB
    c = co.cost("all_reduce", "hierarchical", n, 8, TIER, outer=OUTER, local_ranks=8)
    ring = co.cost("all_reduce", "ring", n, 8, TIER)
    assert _terms(c) == pytest.approx(_terms(ring), rel=1e-12)


def test_flat_algorithms_spanning_domains_run_on_the_outer_tier():
    n = 1 * GiB
    for p, tier in ((64, OUTER), (8, TIER)):
        spanning = co.cost("all_reduce", "ring", n, p, TIER, outer=OUTER, local_ranks=8)
        assert _terms(spanning) == pytest.approx(_terms(co.cost("all_reduce", "ring", n, p, tier)))


@pytest.mark.parametrize("op", co.OPS)
def test_bus_factor_and_bandwidths_follow_nccl_tests(op):
    p, n, t = 8.0, 1e9, 0.01
    want = {"all_reduce": 2 * 7 / 8, "all_gather": 7 / 8, "reduce_scatter": 7 / 8,
            "all_to_all": 7 / 8}.get(op, 1.0)
    assert float(co.bus_factor(op, p)) == pytest.approx(want)
    assert float(co.algbw_Bps(n, t)) == pytest.approx(1e11)
    assert float(co.busbw_Bps(op, n, t, p)) == pytest.approx(1e11 * want)
    assert float(co.algbw_Bps(n, 0.0)) == 0.0


def test_in_network_all_reduce_reports_busbw_above_the_link():
    """nccl-tests applies 2(p-1)/p to NVLS too, so its busbw can exceed one direction's link."""
    n, p, tier = 64 * GiB, 8, H100.scale_up
    c = co.cost("all_reduce", "in_network", n, p, tier)
    busbw = float(co.busbw_Bps("all_reduce", n, c.time_s, p))
    assert busbw == pytest.approx(2 * 7 / 8 * float(tier.bandwidth_Bps)
                                  * float(tier.in_network_efficiency), rel=1e-3)
    assert busbw > float(tier.effective_Bps)


def test_ring_busbw_is_flat_in_p_and_recursive_doubling_is_not():
    n, tier = 64 * GiB, H100.scale_out  # (2046 steps of 14 us: 1% of the ring over 1024)

    def busbw(algorithm, p):
        return float(co.busbw_Bps("all_reduce", n, co.cost("all_reduce", algorithm, n, p,
                                                            tier).time_s, p))

    ring = [busbw("ring", p) for p in (8.0, 16.0, 64.0, 256.0, 1024.0)]
    assert max(ring) / min(ring) < 1.03
    # log2 p bytes per rank: recursive doubling's busbw falls like 1 / log2 p
    assert busbw("recursive_doubling", 8.0) / busbw("recursive_doubling", 1024.0) > 2.5


def _time(op, algorithm, n, p, tier):
    return float(co.cost(op, algorithm, n, p, tier).time_s)


def test_latency_bandwidth_crossover_between_tree_and_ring():
    tier, p = H100.scale_out, 64
    for small in ("tree", "recursive_doubling"):
        assert _time("all_reduce", small, 8, p, tier) < _time("all_reduce", "ring", 8, p, tier)
        assert _time("all_reduce", small, 8 * GiB, p, tier) > \
            _time("all_reduce", "ring", 8 * GiB, p, tier)
    # where they cross, in closed form: (L_r - L_t) alpha = (W_t - W_r) n beta + (C_t - C_r) n gamma
    alpha, beta = float(tier.latency_s), 1 / float(tier.effective_Bps)
    gamma = 1 / float(tier.reduction_Bps)
    n_star = (2 * (p - 1) - 2 * _lg(p)) * alpha / ((2 - 2 * _f(p)) * beta + (1 - _f(p)) * gamma)
    tree, ring = (_time("all_reduce", a, n_star, p, tier) for a in ("tree", "ring"))
    assert tree == pytest.approx(ring, rel=1e-9)
    assert _time("all_reduce", "tree", 0.9 * n_star, p, tier) < \
        _time("all_reduce", "ring", 0.9 * n_star, p, tier)
    assert _time("all_reduce", "tree", 1.1 * n_star, p, tier) > \
        _time("all_reduce", "ring", 1.1 * n_star, p, tier)


LOG_LATENCY = {"recursive_doubling", "tree", "halving_doubling"}
BANDWIDTH_OPTIMAL = {"ring", "halving_doubling", "hierarchical", "in_network"}
PIPELINED = {"rail_ring", "rail_tree", "nvls_tree"}


@pytest.mark.parametrize("hierarchical", [False, True])
def test_auto_picks_log_latency_when_small_and_bandwidth_optimal_when_large(hierarchical):
    kw = dict(outer=H100.scale_out, local_ranks=8.0) if hierarchical else {}
    tier = H100.scale_up if hierarchical else H100.scale_out
    _, w = _choose("all_reduce", jnp.array([8.0, 8 * GiB]), 1024.0, tier, **kw)
    names = co.algorithms("all_reduce", hierarchical=hierarchical)
    small, large = (names[i] for i in np.argmax(np.asarray(w), axis=0))
    assert small in LOG_LATENCY and large in BANDWIDTH_OPTIMAL | PIPELINED
    # over many domains a large all-reduce goes two-tier; NCCL pipelines the two
    # tiers (rail rings/trees, NVLS + trees), which beats the sequential
    # hierarchical form, and over 128 domains the trees' latency wins (was
    # "hierarchical" before the pipelined algorithms existed)
    assert large == ("nvls_tree" if hierarchical else "halving_doubling")
    assert np.allclose(np.asarray(w).sum(axis=0), 1.0)


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "send_recv"])  # 5, 5 and 1 candidates
def test_auto_is_a_soft_minimum(op):
    sizes = np.array([64.0, 4 * MiB, 8 * GiB])
    times = np.array([[_time(op, a, n, 32, TIER) for a in co.algorithms(op)] for n in sizes])
    auto = np.asarray(_choose(op, sizes, 32.0, TIER)[0])
    cold = np.asarray(_choose(op, sizes, 32.0, TIER, t=relax.Relaxed(1e-6))[0])
    T = co.AUTO_TEMPERATURE
    fastest = times.min(axis=1)
    assert np.all(fastest * times.shape[1] ** -T * (1 - 1e-12) <= auto)
    assert np.all(auto <= fastest * (1 + 1e-12))
    assert auto == pytest.approx(np.sum(times ** (-1 / T), axis=1) ** -T, rel=1e-9)
    assert cold == pytest.approx(fastest, rel=1e-9)


def _each_time(op, algorithm, sizes, p, tier, **kw):
    """One algorithm costed alone; 1e30 s where it needs NVLS the tier lacks (as in auto)."""
    try:
        return np.asarray(co.cost(op, algorithm, sizes, p, tier, **kw).time_s)
    except ValueError as e:
        assert "in_network_efficiency" in str(e)
        return np.full(sizes.shape, 1e30)


@pytest.mark.parametrize("op", co.OPS)
def test_auto_over_two_tiers_is_the_minimum_of_each_algorithm_alone(op):
    """`choose` costs every candidate in one expression: its exact minimum, its winner
    and its soft minimum are those of the algorithms costed one by one (flat ones on
    the slow tier once they leave the domain, NVLS only where the tier has it)."""
    sizes = np.array([64.0, 4 * MiB, 8 * GiB])
    kw = dict(outer=OUTER, local_ranks=8.0)
    names = co.algorithms(op, hierarchical=True)
    T = co.AUTO_TEMPERATURE
    for p, tier in ((8.0, TIER), (64.0, TIER), (512.0, H100.scale_up)):
        times = np.stack([_each_time(op, a, sizes, p, tier, **kw) for a in names], axis=-1)
        fastest = times.min(axis=-1)
        exact, w, got_names = co.choose(op, sizes, p, tier, t=relax.EXACT, **kw)
        assert got_names == names
        assert np.asarray(exact.time_s) == pytest.approx(fastest, rel=1e-12)
        winner = times[np.arange(len(sizes)), np.argmax(np.asarray(w), axis=0)]
        assert winner == pytest.approx(fastest, rel=1e-12)
        soft = np.asarray(co.choose(op, sizes, p, tier, **kw)[0].time_s)
        assert soft == pytest.approx(np.sum(times ** (-1 / T), axis=-1) ** -T, rel=1e-9), p


def _scaled_cost(cases, jit=False, n0=1 * MiB, p0=12.0, b0=1e11, a0=2e-6):
    """u -> time / time(u = 1) of each (op, algorithm, two_tiers) case, u = the relative
    (bytes, ranks, bandwidth, latency), so every input and output is O(1)."""
    def times(u):
        tier = hw.Tier(u[2] * b0, u[3] * a0, TIER.efficiency, TIER.reduction_Bps,
                       TIER.in_network_efficiency)
        return jnp.stack([co.cost(op, a, u[0] * n0, u[1] * p0, tier,
                                  **(dict(outer=OUTER, local_ranks=4.0) if two else {})).time_s
                          for op, a, two in cases])

    times = jax.jit(times) if jit else times
    t0 = times(jnp.ones(4))
    return lambda u: times(u) / t0


def _check_grads(f):
    u = jnp.ones(4)
    check_grads(f, (u,), order=1, modes=("fwd", "rev"), eps=1e-4, rtol=2e-3, atol=1e-6)
    # signs, by differences (no further compile): columns are bytes, ranks, bandwidth, latency
    g = np.stack([np.asarray(f(u.at[i].add(1e-3))) - np.asarray(f(u)) for i in range(4)], -1)
    assert np.all(g[..., 0] > 0) and np.all(g[..., 2] < 0) and np.all(g[..., 3] >= 0), g


@pytest.mark.parametrize("op, algorithm, two_tiers",
                         [(op, a, False) for op, a in PAIRS]
                         + [(op, "hierarchical", True) for op in HIER_OPS])
def test_gradients_match_finite_differences(op, algorithm, two_tiers):
    """d time / d (bytes, ranks, bandwidth, latency) of each pair: more bytes, less
    bandwidth or more latency take longer."""
    _check_grads(_scaled_cost([(op, algorithm, two_tiers)]))


def test_auto_gradients_match_finite_differences():
    """auto's soft minimum is the same code for every op: all-to-all on one tier and
    all-gather with hierarchical among its candidates stand for the rest (one compile)."""
    _check_grads(_scaled_cost([("all_to_all", "auto", False), ("all_gather", "auto", True)],
                              jit=True))


BARE = hw.Tier(50e9, 0.0, efficiency=1.0, reduction_Bps=1e12)  # zero latency, no NVLS


@pytest.mark.parametrize("op, algorithm", PAIRS + [(op, "hierarchical") for op in HIER_OPS])
def test_finite_at_the_edges_of_the_domain(op, algorithm):
    """0 B, 1 B and 1 TB on 1, 2 and 1e5 ranks: finite values and reverse-mode
    gradients, on the bare table and in NCCL's protocols.

    One vjp over the grid sums the gradients of its 9 points: a NaN or inf at any
    point (a one-sided `where`) shows in the sum.
    """
    kw = dict(outer=OUTER, local_ranks=8.0) if algorithm == "hierarchical" else {}
    n, p = jnp.array([[0.0], [1.0], [1e12]]), jnp.array([[1.0, 2.0, 1e5]])

    def time_s(n, p, tier, protocols=None):
        return co.cost(op, algorithm, n, p, tier, protocols=protocols, **kw).time_s

    cases = [(TIER, None)] + ([] if algorithm == "in_network" else [(BARE, None)])
    for tier, protocols in cases + [(TIER, NCCL)]:
        t, vjp = jax.vjp(functools.partial(time_s, protocols=protocols), n, p, tier)
        t = np.asarray(t)
        assert t.shape == (3, 3) and np.all(np.isfinite(t)) and np.all(t >= 0)
        assert np.all(t[:, 0] == 0) and np.all(t[2, 1:] > t[1, 1:])  # p = 1 is free; 1 TB > 1 B
        grads = jax.tree.leaves(vjp(jnp.ones_like(t)))
        assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)


def _log_uniform(rng, lo, hi, count):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), count))


def _random_tier(rng, count):
    nvls = np.where(rng.uniform(size=count) < 0.5, 0.0, rng.uniform(0.1, 1.0, count))
    latency = np.where(rng.uniform(size=count) < 0.05, 0.0, _log_uniform(rng, 1e-8, 1e-4, count))
    return hw.Tier(_log_uniform(rng, 1e8, 1e13, count), latency, rng.uniform(0.05, 1.0, count),
                   _log_uniform(rng, 1e9, 1e14, count), nvls)


def _scaled(tier, field, factor):
    return eqx.tree_at(lambda t: getattr(t, field), tier, getattr(tier, field) * factor + 1e-12)


def test_vmap_over_1e5_random_configurations_is_finite_and_monotone():
    """auto all-reduce, hierarchical among the candidates, on 1e5 random configurations."""
    count, rng = 100_000, np.random.default_rng(0)
    n_bytes = _log_uniform(rng, 1.0, 1e12, count)
    n_bytes[:100] = 0.0
    ranks = _log_uniform(rng, 1.0, 1e5, count)
    ranks[100:200] = 1.0
    local = _log_uniform(rng, 1.0, 128.0, count)
    inner, outer = _random_tier(rng, count), _random_tier(rng, count)
    f = jax.jit(jax.vmap(lambda n, p, inner, outer, g: co.choose(
        "all_reduce", n, p, inner, outer=outer, local_ranks=g)[:2]))

    c, w = jax.tree.map(np.asarray, f(n_bytes, ranks, inner, outer, local))
    for x in (c.latency_s, c.bandwidth_s, c.reduction_s):
        assert np.all(np.isfinite(x)) and np.all(x >= 0)
    assert np.all(np.abs(w.sum(axis=-1) - 1) < 1e-9)
    t = c.latency_s + c.bandwidth_s + c.reduction_s
    assert t[100:200].max() == 0.0 and t[200:].min() > 0  # p = 1 costs nothing

    # monotone: more bytes or latency never faster, more bandwidth never slower
    def time_s(n=n_bytes, inner=inner, outer=outer):
        return np.asarray(f(n, ranks, inner, outer, local)[0].time_s)

    slack = 1e-12 * t
    assert np.all(time_s(n=n_bytes * 1.01 + 1) >= t - slack)
    for field, sign in (("bandwidth_Bps", -1), ("latency_s", 1)):
        for changed in (dict(inner=_scaled(inner, field, 1.01)),
                        dict(outer=_scaled(outer, field, 1.01))):
            assert np.all(sign * (time_s(**changed) - t) >= -slack), (field, changed.keys())


def test_jitted_cost_does_not_recompile():
    first = _choose("all_reduce", 1.0 * MiB, 8.0, TIER)[0]
    traces = len(TRACES)  # _choose appends once per trace
    second = _choose("all_reduce", 2.0 * GiB, 64.0, H100.scale_out)[0]
    third = _choose("all_reduce", 8.0, 1e4, BARE)[0]
    assert len(TRACES) == traces
    assert float(second) > float(first) > 0 and float(third) > 0


@pytest.mark.parametrize("call, message", [
    (lambda: co.cost("allreduce", "ring", 8, 8, TIER), "op='allreduce' is unknown"),
    (lambda: co.cost("all_reduce", "bogus", 8, 8, TIER), "algorithm='bogus' is not defined"),
    (lambda: co.cost("all_to_all", "tree", 8, 8, TIER), "algorithm='tree' is not defined"),
    (lambda: co.cost("all_reduce", "ring", -1.0, 8, TIER), "bytes=-1 must be non-negative"),
    (lambda: co.cost("all_reduce", "ring", 8, 0.5, TIER), "ranks=0.5 must be at least 1"),
    (lambda: co.cost("all_reduce", "ring", float("nan"), 8, TIER), "bytes=nan"),
    (lambda: co.cost("all_reduce", "in_network", 8, 8, OUTER), "in_network_efficiency=0"),
    (lambda: co.cost("all_reduce", "hierarchical", 8, 8, TIER), "needs an outer tier"),
    (lambda: co.cost("all_reduce", "ring", 8, 8, TIER, outer=OUTER), "go together"),
    (lambda: co.cost("all_reduce", "ring", 8, 8, TIER, outer=OUTER, local_ranks=0),
     "local_ranks=0 must be at least 1"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------- protocols (NCCL's)


def _by_hand(op, algorithm, n, p, tier, protocol, family_base_s):
    """Protocol `protocol` of a flat algorithm, from the closed forms above and
    NCCL's constants as protocols.Nccl states them."""
    L, W, C = CLOSED[(op, algorithm)](p)
    q = NCCL.protocol_names.index(protocol)
    return (family_base_s[q] + L * NCCL.scale_up_step[q] * float(tier.latency_s)
            + W * n / (float(tier.effective_Bps) * NCCL.bandwidth_share[q])
            + C * n / float(tier.reduction_Bps))


@pytest.mark.parametrize("n, protocol", [(1024.0, "LL"), (1 * GiB, "Simple")])
def test_nccl_ring_takes_ll_for_small_messages_and_simple_for_large(n, protocol):
    """LL: NCCL's 6.6 us base and 0.6 / 3.4 of the Simple step at a quarter of
    the bandwidth; Simple: 8.4 us base and the full bandwidth; `cost` of the
    exact model (`relax.EXACT`) is the faster one, exactly."""
    tier, p = H100.scale_up, 8
    got = float(co.cost("all_reduce", "ring", n, p, tier, t=relax.EXACT,
                        protocols=NCCL).time_s)
    each = {q: _by_hand("all_reduce", "ring", n, p, tier, q, NCCL.base_s["ring"])
            for q in NCCL.protocol_names}
    assert min(each, key=each.get) == protocol
    assert got == pytest.approx(each[protocol], rel=1e-9)
    if protocol == "LL":  # 6.6 us + 14 steps x 0.6 us, NCCL's figure for a small ring
        assert got == pytest.approx(6.6e-6 + 14 * 0.6e-6, rel=0.02)


def test_protocols_leave_one_rank_free_and_alpha_beta_unchanged():
    tier = H100.scale_up
    for op, algorithm in PAIRS:
        c = co.cost(op, algorithm, 1 * MiB, 1.0, tier, protocols=NCCL)
        assert float(c.time_s) == 0.0, (op, algorithm)
        plain = co.cost(op, algorithm, 1 * MiB, 8.0, tier)
        ab = co.cost(op, algorithm, 1 * MiB, 8.0, tier, protocols=AlphaBeta())
        assert float(ab.time_s) == float(plain.time_s), (op, algorithm)


def test_nvls_runs_simple_only_with_nccl_s_25_us():
    """NVLS has no LL / LL128: even one byte pays NCCL's 25 us NVLS latency."""
    tier = H100.scale_up
    c = co.cost("all_reduce", "in_network", 1.0, 8.0, tier, t=relax.EXACT, protocols=NCCL)
    assert float(c.latency_s) == pytest.approx(25e-6 + 2 * float(tier.latency_s), rel=1e-9)


def test_auto_under_nccl_picks_only_the_algorithms_nccl_runs():
    """`Protocols.runs`: under `nccl` `auto`'s candidates are NCCL's own
    algorithms (no recursive doubling, halving-doubling or sequential
    hierarchical all-reduce), every one of them defined for its op; under
    `alpha_beta` every algorithm; a named algorithm is costed either way. At
    8 KiB over 2 nodes of 8 H100s NCCL's tree wins (31.9 us, the nccl-tests log's
    32.1), where recursive doubling would read 20 us."""
    for op, runs in NCCL.runs.items():
        assert set(runs) <= set(co.algorithms(op, hierarchical=True)), op
    assert co.candidates("all_reduce", AlphaBeta(), hierarchical=True) == co.algorithms(
        "all_reduce", hierarchical=True)
    assert co.candidates("all_reduce", None) == co.algorithms("all_reduce")
    names = co.candidates("all_reduce", NCCL, hierarchical=True)
    assert {"recursive_doubling", "halving_doubling", "hierarchical"}.isdisjoint(names)
    kw = dict(outer=H100.scale_out, local_ranks=8.0, protocols=NCCL, t=relax.EXACT)
    _, w, names = co.choose("all_reduce", 8 * 1024.0, 16.0, H100.scale_up, **kw)
    assert names[int(np.argmax(np.asarray(w)))] == "rail_tree"
    auto = float(co.cost("all_reduce", "auto", 8 * 1024.0, 16.0, H100.scale_up, **kw).time_s)
    assert auto == pytest.approx(31.9e-6, rel=0.01)
    doubling = co.cost("all_reduce", "recursive_doubling", 8 * 1024.0, 16.0, H100.scale_up, **kw)
    assert float(doubling.time_s) < 0.7 * auto


def test_auto_with_protocols_is_monotone_in_bytes_and_never_above_the_ring():
    tier, outer = H100.scale_up, H100.scale_out
    sizes = jnp.geomspace(8.0, 8 * GiB, 40)
    kw = dict(outer=outer, local_ranks=8.0, protocols=NCCL)

    @jax.jit
    def evaluate(n):
        auto = co.cost("all_reduce", "auto", n, 64.0, tier, **kw).time_s
        ring = co.cost("all_reduce", "ring", n, 64.0, tier, t=relax.EXACT, **kw).time_s
        _, w, _ = co.choose("all_reduce", n, 64.0, tier, **kw)
        grad = jax.grad(lambda m: co.cost("all_reduce", "auto", m, 64.0, tier, **kw).time_s)(
            n[20])
        return auto, ring, w, grad

    auto, ring, w, grad = (np.asarray(x) for x in evaluate(sizes))
    assert np.all(np.diff(auto) > 0)
    assert np.all(auto <= ring * (1 + 1e-12))
    assert w.shape == (len(co.candidates("all_reduce", NCCL, hierarchical=True)), sizes.size)
    np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=1e-12)
    assert np.isfinite(grad) and grad > 0


def test_nccl_tree_across_nodes_takes_its_own_network_step_and_ll_x_1_8():
    """NCCL's tuning model for a tree all-reduce over 2 nodes of 8: base 6.8 us +
    2 ((8 - 1) x 0.6 us x 1.8 + log2(2) x 5.0 us) in LL = 31.9 us (the Tree's
    network hwLat, not the Ring's 2.7, and LL's NVLink step x 1.8 across nodes);
    a public 2 x 8 H100 log (NVIDIA/nccl-tests issue 309) measures 32.1 us at
    8 KiB. Inside one node the LL step stays 0.6 us."""
    across = traffic.cost_on("all_reduce", 8192.0, (16.0, 8.0, 16.0, 1.0), H100, relax.EXACT,
                             "rail_tree")
    assert float(across.latency_s) == pytest.approx((6.8 + 2 * (7 * 0.6 * 1.8 + 5.0)) * 1e-6,
                                                    rel=1e-6)
    assert NCCL.scale_out_step["tree"][0] * 14.0 == pytest.approx(5.0)
    assert NCCL.scale_out_step["ring"][0] * 14.0 == pytest.approx(2.7)
    inside = co.cost("all_reduce", "ring", 1024.0, 8, H100.scale_up, t=relax.EXACT,
                     protocols=NCCL)
    assert float(inside.time_s) == pytest.approx(6.6e-6 + 14 * 0.6e-6, rel=0.02)


def test_bus_bandwidth_of_a_python_int_past_2_31_bytes_without_x64():
    """JAX's default 32-bit mode (the library's caller's, not the tests'): a size
    of 8 GiB as a Python int is a float, not an int32 overflow."""
    import os
    import subprocess
    import sys

    code = ("from codesign import collectives as co; "
            "print(float(co.busbw_Bps('all_reduce', 8 * 2**30, 1.0, 8)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ,
                                            "JAX_ENABLE_X64": "0"})
    assert done.returncode == 0, done.stderr[-500:]
    assert float(done.stdout) == pytest.approx(8 * 2**30 * 1.75, rel=1e-6)

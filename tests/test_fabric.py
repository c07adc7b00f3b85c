"""Topologies, pods and oversubscription, torus dimensions, inventory, ECMP collisions."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import presets
from codesign.model import collectives as co
from codesign.model import fabric, relax


def _with(system, **kw):
    """`system` with a topology by name (first), then float leaves by name (a
    Clos's pods on its topology)."""
    if "topology" in kw:
        system = fabric.with_topology(
            system, fabric.topology(kw.pop("topology"), system.scale_up_domain))
    for k, v in kw.items():
        where = ((lambda s, k=k: getattr(s.topology, k)) if k in ("pod_size", "oversubscription")
                 else (lambda s, k=k: getattr(s, k)))
        system = eqx.tree_at(where, system, jnp.asarray(float(v)))
    return system


H100 = presets.system("dgx-h100")
LLAMA3 = _with(H100, gpus=16_384, pod_size=3072, oversubscription=7, topology="clos")
OUT_BW = float(H100.scale_out.bandwidth_Bps)


# ------------------------------------------------------------------ pods
def test_clos_divides_bandwidth_only_across_pods():
    assert float(fabric.scale_out_tier(LLAMA3, 3072).bandwidth_Bps) == OUT_BW  # fits in a pod
    assert float(fabric.scale_out_tier(LLAMA3, 1024).bandwidth_Bps) == OUT_BW
    assert float(fabric.scale_out_tier(LLAMA3, 3073).bandwidth_Bps) == pytest.approx(OUT_BW / 7)
    assert float(fabric.scale_out_tier(LLAMA3, 16_384).bandwidth_Bps) == pytest.approx(OUT_BW / 7)
    # latency, efficiency untouched
    tier = fabric.scale_out_tier(LLAMA3, 16_384)
    assert float(tier.latency_s) == float(H100.scale_out.latency_s)
    assert float(tier.efficiency) == float(H100.scale_out.efficiency)
    for topology in ("two_tier", "rail_only", "torus"):
        s = _with(LLAMA3, topology=topology)
        assert float(fabric.scale_out_tier(s, 16_384).bandwidth_Bps) == OUT_BW


def test_placement_decides_which_collective_crosses():
    # tp 8 innermost then dp 128: the dp group spans 1024 GPUs (in a pod);
    # with pp 16 placed before dp, dp's stride is 128 and its span 16,384
    big = 1e9
    inside = fabric.scale_out_tier(LLAMA3, fabric.span_gpus(128, 8))
    across = fabric.scale_out_tier(LLAMA3, fabric.span_gpus(128, 128))
    c_in = co.cost("all_reduce", "ring", big, 128, inside)
    c_out = co.cost("all_reduce", "ring", big, 128, across)
    assert float(c_out.bandwidth_s / c_in.bandwidth_s) == pytest.approx(7.0, rel=1e-12)
    # the pods slow the bytes only: the reduction and the latency are the same
    assert float(c_out.reduction_s) == float(c_in.reduction_s)
    assert float(c_out.latency_s) == float(c_in.latency_s)


def test_smooth_pod_crossing():
    spans = jnp.array([100.0, 1000.0, 3072.0, 10_000.0, 100_000.0])
    c = fabric.crosses_pod(spans, 3072.0, t=relax.Relaxed(0.1))
    assert np.all(np.diff(np.asarray(c)) > 0)
    assert float(c[2]) == pytest.approx(0.5)
    assert float(c[0]) < 1e-12 and float(c[-1]) > 1 - 1e-12
    exact = np.asarray(fabric.crosses_pod(spans, 3072.0))
    np.testing.assert_array_equal(exact, [0, 0, 0, 1, 1])


def _bw(x):
    s = eqx.tree_at(lambda s: (s.topology.oversubscription, s.topology.pod_size), LLAMA3,
                    (x[0], x[1]))
    return jnp.log(fabric.scale_out_tier(s, x[2], t=relax.Relaxed(0.5)).bandwidth_Bps)


def test_gradients_in_oversubscription_pod_size_and_span():
    # exact step (t = 0): d bandwidth / d k = -B / k^2 when the group crosses
    g = jax.grad(lambda k: fabric.scale_out_tier(
        eqx.tree_at(lambda s: s.topology.oversubscription, LLAMA3, k), 16_384.0).bandwidth_Bps)(7.0)
    assert float(g) == pytest.approx(-OUT_BW / 49)
    # smooth (t = 0.5): pod size and span matter continuously; central differences
    x0 = np.array([7.0, 3072.0, 4096.0])
    grad = np.asarray(jax.grad(_bw)(jnp.asarray(x0)))
    for i in range(3):
        h = 1e-5 * x0[i]
        up, down = x0.copy(), x0.copy()
        up[i] += h
        down[i] -= h
        fd = (float(_bw(jnp.asarray(up))) - float(_bw(jnp.asarray(down)))) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-5)
    assert grad[0] < 0 and grad[1] > 0 and grad[2] < 0


def test_rail_only_forwards_through_scale_up():
    assert fabric.forwards_through_scale_up(_with(H100, topology="rail_only"))
    assert not fabric.forwards_through_scale_up(LLAMA3)


# ----------------------------------------------------------------- torus
def test_torus_shapes():
    assert fabric.torus_shape(4096) == (16, 16, 16)
    assert fabric.torus_shape(8960) == (16, 20, 28)  # the v5p pod, derived
    assert fabric.torus_shape(13) == (1, 1, 13)
    assert fabric.torus_shape(2048) == (8, 16, 16)
    assert presets.system("tpu-v5p").topology.shape == (16, 20, 28)  # the preset's own
    assert fabric.Torus.of(2048).shape == (8, 16, 16)
    with pytest.raises(ValueError, match="chips=0"):
        fabric.torus_shape(0)


def test_torus_group_drives_only_the_dimensions_it_spans():
    v4 = presets.system("tpu-v4")
    full = float(v4.scale_up.bandwidth_Bps)
    bw = lambda g, s: float(fabric.scale_up_tier(v4, g, s).bandwidth_Bps)  # noqa: E731
    assert bw(16, 1) == pytest.approx(full / 3)  # a ring along x: 2 of 6 links
    assert bw(8, 1) == pytest.approx(full / 3)
    assert bw(256, 1) == pytest.approx(2 * full / 3)  # an x-y plane
    assert bw(16, 16) == pytest.approx(full / 3)  # along y only
    assert bw(512, 8) == pytest.approx(full)  # dp over tp 8: x (2 values), y, z
    assert bw(4096, 1) == pytest.approx(full)
    assert bw(1, 1) == pytest.approx(full / 3)  # a group of one: floor, moves no bytes
    # the torus carries its shape: the same numbers under jit
    jitted = jax.jit(lambda s, g, st: fabric.scale_up_tier(s, g, st).bandwidth_Bps)
    assert float(jitted(v4, 256.0, 1.0)) == pytest.approx(2 * full / 3)
    # switched fabrics: unchanged
    tier = fabric.scale_up_tier(H100, 8, 1)
    assert float(tier.bandwidth_Bps) == float(H100.scale_up.bandwidth_Bps)


# ------------------------------------------------------------- inventory
def test_two_tier_fat_tree_counts():
    # 2048 GPUs, radix 64: a two-level fat tree, 64 leaves (32 down, 32 up), 32 spines
    inv = fabric.inventory(_with(H100, gpus=2048))
    assert float(inv.leaf_switches) == 64
    assert float(inv.spine_switches) == 32
    assert float(inv.core_switches) == 0
    assert float(inv.nics) == 2048
    assert float(inv.cables) == 2 * 2048  # GPU-leaf and leaf-spine links
    assert float(inv.transceivers) == 4 * 2048
    p = fabric.DEFAULT_PRICES
    want = (96 * p.switch_usd + 8192 * p.transceiver_usd + 4096 * p.cable_usd
            + 2048 * p.nic_usd)
    assert float(inv.cost_usd) == pytest.approx(float(want))
    assert float(inv.cost_per_gpu_usd) == pytest.approx(float(want) / 2048)
    # 16,384 GPUs need three levels: 5 switch ports per GPU
    inv = fabric.inventory(_with(H100, gpus=16_384))
    assert float(inv.leaf_switches + inv.spine_switches + inv.core_switches) == 5 * 16_384 / 64


def test_clos_pods_and_oversubscribed_core():
    inv = fabric.inventory(LLAMA3)
    # pods of 3072 are 3-level fat trees (3072 > 64^2/2): 2 leaf + 3 upper ports per GPU,
    # plus N/7 uplinks at the pod top and N/7 core ports
    up = 16_384 / 7
    assert float(inv.leaf_switches) == np.ceil(2 * 16_384 / 64)
    assert float(inv.spine_switches) == np.ceil((3 * 16_384 + up) / 64)
    assert float(inv.core_switches) == np.ceil(up / 64)
    # a job inside one pod has no core
    assert float(fabric.inventory(_with(LLAMA3, gpus=2048)).core_switches) == 0
    # oversubscription saves core ports
    assert float(fabric.inventory(_with(LLAMA3, oversubscription=1)).core_switches) == 256


def test_torus_inventory_tpu_v4():
    inv = fabric.inventory(presets.system("tpu-v4"))
    assert float(inv.ocs_switches) == 48  # Jouppi et al. 2023: 48 OCSes for 4096 chips
    assert float(inv.leaf_switches + inv.spine_switches + inv.core_switches) == 0
    assert float(inv.nics) == 1024  # one data-centre NIC per 4-chip host


def test_rail_only_saving_and_all_to_all_penalty():
    # DGX H100, 16K GPUs: rails of 2048 need 2 levels vs 3 for the full Clos
    cost, power = (float(x) for x in fabric.rail_only_saving(_with(H100, gpus=16_384)))
    assert 0.30 < cost < 0.45 and 0.30 < power < 0.45
    # 256-GPU scale-up domains (GH200 NVL256-like): one switch per rail
    cost, power = (float(x) for x in fabric.rail_only_saving(
        _with(H100, gpus=16_384, scale_up_domain=256)))
    assert 0.6 < cost < 0.8 and 0.6 < power < 0.8
    # equal levels: nothing saved
    cost, _ = fabric.rail_only_saving(_with(H100, gpus=1024))
    assert float(cost) == pytest.approx(0.0, abs=1e-12)
    # MoE all-to-all: the extra NVLink hop costs ~ scale-out / scale-up bandwidth
    pen = float(fabric.rail_only_all_to_all_penalty(H100, 1e12, 64))
    ratio = float(H100.scale_out.effective_Bps / H100.scale_up.effective_Bps)
    assert pen == pytest.approx(ratio, rel=1e-3)
    assert 0.082 <= pen <= 0.12  # Wang et al.: 8.2-11.2%


def test_prices_are_validated():
    with pytest.raises(ValueError, match=r"prices.switch_usd=-1 "):
        fabric.Prices(switch_usd=-1.0)
    with pytest.raises(ValueError, match=r"prices.switch_radix=2 "):
        fabric.Prices(switch_radix=2.0)


# ------------------------------------------------------------------ ECMP
def test_exact_max_load_small_cases():
    assert float(fabric.ecmp_expected_max_load(2, 2, exact=True)) == pytest.approx(1.5, abs=1e-14)
    # 3 balls, 3 bins: all distinct 6/27 -> 1, all same 3/27 -> 3, else 2
    assert float(fabric.ecmp_expected_max_load(3, 3, exact=True)) == pytest.approx(51 / 27,
                                                                              abs=1e-14)
    assert float(fabric.ecmp_expected_max_load(1, 8, exact=True)) == pytest.approx(1.0, abs=1e-14)
    assert float(fabric.ecmp_expected_max_load(7, 1, exact=True)) == pytest.approx(7.0, abs=1e-14)
    assert float(fabric.ecmp_expected_max_load(0, 4, exact=True)) == 0.0


@pytest.mark.parametrize("k,m", [(8, 8), (64, 16), (16, 64)])
def test_exact_max_load_matches_monte_carlo(k, m):
    mean, se = fabric.ecmp_monte_carlo(jax.random.key(k * 1000 + m), k, m, trials=20_000)
    exact = float(fabric.ecmp_expected_max_load(k, m, exact=True))
    assert exact == pytest.approx(float(mean), abs=4 * float(se))
    assert float(se) < 0.01  # the tolerance is tight: 4 standard errors < 0.04 flows


def test_poisson_approximation_and_its_gradient():
    for k, m in [(8, 8), (32, 32), (256, 64), (1000, 10)]:
        exact = float(fabric.ecmp_expected_max_load(k, m, exact=True))
        approx = float(fabric.ecmp_expected_max_load(k, m))
        assert approx == pytest.approx(exact, rel=0.03)
    f = lambda x: fabric.ecmp_slowdown(x[0], x[1], exact=False)  # noqa: E731
    x0 = np.array([48.0, 32.0])
    grad = np.asarray(jax.grad(f)(jnp.asarray(x0)))  # traced: the smooth form
    for i in range(2):
        up, down = x0.copy(), x0.copy()
        up[i] += 1e-4
        down[i] -= 1e-4
        fd = (float(f(up)) - float(f(down))) / 2e-4
        assert grad[i] == pytest.approx(fd, rel=1e-4)


def test_slowdowns():
    # 32 flows on 32 uplinks: the busiest carries ~3.5 flows: 3.5x slower than spraying
    # (exactly 3.5329; the smooth form the model runs 3.5224, eagerly and under jit)
    assert float(fabric.ecmp_slowdown(32, 32, exact=True)) == pytest.approx(3.5329, rel=1e-4)
    assert float(fabric.ecmp_slowdown(32, 32)) == pytest.approx(3.5224, rel=1e-4)
    assert float(jax.jit(fabric.flow_slowdown, static_argnums=2)(32, 32, "ecmp")) == float(
        fabric.flow_slowdown(32, 32, "ecmp"))
    assert float(fabric.ecmp_slowdown(1, 8)) == 1.0  # one flow is never slowed
    assert float(fabric.flow_slowdown(32, 32, "spray")) == 1.0
    assert float(fabric.flow_slowdown(32, 32, "adaptive", overhead=0.05)) == pytest.approx(1.05)
    assert float(fabric.flow_slowdown(32, 32, "ecmp")) == float(fabric.ecmp_slowdown(32, 32))
    with pytest.raises(ValueError, match="routing='hash'"):
        fabric.flow_slowdown(4, 4, "hash")
    with pytest.raises(ValueError, match="m_links=0"):
        fabric.ecmp_expected_max_load(4, 0)
    with pytest.raises(ValueError, match="k_flows=-1"):
        fabric.ecmp_expected_max_load(-1, 4)
    with pytest.raises(ValueError, match="exact ECMP load"):
        fabric.ecmp_expected_max_load(2.5, 4, exact=True)


def test_leaf_downlinks_are_half_the_switch_radix():
    assert float(fabric.leaf_downlinks()) == 32.0  # a radix-64 switch, 32 down and 32 up
    assert float(fabric.leaf_downlinks(fabric.Prices(switch_radix=128.0))) == 64.0
    ecmp = eqx.tree_at(lambda s: s.routing, H100, fabric.Ecmp())
    # one member per leaf: all d flows of a leaf hashed onto its d uplinks
    for radix in (64.0, 128.0):
        prices = fabric.Prices(switch_radix=radix)
        d = radix / 2
        got = fabric.group_flow_slowdown(ecmp, 64 * d * 8, 64.0, prices=prices)
        assert float(got) == pytest.approx(float(fabric.ecmp_slowdown(d, d, exact=False)))

"""The fabric above the chip: topologies, pods and oversubscription, cost and power, ECMP.

Where a collective's bandwidth depends on *where* its group sits, this module
says which tier it sees:

- `scale_out_tier(system, span_gpus)`: the slow tier seen by a group whose
  members spread over `span_gpus` consecutive GPU indices (`span_gpus` =
  group size x stride for a group of every stride-th rank, see `span_gpus`).
  A three-layer Clos (`clos`) has pods of `pod_size` GPUs at full bisection and
  `oversubscription`:1 above them (Llama 3: 3,072-GPU pods at 1:7). A group that
  spans more than a pod is slowed by the full factor: every GPU of the job runs
  its copy of the collective at the same time (one group per tp/pp/... rank), so
  the pod's uplinks carry 1/k of what its GPUs inject, and a ring, whose every
  step waits for its slowest link, runs at the cross-pod rate throughout. This
  is the conservative choice (a pod-aware hierarchical algorithm could keep
  part of the bytes inside the pod); groups that fit in a pod are assumed to be
  placed inside one (pod-aligned placement, as a network-aware scheduler does).
- `two_tier` and `rail_only` leave the scale-out tier unchanged. Rail-only has
  no spine: GPU i of every scale-up domain hangs off rail switch i only, so
  traffic between different rails is forwarded through the scale-up domain
  first (`forwards_through_scale_up`): the traffic model must cost such groups
  with hierarchical algorithms.
- `torus`: the whole pod is the scale-up domain (ICI); the scale-out tier is
  the data-centre network between pods, unchanged.
- `scale_up_tier(system, group_size, stride)`: switched scale-up domains
  (NVLink/NVSwitch) give every group the full per-GPU bandwidth; on a 3D torus a
  group drives only the links of the dimensions it spans (a ring along one
  dimension uses 2 of the 6 links), so the bandwidth is scaled by
  (dimensions spanned) / 3. Ranks are laid out x fastest (`torus_shape`).

`inventory` counts switches, NICs, transceivers and cables per topology and
prices them (`Prices`); `rail_only_saving` and `rail_only_all_to_all_penalty`
compare a rail-only fabric with a full-bisection Clos (Wang et al.: 38-77% lower
cost, 37-75% lower power, 8.2-11.2% longer MoE all-to-all).

ECMP: k elephant flows hashed onto m equal-cost links is balls into bins; a
collective waits for its slowest flow, so the slowdown is the expected maximum
load over the ideal (`ecmp_expected_max_load`, exact; `ecmp_slowdown`).
Packet spraying / adaptive routing spreads every flow over all links
(`flow_slowdown(..., routing="spray")`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _checks
from . import collectives as co
from ._checks import float_field
from ._ecmp import (
    ecmp_expected_max_load as ecmp_expected_max_load,
)
from ._ecmp import (
    ecmp_monte_carlo as ecmp_monte_carlo,
)
from ._ecmp import (
    ecmp_slowdown as ecmp_slowdown,
)
from ._ecmp import (
    flow_slowdown as flow_slowdown,
)
from .hardware import ROUTINGS as ROUTINGS
from .hardware import System, Tier
from .relax import safe_log, smooth_ceil, smooth_max, smooth_min

# ----------------------------------------------------------------------- placement


def span_gpus(group_size, stride) -> jax.Array:
    """GPU indices covered by a group of `group_size` ranks `stride` apart.

    A group of every stride-th rank starting at an aligned offset covers
    `group_size x stride` consecutive indices (the block it is aligned to).
    """
    return _checks.as_float(group_size) * _checks.as_float(stride)


def crosses_pod(span, pod_size, t=0.0) -> jax.Array:
    """1 when a group spanning `span` GPUs leaves its pod, else 0.

    Exact step at t = 0; for t > 0 the logistic sigmoid(log(span / pod) / t),
    smooth in span and pod size (1/2 at span = pod).
    """
    span, pod_size = _checks.as_float(span), _checks.as_float(pod_size)
    if isinstance(t, (int, float)) and t == 0:
        return (span > pod_size).astype(span.dtype) + 0.0 * pod_size
    x = (safe_log(span) - safe_log(pod_size)) / jnp.maximum(t, 1e-12)
    return jax.nn.sigmoid(x)


def oversubscription_factor(system: System, span, t=0.0) -> jax.Array:
    """The factor (>= 1) by which a group spanning `span` GPUs divides its scale-out bandwidth.

    clos: 1 + (k - 1) x crosses_pod: k when the group leaves its pod, 1 inside.
    Other topologies: 1.
    """
    if system.topology != "clos":
        return jnp.ones_like(_checks.as_float(span))
    return 1.0 + (system.oversubscription - 1.0) * crosses_pod(span, system.pod_size, t)


def _with_bandwidth(tier: Tier, bandwidth_Bps) -> Tier:
    return eqx.tree_at(lambda x: x.bandwidth_Bps, tier, bandwidth_Bps)


def scale_out_tier(system: System, span_gpus, t=0.0) -> Tier:
    """The slow tier seen by a collective whose group spans `span_gpus` GPU indices.

    clos: bandwidth / oversubscription when the span exceeds `pod_size` (see the
    module docstring for why the whole group slows); smooth in span, pod size
    and oversubscription with temperature t (exact at t = 0). Other topologies:
    `system.scale_out` unchanged.
    """
    tier = system.scale_out
    if system.topology != "clos":
        return tier
    factor = oversubscription_factor(system, span_gpus, t)
    return _with_bandwidth(tier, tier.bandwidth_Bps / factor)


def crossing_fraction(span, across, block, exchange: bool = False, t=0.0) -> jax.Array:
    """Share of a group's slow-tier flows that leave a block of `block` GPUs
    (a pod, a leaf switch) when the group spans `span` GPU indices with
    `across` members on the slow tier (one per scale-up domain it touches).

    A ring (or tree) ordered block by block leaves each block once: blocks /
    across of its hops cross, at most all. An exchange (all-to-all) sends to
    every member: 1 - block / span of its bytes leave. 0 when the group fits.
    """
    span, block = _checks.as_float(span), _checks.as_float(block)
    blocks = jnp.maximum(span / block, 1.0)
    inside = crosses_pod(span, block, t)
    if exchange:
        return inside * (1.0 - 1.0 / blocks)
    return inside * jnp.minimum(blocks / jnp.maximum(_checks.as_float(across), 1.0), 1.0)


def pod_factor(system: System, span, across, exchange: bool = False, t=0.0) -> jax.Array:
    """Bandwidth divisor of a group on an oversubscribed Clos, from the flows that cross.

    Every GPU of a pod runs its copy of the collective at once, so the pod's
    uplinks (1/k of what its GPUs inject) carry the crossing share f of that
    injection: the crossing hops slow by k f when k f > 1, and a ring waits for
    them: max(1, k f). f = 1 (a flat exchange, or a ring with one member per
    pod) is `oversubscription_factor`'s all-or-nothing k.
    """
    if system.topology != "clos":
        return jnp.ones_like(_checks.as_float(span))
    f = crossing_fraction(span, across, system.pod_size, exchange, t)
    return smooth_max(system.oversubscription * f, 1.0, t)


LEAF_DOWNLINKS = 32.0  # GPUs (NICs) under one leaf, and its uplinks: a radix-64
# switch split evenly (Prices.switch_radix), rail-optimised: the leaf holds the
# same-index GPU of 32 scale-up domains (assumption, as in rail-optimised DGX pods)


def group_flow_slowdown(system: System, span, across, exchange: bool = False,
                        t=0.0) -> jax.Array:
    """ECMP hash collisions of a group's flows on the leaf uplinks (1 unless
    `system.routing` is "ecmp").

    The LEAF_DOWNLINKS GPUs under a leaf send k = 32 x f x q flows up, f the
    share of flows that leave the leaf (`crossing_fraction` with a block of 32
    domains), q the flows per NIC (1 for a ring channel, across - 1 for an
    exchange, each at 1/q of the NIC's rate), onto m = 32 uplinks. The busiest
    uplink carries E[max load] / q NICs' worth (`flow_slowdown`, the same code
    the sweeps' ECMP target runs), and a flow is slowed only above its line rate.
    """
    if system.routing != "ecmp" or system.topology == "torus":
        return jnp.ones_like(_checks.as_float(span))
    across = jnp.maximum(_checks.as_float(across), 1.0)
    f = crossing_fraction(span, across, LEAF_DOWNLINKS * system.scale_up_domain, exchange, t)
    # (q capped at 512: the Poisson form holds to k / m ~ 600; the slowdown is ~1 there)
    q = jnp.clip(across - 1.0, 1.0, 512.0) if exchange else jnp.ones_like(across)
    k = LEAF_DOWNLINKS * f * q
    slow = flow_slowdown(k, LEAF_DOWNLINKS, "ecmp")
    return smooth_max(slow * jnp.maximum(k / LEAF_DOWNLINKS, 1.0) / q, 1.0, t)


def group_scale_out_tier(system: System, span, across, exchange: bool = False,
                         t=0.0) -> Tier:
    """The slow tier a group sees: `system.scale_out` divided by the pods its
    flows cross (`pod_factor`) and by ECMP collisions (`group_flow_slowdown`)."""
    tier = system.scale_out
    if system.topology != "clos" and (system.routing != "ecmp" or system.topology == "torus"):
        return tier  # no pods and no hash collisions: the tier as it is (no traced divide)
    factor = (pod_factor(system, span, across, exchange, t)
              * group_flow_slowdown(system, span, across, exchange, t))
    return _with_bandwidth(tier, tier.bandwidth_Bps / factor)


def rail_forwarding_cost(system: System, n_bytes, local_ranks, tier: Tier | None = None):
    """The extra hop of cross-rail traffic on a rail-only fabric: the `n_bytes`
    bound for other domains are first exchanged inside the domain (a direct
    all-to-all over `local_ranks` on the scale-up tier) so that each leaves on
    the rail of its destination. Zero Cost on other topologies; rings, trees
    and hierarchical collectives stay on their rail and never pay it."""
    tier = system.scale_up if tier is None else tier
    c = co.cost("all_to_all", "direct", n_bytes, jnp.maximum(_checks.as_float(local_ranks), 1.0),
                tier)
    return c.scale(1.0 if forwards_through_scale_up(system) else 0.0)


def forwards_through_scale_up(system: System) -> bool:
    """True on rail-only fabrics: cross-rail traffic hops through the scale-up domain."""
    return system.topology == "rail_only"


# -------------------------------------------------------------------------- torus

# Torus shapes are (x, y, z), ranks laid out x fastest; the presets' full-pod
# shapes are `hardware.System.torus_shape`.
TORUS_DIMS = 3  # the presets' scale_up.bandwidth_Bps is 2 links x 3 dimensions


def torus_shape(chips: int) -> tuple[int, int, int]:
    """The most cube-like (x <= y <= z, x y z = chips) shape: smallest z, then largest x.

    Reproduces both presets: 4096 -> (16, 16, 16), 8960 -> (16, 20, 28). A
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


def system_torus_shape(system: System) -> tuple:
    """The torus shape of `system`'s scale-up domain.

    A concrete domain size: the preset's shape (`System.torus_shape`) when the
    size matches it, else `torus_shape`. A traced size (under jit): the preset's
    shape when it has one, else a cube of side domain^(1/3) (floats).
    """
    chips = _checks.concrete(system.scale_up_domain)
    preset = system.torus_shape or None
    if chips is None:
        return preset if preset is not None else (system.scale_up_domain ** (1 / 3),) * 3
    if preset is not None and math.prod(preset) == float(chips):
        return preset
    return torus_shape(float(chips))


def torus_dims_spanned(group_size, stride, shape, t=0.0) -> jax.Array:
    """How many torus dimensions a group of `group_size` ranks `stride` apart spans.

    Along dimension d (size n_d, c_d ranks per step along it) the group's
    coordinates step by lo = clip(stride / c_d, 1, n_d) up to
    hi = clip(stride x group_size / c_d, 1, n_d); it spans d when hi / lo >= 2.
    Each dimension counts min(log2(hi / lo), 1) (smooth_min with temperature
    t): exact 0 or 1 at aligned integer layouts, continuous in between.
    """
    g, s = _checks.as_float(group_size), _checks.as_float(stride)
    total, c = 0.0, 1.0
    for n in shape:
        lo = jnp.clip(s / c, 1.0, n)
        hi = jnp.clip(s * g / c, 1.0, n)
        extent = hi / lo
        total = total + smooth_min(safe_log(extent) / jnp.log(2.0), 1.0, t)
        c *= n
    return total


def scale_up_tier(system: System, group_size, stride, t=0.0, shape=None) -> Tier:
    """The fast tier seen by a group of `group_size` ranks `stride` apart.

    Switched domains: `system.scale_up` unchanged. Torus: bandwidth x
    max(dims spanned, 1) / 3 (a group of one moves no bytes, so the floor only
    keeps the tier valid). `shape` defaults to `system_torus_shape(system)`.
    """
    tier = system.scale_up
    if system.topology != "torus":
        return tier
    shape = system_torus_shape(system) if shape is None else tuple(shape)
    dims = torus_dims_spanned(group_size, stride, shape, t)
    return _with_bandwidth(tier, tier.bandwidth_Bps * jnp.maximum(dims, 1.0) / TORUS_DIMS)


# ---------------------------------------------------------------- cost and power


class Prices(eqx.Module):
    """Price (USD) and power (W) per fabric part. Every number is an ASSUMPTION
    (list-price order of magnitude for 400 Gb/s-generation parts, 2023-24) except
    where a source is given; replace them with quotes for a real design.
    """

    # switch_radix: 64 x 400 Gb/s ports, as NVIDIA Quantum-2 (QM9700) and
    #   Broadcom Tomahawk 4 (25.6 Tb/s) switches have (vendor datasheets).
    # switch_usd, switch_w: assumption (a 25.6 Tb/s box without optics).
    # nic_usd, nic_w: assumption (a 400 Gb/s ConnectX-7-class NIC).
    # transceiver_usd, transceiver_w: assumption (a 400 Gb/s optical module).
    # cable_usd: assumption (a fibre patch cable); cables draw no power.
    # ocs_radix: 128 ports in use per OCS: TPU v4 joins 64 cubes (6 faces x 16
    #   = 96 optical ports each, 6,144 in all) through 48 OCSes (Jouppi et al.
    #   2023). ocs_usd, ocs_w: assumption.
    switch_radix: jax.Array = float_field(default=64.0)  # ports per switch
    switch_usd: jax.Array = float_field(default=25_000.0)
    switch_w: jax.Array = float_field(default=750.0)  # without optics
    nic_usd: jax.Array = float_field(default=2_000.0)
    nic_w: jax.Array = float_field(default=25.0)
    transceiver_usd: jax.Array = float_field(default=800.0)
    transceiver_w: jax.Array = float_field(default=12.0)
    cable_usd: jax.Array = float_field(default=100.0)
    ocs_radix: jax.Array = float_field(default=128.0)  # optical circuit switch ports
    ocs_usd: jax.Array = float_field(default=50_000.0)
    ocs_w: jax.Array = float_field(default=108.0)

    def __check_init__(self):
        _checks.check("prices.switch_radix", self.switch_radix, lambda v: v >= 4,
                      "must be at least 4")
        _checks.positive("prices.ocs_radix", self.ocs_radix)
        for f in ("switch_usd", "switch_w", "nic_usd", "nic_w", "transceiver_usd",
                  "transceiver_w", "cable_usd", "ocs_usd", "ocs_w"):
            _checks.non_negative(f"prices.{f}", getattr(self, f))


@functools.cache
def default_prices() -> Prices:
    """The default `Prices` (built on first use: importing codesign starts no JAX backend).

    Built eagerly even when first used inside a trace (jit/grad), so the cache
    holds concrete arrays, never tracers of that trace."""
    with jax.ensure_compile_time_eval():
        return Prices()


def __getattr__(name):  # `fabric.DEFAULT_PRICES`, built lazily
    if name == "DEFAULT_PRICES":
        return default_prices()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# TPU v4 (Jouppi et al. 2023): the faces of each 4x4x4 cube (96 of its 384 link
# ends) go optical through the OCSes: 1.5 optical link ends per chip.
TORUS_OPTICAL_ENDS_PER_CHIP = 96 / 64


class Inventory(eqx.Module):
    """Parts of a fabric and what they cost. Counts are floats (exact integers at t = 0).

    Every link is optical with a transceiver at each end and one cable (an
    assumption: copper inside a rack would save transceivers). The scale-up
    domain (NVLink, ICI copper) is not counted except the torus's own links.
    """

    leaf_switches: jax.Array  # first switch level (ToR / rail / leaf)
    spine_switches: jax.Array  # levels above the leaf inside a pod (or a rail)
    core_switches: jax.Array  # above the pods (clos) / top of a 3+-level fat tree
    ocs_switches: jax.Array  # optical circuit switches (torus)
    nics: jax.Array
    transceivers: jax.Array
    cables: jax.Array
    network_cost_usd: jax.Array  # switches + optics + cables (NICs excluded)
    network_power_w: jax.Array
    cost_usd: jax.Array  # everything, NICs included
    power_w: jax.Array
    cost_per_gpu_usd: jax.Array
    power_per_gpu_w: jax.Array


def fat_tree_levels(endpoints, radix, t=0.0) -> jax.Array:
    """Levels of a non-blocking folded Clos (fat tree) of radix-R switches for E endpoints.

    L levels hold up to 2 (R/2)^L endpoints (one switch holds R): L = max(1,
    ceil(log(E/2) / log(R/2))), the ceil relaxed with temperature t
    (`relax.smooth_ceil`: exact at t = 0, with the envelope's slope).
    """
    e, r = _checks.as_float(endpoints), _checks.as_float(radix)
    x = safe_log(e / 2.0) / jnp.log(r / 2.0)
    return jnp.maximum(smooth_ceil(x - 1e-9, t), 1.0)


def _fat_tree_ports(endpoints, radix):
    """(leaf ports, ports of the levels above the leaf) of a fat tree over `endpoints`.

    Every level below the top has E ports down and E up; the top has E down.
    The level count is a staircase (no slope) for the counts.
    """
    levels = jax.lax.stop_gradient(fat_tree_levels(endpoints, radix))
    leaf = jnp.where(levels > 1, 2.0, 1.0) * endpoints
    upper = jnp.where(levels > 1, 2.0 * levels - 3.0, 0.0) * endpoints
    return leaf, upper, levels


def _switch_ports(system: System, radix, t):
    """(leaf, spine, core) switch ports of the scale-out fabric of `system`."""
    n = system.gpus
    if system.topology == "torus":
        z = jnp.zeros_like(n)
        return z, z, z
    if system.topology == "rail_only":
        # one fat tree per rail over the N / G GPUs of that rail
        leaf, upper, _ = _fat_tree_ports(n / system.scale_up_domain, radix)
        g = system.scale_up_domain
        return leaf * g, upper * g, jnp.zeros_like(n)
    if system.topology == "two_tier":
        leaf, upper, levels = _fat_tree_ports(n, radix)
        top = jnp.where(levels > 2, n, 0.0)  # a 3+-level tree's top level is its "core"
        return leaf, upper - top, top
    # clos: pods are fat trees over min(N, P); their top level sends N/k up to a
    # single aggregation ("core") layer when the job spans more than one pod.
    pod = jnp.minimum(n, system.pod_size)
    pods = n / pod
    leaf, upper, _ = _fat_tree_ports(pod, radix)
    cross = crosses_pod(n, system.pod_size, t)
    uplinks = cross * n / system.oversubscription
    return leaf * pods, upper * pods + uplinks, uplinks


def inventory(system: System, prices: Prices | None = None, t=0.0) -> Inventory:
    """Count and price the scale-out fabric (and the torus's links) of `system`.

    - two_tier: a non-blocking fat tree over all GPUs (one NIC per GPU).
    - clos: pods of `pod_size` GPUs as non-blocking fat trees, N/k uplinks from
      the pods into one aggregation layer of N/k ports.
    - rail_only: `scale_up_domain` rails, each a non-blocking fat tree over the
      N / G GPUs of that rail; no spine joining the rails.
    - torus: 3 links per chip (6 ends), 1.5 optical ends per chip through OCSes
      (TPU v4's cube faces), one data-centre NIC per host (the data-centre
      network itself is shared and not counted).
    Switch counts are ports / radix rounded up with `smooth_ceil` (exact at t = 0).
    """
    prices = default_prices() if prices is None else prices
    r = prices.switch_radix
    n = system.gpus
    leaf_p, spine_p, core_p = _switch_ports(system, r, t)
    leaf, spine, core = (smooth_ceil(p / r, t) for p in (leaf_p, spine_p, core_p))
    if system.topology == "torus":
        nics = n / system.gpus_per_node
        optical_ends = TORUS_OPTICAL_ENDS_PER_CHIP * n
        ocs = smooth_ceil(optical_ends / prices.ocs_radix, t)
        links = 3.0 * n + nics  # ICI links + host-to-network links
        transceivers = optical_ends + 2.0 * nics
    else:
        nics = n
        ocs = jnp.zeros_like(n)
        links = (nics + leaf_p + spine_p + core_p) / 2.0
        transceivers = 2.0 * links
    switches = leaf + spine + core
    network_cost = (switches * prices.switch_usd + ocs * prices.ocs_usd
                    + transceivers * prices.transceiver_usd + links * prices.cable_usd)
    network_power = (switches * prices.switch_w + ocs * prices.ocs_w
                     + transceivers * prices.transceiver_w)
    cost = network_cost + nics * prices.nic_usd
    power = network_power + nics * prices.nic_w
    return Inventory(leaf, spine, core, ocs, nics, transceivers, links, network_cost,
                     network_power, cost, power, cost / n, power / n)


def with_topology(system: System, topology: str) -> System:
    """`system` with another topology (same GPUs, domain, tiers)."""
    return dataclasses.replace(system, topology=topology)


def rail_only_saving(system: System, prices: Prices | None = None):
    """(cost saving, power saving) of rail-only against a full-bisection Clos.

    Both fabrics serve the same GPUs with one NIC each; the NICs are identical
    and excluded, so the fractions are of switches + optics + cables
    (`network_cost_usd`, `network_power_w`). Wang et al. report 38-77% (cost)
    and 37-75% (power) across their cluster sizes.
    """
    rail = inventory(with_topology(system, "rail_only"), prices)
    full = inventory(with_topology(system, "two_tier"), prices)
    return (1.0 - rail.network_cost_usd / full.network_cost_usd,
            1.0 - rail.network_power_w / full.network_power_w)


def rail_only_all_to_all_penalty(system: System, n_bytes, ranks) -> jax.Array:
    """Relative extra time of an all-to-all over `ranks` GPUs on rail-only vs a full Clos.

    Full Clos: each GPU sends the bytes bound for other scale-up domains
    straight over its NIC (the rest moves over the scale-up tier at the same
    time), i.e. the cross-domain exchange `all_to_all direct` over ranks / G
    groups on the scale-out tier, G rails in parallel. Rail-only: a GPU reaches
    only its own rail, so the bytes are first regrouped inside the domain
    (`all_to_all hierarchical`: an exchange over the scale-up tier, then the
    same cross-domain exchange). The penalty is that extra forwarding hop;
    Wang et al. report 8.2-11.2%.
    """
    g = jnp.minimum(system.scale_up_domain, _checks.as_float(ranks))
    clos = co.cost("all_to_all", "direct", n_bytes, _checks.as_float(ranks) / g,
                   system.scale_out).time_s
    hop = rail_forwarding_cost(with_topology(system, "rail_only"), n_bytes, g).time_s
    return hop / clos  # the same hop the traffic table adds to rail-only exchanges

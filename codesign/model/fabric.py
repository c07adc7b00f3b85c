"""The fabric above the chip: where a group sits, which tiers it sees, what the fabric costs.

The topologies and routings themselves are types (`strategies`: `TwoTier`,
`Clos`, `RailOnly`, `Torus`; `Ecmp`, `Spray`, `Adaptive`), each owning its
formulas; this module applies them to a `hardware.System`:

- `scale_out_tier(system, span_gpus)`: the slow tier seen by a group whose
  members spread over `span_gpus` consecutive GPU indices (`span_gpus` =
  group size x stride for a group of every stride-th rank, see `span_gpus`).
  A three-layer Clos (`Clos`) has pods of `pod_size` GPUs at full bisection and
  `oversubscription`:1 above them (Llama 3: 3,072-GPU pods at 1:7). A group that
  spans more than a pod is slowed by the full factor: every GPU of the job runs
  its copy of the collective at the same time (one group per tp/pp/... rank), so
  the pod's uplinks carry 1/k of what its GPUs inject, and a ring, whose every
  step waits for its slowest link, runs at the cross-pod rate throughout. This
  is the conservative choice (a pod-aware hierarchical algorithm could keep
  part of the bytes inside the pod); groups that fit in a pod are assumed to be
  placed inside one (pod-aligned placement, as a network-aware scheduler does).
- two-tier and rail-only fabrics leave the scale-out tier unchanged. Rail-only
  has no spine: GPU i of every scale-up domain hangs off rail switch i only, so
  traffic between different rails is forwarded through the scale-up domain
  first (`forwards_through_scale_up`): the traffic model must cost such groups
  with hierarchical algorithms.
- torus: the whole pod is the scale-up domain (ICI); the scale-out tier is
  the data-centre network between pods, unchanged.
- `scale_up_tier(system, group_size, stride)`: switched scale-up domains
  (NVLink/NVSwitch) give every group the full per-GPU bandwidth; on a 3D torus a
  group drives only the links of the dimensions it spans (a ring along one
  dimension uses 2 of the 6 links), so the bandwidth is scaled by
  (dimensions spanned) / 3. Ranks are laid out x fastest (`Torus.shape`).

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

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import checks
from ..checks import float_field
from . import collectives as co
from . import strategies
from ._ecmp import (
    ecmp_expected_max_load as ecmp_expected_max_load,
)
from ._ecmp import (
    ecmp_monte_carlo as ecmp_monte_carlo,
)
from ._ecmp import (
    ecmp_slowdown as ecmp_slowdown,
)
from .hardware import System, Tier
from .relax import EXACT, smooth_ceil, smooth_max, smoothing
from .strategies import ROUTINGS as ROUTINGS
from .strategies import TOPOLOGIES as TOPOLOGIES
from .strategies import TORUS_DIMS as TORUS_DIMS
from .strategies import Adaptive as Adaptive
from .strategies import Clos as Clos
from .strategies import Ecmp as Ecmp
from .strategies import RailOnly as RailOnly
from .strategies import Routing as Routing
from .strategies import Spray as Spray
from .strategies import Topology as Topology
from .strategies import Torus as Torus
from .strategies import TwoTier as TwoTier
from .strategies import crosses_pod as crosses_pod
from .strategies import crossing_fraction as crossing_fraction
from .strategies import fat_tree_levels as fat_tree_levels
from .strategies import topology as topology
from .strategies import torus_dims_spanned as torus_dims_spanned
from .strategies import torus_shape as torus_shape

# ----------------------------------------------------------------------- placement


def span_gpus(group_size, stride) -> jax.Array:
    """GPU indices covered by a group of `group_size` ranks `stride` apart.

    A group of every stride-th rank starting at an aligned offset covers
    `group_size x stride` consecutive indices (the block it is aligned to).
    """
    return checks.as_float(group_size) * checks.as_float(stride)


def flow_slowdown(k_flows, m_links, routing="ecmp", overhead=0.0) -> jax.Array:
    """Slowdown of a collective of `k_flows` elephant flows over `m_links`
    equal-cost links under `routing` (a `Routing` or its name): ECMP's
    `ecmp_slowdown`; spray / adaptive: 1 + `overhead`."""
    return strategies.routing(routing, "routing").flow_slowdown(k_flows, m_links, overhead)


def scale_out_tier(system: System, span_gpus, t=EXACT) -> Tier:
    """The slow tier seen by a collective whose group spans `span_gpus` GPU indices.

    Clos: bandwidth / oversubscription when the span exceeds `pod_size` (see the
    module docstring for why the whole group slows); smooth in span, pod size
    and oversubscription under `t` (a `relax.Smoothing`; exact under
    `relax.EXACT`). Other topologies: `system.scale_out` unchanged.
    """
    return system.topology.scale_out_tier(system.scale_out, span_gpus, smoothing(t))


def pod_factor(system: System, span, across, exchange: bool = False, t=EXACT) -> jax.Array:
    """Bandwidth divisor of a group on an oversubscribed Clos, from the flows
    that cross (`Clos.pod_factor`); 1 on topologies without pods."""
    factor = system.topology.pod_factor(span, across, exchange, smoothing(t))
    return jnp.ones_like(checks.as_float(span)) if factor is None else factor


def leaf_downlinks(prices: Prices | None = None) -> jax.Array:
    """GPUs (NICs) under one leaf switch, and its uplinks: the switch's radix split
    evenly (`Prices.switch_radix` / 2: 32 of a radix-64 switch), rail-optimised:
    the leaf holds the same-index GPU of that many scale-up domains (assumption,
    as in rail-optimised DGX pods)."""
    return (default_prices() if prices is None else prices).switch_radix / 2.0


def _flow_factor(system: System, span, across, exchange, t, prices):
    """`group_flow_slowdown`, or None when no flow can collide (no divide at all)."""
    downlinks = leaf_downlinks(prices)
    block = system.topology.leaf_block(system.scale_up_domain, downlinks)
    if block is None or not system.routing.collides:
        return None
    across = jnp.maximum(checks.as_float(across), 1.0)
    f = crossing_fraction(span, across, block, exchange, t)
    # (q capped at 512: the Poisson form holds to k / m ~ 600; the slowdown is ~1 there)
    q = jnp.minimum(jnp.maximum(across - 1.0, 1.0), 512.0) if exchange else jnp.ones_like(across)
    k = downlinks * f * q
    # the smooth form always: one answer whether k is concrete (eager) or traced
    slow = system.routing.flow_slowdown(k, downlinks, exact=False)
    return smooth_max(slow * jnp.maximum(k / downlinks, 1.0) / q, 1.0, t)


def group_flow_slowdown(system: System, span, across, exchange: bool = False,
                        t=EXACT, prices: Prices | None = None) -> jax.Array:
    """ECMP hash collisions of a group's flows on the leaf uplinks (1 unless
    `system.routing` hashes flows and the topology has leaf switches).

    The d = `leaf_downlinks(prices)` GPUs under a leaf send k = d x f x q flows
    up, f the share of flows that leave the leaf (`crossing_fraction` with a
    block of d domains), q the flows per NIC (1 for a ring channel, across - 1
    for an exchange, each at 1/q of the NIC's rate), onto m = d uplinks. The
    busiest uplink carries E[max load] / q NICs' worth (the smooth Poisson form
    of `flow_slowdown`, the code the sweeps' ECMP target runs), and a flow is
    slowed only above its line rate.
    """
    factor = _flow_factor(system, span, across, exchange, t, prices)
    return jnp.ones_like(checks.as_float(span)) if factor is None else factor


def group_scale_out_tier(system: System, span, across, exchange: bool = False,
                         t=EXACT) -> Tier:
    """The slow tier a group sees: `system.scale_out` divided by the pods its
    flows cross (`pod_factor`) and by ECMP collisions (`group_flow_slowdown`)."""
    tier, t = system.scale_out, smoothing(t)
    factors = [f for f in (system.topology.pod_factor(span, across, exchange, t),
                           _flow_factor(system, span, across, exchange, t, None))
               if f is not None]
    if not factors:
        return tier  # no pods and no hash collisions: the tier as it is (no traced divide)
    factor = factors[0] if len(factors) == 1 else factors[0] * factors[1]
    return eqx.tree_at(lambda x: x.bandwidth_Bps, tier, tier.bandwidth_Bps / factor)


def rail_forwarding_cost(system: System, n_bytes, local_ranks, tier: Tier | None = None):
    """The extra hop of cross-rail traffic on a rail-only fabric: the `n_bytes`
    bound for other domains are first exchanged inside the domain (a direct
    all-to-all over `local_ranks` on the scale-up tier) so that each leaves on
    the rail of its destination. Zero Cost on other topologies; rings, trees
    and hierarchical collectives stay on their rail and never pay it."""
    if not forwards_through_scale_up(system):  # static: nothing traced
        zero = jnp.zeros(jnp.broadcast_shapes(jnp.shape(n_bytes), jnp.shape(local_ranks)))
        return co.Cost(zero, zero, zero)
    tier = system.scale_up if tier is None else tier
    return co.cost("all_to_all", "direct", n_bytes,
                   jnp.maximum(checks.as_float(local_ranks), 1.0), tier)


def forwards_through_scale_up(system: System) -> bool:
    """True on rail-only fabrics: cross-rail traffic hops through the scale-up domain."""
    return system.topology.forwards_through_scale_up


def scale_up_tier(system: System, group_size, stride, t=EXACT) -> Tier:
    """The fast tier seen by a group of `group_size` ranks `stride` apart.

    Switched domains: `system.scale_up` unchanged. Torus: bandwidth x
    max(dims spanned, 1) / 3 over the torus's own shape (`Torus.scale_up_tier`).
    """
    return system.topology.scale_up_tier(system.scale_up, group_size, stride, smoothing(t))


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
        checks.check("prices.switch_radix", self.switch_radix, lambda v: v >= 4,
                      "must be at least 4")
        checks.positive("prices.ocs_radix", self.ocs_radix)
        for f in ("switch_usd", "switch_w", "nic_usd", "nic_w", "transceiver_usd",
                  "transceiver_w", "cable_usd", "ocs_usd", "ocs_w"):
            checks.non_negative(f"prices.{f}", getattr(self, f))


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

class Inventory(eqx.Module):
    """Parts of a fabric and what they cost. Counts are floats (exact integers under `relax.EXACT`).

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


def inventory(system: System, prices: Prices | None = None, t=EXACT) -> Inventory:
    """Count and price the scale-out fabric (and the torus's links) of `system`.

    Each topology gives its switch ports (`Topology.switch_ports`) and its NICs,
    links and optics (`Topology.links`): see `TwoTier`, `Clos`, `RailOnly` and
    `Torus`. Switch counts are ports / radix rounded up with `smooth_ceil`
    (exact under `relax.EXACT`).
    """
    prices = default_prices() if prices is None else prices
    r = prices.switch_radix
    n = system.gpus
    leaf_p, spine_p, core_p = system.topology.switch_ports(n, system.scale_up_domain, r, t)
    leaf, spine, core = (smooth_ceil(p / r, t) for p in (leaf_p, spine_p, core_p))
    nics, ocs, links, transceivers = system.topology.links(
        n, system.gpus_per_node, (leaf_p, spine_p, core_p), prices.ocs_radix, t)
    switches = leaf + spine + core
    network_cost = (switches * prices.switch_usd + ocs * prices.ocs_usd
                    + transceivers * prices.transceiver_usd + links * prices.cable_usd)
    network_power = (switches * prices.switch_w + ocs * prices.ocs_w
                     + transceivers * prices.transceiver_w)
    cost = network_cost + nics * prices.nic_usd
    power = network_power + nics * prices.nic_w
    return Inventory(leaf, spine, core, ocs, nics, transceivers, links, network_cost,
                     network_power, cost, power, cost / n, power / n)


def with_topology(system: System, topology: Topology) -> System:
    """`system` with another topology (same GPUs, domain, tiers)."""
    return dataclasses.replace(system, topology=topology)


def rail_only_saving(system: System, prices: Prices | None = None):
    """(cost saving, power saving) of rail-only against a full-bisection Clos.

    Both fabrics serve the same GPUs with one NIC each; the NICs are identical
    and excluded, so the fractions are of switches + optics + cables
    (`network_cost_usd`, `network_power_w`). Wang et al. report 38-77% (cost)
    and 37-75% (power) across their cluster sizes.
    """
    rail = inventory(with_topology(system, RailOnly()), prices)
    full = inventory(with_topology(system, TwoTier()), prices)
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
    g = jnp.minimum(system.scale_up_domain, checks.as_float(ranks))
    clos = co.cost("all_to_all", "direct", n_bytes, checks.as_float(ranks) / g,
                   system.scale_out).time_s
    hop = rail_forwarding_cost(with_topology(system, RailOnly()), n_bytes, g).time_s
    return hop / clos  # the same hop the traffic table adds to rail-only exchanges

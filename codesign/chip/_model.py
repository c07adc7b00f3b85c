"""The chip model's functions: area, cost to make, price, board power, and the
three constants fitted on the published parts (`fitted`).

Every function is pure jnp arithmetic on a `ChipDesign`'s float leaves (jit-able,
differentiable, vmappable): no Python branch on a value, no division by a
value that can be zero in the domain (dies >= 1, area > 0), and the counts
(dies, HBM stacks) enter as floats, exact at integers. The pieces that the
fits also need (`sram_mm2`, `phy_mm2`, `hbm_power_w`, `link_power_w`) take
plain numbers, so the fits run on Python floats at first use.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _constants as k
from ._constants import HBM_GENERATIONS, NODES, HbmGeneration, Node


def node_of(design) -> Node:
    return NODES[design.node]


def hbm_of(design) -> HbmGeneration:
    return HBM_GENERATIONS[design.hbm]


# ------------------------------------------------------------------ fitted constants
@dataclasses.dataclass(frozen=True)
class Fitted:
    """The three constants fitted on the published parts (`_constants.PUBLISHED`:
    H100, B200, MI300X; analysts' and vendors' figures, no training run):
    - logic_mm2_per_flops_per_s: N5 logic (everything but SRAM and PHYs) per
      FLOP/s of dense BF16, least squares in relative error of the parts' die areas;
    - pj_per_flop: N5 energy per dense BF16 FLOP, least squares in relative error
      of their board power at full load (after HBM, links and the idle share);
    - packaging_usd_per_mm2: the analysts' packaging cost over the interposer
      area (1.1x the logic and HBM footprint), summed over the three parts."""

    logic_mm2_per_flops_per_s: float
    pj_per_flop: float
    packaging_usd_per_mm2: float


def _relative_least_squares(x, fixed, target) -> float:
    """The a minimising sum ((a x_i + fixed_i) / target_i - 1)^2."""
    u = [xi / ti for xi, ti in zip(x, target, strict=True)]
    v = [fi / ti for fi, ti in zip(fixed, target, strict=True)]
    return sum(ui * (1 - vi) for ui, vi in zip(u, v, strict=True)) / sum(ui * ui for ui in u)


@functools.cache
def fitted() -> Fitted:
    parts = k.PUBLISHED
    nodes = [NODES[p.node] for p in parts]
    gens = [HBM_GENERATIONS[p.hbm] for p in parts]
    logic = _relative_least_squares(
        [p.peak_flops_per_s / n.logic_density for p, n in zip(parts, nodes, strict=True)],
        [sram_mm2(p.sram_bytes, n) + phy_mm2(p.hbm_stacks, g, p.scale_up_Bps)
         for p, n, g in zip(parts, nodes, gens, strict=True)],
        [p.area_mm2 for p in parts])
    full = 1 - k.STATIC_FRACTION  # the dynamic share of full-load power
    energy = _relative_least_squares(
        [1e-12 * p.peak_flops_per_s * n.energy / full for p, n in zip(parts, nodes, strict=True)],
        [(hbm_power_w(g, p.hbm_Bps) + link_power_w(p.scale_up_Bps)) / full
         for p, g in zip(parts, gens, strict=True)],
        [p.board_power_w for p in parts])
    interposer = [interposer_of(p.area_mm2, p.hbm_stacks, g) for p, g in zip(parts, gens,
                                                                            strict=True)]
    packaging = sum(p.packaging_usd for p in parts) / sum(interposer)
    return Fitted(logic, energy, packaging)


# ------------------------------------------------------------------ area
def sram_mm2(sram_bytes, node: Node):
    """On-chip SRAM (caches, shared memory, register files) in 512 KiB macros:
    8 bits a byte x the node's bit cell / the macro's area efficiency (LLMCompass)."""
    return sram_bytes * 8.0 * node.sram_bit_mm2 / k.SRAM_ARRAY_EFFICIENCY


def phy_mm2(hbm_stacks, gen: HbmGeneration, scale_up_Bps):
    """The PHYs, which do not shrink with the node: one HBM PHY per stack, the
    scale-up SerDes by bandwidth, the host's PCIe x16."""
    return hbm_stacks * gen.phy_mm2 + scale_up_Bps * k.SERDES_MM2_PER_Bps + k.PCIE_PHY_MM2


def scale_up_lanes(design) -> jax.Array:
    """The scale-up SerDes lanes the bandwidth takes (relaxed): 100 Gb/s per
    lane per direction (NVLink4's 112G PAM4; 18 links x 2 lanes on H100)."""
    return design.scale_up_Bps / k.SERDES_LANE_Bps


def logic_mm2(peak_flops_per_s, node: Node):
    """Logic but SRAM and PHYs (tensor cores, vector units, control, fabric,
    controllers), by dense BF16 FLOP/s at the node's density (`fitted`)."""
    return peak_flops_per_s * fitted().logic_mm2_per_flops_per_s / node.logic_density


class Area(eqx.Module):
    """A design's logic silicon, all dies together, by kind (mm^2)."""

    logic_mm2: jax.Array
    sram_mm2: jax.Array
    phy_mm2: jax.Array

    @property
    def total_mm2(self) -> jax.Array:
        return self.logic_mm2 + self.sram_mm2 + self.phy_mm2


def area(design) -> Area:
    node = node_of(design)
    return Area(logic_mm2(design.peak_flops_per_s, node), sram_mm2(design.sram_bytes, node),
                phy_mm2(design.hbm_stacks, hbm_of(design), design.scale_up_Bps))


def area_mm2(design) -> jax.Array:
    """The logic silicon of all dies (mm^2): logic + SRAM + PHYs."""
    return area(design).total_mm2


def die_mm2(design) -> jax.Array:
    """One die's area: the total over `dies` (>= 1 in the domain), at most the
    reticle's 858 mm^2 (`ChipDesign`'s check)."""
    return area_mm2(design) / design.dies


def interposer_of(silicon_mm2, hbm_stacks, gen: HbmGeneration):
    """The interposer under the logic dies and the HBM stacks: 1.1x their area."""
    return k.INTERPOSER_PER_SILICON * (silicon_mm2 + hbm_stacks * gen.footprint_mm2)


def interposer_mm2(design) -> jax.Array:
    return interposer_of(area_mm2(design), design.hbm_stacks, hbm_of(design))


def max_hbm_stacks(design) -> jax.Array:
    """The stacks the logic's edges carry: stacks line the two long edges of the
    die assembly, each taking the generation's `edge_mm`; the assembly is taken
    as one reticle-shaped (33:26) rectangle of the total area (ASSUMPTION; H100's
    die with six PHYs gives 6.2, its package has six sites)."""
    long_edge_mm = jnp.sqrt(k.RETICLE_ASPECT * area_mm2(design))
    return 2.0 * long_edge_mm / hbm_of(design).edge_mm


# ------------------------------------------------------------------ memory
def hbm_bytes(design) -> jax.Array:
    """HBM capacity: stacks x dies per stack x the generation's die."""
    return design.hbm_stacks * design.hbm_stack_height * hbm_of(design).die_bytes


def hbm_Bps(design) -> jax.Array:
    """HBM bandwidth: stacks x pins x pin rate / 8."""
    return design.hbm_stacks * hbm_of(design).pins * design.hbm_pin_bits_per_s / 8.0


# ------------------------------------------------------------------ cost
def dies_per_wafer(die_mm2):
    """Whole dies on a 300 mm wafer: pi (d/2)^2 / A - pi d / sqrt(2 A)."""
    d = k.WAFER_DIAMETER_MM
    return math.pi * (d / 2) ** 2 / die_mm2 - math.pi * d / jnp.sqrt(2.0 * die_mm2)


def die_yield(die_mm2, node: Node):
    """Negative-binomial yield (1 + A D0 / alpha)^-alpha, A in cm^2, alpha 3."""
    return (1.0 + die_mm2 / 100.0 * node.d0_per_cm2 / k.YIELD_ALPHA) ** -k.YIELD_ALPHA


class Cost(eqx.Module):
    """The cost to make one part (US dollars), by kind."""

    logic_usd: jax.Array  # good dies: wafer / (dies per wafer x yield), per die
    hbm_usd: jax.Array
    packaging_usd: jax.Array  # interposer and assembly (CoWoS-S or -L)
    test_usd: jax.Array

    @property
    def total_usd(self) -> jax.Array:
        return self.logic_usd + self.hbm_usd + self.packaging_usd + self.test_usd


def cost(design) -> Cost:
    node = node_of(design)
    die = die_mm2(design)
    logic = design.dies * node.wafer_usd / (dies_per_wafer(die) * die_yield(die, node))
    hbm = hbm_bytes(design) * hbm_of(design).usd_per_byte * design.hbm_price_factor
    packaging = interposer_mm2(design) * fitted().packaging_usd_per_mm2
    return Cost(logic, hbm, packaging, jnp.full_like(logic, k.TEST_USD))


def cost_usd(design) -> jax.Array:
    """The cost to make one part: good logic dies, HBM, packaging, test."""
    return cost(design).total_usd


def nre_usd(design) -> jax.Array:
    """One-time cost: the node's mask set and the design's own NRE."""
    return node_of(design).masks_usd + design.design_nre_usd


def price_usd(design) -> jax.Array:
    """What a buyer pays: (cost + NRE / volume) / (1 - gross margin): a merchant
    part's margin, or one's own silicon at margin 0 with its NRE amortised."""
    return (cost_usd(design) + nre_usd(design) / design.volume) / (1.0 - design.gross_margin)


def package_kind(design) -> str:
    """"CoWoS-S" up to ~3.3 reticles of interposer, else "CoWoS-L" (concrete only)."""
    return "CoWoS-S" if float(interposer_mm2(design)) <= k.COWOS_S_MAX_MM2 else "CoWoS-L"


# ------------------------------------------------------------------ power
def hbm_power_w(gen: HbmGeneration, bytes_per_s):
    return gen.pj_per_bit * 1e-12 * 8.0 * bytes_per_s


def link_power_w(scale_up_Bps):
    """Scale-up SerDes: each direction's bits, sent by one end and received by
    the other, both on this board (2 x 8 bits a byte)."""
    return k.SERDES_PJ_PER_BIT * 1e-12 * 2.0 * 8.0 * scale_up_Bps


class Power(eqx.Module):
    """Board power (W) by kind, at the given utilisations."""

    flops_w: jax.Array
    hbm_w: jax.Array
    link_w: jax.Array
    static_w: jax.Array

    @property
    def total_w(self) -> jax.Array:
        return self.flops_w + self.hbm_w + self.link_w + self.static_w


def power(design, mfu=1.0, hbm_utilisation=1.0, link_utilisation=1.0) -> Power:
    flop_w = fitted().pj_per_flop * 1e-12 * node_of(design).energy * design.peak_flops_per_s
    hbm_w = hbm_power_w(hbm_of(design), hbm_Bps(design))
    link_w = link_power_w(design.scale_up_Bps)
    static_w = k.STATIC_FRACTION / (1.0 - k.STATIC_FRACTION) * (flop_w + hbm_w + link_w)
    return Power(flop_w * mfu, hbm_w * hbm_utilisation, link_w * link_utilisation, static_w)


def board_power_w(design, mfu=1.0, hbm_utilisation=1.0, link_utilisation=1.0) -> jax.Array:
    """Board power: energy per FLOP (node) x FLOP/s x `mfu` + HBM energy per bit
    x bits/s x `hbm_utilisation` + SerDes energy per bit x bits/s x
    `link_utilisation` + the idle share (`STATIC_FRACTION` of full load). The
    utilisations are fractions of the peaks (what the step model computes); at 1,
    1, 1 it is the full-load figure a vendor quotes as board power. The NIC is
    not on the board (its power is the fabric's: `economics.fabric_power_w`)."""
    return power(design, mfu, hbm_utilisation, link_utilisation).total_w

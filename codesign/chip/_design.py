"""`ChipDesign`: one accelerator's design variables as a pytree, each knob a
float leaf (differentiable; counts relaxed, exact at integers), the process
node and HBM generation static choices; and the physical domain every
construction checks (one-line `ValueError`s naming the key and the bound)."""

from __future__ import annotations

import math

import equinox as eqx
import jax

from .. import checks
from ..checks import float_field, static_field
from ..domains import BANDWIDTH, Domain, interval
from . import _constants as k
from . import _model

# the H100 SXM5, the default design (`_constants.PUBLISHED`)
_H100 = k.PUBLISHED[0]
_H100_PIN_BITS_PER_S = (_H100.hbm_Bps * 8 / (_H100.hbm_stacks
                                             * k.HBM_GENERATIONS[_H100.hbm].pins))

# ASSUMPTIONS of the defaults for one's own silicon (a buyer of a merchant part
# sets its vendor's gross margin): a leading-edge design's own NRE of order
# $500 M (architecture, verification, IP, software), a run of 100,000 parts.
DESIGN_NRE_USD = 5e8
VOLUME = 1e5
# a merchant part's run: of order a million (ASSUMPTION)
MERCHANT_VOLUME = 1e6


class ChipDesign(eqx.Module):
    """The design variables of one accelerator (defaults: H100 SXM5's).

    Float leaves (each a differentiable knob; `chip.*` is what errors call it):
    the dense BF16 peak and the 8-bit peak's ratio to it; on-chip SRAM; HBM
    stacks (a count, relaxed), their height (DRAM dies per stack) and pin rate;
    the scale-up bandwidth (per GPU, per direction; its SerDes lanes follow);
    the NIC's (per direction); the logic dies (a count, relaxed: the logic is
    split evenly over them); the gross margin on the part, the volume the NRE
    is spread over, the design's own NRE and the HBM's price relative to its
    generation's. Static: the process `node`
    (`_constants.NODES`) and the `hbm` generation (`_constants.HBM_GENERATIONS`).

    The physical domain, checked on every construction with concrete values:
    each field's interval; the pin rate at most the generation's; each die
    within the 858 mm^2 reticle; no more stacks than the logic's long edges
    carry (`max_hbm_stacks`); an interposer within the largest CoWoS; board
    power at full load within `MAX_BOARD_POWER_W`.
    """

    peak_flops_per_s: jax.Array = float_field("chip.peak_flops_per_s",
                                              Domain(0.0, 1e17, lo_open=True),
                                              unit="FLOP/s", scenario=False,
                                              default=_H100.peak_flops_per_s)
    fp8_ratio: jax.Array = float_field("chip.fp8_ratio", interval(1.0, 4.0), scenario=False,
                                       default=2.0)
    sram_bytes: jax.Array = float_field("chip.sram_bytes", interval(0.0, 1e11),
                                        scenario=False, default=_H100.sram_bytes)
    hbm_stacks: jax.Array = float_field("chip.hbm_stacks", interval(1.0, 64.0),
                                        scenario=False, default=_H100.hbm_stacks)
    hbm_stack_height: jax.Array = float_field(
        "chip.hbm_stack_height", interval(k.MIN_STACK_HEIGHT, k.MAX_STACK_HEIGHT),
        scenario=False, default=_H100.hbm_stack_height)
    hbm_pin_bits_per_s: jax.Array = float_field("chip.hbm_pin_bits_per_s",
                                                Domain(0.0, 1e11, lo_open=True),
                                                unit="bit/s", scenario=False,
                                                default=_H100_PIN_BITS_PER_S)
    scale_up_Bps: jax.Array = float_field("chip.scale_up_Bps", BANDWIDTH, scenario=False,
                                          default=_H100.scale_up_Bps)
    nic_Bps: jax.Array = float_field("chip.nic_Bps", BANDWIDTH, scenario=False,
                                     default=_H100.nic_Bps)
    dies: jax.Array = float_field("chip.dies", interval(1.0, 64.0), scenario=False,
                                  default=_H100.dies)
    gross_margin: jax.Array = float_field("chip.gross_margin", interval(0.0, 0.95),
                                          scenario=False, default=0.0)
    volume: jax.Array = float_field("chip.volume", interval(1.0, 1e9), scenario=False,
                                    default=VOLUME)
    design_nre_usd: jax.Array = float_field("chip.design_nre_usd", interval(0.0, 1e11),
                                            unit="USD", scenario=False,
                                            default=DESIGN_NRE_USD)
    # the HBM's price relative to its generation's (`_constants.HBM_GENERATIONS`,
    # analysts' figures): 1 is theirs; what a co-design asks when HBM gets dearer
    hbm_price_factor: jax.Array = float_field("chip.hbm_price_factor", interval(0.01, 100.0),
                                              scenario=False, default=1.0)
    node: str = static_field("chip.node", str, choices=tuple(k.NODES), default=_H100.node)
    hbm: str = static_field("chip.hbm", str, choices=tuple(k.HBM_GENERATIONS),
                            default=_H100.hbm)

    def __check_init__(self):
        check_domain(self)


def _concrete(design) -> bool:
    return all(checks.concrete(leaf) is not None for leaf in jax.tree.leaves(design))


def _one(value) -> float:
    return float(checks.concrete(value).max())


def check_domain(design: ChipDesign) -> None:
    """The physical domain across fields (skipped when a leaf is traced)."""
    if not _concrete(design):
        return
    gen = k.HBM_GENERATIONS[design.hbm]
    pin = _one(design.hbm_pin_bits_per_s)
    if pin > gen.max_pin_bits_per_s:
        raise ValueError(f"chip.hbm_pin_bits_per_s={pin:.6g} must be at most "
                         f"{gen.max_pin_bits_per_s:g} (the fastest {gen.name} pin rate)")
    area = _one(_model.area_mm2(design))
    stacks, most = _one(design.hbm_stacks), _one(_model.max_hbm_stacks(design))
    if stacks > most:
        raise ValueError(f"chip.hbm_stacks={stacks:.6g} must be at most {most:.3g}: the "
                         f"stacks two long edges of {area:,.0f} mm^2 of logic carry, "
                         f"{gen.edge_mm:g} mm each")
    dies = _one(design.dies)
    if area / dies > k.RETICLE_MM2 * (1 + 1e-9):
        raise ValueError(f"chip.dies={dies:.6g} must be at least "
                         f"{math.ceil(area / k.RETICLE_MM2 * 100) / 100:g}: the "
                         f"{area:,.0f} mm^2 of logic in dies within the {k.RETICLE_MM2:g} mm^2 "
                         "reticle")
    interposer = _one(_model.interposer_mm2(design))
    if interposer > k.MAX_INTERPOSER_MM2:
        raise ValueError(f"chip.peak_flops_per_s={_one(design.peak_flops_per_s):.6g} and "
                         f"chip.hbm_stacks={stacks:.6g} need a {interposer:,.0f} mm^2 "
                         f"interposer, above the largest CoWoS ({k.MAX_INTERPOSER_MM2:,.0f} "
                         "mm^2, 9.5 reticles)")
    watts = _one(_model.board_power_w(design))
    if watts > k.MAX_BOARD_POWER_W:
        raise ValueError(f"chip.peak_flops_per_s={_one(design.peak_flops_per_s):.6g} draws "
                         f"{watts:,.0f} W at full load with its HBM and links, above the "
                         f"{k.MAX_BOARD_POWER_W:,.0f} W a board carries")


# the physical domain across fields as ratios a design must keep at most 1
# (`physical_limits`): what `check_domain` refuses, in the optimiser's terms
PHYSICAL_LIMITS = ("chip.hbm_pin_bits_per_s", "chip.hbm_stacks", "chip.dies",
                   "chip.interposer", "chip.board_power")


def physical_limits(design: ChipDesign) -> tuple:
    """(value, bound) of each cross-field limit of `check_domain` in the order of
    `PHYSICAL_LIMITS` (jnp, traced or not): the pin rate against the
    generation's fastest, the stacks against what the logic's edges carry,
    the logic per die against the reticle, the interposer against the largest
    CoWoS, full-load board power against `MAX_BOARD_POWER_W`. The optimiser
    (`codesign.optimize`) keeps each value / bound <= 1 as a constraint."""
    gen = k.HBM_GENERATIONS[design.hbm]
    return ((design.hbm_pin_bits_per_s, gen.max_pin_bits_per_s),
            (design.hbm_stacks, _model.max_hbm_stacks(design)),
            (_model.area_mm2(design) / design.dies, k.RETICLE_MM2),
            (_model.interposer_mm2(design), k.MAX_INTERPOSER_MM2),
            (_model.board_power_w(design), k.MAX_BOARD_POWER_W))


# the published part (`_constants.PUBLISHED`) of a preset's chip name (`presets`):
# the base design of a scenario's [chip] table on that preset
PART_OF_PRESET_CHIP = {"H100-SXM5-80GB": "H100 SXM5", "B200": "B200", "MI300X": "MI300X"}


def published_design(name: str) -> ChipDesign:
    """The `ChipDesign` of a published part (`_constants.PUBLISHED`: "H100 SXM5",
    "B200", "MI300X"): its vendor's gross margin, `MERCHANT_VOLUME` parts, the
    default NRE."""
    parts = {p.name: p for p in k.PUBLISHED}
    checks.known("part", name, tuple(parts))
    p = parts[name]
    gen = k.HBM_GENERATIONS[p.hbm]
    return ChipDesign(p.peak_flops_per_s, 2.0, p.sram_bytes, p.hbm_stacks, p.hbm_stack_height,
                      p.hbm_Bps * 8 / (p.hbm_stacks * gen.pins), p.scale_up_Bps, p.nic_Bps,
                      p.dies, p.gross_margin, MERCHANT_VOLUME, node=p.node, hbm=p.hbm)


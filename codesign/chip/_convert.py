"""A `ChipDesign` in the step model's and the economics' terms: the fields of
`hardware.Chip` and `hardware.System` they already read (peaks, HBM capacity
and bandwidth, link bandwidths, board power), and the GPU-hour price
`economics.Assumptions` carries. Each swaps leaves of a base with
`eqx.tree_at`, so what the design does not set stays the base's and the
result is differentiable in every knob."""

from __future__ import annotations

import equinox as eqx
import jax

from ..checks import float_field
from ..domains import POSITIVE, UNIT, interval
from ..model.economics import Assumptions
from ..model.hardware import HBM_RESERVE_FIXED_BYTES, HBM_RESERVE_FRACTION, Chip, System
from ..units import hour, year
from . import _model
from ._design import ChipDesign


def _reserve_bytes(hbm_bytes):
    """`hardware.default_hbm_reserve_bytes` of a traced capacity (its fixed part
    as a float: an integer 2^31 overflows a float32 trace's weak int)."""
    return float(HBM_RESERVE_FIXED_BYTES) + HBM_RESERVE_FRACTION * hbm_bytes


def to_chip(design: ChipDesign, base: Chip) -> Chip:
    """`base` with the design's peaks (BF16, and 8-bit = ratio x BF16; the
    32-bit matrix peak kept in the base's ratio to BF16), HBM capacity and
    bandwidth (the reserve re-derived from the capacity), and board power at
    full load as `tdp_w` (what `economics.power_w` reads). Efficiencies, kernel
    overheads, the host link and the compute units stay the base's."""
    peak = design.peak_flops_per_s
    hbm_bytes = _model.hbm_bytes(design)
    return eqx.tree_at(
        lambda c: (c.peak_flops_per_s, c.peak_fp8_flops_per_s, c.peak_fp32_flops_per_s,
                   c.hbm_bytes, c.hbm_Bps, c.hbm_reserve_bytes, c.tdp_w),
        base,
        (peak, design.fp8_ratio * peak,
         peak * base.peak_fp32_flops_per_s / base.peak_flops_per_s,
         hbm_bytes, _model.hbm_Bps(design), _reserve_bytes(hbm_bytes),
         _model.board_power_w(design)))


def to_system(design: ChipDesign, base: System) -> System:
    """`base` with `to_chip`'s chip, the design's scale-up bandwidth (per GPU,
    per direction) and NIC bandwidth as the scale-out tier's, and both tiers'
    reduction speed at half the HBM bandwidth (the presets' rule: two HBM
    passes per reduced byte). Latencies, efficiencies, topology and counts
    stay the base's."""
    half_hbm = _model.hbm_Bps(design) / 2.0
    return eqx.tree_at(
        lambda s: (s.chip, s.scale_up.bandwidth_Bps, s.scale_out.bandwidth_Bps,
                   s.scale_up.reduction_Bps, s.scale_out.reduction_Bps),
        base,
        (to_chip(design, base.chip), design.scale_up_Bps, design.nic_Bps, half_hbm, half_hbm))


class Ownership(eqx.Module):
    """What turns a part's price and power into a GPU-hour (each ASSUMPTION
    unless a source is given):
    - lifetime_s = 4 years: straight-line depreciation (as `Assumptions`' fabric);
    - server_fraction = 0.3: the rest of the server per GPU (CPUs, memory,
      board, chassis, NIC) as a share of the GPU's price (ASSUMPTION: a DGX
      H100's list price over eight H100s' is of this order);
    - usd_per_kwh = 0.09: electricity ($0.08-0.10 per kWh in public TCO tools);
    - pue = 1.2: a modern AI data centre's power usage effectiveness (public
      TCO tools);
    - load = 0.7: the average fraction of full-load board power drawn over the
      lifetime (ASSUMPTION)."""

    lifetime_s: jax.Array = float_field("ownership.lifetime_s", interval(hour, 100 * year),
                                        scenario=False, default=4 * year)
    server_fraction: jax.Array = float_field("ownership.server_fraction", interval(0.0, 10.0),
                                             scenario=False, default=0.3)
    usd_per_kwh: jax.Array = float_field("ownership.usd_per_kwh", POSITIVE, unit="USD",
                                         scenario=False, default=0.09)
    pue: jax.Array = float_field("ownership.pue", interval(1.0, 5.0), scenario=False,
                                 default=1.2)
    load: jax.Array = float_field("ownership.load", UNIT, scenario=False, default=0.7)


def usd_per_gpu_hour(design: ChipDesign, ownership: Ownership) -> jax.Array:
    """The GPU and its share of the server, depreciated over the lifetime, plus
    the board's energy at `load` x full-load power, times PUE."""
    capital = _model.price_usd(design) * (1.0 + ownership.server_fraction)
    energy_kwh_per_hour = ownership.load * _model.board_power_w(design) / 1000.0
    return (capital / (ownership.lifetime_s / hour)
            + energy_kwh_per_hour * ownership.pue * ownership.usd_per_kwh)


def to_assumptions(design: ChipDesign, base: Assumptions, ownership: Ownership) -> Assumptions:
    """`base` with `usd_per_gpu_hour` of the design (what `economics.cost_to_train_usd`
    charges a GPU-hour)."""
    return eqx.tree_at(lambda a: a.usd_per_gpu_hour, base, usd_per_gpu_hour(design, ownership))
